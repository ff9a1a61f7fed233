#!/usr/bin/env bash
# test_fuzz.sh — bounded fuzzing with fixed seeds: damaged checkpoint metadata, damaged data
# file metadata and mangled config files must each end as "valid" or as a clear error (exit 1
# or 2 with "ctrain: error:"), never as a crash or a hang. A checkpoint whose damage crashes
# HDF5 itself is rejected (it is read in a child process), and resume=auto falls back past it.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
if ! "$PY" -c 'import h5py, numpy' 2>/dev/null; then skip_rest_python "h5py/numpy not importable by $PY"; fi

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || { fail make_data "from-text failed"; exit 1; }
run=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16
     train_batch_tokens=256 grad_accum_slots=4 val_loss_every=0 threads=1)
expect_ok fuzz_base_run "$CTRAIN" train "${run[@]}" iterations=4 checkpoint_every=2 keep_checkpoints=3 out_dir=base

# mutate SRC OUT_DIR COUNT SEED: COUNT copies of SRC with 1-4 bytes of HDF5 metadata changed
# (bytes outside every dataset's raw data, which checksums already guard).
mutate() {
    "$PY" - "$@" <<'PY'
import h5py, numpy as np, os, sys
src, out, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = open(src, "rb").read()
raw = np.zeros(len(data), dtype=bool)
with h5py.File(src, "r") as f:
    def mark(name, obj):
        if not isinstance(obj, h5py.Dataset): return
        d = obj.id
        if obj.chunks:
            for i in range(d.get_num_chunks()):
                c = d.get_chunk_info(i)
                raw[c.byte_offset:c.byte_offset + c.size] = True
        elif d.get_offset() is not None:
            raw[d.get_offset():d.get_offset() + d.get_storage_size()] = True
    f.visititems(mark)
meta = np.flatnonzero(~raw)
rng = np.random.default_rng(seed)
os.makedirs(out, exist_ok=True)
for k in range(count):
    b = bytearray(data)
    for pos in rng.choice(meta, size=rng.integers(1, 5), replace=False):
        b[pos] ^= int(rng.integers(1, 256))
    open(os.path.join(out, "m%03d.h5" % k), "wb").write(b)
PY
}

# judge NAME OK_CODES DIR COUNT CMD...: run CMD on each of the COUNT files in DIR; count outcomes.
# Every run must end within 60 s with an allowed exit code, and a failure must say why. DIR
# must hold exactly COUNT files: a generator that failed or made fewer judges nothing.
judge() {
    local name=$1 ok=$2 dir=$3 count=$4; shift 4
    local crashes=0 hangs=0 silent=0 valid=0 invalid=0 f rc files=()
    [ -d "$dir" ] && files=("$dir"/*)
    [ -e "${files[0]:-}" ] || files=()
    if [ ${#files[@]} -ne "$count" ]; then
        fail "$name" "$dir holds ${#files[@]} files, expected $count: the generator failed"
        return
    fi
    for f in "${files[@]}"; do
        timeout 60 "$@" "$f" >"$WORK/j.out" 2>"$WORK/j.err"
        rc=$?
        if [ $rc = 124 ]; then hangs=$((hangs + 1)); echo "hang: $f"
        elif [ $rc = 0 ]; then valid=$((valid + 1))
        elif [[ " $ok " == *" $rc "* ]]; then
            invalid=$((invalid + 1))
            grep -q 'ctrain: error: ' "$WORK/j.err" || { silent=$((silent + 1)); echo "no message: $f"; }
        else crashes=$((crashes + 1)); echo "exit $rc: $f: $(tail -c 200 "$WORK/j.err")"; fi
    done >"$WORK/$name.log"
    if [ $((crashes + hangs + silent)) = 0 ]; then pass "$name"
    else fail "$name" "$crashes crashes, $hangs hangs, $silent failures without a message: $(head -c 600 "$WORK/$name.log")"; fi
    echo "$name: $valid valid, $invalid clear errors"
}

# ---- checkpoints: 250 damaged copies of the newest ----
mutate base/checkpoints/step_00000004.h5 ckpts 250 20261122
judge fuzz_checkpoint_verify "1" ckpts 250 "$CTRAIN" ckpt verify
crashing=$(for f in ckpts/*; do "$CTRAIN" ckpt verify "$f" 2>&1 | grep -q 'crashed (signal' && echo "$f" && break; done)
if [ -z "$crashing" ]; then
    for c in fuzz_resume_past_crashing_file fuzz_resume_warns_crash fuzz_resume_falls_back; do
        skip "$c" "none of the 250 damaged files crashes HDF5 with this seed"
    done
else
    # the newest checkpoint is one that crashes HDF5: resume=auto says so and takes the one before
    cp -r base crash && cp "$crashing" crash/checkpoints/step_00000004.h5
    expect_ok fuzz_resume_past_crashing_file "$CTRAIN" train "${run[@]}" iterations=6 checkpoint_every=2 out_dir=crash
    expect_grep fuzz_resume_warns_crash "step_00000004.h5.*crashed \(signal" err
    expect_grep fuzz_resume_falls_back 'resumed from crash/checkpoints/step_00000002.h5' out
fi

# ---- data files: 250 damaged copies ----
mutate train.h5 datas 250 7
judge fuzz_data_info "1" datas 250 "$CTRAIN" data info
# training on the first 60 of them: each file is checked (in a child process) before the first step
{ echo '#!/usr/bin/env bash'
  printf 'exec %q train' "$CTRAIN"; printf ' %q' "${run[@]}"
  echo ' iterations=1 checkpoint_every=0 out_dir="$1.run" train_files="$1"'; } >train_on.sh
chmod +x train_on.sh
mkdir -p datas60 && cp $(ls datas/* | head -60) datas60/
judge fuzz_data_train "1" datas60 60 ./train_on.sh
crashing=$(for f in datas/*; do "$CTRAIN" data info "$f" 2>&1 | grep -q 'crashed (signal' && echo "$f" && break; done)
if [ -z "$crashing" ]; then
    skip fuzz_train_on_crashing_data "none of the 250 damaged data files crashes HDF5 with this seed"
else
    expect_fail fuzz_train_on_crashing_data 1 "checking the data files \(train_files '.*'; damaged HDF5 structure\?\) crashed \(signal" \
        "$CTRAIN" train "${run[@]}" iterations=1 out_dir=crashdata train_files="$crashing"
fi

# ---- config files: 200 mangled versions of a valid one ----
"$PY" - <<'PY'
import os, random
good = ("# a run\nvocab_size = 256\nnum_layers = 2\nmodel_dim = 32\nnum_heads = 4\nnum_kv_heads = 2\n"
        "train_files = \"train.h5\"\nout_dir = 'runs/#1'\nmatrix_lr = 0.04\ntie_embeddings = true\n").encode()
rng = random.Random(99)
os.makedirs("confs", exist_ok=True)
alphabet = b"=#'\"\n\r\t _0123456789.-+eE\xef\xbb\xbf\x00\x01\xffabcxyz"
for k in range(200):
    b = bytearray(good)
    for _ in range(rng.randint(1, 6)):
        op, pos = rng.random(), rng.randrange(len(b) + 1)
        if op < 0.4: b[pos:pos] = bytes([rng.choice(alphabet)])
        elif op < 0.7 and pos < len(b): del b[pos]
        elif pos < len(b): b[pos] = rng.choice(alphabet)
    open("confs/c%03d.conf" % k, "wb").write(bytes(b))
PY
judge fuzz_config_parse "2" confs 200 "$CTRAIN" train --print-config --config
finish
