#!/usr/bin/env bash
# test_runner.sh — tests/run.sh itself, on fake suites in scratch trees (the real runner and
# lib.sh beside shell scripts standing in for test programs). A sound suite passes with the
# totals of its manifest; each broken copy of it has one way a test can go wrong without
# reporting a failure itself, and the runner must fail and name it: a program that stops early
# with exit 0, one that prints nothing, one that hangs (killed with everything it started), one
# missing from the manifest, a manifest entry without a program, a case short, a crash without a
# FAIL line, a unit test that was not built, too many cases before "the rest" is skipped, a
# malformed manifest, and CT_TEST_CASES left in the environment; and an interrupted runner
# stops the program it was running. Programs named on the command line run alone.
source "$CT_ROOT/tests/cli/lib.sh"

# sound DIR: a fresh fake tree with the sound suite: a unit program with two passing cases, a
# CLI script with a pass and a skip, one that skips the rest after one case of three.
sound() {
    local d=$WORK/$1
    mkdir -p "$d/tests/cli" "$d/tests/unit" "$d/build/tests"
    cp "$CT_ROOT/tests/run.sh" "$d/tests/"
    cp "$CT_ROOT/tests/cli/lib.sh" "$d/tests/cli/"
    ln -s "$CTRAIN" "$d/build/ctrain"
    unit "$d" test_good 'echo "PASS test_good/a"; echo "PASS test_good/b"; echo "END test_good"'
    script "$d" test_fine 'pass one; skip two "not here"; finish'
    script "$d" test_partial 'pass one; skip_rest "a tool is missing"'
    printf '# program cases limit\nunit/test_good 2 20\ncli/test_fine 2 20\ncli/test_partial 3 20\n' >"$d/tests/manifest.txt"
}
# script DIR NAME BODY: tests/cli/NAME.sh, sourcing lib.sh, then BODY
script() { printf 'source "$CT_ROOT/tests/cli/lib.sh"\n%s\n' "$3" >"$1/tests/cli/$2.sh"; }
# unit DIR NAME BODY: a unit test "program" (tests/unit/NAME.c and a built build/tests/NAME)
unit() {
    : >"$1/tests/unit/$2.c"
    printf '#!/usr/bin/env bash\n%s\n' "$3" >"$1/build/tests/$2"
    chmod +x "$1/build/tests/$2"
}
list() { echo "$2" >>"$1/tests/manifest.txt"; }

# run_suite NAME [env...]: the runner on $WORK/NAME; output in NAME.out, exit status in rc
run_suite() {
    local name=$1; shift
    env "$@" bash "$WORK/$name/tests/run.sh" "$WORK/$name/build" >"$WORK/$name.out" 2>&1
    rc=$?
}
# expect_suite_fails SUITE NAME PATTERN [env...]: the runner on SUITE exits non-zero and prints
# PATTERN (grep -E)
expect_suite_fails() {
    local suite=$1 name=$2 pattern=$3; shift 3
    run_suite "$suite" "$@"
    if [ $rc -eq 0 ]; then fail "$name" "the runner passed: $(tail -c 500 "$WORK/$suite.out")"
    elif ! grep -qE -- "$pattern" "$WORK/$suite.out"; then fail "$name" "output lacks /$pattern/: $(tail -c 700 "$WORK/$suite.out")"
    else pass "$name"; fi
}

# ---- the sound suite passes, with the manifest's totals ----
sound ok
run_suite ok
if [ $rc -eq 0 ] && grep -qx '4 passed, 0 failed, 3 skipped' ok.out &&
    grep -q "^manifest: 3 programs run of 3 listed for 'all'; 7 case results, 7 cases expected$" ok.out; then
    pass sound_suite_passes
else fail sound_suite_passes "exit $rc: $(tail -c 600 ok.out)"; fi

# ---- broken copies ----
sound early; script "$WORK/early" test_fine 'pass one; skip two "not here"; exit 0'
expect_suite_fails early stopped_early_with_exit_0 "FAIL cli/test_fine: ended without its completion line 'END test_fine' \(exit status 0\)"

sound silent; script "$WORK/silent" test_fine 'exit 0'
expect_suite_fails silent printed_nothing "FAIL cli/test_fine: reported 0 cases, tests/manifest.txt expects 2"

