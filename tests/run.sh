#!/usr/bin/env bash
# run.sh — runs every test program and script, each under its time limit, holds each to
# tests/manifest.txt and ends with "N passed, N failed, N skipped".
# Usage: tests/run.sh BUILD_DIR [all|gpu|unit-cli] [PROGRAM...]
#   unit tests:  tests/unit/test_*.c, run as BUILD_DIR/tests/test_*   (C programs, tests/harness.h)
#   CLI tests:   tests/cli/test_*.sh                                    (bash, tests/cli/lib.sh)
#   slurm tests: tests/slurm/test_*.sh        (bash, start a throwaway cluster themselves)
#   meta tests:  tests/meta/test_*.sh         (broken copies of the suite must fail it)
#
# Why a manifest: counting PASS/FAIL/SKIP lines alone lets a broken test pass by accident (a
# program that exits 0 early, prints nothing, or whose checker died). So the runner knows what
# should have run, from tests/manifest.txt ("<dir>/<program> <cases> <time limit s>"), and a
# program fails unless all of these hold:
#   - it is listed there, and everything listed there exists (checked both ways);
#   - it reported exactly <cases> case lines (PASS/FAIL/SKIP), or fewer and then one line
#     "SKIP <program>/rest: <why>" when the rest cannot run here (those cases count as skipped);
#   - it printed its completion line "END <program>" (harness.h's TEST_EXIT, lib.sh's finish),
#     so a program that stopped early is caught even when it exits 0;
#   - it ended within its time limit (times CT_TEST_TIME_SCALE, e.g. 4 under AddressSanitizer);
#     a hang is killed with its whole process group and named;
#   - it exited 0, or printed a FAIL line saying why not.
# CT_TEST_LOGS=DIR keeps every program's whole output there (else they go with a temporary
# folder). CT_TEST_CASES (which selects cases inside one program, tests/harness.h) must not be
# set: it would shrink the suite silently. With "gpu", only the programs whose names contain "gpu" run
# and a GPU is required (CT_REQUIRE_GPU=1 turns their skips into failures); with "unit-cli", the
# Slurm and meta tests and the CUDA emulator (which links a plain build) are left out (make asan).
# PROGRAM names (e.g. "unit/test_gpu_ops cli/test_nccl_gpu") run only those of the mode's
# programs, each held to the manifest as always (scripts/gpu-check.sh runs its stages so); a
# name that the manifest does not list for the mode is an error, so nothing is left out silently.
set -u
build=${1:-build}
mode=${2:-all}
only=("${@:3}")
root=$(cd "$(dirname "$0")/.." && pwd)
manifest=$root/tests/manifest.txt
case "$mode" in all|gpu|unit-cli) ;; *) echo "run.sh: unknown mode '$mode' (expected all, gpu or unit-cli)" >&2; exit 2 ;; esac
if [ -n "${CT_TEST_CASES:-}" ]; then
    echo "run.sh: CT_TEST_CASES is set ('$CT_TEST_CASES'); it picks cases inside one test program and would" \
         "shrink the whole suite without a word. Unset it to run the suite, or run one program with it:" \
         "CT_TEST_CASES=a,b $build/tests/test_NAME" >&2
    exit 2
