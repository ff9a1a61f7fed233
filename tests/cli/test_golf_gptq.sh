#!/usr/bin/env bash
# test_golf_gptq.sh — `ctrain ckpt golf --format gptq-brotli`, the 1.0611 record's artifact, on a
# trained model with Hessians given in a file: its tensors equal an independent PyTorch version of
# the record's rules (tests/parity/gptq_ref.py: GPTQ levels and scales, the LQER choice and its
# factors, float16 for the rest), the weights ctrain reads back equal the record's dequantization
# in Python, the printed round-trip val_loss equals the project's PyTorch model on them; the
# artifact is the same bytes twice, KEY=VALUE changes its settings, and bad input (no Hessians,
# Hessians of another model, a damaged or 1-D Hessian, a key that is not the artifact's) is a
# clear error that writes nothing; a stop in `ckpt hessians`' calibration exits 75 leaving the
# file it would replace. gptq-pergroup: the same tensors, read by a Python reader written from the
# docs; an lrzip killed or writing nothing is said so, and the artifact it would replace stays.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
# model_dim 320, 4 KV heads: tok_emb (256 x 320) and every block matrix exceed 65,536 elements
# (GPTQ), c_k and c_v share c_q's Hessian; the gains, q_gain, resid_mix and skip_weights stay
# float16. Large weights (a Muon lr of 8, tok_emb with std 1), as test_golf.sh says why.
run=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=3 model_dim=320 num_heads=4 num_kv_heads=4
     train_seq_len=32 train_batch_tokens=512 grad_accum_slots=2 val_batch_size=512 iterations=6 val_loss_every=0
     checkpoint_every=0 threads=2 warmdown_iters=0 matrix_lr=8 tied_embed_init_std=1 embed_bits=7
     mlp_clip_sigmas=11.5 embed_clip_sigmas=14)
expect_ok gptq_train "$CTRAIN" train "${run[@]}" out_dir=run
CK=run/checkpoints/step_00000006.h5

if ! "$PY" -c 'import h5py, numpy, torch, brotli' 2>/dev/null; then
    skip_rest_python "h5py/numpy/torch/brotli not importable by $PY"
fi

# Hessians of correlated inputs (made here, so the artifact's checks do not rest on the collection): one per input,
# c_k and c_v hard links to c_q's dataset as ctrain writes them
make_hessians() { # FILE FC_COLS
    "$PY" - "$CK" "$1" "$2" <<'PY'
import sys, h5py, numpy as np
ck, out, fc_cols = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(5)
with h5py.File(ck, "r") as f:
    shapes = {k: f["model"][k].shape for k in f["model"]}
with h5py.File(out, "w") as g:
    g.attrs["format"] = "ctrain-gptq-hessians-v1"
    g.attrs["calibration_batches"] = np.int64(4)
    g.attrs["calibration_tokens"] = np.int64(2048)
    g.attrs["step"] = np.int64(6)
    grp = g.create_group("hessians")
    for k, s in shapes.items():
        if len(s) != 2 or s[0] * s[1] <= 65536 or ".c_k." in k or ".c_v." in k:
            continue
        cols = fc_cols if k.endswith("mlp.fc.weight") else s[1]
        x = rng.standard_normal((600, cols)).astype(np.float32)
        x[:, 1:] += 0.7 * x[:, :-1]
        x[:, ::9] *= 3
        grp[k] = (x.T @ x / 600).astype(np.float32)
        if k.endswith("attn.c_q.weight"):
            grp[k.replace("c_q", "c_k")] = grp[k]
            grp[k.replace("c_q", "c_v")] = grp[k]
PY
}
make_hessians h.h5 320 && pass gptq_hessians_made || fail gptq_hessians_made "h5py failed"

expect_ok gptq_golf_runs "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 --out art.br \
    --dequantized deq.safetensors
cp out golf.out
expect_grep gptq_hessians_line '^hessians: h.h5 \(4 calibration batches, 2048 tokens, step 6\)$' golf.out
expect_grep gptq_counts '^gptq artifact: [0-9]+ parameters in 32 tensors: 19 matrices by GPTQ \(3 with LQER\), 0 int8 gate rows, 13 kept as float16 \(payload:[0-9]+ raw:[0-9]+\) -> art.br$' golf.out
expect_grep gptq_size_line '^Serialized model quantized\+brotli: [0-9]+ bytes$' golf.out
expect_grep gptq_roundtrip_line '^final_gptq_roundtrip val_loss:[0-9.]+ val_bpb:[0-9.]+ eval_time:[0-9]+ms$' golf.out

