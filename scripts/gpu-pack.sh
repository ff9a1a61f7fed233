#!/usr/bin/env bash
# gpu-pack.sh BUILD_DIR OUT.tar.gz [NCCL_DIR] — the GPU check's package (`make gpu-pack`, issue
# 33): everything a GPU machine that has only CUDA, cuBLAS, NCCL, Python with PyTorch and
# compute-sanitizer needs to run scripts/gpu-check.sh, made on a machine without a GPU. GPU time
# comes in short leases on machines with no network and none of the build's libraries, so the
# package carries them; it is built here and unpacked there.
#
# One top folder, ctrain-gpu-pack/, laid out like a checkout so every script runs unchanged:
#   the checkout's files (git ls-files: scripts, tests, docs, sources; the benchmarks read
#     docs/*.md and src/*/*.c as text)
#   build/ctrain, build/tests/test_gpu_*, build/bench/bench_gpu_* (those whose sources exist),
#     build/bench/bench_gpu_attention_fwd1 (the one-tile attention forward, when built)
#   bin/mpiexec (MPICH's hydra launcher) and bin/hydra_pmi_proxy, for two ranks on one machine
#   lib/   the non-system libraries all of these load (scripts/bundle_lib.sh: HDF5, OpenBLAS,
#          MPICH, PMI2, SentencePiece and what they pull in; not libc, the compiler runtime,
#          CUDA, cuBLAS or NCCL). The programs find it first through DT_RUNPATH $ORIGIN/../lib
#          (../../lib under build/tests, build/bench), which LD_LIBRARY_PATH overrides: the
#          two-rank stage puts a newer libnccl.so.2 first there.
#   nccl/  libnccl.so.2.*.xz with its LICENSE.txt and README.md from NCCL_DIR, when given: NCCL
#          >= 2.30 for two ranks on one GPU (scripts/build-nccl.sh makes one; never committed)
#   PACK.txt  the commit, uncommitted changes, build date and toolchain, nccl/ or why not
# Fails when the tarball would exceed GPU_PACK_MAX_MIB (default 60): the device tool carries at
# most 64 MiB with the working tree.
set -euo pipefail
usage="usage: gpu-pack.sh BUILD_DIR OUT.tar.gz [NCCL_DIR]"
build=$(cd "${1:?$usage}" && pwd)
out=${2:?$usage}
nccl_dir=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
max_mib=${GPU_PACK_MAX_MIB:-60}
exe="$build/ctrain"
[ -x "$exe" ] || { echo "gpu-pack: $exe is not built (run make first)" >&2; exit 1; }
command -v patchelf >/dev/null || { echo "gpu-pack: patchelf is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! "$exe" --version | grep -q '^cuda: yes'; then
    echo "gpu-pack: $exe was built without CUDA ($("$exe" --version | grep '^cuda:' || echo 'no cuda line')): install" \
         "the CUDA toolkit (nvcc on CUDA_HOME) and rebuild; a package without the CUDA backend checks nothing" >&2
    exit 1
fi
git -C "$root" rev-parse HEAD >/dev/null 2>&1 || { echo "gpu-pack: $root is not a git checkout" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
top="$stage/ctrain-gpu-pack"
mkdir -p "$top"
# the checkout's files as they are now (tracked, and new ones not ignored)
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r sh -c \
    'for f; do [ -f "$f" ] && printf "%s\0" "$f"; done' sh | tar -c --null -T - -f -) | tar -x -C "$top"

# the programs: the GPU test programs and benchmarks whose sources exist (a build folder may
# hold stale ones), ctrain, and MPICH's launcher
programs=("$exe")
for src in "$root"/tests/unit/test_gpu*.c; do
    b="$build/tests/$(basename "$src" .c)"
    [ -x "$b" ] || { echo "gpu-pack: $b is not built (run make all)" >&2; exit 1; }
    programs+=("$b")
done
for src in "$root"/tests/bench/bench_gpu*.c; do
    b="$build/bench/$(basename "$src" .c)"
    [ -x "$b" ] || { echo "gpu-pack: $b is not built (run make all)" >&2; exit 1; }
    programs+=("$b")
done
[ -x "$build/bench/bench_gpu_attention_fwd1" ] && programs+=("$build/bench/bench_gpu_attention_fwd1")
mpiexec=$(command -v mpiexec.hydra || true)
proxy=$(command -v hydra_pmi_proxy || true)
launchers=()
if [ -n "$mpiexec" ] && [ -n "$proxy" ]; then launchers=("$mpiexec" "$proxy")
else echo "gpu-pack: note: MPICH's mpiexec.hydra / hydra_pmi_proxy not found: the package has no launcher" \
          "(the two-rank stage then needs one on the GPU machine)" >&2; fi

source "$root/scripts/bundle_lib.sh"
count=$(bundle_copy_libs "$top/lib" "${programs[@]}" ${launchers[@]+"${launchers[@]}"})
for p in "${programs[@]}"; do
    rel=${p#"$build"/}
    case $rel in */*) libpath='$ORIGIN/../../lib' ;; *) libpath='$ORIGIN/../lib' ;; esac
    bundle_add_program "$p" "$top/build/$rel" "$libpath" runpath
done
for p in ${launchers[@]+"${launchers[@]}"}; do
    bundle_add_program "$p" "$top/bin/$(basename "$p")" '$ORIGIN/../lib' runpath
done
# hydra starts its proxy from its own folder; `mpiexec` is the name users type
[ -e "$top/bin/mpiexec.hydra" ] && ln -s mpiexec.hydra "$top/bin/mpiexec"

nccl_note="none: no NCCL_DIR given (the two-rank stage needs NCCL >= 2.30 on one GPU: scripts/build-nccl.sh)"
if [ -n "$nccl_dir" ]; then
    lib=$(ls "$nccl_dir"/libnccl.so.2.*.xz 2>/dev/null | head -1)
    [ -n "$lib" ] || { echo "gpu-pack: $nccl_dir holds no libnccl.so.2.*.xz" >&2; exit 1; }
    mkdir -p "$top/nccl"
    cp "$lib" "$top/nccl/"
    for f in LICENSE.txt README.md; do [ -f "$nccl_dir/$f" ] && cp "$nccl_dir/$f" "$top/nccl/"; done
    nccl_note="nccl/$(basename "$lib") (from $nccl_dir)"
fi

commit=$(git -C "$root" rev-parse HEAD)
changes=$(git -C "$root" status --porcelain --untracked-files=no | wc -l)
{
    echo "ctrain GPU check package (scripts/gpu-pack.sh; run: bash scripts/gpu-check.sh --help)"
    echo "commit: $commit$([ "$changes" -gt 0 ] && echo " + $changes uncommitted changed files")"
    echo "commit_short: $(git -C "$root" rev-parse --short=7 HEAD)$([ "$changes" -gt 0 ] && echo '+')"
    echo "subject: $(git -C "$root" log -1 --format=%s | cut -c1-160)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm), $(ldd --version | head -1)"
    echo "nvcc: $("${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version 2>/dev/null | grep -m1 '^Cuda compilation' || echo unknown)"
    echo "nccl_multi_rank: $nccl_note"
    echo "programs: ${#programs[@]}, libraries: $count, launcher: ${launchers[0]:+bin/mpiexec}"
    "$exe" --version | sed 's/^/version: /'
} >"$top/PACK.txt"

mkdir -p "$(dirname "$out")"
tar -czf "$out.tmp" -C "$stage" ctrain-gpu-pack
size=$(stat -c %s "$out.tmp")
if [ "$size" -gt $((max_mib * 1048576)) ]; then
    rm -f "$out.tmp"
    echo "gpu-pack: the package is $((size / 1048576)) MiB, over its cap of $max_mib MiB (GPU_PACK_MAX_MIB)" >&2
    exit 1
fi
mv "$out.tmp" "$out"
echo "gpu-pack: $out ($((size / 1048576)) MiB; ctrain-gpu-pack/: ${#programs[@]} programs, $count libraries," \
     "${launchers[0]:+mpiexec, }nccl: $nccl_note)"
