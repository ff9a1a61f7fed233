#!/usr/bin/env bash
# test_resume.sh — interrupted runs resume exactly. A reference run goes uninterrupted; the same
# run is then stopped and killed at several points (SIGTERM mid-accumulation, SIGKILL
# mid-accumulation, SIGKILL half-way through a checkpoint write, SIGTERM from outside at an
# arbitrary moment, a stop right at a data-file boundary and after the stream wrapped around),
# resumed each time with the same command, and must end with bitwise identical per-step losses
# and final checkpoint tensors. Also: corrupt newest checkpoint -> fallback; refused resumes
# leave the old checkpoints untouched; metrics.jsonl continues without gaps or duplicates.
source "$CT_ROOT/tests/cli/lib.sh"

# Two small files (2 200 tokens in all): one step takes 8 * (32 + 1) = 264 tokens, so the
# stream crosses the file boundary during step 5 and wraps around during step 9.
resume_data || { fail make_data "from-text failed"; exit 1; }
cfg=(train_files="$WORK/part_*.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=3 model_dim=32 num_heads=4
     num_kv_heads=2 train_seq_len=32 train_batch_tokens=256 grad_accum_slots=8 val_batch_size=256 iterations=16
     warmdown_iters=5 muon_momentum_warmup_steps=6 val_loss_every=4 checkpoint_every=2 keep_checkpoints=3
     train_log_every=1 threads=2)

expect_ok reference "$CTRAIN" train "${cfg[@]}" out_dir=ref
train_losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["step"], "train" if "train_loss" in r else "val", repr(r.get("train_loss", r.get("val_loss"))))' "$1"; }
train_losses ref/metrics.jsonl >ref.losses

# run CMD until it exits 0, at most 8 times; records every exit code in codes.txt
run() { # out_dir, then env assignments for each attempt as separate words "CTRAIN_FAULT=..." or "-"
    local out=$1; shift
    : >"$out.codes"
    for fault in "$@"; do
        if [ "$fault" = - ]; then "$CTRAIN" train "${cfg[@]}" out_dir="$out" >>"$out.log" 2>&1
        else env CTRAIN_FAULT="$fault" "$CTRAIN" train "${cfg[@]}" out_dir="$out" >>"$out.log" 2>&1; fi
        echo $? >>"$out.codes"
    done
}
expect_codes() { # name, out_dir, the exit codes of its run() attempts ("75 0 " ...)
    local codes
    codes=$(tr '\n' ' ' <"$2.codes")
    [ "$codes" = "$3" ] && pass "$1" || fail "$1" "expected $3, got $codes"
}
no_temporary_files() { # name, out_dir: only finished checkpoints and latest remain
    local leftovers
    leftovers=$(ls "$2/checkpoints" | grep -v -E '^(step_[0-9]{8}\.h5|latest)$' || true)
    [ -z "$leftovers" ] && pass "$1" || fail "$1" "$leftovers"
}
same_as_reference() { # name, out_dir
    train_losses "$2/metrics.jsonl" >"$2.losses"
    if cmp -s ref.losses "$2.losses"; then pass "$1_losses_bitwise"
    else fail "$1_losses_bitwise" "$(diff ref.losses "$2.losses" | head -6)"; fi
    if "$CTRAIN" ckpt diff --exact ref/checkpoints/step_00000016.h5 "$2/checkpoints/step_00000016.h5" >"$2.diff" 2>&1
    then pass "$1_final_tensors_bitwise"; else fail "$1_final_tensors_bitwise" "$(tail -5 "$2.diff")"; fi
}

# 1. one run interrupted five times, resumed with the same command after each:
#    SIGTERM mid-accumulation of step 3 -> finishes step 3, checkpoints, exit 75
#    SIGINT as micro-batch 7 of step 5 crosses the data-file boundary -> checkpoint 5, exit 75
#    SIGKILL mid-accumulation of step 7 -> exit 137; the last checkpoint is step 6
#    SIGUSR1 (stop_signal) in step 9, just after the stream wrapped -> checkpoint 9, exit 75
#    SIGKILL half-way through writing the step-12 checkpoint -> latest stays at step 10
#    then a clean finish.
run multi "TERM@3.5" "INT@5.7" "KILL@7.2" "USR1@9.4" "KILL@ckpt:12" "-"
expect_codes exit_codes multi "75 75 137 75 137 0 "
expect_grep stop_message 'stopped at step 3/16 \(SIGTERM\): checkpoint written; exit 75' multi.log
expect_grep int_message 'stopped at step 5/16 \(SIGINT\)' multi.log
expect_grep usr1_message 'stopped at step 9/16 \(SIGUSR1\)' multi.log
expect_grep resumed_after_kill 'resumed from .*step_00000006.h5: step 6' multi.log
expect_grep resumed_after_killed_write 'resumed from .*step_00000010.h5: step 10' multi.log
same_as_reference interrupted multi
no_temporary_files no_temporary_files_left multi

