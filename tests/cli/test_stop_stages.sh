#!/usr/bin/env bash
# test_stop_stages.sh — a stop request (SIGTERM, by CTRAIN_FAULT at exact points) at every stage
# of a run: during the last step's validation, the EMA validation, the golf artifact's write and
# its round trip the run exits 75 with what is left in out_dir/end_of_run.txt, and the same
# command then does only that (the same bits as an uninterrupted run); during a periodic
# checkpoint it exits 75 right after the write; a finished run whose artifact is missing makes
# it; what the end needs (the round trip's eval_seq_len, the artifact's path) is checked before
# the first step.
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
small=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2
       train_seq_len=16 train_batch_tokens=256 grad_accum_slots=2 val_batch_size=256 threads=2 iterations=4
       val_loss_every=0 checkpoint_every=0 ema_enabled=1 golf_artifact=1)
ART=final_model.int8.stz

# run NAME FAULT [KEYS...]: one call of the run in out_dir NAME (FAULT "-": none); its exit code in rc
run() {
    local name=$1 fault=$2
    shift 2
    if [ "$fault" = - ]; then "$CTRAIN" train "${small[@]}" "$@" out_dir="$name" >"$name.log" 2>&1
    else CTRAIN_FAULT="$fault" "$CTRAIN" train "${small[@]}" "$@" out_dir="$name" >"$name.log" 2>&1; fi
    rc=$?
}
# expect_rc NAME WANT LOG
expect_rc() { if [ "$rc" -eq "$2" ]; then pass "$1"; else fail "$1" "exit $rc, expected $2: $(tail -c 400 "$3")"; fi; }
# the end of a run: its last validation and EMA lines in metrics.jsonl (without the times) and
# the round trip's exact lines of its last call
end_of() {
    grep -v train_loss "$1/metrics.jsonl" | tail -2 | sed 's/, "train_time_ms": [0-9.]*//'
    grep -h '_exact ' "$1.log"
}

# the uninterrupted run: what every interrupted one must end with
run ref -
expect_rc ref_ok 0 ref.log

# SIGTERM during the last step (after its last micro-batch): the validation that follows gives up
# at once; the checkpoint of step 4 is written without it and the requeue validates
run lastval TERM@4.1
expect_rc last_step_stop_exits_75 75 lastval.log
expect_grep last_step_stop_says '^stopped at step 4/4 \(SIGTERM, during the validation of this step\): checkpoint written' lastval.log
if [ -e lastval/$ART ]; then fail last_step_stop_no_artifact "the artifact was written after the stop"
else pass last_step_stop_no_artifact; fi
expect_grep last_step_stop_recorded '^left: averaged_validation golf_artifact$' lastval/end_of_run.txt
mv lastval.log lastval.log.0
run lastval -
expect_rc last_step_requeue_ok 0 lastval.log
expect_grep last_step_requeue_says 'its end is not complete: doing what is left: the last step.s validation, the EMA/SWA' lastval.log
expect_same last_step_requeue_same_end "ends" "$(end_of ref)" "$(end_of lastval)"
if cmp -s ref/$ART lastval/$ART; then pass last_step_requeue_same_artifact
else fail last_step_requeue_same_artifact "the artifacts differ (or one is missing)"; fi
if [ -e lastval/end_of_run.txt ]; then fail last_step_record_removed "$(cat lastval/end_of_run.txt)"
else pass last_step_record_removed; fi
run lastval -
expect_rc finished_ok 0 lastval.log
expect_grep finished_nothing_to_do 'is already finished: step 4 of iterations = 4; nothing to do' lastval.log

# SIGTERM as the validation of the last step starts (CTRAIN_FAULT's stage point)
run val TERM@val:4
expect_rc val_stop_exits_75 75 val.log
expect_grep val_stop_says 'during the validation of this step' val.log
# the same with eval_stride in a validation before the last step (the sliding window's alone)
run slide TERM@val:2 eval_stride=8 val_loss_every=2
expect_rc sliding_stop_exits_75 75 slide.log
expect_grep sliding_stop_says '^stopped at step 2/4 \(SIGTERM, during the validation of this step\)' slide.log
if grep -qE '^step 2/4  val_loss' slide.log; then fail sliding_stop_no_result "$(grep val_loss slide.log)"
else pass sliding_stop_no_result; fi