check gptq_matches_pytorch '
import sys, json, re, struct, brotli, h5py, numpy as np, torch
sys.path.insert(0, sys.argv[4])
import gptq_ref
from ref_gpt import RefGPT
ck, art, out = sys.argv[1], sys.argv[2], sys.argv[3]
raw = brotli.decompress(open(art, "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
data = raw[8 + n:]
assert meta["format"] == "gptq_lqer_v1", meta["format"]
np_type = {"I8": "<i1", "F16": "<f2"}
got = {k: torch.from_numpy(np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np_type[v["dtype"]])
                           .reshape(v["shape"]).copy()) for k, v in header.items()}
# the model order (state_dict order): the header lists the entries of every tensor in it
names = []
for k in header:
    base = re.sub(r"\.(q|scale|gq|gs|lqA_a|lqAs_a|lqB_a|lqBs_a|lqA|lqAs|lqB|lqBs)$", "", k)
    if base not in names:
        names.append(base)
with h5py.File(ck, "r") as f:
    assert sorted(names) == sorted(f["model"]), (names, list(f["model"]))
    weights = {k: torch.from_numpy(f["model"][k][()]) for k in names}
    cfg = {k: f["config"].attrs[k] for k in f["config"].attrs}
with h5py.File("h.h5", "r") as f:
    hess = {k: torch.from_numpy(f["hessians"][k][()]) for k in f["hessians"]}
o = {k: (float(cfg[k]) if "sigmas" in k else int(cfg[k])) for k in
     ("matrix_bits", "embed_bits", "matrix_clip_sigmas", "mlp_clip_sigmas", "attn_clip_sigmas", "embed_clip_sigmas",
      "gated_attn_quant_gate", "lqer_enabled", "lqer_rank", "lqer_top_k", "lqer_factor_bits", "lqer_asym_enabled",
      "lqer_asym_group")}
assert o["embed_bits"] == 7 and abs(o["mlp_clip_sigmas"] - 11.5) < 1e-9, o
want, plan = gptq_ref.quantize_model(weights, hess, o)
assert meta["plan"] == "".join(plan[k] for k in names), (meta["plan"], plan)
assert set(got) == set(want), sorted(set(got) ^ set(want))
# float32 sums in another order (LAPACK, the block products, the SVD) can put a value on the
# other side of a rounding boundary: levels may differ by one, in at most 0.2% of a tensor
levels = differ = 0
for k, t in want.items():
    g = got[k]
    assert g.dtype == t.dtype and tuple(g.shape) == tuple(t.shape), (k, g.dtype, t.dtype, g.shape, t.shape)
    if t.dtype == torch.int8:
        d = (g.int() - t.int()).abs()
        assert int(d.max()) <= 1 and int((d > 0).sum()) <= max(2, t.numel() // 500), (k, int((d > 0).sum()))
        levels += t.numel(); differ += int((d > 0).sum())
    elif ".lq" in k:  # a factor scale may round the other way with the SVD
        assert int((g != t).sum()) <= 1, (k, int((g != t).sum()))
    else:
        assert torch.equal(g, t), ("differs", k)
print("levels differing from PyTorch: %d of %d" % (differ, levels))
# the weights read back: the record dequantization of the file equals ctrain (--dequantized)
raw2 = open("deq.safetensors", "rb").read()
n2 = struct.unpack("<Q", raw2[:8])[0]
h2 = json.loads(raw2[8:8 + n2]); h2.pop("__metadata__")
back = {k: torch.from_numpy(np.frombuffer(raw2[8 + n2 + v["data_offsets"][0]:8 + n2 + v["data_offsets"][1]], "<f4")
                            .reshape(v["shape"]).copy()) for k, v in h2.items()}
deq = {}
for k in names:
    deq[k] = gptq_ref.dequantize(got, plan, k)
    tol = 1e-6 * float(deq[k].abs().max()) if meta["plan"][2 * names.index(k) + 1] != "-" else 0.0
    assert float((deq[k] - back[k]).abs().max()) <= tol, (k, float((deq[k] - back[k]).abs().max()))
# the round trip: the project model on the record dequantization, as eval_val
c = {k: (int(cfg[k]) if k not in ("rope_base", "logit_softcap") else float(cfg[k]))
     for k in ("num_layers", "num_heads", "num_kv_heads", "model_dim", "rope_base", "logit_softcap", "tie_embeddings",
               "train_seq_len")}
T = c["train_seq_len"]
with h5py.File("val.h5", "r") as f:
    v = torch.from_numpy(f["tokens"][()].astype(np.int64))
nseq = (len(v) - 1) // T
with torch.no_grad():
    loss = RefGPT(c, deq).loss(v[:nseq * T].view(nseq, T), v[1:nseq * T + 1].view(nseq, T)).item()
printed = float(re.search(r"roundtrip_exact val_loss:([0-9.]+)", open(out).read()).group(1))
assert abs(printed - loss) <= 2e-6 * abs(loss) + 1e-8, (printed, loss)
print("round trip val_loss", printed, "PyTorch", loss)
' "$CK" art.br golf.out "$CT_ROOT/tests/parity"

expect_ok gptq_again "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 --out again.br --no-eval
cmp -s art.br again.br && pass gptq_deterministic || fail gptq_deterministic "two artifacts of one checkpoint differ"
# KEY=VALUE: B's 4 x 320 elements are no multiple of 96: the symmetric factors
expect_ok gptq_key_value "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 --out sym.br --no-eval \
    lqer_asym_group=96 lqer_top_k=2
check gptq_key_value_applies '
import sys, json, struct, brotli
raw = brotli.decompress(open(sys.argv[1], "rb").read())
meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])["__metadata__"]
assert meta["plan"].count("s") == 2 and "a" not in meta["plan"] and meta["lqer"] == "4,96", meta
' sym.br
# gptq-pergroup: the same quantized tensors in the record's per-group layout. A reader written from
# docs/checkpoint-format.md alone ("gptq-pergroup": brotli + lrzip -d as a subprocess) rebuilds the
# very container gptq-brotli compresses; the round trip prints the same val_loss; lrzip's files go.
PG_CASES=(pergroup_golf_runs pergroup_size_line pergroup_same_round_trip pergroup_python_reader
          pergroup_again pergroup_deterministic pergroup_tmp_removed pergroup_no_lrzip pergroup_nothing_written
          pergroup_lrzip_killed pergroup_killed_keeps_output pergroup_lrzip_no_output)