# 1b. the same interruptions with the background checkpoint writer (checkpoint_async=on, the
#     default for device=cuda): the same exit codes (a kill half-way through a background write
#     takes the training process down too) and, resumed, the same bits. Which checkpoint a
#     resume after the plain SIGKILL finds depends on whether the background write of step 6
#     had finished, so that is not asserted.
plain_cfg=("${cfg[@]}")
cfg+=(checkpoint_async=on)
run multi_async "TERM@3.5" "INT@5.7" "KILL@7.2" "USR1@9.4" "KILL@ckpt:12" "-"
cfg=("${plain_cfg[@]}")
expect_codes async_exit_codes multi_async "75 75 137 75 137 0 "
expect_grep async_writes_in_background 'checkpoint: .*step_00000002.h5 \([0-9]+ms, written in the background; training paused [0-9]+ms\)' multi_async.log
# The SIGTERM of step 3 ends the run at step 3's checkpoint, or, when it came while the writer
# was still writing step 2's, at that one (docs/running.md, "Stopping"); the log says which
if grep -q 'the stop came while the checkpoint of step 2 was being written: the run stops there; step(s) 3 to 3' \
    multi_async.log; then
    expect_grep async_stop_message 'stopped at step 2/16 \(SIGTERM\): checkpoint written; exit 75' multi_async.log
else
    expect_grep async_stop_message 'stopped at step 3/16 \(SIGTERM\): checkpoint written; exit 75' multi_async.log
fi
expect_grep async_resumed_after_killed_write 'resumed from .*step_00000010.h5: step 10' multi_async.log
same_as_reference interrupted_async multi_async
no_temporary_files async_no_temporary_files_left multi_async

# a second SIGINT aborts at once (exit 130) without a checkpoint; the previous one stays valid
CTRAIN_FAULT="INT@3.1,INT@3.4" "$CTRAIN" train "${cfg[@]}" out_dir=twice >twice.log 2>&1
rc=$?
[ $rc = 130 ] && pass second_sigint_aborts || fail second_sigint_aborts "exit $rc"
expect_grep second_sigint_message 'second interrupt, aborting without a checkpoint' twice.log
"$CTRAIN" ckpt verify twice/checkpoints/step_00000002.h5 >/dev/null 2>&1 && \
    [ ! -e twice/checkpoints/step_00000003.h5 ] && pass second_sigint_keeps_previous || \
    fail second_sigint_keeps_previous "$(ls twice/checkpoints)"

# 2. a SIGTERM from outside at an arbitrary moment
"$CTRAIN" train "${cfg[@]}" out_dir=outside >outside.log 2>&1 &
pid=$!
sleep 0.7
kill -TERM $pid 2>/dev/null
wait $pid
echo "outside first exit: $?" >>outside.log
"$CTRAIN" train "${cfg[@]}" out_dir=outside >>outside.log 2>&1 || fail outside_resume "$(tail -3 outside.log)"
same_as_reference outside_signal outside

# 3. metrics.jsonl continues without duplicated or missing steps
steps=$(grep -c '"train_loss"' multi/metrics.jsonl)
uniq_steps=$(grep '"train_loss"' multi/metrics.jsonl | sed 's/, .*//' | sort -u | wc -l)
[ "$steps" = 16 ] && [ "$uniq_steps" = 16 ] && pass metrics_continuous || fail metrics_continuous "$steps lines, $uniq_steps distinct"

# 4. a corrupt newest checkpoint (truncated; or one byte flipped inside a tensor) falls back
cp -r ref trunc_run
rm trunc_run/checkpoints/step_00000016.h5 && echo step_00000014.h5 >trunc_run/checkpoints/latest
head -c 5000 ref/checkpoints/step_00000014.h5 >trunc_run/checkpoints/step_00000014.h5
/usr/bin/python3 - trunc_run/metrics.jsonl <<'PY'
import sys
lines = [l for l in open(sys.argv[1]) if int(l.split(",")[0].split(":")[1]) <= 14]
open(sys.argv[1], "w").writelines(lines)
PY
expect_ok truncated_fallback_runs "$CTRAIN" train "${cfg[@]}" out_dir=trunc_run
cp "$WORK/err" trunc.err
expect_grep truncated_warned 'warning: checkpoint .*step_00000014.h5 is not usable' trunc.err
expect_grep truncated_resumed_previous 'resumed from .*step_00000012.h5' out
same_as_reference truncated_fallback trunc_run

