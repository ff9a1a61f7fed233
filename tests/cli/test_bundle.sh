#!/usr/bin/env bash
# test_bundle.sh — scripts/bundle.sh (`make bundle`): the tarball unpacked elsewhere runs on its
# own libraries: `ldd` resolves HDF5, OpenBLAS, MPICH, PMI2, SentencePiece and their dependencies
# inside the bundle (the copies here are found first through its RPATH), and `ctrain --version`,
# a tiny training run, `ckpt verify` and `plot` work from there with the source tree out of reach.
source "$CT_ROOT/tests/cli/lib.sh"
if ! command -v patchelf >/dev/null; then skip_rest "patchelf is not installed (scripts/install-deps.sh)"; fi

expect_ok bundle_made bash "$CT_ROOT/scripts/bundle.sh" "$CT_BUILD" "$WORK/b/ctrain.tar.gz"
mkdir -p unpacked && tar -xzf b/ctrain.tar.gz -C unpacked || fail bundle_unpacks "tar failed"
top=$(ls -d "$WORK"/unpacked/ctrain-*-linux-*)
[ -x "$top/bin/ctrain" ] && [ -d "$top/lib" ] && [ -d "$top/slurm" ] && [ -f "$top/scripts/plot_runs.py" ] \
    && pass bundle_layout || fail bundle_layout "$(ls -R unpacked | head -20)"
exe="$top/bin/ctrain"

ldd "$exe" >ldd.out 2>&1
for lib in libhdf5 libopenblas libmpich libpmi2 libsentencepiece libgomp libsz; do
    path=$(awk -v l="$lib" 'index($1, l) == 1 {print $3}' ldd.out)
    if [ -z "$path" ]; then skip "bundle_resolves_$lib" "the build does not use $lib"; continue; fi
    case "$(readlink -f "$path")" in
        "$top"/lib/*) pass "bundle_resolves_$lib" ;;
        *) fail "bundle_resolves_$lib" "$lib resolves to $path, outside the bundle" ;;
    esac
done
if grep -q 'not found' ldd.out; then fail bundle_nothing_missing "$(grep 'not found' ldd.out)"; else pass bundle_nothing_missing; fi
outside=$(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' ldd.out | grep -v "^[^ ]* $top/" \
    | grep -vE '^(ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.' || true)
[ -z "$outside" ] && pass bundle_only_system_outside || fail bundle_only_system_outside "$outside"

# run from elsewhere, with nothing of the checkout reachable
mv "$top" "$WORK/moved-bundle" && exe="$WORK/moved-bundle/bin/ctrain"
cd /tmp
expect_ok bundle_version env -u LD_LIBRARY_PATH "$exe" --version
expect_grep bundle_version_hdf5 '^hdf5: 1\.' "$WORK/out"
cd "$WORK"
"$exe" data from-text --out train.h5 --val-out val.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || fail bundle_data "from-text failed"
expect_ok bundle_trains env -u LD_LIBRARY_PATH "$exe" train train_files=train.h5 val_files=val.h5 vocab_size=256 \
    num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16 train_batch_tokens=256 grad_accum_slots=2 \
    iterations=3 val_loss_every=0 threads=1 out_dir=run
expect_ok bundle_verifies "$exe" ckpt verify run
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    expect_ok bundle_plots "$exe" plot run
else
    skip bundle_plots "matplotlib not importable"
fi

finish
