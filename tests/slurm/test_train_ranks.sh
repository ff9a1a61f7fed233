#!/usr/bin/env bash
# test_train_ranks.sh — multi-rank CPU training on a real (throwaway) Slurm cluster:
#  - srun --mpi=pmi2 -n 1/2/4/8 give the same per-step losses (1e-5 relative; bitwise for equal W)
#  - a checkpoint written with W ranks resumes on W' (4 -> 2, 2 -> 8) with the same per-step
#    losses, and on the same W bitwise
#  - a rank killed with SIGKILL ends the job with a clear error within seconds
#  - an sbatch job preempted by a higher-priority partition, and one sent its warning signal
#    with `scancel --signal=USR1 --batch`, checkpoints, exits 75, is requeued, resumes and ends
#    with the final weights of an uninterrupted run (slurm/train-cpu.sbatch + slurm/lib.sh)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli/lib.sh"
for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL)'); do unset "$v"; done

if [ "$(id -u)" != 0 ]; then skip_rest "needs root to run slurmd"; fi
for b in munged slurmctld slurmd srun sbatch; do
    command -v "$b" >/dev/null 2>&1 || { skip_rest "$b not installed (scripts/install-deps.sh --test)"; }
done
cluster=$WORK/cluster
trap 'bash "$here/cluster.sh" stop "$cluster" >/dev/null 2>&1' EXIT
if ! bash "$here/cluster.sh" start "$cluster" --nodes 2 >"$WORK/cluster.log" 2>&1; then
    fail cluster_start "$(tail -n 20 "$WORK/cluster.log")"; exit 1
fi
. "$cluster/env.sh"

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.1 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail data "from-text"; exit 1; }
cfg=(train_files="$WORK/train.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=3 model_dim=32 num_heads=4
     num_kv_heads=2 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=8 val_batch_size=512 iterations=8
     warmdown_iters=3 muon_momentum_warmup_steps=4 val_loss_every=4 checkpoint_every=2 threads=1
     collective_timeout=60)

losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r["step"], "train" if "train_loss" in r else "val", repr(r.get("train_loss", r.get("val_loss"))))' "$1"; }
close_to() { # name, a.jsonl, b.jsonl: same steps, every loss within 1e-5 relative
    /usr/bin/python3 - "$2" "$3" <<'PY' && pass "$1" || fail "$1" "$(cat "$WORK/close.err")"
import json, sys
def rows(p):
    return [(r["step"], "train_loss" in r, r.get("train_loss", r.get("val_loss"))) for r in map(json.loads, open(p))]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
err = open(sys.argv[0] if False else "/dev/null", "w")
msg = None
if [x[:2] for x in a] != [x[:2] for x in b]:
    msg = f"different steps: {[x[:2] for x in a]} vs {[x[:2] for x in b]}"
else:
    worst = max(abs(x[2] - y[2]) / abs(y[2]) for x, y in zip(a, b))
    print(f"worst relative difference {worst:.2e}")
    if worst > 1e-5:
        msg = f"worst relative difference {worst:.2e} > 1e-5"
if msg:
    open(__import__("os").environ["WORK"] + "/close.err", "w").write(msg)
    sys.exit(1)
PY
}
export WORK
train() { # out_dir, W, extra args... (runs across both nodes when W > 4)
    local out=$1 w=$2; shift 2
    timeout 300 srun --mpi=pmi2 --kill-on-bad-exit=1 -n "$w" -c 1 "$CTRAIN" train "${cfg[@]}" out_dir="$out" "$@" \
        >"$out.log" 2>&1
}

# ---- same losses for every world size ----
for w in 1 2 4 8; do
    if train "w$w" "$w"; then pass "train_w$w"; else fail "train_w$w" "exit $?: $(tail -5 "w$w.log")"; fi
