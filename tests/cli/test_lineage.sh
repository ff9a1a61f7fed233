#!/usr/bin/env bash
# test_lineage.sh — resuming and replacing runs never mixes two lines of training
# (docs/running.md "Resuming"): resume=PATH given again on a requeue continues from out_dir's
# newest checkpoint once that descends from PATH (and warns when it does not); an explicit
# resume from an older step starts a new lineage, moving the abandoned lineage's newer
# checkpoints and history aside, so that pruning keeps the new lineage's files and a fallback
# never resumes the abandoned one; overwrite=1 moves the old artifact aside too, under a name
# that no earlier replacement holds.
source "$CT_ROOT/tests/cli/lib.sh"

resume_data || { fail make_data "from-text failed"; exit 1; }
cfg=(train_files="$WORK/part_*.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=2 model_dim=32 num_heads=4
     num_kv_heads=2 train_seq_len=32 train_batch_tokens=256 grad_accum_slots=8 val_batch_size=256 iterations=16
     warmdown_iters=5 val_loss_every=4 checkpoint_every=2 keep_checkpoints=3 train_log_every=1 threads=2)
train_lines() { grep '"train_loss"' "$1" | sed 's/, "step_ms.*//'; } # step, loss and lr_scale of each step

# the original run: checkpoints 12, 14, 16 kept
expect_ok original_run "$CTRAIN" train "${cfg[@]}" out_dir=orig
origin="$WORK/orig/checkpoints/step_00000012.h5"

# 1. resume=PATH on a requeue: the first attempt starts from PATH and is stopped at step 15;
#    the requeue, the same command, continues from step 15 and ends as an uninterrupted run
rq=("${cfg[@]}" resume="$origin")
expect_ok requeue_reference "$CTRAIN" train "${rq[@]}" out_dir=rq_ref
env CTRAIN_FAULT=TERM@15.3 "$CTRAIN" train "${rq[@]}" out_dir=rq >rq.log 2>&1
rc=$?
[ $rc = 75 ] && pass requeue_first_attempt_stopped || fail requeue_first_attempt_stopped "exit $rc: $(tail -c 300 rq.log)"
expect_ok requeue_again "$CTRAIN" train "${rq[@]}" out_dir=rq
expect_grep requeue_resumes_newest 'resumed from .*rq/checkpoints/step_00000015.h5: step 15' out
expect_grep requeue_says_it_descends "step_00000015.h5 \(step 15\) descends from resume=.*orig/checkpoints/step_00000012.h5 \(its lineage [0-9a-f]{16} started there at step 12\); continuing from it" out
expect_same requeue_same_as_uninterrupted "per-step losses" "$(train_lines rq_ref/metrics.jsonl)" "$(train_lines rq/metrics.jsonl)"
# PATH is not where out_dir's checkpoints come from: a warning, and a new lineage from PATH
cp -r orig other && cp -r rq_ref other_rq
expect_ok unrelated_newest_runs "$CTRAIN" train "${cfg[@]}" resume="$WORK/other/checkpoints/step_00000014.h5" out_dir=other_rq
expect_grep unrelated_newest_warned "warning: resume=.*other/checkpoints/step_00000014.h5: the newest checkpoint in other_rq/checkpoints, .*step_00000016.h5 \(step 16, lineage [0-9a-f]{16}\), does not descend from it" "$WORK/err"
# out_dir's history was another line of training's: aside whole; metrics.jsonl starts after step 14
steps=$(grep '"train_loss"' other_rq/metrics.jsonl | sed 's/, .*//' | tr -d '{"step: ' | tr '\n' ' ')
[ "$steps" = "15 16 " ] && pass unrelated_history_not_mixed || fail unrelated_history_not_mixed "steps: $steps"
expect_same unrelated_history_aside "metrics" "$(cat rq_ref/metrics.jsonl)" "$(cat other_rq/metrics.jsonl.replaced-* 2>/dev/null)"
"$CTRAIN" ckpt info other_rq/checkpoints/step_00000016.h5 >info.txt 2>&1
expect_grep ckpt_info_shows_lineage "^lineage: +[0-9a-f]{16}, started from step 14 of lineage [0-9a-f]{16} \(content_crc32 0x[0-9a-f]{8}, .*other/checkpoints/step_00000014.h5\)" info.txt