cp -r ref flip_run
rm flip_run/checkpoints/step_00000016.h5 && echo step_00000014.h5 >flip_run/checkpoints/latest
flip_tensor_byte flip_run/checkpoints/step_00000014.h5
expect_ok flipped_fallback_runs "$CTRAIN" train "${cfg[@]}" out_dir=flip_run
cp "$WORK/err" flip.err
expect_grep flipped_warned 'step_00000014.h5 is not usable' flip.err
same_as_reference flipped_fallback flip_run

# 5. refused resumes leave the old checkpoints untouched
sum_before=$(cd ref && find checkpoints -type f -exec sha256sum {} + | sort)
expect_fail shape_change_refused 1 'cannot resume from .*step_00000016.h5: a key that is fixed on resume differs \(num_layers: checkpoint 3, configured 4\); set it as in the checkpoint' \
    "$CTRAIN" train "${cfg[@]}" num_layers=4 out_dir=ref
cp part_b.h5 part_c.h5 # same glob, one more file
expect_fail data_change_refused 1 'part_c.h5' "$CTRAIN" train "${cfg[@]}" out_dir=ref
rm part_c.h5
expect_fail resume_none_refused 2 'already holds checkpoints' "$CTRAIN" train "${cfg[@]}" resume=none out_dir=ref
sum_after=$(cd ref && find checkpoints -type f -exec sha256sum {} + | sort)
expect_same refused_resumes_touch_nothing "checkpoint checksums" "$sum_before" "$sum_after"
# running a finished run again (a requeue after the end) does nothing, successfully
metrics_before=$(sha256sum ref/metrics.jsonl)
expect_ok finished_run_again "$CTRAIN" train "${cfg[@]}" out_dir=ref
expect_grep finished_run_says_so '^the run in ref is already finished: step 16 of iterations = 16; nothing to do' out
if grep -q '^step .*val_loss' out; then fail finished_run_no_validation "validated again: $(grep -m1 '^step .*val_loss' out)"
else pass finished_run_no_validation; fi
[ "$metrics_before" = "$(sha256sum ref/metrics.jsonl)" ] && pass finished_run_metrics_untouched \
    || fail finished_run_metrics_untouched "metrics.jsonl changed"
expect_ok iterations_may_change "$CTRAIN" train "${cfg[@]}" iterations=18 out_dir=ref
expect_grep changed_key_reported 'resume: iterations changed from 16 to 18' out
cp -r ref ow
expect_ok overwrite_starts_fresh "$CTRAIN" train "${cfg[@]}" resume=none overwrite=1 iterations=2 out_dir=ow
expect_grep overwrite_moved_aside 'moved the earlier run.s checkpoints to .*checkpoints.replaced-' out
ls -d ow/checkpoints.replaced-* >/dev/null 2>&1 && [ -f ow/checkpoints/step_00000002.h5 ] && \
    [ ! -f ow/checkpoints/step_00000016.h5 ] && pass overwrite_keeps_old_aside || fail overwrite_keeps_old_aside "$(ls ow)"
n_old=$(cat ow/metrics.jsonl.replaced-* 2>/dev/null | grep -c '"train_loss"')
n_new=$(grep -c '"train_loss"' ow/metrics.jsonl)
[ "$n_old" = 18 ] && [ "$n_new" = 2 ] && ls ow/config.txt.replaced-* >/dev/null 2>&1 && pass overwrite_keeps_old_metrics \
    || fail overwrite_keeps_old_metrics "old metrics lines $n_old (expected 18), new $n_new (expected 2): $(ls ow)"
expect_fail resume_path_missing 1 'nope.h5' "$CTRAIN" train "${cfg[@]}" resume="$WORK/nope.h5" out_dir=other

# 6. the data's identity (resume_data): the same tokens at another path resume exactly with
#    resume_data=moved; other tokens of the same count are refused unless resume_data=changed
env CTRAIN_FAULT=TERM@8.3 "$CTRAIN" train "${cfg[@]}" out_dir=mv >mv.log 2>&1
[ $? = 75 ] && pass moved_interrupted || fail moved_interrupted "exit $? (expected 75): $(tail -c 300 mv.log)"
mkdir moved && cp part_a.h5 part_b.h5 moved/
expect_fail moved_data_refused 1 "its tokens are the same, so if the data was moved, set resume_data=moved" \
    "$CTRAIN" train "${cfg[@]}" train_files="$WORK/moved/part_*.h5" out_dir=mv
