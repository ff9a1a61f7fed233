#!/usr/bin/env bash
# test_train.sh — end-to-end CPU training runs: progress output and metrics.jsonl, falling
# loss, bitwise reproducibility across runs and thread counts, NaN detection, data/config
# mismatches, tied and untied heads.
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
small=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=3 model_dim=32 num_heads=4 num_kv_heads=2
       train_seq_len=16 train_batch_tokens=256 grad_accum_slots=8 val_batch_size=256 warmdown_iters=3
       muon_momentum_warmup_steps=4 train_log_every=2 scalar_lr=0.04)

expect_ok run_a "$CTRAIN" train "${small[@]}" iterations=8 val_loss_every=4 out_dir=a threads=2
cp out run_a.out
expect_grep progress_line '^step 8/8  loss [0-9.]+  lr_scale 0\.333  step [0-9]+ms  [0-9]+ tok/s  eta' run_a.out
expect_grep val_line '^step 4/8  val_loss [0-9.]+  val_bpb [0-9.]+' run_a.out
# device=auto (the default) with no GPU visible trains on the CPU, says so, and records cpu
expect_grep device_auto_note '^device: auto -> cpu \((no CUDA device visible|this ctrain was built without CUDA)' run_a.out
expect_grep device_auto_config '^device = cpu$' a/config.txt
# on a machine without a CUDA driver, said as --version says it (not "driver version is insufficient")
if "$CTRAIN" --version | grep -q '(no CUDA driver)'; then
    expect_grep device_auto_no_driver_wording '^device: auto -> cpu \(no CUDA device visible \(no CUDA driver\)\)' run_a.out
else skip device_auto_no_driver_wording "this machine has a CUDA driver, or ctrain was built without CUDA"; fi
expect_grep config_txt_written '^num_layers = 3$' a/config.txt
# floats in their shortest exact form: 0.04, not 0.040000000000000001
expect_grep config_txt_short_floats '^matrix_lr = 0\.04$' a/config.txt
expect_grep config_txt_short_eps '^adam_eps = 1e-08$' a/config.txt
expect_grep config_printed_short '^  scalar_lr += 0\.04  \(command line\)$' run_a.out
# the banner lists the keys set (not the ~45 at their defaults), and no warmup note unless set
if grep -qE '^  (matrix_lr|beta1|warmup_steps) ' run_a.out; then fail banner_only_keys_set "$(grep -E '^  (matrix_lr|beta1) ' run_a.out)"
else pass banner_only_keys_set; fi
expect_grep banner_counts_defaults '^  \([0-9]+ more keys at their defaults; `ctrain train --print-config ...` lists every key\)$' run_a.out
if grep -q 'note: warmup_steps' run_a.out; then fail warmup_note_only_when_set "$(grep 'note: warmup_steps' run_a.out)"; else pass warmup_note_only_when_set; fi
# the software stack the run's bits depend on, as the checkpoints record it (a comment: it reloads)
expect_grep config_txt_stack '^# stack: blas=OpenBLAS ' a/config.txt
expect_ok config_txt_reloads "$CTRAIN" train --config a/config.txt --print-config
expect_grep config_printed '^  num_layers += 3  \(command line\)' run_a.out
expect_grep metrics_step_fields '^\{"step": 1, "train_loss": [0-9.e-]+, "lr_scale": 1, "step_ms": [0-9.]+, "tokens_per_s": [0-9.]+' a/metrics.jsonl
expect_grep metrics_val_fields '^\{"step": 8, "val_loss": [0-9.e-]+, "val_bpb": [0-9.e-]+' a/metrics.jsonl
# the final checkpoint holds the final validation in /metrics (written again after it if need be)
expect_ok final_ckpt_info "$CTRAIN" ckpt info a
expect_grep final_ckpt_has_val 'last_val_step = 8' out
/usr/bin/python3 - a/metrics.jsonl a/checkpoints/step_00000008.h5 <<'PY' && pass final_ckpt_val_equals_metrics || fail final_ckpt_val_equals_metrics "differs"
import json, sys, h5py
last = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l][-1]
with h5py.File(sys.argv[2], "r") as f:
    m = f["metrics"].attrs
    assert m["last_val_step"] == last["step"] == 8 and m["last_val_loss"] == last["val_loss"], (dict(m), last)
    assert m["last_val_bpb"] == last["val_bpb"], (dict(m), last)