# SIGTERM as the EMA validation starts, then as the artifact is written, then as it is evaluated:
# each exits 75 naming what is left; the requeue does the rest, once
run ema TERM@ema_val
expect_rc ema_stop_exits_75 75 ema.log
expect_grep ema_stop_says '^stopped after step 4/4 \(SIGTERM; validating the EMA weights: stopped by a signal during the validation\): the final checkpoint is written; left: the EMA/SWA weights. validation, the golf artifact' ema.log
if grep -q final_val_loss ema/metrics.jsonl; then fail ema_stop_no_final_line "$(grep final_val ema/metrics.jsonl)"
else pass ema_stop_no_final_line; fi
mv ema.log ema.log.0
run ema -
expect_rc ema_requeue_ok 0 ema.log
expect_same ema_requeue_same_end "ends" "$(end_of ref)" "$(end_of ema)"

run art TERM@artifact
expect_rc artifact_stop_exits_75 75 art.log
expect_grep artifact_stop_says "left: the golf artifact and its round-trip evaluation \(recorded in art/end_of_run.txt\)" art.log
expect_grep artifact_stop_recorded '^left: golf_artifact$' art/end_of_run.txt
mv art.log art.log.0
run art -
expect_rc artifact_requeue_ok 0 art.log
expect_same artifact_requeue_same_end "ends" "$(end_of ref)" "$(end_of art)"
n=$(grep -c final_val_loss art/metrics.jsonl)
if [ "$n" = 1 ]; then pass artifact_requeue_ema_once; else fail artifact_requeue_ema_once "$n final_val_loss lines"; fi

run trip TERM@round_trip
expect_rc round_trip_stop_exits_75 75 trip.log
if grep -q '_roundtrip' trip.log; then fail round_trip_stop_no_result "$(grep _roundtrip trip.log)"
else pass round_trip_stop_no_result; fi
mv trip.log trip.log.0
run trip -
expect_rc round_trip_requeue_ok 0 trip.log
expect_same round_trip_requeue_same_end "ends" "$(end_of ref)" "$(end_of trip)"

# `ckpt golf` on its own: a stop before the artifact's write leaves no file and exits 75; one
# during the round trip keeps the artifact (published whole) and exits 75; run again, the same
# artifact and the same round-trip lines as a call that was not stopped
ck=$(ls ref/checkpoints/step_*.h5 | tail -1)
"$CTRAIN" ckpt golf "$ck" --out golf_ref.stz >golf_ref.log 2>&1
rc=$?
expect_rc golf_cmd_ok 0 golf_ref.log
CTRAIN_FAULT=TERM@artifact "$CTRAIN" ckpt golf "$ck" --out golf_a.stz >golf_a.log 2>&1
rc=$?
expect_rc golf_cmd_stop_before_write_75 75 golf_a.log
expect_grep golf_cmd_stop_says 'stopped by a signal during the golf artifact.s write' golf_a.log
if [ -e golf_a.stz ] || ls golf_a.stz.* >/dev/null 2>&1; then fail golf_cmd_stop_no_file "$(ls golf_a.stz*)"
else pass golf_cmd_stop_no_file; fi
CTRAIN_FAULT=TERM@round_trip "$CTRAIN" ckpt golf "$ck" --out golf_b.stz >golf_b.log 2>&1
rc=$?
expect_rc golf_cmd_stop_round_trip_75 75 golf_b.log
if cmp -s golf_b.stz golf_ref.stz; then pass golf_cmd_stop_keeps_whole_artifact
else fail golf_cmd_stop_keeps_whole_artifact "golf_b.stz is not the uninterrupted call's artifact"; fi
"$CTRAIN" ckpt golf "$ck" --out golf_b.stz >golf_b2.log 2>&1
rc=$?
expect_rc golf_cmd_again_ok 0 golf_b2.log
expect_same golf_cmd_again_same_round_trip "round trip" "$(grep '_exact ' golf_ref.log)" "$(grep '_exact ' golf_b2.log)"

# killed (SIGKILL) while the artifact is written: the next call makes it
run killed KILL@artifact
expect_rc killed_artifact_dies 137 killed.log
mv killed.log killed.log.0
run killed -
expect_rc killed_requeue_ok 0 killed.log
expect_same killed_requeue_same_end "ends" "$(end_of ref)" "$(end_of killed)"

# a finished run asked again with golf_artifact = 1 (its artifact never made): the call makes it
# instead of "already finished" with exit 0 and no artifact
run late - golf_artifact=0
run late - golf_artifact=1
expect_rc late_artifact_ok 0 late.log
if cmp -s ref/$ART late/$ART; then pass late_artifact_made
else fail late_artifact_made "no artifact, or not the uninterrupted run's: $(tail -c 300 late.log)"; fi

