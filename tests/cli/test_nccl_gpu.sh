#!/usr/bin/env bash
# test_nccl_gpu.sh — the multi-GPU path on one GPU (nccl=on): the communicator from an id sent
# through the KVS, the bucketed gradient reduction overlapped with the backward, Muon sharded
# with its updates broadcast (or summed: CT_MUON_COMBINE=allreduce); the run must equal the one
# without NCCL (nccl=off) bit for bit: every
# logged loss and every tensor of the final checkpoint. Also `launch-check --nccl` on one rank,
# and a resume across the two paths; and the micro-batches' CUDA graph against cuda_graph=0, bit
# for bit. Needs a CUDA GPU (skips without one; make test-gpu
# requires it).
source "$CT_ROOT/tests/cli/lib.sh"
unset CUDA_VISIBLE_DEVICES # lib.sh hides GPUs from the CPU tests; this one needs one
if ! "$CTRAIN" launch-check --nccl --timeout 60 >lc.out 2>lc.err; then
    if grep -qE 'no CUDA device found|built without (CUDA|NCCL)' lc.err; then
        skip_rest "no CUDA GPU here: $(head -c 200 lc.err)"
    fi
    fail launch_check_nccl "$(tail -c 600 lc.err)"; exit 1
fi
pass launch_check_nccl
expect_grep launch_check_nccl_says_nccl 'launcher single \+ NCCL, 1 ranks' lc.out
expect_grep launch_check_nccl_note '^launch-check: nccl: NCCL [0-9.]+, 1 rank, NVLS and CollNet off' lc.out

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.1 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail data "from-text"; exit 1; }
# 4 layers (2 skips), head_dim 64, 4 micro-batches per step, a small bucket cap so the plan
# has many buckets and several stages release more than one
cfg=(train_files="$WORK/train.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=4 model_dim=128 num_heads=2
     num_kv_heads=1 train_seq_len=64 train_batch_tokens=2048 grad_accum_slots=4 val_batch_size=2048 iterations=12
     warmdown_iters=4 val_loss_every=6 checkpoint_every=6 device=cuda grad_bucket_mb=0.1 grad_clip_norm=1.0)
run() { "$CTRAIN" train "${cfg[@]}" out_dir="$1" "${@:2}" >"$1.log" 2>&1; }
losses() { grep -oE '"(train_loss|val_loss)": [^,}]*' "$1/metrics.jsonl"; }

run off nccl=off && pass train_without_nccl || fail train_without_nccl "$(tail -3 off.log)"
run on nccl=on && pass train_with_nccl || fail train_with_nccl "$(tail -3 on.log)"
expect_grep nccl_used '^nccl: NCCL [0-9.]+, 1 rank, NVLS and CollNet off \(bitwise reproducible\); rank 0 on CUDA device' on.log
expect_grep nccl_buckets '^nccl: gradients in [0-9]+ buckets of up to 0.1 MB' on.log
if grep -q '^nccl:' off.log; then fail nccl_off_no_nccl "$(grep -m1 '^nccl:' off.log)"; else pass nccl_off_no_nccl; fi
if [ -n "$(losses off)" ] && [ "$(losses off)" = "$(losses on)" ]; then pass losses_bitwise
else fail losses_bitwise "$(diff <(losses off) <(losses on) | head -4)"; fi
expect_ok weights_bitwise "$CTRAIN" ckpt diff --exact off/checkpoints/step_00000012.h5 on/checkpoints/step_00000012.h5
# the Muon updates broadcast by their rank (the default) or summed (CT_MUON_COMBINE=allreduce, the
# earlier path): both the same bits; a value that is neither is refused, naming the variable
expect_grep muon_broadcast_default 'Muon updates sent by the rank that computed each \(broadcasts\)' on.log
CT_MUON_COMBINE=allreduce run on_sum nccl=on && pass train_muon_allreduce || fail train_muon_allreduce "$(tail -3 on_sum.log)"
expect_grep muon_allreduce_said 'Muon updates combined by one sum \(CT_MUON_COMBINE=allreduce\)' on_sum.log
expect_ok muon_allreduce_bitwise "$CTRAIN" ckpt diff --exact off/checkpoints/step_00000012.h5 \
    on_sum/checkpoints/step_00000012.h5
CT_MUON_COMBINE=gather expect_fail muon_combine_bad 1 "CT_MUON_COMBINE = 'gather': expected broadcast" \
    "$CTRAIN" train "${cfg[@]}" out_dir=bad_combine nccl=on

# the micro-batches as a CUDA graph (the default) against launch by launch: the same bits
run nograph nccl=off cuda_graph=0 && pass train_without_graph || fail train_without_graph "$(tail -3 nograph.log)"
expect_grep graph_in_banner 'micro-batches as a CUDA graph' off.log
expect_grep no_graph_in_banner 'micro-batches launch by launch' nograph.log
if grep -q 'could not be captured' off.log on.log; then fail graph_captured "$(grep -h -m1 'could not be captured' off.log on.log)"
else pass graph_captured; fi
if [ -n "$(losses off)" ] && [ "$(losses off)" = "$(losses nograph)" ]; then pass graph_losses_bitwise
else fail graph_losses_bitwise "$(diff <(losses off) <(losses nograph) | head -4)"; fi
expect_ok graph_weights_bitwise "$CTRAIN" ckpt diff --exact off/checkpoints/step_00000012.h5 \
    nograph/checkpoints/step_00000012.h5

# a checkpoint written without NCCL resumes with it (and the run ends where the others did)
run mixed nccl=on resume="$WORK/off/checkpoints/step_00000006.h5" && pass resume_with_nccl || fail resume_with_nccl "$(tail -3 mixed.log)"
expect_ok resume_with_nccl_bitwise "$CTRAIN" ckpt diff --exact off/checkpoints/step_00000012.h5 \
    mixed/checkpoints/step_00000012.h5

# the GPU job's checkpoint resumes on the CPU backend reading the very same batches: at the end
# both runs' loaders stand at the same place (every dataset and attribute under /loader equal)
run on_cpu device=cpu resume="$WORK/on/checkpoints/step_00000006.h5" && pass resume_on_cpu \
    || fail resume_on_cpu "$(tail -3 on_cpu.log)"
PY=$(python_with_h5py)
if "$PY" "$CT_ROOT/tests/cli/loader_equal.py" on/checkpoints/step_00000012.h5 on_cpu/checkpoints/step_00000012.h5 \
    >loader.diff 2>&1
then pass resume_on_cpu_same_batches; else fail resume_on_cpu_same_batches "$(cat loader.diff)"; fi

finish