done
expect_grep rank_map_printed '^4 ranks \(pmi2\): rank map \(rank=host/local_rank\): 0=n' w4.log
for w in 2 4 8; do close_to "losses_w${w}_match_w1" w1/metrics.jsonl "w$w/metrics.jsonl"; done
train w2b 2 && expect_same bitwise_same_world losses "$(losses w2/metrics.jsonl)" "$(losses w2b/metrics.jsonl)"
"$CTRAIN" ckpt diff --exact w2/checkpoints/step_00000008.h5 w2b/checkpoints/step_00000008.h5 >/dev/null 2>&1 \
    && pass bitwise_same_world_weights || fail bitwise_same_world_weights "final checkpoints differ"

# ---- elastic resume: stop with W ranks at step 3, resume with W' ----
elastic() { # name, W, W'
    CTRAIN_FAULT="TERM@4.0" train "$1" "$2"
    local rc=$?
    [ $rc = 75 ] && pass "$1_stopped_75" || fail "$1_stopped_75" "exit $rc: $(tail -3 "$1.log")"
    cp "$1.log" "$1.first.log"
    train "$1" "$3" && pass "$1_resumed" || fail "$1_resumed" "$(tail -5 "$1.log")"
    expect_grep "$1_note" "written by $2 rank\(s\), this run has $3" "$1.log"
    close_to "$1_losses_match" w1/metrics.jsonl "$1/metrics.jsonl"
}
elastic w4to2 4 2
elastic w2to8 2 8
CTRAIN_FAULT="TERM@4.0" train w2to2 2 >/dev/null; train w2to2 2
expect_same resume_same_world_bitwise losses "$(losses w2/metrics.jsonl)" "$(losses w2to2/metrics.jsonl)"

# ---- a rank killed with SIGKILL ends the job fast, with a clear error ----
start=$SECONDS
CTRAIN_FAULT="KILL@3.0%2" train killed 4
rc=$?
took=$((SECONDS - start))
[ $rc -ne 0 ] && pass killed_rank_fails_job || fail killed_rank_fails_job "exit 0"
[ $took -lt 30 ] && pass killed_rank_fast || fail killed_rank_fast "took ${took}s"
expect_grep killed_rank_message 'task 2.*(Killed|signal 9)|rank 2|Killed' killed.log

# ---- a bad token in a file another rank checks: every rank stops before step 1, rank 0 names it
# and the rank that found it ----
mkdir -p badtok && cp train.h5 badtok/a.h5 && /usr/bin/python3 -c '
import h5py, numpy as np
with h5py.File("badtok/b.h5", "w") as f:
    d = f.create_dataset("tokens", data=np.array([7] * 3000 + [999] + [8] * 99, dtype=np.uint16))
    d.attrs["vocab_size"] = 256
' || fail make_badtok "h5py"
train badtok_run 2 train_files="$WORK/badtok/*.h5"
rc=$?
[ $rc = 1 ] && pass bad_token_other_rank_fails || fail bad_token_other_rank_fails "exit $rc: $(tail -3 badtok_run.log)"
expect_grep bad_token_other_rank_named "error: rank 1 failed during the check of the training tokens: train_files: '.*badtok/b.h5': token 3000 of /tokens is 999, which is >= vocab_size 256" badtok_run.log
if grep -q '^step 1/' badtok_run.log; then fail bad_token_before_step_1 "it trained: $(grep -m1 '^step 1/' badtok_run.log)"
else pass bad_token_before_step_1; fi

# ---- device=cuda with 2 ranks on nodes without GPUs: every rank fails at once, before any data
# is read, naming itself; nothing is written ----
start=$SECONDS
CUDA_VISIBLE_DEVICES="" train nogpu 2 device=cuda
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $((SECONDS - start)) -lt 30 ] && pass cuda_without_gpu_fails_fast \
    || fail cuda_without_gpu_fails_fast "exit $rc after $((SECONDS - start)) s: $(tail -3 nogpu.log)"