# SIGTERM during a periodic checkpoint's write: exit 75 right after it, no further step and no
# second checkpoint
run ckpt TERM@ckpt:2 iterations=6 checkpoint_every=2
expect_rc ckpt_stop_exits_75 75 ckpt.log
got=$(ls ckpt/checkpoints | grep '^step_' | tr '\n' ' ')
if [ "$got" = "step_00000002.h5 " ]; then pass ckpt_stop_one_checkpoint; else fail ckpt_stop_one_checkpoint "checkpoints: $got"; fi
if grep -q '"step": 3,' ckpt/metrics.jsonl; then fail ckpt_stop_no_extra_step "step 3 was trained"
else pass ckpt_stop_no_extra_step; fi

# The same with the background writer (checkpoint_async=on, the GPU default): the SIGTERM reaches
# the run while the writer is still at the checkpoint of step 2 (the writer sends it, then stops
# itself until this script continues it), and the run stops at that checkpoint once it is
# written, without writing a second one for the step it has reached
CTRAIN_FAULT=TERM@ckpt:2,STOP@ckpt:2 "$CTRAIN" train "${small[@]}" iterations=1000 checkpoint_every=2 \
    checkpoint_async=on out_dir=bg >bg.log 2>&1 &
run_pid=$!
writer=
for _ in $(seq 600); do # the writer stops itself within seconds; 60 s at most
    for c in $(pgrep -P $run_pid); do [ "$(ps -o stat= -p "$c" | cut -c1)" = T ] && writer=$c; done
    [ -n "$writer" ] && break
    sleep 0.1
done
[ -n "$writer" ] && { sleep 1; kill -CONT "$writer"; }
wait $run_pid
rc=$?
expect_rc bg_ckpt_stop_exits_75 75 bg.log
got=$(ls bg/checkpoints 2>/dev/null | grep '^step_' | tr '\n' ' ')
if [ "$got" = "step_00000002.h5 " ]; then pass bg_ckpt_stop_one_checkpoint; else fail bg_ckpt_stop_one_checkpoint "checkpoints: $got"; fi
expect_grep bg_ckpt_stop_says '^stopped at step 2/1000 \(SIGTERM\): checkpoint written' bg.log
# the requeue continues from step 2: each step once in metrics.jsonl
"$CTRAIN" train "${small[@]}" iterations=6 checkpoint_every=2 checkpoint_async=on out_dir=bg >bg2.log 2>&1
rc=$?
expect_rc bg_requeue_ok 0 bg2.log
expect_same bg_requeue_steps_once "trained steps" "1 2 3 4 5 6" \
    "$(sed -n 's/^{"step": \([0-9]*\), "train_loss".*/\1/p' bg/metrics.jsonl | tr '\n' ' ' | sed 's/ $//')"

# what the end needs is checked before the first step: exit 2, nothing trained
expect_fail start_eval_seq_len 2 'eval_seq_len = 100000: val_files .val.h5. hold [0-9]+ tokens, fewer than one sequence of eval_seq_len \+ 1 = 100001' \
    "$CTRAIN" train "${small[@]}" eval_seq_len=100000 out_dir=long
if [ -e long/checkpoints ] || [ -s long/metrics.jsonl ]; then fail start_eval_seq_len_nothing_trained "$(ls long)"
else pass start_eval_seq_len_nothing_trained; fi
mkdir -p dirart/$ART
expect_fail start_artifact_path 2 "'dirart/$ART' exists and is not a regular file" \
    "$CTRAIN" train "${small[@]}" out_dir=dirart
if [ -e dirart/checkpoints ]; then fail start_artifact_path_nothing_trained "$(ls dirart)"
else pass start_artifact_path_nothing_trained; fi

# 2 ranks, only rank 1 signalled as the last validation starts: both give up at the same batch
if command -v mpiexec >/dev/null 2>&1; then
    CTRAIN_FAULT='TERM@val:4%1' timeout 120 mpiexec -launcher fork -n 2 "$CTRAIN" train "${small[@]}" out_dir=ranks \
        collective_timeout=60 >ranks.log 2>&1
    rc=$?
    expect_rc ranks_stop_exits_75 75 ranks.log
    mv ranks.log ranks.log.0
    timeout 120 mpiexec -launcher fork -n 2 "$CTRAIN" train "${small[@]}" out_dir=ranks collective_timeout=60 \
        >ranks.log 2>&1
    rc=$?
    expect_rc ranks_requeue_ok 0 ranks.log
    if [ -s ranks/$ART ]; then pass ranks_requeue_artifact; else fail ranks_requeue_artifact "$(tail -c 300 ranks.log)"; fi
else
    for c in ranks_stop_exits_75 ranks_requeue_ok ranks_requeue_artifact; do skip "$c" "mpiexec not installed"; done
fi
finish
