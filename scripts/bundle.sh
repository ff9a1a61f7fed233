#!/usr/bin/env bash
# bundle.sh BUILD_DIR OUT.tar.gz — a relocatable ctrain: the executable, the non-system shared
# libraries it loads (HDF5, OpenBLAS, MPICH, PMI2, SentencePiece and all they pull in, as `ldd`
# resolves them here), the Slurm scripts and the plotting script, in one directory found
# through an $ORIGIN-relative RPATH, so it runs from wherever it is unpacked on a node that has
# only the C library and, for device=cuda, a CUDA driver with the CUDA runtime, cuBLAS and NCCL
# (taken from the node, which matches its driver). `make bundle` runs it.
#
# Layout of the tarball (one top directory, ctrain-VERSION-linux-ARCH/):
#   bin/ctrain     RPATH $ORIGIN/../lib first (DT_RPATH, so it also serves the libraries' own needs)
#   lib/           the copied libraries
#   slurm/         the sbatch scripts and their helpers
#   scripts/plot_runs.py, README.md, docs/
set -euo pipefail
build=${1:?usage: bundle.sh BUILD_DIR OUT.tar.gz}
out=${2:?usage: bundle.sh BUILD_DIR OUT.tar.gz}
root=$(cd "$(dirname "$0")/.." && pwd)
exe="$build/ctrain"
[ -x "$exe" ] || { echo "bundle: $exe is not built (run make first)" >&2; exit 1; }
command -v patchelf >/dev/null || { echo "bundle: patchelf is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }

version=$("$exe" --version | sed -n 's/^ctrain //p' | head -1)
name="ctrain-$version-linux-$(uname -m)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dir="$stage/$name"
mkdir -p "$dir/bin" "$dir/lib" "$dir/scripts"

# the executable with the non-system libraries it loads (scripts/bundle_lib.sh); its search path:
# the bundle's lib/ first, then the build's own (the CUDA toolkit's lib64, where a node installs
# it in the same place)
source "$root/scripts/bundle_lib.sh"
count=$(bundle_copy_libs "$dir/lib" "$exe")
bundle_add_program "$exe" "$dir/bin/ctrain" '$ORIGIN/../lib'
cp -r "$root/slurm" "$dir/slurm"
cp "$root/scripts/plot_runs.py" "$dir/scripts/"
cp -r "$root/README.md" "$root/docs" "$dir/"

mkdir -p "$(dirname "$out")"
tar -czf "$out.tmp" -C "$stage" "$name"
mv "$out.tmp" "$out"
echo "bundle: $out ($name/: bin/ctrain, $count libraries in lib/, slurm/, docs/)"
