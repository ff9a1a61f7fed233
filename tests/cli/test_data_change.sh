#!/usr/bin/env bash
# test_data_change.sh — a training file that changes during a run stops the run (exit 1, naming
# the file, the change and the position) at the next read, before a step on the changed tokens
# is trained or checkpointed: the file cut short (HDF5 would hand back zeros past the cut end),
# replaced by another file of the same size, and written to in place. The checkpoints made
# before the change stay, and verify.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import h5py, numpy' 2>/dev/null || skip_rest_python "h5py/numpy not importable by $PY"

# ~3 MB of text: 70 copies of two licence files, as in the report; a second corpus of the same size
for i in $(seq 70); do cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0; done >corpus.txt
tr 'a-z' 'b-za' <corpus.txt >other.txt
"$CTRAIN" data from-text --out train.h5 corpus.txt >/dev/null 2>&1 && "$CTRAIN" data from-text --out other.h5 other.txt \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
[ "$(stat -c %s train.h5)" = "$(stat -c %s other.h5)" ] && pass same_size_corpora \
    || fail same_size_corpora "$(stat -c %s train.h5) vs $(stat -c %s other.h5)"
run=(vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=64 train_batch_tokens=1024
     grad_accum_slots=2 val_loss_every=0 threads=1 iterations=100000 checkpoint_every=3 keep_checkpoints=2)

# change_during_run NAME COMMAND PATTERN: a run on a copy of train.h5 in NAME/; once it has
# trained 4 steps, COMMAND changes the file; the run must end with exit 1 and PATTERN on stderr
# within 60 s, and every checkpoint left must verify.
change_during_run() {
    local name=$1 change=$2 pattern=$3
    mkdir -p "$name" && cp train.h5 "$name/train.h5"
    "$CTRAIN" train "${run[@]}" train_files="$WORK/$name/train.h5" out_dir="$name/run" >"$name.out" 2>"$name.err" &
    local pid=$! started=0 steps
    for _ in $(seq 300); do
        steps=$(grep -c '"train_loss"' "$name/run/metrics.jsonl" 2>/dev/null)
        [ "${steps:-0}" -ge 4 ] && { started=1; break; }
        sleep 0.1
    done
    if [ $started = 0 ]; then fail "${name}_stops_run" "the run did not train 4 steps: $(tail -c 300 "$name.err")"; kill "$pid"
    else
        (cd "$name" && eval "$change")
        local waited=0
        while kill -0 "$pid" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid"
        local rc=$?
        if [ $rc = 1 ] && grep -qE -- "$pattern" "$name.err"; then pass "${name}_stops_run"
        else fail "${name}_stops_run" "exit $rc (expected 1 within 60 s), stderr: $(tail -c 500 "$name.err")"; fi
    fi
    local ckpts bad=
    ckpts=$(ls "$name"/run/checkpoints/step_*.h5 2>/dev/null)
    for c in $ckpts; do "$CTRAIN" ckpt verify "$c" >/dev/null 2>&1 || bad+=" $c"; done
    if [ -n "$ckpts" ] && [ -z "$bad" ]; then pass "${name}_checkpoints_valid"
    else fail "${name}_checkpoints_valid" "checkpoints: '$ckpts', invalid:$bad"; fi
}

change_during_run cut 'truncate -s 2300000 train.h5' \
    "data file '.*/cut/train.h5' changed while ctrain was reading it \(its size went from [0-9]+ to 2300000 bytes\), found when reading /tokens\[[0-9]+:[0-9]+\]"
change_during_run replaced 'cp ../other.h5 new.h5 && mv new.h5 train.h5' \
    "data file '.*/replaced/train.h5' changed while ctrain was reading it \(it was replaced by another file\)"
# (HDF5's file locking would keep h5py out while ctrain reads the file; a writer that ignores
# it, as on NFS or Lustre without locks, is the case to catch)
change_during_run written "HDF5_USE_FILE_LOCKING=FALSE $PY -c 'import h5py; f = h5py.File(\"train.h5\", \"r+\"); d = f[\"tokens\"]; d[1000:1100] = 65; f.close()'" \
    "data file '.*/written/train.h5' changed while ctrain was reading it \(it was written to \(modification time changed\)\)"
# Damage that keeps the size and modification time (a flipped byte in the second chunk, as a
# failing disk would leave): the chunk's Fletcher32 checksum, which ctrain's converters write,
# fails the read that meets it: in `data info`, and in a run (no start-up scan) when the loader
# reaches the chunk, with no step trained on it.
mkdir -p damaged && cp train.h5 damaged/train.h5
"$PY" - damaged/train.h5 <<'PY' || fail make_damage "h5py could not damage the file"
import h5py, os, sys
path = sys.argv[1]
st = os.stat(path)
with h5py.File(path, "r") as f:
    offset = f["tokens"].id.get_chunk_info(1).byte_offset
with open(path, "r+b") as g:
    g.seek(offset + 5000); b = g.read(1); g.seek(offset + 5000); g.write(bytes([b[0] ^ 0x20]))
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
PY
expect_fail damaged_chunk_info 1 "damaged/train.h5': cannot read /tokens\[1048576:2097152\] \(HDF5: data error detected by Fletcher32 checksum\)" \
    "$CTRAIN" data info damaged/train.h5
expect_fail damaged_chunk_stops_run 1 "damaged/train.h5': cannot read /tokens\[[0-9]+:[0-9]+\] \(HDF5: data error detected by Fletcher32 checksum\)" \
    "$CTRAIN" train "${run[@]}" iterations=3000 checkpoint_every=100 check_train_tokens=0 \
    train_files="$WORK/damaged/train.h5" out_dir=damaged/run
# 1024 + 2 tokens a step: the chunk at token 1048576 is reached in step 1022
last=$(ls damaged/run/checkpoints/step_*.h5 2>/dev/null | tail -1)
if [ -n "$last" ] && [ "$(basename "$last")" = step_00001000.h5 ] && "$CTRAIN" ckpt verify "$last" >/dev/null 2>&1
then pass damaged_chunk_checkpoints_before; else fail damaged_chunk_checkpoints_before "newest checkpoint: '$last'"; fi
finish