PY
# environment variables (train_gpt.py's) in the banner; validation before the step's checkpoint,
# which then holds it and is written once (also the last)
expect_ok env_run env ITERATIONS=8 WARMUP_STEPS=5 "$CTRAIN" train "${small[@]}" val_loss_every=4 checkpoint_every=4 out_dir=e
cp out env_run.out
expect_grep env_in_banner '^  iterations += 8  \(environment: ITERATIONS\)$' env_run.out
expect_grep warmup_note_when_set '^note: warmup_steps = 5 ignored' env_run.out
order=$(grep -E '^(step [48]/8  val_loss|checkpoint: )' env_run.out | sed -E 's/  val_loss.*/ val/; s/ \(.*//' | tr '\n' '|')
[ "$order" = "step 4/8 val|checkpoint: e/checkpoints/step_00000004.h5|step 8/8 val|checkpoint: e/checkpoints/step_00000008.h5|" ] \
    && pass validation_then_checkpoint_once || fail validation_then_checkpoint_once "order: $order"
expect_ok mid_ckpt_info "$CTRAIN" ckpt info e/checkpoints/step_00000004.h5
expect_grep mid_ckpt_has_its_val 'last_val_step = 4' out
# how the threads wait (base/omp_wait.c): OpenMP's default where quiet, passive where other
# processes keep the cores busy (CTRAIN_TEST_BUSY pretends them), the user's setting kept, and the
# default where the process has cores of its own (an affinity narrower than the machine)
wait_line() { env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$@" "$CTRAIN" train "${small[@]}" iterations=1 val_loss_every=0 \
    out_dir="wait$RANDOM" 2>&1 | sed -n 's/^cpu backend: .*(waiting: \(.*\))$/\1/p'; }
[ "$(wait_line CTRAIN_TEST_BUSY=0)" = "OpenMP's default, spinning briefly" ] && pass wait_default_when_quiet \
    || fail wait_default_when_quiet "$(wait_line CTRAIN_TEST_BUSY=0)"
want="OMP_WAIT_POLICY=passive, chosen by ctrain: $(nproc) other processes running on $(nproc) cores"
[ "$(wait_line CTRAIN_TEST_BUSY="$(nproc)")" = "$want" ] && pass wait_passive_when_busy \
    || fail wait_passive_when_busy "$(wait_line CTRAIN_TEST_BUSY="$(nproc)")"
[ "$(wait_line CTRAIN_TEST_BUSY=9 OMP_WAIT_POLICY=active)" = "OMP_WAIT_POLICY=active, yours" ] && pass wait_user_setting_kept \
    || fail wait_user_setting_kept "$(wait_line CTRAIN_TEST_BUSY=9 OMP_WAIT_POLICY=active)"
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
    [ "$(wait_line CTRAIN_TEST_BUSY=9 taskset -c 0)" = "OpenMP's default, spinning briefly" ] && pass wait_default_own_cores \
        || fail wait_default_own_cores "$(wait_line CTRAIN_TEST_BUSY=9 taskset -c 0)"
else skip wait_default_own_cores "needs 2 cores and taskset"; fi
n=$(grep -c '"train_loss"' a/metrics.jsonl)
[ "$n" = 8 ] && pass metrics_every_step || fail metrics_every_step "expected 8 train lines, got $n"
# bpb of byte-level data is loss / ln 2
/usr/bin/python3 - a/metrics.jsonl <<'PY' && pass bpb_is_loss_over_ln2 || fail bpb_is_loss_over_ln2 "val_bpb != val_loss/ln2"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l]
assert rows and all(abs(r["val_bpb"] - r["val_loss"] / math.log(2)) < 1e-9 * r["val_bpb"] for r in rows), rows
PY

# same config, data and seed => bitwise identical losses, whatever the thread count
expect_ok run_b "$CTRAIN" train "${small[@]}" iterations=8 val_loss_every=4 out_dir=b threads=1
losses() { /usr/bin/python3 -c 'import json,sys; [print(repr(json.loads(l).get("train_loss", json.loads(l).get("val_loss")))) for l in open(sys.argv[1])]' "$1"; }
expect_same bitwise_across_thread_counts losses "$(losses a/metrics.jsonl)" "$(losses b/metrics.jsonl)"
expect_ok run_c "$CTRAIN" train "${small[@]}" iterations=8 val_loss_every=4 out_dir=c threads=2
expect_same bitwise_across_runs losses "$(losses a/metrics.jsonl)" "$(losses c/metrics.jsonl)"

