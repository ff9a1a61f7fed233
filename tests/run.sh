#!/usr/bin/env bash
# run.sh — runs every test program and script, counts their PASS/FAIL/SKIP lines and ends with
# "N passed, N failed, N skipped". Usage: tests/run.sh BUILD_DIR [gpu]
#   unit tests:  BUILD_DIR/tests/test_*          (C programs, tests/harness.h)
#   CLI tests:   tests/cli/test_*.sh             (bash, tests/cli/lib.sh)
#   slurm tests: tests/slurm/test_*.sh           (bash, start a throwaway cluster themselves)
# A program that exits non-zero without printing a FAIL line is counted as one failure, so a
# crash can never pass silently. With "gpu", only the tests whose names contain "gpu" run and a
# GPU is required (CT_REQUIRE_GPU=1 turns their skips into failures). With "unit-cli", the
# Slurm tests are left out (make asan).
set -u
build=${1:-build}
mode=${2:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
export CTRAIN="$build/ctrain" CT_ROOT="$root" CT_BUILD="$build"
export CT_TEST_TMP=$(mktemp -d /tmp/ctrain-tests.XXXXXX)
trap 'rm -rf "$CT_TEST_TMP"' EXIT

passed=0 failed=0 skipped=0
failures=()

run_one() { # name, command...
    local name=$1; shift
    local log="$CT_TEST_TMP/$(basename "$name").log"
    local start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local p f s
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
    if [ "${CT_REQUIRE_GPU:-0}" = 1 ] && [ "$s" -gt 0 ]; then
        f=$((f + s)); s=0
        sed -i 's/^SKIP /FAIL (skipped, but a GPU is required) /' "$log"
    fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "FAIL $name: exited with status $rc without reporting a failure (crash?)" >>"$log"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    printf '%-40s %3d passed %3d failed %3d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $((SECONDS - start))
    grep -E '^(FAIL|SKIP) ' "$log" | sed 's/^/    /'
    if [ "$f" -gt 0 ]; then
        failures+=("$name")
        echo "    --- last lines of $name output ---"
        grep -vE '^(PASS|FAIL|SKIP) ' "$log" | tail -n 25 | sed 's/^/    | /'
    fi
}

wanted() { # name -> 0 if it belongs to this mode
    case "$mode" in
        gpu) [[ "$1" == *gpu* ]] ;;
        unit-cli) [[ "$1" != *slurm* && "$1" != test_launch* && "$1" != test_train_ranks* ]] ;;
        *) return 0 ;;
    esac
}

for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    wanted "$(basename "$t")" || continue
    run_one "unit/$(basename "$t")" "$t"
done
for dir in cli slurm; do
    for t in "$root"/tests/$dir/test_*.sh; do
        [ -f "$t" ] || continue
        wanted "$(basename "$t")" || continue
        run_one "$dir/$(basename "$t" .sh)" bash "$t"
    done
done

echo
if [ ${#failures[@]} -gt 0 ]; then echo "failed: ${failures[*]}"; fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
