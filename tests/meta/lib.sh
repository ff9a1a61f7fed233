# lib.sh — helpers for the meta tests (tests/meta/test_*.sh): a scratch copy of the checkout in
# which one thing is broken on purpose, the real runner run on part of that copy, and what it
# must then say. Sourced after tests/cli/lib.sh.

# copy_tree DIR: the checkout's files (no build folders, no .git, no runs) in DIR, with their
# modification times, so that a copied build folder is up to date against them.
copy_tree() {
    mkdir -p "$1"
    (cd "$CT_ROOT" && tar -c --exclude='./build*' --exclude=./.git --exclude=./runs .) | tar -x -C "$1"
}

# keep_only DIR NAME...: in the copy DIR only these test programs ("cli/test_x", "unit/test_y",
# ...) remain, and its manifest lists only them, with the real manifest's counts and limits.
keep_only() {
    local dir=$1 name; shift
    mkdir -p "$dir/kept"
    for name in "$@"; do mv "$dir/tests/$name".* "$dir/kept/"; done
    rm -f "$dir"/tests/unit/test_*.c "$dir"/tests/cli/test_*.sh "$dir"/tests/slurm/test_*.sh "$dir"/tests/meta/test_*.sh
    : >"$dir/tests/manifest.txt"
    for name in "$@"; do
        mv "$dir/kept/$(basename "$name")".* "$dir/tests/$(dirname "$name")/"
        grep "^$name " "$CT_ROOT/tests/manifest.txt" >>"$dir/tests/manifest.txt"
    done
    rmdir "$dir/kept"
}

# plant NAME FILE OLD NEW: the deliberate bug: the literal line OLD of FILE becomes NEW (NEW may
# hold several lines). Passes NAME when OLD was there once, fails it otherwise (so a test of the
# test never passes because its bug was not planted).
plant() {
    local name=$1 file=$2 old=$3 new=$4
    if /usr/bin/python3 - "$file" "$old" "$new" <<'PY'; then pass "$name"; else fail "$name" "'$old' is not one line of $file"; fi
import sys
path, old, new = sys.argv[1:4]
lines = open(path).read().split("\n")
if lines.count(old) != 1:
    sys.exit(1)
lines[lines.index(old)] = new
open(path, "w").write("\n".join(lines))
PY
}

# fake_build DIR CTRAIN: a build folder for the copy: the given binary as ctrain, the real
# build's library (the emulator links it) and unit test programs.
fake_build() {
    mkdir -p "$1/tests"
    ln -sf "$2" "$1/ctrain"
    ln -sf "$CT_BUILD/libctrain.a" "$1/libctrain.a"
    ln -sf "$CT_BUILD"/tests/test_* "$1/tests/"
}

# expect_copy_fails NAME DIR BUILD PATTERN...: the copy's runner, on BUILD, exits non-zero and its
# output holds every PATTERN (grep -E): the broken copy is caught, and for the planted reason.
expect_copy_fails() { local name=$1 dir=$2 build=$3; shift 3; expect_programs_fail "$name" "$dir" "$build" "" "$@"; }

# expect_programs_fail NAME DIR BUILD "PROGRAM..." PATTERN...: the same for only the named test
# programs of the copy ("cli/test_x unit/test_y"; "" for all it has), each held to the manifest as
# always. The runner's output is kept in DIR.NAME.out.
expect_programs_fail() {
    local name=$1 dir=$2 build=$3 programs=$4 pattern missing="" start=$SECONDS out="$2.$1.out"; shift 4
    # shellcheck disable=SC2086 # the program names are words
    bash "$dir/tests/run.sh" "$build" all $programs >"$out" 2>&1
    local rc=$?
    echo "$name: the copy's suite ran $((SECONDS - start)) s, exit $rc"
    for pattern in "$@"; do grep -qE -- "$pattern" "$out" || missing+=" /$pattern/"; done
    if [ $rc -eq 0 ]; then fail "$name" "the runner passed the broken copy: $(tail -c 600 "$out")"
    elif [ -n "$missing" ]; then fail "$name" "the runner failed, but its output lacks$missing: $(grep -E '^ *FAIL' "$out" | head -c 900)"
    else pass "$name"; fi
}
