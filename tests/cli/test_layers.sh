#!/usr/bin/env bash
# test_layers.sh — dependencies point one way (docs/architecture.md): tests/check_layers.py
# passes on the tree as built, the build's per-folder include flags reject an include that runs
# up a layer, and the checker catches each kind of offence in a small tree made here (so that
# a passing check means something).
source "$CT_ROOT/tests/cli/lib.sh"
check="$CT_ROOT/tests/check_layers.py"

# ---- the real tree ----
if (cd "$CT_ROOT" && python3 "$check" . "$CT_BUILD/layers.txt") >real.out 2>&1; then pass tree_points_one_way
else fail tree_points_one_way "$(head -c 1500 real.out)"; fi

# The objects the manifest lists are the library's: every .c under the source folders, every
# .cu when the build compiled CUDA, and every .cc when it compiled the SentencePiece shim.
sources=$(cd "$CT_ROOT" && ls base/*.c src/*/*.c checkpoint/*.c kernels/*.c kernels/*/*.c 2>/dev/null | wc -l)
cuda_listed=$(grep -c '^object .*/kernels/cuda/' "$CT_BUILD/layers.txt")
[ "$cuda_listed" -gt 0 ] && sources=$((sources + $(cd "$CT_ROOT" && ls kernels/cuda/*.cu | wc -l)))
if "$CTRAIN" --version | grep -q '^sentencepiece: yes'; then
    sources=$((sources + $(cd "$CT_ROOT" && ls base/*.cc src/*/*.cc checkpoint/*.cc 2>/dev/null | wc -l)))
fi
listed=$(grep -c '^object ' "$CT_BUILD/layers.txt")
if [ "$listed" -eq "$sources" ]; then pass manifest_lists_every_object
else fail manifest_lists_every_object "$listed objects listed, $sources sources"; fi

# ---- the build's include flags ----
flags() { make -s -C "$CT_ROOT" --no-print-directory layer-flags DIR="$1" | sed "s#-I#-I$CT_ROOT/#g"; }
hdf5=$(make -s -C "$CT_ROOT" --no-print-directory flags | sed -n 's/^CFLAGS=//p' | grep -oE -- '-I[^ ]*hdf5[^ ]*' | tr '\n' ' ')
printf '#include "config.h"\n#include "model.h"\nint f(void) { return 0; }\n' >down.c
printf '#include "backend.h"\nint f(void) { return 0; }\n' >up.c
# shellcheck disable=SC2046
if cc -std=c11 -fsyntax-only $(flags src/model) $hdf5 down.c 2>down.err; then pass build_allows_include_below
else fail build_allows_include_below "$(head -c 400 down.err)"; fi
# shellcheck disable=SC2046
if cc -std=c11 -fsyntax-only $(flags src/model) $hdf5 up.c 2>up.err; then
    fail build_rejects_include_above "src/model compiled an include of src/backend/backend.h"
elif grep -q 'backend.h' up.err; then pass build_rejects_include_above
else fail build_rejects_include_above "failed for another reason: $(head -c 400 up.err)"; fi

# ---- the checker on a small tree: a (bottom) <- b (top) ----
mk_tree() { # a fresh tree in $1 with a good base
    rm -rf "$1"; mkdir -p "$1/a" "$1/b" "$1/obj/a" "$1/obj/b"
    printf 'int low(void);\n' >"$1/a/low.h"
    printf '#include "low.h"\nint low(void) { return 1; }\n' >"$1/a/low.c"
    printf 'int high(void);\n' >"$1/b/high.h"
    printf '#include "high.h"\n#include "low.h"\nint high(void) { return low() + 1; }\n' >"$1/b/high.c"
    printf 'layer a:\nlayer b: a\n' >"$1/layers.txt"
}
compile_tree() { # build every .c of the tree into obj/ and list them in the manifest
    local root=$1 c o
    for c in "$root"/a/*.c "$root"/b/*.c; do
        o="obj/$(basename "$(dirname "$c")")/$(basename "$c" .c).o"
        cc -c -I"$root/a" -I"$root/b" "$c" -o "$root/$o" || return 1
        echo "object $o" >>"$root/layers.txt"
    done
}
# expect_checker NAME WANT_RC PATTERN ROOT: run the checker on ROOT, expect its exit code and output.
expect_checker() {
    local name=$1 want=$2 pattern=$3 root=$4 rc
    python3 "$check" "$root" "$root/layers.txt" >"$name.out" 2>&1
    rc=$?
    if [ $rc -ne "$want" ]; then fail "$name" "exit $rc, expected $want: $(head -c 600 "$name.out")"
    elif ! grep -qE -- "$pattern" "$name.out"; then fail "$name" "output lacks /$pattern/: $(head -c 600 "$name.out")"
    else pass "$name"; fi
}

mk_tree t; compile_tree t
expect_checker checker_passes_good_tree 0 'no loops' t

mk_tree t; printf '#include "high.h"\n' >>t/a/low.c; compile_tree t
expect_checker checker_finds_include_up 1 '^a/low.c:3: #include "high.h" reaches b/, which a/ may not use' t

mk_tree t; printf '#include "q.h"\n' >t/b/p.h; printf '#include "p.h"\n' >t/b/q.h; compile_tree t
expect_checker checker_finds_include_loop 1 'files include each other in a loop: b/p.h -> b/q.h' t

mk_tree t
printf 'int two(void);\nint one(int n) { return n ? two() : 0; }\n' >t/b/one.c
printf 'int one(int);\nint two(void) { return one(0); }\n' >t/b/two.c
compile_tree t
expect_checker checker_finds_call_loop 1 'files call each other in a loop: .*one.o -> .*two.o \(two\)' t

mk_tree t
printf 'int high(void);\nint sneaky(void) { return high(); }\n' >t/a/sneaky.c # declares instead of including
compile_tree t
expect_checker checker_finds_call_up 1 'sneaky.o calls high of .*high.o: a/ may not use b/' t

mk_tree t; printf 'layer a: b\nlayer b: a\n' >t/layers.txt; compile_tree t
expect_checker checker_finds_table_loop 1 'layer table: folders depend on each other in a loop: a -> b' t

mk_tree t; compile_tree t; printf '#include "nowhere.h"\n' >>t/b/high.c
expect_checker checker_finds_unknown_header 1 'b/high.c:4: #include "nowhere.h" is no header of the source folders' t

finish
