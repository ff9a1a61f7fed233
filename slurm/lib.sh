# lib.sh — shared by ctrain's sbatch scripts: runs the training job step so that a
# preempted, signalled or time-limited job checkpoints and comes back.
#
#   ctrain_train_step [srun options --] ctrain-train-arguments...
#
# What it does, and why:
#  - The step runs in the background and the batch shell waits for it, so the shell can receive
#    the warning signal (#SBATCH --signal=B:USR1@120) while ctrain trains.
#  - A warning signal (CTRAIN_STOP_SIGNAL, default USR1) or SIGTERM reaching the batch shell is
#    forwarded to the step (srun passes it on to every task); ctrain finishes its step, writes a
#    checkpoint and exits 75. Preemption (PreemptMode=REQUEUE) sends the same signals.
#  - Exit 75 means "checkpointed, requeue me": unless Slurm is already requeueing the job
#    (preemption), `scontrol requeue` puts it back in the queue while SLURM_RESTART_COUNT is
#    below CTRAIN_MAX_REQUEUES (default 50). The requeued job runs the same script and ctrain
#    resumes from out_dir's newest checkpoint (resume=auto).
#  - A requeued job may start while the previous one's ranks are still finishing: ctrain waits
#    up to CTRAIN_LOCK_WAIT seconds (default 300; lock_wait) for out_dir's lock instead of
#    failing at once. A later lock_wait=... argument overrides it.
#  - Every decision is logged with a "ctrain-slurm:" prefix; --open-mode=append keeps the logs
#    of all restarts in one file.
# Environment: CTRAIN (binary; default $CTRAIN_HOME/build/ctrain, or bin/ctrain in a bundle),
# CTRAIN_HOME (default: the checkout or bundle the sbatch script was submitted from),
# CTRAIN_STOP_SIGNAL, CTRAIN_MAX_REQUEUES, CTRAIN_LOCK_WAIT, CTRAIN_SRUN_OPTS (extra srun options),
# CTRAIN_SWEEP_FILE and CTRAIN_SWEEP_DIR (set by slurm/submit --array: line SLURM_ARRAY_TASK_ID + 1
# of the file gives the task's key=value arguments; it trains into DIR/<index>-<values>),
# CTRAIN_LAUNCH_CHECK=0 to skip the launch check, CTRAIN_LAUNCH_CHECK_ARGS for its options (the GPU
# scripts set --nccl: the check then takes the path training takes, libpmi2 + GPUs + NCCL). The job runs in the directory it was submitted
# from (or sbatch --chdir).

ctrain_log() { echo "ctrain-slurm: $(date -u +%FT%TZ) job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0}: $*"; }