expect_grep cuda_without_gpu_message \
    'error: rank [01] \(n[12]\): device = cuda: (no CUDA device found|this ctrain was built without CUDA)' nogpu.log
if grep -qE '^(train data|step 1/)' nogpu.log || ls nogpu/checkpoints/step_*.h5 >/dev/null 2>&1; then
    fail cuda_without_gpu_nothing_done "$(grep -m1 -E '^(train data|step 1/)' nogpu.log)"
else pass cuda_without_gpu_nothing_done; fi
# nccl=off cannot carry a multi-GPU job: a configuration error (exit 2) before any GPU is touched
train nccl_off 2 device=cuda nccl=off
rc=$?
[ $rc = 2 ] && pass nccl_off_refused || fail nccl_off_refused "exit $rc: $(tail -3 nccl_off.log)"
expect_grep nccl_off_message 'nccl = off with device = cuda and 2 ranks' nccl_off.log

# ---- stop_before_job_end: a step with a 1-minute limit stops itself 50 s before its end ----
start=$SECONDS
timeout 120 srun --mpi=pmi2 -n 2 -c 1 -t 1 "$CTRAIN" train "${cfg[@]}" iterations=1000000 val_loss_every=0 \
    checkpoint_every=0 stop_before_job_end=50 out_dir=deadline >deadline.log 2>&1
rc=$?
[ $rc = 75 ] && [ $((SECONDS - start)) -lt 40 ] && pass deadline_stops_75 \
    || fail deadline_stops_75 "exit $rc after $((SECONDS - start)) s: $(tail -3 deadline.log)"
expect_grep deadline_end_time_read '^stop_before_job_end: the job ends at unix time' deadline.log
expect_grep deadline_message "\(stop_before_job_end: the job's time limit is near\): checkpoint written" deadline.log

# ---- stop_before_job_end longer than the job has left: a clear failure, not a requeue loop ----
timeout 120 srun --mpi=pmi2 -n 2 -c 1 -t 1 "$CTRAIN" train "${cfg[@]}" iterations=1000000 val_loss_every=0 \
    checkpoint_every=0 stop_before_job_end=120 out_dir=no_time >no_time.log 2>&1
rc=$?
[ $rc = 1 ] && pass no_time_fails || fail no_time_fails "exit $rc (expected 1): $(tail -3 no_time.log)"
expect_grep no_time_message 'stop_before_job_end = 120 s, but the job ends in [0-9]+ s: no time to train' no_time.log
if ls no_time/checkpoints/step_*.h5 >/dev/null 2>&1; then fail no_time_no_checkpoint "$(ls no_time/checkpoints)"
else pass no_time_no_checkpoint; fi

# ---- a hung controller (slurmctld stopped) costs the start 10 s and a warning, not the run ----
start=$SECONDS
timeout 120 srun -n 1 -c 1 -t 2 bash -c 'kill -STOP $(pgrep -x slurmctld); "$0" "$@"; rc=$?; kill -CONT $(pgrep -x slurmctld); exit $rc' \
    "$CTRAIN" train "${cfg[@]}" iterations=2 val_loss_every=0 checkpoint_every=0 stop_before_job_end=5 out_dir=hung \
    >hung.log 2>&1
rc=$?
pkill -CONT -x slurmctld
[ $rc = 0 ] && [ $((SECONDS - start)) -lt 60 ] && pass hung_controller_run_goes_on \
    || fail hung_controller_run_goes_on "exit $rc after $((SECONDS - start)) s: $(tail -3 hung.log)"
expect_grep hung_controller_warned "^ctrain: warning: stop_before_job_end: no Slurm job end time \(scontrol show job [0-9]+ did not answer within 10 s\); ignored" hung.log