fi
[ -d "$build" ] || { echo "run.sh: build folder '$build' does not exist (run make first)" >&2; exit 2; }
[ -f "$manifest" ] || { echo "run.sh: $manifest is missing" >&2; exit 2; }
build=$(cd "$build" && pwd)
scale=${CT_TEST_TIME_SCALE:-1}
[[ "$scale" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: CT_TEST_TIME_SCALE='$scale': expected a positive integer" >&2; exit 2; }
export CTRAIN="$build/ctrain" CT_ROOT="$root" CT_BUILD="$build"
export CT_TEST_TMP=$(mktemp -d /tmp/ctrain-tests.XXXXXX)
# Each program runs in a session of its own (so that a hang can be killed with all it started),
# which a Ctrl-C or a kill of the runner would not reach: the runner passes it on.
current_pgid= current_watchdog=
stop_current() {
    [ -n "$current_pgid" ] && kill -TERM -- "-$current_pgid" 2>/dev/null
    [ -n "$current_watchdog" ] && kill "$current_watchdog" 2>/dev/null
    return 0
}
# A subshell the runner forks (the watchdog below, a command substitution) runs these traps too
# when a signal reaches it before bash has reset them there: the watchdog, killed the instant its
# program ended, then removed the runner's whole log folder and failed every program after it.
# So they act only in the runner's own process; a subshell just exits.
on_exit() { [ "$BASHPID" = "$$" ] || return 0; stop_current; rm -rf "$CT_TEST_TMP"; }
trap on_exit EXIT
trap '[ "$BASHPID" = "$$" ] && echo "run.sh: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

in_mode() { # name -> 0 if it belongs to this mode
    case "$mode" in
        gpu) [[ "$1" == *gpu* ]] ;;
        unit-cli) [[ "$1" != slurm/* && "$1" != meta/* && "$1" != cli/test_cuda_emulated ]] ;;
        *) return 0 ;;
    esac
}
declare -A only_set=()
for name in ${only[@]+"${only[@]}"}; do only_set[$name]=1; done
wanted() { # name -> 0 if it runs: in this mode and, when programs were named, one of them
    in_mode "$1" && { [ ${#only[@]} -eq 0 ] || [ -n "${only_set[$1]:-}" ]; }
}

# ---- the manifest ----
declare -A expect_cases=() expect_limit=()
listed=()
line_no=0
while read -r name cases limit extra || [ -n "${name:-}" ]; do
    line_no=$((line_no + 1))
    [[ -z "${name:-}" || "$name" == \#* ]] && continue
    if ! [[ "$name" =~ ^(unit|cli|slurm|meta)/test_[a-z0-9_]+$ && "${cases:-}" =~ ^[0-9]+$ &&
            "${limit:-}" =~ ^[1-9][0-9]*$ && -z "${extra:-}" ]]; then
        echo "run.sh: $manifest:$line_no: '$name ${cases:-} ${limit:-} ${extra:-}': expected" \
             "'<unit|cli|slurm|meta>/test_<name> <cases> <time limit in seconds>'" >&2
        exit 2
    fi
    if [ -n "${expect_cases[$name]:-}" ]; then echo "run.sh: $manifest:$line_no: $name is listed twice" >&2; exit 2; fi
    expect_cases[$name]=$cases expect_limit[$name]=$limit
    wanted "$name" && listed+=("$name")
done <"$manifest"
for name in ${only[@]+"${only[@]}"}; do
    if [ -z "${expect_cases[$name]:-}" ] || ! in_mode "$name"; then
        echo "run.sh: '$name' is not a test program tests/manifest.txt lists for '$mode' (expected e.g. unit/test_gpu_ops)" >&2
        exit 2
    fi
done

passed=0 failed=0 skipped=0 expected_total=0 programs=0
failures=()
declare -A ran=()

# run_limited LIMIT LOG CMD...: runs CMD in a session of its own with its output in LOG; after
# LIMIT seconds the whole process group (the script and everything it started) is killed.
# Sets rc, and timed_out=1 when the limit ended it.
run_limited() {
    local limit=$1 log=$2; shift 2
    local flag="$log.timeout" pidfile="$log.pgid"
    rm -f "$flag" "$pidfile"
    setsid -w bash -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" >"$log" 2>&1 </dev/null &
    local pid=$!
    current_pgid=$pid # the session leader (setsid does not fork here: a background job leads no group)
    # The watchdog's sleep is ended with it (no orphan left holding the caller's output open).
    (
        trap 'kill "$nap" 2>/dev/null; exit 0' TERM
        sleep "$limit" & nap=$!
        wait "$nap"
        pgid=$(cat "$pidfile" 2>/dev/null) || exit 0
        touch "$flag"
        kill -TERM -- "-$pgid" 2>/dev/null
        sleep 5 & nap=$!
        wait "$nap"
        kill -KILL -- "-$pgid" 2>/dev/null
    ) </dev/null >/dev/null 2>&1 &
    local watchdog=$!
    current_watchdog=$watchdog
    wait "$pid"
    rc=$?
    current_pgid= current_watchdog=
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    timed_out=0
    [ -e "$flag" ] && timed_out=1
    return 0
}

run_one() { # name, command...
    local name=$1; shift
    local program=${name#*/}
    local log="$CT_TEST_TMP/${name//\//_}.log"
    local start=$SECONDS
    local cases=${expect_cases[$name]:-} limit=$((${expect_limit[$name]:-600} * scale))
    ran[$name]=1
    run_limited "$limit" "$log" "$@"
    local p f s problems=()
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    local rest=0
    rest=$(grep -c "^SKIP $program/rest: " "$log")
    if [ -z "$cases" ]; then
        problems+=("not listed in tests/manifest.txt: add '$name <cases> <time limit s>' (it reported $((p + f + s)) cases)")
    elif [ "$rest" -gt 1 ]; then
        problems+=("it skipped 'the rest' $rest times")
    elif [ "$rest" = 1 ]; then
        if [ $((p + f + s - 1)) -gt "$cases" ]; then
            problems+=("reported $((p + f + s - 1)) cases before skipping the rest, tests/manifest.txt expects $cases in all")
        else
            s=$((cases - p - f))
        fi
    elif [ $((p + f + s)) -ne "$cases" ]; then
        problems+=("reported $((p + f + s)) cases, tests/manifest.txt expects $cases")
    fi
    if [ "${CT_REQUIRE_GPU:-0}" = 1 ] && [ "$s" -gt 0 ]; then
        f=$((f + s)); s=0
        sed -i 's/^SKIP /FAIL (skipped, but a GPU is required) /' "$log"
    fi
    if [ $timed_out = 1 ]; then
        problems+=("killed after its time limit of $limit s (tests/manifest.txt): a hang?")
    elif ! grep -qx "END $program" "$log"; then
        problems+=("ended without its completion line 'END $program' (exit status $rc): it stopped early")
    elif [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        problems+=("exited with status $rc without reporting a failure (crash?)")
    fi
    local why
    for why in ${problems[@]+"${problems[@]}"}; do
        echo "FAIL $name: $why" >>"$log"
        f=$((f + 1))
    done
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    expected_total=$((expected_total + ${cases:-0})); programs=$((programs + 1))
    printf '%-40s %3d passed %3d failed %3d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $((SECONDS - start))
    [ -n "${CT_TEST_LOGS:-}" ] && mkdir -p "$CT_TEST_LOGS" && cp "$log" "$CT_TEST_LOGS/"
    grep -E '^(FAIL|SKIP) ' "$log" | sed 's/^/    /'
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        echo "    --- last lines of $name output ---"
        grep -vE '^(PASS|FAIL|SKIP|END) ' "$log" | tail -n 25 | sed 's/^/    | /'
    fi
}

for src in "$root"/tests/unit/test_*.c; do
    [ -f "$src" ] || continue
    t=$(basename "$src" .c)
    wanted "unit/$t" || continue
    if [ -x "$build/tests/$t" ]; then run_one "unit/$t" "$build/tests/$t"
    else
        ran[unit/$t]=1 failed=$((failed + 1)) failures+=("unit/$t")
        echo "unit/$t: FAIL: $build/tests/$t was not built (tests/unit/$t.c exists)"
    fi
done
for dir in cli slurm meta; do
    for t in "$root"/tests/$dir/test_*.sh; do
        [ -f "$t" ] || continue
        wanted "$dir/$(basename "$t" .sh)" || continue
        run_one "$dir/$(basename "$t" .sh)" bash "$t"
    done
done
for name in ${listed[@]+"${listed[@]}"}; do
    [ -n "${ran[$name]:-}" ] && continue
    echo "$name: FAIL: listed in tests/manifest.txt but there is no such test program"
    failed=$((failed + 1)) failures+=("$name")
done

echo
if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
echo "manifest: $programs programs run of ${#listed[@]} listed for '$mode'${only[0]:+ and named}; $((passed + failed + skipped)) case results," \
     "$expected_total cases expected"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