ctrain_setup() {
    CTRAIN_HOME=${CTRAIN_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
    if [ -z "${CTRAIN:-}" ]; then # a checkout's build, or an unpacked `make bundle`
        CTRAIN=$CTRAIN_HOME/build/ctrain
        [ -x "$CTRAIN" ] || [ ! -x "$CTRAIN_HOME/bin/ctrain" ] || CTRAIN=$CTRAIN_HOME/bin/ctrain
    fi
    CTRAIN_STOP_SIGNAL=${CTRAIN_STOP_SIGNAL:-USR1}
    CTRAIN_MAX_REQUEUES=${CTRAIN_MAX_REQUEUES:-50}
    if [ ! -x "$CTRAIN" ]; then
        ctrain_log "error: $CTRAIN is not an executable (build it with make, or set CTRAIN / CTRAIN_HOME)"
        exit 1
    fi
    # the job runs where it was submitted (or sbatch --chdir), so relative --config, data and
    # out_dir paths mean what they meant on the command line
}

# ctrain_sweep_task_dir BASE INDEX LINE: the out_dir of a sweep's task, BASE/<INDEX>-<its key
# values> (spaces to _, slashes to -), so the folder says what it trained; slurm/submit reports it.
ctrain_sweep_task_dir() { echo "$1/$2-$(printf %s "$3" | tr ' /' '_-')"; }

# Forward a signal to the running step once; srun passes it on to every task.
_ctrain_forward() {
    local sig=$1
    ctrain_log "received SIG$sig: asking ctrain to checkpoint and stop"
    [ -n "${_ctrain_step_pid:-}" ] && kill -s "$sig" "$_ctrain_step_pid" 2>/dev/null
}

ctrain_train_step() {
    local srun_opts=()
    if [[ " $* " == *" -- "* ]]; then
        while [ "$1" != "--" ]; do srun_opts+=("$1"); shift; done
        shift
    fi
    ctrain_setup
    # shellcheck disable=SC2206
    local extra=(${CTRAIN_SRUN_OPTS:-})
    if [ "${CTRAIN_LAUNCH_CHECK:-1}" != 0 ]; then
        # shellcheck disable=SC2206
        local check_args=(${CTRAIN_LAUNCH_CHECK_ARGS:-})
        if ! srun --mpi=pmi2 --kill-on-bad-exit=1 "${srun_opts[@]}" "${extra[@]}" "$CTRAIN" launch-check --timeout 120 \
            "${check_args[@]}"; then
            ctrain_log "error: launch-check failed; not starting training"
            exit 1
        fi
    fi
    # a sweep's array task (slurm/submit --array): its line of the sweep file, and its own out_dir
    # (the same on a requeue, so the task resumes its run)
    local sweep=()
    if [ -n "${CTRAIN_SWEEP_FILE:-}" ]; then
        if [ -z "${SLURM_ARRAY_TASK_ID:-}" ]; then
            ctrain_log "error: CTRAIN_SWEEP_FILE is set but this job is not an array task"
            exit 1
        fi
        local line
        line=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" "$CTRAIN_SWEEP_FILE")
        if [ -z "$line" ]; then
            ctrain_log "error: $CTRAIN_SWEEP_FILE has no line for array task $SLURM_ARRAY_TASK_ID"
            exit 1
        fi
        read -r -a sweep <<<"$line"
        sweep+=(out_dir="$(ctrain_sweep_task_dir "$CTRAIN_SWEEP_DIR" "$SLURM_ARRAY_TASK_ID" "$line")")
        ctrain_log "array task $SLURM_ARRAY_TASK_ID: ${sweep[*]}"
    fi
    trap '_ctrain_forward '"$CTRAIN_STOP_SIGNAL" "$CTRAIN_STOP_SIGNAL"
    trap '_ctrain_forward TERM' TERM
    ctrain_log "starting: $CTRAIN train $* ${sweep[*]}"
    srun --mpi=pmi2 --kill-on-bad-exit=1 "${srun_opts[@]}" "${extra[@]}" "$CTRAIN" train lock_wait="${CTRAIN_LOCK_WAIT:-300}" "$@" "${sweep[@]}" stop_signal="$CTRAIN_STOP_SIGNAL" &
    _ctrain_step_pid=$!
    local rc
    # `wait` returns early whenever a trapped signal arrives; keep waiting for the step itself.
    while :; do
        wait "$_ctrain_step_pid"
        rc=$?
        kill -0 "$_ctrain_step_pid" 2>/dev/null || break
    done
    case $rc in
        0) ctrain_log "training finished (exit 0)" ;;
        75)
            if [ "${SLURM_RESTART_COUNT:-0}" -ge "$CTRAIN_MAX_REQUEUES" ]; then
                ctrain_log "stopped with a checkpoint (exit 75), but already restarted ${SLURM_RESTART_COUNT} times (CTRAIN_MAX_REQUEUES=$CTRAIN_MAX_REQUEUES): not requeueing"
                exit 75
            fi
            ctrain_log "stopped with a checkpoint (exit 75): requeueing"
            # Preemption requeues the job by itself; then this call fails harmlessly.
            scontrol requeue "$SLURM_JOB_ID" 2>&1 | sed 's/^/ctrain-slurm: scontrol: /'
            exit 0 ;;
        2) ctrain_log "error: usage or configuration error (exit 2); see the message above" ;;
        *) ctrain_log "error: training failed (exit $rc); not requeueing" ;;
    esac
    exit "$rc"
}