# ---- sbatch: preemption and the warning signal, with requeue ----
# long enough (~5 s) that the signal lands mid-run
job_cfg=("${cfg[@]/iterations=8/iterations=300}")
job_cfg=("${job_cfg[@]/checkpoint_every=2/checkpoint_every=0}")
job_cfg=("${job_cfg[@]/val_loss_every=4/val_loss_every=100}")
# the uninterrupted reference, same world size (2 ranks)
timeout 300 srun --mpi=pmi2 -n 2 -c 1 "$CTRAIN" train "${job_cfg[@]}" out_dir=jref >jref.log 2>&1 \
    && pass sbatch_reference || fail sbatch_reference "$(tail -3 jref.log)"
wait_state() { # job, regex of states, seconds
    local i s
    for ((i = 0; i < $3 * 2; i++)); do
        s=$(squeue -h -j "$1" -o %T 2>/dev/null)
        [ -z "$s" ] && s=$(sacct -n -X -j "$1" -o State 2>/dev/null | head -1 | tr -d ' ')
        [[ "$s" =~ $2 ]] && return 0
        sleep 0.5
    done
    echo "job $1 state '$s'" >&2; return 1
}
wait_step() { # metrics file, step, seconds
    local i
    for ((i = 0; i < $3 * 5; i++)); do
        grep -q "\"step\": $2, \"train_loss\"" "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    echo "no step $2 in $1 after $3 s" >&2; return 1
}
job_done() { # job id, seconds: until it left the queue
    local i
    for ((i = 0; i < $2 * 2; i++)); do
        [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 0.5
    done
    return 1
}
sbatch_job() { # name, extra ctrain args... -> job id; 2 ranks on n1
    local name=$1; shift
    sbatch --parsable -p low -N 1 -w n1 -n 2 --ntasks-per-node=2 -c 1 --output="$WORK/$name.out" \
        --export=ALL,CTRAIN_HOME="$CT_ROOT",CTRAIN="$CTRAIN",CTRAIN_LAUNCH_CHECK=0 \
        "$CT_ROOT/slurm/train-cpu.sbatch" "${job_cfg[@]}" out_dir="$WORK/$name" "$@"
}

# (a) scancel --signal=USR1 --batch: the batch shell forwards it, ctrain checkpoints, exits 75,
#     lib.sh requeues the job, the second run resumes and finishes
job=$(sbatch_job sig)
wait_state "$job" RUNNING 60 && wait_step "$WORK/sig/metrics.jsonl" 3 60
scancel --signal=USR1 --batch "$job"
job_done "$job" 240 && pass signal_job_finished || fail signal_job_finished "still queued: $(squeue -j "$job")"
expect_grep signal_forwarded 'ctrain-slurm: .*received SIGUSR1' "$WORK/sig.out"
expect_grep signal_exit_75 'stopped with a checkpoint \(exit 75\): requeueing' "$WORK/sig.out"
expect_grep signal_resumed 'resumed from .*step_[0-9]{8}\.h5' "$WORK/sig.out"
expect_grep signal_finished 'ctrain-slurm: .*restart 1: training finished \(exit 0\)' "$WORK/sig.out"
"$CTRAIN" ckpt diff --exact jref/checkpoints/step_00000300.h5 "$WORK/sig/checkpoints/step_00000300.h5" >sig.diff 2>&1 \
    && pass signal_final_weights_bitwise || fail signal_final_weights_bitwise "$(tail -4 sig.diff)"

# (b) preemption: a job in the high partition needing every CPU of n1 preempts it (REQUEUE)
job=$(sbatch_job pre)
wait_state "$job" RUNNING 60 && wait_step "$WORK/pre/metrics.jsonl" 3 60
hi=$(sbatch --parsable -p high -N 1 -w n1 -n 8 -c 1 --output="$WORK/high.out" --wrap 'sleep 3')
job_done "$job" 300 && pass preempted_job_finished || fail preempted_job_finished "still queued: $(squeue)"
expect_grep preempt_signalled 'ctrain-slurm: .*received SIG(USR1|TERM)' "$WORK/pre.out"
expect_grep preempt_checkpointed 'stopped at step [0-9]+/300 \(SIG(USR1|TERM)\): checkpoint written; exit 75' "$WORK/pre.out"
expect_grep preempt_resumed 'resumed from .*step_[0-9]{8}\.h5' "$WORK/pre.out"
restarts=$(grep -c 'training finished (exit 0)' "$WORK/pre.out")
[ "$restarts" = 1 ] && pass preempt_finished_once || fail preempt_finished_once "$restarts finish lines"
"$CTRAIN" ckpt diff --exact jref/checkpoints/step_00000300.h5 "$WORK/pre/checkpoints/step_00000300.h5" >pre.diff 2>&1 \
    && pass preempt_final_weights_bitwise || fail preempt_final_weights_bitwise "$(tail -4 pre.diff)"

# (c) submitted by path from another directory, without CTRAIN_HOME: slurm/lib.sh is found beside
#     the original script, and the relative --config and out_dir are the submit directory's
mkdir -p "$WORK/elsewhere"
printf '%s\n' "${job_cfg[@]}" | sed 's/=/ = /' >"$WORK/elsewhere/run.conf"
job=$(cd "$WORK/elsewhere" && env -u CTRAIN_HOME sbatch --parsable -p low -N 1 -w n1 -n 2 --ntasks-per-node=2 -c 1 \
    --output=elsewhere.out --export=ALL,CTRAIN="$CTRAIN",CTRAIN_LAUNCH_CHECK=0 \
    "$CT_ROOT/slurm/train-cpu.sbatch" --config run.conf out_dir=rel_out iterations=4)
job_done "$job" 120 && pass elsewhere_job_finished || fail elsewhere_job_finished "still queued: $(squeue -j "$job")"
expect_grep elsewhere_trained 'ctrain-slurm: .*training finished \(exit 0\)' "$WORK/elsewhere/elsewhere.out"
[ -f "$WORK/elsewhere/rel_out/checkpoints/step_00000004.h5" ] && pass elsewhere_relative_out_dir \
    || fail elsewhere_relative_out_dir "$(ls -R "$WORK/elsewhere" | head; tail -5 "$WORK/elsewhere/elsewhere.out")"

# (d) a sweep (slurm/submit --array): one array job, each task trains its own out_dir with its keys
(cd "$WORK/elsewhere" && CTRAIN=$CTRAIN CTRAIN_LAUNCH_CHECK=0 "$CT_ROOT/slurm/submit" --cpu --name sw \
    --sbatch "-p low -N 1 -w n1 -n 2 --ntasks-per-node=2 -c 1" --array "matrix_lr=0.02,0.03" \
    run.conf out_dir=sweep iterations=4) >sweep.submit 2>&1
job=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' sweep.submit)
if [ -n "$job" ] && job_done "$job" 180; then pass sweep_jobs_finished
else fail sweep_jobs_finished "job '${job}': $(tail -c 300 sweep.submit) $(squeue 2>&1 | tail -3)"; fi
ok=0
for t in 0-matrix_lr=0.02 1-matrix_lr=0.03; do
    d=$WORK/elsewhere/sweep/$t
    [ -f "$d/checkpoints/step_00000004.h5" ] && grep -qx "matrix_lr = ${t#*=}" "$d/config.txt" && ok=$((ok + 1))
done
[ $ok = 2 ] && pass sweep_tasks_own_out_dirs \
    || fail sweep_tasks_own_out_dirs "$(ls -R "$WORK/elsewhere/sweep" 2>&1 | head; tail -5 "$WORK"/elsewhere/sweep/slurm-*_0.out 2>&1)"
expect_grep sweep_task_logged 'ctrain-slurm: .*array task 1: matrix_lr=0\.03 out_dir=sweep/1-matrix_lr=0\.03' \
    "$WORK/elsewhere/sweep/slurm-${job}_1.out"

finish