# A pthreads build of OpenBLAS (Debian's default alternative, and many cluster modules) gives the
# same bits as the OpenMP build: cpu_blas_prepare makes it single-threaded inside ctrain's own
# OpenMP loops (left threaded, its driver splits K differently: other bits, and 10x slower).
# Shapes large enough for OpenBLAS to thread (512-token micro-batches, width 128).
pthread_blas=/usr/lib/x86_64-linux-gnu/openblas-pthread
mid=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=128 num_heads=4 num_kv_heads=2 train_seq_len=64
     train_batch_tokens=4096 grad_accum_slots=8 iterations=3 val_loss_every=0 threads=2)
if [ ! -e "$pthread_blas/libopenblas.so.0" ]; then
    skip_rest "libopenblas0-pthread not installed (scripts/install-deps.sh --test)"
elif ! LD_LIBRARY_PATH=$pthread_blas "$CTRAIN" --version | grep -q '^blas: .*(pthreads)$'; then
    fail pthreads_openblas_same_bits "LD_LIBRARY_PATH=$pthread_blas did not load the pthreads OpenBLAS"
else
    expect_ok run_openmp_blas "$CTRAIN" train "${mid[@]}" out_dir=omp
    expect_ok run_pthreads_blas env LD_LIBRARY_PATH=$pthread_blas "$CTRAIN" train "${mid[@]}" out_dir=pth
    "$CTRAIN" ckpt diff --exact omp/checkpoints/step_00000003.h5 pth/checkpoints/step_00000003.h5 >blas_diff.txt 2>&1
    expect_grep pthreads_openblas_same_bits '^identical: yes' blas_diff.txt
fi

# the loss falls
/usr/bin/python3 - a/metrics.jsonl <<'PY' && pass loss_falls || fail loss_falls "validation loss did not fall"
import json, sys
v = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if '"val_loss"' in l]
assert len(v) == 3 and v[-1] < v[0] - 0.5, v
PY

expect_ok untied "$CTRAIN" train "${small[@]}" iterations=2 val_loss_every=0 tie_embeddings=0 out_dir=u
# residual_dtype is the CUDA backend's: on the CPU a note and the fp32 reference's bits; a value
# that is neither fp32 nor bf16 refused before anything runs
expect_ok cpu_residual_bf16 "$CTRAIN" train "${small[@]}" iterations=2 val_loss_every=0 device=cpu residual_dtype=bf16 out_dir=rb
expect_grep residual_dtype_cpu_note '^note: residual_dtype = bf16 applies to device = cuda; the CPU backend keeps its fp32 residual stream$' out
"$CTRAIN" train "${small[@]}" iterations=2 val_loss_every=0 device=cpu out_dir=r32 >/dev/null 2>&1
if [ -s rb/metrics.jsonl ] && cmp -s <(grep -o '"train_loss": [^,]*' rb/metrics.jsonl) <(grep -o '"train_loss": [^,]*' r32/metrics.jsonl); then
    pass residual_dtype_cpu_same_bits
else fail residual_dtype_cpu_same_bits "losses differ: $(grep -o '"train_loss": [^,]*' rb/metrics.jsonl r32/metrics.jsonl | tr '\n' ' ')"; fi
expect_fail residual_dtype_refused 2 "residual_dtype = 'fp16': expected fp32 or bf16" "$CTRAIN" train "${small[@]}" iterations=2 residual_dtype=fp16 out_dir=rf
expect_ok clip "$CTRAIN" train "${small[@]}" iterations=2 val_loss_every=0 grad_clip_norm=0.5 out_dir=clip
expect_grep clip_logs_grad_norm '"grad_norm": [0-9.e-]+' clip/metrics.jsonl

# a diverging run stops with a clear message and exit 1
expect_fail nan_stops 1 'training loss is (NaN|[+-]Inf): training diverged' "$CTRAIN" train "${small[@]}" iterations=5 val_loss_every=0 \
    tied_embed_lr=1e38 scalar_lr=1e38 out_dir=nan

[ ! -e nan/checkpoints ] && pass nan_writes_no_checkpoint || fail nan_writes_no_checkpoint "$(ls nan/checkpoints)"