if ! command -v lrzip >/dev/null; then
    for c in "${PG_CASES[@]}"; do skip "$c" "no lrzip on PATH (apt-get install lrzip)"; done
else
    mkdir -p tmpd
    expect_ok pergroup_golf_runs env TMPDIR="$WORK/tmpd" "$CTRAIN" ckpt golf "$CK" --format gptq-pergroup \
        --hessians h.h5 --out art.pgrp
    cp out pergroup.out
    expect_grep pergroup_size_line '^Serialized model quantized\+pergroup: [0-9]+ bytes$' pergroup.out
    expect_same pergroup_same_round_trip "round-trip lines" "$(grep '^final_gptq_roundtrip val_loss' golf.out | cut -d' ' -f1-3)" \
        "$(grep '^final_gptq_roundtrip val_loss' pergroup.out | cut -d' ' -f1-3)"
    check pergroup_python_reader '
import sys, struct, json, re, os, subprocess, tempfile, brotli, numpy as np
GROUPS = ["tok_emb.weight", "attn.c_k.weight", "attn.c_q.weight", "attn.c_v.weight", "attn.proj.weight",
          "mlp.fc.weight", "mlp.proj.weight"]
HOT = {0, 2, 5}
blob = open(sys.argv[1], "rb").read()
assert blob[:4] == b"CTPG" and struct.unpack("<I", blob[4:8])[0] == 9, blob[:8]
lens = struct.unpack("<9I", blob[8:44])
streams, at = [], 44
for n in lens:
    streams.append(blob[at:at + n])
    at += n
assert at == len(blob)
rest = brotli.decompress(streams[7])
hl = struct.unpack("<Q", rest[:8])[0]
entries = sorted(((k, v) for k, v in json.loads(rest[8:8 + hl]).items() if k != "__metadata__"),
                 key=lambda kv: kv[1]["data_offsets"][0])
def group_and_block(key):  # of a ".q" entry: (group, block), or None
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)\.q", key)
    if key == "tok_emb.weight.q": return 0, 0
    if m and m.group(2) in GROUPS[1:]: return GROUPS.index(m.group(2)), int(m.group(1))
    return None
def lrzip_d(data):
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "g.lrz"), "wb").write(data)
        subprocess.run(["lrzip", "-q", "-d", "-o", os.path.join(d, "g"), os.path.join(d, "g.lrz")], check=True,
                       capture_output=True)
        return open(os.path.join(d, "g"), "rb").read()
