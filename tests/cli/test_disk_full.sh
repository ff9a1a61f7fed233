#!/usr/bin/env bash
# test_disk_full.sh — a full disk is an error with the path and the reason (exit 1), never a
# crash, and leaves no half-written file behind: `data from-text`, `data import-bin` and a
# training run whose checkpoint does not fit, on a small tmpfs mounted here (root only).
source "$CT_ROOT/tests/cli/lib.sh"

disk="$WORK/disk"
mkdir -p "$disk"
if ! mount -t tmpfs -o size=320k tmpfs "$disk" 2>mount.err; then
    skip_rest "cannot mount a small tmpfs here (needs root): $(head -c 200 mount.err)"
fi
trap 'umount "$disk" 2>/dev/null' EXIT

# expect_full NAME CMD...: exit 1 (not a signal) with "No space left on device" on stderr, said
# once: one "ctrain: error:" line and no HDF5 error-stack dump (the library's own printing is off).
expect_full() {
    local name=$1; shift
    expect_fail "$name" 1 'No space left on device' "$@"
    local n_errors
    n_errors=$(grep -c '^ctrain: error: ' "$WORK/err")
    if [ "$n_errors" != 1 ] || grep -qE 'HDF5-DIAG|^ +#[0-9]+: ' "$WORK/err"; then
        fail "${name}_one_message" "$n_errors error lines, or an HDF5 error stack: $(head -c 400 "$WORK/err")"
    else pass "${name}_one_message"; fi
}
# no_leftovers NAME: nothing half-written on the disk (temporary files or partial outputs).
no_leftovers() {
    local left
    left=$(find "$disk" -name '*.tmp*' -o -name '*.h5' -newer mount.err -size -1k 2>/dev/null | head -5)
    if [ -z "$left" ]; then pass "$1"; else fail "$1" "left: $left"; fi
}

cat /usr/share/common-licenses/* >big.txt # ~300 KB of text: more than fits once HDF5's overhead is added
expect_full from_text_disk_full "$CTRAIN" data from-text --out "$disk/text.h5" big.txt
[ ! -e "$disk/text.h5" ] && pass from_text_no_output || fail from_text_no_output "$disk/text.h5 exists"
no_leftovers from_text_no_leftovers

/usr/bin/python3 - <<'PY'
import struct
header = struct.pack("<256i", 20240520, 1, 200000, *([0] * 253))
open("big.bin", "wb").write(header + bytes(400000))
PY
expect_full import_bin_disk_full "$CTRAIN" data import-bin --out "$disk/shards" big.bin
[ ! -e "$disk/shards/big.h5" ] && pass import_bin_no_output || fail import_bin_no_output "big.h5 exists"
no_leftovers import_bin_no_leftovers

rm -rf "${disk:?}"/*
"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 || fail make_data "from-text failed"
expect_full train_checkpoint_disk_full "$CTRAIN" train train_files=train.h5 vocab_size=256 num_layers=4 model_dim=128 \
    num_heads=4 num_kv_heads=2 train_seq_len=16 train_batch_tokens=256 grad_accum_slots=4 iterations=2 \
    val_loss_every=0 out_dir="$disk/run"
expect_grep train_disk_full_names_checkpoint "writing checkpoint '.*/run/checkpoints/step_00000002.h5'" "$WORK/err"
if ls "$disk"/run/checkpoints/step_*.h5 >/dev/null 2>&1; then fail train_disk_full_no_checkpoint "$(ls "$disk/run/checkpoints")"
else pass train_disk_full_no_checkpoint; fi
no_leftovers train_disk_full_no_leftovers

# the same with the background writer: its failure ends the run with the same message
rm -rf "${disk:?}"/run
expect_full train_async_checkpoint_disk_full "$CTRAIN" train train_files=train.h5 vocab_size=256 num_layers=4 \
    model_dim=128 num_heads=4 num_kv_heads=2 train_seq_len=16 train_batch_tokens=256 grad_accum_slots=4 iterations=2 \
    val_loss_every=0 checkpoint_async=on out_dir="$disk/run"
expect_grep train_async_disk_full_names_checkpoint "checkpoint of step 2: writing checkpoint '.*/run/checkpoints/step_00000002.h5'" "$WORK/err"
if ls "$disk"/run/checkpoints/step_*.h5 >/dev/null 2>&1; then fail train_async_disk_full_no_checkpoint "$(ls "$disk/run/checkpoints")"
else pass train_async_disk_full_no_checkpoint; fi
no_leftovers train_async_disk_full_no_leftovers

finish