# a state that turns non-finite in the last step's update (the loss was still finite) is never
# checkpointed, and a non-finite validation loss is never logged
expect_fail inf_at_last_step 1 'checkpoint at step 1: /model/tok_emb.weight holds [+-]Inf at element [0-9]+: training diverged' \
    "$CTRAIN" train "${small[@]}" val_files= iterations=1 warmdown_iters=0 tied_embed_lr=1e39 out_dir=inf1
if ls inf1/checkpoints/step_*.h5 >/dev/null 2>&1; then fail inf_at_last_step_no_checkpoint "$(ls inf1/checkpoints)"
else pass inf_at_last_step_no_checkpoint; fi
expect_fail nan_val_loss 1 'step 1: the validation loss is (NaN|[+-]Inf): training diverged' \
    "$CTRAIN" train "${small[@]}" iterations=1 val_loss_every=1 warmdown_iters=0 tied_embed_lr=1e39 out_dir=inf2
if grep -qiE 'nan|inf' inf2/metrics.jsonl; then fail nan_val_not_logged "$(cat inf2/metrics.jsonl)"
else pass nan_val_not_logged; fi

# metrics.jsonl that cannot be written (a full disk: /dev/full bound over it, since ctrain opens
# no run file through a symbolic link) ends the run with the reason
mkdir -p full && : >full/metrics.jsonl
if mount --bind /dev/full full/metrics.jsonl 2>/dev/null; then
    expect_fail metrics_disk_full 1 "cannot write 'full/metrics.jsonl': No space left on device" \
        "$CTRAIN" train "${small[@]}" iterations=2 val_loss_every=0 out_dir=full
    umount full/metrics.jsonl
else
    skip metrics_disk_full "cannot bind /dev/full over a file here (needs root)"
fi

# a resume drops a line that a crash cut short, so every line stays one JSON object
expect_ok cut_first_run "$CTRAIN" train "${small[@]}" iterations=4 val_loss_every=0 checkpoint_every=2 out_dir=cut
head -n 2 cut/metrics.jsonl >cut/m && head -n 3 cut/metrics.jsonl | tail -n 1 | head -c 40 >>cut/m && mv cut/m cut/metrics.jsonl
expect_ok cut_resume "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 checkpoint_every=2 out_dir=cut
/usr/bin/python3 - <<'PY' >cut.out 2>&1 && pass cut_line_repaired || fail cut_line_repaired "$(cat cut.out)"
import json
rows = [json.loads(line) for line in open("cut/metrics.jsonl")]  # every line one JSON object
steps = [r["step"] for r in rows if "train_loss" in r]
assert steps == [1, 2, 5, 6], steps  # step 3's cut line dropped; 4 was lost with it
PY
# a damaged line in the middle (not a crash's cut last line) is dropped too, with a warning
sed -i '2s/.*/{"step": 2, "train_lo#garbage/' cut/metrics.jsonl
expect_ok midline_resume "$CTRAIN" train "${small[@]}" iterations=8 val_loss_every=0 checkpoint_every=2 out_dir=cut
expect_grep midline_warned "^ctrain: warning: 'cut/metrics.jsonl' line 2 is not one whole JSON object \(damaged: '\{\"step\": 2, \"train_lo#garbage'\); dropped$" err
/usr/bin/python3 - <<'PY' >cut.out 2>&1 && pass midline_repaired || fail midline_repaired "$(cat cut.out)"
import json
rows = [json.loads(line) for line in open("cut/metrics.jsonl")]  # every line one JSON object
steps = [r["step"] for r in rows if "train_loss" in r]
assert steps == [1, 5, 6, 7, 8], steps  # step 2's damaged line dropped
PY

# val_bpb with real tokenizer tables (made with h5py): bytes per target follow train_gpt.py's rule
# base_bytes[target] + (has_leading_space[target] and not is_boundary_token[previous])
/usr/bin/python3 - <<'PY' || fail lut_data "h5py could not write the data"
import h5py, numpy as np
rng = np.random.default_rng(1)
for name, n in (("lut_train.h5", 20000), ("lut_val.h5", 3001)):
    with h5py.File(name, "w") as f:
        d = f.create_dataset("tokens", data=rng.integers(0, 64, size=n, dtype=np.uint16), chunks=True)
        d.attrs["vocab_size"] = 64; d.attrs["bos_id"] = -1; d.attrs["tokenizer"] = "synthetic"
        g = f.create_group("tokenizer")
        r = np.random.default_rng(7)  # the same tables in both files
        g["base_bytes"] = r.integers(0, 6, size=64).astype(np.int16)
        g["has_leading_space"] = (r.random(64) < 0.4).astype(np.uint8)
        g["is_boundary_token"] = (r.random(64) < 0.1).astype(np.uint8)