sound hang; script "$WORK/hang" test_hang 'pass one; sleep 611; finish'; list "$WORK/hang" 'cli/test_hang 1 2'
start=$SECONDS
expect_suite_fails hang hang_is_killed "FAIL cli/test_hang: killed after its time limit of 2 s"
[ $((SECONDS - start)) -lt 60 ] && pass hang_ends_soon || fail hang_ends_soon "the runner took $((SECONDS - start)) s"
# the script's child (sleep 611) went with it: the whole process group was killed
if pgrep -f 'sleep 611' >/dev/null; then fail hang_kills_whole_group "$(pgrep -af 'sleep 611')"; pkill -f 'sleep 611'
else pass hang_kills_whole_group; fi

# a runner that is interrupted (Ctrl-C, a job's time limit) takes the running program with it,
# though the program runs in a session of its own
sound interrupted; script "$WORK/interrupted" test_hang 'pass one; sleep 612; finish'; list "$WORK/interrupted" 'cli/test_hang 1 60'
bash "$WORK/interrupted/tests/run.sh" "$WORK/interrupted/build" >interrupted.out 2>&1 &
runner=$!
for _ in $(seq 100); do pgrep -f 'sleep 612' >/dev/null && break; sleep 0.1; done
kill -TERM "$runner"
wait "$runner"
for _ in $(seq 50); do pgrep -f 'sleep 612' >/dev/null || break; sleep 0.1; done
if pgrep -f 'sleep 612' >/dev/null; then fail interrupted_runner_stops_program "$(pgrep -af 'sleep 612')"; pkill -f 'sleep 612'
else pass interrupted_runner_stops_program; fi

sound unlisted; script "$WORK/unlisted" test_new 'pass one; finish'
expect_suite_fails unlisted unlisted_program_fails "FAIL cli/test_new: not listed in tests/manifest.txt"

sound absent; list "$WORK/absent" 'cli/test_gone 4 20'
expect_suite_fails absent listed_program_missing "cli/test_gone: FAIL: listed in tests/manifest.txt but there is no such test program"

sound short; sed -i 's#^cli/test_fine 2 20$#cli/test_fine 3 20#' "$WORK/short/tests/manifest.txt"
expect_suite_fails short case_missing "FAIL cli/test_fine: reported 2 cases, tests/manifest.txt expects 3"

sound crash; unit "$WORK/crash" test_good 'echo "PASS test_good/a"; echo "PASS test_good/b"; echo "END test_good"; kill -SEGV $$'
expect_suite_fails crash crash_without_fail_line "FAIL unit/test_good: exited with status 139 without reporting a failure"

sound unbuilt; rm "$WORK/unbuilt/build/tests/test_good"
expect_suite_fails unbuilt unit_not_built "unit/test_good: FAIL: .*/build/tests/test_good was not built"

sound rest; script "$WORK/rest" test_partial 'pass one; pass two; pass three; pass four; skip_rest "a tool is missing"'
expect_suite_fails rest too_many_before_rest "FAIL cli/test_partial: reported 4 cases before skipping the rest, tests/manifest.txt expects 3"

sound failing; script "$WORK/failing" test_fine 'pass one; fail two "wrong"; finish'
expect_suite_fails failing failing_case_fails "FAIL test_fine/two: wrong"

sound badline; list "$WORK/badline" 'cli/test_fine two 20'
expect_suite_fails badline malformed_manifest "tests/manifest.txt:5: 'cli/test_fine two 20 ': expected"

sound cases
expect_suite_fails cases ct_test_cases_refused "CT_TEST_CASES is set \('typo'\)" CT_TEST_CASES=typo

# programs named on the command line: only those run, each held to the manifest; a name the
# manifest does not list is refused
sound named; script "$WORK/named" test_partial 'exit 0'
bash "$WORK/named/tests/run.sh" "$WORK/named/build" all cli/test_fine >named.out 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qx '1 passed, 0 failed, 1 skipped' named.out &&
    grep -q "^manifest: 1 programs run of 1 listed for 'all' and named; 2 case results, 2 cases expected$" named.out; then
    pass named_programs_only
else fail named_programs_only "exit $rc: $(tail -c 600 named.out)"; fi
bash "$WORK/named/tests/run.sh" "$WORK/named/build" all cli/test_fine cli/test_nope >named.out 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "'cli/test_nope' is not a test program tests/manifest.txt lists for 'all'" named.out; then
    pass named_unknown_refused
else fail named_unknown_refused "exit $rc: $(tail -c 600 named.out)"; fi
finish
