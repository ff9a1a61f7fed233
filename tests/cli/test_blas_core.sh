#!/usr/bin/env bash
# test_blas_core.sh — the OpenBLAS kernel set (base/blas_core.c): when OpenBLAS picks
# a core weaker than the CPU supports, `ctrain train` / `--version` execute again with
# OPENBLAS_CORETYPE set to the best one, and OpenBLAS really loads it; a core the user chose is
# kept; the choice is reported by --version and the training banner, recorded in checkpoints
# (the root attribute `stack`), and a resume on another kernel set says so. OpenBLAS picking a weak
# core is played by CTRAIN_TEST_BLAS_PICKED (the weak pick happens for real only on CPUs newer
# than the installed OpenBLAS); everything after it is the real library.
source "$CT_ROOT/tests/cli/lib.sh"

flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
has() { [[ " $flags " == *" $1 "* ]]; }
if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then best=SkylakeX why=AVX-512
elif has avx2 && has fma; then best=Haswell why="AVX2 and FMA"
elif has avx; then best=Sandybridge why=AVX
else skip_rest "this CPU has no AVX: OpenBLAS's generic choice is the only one"; fi
case "$("$CTRAIN" --version)" in *DYNAMIC_ARCH*) ;; *) skip_rest "OpenBLAS is not a DYNAMIC_ARCH build" ;; esac

expect_ok version_weak_pick env -u OPENBLAS_CORETYPE CTRAIN_TEST_BLAS_PICKED=Prescott "$CTRAIN" --version
expect_grep version_reports_choice "^blas core: $best \\(chosen by ctrain: OpenBLAS picked Prescott, but this CPU has $why\\)" out
expect_grep library_loaded_choice "^blas: OpenBLAS .* $best MAX_THREADS" out

expect_ok version_user_choice env OPENBLAS_CORETYPE=Prescott CTRAIN_TEST_BLAS_PICKED=Prescott "$CTRAIN" --version
expect_grep user_choice_kept "^blas core: Prescott \\(OPENBLAS_CORETYPE=Prescott; this CPU has $why, for $best\\)" out
expect_grep user_choice_loaded "^blas: OpenBLAS .* Prescott MAX_THREADS" out

expect_ok version_own_choice env -u OPENBLAS_CORETYPE "$CTRAIN" --version
expect_grep own_choice_reported '^blas core: [A-Za-z0-9]+ \(OpenBLAS.s choice' out

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 || { fail make_data "from-text"; exit 1; }
run=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=64 num_heads=4 num_kv_heads=2 train_seq_len=32
     train_batch_tokens=256 grad_accum_slots=2 iterations=3 val_loss_every=0 threads=1)
expect_ok train_weak_pick env -u OPENBLAS_CORETYPE CTRAIN_TEST_BLAS_PICKED=Prescott "$CTRAIN" train "${run[@]}" out_dir=a
expect_grep train_banner_choice "^cpu backend: OpenBLAS core $best \\(chosen by ctrain: OpenBLAS picked Prescott, but this CPU has $why\\), 1 thread \\(waiting: [^)]*\\)$" out
expect_ok train_user_choice env OPENBLAS_CORETYPE=Prescott CTRAIN_TEST_BLAS_PICKED=Prescott "$CTRAIN" train "${run[@]}" out_dir=b
expect_grep train_banner_user '^cpu backend: OpenBLAS core Prescott \(OPENBLAS_CORETYPE=Prescott' out
# the same run on two kernel sets: both train (the bits may differ, as on two machines)
/usr/bin/python3 -c '
import json, sys
a = [json.loads(l)["train_loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["train_loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == 3 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b)), (a, b)
' a/metrics.jsonl b/metrics.jsonl && pass cores_agree || fail cores_agree "losses differ beyond rounding"

# ---- the software stack: the checkpoint records the kernel set, a resume on another says so ----
# a's final checkpoint (3 steps on the best core) holds the stack its bits depend on (h5dump);
# going on on Prescott, the run names what differs; going on on the same core, it says nothing
h5dump -a /stack a/checkpoints/step_00000003.h5 >stack.txt 2>&1
expect_grep checkpoint_records_stack "\"blas=OpenBLAS .* $best MAX_THREADS=[0-9]+\"" stack.txt
cp -r a c
expect_ok resume_other_core env OPENBLAS_CORETYPE=Prescott "$CTRAIN" train "${run[@]}" iterations=4 out_dir=a
expect_grep resume_names_stack_change "^note: the checkpoint was written with blas=OpenBLAS .* $best MAX_THREADS=[0-9]+; this run has blas=OpenBLAS .* Prescott MAX_THREADS=[0-9]+: .*bits are promised only for the same stack" out
expect_ok resume_same_core env -u OPENBLAS_CORETYPE CTRAIN_TEST_BLAS_PICKED=Prescott "$CTRAIN" train "${run[@]}" \
    iterations=4 out_dir=c
if grep -q "^note: the checkpoint was written with" out; then fail resume_same_stack_silent "$(grep '^note' out)"
else pass resume_same_stack_silent; fi
"$CTRAIN" ckpt info a/checkpoints/step_00000004.h5 >info.txt 2>&1
expect_grep info_shows_stack "^stack: +blas=OpenBLAS .* Prescott" info.txt

finish