PY
expect_ok lut_run "$CTRAIN" train train_files=lut_train.h5 val_files=lut_val.h5 vocab_size=64 num_layers=2 \
    model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16 train_batch_tokens=256 val_batch_size=256 iterations=2 \
    val_loss_every=0 out_dir=lut
/usr/bin/python3 - lut/metrics.jsonl <<'PY' && pass val_bpb_uses_tokenizer_tables || fail val_bpb_uses_tokenizer_tables "mismatch"
import h5py, json, math, sys
import numpy as np
row = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l][-1]
with h5py.File("lut_val.h5") as f:
    tok = f["tokens"][:].astype(np.int64)
    bb, ls, bd = (f["tokenizer"][k][:] for k in ("base_bytes", "has_leading_space", "is_boundary_token"))
T = 16
n = ((len(tok) - 1) // T) * T
prev, tgt = tok[:n], tok[1:n + 1]
nbytes = (bb[tgt].astype(np.int64) + (ls[tgt].astype(bool) & ~bd[prev].astype(bool))).sum()
expect = row["val_loss"] / math.log(2) * n / nbytes
assert abs(row["val_bpb"] - expect) <= 1e-12 * expect, (row, expect)
PY

# max_wallclock_seconds: train_gpt.py's time budget ends the run normally (exit 0), early
expect_ok wallclock_stops "$CTRAIN" train "${small[@]}" iterations=100000 val_loss_every=0 max_wallclock_seconds=0.5 \
    out_dir=wall
expect_grep wallclock_message '^stopping early: wallclock cap' out
# the 1.0611 record's wall-clock progress (issue 56): gptq_reserve_seconds comes off the cap (a
# 2.8 s budget less 2.4 s stops after 0.4 s of training, not 2.8 s), and the lr scale follows the
# clock, max(1 - train_time / 0.4 s, min_lr) with warmdown_frac 1: from about 1 down to the
# 0.25 floor, never rising (the exact values depend on the step times: docs/model.md)
expect_ok wallclock_progress "$CTRAIN" train "${small[@]}" iterations=100000 val_loss_every=0 max_wallclock_seconds=2.8 \
    gptq_reserve_seconds=2.4 progress_clock=wallclock warmdown_frac=1 min_lr=0.25 checkpoint_every=0 out_dir=wallp
if /usr/bin/python3 - out wallp/metrics.jsonl >wallp.check 2>&1 <<'PY'
import json, re, sys
stop = [float(m) for m in re.findall(r"^stopping early: wallclock cap, train_time ([0-9]+)ms", open(sys.argv[1]).read(), re.M)]
assert len(stop) == 1 and 400 <= stop[0] < 2800, f"stop at {stop} ms, expected from 400 ms (the budget less the reserve)"
lr = [json.loads(l)["lr_scale"] for l in open(sys.argv[2]) if '"lr_scale"' in l]
assert len(lr) >= 3, f"{len(lr)} steps"
assert all(0.25 <= x <= 1 for x in lr) and all(b <= a for a, b in zip(lr, lr[1:])), lr[:5] + lr[-5:]
assert lr[0] > 0.5 and lr[-1] == 0.25, (lr[0], lr[-1])
PY
then pass wallclock_progress_follows_clock; else fail wallclock_progress_follows_clock "$(tail -3 wallp.check)"; fi

# a validation token outside the vocabulary is found before the first step, not at the end
/usr/bin/python3 - <<'PY' || fail bad_val_data "h5py could not write the data"
import h5py, numpy as np
t = np.arange(3000, dtype=np.uint16) % 256
t[1234] = 300
with h5py.File("bad_val.h5", "w") as f:
    f.create_dataset("tokens", data=t).attrs["vocab_size"] = 256
PY
expect_fail bad_val_found_at_start 1 "val_files: '.*bad_val.h5': token 1234 of /tokens is 300, which is >= vocab_size 256" \
    "$CTRAIN" train "${small[@]}" val_files=bad_val.h5 val_loss_every=0 iterations=2 out_dir=badval
if grep -q '^step 1/' out; then fail bad_val_before_training "trained before finding it: $(head -c 300 out)"
else pass bad_val_before_training; fi

# ... and so is a training token outside it (check_train_tokens, on by default); with
# check_train_tokens=0 the loader finds it when it gets there
expect_fail bad_train_found_at_start 1 "train_files: '.*bad_val.h5': token 1234 of /tokens is 300, which is >= vocab_size 256" \
    "$CTRAIN" train "${small[@]}" train_files=bad_val.h5 iterations=8 out_dir=badtrain
if grep -q '^step 1/' out; then fail bad_train_before_training "trained before finding it: $(head -c 300 out)"
else pass bad_train_before_training; fi
expect_fail bad_train_unchecked 1 "step 5, micro-batch 5: token id 300 at position .* is >= vocab_size 256" \
    "$CTRAIN" train "${small[@]}" train_files=bad_val.h5 iterations=12 check_train_tokens=0 out_dir=badtrain2
expect_grep train_tokens_checked '^train data: checked all [0-9]+ tokens in [0-9.]+ s: below vocab_size, tokens_crc32 matches in 1 of 1 file' \
    run_a.out

expect_fail vocab_mismatch 1 "vocab_size is 256 .*train.h5.* vocab_size = 1024" \
    "$CTRAIN" train "${small[@]}" vocab_size=1024 iterations=1 out_dir=v
expect_fail too_little_data 1 'fewer than one optimizer step' \
    "$CTRAIN" train "${small[@]}" train_batch_tokens=1048576 train_seq_len=16 iterations=1 out_dir=t
expect_fail cuda_without_gpu 1 'cuda' "$CTRAIN" train "${small[@]}" device=cuda iterations=1 out_dir=g

# stop_before_job_end outside Slurm: a warning that says why, and the run goes on
env -u SLURM_JOB_ID "$CTRAIN" train "${small[@]}" iterations=1 val_loss_every=0 stop_before_job_end=30 out_dir=nojob \
    >nojob.out 2>nojob.err
expect_grep no_job_end_warned '^ctrain: warning: stop_before_job_end: no Slurm job end time \(not under Slurm: SLURM_JOB_ID is not set\); ignored$' nojob.err

# scontrol's whole line is read: " EndTime=" may fall across the first 8 KB of a long line. A
# stand-in scontrol prints such a line (the Slurm here limits job names to 1024 characters and
# prints Comment= after EndTime=, so a real job cannot push EndTime that far; the real
# scontrol's time limit is tested with a stopped controller in tests/slurm/test_train_ranks.sh)
mkdir -p fakebin
printf '#!/bin/sh\nprintf "JobId=%%s JobName=%%s EndTime=2030-01-02T03:04:05 Deadline=N/A Comment=c\\n" "$4" "$(head -c %d /dev/zero | tr "\\0" x)"\n' \
    $((8187 - 16)) >fakebin/scontrol
chmod +x fakebin/scontrol
line=$(PATH="$WORK/fakebin:$PATH" scontrol show job -o 7)
at=$(awk -v s="$line" 'BEGIN { print index(s, " EndTime=") - 1 }')
[ "$at" = 8187 ] && pass long_line_straddles || fail long_line_straddles "' EndTime=' at $at, expected 8187"
want=$(date -d 2030-01-02T03:04:05 +%s)
SLURM_JOB_ID=7 PATH="$WORK/fakebin:$PATH" "$CTRAIN" train "${small[@]}" iterations=1 val_loss_every=0 \
    stop_before_job_end=30 out_dir=longline >longline.out 2>longline.err
expect_grep long_line_end_time_read "^stop_before_job_end: the job ends at unix time $want; stopping 30s before" longline.out

# A background checkpoint writer that is stuck (stopped: CTRAIN_FAULT=STOP) holds the run at most
# checkpoint_wait seconds, then the run ends with exit 1 naming the writer, its pid and state ...
CTRAIN_FAULT=STOP@ckpt:2 timeout 120 "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 checkpoint_every=2 \
    checkpoint_async=on checkpoint_wait=3 out_dir=stuck >stuck.out 2>stuck.err
rc=$?
if [ $rc = 1 ] && grep -qE "checkpoint of step 2: the background checkpoint writer did not finish within 3 s \(pid [0-9]+, stopped when killed\)" stuck.err
then pass stuck_writer_wait_bounded; else fail stuck_writer_wait_bounded "exit $rc: $(tail -c 400 stuck.err)"; fi
# ... and a stop signal during an unbounded wait ends it within the 20 s grace, exit 1, saying so
# (no timeout(1) around it: it would send SIGCONT to the stopped writer with the signal)
start=$SECONDS
CTRAIN_FAULT=STOP@ckpt:2 "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 checkpoint_every=2 \
    checkpoint_async=on checkpoint_wait=0 out_dir=stuck2 >stuck2.out 2>stuck2.err &
pid=$!
for _ in $(seq 100); do grep -q '"step": 4' stuck2/metrics.jsonl 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM $pid
for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -KILL $pid 2>/dev/null
wait $pid
rc=$?
took=$((SECONDS - start))
if [ $rc = 1 ] && [ $took -lt 60 ] && grep -qE "the background checkpoint writer did not finish within 20 s of the stop signal \(pid [0-9]+, stopped when killed\)" stuck2.err
then pass stop_signal_ends_writer_wait; else fail stop_signal_ends_writer_wait "exit $rc after $took s: $(tail -c 400 stuck2.err)"; fi
expect_ok stuck_run_resumes "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 checkpoint_every=2 out_dir=stuck

# Suspended (SIGSTOP ... SIGCONT, as Slurm's suspend does) for 5 s: not counted in train_time, so
# the max_wallclock_seconds budget (3 s) is still spent training afterwards
"$CTRAIN" train "${small[@]}" iterations=1000000 val_loss_every=0 checkpoint_every=0 max_wallclock_seconds=3 \
    out_dir=susp >susp.out 2>susp.err &
pid=$!
for _ in $(seq 100); do n=$(grep -c '"train_loss"' susp/metrics.jsonl 2>/dev/null); [ "${n:-0}" -ge 3 ] && break; sleep 0.1; done
kill -STOP $pid; sleep 5; kill -CONT $pid
wait $pid
rc=$?
# the step the note names must not have gained the 5 s (a load spike elsewhere, e.g. a busy
# machine under make asan, is not what this checks)
/usr/bin/python3 - susp/metrics.jsonl susp.out >susp.py 2>&1 <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
t = {r["step"]: r["train_time_ms"] for r in rows}
m = re.search(r"^note: suspended for about [0-9.]+ s during step ([0-9]+) ", open(sys.argv[2]).read(), re.M)
assert m, "no suspension note"
n = int(m.group(1))
jump = t[n] - t.get(n - 1, 0.0)
assert jump < 2000, f"train_time jumped by {jump:.0f} ms at step {n}, the suspended one"
assert rows[-1]["train_time_ms"] >= 3000, f"stopped at train_time {rows[-1]['train_time_ms']:.0f} ms, before the 3 s budget"
PY
py=$?
if [ $rc = 0 ] && [ $py = 0 ] && grep -qE '^note: suspended for about [4-9]\.[0-9] s during step [0-9]+ \(continued by SIGCONT\); not counted in train_time$' susp.out
then pass suspend_not_counted; else fail suspend_not_counted "exit $rc: $(cat susp.py) $(grep -E 'note: susp|stopping early' susp.out)"; fi

# Ctrl-C at a terminal is acknowledged at once (stderr a pty, via script(1)); not in batch logs
if command -v script >/dev/null; then
    CTRAIN_FAULT=INT@2.1 script -qec "$(printf '%q ' "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 out_dir=ctrlc)" \
        /dev/null >ctrlc.tty 2>&1
    rc=$?
    [ $rc = 75 ] && pass ctrl_c_checkpoints_75 || fail ctrl_c_checkpoints_75 "exit $rc: $(tail -c 300 ctrlc.tty)"
    expect_grep ctrl_c_acknowledged 'ctrain: interrupt: stopping after this step with a checkpoint \(exit 75\); Ctrl-C again to abort without one' ctrlc.tty
    expect_grep ctrl_c_says_how_to_resume 'stopped at step 2/6 \(SIGINT\): checkpoint written; run the same command again to continue' ctrlc.tty
    CTRAIN_FAULT=INT@2.1 "$CTRAIN" train "${small[@]}" iterations=6 val_loss_every=0 out_dir=ctrlc2 >ctrlc.out 2>ctrlc.err
    if grep -q 'Ctrl-C again' ctrlc.err; then fail ctrl_c_quiet_in_logs "$(cat ctrlc.err)"; else pass ctrl_c_quiet_in_logs; fi
    expect_grep ctrl_c_in_logs_says_requeue 'stopped at step 2/6 \(SIGINT\): checkpoint written; exit 75 = requeue to continue' ctrlc.out
else
    skip_rest "script(1) is not installed"
fi

finish
