# lib.sh — helpers for the bash tests in tests/cli, tests/slurm and tests/meta. Each check prints
# one PASS/FAIL/SKIP line that tests/run.sh counts. Source it first; $CTRAIN is the binary.
# A script ends with `finish` (its completion line: tests/run.sh fails a script that lacks it,
# i.e. one that stopped early), or with `skip_rest REASON` when nothing of it can run here; every
# path through it reports the number of cases tests/manifest.txt lists for it.
set -u
: "${CTRAIN:?run through tests/run.sh (make test)}"
# These tests check the CPU reference: device=auto (the default) must pick cpu on a GPU machine too.
export CUDA_VISIBLE_DEVICES=""
TEST_NAME=$(basename "$0" .sh)
WORK=$(mktemp -d "${CT_TEST_TMP:-/tmp}/$TEST_NAME.XXXXXX")
cd "$WORK" || exit 1

pass() { echo "PASS $TEST_NAME/$1"; }
fail() { echo "FAIL $TEST_NAME/$1: ${2:-}"; }
skip() { echo "SKIP $TEST_NAME/$1: $2"; }

# finish: the completion line, the script's last command.
finish() { echo "END $TEST_NAME"; exit 0; }
# skip_rest REASON: the script's remaining cases cannot run here (a missing tool, no GPU): one
# SKIP line that stands for all of them (tests/run.sh counts the cases the manifest lists and
# the script has not reported as skipped), then the completion line.
skip_rest() { echo "SKIP $TEST_NAME/rest: $1"; finish; }

# expect_same NAME WHAT A B: A and B (outputs of the same kind, e.g. two runs' losses) are equal
# and not empty: two empty outputs (a crashed run, a parser that printed nothing) are a failure.
expect_same() {
    if [ -z "$3" ] || [ -z "$4" ]; then fail "$1" "no $2 to compare (empty: $([ -z "$3" ] && echo first)$([ -z "$3$4" ] && echo ' and ')$([ -z "$4" ] && echo second))"
    elif [ "$3" = "$4" ]; then pass "$1"
    else fail "$1" "$2 differ: $(diff <(echo "$3") <(echo "$4") | head -6 | tr '\n' ' ')"; fi
}

# expect_ok NAME CMD... : CMD must exit 0.
expect_ok() {
    local name=$1; shift
    if "$@" >"$WORK/out" 2>"$WORK/err"; then pass "$name"
    else fail "$name" "exit $? from: $* :: $(tail -c 400 "$WORK/err")"; fi
}

# expect_fail NAME CODE PATTERN CMD... : CMD must exit CODE and print PATTERN (grep -E) on stderr.
expect_fail() {
    local name=$1 code=$2 pattern=$3; shift 3
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    if [ $rc -ne "$code" ]; then fail "$name" "expected exit $code, got $rc from: $* :: $(tail -c 400 "$WORK/err")"
    elif ! grep -qE -- "$pattern" "$WORK/err"; then fail "$name" "stderr lacks /$pattern/: $(tail -c 400 "$WORK/err")"
    else pass "$name"; fi
}

# resume_data: in $WORK, part_a.h5 and part_b.h5 (2,200 tokens of the GPL's text in two files:
# small runs cross the file boundary and wrap around) and val.h5 (the Apache License), the data
# of the resume tests; fails (1) when `data from-text` does.
resume_data() {
    head -c 1300 /usr/share/common-licenses/GPL-3 >a.txt
    tail -c 900 /usr/share/common-licenses/GPL-3 >b.txt
    "$CTRAIN" data from-text --out part_a.h5 a.txt >/dev/null 2>&1 &&
        "$CTRAIN" data from-text --out part_b.h5 b.txt >/dev/null 2>&1 &&
        "$CTRAIN" data from-text --out val.h5 /usr/share/common-licenses/Apache-2.0 >/dev/null 2>&1
}

# flip_tensor_byte FILE: damage a checkpoint inside a tensor (one bit of blocks.1.mlp.fc.weight's
# data), where only its checksums can tell; the root attributes stay readable.
flip_tensor_byte() {
    /usr/bin/python3 - "$1" <<'PY'
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    d = f["model/blocks.1.mlp.fc.weight"]
    off = d.id.get_chunk_info(0).byte_offset if d.chunks else d.id.get_offset()
with open(path, "r+b") as f:
    f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 0x10]))
PY
}

# python_with_h5py: the Python that has h5py and numpy (the system's here; on the GPU machines
# often only the one on PATH).
python_with_h5py() { if /usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null; then echo /usr/bin/python3; else echo python3; fi; }

# A comparison with PyTorch (or a check needing h5py, numpy, zstandard) that cannot run because
# Python lacks a module: skip_python CASE WHY and skip_rest_python WHY skip as skip and skip_rest
# do, except in CI (CI=true, as CI services set it; `make test` installs the modules first),
# where they fail: a parity check that quietly skips in CI checks nothing.
in_ci() { case "${CI:-}" in true|1) return 0 ;; *) return 1 ;; esac; }
skip_python() {
    if in_ci; then fail "$1" "$2, and CI=true: a check against PyTorch must run in CI"; else skip "$1" "$2"; fi
}
skip_rest_python() {
    in_ci && fail python_modules "$1, and CI=true: a check against PyTorch must run in CI"
    skip_rest "$1"
}

# expect_cuda_takes NAME CMD... : a device=cuda run of CMD accepts its configuration. With no GPU
# visible (CUDA_VISIBLE_DEVICES="" above) it gets as far as choosing its GPU and fails there,
# exit 1 naming cuda; a key it refused would have ended it before, with exit 2.
expect_cuda_takes() {
    local name=$1; shift
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    if [ $rc -ne 1 ]; then fail "$name" "expected exit 1, got $rc: $(tail -c 400 "$WORK/err")"
    elif ! grep -qi 'cuda' "$WORK/err"; then fail "$name" "stderr does not name cuda: $(tail -c 400 "$WORK/err")"
    else pass "$name"; fi
}
# check NAME PYTHON_CODE ARGS... : the Python snippet (run by $PY, /usr/bin/python3 unless the
# script set it) must exit 0; it prints its complaint otherwise, whose end is the failure's reason.
check() {
    local name=$1 code=$2
    shift 2
    if "${PY:-/usr/bin/python3}" -c "$code" "$@" >py.out 2>&1; then pass "$name"; else fail "$name" "$(tail -c 800 py.out)"; fi
}
# expect_grep NAME PATTERN FILE : FILE must contain PATTERN (grep -E).
expect_grep() {
    if grep -qE -- "$2" "$3"; then pass "$1"; else fail "$1" "/$2/ not found in $3: $(head -c 400 "$3")"; fi
}