expect_ok moved_data_resumes "$CTRAIN" train "${cfg[@]}" train_files="$WORK/moved/part_*.h5" resume_data=moved out_dir=mv
expect_grep moved_data_reported 'resume_data=moved: 2 of 2 training file\(s\) are at other paths than in the checkpoint, with the same tokens' out
same_as_reference moved_data mv
# a file replaced by another of the same length (another text's first 1300 bytes)
mkdir replaced && head -c 1300 /usr/share/common-licenses/Apache-2.0 >replaced/a.txt && cp part_b.h5 replaced/ &&
    "$CTRAIN" data from-text --out replaced/part_a.h5 replaced/a.txt >/dev/null 2>&1 || fail make_replaced "from-text failed"
replaced=(train_files="$WORK/replaced/part_*.h5" iterations=18 out_dir=mv)
expect_fail replaced_data_refused 1 "the training data differs: '.*replaced/part_a.h5' \(file '.*moved/part_a.h5' in the checkpoint\) holds other tokens than when the checkpoint was written \(the same count, 1300, but its first and last tokens differ.*set resume_data=changed" \
    "$CTRAIN" train "${cfg[@]}" "${replaced[@]}" resume_data=moved
expect_ok replaced_data_changed "$CTRAIN" train "${cfg[@]}" "${replaced[@]}" resume_data=changed
expect_grep replaced_data_reported 'resume_data=changed: 1 of 2 training file\(s\) hold other tokens' out
# two files of equal length swapped under the same names
mkdir swap && head -c 1100 /usr/share/common-licenses/GPL-3 >swap/1.txt && tail -c 1100 /usr/share/common-licenses/GPL-3 >swap/2.txt &&
    "$CTRAIN" data from-text --out swap/part_1.h5 swap/1.txt >/dev/null 2>&1 &&
    "$CTRAIN" data from-text --out swap/part_2.h5 swap/2.txt >/dev/null 2>&1 || fail make_swap "from-text failed"
swap=(train_files="$WORK/swap/part_*.h5" out_dir=sw)
expect_ok swap_first_run "$CTRAIN" train "${cfg[@]}" "${swap[@]}" iterations=2
mv swap/part_1.h5 swap/tmp.h5 && mv swap/part_2.h5 swap/part_1.h5 && mv swap/tmp.h5 swap/part_2.h5
expect_fail swapped_files_refused 1 "part_1.h5' holds other tokens than when the checkpoint was written" \
    "$CTRAIN" train "${cfg[@]}" "${swap[@]}" iterations=4

# 7. the 1.0611 record's schedule and Muon (issue 56): warmdown_frac with its min_lr floor
#    (progress by steps, the deterministic form) and Polar Express + MuonEq-R + embed_wd, stopped
#    mid-warmdown (SIGTERM in step 7, SIGKILL in step 11) and resumed: the same per-step losses,
#    lr scales and final tensors, bit for bit, as the run without stops (the schedule's position
#    is the checkpoint's step).
cfg=("${plain_cfg[@]}" warmdown_frac=0.6 min_lr=0.3 muon_polar_express=1 muon_row_normalize=1 muon_wd=0.1 adam_wd=0.02
     embed_wd=0.05)
expect_ok frac_reference "$CTRAIN" train "${cfg[@]}" out_dir=frac_ref
run frac "TERM@7.4" "KILL@11.3" "-"
expect_codes frac_exit_codes frac "75 137 0 "
lr_and_losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "train_loss" in r: print(r["step"], repr(float(r["train_loss"])), repr(float(r["lr_scale"])))' "$1"; }
lr_and_losses frac_ref/metrics.jsonl >frac_ref.losses
lr_and_losses frac/metrics.jsonl >frac.losses
if cmp -s frac_ref.losses frac.losses && [ "$(wc -l <frac.losses)" = 16 ]; then pass frac_losses_and_lr_bitwise
else fail frac_losses_and_lr_bitwise "$(diff frac_ref.losses frac.losses | head -6)"; fi
# the floor is reached (metrics count steps from 1: logged step 14 trained at progress 13/16 =
# 0.8125, (1 - 0.8125) / 0.6 = 0.3125 > 0.3; logged step 15 at 14/16: 0.2083 -> the floor 0.3)
if grep -q "^14 .* 0.3125$" frac_ref.losses && grep -q "^15 .* 0.3$" frac_ref.losses && grep -q "^1 .* 1.0$" frac_ref.losses
then pass frac_reaches_floor
else fail frac_reaches_floor "$(head -2 frac_ref.losses; tail -3 frac_ref.losses)"; fi
if "$CTRAIN" ckpt diff --exact frac_ref/checkpoints/step_00000016.h5 frac/checkpoints/step_00000016.h5 >frac.diff 2>&1
then pass frac_final_tensors_bitwise; else fail frac_final_tensors_bitwise "$(tail -5 frac.diff)"; fi

finish
