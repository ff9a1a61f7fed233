#!/usr/bin/env bash
# install-deps.sh — installs (as root) or reports (otherwise) what ctrain needs on Debian 12.
#   scripts/install-deps.sh          build + run: compiler, zlib, zstd, brotli, HDF5, OpenBLAS (OpenMP), MPICH, PMI2,
#                                    lrzip (the gptq-pergroup golf artifact runs it), brotli (the build
#                                    measures ctrain's code size with it),
#                                    SentencePiece + a C++ compiler (`--tokenizer MODEL.model`),
#                                    matplotlib (`ctrain plot`), patchelf (`make bundle`)
#   scripts/install-deps.sh --test   also what the tests use: h5dump, h5py/numpy, PyTorch
#                                    (parity tests), Python SentencePiece (tokenizer tests),
#                                    Python zstandard and brotli (the int6+zstd and gptq-brotli
#                                    golf artifacts' readers),
#                                    Slurm + munge (multi-rank tests)
# Idempotent and quick when everything is present. Not root and something missing: prints the
# apt-get line to run and how to point the build at libraries installed elsewhere, exits 1.
# CUDA is optional and never installed here: the build uses it when $CUDA_HOME/bin/nvcc exists.
set -euo pipefail

build_pkgs=(gcc make pkg-config libc6-dev zlib1g-dev libzstd-dev libbrotli-dev libhdf5-dev hdf5-tools libopenblas-openmp-dev libmpich-dev mpich
            python3-matplotlib patchelf lrzip brotli
            libpmi2-0-dev libsentencepiece-dev g++ libcjson-dev)
# libopenblas0-pthread: a test checks that a pthreads OpenBLAS gives ctrain the same bits. Note
# that Debian then makes it the default libblas.so.3 for other programs (numpy, PyTorch) by its
# alternatives priority; ctrain itself always loads the OpenMP build it was linked with (rpath).
test_pkgs=(python3 python3-h5py python3-numpy python3-torch python3-sentencepiece python3-zstandard python3-brotli slurm-wlm slurmctld slurmd
           slurm-client munge libopenblas0-pthread)

want=("${build_pkgs[@]}")
case "${1:-}" in
    --test) want+=("${test_pkgs[@]}") ;;
    "") ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$1' (expected --test)" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    cat >&2 <<MSG
ctrain: missing Debian packages: ${missing[*]}
  install them:   sudo apt-get install -y ${missing[*]}
  or, on a cluster with modules, point the build at your installs:
    make HDF5_HOME=... OPENBLAS_HOME=... MPI_HOME=... PMI2_HOME=... SENTENCEPIECE_HOME=... ZSTD_HOME=... BROTLI_HOME=... CUDA_HOME=... NCCL_HOME=...
MSG
    exit 1
fi

echo "ctrain: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Try with the current package lists first (fast); refresh them only if that fails.
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/tmp/ctrain-apt.log 2>&1; then
    apt-get update -q >>/tmp/ctrain-apt.log 2>&1
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >>/tmp/ctrain-apt.log 2>&1; then
        tail -n 20 /tmp/ctrain-apt.log >&2
        echo "ctrain: apt-get install failed (full log: /tmp/ctrain-apt.log)" >&2
        exit 1
    fi
fi
echo "ctrain: dependencies installed" >&2