orders = brotli.decompress(streams[8]) if streams[8] else b""
o_at, grouped = 0, {}
for g in range(7):
    members = sorted((group_and_block(k)[1], k, v) for k, v in entries if group_and_block(k) and group_and_block(k)[0] == g)
    data, d_at = (lrzip_d(streams[g]) if streams[g] else b""), 0
    for _, k, v in members:
        rows, cols = v["shape"]
        stored = np.frombuffer(data[d_at:d_at + rows * cols], dtype=np.int8).reshape(cols, rows).T
        d_at += rows * cols
        m = stored
        if g in HOT:
            order = np.frombuffer(orders[o_at:o_at + 2 * rows], dtype="<u2")
            o_at += 2 * rows
            m = np.empty_like(stored)
            m[order] = stored
        grouped[k] = np.ascontiguousarray(m).tobytes()
    assert d_at == len(data), (g, d_at, len(data))
assert o_at == len(orders) and len(grouped) == 19, (o_at, len(orders), sorted(grouped))
container, r_at = bytearray(rest[:8 + hl]), 8 + hl
for k, v in entries:
    n = v["data_offsets"][1] - v["data_offsets"][0]
    if k in grouped: container += grouped[k]
    else: container += rest[r_at:r_at + n]; r_at += n
assert r_at == len(rest)
assert bytes(container) == brotli.decompress(open(sys.argv[2], "rb").read()), "not the gptq-brotli container"
' art.pgrp art.br
    expect_ok pergroup_again "$CTRAIN" ckpt golf "$CK" --format gptq-pergroup --hessians h.h5 --out again.pgrp --no-eval
    cmp -s art.pgrp again.pgrp && pass pergroup_deterministic || fail pergroup_deterministic "two artifacts differ"
    [ -z "$(ls -A tmpd)" ] && pass pergroup_tmp_removed || fail pergroup_tmp_removed "left in TMPDIR: $(ls tmpd)"
    expect_fail pergroup_no_lrzip 1 "none.pgrp.*apt-get install lrzip" env PATH=/nonexistent "$CTRAIN" ckpt golf \
        "$CK" --format gptq-pergroup --hessians h.h5 --out none.pgrp --no-eval
    [ ! -e none.pgrp ] && pass pergroup_nothing_written || fail pergroup_nothing_written "none.pgrp exists"
    # an lrzip that dies (killed: the OOM killer, a kill) or writes nothing: said so, the artifact it
    # would replace kept (the message was "lrzip failed compressing the tok_emb.weight group: " and
    # "cannot open artifact '/tmp/ctrain-pgrp-.../out-0'")
    mkdir -p killed_lrzip silent_lrzip
    printf '#!/bin/sh\nkill -KILL $$\n' >killed_lrzip/lrzip
    printf '#!/bin/sh\nexit 0\n' >silent_lrzip/lrzip
    chmod +x killed_lrzip/lrzip silent_lrzip/lrzip
    echo "an earlier artifact" >kept.pgrp
    expect_fail pergroup_lrzip_killed 1 "kept.pgrp.*lrzip was killed by signal 9 .* while compressing the tok_emb.weight group" \
        env PATH="$WORK/killed_lrzip:$PATH" TMPDIR="$WORK/tmpd" "$CTRAIN" ckpt golf "$CK" --format gptq-pergroup \
        --hessians h.h5 --out kept.pgrp --no-eval
    [ "$(cat kept.pgrp)" = "an earlier artifact" ] && [ -z "$(ls -A tmpd)" ] && pass pergroup_killed_keeps_output ||
        fail pergroup_killed_keeps_output "kept.pgrp: $(head -c 40 kept.pgrp | od -c | head -2); in TMPDIR: $(ls tmpd)"
    expect_fail pergroup_lrzip_no_output 1 "kept.pgrp.*lrzip exited 0 but wrote no output for the tok_emb.weight group" \
        env PATH="$WORK/silent_lrzip:$PATH" "$CTRAIN" ckpt golf "$CK" --format gptq-pergroup --hessians h.h5 \
        --out kept.pgrp --no-eval
fi

# the run's final_model.hessians.h5 is the default, when it is of the checkpoint's step
cp h.h5 run/final_model.hessians.h5
expect_ok gptq_default_hessians "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --out beside.br --no-eval
expect_grep gptq_default_hessians_named '^hessians: run/final_model.hessians.h5 ' out
"$PY" -c 'import h5py, sys; h5py.File(sys.argv[1], "r+").attrs["step"] = 5' run/final_model.hessians.h5
expect_fail gptq_default_hessians_other_step 1 "after step 5, the checkpoint's are after step 6" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --out beside.br --no-eval
rm run/final_model.hessians.h5

