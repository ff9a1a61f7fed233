#!/usr/bin/env bash
# wait_policy.sh [BUILD] — how the CPU backend's OpenMP threads wait, measured on this machine
# idle and loaded (as many busy-looping processes as cores, like other jobs on a shared node):
# a 20-step training run of the demo's model and a 200-token `ctrain sample`, each under
#   spin       OMP_WAIT_POLICY=active (threads spin between parallel regions, never sleep)
#   gomp       libgomp's own default (spin 300,000 times, about a millisecond, then sleep), which
#              is what a ctrain started on a quiet machine uses
#   short      GOMP_SPINCOUNT=10000 (spin some microseconds, then sleep)
#   passive    OMP_WAIT_POLICY=passive (sleep at once)
#   ctrain     no variable set: ctrain's choice (base/omp_wait.c: OpenMP's default where the
#              machine is quiet or the process has cores of its own, passive where it is busy)
#   1thread    threads=1
# Prints "BENCH wait_<idle|loaded>_<train|sample>_<policy>_s SECONDS", the median of 3 runs; a
# run is stopped after WAIT_BENCH_LIMIT seconds (default 90) and
# reported as that limit. WAIT_POLICIES="gomp short" picks policies, WAIT_LOADED_ONLY=1 skips the
# idle runs, WAIT_LOADED_TRAIN_RUNS=1 runs each loaded training once.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ctrain-wait.XXXXXX)
busy=()
cleanup() { [ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cores=$(nproc)
echo "== machine: $cores cores; ctrain threads: all of them unless 1thread"
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | LC_ALL=C sort)
"$build/ctrain" data from-text --out "$work/train.h5" --val-out "$work/val.h5" --val-fraction 0.1 "${texts[@]}" >/dev/null
cfg=(--config "$root/scripts/demo.conf" train_files="$work/train.h5" val_files= device=cpu iterations=20
     checkpoint_every=0 val_loss_every=0 train_log_every=100)
"$build/ctrain" train "${cfg[@]}" out_dir="$work/model" iterations=2 >/dev/null

policy_env() { # policy -> env assignments
    case $1 in
        spin) echo "OMP_WAIT_POLICY=active" ;;
        gomp) echo "GOMP_SPINCOUNT=300000" ;; # libgomp's default; set, so that ctrain keeps it
        short) echo "GOMP_SPINCOUNT=10000" ;;
        passive) echo "OMP_WAIT_POLICY=passive" ;;
        ctrain|1thread) echo "" ;;
    esac
}
limit=${WAIT_BENCH_LIMIT:-90}
time_one() { # policy what -> seconds
    local p=$1 what=$2 t0 t1 threads=0 rc=0
    [ "$p" = 1thread ] && threads=1
    t0=$(date +%s.%N)
    rm -rf "$work/run-$p"
    if [ "$what" = train ]; then
        timeout "$limit" env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $(policy_env "$p") "$build/ctrain" train "${cfg[@]}" \
            threads=$threads out_dir="$work/run-$p" >/dev/null 2>&1 || rc=$?
    else
        timeout "$limit" env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OMP_NUM_THREADS $(policy_env "$p") \
            $([ $threads = 1 ] && echo OMP_NUM_THREADS=1) "$build/ctrain" sample "$work/model" --prompt "The " \
            --tokens 200 --seed 1 >/dev/null 2>&1 || rc=$?
    fi
    t1=$(date +%s.%N)
    if [ $rc = 124 ]; then echo "$limit"; return; fi
    [ $rc = 0 ] || { echo "wait_policy.sh: the $p $what run failed (exit $rc)" >&2; exit 1; }
    echo "$t1 - $t0" | bc
}
measure() { # condition, runs of train, runs of sample (the median is reported)
    local what n
    for what in train sample; do
        n=$2
        [ $what = sample ] && n=$3
        for p in ${WAIT_POLICIES:-spin gomp short passive ctrain 1thread}; do
            local times=() i
            for ((i = 0; i < n; i++)); do times+=("$(time_one $p $what)"); done
            printf 'BENCH wait_%s_%s_%s_s %.2f\n' "$1" "$what" "$p" "$(printf '%s\n' "${times[@]}" | sort -g | sed -n "$(( (n + 1) / 2 ))p")"
        done
    done
}
if [ "${WAIT_LOADED_ONLY:-0}" = 0 ]; then
    echo "== idle"
    measure idle 3 3
fi
echo "== loaded: $cores busy-looping processes"
for _ in $(seq "$cores"); do (while :; do :; done) & busy+=($!); done
measure loaded "${WAIT_LOADED_TRAIN_RUNS:-3}" 3