# 2. an explicit resume from an older step of the same out_dir (with other checkpoint steps and
#    keep_checkpoints=2): the abandoned lineage's 14 and 16 are moved aside, with its history
cp -r orig lin
sed 's/, "step_ms.*//' orig/metrics.jsonl >orig.history
back=("${cfg[@]}" resume="$WORK/lin/checkpoints/step_00000012.h5" checkpoint_every=3 keep_checkpoints=2 iterations=18)
expect_ok new_lineage_runs "$CTRAIN" train "${back[@]}" out_dir=lin
expect_grep new_lineage_moves_aside 'moved 2 checkpoint\(s\) of the abandoned lineage to lin/checkpoints.replaced-' out
ls lin/checkpoints.replaced-*/step_00000016.h5 >/dev/null 2>&1 && [ ! -e lin/checkpoints/step_00000016.h5 ] \
    && [ ! -e lin/checkpoints/step_00000014.h5 ] && pass abandoned_checkpoints_aside \
    || fail abandoned_checkpoints_aside "checkpoints: $(ls lin/checkpoints | tr '\n' ' ')"
# pruning keeps the new lineage's newest two, 15 and 18 (12 is pruned)
[ "$(ls lin/checkpoints | tr '\n' ' ')" = "latest step_00000015.h5 step_00000018.h5 " ] && pass pruning_keeps_new_lineage \
    || fail pruning_keeps_new_lineage "checkpoints: $(ls lin/checkpoints | tr '\n' ' ')"
# the abandoned history is aside whole; metrics.jsonl holds steps 1..18 once, 1..12 as before
expect_same abandoned_history_aside "metrics" "$(sed 's/, "step_ms.*//' orig/metrics.jsonl)" \
    "$(sed 's/, "step_ms.*//' lin/metrics.jsonl.replaced-* 2>/dev/null)"
steps=$(grep '"train_loss"' lin/metrics.jsonl | sed 's/, .*//' | tr -d '{"step: ' | tr '\n' ' ')
[ "$steps" = "$(seq -s ' ' 1 18) " ] && pass new_lineage_one_history || fail new_lineage_one_history "steps: $steps"
expect_same new_lineage_keeps_shared_history "steps 1..12" "$(train_lines orig/metrics.jsonl | head -12)" \
    "$(train_lines lin/metrics.jsonl | head -12)"
# the same command on a requeue: PATH (step 12) has been pruned; out_dir's newest descends from it
expect_ok new_lineage_requeue "$CTRAIN" train "${back[@]}" out_dir=lin
expect_grep new_lineage_requeue_continues 'step_00000018.h5 \(step 18\) descends from resume=.*lin/checkpoints/step_00000012.h5 .*a file that no longer exists\); continuing from it' out
expect_grep new_lineage_requeue_finished 'already finished: step 18 of iterations = 18' out
# a checkpoint of the abandoned lineage put back (as an older ctrain left it) and the newest
# damaged: the fallback passes over the other lineage's step 16 and resumes the new one's 15
cp lin/checkpoints.replaced-*/step_00000016.h5 lin/checkpoints/ 2>/dev/null
flip_tensor_byte lin/checkpoints/step_00000018.h5
expect_ok fallback_runs "$CTRAIN" train "${cfg[@]}" checkpoint_every=3 keep_checkpoints=2 iterations=18 out_dir=lin
expect_grep fallback_skips_other_lineage 'checkpoint .*lin/checkpoints/step_00000016.h5 is not usable \(it belongs to lineage [0-9a-f]{16}, not to step_00000018.h5.s lineage [0-9a-f]{16}' "$WORK/err"
expect_grep fallback_resumes_own_lineage 'resumed from .*lin/checkpoints/step_00000015.h5: step 15' out
# and pruning neither counts nor deletes the other lineage's file: the new lineage keeps 15 and 18
[ "$(ls lin/checkpoints | tr '\n' ' ')" = "latest step_00000015.h5 step_00000016.h5 step_00000018.h5 " ] \
    && pass pruning_leaves_other_lineage || fail pruning_leaves_other_lineage "checkpoints: $(ls lin/checkpoints | tr '\n' ' ')"

