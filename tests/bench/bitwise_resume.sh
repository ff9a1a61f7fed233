# bitwise_resume.sh — sourced by the GPU stages' scripts (record_gpu.sh, frontier_gpu.sh): one exact
# resume check. bitwise_resume CTRAIN WORK NAME STOP STEP -- TRAIN_ARGS...: an uninterrupted run and
# a run stopped by SIGTERM at STOP (CTRAIN_FAULT=TERM@STOP; it must exit 75) and started again,
# both with TRAIN_ARGS (which make a checkpoint at STEP); prints what it compared and
# "BENCH NAME 1|0"; returns 1 when the losses or the step-STEP checkpoints differ.
bitwise_resume_losses() { grep -o '"train_loss": [^,}]*' "$1/metrics.jsonl" | cut -d' ' -f2; }
bitwise_resume() {
    local ctrain=$1 work=$2 name=$3 stop=$4 step=$5
    shift 6
    local full="$work/$name-full" part="$work/$name-part" rc=0 one=1 ckpt
    ckpt=$(printf 'checkpoints/step_%08d.h5' "$step")
    "$ctrain" train "$@" out_dir="$full" >"$full.log" 2>&1 || { tail -20 "$full.log"; return 1; }
    CTRAIN_FAULT=TERM@$stop "$ctrain" train "$@" out_dir="$part" >"$part.log" 2>&1 || rc=$?
    [ $rc -eq 75 ] || { echo "the interrupted run exited $rc, expected 75 (stopped, requeue)"; tail -20 "$part.log"; return 1; }
    "$ctrain" train "$@" out_dir="$part" >>"$part.log" 2>&1 || { tail -20 "$part.log"; return 1; }
    grep -E '^(stopped at|resumed from|layer_loop:enabled)' "$part.log" | sed 's/^/  /'
    if [ "$(bitwise_resume_losses "$full")" = "$(bitwise_resume_losses "$part")" ] && [ -n "$(bitwise_resume_losses "$part")" ]; then
        echo "  losses of all $step steps: bitwise equal"
    else
        one=0; echo "  losses differ:"; paste <(bitwise_resume_losses "$full") <(bitwise_resume_losses "$part") | sed 's/^/    /'
    fi
    if "$ctrain" ckpt diff --exact "$full/$ckpt" "$part/$ckpt" >"$work/$name-diff.txt" 2>&1; then
        echo "  step-$step checkpoints: $(grep -m1 'bitwise equal' "$work/$name-diff.txt" | sed 's/^ *//')"
    else
        one=0; echo "  step-$step checkpoints differ:"; tail -8 "$work/$name-diff.txt" | sed 's/^/    /'
    fi
    echo "BENCH $name $one"
    [ $one -eq 1 ]
}
