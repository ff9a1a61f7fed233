#!/usr/bin/env bash
# build-nccl.sh SOURCE [OUT_DIR] — NCCL >= 2.30 built from its source for sm_90 (H100, H200)
# with device kernels for only the collectives ctrain calls, small enough for the GPU check's
# package (issue 33 item 2). Why: two ranks can share one GPU only with NCCL 2.30's
# NCCL_MULTI_RANK_GPU_ENABLE=1, and the CUDA toolkit here (and on the GPU machines) carries NCCL
# 2.28, which refuses that ("Duplicate GPU detected"). The library is a test dependency: it goes
# into `make gpu-pack GPU_PACK_NCCL=OUT_DIR` (the default OUT_DIR, build/nccl-sm90, is where
# the Makefile looks), never into the repository.
#
# SOURCE: a checkout of NVIDIA/nccl (Apache-2.0; https://github.com/NVIDIA/nccl), or a git
# repository of it, bare or not, from which NCCL_REF (default 5067397c, version 2.30.7, the
# commit of the prebuilt copy that ../shared/nccl-2.30.7-sm90 holds) is exported.
# OUT_DIR gets libnccl.so.2.X.Y.xz (the stripped library, xz -9), LICENSE.txt and README.md
# (version, commit, the exact command). Takes long on few cores (every kernel of the chosen
# collectives for every algorithm and protocol); JOBS (default: the cores) sets make -j.
#
# The collectives (ctrain's calls, src/dist/dist_nccl.c): ncclAllReduce of float32 sums (the
# gradients, the Muon update, host values), ncclAllGather and ncclBroadcast of bytes (host
# values). Any other collective fails at run time with this library.
# The CUDA toolkit's include folder holds NCCL 2.28's own headers (nccl.h, nccl_device/), which
# shadow the source tree's and break the build: NCCL is built against a CUDA_HOME made of links
# to the toolkit's folders whose include/ leaves them out.
set -euo pipefail
usage="usage: build-nccl.sh SOURCE [OUT_DIR]   (SOURCE: NVIDIA/nccl checkout or git repository)"
src=${1:?$usage}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-$root/build/nccl-sm90}
ref=${NCCL_REF:-5067397c}
cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-$(nproc)}
only_funcs="AllReduce Sum f32 * *|AllGather * *|Broadcast * *"
gencode="-gencode=arch=compute_90,code=sm_90"
[ -x "$cuda/bin/nvcc" ] || { echo "build-nccl: no nvcc in $cuda/bin (set CUDA_HOME)" >&2; exit 1; }
for tool in make python3 xz strip; do
    command -v "$tool" >/dev/null || { echo "build-nccl: $tool is missing" >&2; exit 1; }
done

work=$(mktemp -d /tmp/build-nccl.XXXXXX)
trap 'rm -rf "$work"' EXIT
# the source tree: a checkout as it is, or the commit NCCL_REF of a repository
if [ -f "$src/makefiles/version.mk" ]; then
    tree=$(cd "$src" && pwd)
    commit=$(git -C "$tree" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout)")
elif git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    commit=$(git -C "$src" rev-parse "$ref^{commit}") || { echo "build-nccl: $src has no commit '$ref' (NCCL_REF)" >&2; exit 1; }
    mkdir -p "$work/src"
    git -C "$src" archive "$commit" | tar -x -C "$work/src"
    tree=$work/src
else
    echo "build-nccl: $src is neither an NCCL source tree (makefiles/version.mk) nor a git repository" >&2; exit 1
fi
version=$(awk '/^NCCL_(MAJOR|MINOR|PATCH)/ {v[$1] = $3} END {print v["NCCL_MAJOR"] "." v["NCCL_MINOR"] "." v["NCCL_PATCH"]}' \
    "$tree/makefiles/version.mk")
minor=$(echo "$version" | cut -d. -f2)
if [ "${version%%.*}" -lt 2 ] || { [ "${version%%.*}" -eq 2 ] && [ "$minor" -lt 30 ]; }; then
    echo "build-nccl: $src is NCCL $version; NCCL_MULTI_RANK_GPU_ENABLE needs 2.30 or later" >&2; exit 1
fi

# CUDA_HOME without the toolkit's NCCL headers
shadow=$work/cuda
mkdir -p "$shadow/include"
for entry in "$cuda"/*; do
    [ "$(basename "$entry")" = include ] || ln -s "$(readlink -f "$entry")" "$shadow/$(basename "$entry")"
done
for entry in "$(readlink -f "$cuda/include")"/*; do
    case "$(basename "$entry")" in nccl*) continue ;; esac
    ln -s "$entry" "$shadow/include/$(basename "$entry")"
done

# a build in the work folder, so a source checkout stays clean
echo "build-nccl: NCCL $version ($commit) for sm_90, collectives: $only_funcs; make -j$jobs (this takes a while)"
make -C "$tree" -j"$jobs" src.build BUILDDIR="$work/build" CUDA_HOME="$shadow" NVCC_GENCODE="$gencode" \
    ONLY_FUNCS="$only_funcs" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log"; echo "build-nccl: make failed" >&2; exit 1; }
lib="$work/build/lib/libnccl.so.$version"
[ -f "$lib" ] || { echo "build-nccl: the build made no $lib" >&2; exit 1; }
strip --strip-unneeded "$lib"
mkdir -p "$out"
rm -f "$out"/libnccl.so.2.*.xz
xz -9 -c "$lib" >"$out/libnccl.so.$version.xz"
cp "$tree/LICENSE.txt" "$out/"
cat >"$out/README.md" <<EOF
# NCCL $version for sm_90 (test dependency of ctrain's GPU check; not part of the project)

Built by ctrain's scripts/build-nccl.sh from NVIDIA/nccl at commit $commit (version $version,
Apache-2.0 with BSD parts: LICENSE.txt) with

    make -j src.build CUDA_HOME=<CUDA tree whose include/ has no nccl* headers> \\
      NVCC_GENCODE="$gencode" ONLY_FUNCS="$only_funcs"
    strip --strip-unneeded build/lib/libnccl.so.$version

Only these collectives have device kernels: AllReduce (sum, float32), AllGather and Broadcast
(all types). Use: \`xz -dk libnccl.so.$version.xz\`, its folder first on LD_LIBRARY_PATH
(soname libnccl.so.2), NCCL_MULTI_RANK_GPU_ENABLE=1 for ranks sharing a GPU.
EOF
echo "build-nccl: $out/libnccl.so.$version.xz ($(( $(stat -c %s "$out/libnccl.so.$version.xz") / 1024 )) KiB;" \
     "$(( $(stat -c %s "$lib") / 1048576 )) MiB unpacked)"