# 2b. the same start on 2 ranks (mpiexec), rank 1's load failing (CTRAIN_FAULT's ERR@resume): the
#     ranks agree before anything is moved aside, so both exit 1 at once, rank 0 says once which
#     rank failed and why, and out_dir is as it was (the abandoned lineage's checkpoints in place)
if command -v mpiexec >/dev/null 2>&1; then
    for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL)'); do unset "$v"; done
    cp -r orig lin2
    rm -f codes
    start=$SECONDS
    CTRAIN_FAULT='ERR@resume%1' timeout 120 mpiexec -launcher fork -n 2 sh -c '"$@"; rc=$?; echo "$PMI_RANK $rc" >>codes; exit $rc' \
        sh "$CTRAIN" train "${cfg[@]}" threads=1 collective_timeout=600 resume="$WORK/lin2/checkpoints/step_00000012.h5" \
        out_dir=lin2 >lin2.out 2>lin2.err
    rc=$?
    took=$((SECONDS - start))
    said="ctrain: error: rank 1 failed during the resume from $WORK/lin2/checkpoints/step_00000012.h5: CTRAIN_FAULT: injected error ERR@resume"
    if [ $rc -eq 1 ] && [ "$(sort codes 2>/dev/null | tr '\n' ' ')" = "0 1 1 1 " ] && [ $took -lt 60 ] &&
        [ "$(grep -cxF "$said" lin2.err)" = 1 ]; then pass ranks_2_resume_error_together
    else fail ranks_2_resume_error_together "exit $rc after ${took}s, ranks' exits: $(tr '\n' ' ' <codes 2>&1) :: $(tail -c 400 lin2.err)"; fi
    expect_same ranks_2_resume_error_nothing_moved "the files and metrics.jsonl" \
        "$(cd orig && ls . checkpoints && cksum <metrics.jsonl)" "$(cd lin2 && ls . checkpoints && cksum <metrics.jsonl)"
else
    for c in ranks_2_resume_error_together ranks_2_resume_error_nothing_moved; do
        skip "$c" "mpiexec not installed (apt-get install mpich)"
    done
fi

# 3. overwrite=1 moves the earlier run's artifact aside too; names taken by earlier
#    replacements (two overwrites within one second) are never reused
expect_ok artifact_run "$CTRAIN" train "${cfg[@]}" iterations=2 golf_artifact=1 out_dir=ow
ls ow/final_model.* >/dev/null 2>&1 && pass artifact_made || fail artifact_made "$(ls ow)"
artifact=$(cd ow && ls final_model.* 2>/dev/null | head -1)
sum_artifact=$(sha256sum <"ow/$artifact")
sum_metrics=$(sha256sum <ow/metrics.jsonl)
# what an overwrite earlier in the same second (or any of the next few) left aside
now=$(date -u +%s)
for s in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29; do
    echo "earlier replacement $s" >"ow/metrics.jsonl.replaced-$(date -u -d "@$((now + s))" +%Y%m%dT%H%M%SZ)"
done
sentinels=$(cat ow/metrics.jsonl.replaced-* | sort)
expect_ok overwrite_runs "$CTRAIN" train "${cfg[@]}" iterations=2 resume=none overwrite=1 out_dir=ow
[ ! -e "ow/$artifact" ] && pass overwrite_moves_artifact || fail overwrite_moves_artifact "ow/$artifact is still there"
moved=$(ls ow/"$artifact".replaced-* 2>/dev/null | head -1)
[ -n "$moved" ] && [ "$(sha256sum <"$moved")" = "$sum_artifact" ] && pass overwrite_artifact_aside \
    || fail overwrite_artifact_aside "$(ls ow)"
left=$(for f in ow/metrics.jsonl.replaced-*; do grep -q '^earlier replacement' "$f" && cat "$f"; done | sort)
expect_same overwrite_keeps_earlier_asides "earlier aside files" "$sentinels" "$left"
found=""
for f in ow/metrics.jsonl.replaced-*; do [ "$(sha256sum <"$f")" = "$sum_metrics" ] && found=$f; done
[ -n "$found" ] && pass overwrite_metrics_aside_unique || fail overwrite_metrics_aside_unique "$(ls ow)"
[ -f ow/checkpoints/step_00000002.h5 ] && [ "$(ls -d ow/checkpoints.replaced-* | wc -l)" = 1 ] \
    && pass overwrite_checkpoints_aside || fail overwrite_checkpoints_aside "$(ls ow)"

finish
