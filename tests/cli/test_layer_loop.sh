#!/usr/bin/env bash
# test_layer_loop.sh — depth recurrence (num_loops, loop_start, loop_end, enable_looping_at) on the
# CPU backend: the start banner and the switch print both block plans in the record's format; a
# run stopped before the switch and resumed across it ends bit for bit as the uninterrupted run
# (losses and final checkpoint tensors, optimizer state included), with parallel residual lanes
# too; num_loops = 0 with other
# loop_* values trains exactly as without them; bad settings and the backends that lack a
# feature are refused, naming the key.
source "$CT_ROOT/tests/cli/lib.sh"

resume_data || { fail make_data "from-text failed"; exit 1; }
base=(train_files="$WORK/part_*.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=4 model_dim=32 num_heads=4
      num_kv_heads=2 train_seq_len=32 train_batch_tokens=128 grad_accum_slots=2 val_batch_size=256 iterations=6
      warmdown_iters=2 val_loss_every=3 checkpoint_every=2 keep_checkpoints=10 train_log_every=1 threads=2)
cfg=("${base[@]}" num_loops=1 loop_start=1 loop_end=2 enable_looping_at=0.5 skip_gates_enabled=1)

losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["step"], "train" if "train_loss" in r else "val", repr(r.get("train_loss", r.get("val_loss"))))' "$1"; }

# 1. the banner and the switch (4 blocks, loop 1..2 once more: 0,1,2,1,2,3)
expect_ok loop_run "$CTRAIN" train "${cfg[@]}" out_dir=ref
cp "$WORK/out" ref.log
expect_grep loop_banner 'layer_loop: encoder:\[0,1,2\] decoder:\[1,2,3\] from progress 0.5 \(before: encoder:\[0,1\] decoder:\[2,3\]\)' ref.log
expect_grep loop_switch '^layer_loop:enabled step:3 frac:0.500 encoder:\[0,1,2\] decoder:\[1,2,3\]$' ref.log
losses ref/metrics.jsonl >ref.losses

# 2. stopped at step 2 (before the switch at 3), resumed across it: bit for bit
env CTRAIN_FAULT="TERM@1.1" "$CTRAIN" train "${cfg[@]}" out_dir=cut >cut1.log 2>&1
rc1=$?
"$CTRAIN" train "${cfg[@]}" out_dir=cut >cut2.log 2>&1
rc2=$?
[ "$rc1 $rc2" = "75 0" ] && pass resume_codes || fail resume_codes "expected 75 0, got $rc1 $rc2: $(tail -3 cut1.log)"
expect_grep resume_switch '^layer_loop:enabled step:3 ' cut2.log
losses cut/metrics.jsonl >cut.losses
cmp -s ref.losses cut.losses && pass resume_losses_bitwise || fail resume_losses_bitwise "$(diff ref.losses cut.losses | head -4)"
if "$CTRAIN" ckpt diff --exact ref/checkpoints/step_00000006.h5 cut/checkpoints/step_00000006.h5 >diff.txt 2>&1
then pass resume_final_tensors_bitwise; else fail resume_final_tensors_bitwise "$(tail -4 diff.txt)"; fi
# the checkpoint written before the switch says so, the one after too
expect_ok info_before "$CTRAIN" ckpt info ref/checkpoints/step_00000002.h5
expect_grep info_before_inactive 'layer_loop: +not active yet' "$WORK/out"
expect_ok info_after "$CTRAIN" ckpt info ref/checkpoints/step_00000004.h5
expect_grep info_after_active 'layer_loop: +active' "$WORK/out"

# 2b. the same with parallel residual lanes in block 3 (the tail after the loop, in both plans):
# stopped before the switch and resumed across it, bit for bit; the lanes change the run
lanes=("${cfg[@]}" parallel_start_layer=3)
expect_ok lanes_run "$CTRAIN" train "${lanes[@]}" out_dir=lref
losses lref/metrics.jsonl >lref.losses
env CTRAIN_FAULT="TERM@1.1" "$CTRAIN" train "${lanes[@]}" out_dir=lcut >lcut1.log 2>&1
rc1=$?
"$CTRAIN" train "${lanes[@]}" out_dir=lcut >lcut2.log 2>&1
rc2=$?
[ "$rc1 $rc2" = "75 0" ] && pass lanes_resume_codes || fail lanes_resume_codes "expected 75 0, got $rc1 $rc2: $(tail -3 lcut1.log)"
losses lcut/metrics.jsonl >lcut.losses
cmp -s lref.losses lcut.losses && pass lanes_resume_losses_bitwise ||
    fail lanes_resume_losses_bitwise "$(diff lref.losses lcut.losses | head -4)"
if "$CTRAIN" ckpt diff --exact lref/checkpoints/step_00000006.h5 lcut/checkpoints/step_00000006.h5 >ldiff.txt 2>&1
then pass lanes_resume_final_tensors_bitwise; else fail lanes_resume_final_tensors_bitwise "$(tail -4 ldiff.txt)"; fi
[ -s lref.losses ] && ! cmp -s lref.losses ref.losses && pass lanes_change_the_run ||
    fail lanes_change_the_run "the losses with lanes equal those without"
# a checkpoint with lanes does not resume without them (its lambdas would have no place)
expect_fail lanes_resume_refuses_no_lanes 1 'parallel_start_layer: checkpoint 3, configured 0' \
    "$CTRAIN" train "${cfg[@]}" iterations=8 resume=lref/checkpoints/step_00000006.h5 out_dir=lnone

# 3. looping changes the run (the looped plan really runs) ...
expect_ok plain_run "$CTRAIN" train "${base[@]}" skip_gates_enabled=1 out_dir=plain
losses plain/metrics.jsonl >plain.losses
[ "$(head -3 plain.losses)" = "$(head -3 ref.losses)" ] && pass same_before_switch ||
    fail same_before_switch "steps before the switch differ: $(diff <(head -3 plain.losses) <(head -3 ref.losses) | head -4)"
! cmp -s plain.losses ref.losses && pass differs_after_switch || fail differs_after_switch "looping changed nothing"
# ... and num_loops = 0 ignores the loop range
expect_ok off_run "$CTRAIN" train "${base[@]}" skip_gates_enabled=1 loop_start=1 loop_end=3 out_dir=off
losses off/metrics.jsonl >off.losses
cmp -s plain.losses off.losses && pass loops_off_bitwise || fail loops_off_bitwise "$(diff plain.losses off.losses | head -4)"

# 4. bad settings name the key; device=cuda takes the lanes (the CUDA step runs them)
expect_fail bad_loop_end 2 'loop_end = 4' "$CTRAIN" train "${base[@]}" num_loops=1 loop_start=1 loop_end=4 out_dir=bad1
expect_fail bad_num_loops 2 'num_loops = -1' "$CTRAIN" train "${base[@]}" num_loops=-1 out_dir=bad2
expect_fail bad_enable_at 2 'enable_looping_at = 1.5' "$CTRAIN" train "${cfg[@]}" enable_looping_at=1.5 out_dir=bad3
expect_fail bad_final_lane 2 "parallel_final_lane = 'both'" "$CTRAIN" train "${base[@]}" parallel_final_lane=both out_dir=bad4
expect_cuda_takes cuda_takes_parallel "$CTRAIN" train "${base[@]}" parallel_start_layer=3 device=cuda out_dir=bad5

finish
