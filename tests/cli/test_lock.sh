#!/usr/bin/env bash
# test_lock.sh — one run per out_dir: a second run on a directory in use fails at once naming
# the holder (host, pid) and touches nothing; with lock_wait it waits for the holder to end;
# a holder that was SIGKILLed leaves no stale lock.
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || { fail make_data "from-text failed"; exit 1; }
run=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16
     train_batch_tokens=256 grad_accum_slots=4 val_loss_every=0 threads=1)

# start_holder NAME: a long run on out_dir=shared in the background, once it has started training
start_holder() {
    "$CTRAIN" train "${run[@]}" iterations=1000000 checkpoint_every=0 out_dir=shared >"$1.out" 2>&1 &
    holder=$!
    for _ in $(seq 200); do
        [ -s shared/metrics.jsonl ] && return 0
        sleep 0.1
    done
    fail "$1" "the holder did not start: $(tail -c 300 "$1.out")"
    return 1
}

# snapshot: every name in out_dir with its size and checksum
snapshot() { (cd shared && find . -printf '%p %y %s\n' | sort && find . -type f -exec sha256sum {} + | sort); }
start_holder holder1 || exit 1
# The holder is stopped while the second run tries: whatever changes in out_dir meanwhile is
# the second run's doing (the holder keeps its lock while stopped).
kill -STOP "$holder"
before=$(snapshot)
expect_fail second_run_refused 1 "'shared' is in use by another ctrain run \(host [^,]+, pid $holder, since [0-9T:-]+Z\)" \
    "$CTRAIN" train "${run[@]}" iterations=2 out_dir=shared
after=$(snapshot)
kill -CONT "$holder"
if kill -0 "$holder" 2>/dev/null; then pass holder_keeps_running; else fail holder_keeps_running "the first run died"; fi
expect_same second_run_touches_nothing "out_dir contents" "$before" "$after"

# lock_wait: the second run waits while the first is stopped (SIGTERM: checkpoint, exit 75), then resumes
"$CTRAIN" train "${run[@]}" iterations=1000000 checkpoint_every=0 out_dir=shared lock_wait=60 >waiter.out 2>&1 &
waiter=$!
for _ in $(seq 200); do grep -q 'waiting up to' waiter.out && break; sleep 0.1; done
kill -TERM "$holder"
wait "$holder"
rc=$?
[ $rc = 75 ] && pass holder_stopped_75 || fail holder_stopped_75 "exit $rc"
for _ in $(seq 100); do grep -q 'resumed from' waiter.out && break; sleep 0.1; done
expect_grep waiter_said_waiting "waiting up to 60 s for 'shared' to be released by another ctrain run \(host" waiter.out
expect_grep waiter_resumed 'resumed from shared/checkpoints/step_' waiter.out

# a SIGKILLed holder leaves no stale lock: the kernel released it
kill -KILL "$waiter"
wait "$waiter" 2>/dev/null
expect_ok after_kill_not_locked "$CTRAIN" train "${run[@]}" iterations=1 out_dir=shared resume=none overwrite=1

# A stop signal while waiting for the lock ends the wait at once: exit 75 (requeue), nothing changed
"$CTRAIN" train "${run[@]}" iterations=1000000 checkpoint_every=0 out_dir=held >held.out 2>&1 &
holder=$!
for _ in $(seq 200); do [ -s held/metrics.jsonl ] && break; sleep 0.1; done
"$CTRAIN" train "${run[@]}" iterations=2 out_dir=held lock_wait=60 >stopwait.out 2>&1 &
waiter=$!
for _ in $(seq 200); do grep -q 'waiting up to' stopwait.out && break; sleep 0.1; done
start=$SECONDS
kill -TERM "$waiter"
wait "$waiter"
rc=$?
if [ $rc = 75 ] && [ $((SECONDS - start)) -lt 10 ] && grep -q "stopped by signal 15 while waiting for 'held' (in use by another ctrain run: host" stopwait.out
then pass stop_during_lock_wait_75; else fail stop_during_lock_wait_75 "exit $rc after $((SECONDS - start)) s: $(tail -c 300 stopwait.out)"; fi
kill -KILL "$holder"; wait "$holder" 2>/dev/null

# A run's own files are never opened through a symbolic link planted in out_dir: the run is
# refused, naming the link, and the file it points to stays as it was.
echo precious >outside.txt
mkdir lk && ln -s "$WORK/outside.txt" lk/.lock
expect_fail lock_link_refused 1 "cannot open the lock file 'lk/.lock': it is a symbolic link" \
    "$CTRAIN" train "${run[@]}" iterations=1 out_dir=lk
rm lk/.lock && ln -s "$WORK/outside.txt" lk/metrics.jsonl
expect_fail metrics_link_refused 1 "cannot write 'lk/metrics.jsonl': it is a symbolic link" \
    "$CTRAIN" train "${run[@]}" iterations=1 out_dir=lk
expect_ok link_first_run "$CTRAIN" train "${run[@]}" iterations=2 checkpoint_every=1 out_dir=lk2
rm lk2/metrics.jsonl && ln -s "$WORK/outside.txt" lk2/metrics.jsonl
expect_fail metrics_link_refused_on_resume 1 "cannot read 'lk2/metrics.jsonl': it is a symbolic link" \
    "$CTRAIN" train "${run[@]}" iterations=3 checkpoint_every=1 out_dir=lk2
[ "$(cat outside.txt)" = precious ] && pass link_target_untouched || fail link_target_untouched "outside.txt: $(head -c 200 outside.txt)"

finish