# GPTQ's calibration by ctrain: `ckpt hessians` writes the run's final_model.hessians.h5, whose
# every Hessian equals X^T X of the matrix's input computed by the project's PyTorch model on the
# same training batches (the first 16 slots of train.h5's stream), and `ckpt golf` takes it
expect_ok gptq_hessians_collect "$CTRAIN" ckpt hessians "$CK"
expect_grep gptq_hessians_collect_line '^GPTQ: collected 19 Hessians from 16 batches of 256 training tokens in [0-9.]+s$' out
check gptq_hessians_match_pytorch '
import sys, h5py, numpy as np, torch
sys.path.insert(0, sys.argv[3])
from ref_gpt import RefGPT
ck, hf = sys.argv[1], sys.argv[2]
with h5py.File(ck, "r") as f:
    w = {k: torch.from_numpy(f["model"][k][()]) for k in f["model"]}
    cfg = {k: f["config"].attrs[k] for k in f["config"].attrs}
c = {k: (int(cfg[k]) if k not in ("rope_base", "logit_softcap") else float(cfg[k]))
     for k in ("num_layers", "num_heads", "num_kv_heads", "model_dim", "rope_base", "logit_softcap", "tie_embeddings",
               "train_seq_len")}
T, batches, slot = c["train_seq_len"], int(cfg["gptq_calibration_batches"]), 256
with h5py.File("train.h5", "r") as f:
    stream = torch.from_numpy(f["tokens"][:batches * slot + 1].astype(np.int64))
sums = {}
def add(name, x):
    x = x.detach().double()
    sums[name] = sums.get(name, 0) + x.T @ x
model = RefGPT(c, w)
model.capture = add
with torch.no_grad():
    for b in range(batches):
        part = stream[b * slot:(b + 1) * slot + 1]
        model.loss(part[:-1].view(-1, T), part[1:].view(-1, T))
with h5py.File(hf, "r") as f:
    got = {k: torch.from_numpy(f["hessians"][k][()]).double() for k in f["hessians"]}
    assert int(f.attrs["calibration_batches"]) == batches and int(f.attrs["step"]) == 6, dict(f.attrs)
want = {k: v / batches for k, v in sums.items() if w[k].numel() > 65536}
for k in list(want):
    if k.endswith("c_q.weight"):
        for o in ("c_k", "c_v"):
            want[k.replace("c_q", o)] = want[k]
assert set(got) == set(want), sorted(set(got) ^ set(want))
worst = max(float((got[k] - want[k]).abs().max() / want[k].abs().max()) for k in want)
print("Hessians: worst difference relative to the largest element", worst)
assert worst <= 1e-5, worst
' "$CK" run/final_model.hessians.h5 "$CT_ROOT/tests/parity"
expect_ok gptq_golf_collected "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --out collected.br --no-eval
expect_grep gptq_golf_collected_named '^hessians: run/final_model.hessians.h5 \(16 calibration batches, 4096 tokens, step 6\)$' out
expect_fail gptq_hessians_not_in_checkpoints 2 "lies in a checkpoints/ folder" \
    "$CTRAIN" ckpt hessians "$CK" --out run/checkpoints/h.h5
# an --out that cannot be written fails with the system's reason before the calibration (it
# collected first, then said "cannot create '/proc/h.h5.tmp.N'" without a reason)
expect_fail gptq_hessians_unwritable 1 "cannot create '/proc/h.h5.tmp.[0-9]+': No such file or directory" \
    "$CTRAIN" ckpt hessians "$CK" --out /proc/h.h5
grep -q 'GPTQ: collected' out && fail gptq_hessians_unwritable_at_once "it collected first: $(head -c 300 out)" ||
    pass gptq_hessians_unwritable_at_once
# a stop during the calibration ends it there (exit 75: it went on to the end and wrote the file,
# exit 0), and the Hessians file it would replace stays as it was, with nothing beside it
cp run/final_model.hessians.h5 hessians_before.h5
CTRAIN_FAULT=TERM@calibration:3 expect_fail gptq_hessians_stop 75 "stopped by a signal during GPTQ's calibration" \
    "$CTRAIN" ckpt hessians "$CK"
cmp -s hessians_before.h5 run/final_model.hessians.h5 && [ -z "$(ls run | grep '\.tmp')" ] &&
    pass gptq_hessians_stop_keeps_file || fail gptq_hessians_stop_keeps_file "run/ holds: $(ls run | tr '\n' ' ')"
# a damaged Hessian (one bit of its data) is a read error naming the file and the dataset (it made
# another artifact, exit 0): ctrain's datasets carry the Fletcher32 checksum
cp run/final_model.hessians.h5 flipped.h5
"$PY" - flipped.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    off = f["hessians/blocks.0.mlp.fc.weight"].id.get_chunk_info(0).byte_offset
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 100); b = f.read(1); f.seek(off + 100); f.write(bytes([b[0] ^ 0x10]))
PY
"$PY" -c '
import sys, h5py, numpy as np, shutil
shutil.copy(sys.argv[1], "flat.h5")
with h5py.File("flat.h5", "r+") as f:
    del f["hessians/blocks.1.attn.proj.weight"]
    f["hessians/blocks.1.attn.proj.weight"] = np.ones(320 * 320, dtype=np.float32)
' run/final_model.hessians.h5
# (it said "has shape [0, 0] (1 dimensions)")
expect_fail gptq_hessians_not_a_matrix 1 "flat.h5': /hessians/blocks.1.attn.proj.weight has 1 dimensions, expected a \[320, 320\] matrix" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians flat.h5 --out none.br --no-eval
expect_fail gptq_hessians_damaged 1 "flipped.h5': cannot read /hessians/blocks.0.mlp.fc.weight .*Fletcher32" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians flipped.h5 --out none.br --no-eval
rm run/final_model.hessians.h5

# a run that ends with the artifact collects the Hessians after its final checkpoint, writes them
# beside the artifact and makes the same artifact `ckpt golf` makes of that checkpoint; an end
# done again (the artifact removed) takes the Hessians it already has
expect_ok gptq_run_end "$CTRAIN" train "${run[@]}" out_dir=run_end golf_artifact=1 golf_format=gptq-brotli
expect_grep gptq_run_end_collects '^GPTQ: collected 19 Hessians from 16 batches of 256 training tokens' out
expect_ok gptq_run_end_golf "$CTRAIN" ckpt golf run_end/checkpoints/step_00000006.h5 --format gptq-brotli --out same.br \
    --no-eval
cmp -s same.br run_end/final_model.gptq.safetensors.br && pass gptq_run_end_same_artifact ||
    fail gptq_run_end_same_artifact "the run's artifact differs from ckpt golf's"
rm run_end/final_model.gptq.safetensors.br
expect_ok gptq_run_end_again "$CTRAIN" train "${run[@]}" out_dir=run_end golf_artifact=1 golf_format=gptq-brotli
expect_grep gptq_run_end_reuses '^GPTQ: the Hessians of step 6 from run_end/final_model.hessians.h5$' out
cmp -s same.br run_end/final_model.gptq.safetensors.br && pass gptq_run_end_remade ||
    fail gptq_run_end_remade "the artifact made again differs"
expect_cuda_takes gptq_run_end_cuda "$CTRAIN" train "${run[@]}" out_dir=run_cuda golf_artifact=1 \
    golf_format=gptq-brotli device=cuda

# bad input: a clear error, nothing written
expect_fail gptq_no_hessians 1 "run/final_model.hessians.h5" "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --out none.br
make_hessians wrong.h5 160
expect_fail gptq_other_model_hessians 1 "wrong.h5.*/hessians/blocks.0.mlp.fc.weight has shape \[160, 160\]" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians wrong.h5 --out none.br
[ ! -e none.br ] && pass gptq_nothing_written || fail gptq_nothing_written "none.br exists"
expect_fail gptq_hessians_other_format 2 "hessians is for --format gptq-brotli" \
    "$CTRAIN" ckpt golf "$CK" --format int8-zlib --hessians h.h5 --out none.stz
expect_fail gptq_not_artifact_key 2 "num_layers=4.*not a GPTQ artifact key" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 num_layers=4
expect_fail gptq_bad_value 2 "matrix_bits = 9: expected in \[2, 8\]" \
    "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 matrix_bits=9
cp h.h5 keep.h5
expect_fail gptq_out_is_input 2 "h.h5" "$CTRAIN" ckpt golf "$CK" --format gptq-brotli --hessians h.h5 --out h.h5
cmp -s h.h5 keep.h5 && pass gptq_input_kept || fail gptq_input_kept "the Hessians file changed"
finish
