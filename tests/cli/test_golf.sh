#!/usr/bin/env bash
# test_golf.sh — `ctrain ckpt golf`, the parameter-golf artifact in its two formats.
# int8-zlib: its bytes equal an independent PyTorch implementation of the baseline train_gpt.py's
# int8 rule (written here from the rule's description: torch.quantile clip per row, float16 row
# scales, small tensors kept as float16 and control tensors as float32) compressed by Python's
# zlib at level 9. int6-zstd: its bytes equal an independent PyTorch implementation of the 1.1248
# record's mixed int6 rule (int6 per row for attention and MLP matrices, int8 for the embedding,
# small tensors float16) compressed by Python's zstandard at level 22; the weights ctrain reads
# back (--dequantized) equal the record's dequantization in Python and lie within half a scale
# step of the checkpoint's. For both, the round-trip val_loss printed equals the project's
# PyTorch model (tests/parity/ref_gpt.py) evaluated on the dequantized weights, scripts/
# stz_to_ptz.py gives the .ptz the matching train_gpt.py reads back, and bad input gives clear
# errors.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
# The round trip's val_loss by the project's PyTorch model (tests/parity/ref_gpt.py) on the
# dequantized weights deq, over val.h5 as train_gpt.py's eval_val: the prelude of the checks below.
REF_LOSS='
def ref_round_trip_loss(ck, deq, parity_dir):
    import sys, h5py, numpy as np, torch
    sys.path.insert(0, parity_dir)
    from ref_gpt import RefGPT
    with h5py.File(ck, "r") as f:
        a = {k: f["config"].attrs[k] for k in f["config"].attrs}
    c = {k: (int(a[k]) if k not in ("rope_base", "logit_softcap") else float(a[k]))
         for k in ("num_layers", "num_heads", "num_kv_heads", "model_dim", "rope_base", "logit_softcap",
                   "tie_embeddings", "train_seq_len")}
    T = c["train_seq_len"]
    with h5py.File("val.h5", "r") as f:
        v = torch.from_numpy(f["tokens"][()].astype(np.int64))
    nseq = (len(v) - 1) // T
    x, y = v[:nseq * T].view(nseq, T), v[1:nseq * T + 1].view(nseq, T)
    with torch.no_grad():
        return RefGPT(c, deq).loss(x, y).item()
'

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
# model_dim 320: tok_emb (256 x 320) and every block matrix exceed 65,536 elements (int8 per
# row); the norms' gains, q_gain, resid_mix and skip_weights stay floats. Weights with row maxima
# well above 1, as a trained model has: a Muon lr of 8 without warmdown (block matrices' rows
# 1.5 to 9 after 6 steps, some mlp.fc rows below 1) and tok_emb drawn with std 1 (rows 2.4 to
# 4.5). With the defaults every row stayed below 0.056: each int6 and int8 scale sat at its floor
# (1/31, 1/127) and the zero-initialised projections quantized to 0, so the byte matches below
# could not see the scale formula (an int6 scale of rowmax/32 passed them).
run=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=3 model_dim=320 num_heads=4 num_kv_heads=2
     train_seq_len=32 train_batch_tokens=512 grad_accum_slots=2 val_batch_size=512 iterations=6 val_loss_every=0
     checkpoint_every=0 threads=2 warmdown_iters=0 matrix_lr=8 tied_embed_init_std=1)
expect_ok golf_train "$CTRAIN" train "${run[@]}" out_dir=run
expect_ok golf_runs "$CTRAIN" ckpt golf run --out art.stz
cp out golf.out
expect_grep golf_checkpoint_named '^run/checkpoints/step_00000006.h5$' golf.out
expect_grep golf_counts '^int8 artifact: [0-9]+ parameters in 32 tensors, 13 quantized to int8$' golf.out
expect_grep golf_size_line '^Serialized model int8\+zlib: [0-9]+ bytes \(payload:[0-9]+ raw:[0-9]+ payload_ratio:[0-9.]+x\) -> art.stz$' golf.out
expect_grep golf_roundtrip_line '^final_int8_zlib_roundtrip val_loss:[0-9.]+ val_bpb:[0-9.]+ eval_time:[0-9]+ms$' golf.out
# 8 decimals, as train_gpt.py prints them (.8f; this fixture's val_bpb is above 10)
expect_grep golf_roundtrip_exact '^final_int8_zlib_roundtrip_exact val_loss:[0-9]+\.[0-9]{8} val_bpb:[0-9]+\.[0-9]{8}$' golf.out

if ! "$PY" -c 'import h5py, numpy, torch' 2>/dev/null; then
    skip_rest_python "h5py/numpy/torch not importable by $PY"
else
    check golf_bytes_match_pytorch "$REF_LOSS"'
import h5py, json, numpy as np, re, struct, sys, zlib, torch

ck, art, out = sys.argv[1], sys.argv[2], sys.argv[3]
blob = open(art, "rb").read()
raw = zlib.decompress(blob)
assert zlib.compress(raw, 9) == blob, "not zlib level 9 of the container"
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
assert header.pop("__metadata__")["format"] == "int8_clean_per_row_v1"
np_type = {"I8": "<i1", "F16": "<f2", "F32": "<f4"}
got = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np_type[v["dtype"]]).reshape(v["shape"])
       for k, v in header.items()}

# train_gpt.py rule, from its description
CONTROL = ("attn_scale", "attn_scales", "mlp_scale", "mlp_scales", "resid_mix", "resid_mixes", "q_gain",
           "skip_weight", "skip_weights")
Q = 99.99984 / 100.0
want = {}
with h5py.File(ck, "r") as f:
    names = list(f["model"])
    model = {k: torch.from_numpy(f["model"][k][()]) for k in names}
for name, t in model.items():
    if t.numel() <= 65536:
        keep = t.float() if any(p in name for p in CONTROL) else t.to(torch.float16)
        want["passthrough/" + name] = keep.numpy()
    elif t.ndim == 2:
        clip = torch.quantile(t.abs(), Q, dim=1)
        scale = (clip / 127.0).clamp_min(1.0 / 127.0)
        c = torch.maximum(torch.minimum(t, clip[:, None]), -clip[:, None])
        want["quantized/" + name] = torch.clamp(torch.round(c / scale[:, None]), -127, 127).to(torch.int8).numpy()
        want["scales/" + name] = scale.to(torch.float16).numpy()
    else:
        clip = float(torch.quantile(t.abs().flatten(), Q).item())
        scale = torch.tensor(clip / 127.0 if clip > 0 else 1.0, dtype=torch.float32)
        q = torch.clamp(torch.round(torch.clamp(t, -clip, clip) / scale), -127, 127).to(torch.int8)
        want["quantized/" + name] = q.numpy()
        want["scales/" + name] = scale.numpy()
assert set(got) == set(want), sorted(set(got) ^ set(want))
bad = [k for k in want if got[k].dtype != want[k].dtype or got[k].tobytes() != want[k].tobytes()]
assert not bad, ("bytes differ", bad[:5])
assert sum(k.startswith("quantized/") for k in got) == 13
# the fixture: most row scales (0.9 here) above their 1/127 floor, so that the bytes show the scale formula
rows = [torch.from_numpy(want[k].astype(np.float32)) for k in want if k.startswith("scales/") and want[k].ndim == 1]
above = sum(int((s > 1.001 / 127).sum()) for s in rows) / sum(s.numel() for s in rows)
print("int8 rows above the scale floor:", above)
assert above >= 0.75, ("int8 rows above the 1/127 scale floor", above)

# the round trip: dequantize as train_gpt.py does, evaluate as its eval_val with the project model
deq = {}
for name in names:
    if "quantized/" + name in got:
        q = torch.from_numpy(got["quantized/" + name].copy()).float()
        s = torch.from_numpy(np.array(got["scales/" + name])).float()
        deq[name] = q * s.view(-1, 1) if q.ndim == 2 else q * float(s)
    else:
        deq[name] = torch.from_numpy(got["passthrough/" + name].copy()).float()
loss = ref_round_trip_loss(ck, deq, sys.argv[4])
printed = float(re.search(r"roundtrip_exact val_loss:([0-9.]+)", open(out).read()).group(1))
assert abs(printed - loss) <= 2e-6 * abs(loss) + 1e-8, (printed, loss)
print("round trip val_loss", printed, "PyTorch", loss)
' run/checkpoints/step_00000006.h5 art.stz golf.out "$CT_ROOT/tests/parity"
    # the .ptz train_gpt.py writes and reads back, converted from the artifact (scripts/stz_to_ptz.py)
    expect_ok golf_ptz_converts "$PY" "$CT_ROOT/scripts/stz_to_ptz.py" art.stz art.ptz
    check golf_ptz_is_train_gpt_format '
import io, sys, zlib, h5py, torch
ck, ptz = sys.argv[1], sys.argv[2]
# train_gpt.py reads it back so: torch.load of the zlib stream, then dequantize_state_dict_int8
obj = torch.load(io.BytesIO(zlib.decompress(open(ptz, "rb").read())), map_location="cpu")
with h5py.File(ck, "r") as f:
    names = list(f["model"])
    model = {k: torch.from_numpy(f["model"][k][()]) for k in names}

# train_gpt.py quantize_state_dict_int8 on these fp32 weights, written again from its rule
CONTROL = ("attn_scale", "attn_scales", "mlp_scale", "mlp_scales", "resid_mix", "resid_mixes", "q_gain",
           "skip_weight", "skip_weights")
Q = 99.99984 / 100.0
want = {"quantized": {}, "scales": {}, "dtypes": {}, "passthrough": {}, "qmeta": {}, "passthrough_orig_dtypes": {}}
for name, t in model.items():
    if t.numel() <= 65536:
        if any(p in name for p in CONTROL):
            want["passthrough"][name] = t.float()
        else:
            want["passthrough_orig_dtypes"][name] = "float32"
            want["passthrough"][name] = t.to(torch.float16)
        continue
    if t.ndim == 2:
        clip = torch.quantile(t.abs(), Q, dim=1)
        c = torch.maximum(torch.minimum(t, clip[:, None]), -clip[:, None])
        scale = (clip / 127.0).clamp_min(1.0 / 127.0)
        want["quantized"][name] = torch.clamp(torch.round(c / scale[:, None]), -127, 127).to(torch.int8)
        want["scales"][name] = scale.to(torch.float16)
        want["qmeta"][name] = {"scheme": "per_row", "axis": 0}
    else:
        clip = float(torch.quantile(t.abs().flatten(), Q).item())
        scale = torch.tensor(clip / 127.0 if clip > 0 else 1.0, dtype=torch.float32)
        want["quantized"][name] = torch.clamp(torch.round(torch.clamp(t, -clip, clip) / scale), -127, 127).to(torch.int8)
        want["scales"][name] = scale
    want["dtypes"][name] = "float32"
assert obj["__quant_format__"] == "int8_clean_per_row_v1", obj.get("__quant_format__")
assert set(obj) == {"__quant_format__"} | set(want), sorted(obj)
for part in ("quantized", "scales", "passthrough"):
    assert set(obj[part]) == set(want[part]), (part, sorted(set(obj[part]) ^ set(want[part]))[:3])
    for k, t in want[part].items():
        g = obj[part][k]
        assert g.dtype == t.dtype and g.shape == t.shape and torch.equal(g, t), (part, k, g.dtype, t.dtype)
for part in ("dtypes", "qmeta", "passthrough_orig_dtypes"):
    assert obj[part] == want[part], part

# train_gpt.py dequantize_state_dict_int8, written again: a full state_dict of float32 weights
out = {}
for name, q in obj["quantized"].items():
    dtype = getattr(torch, obj["dtypes"][name])
    s = obj["scales"][name]
    if obj.get("qmeta", {}).get(name, {}).get("scheme") == "per_row" or s.ndim > 0:
        out[name] = (q.float() * s.to(torch.float32).view(q.shape[0], *([1] * (q.ndim - 1)))).to(dtype)
    else:
        out[name] = (q.float() * float(s.item())).to(dtype)
for name, t in obj["passthrough"].items():
    o = obj.get("passthrough_orig_dtypes", {}).get(name)
    out[name] = t.to(getattr(torch, o)) if isinstance(o, str) else t
assert set(out) == set(names), sorted(set(out) ^ set(names))
for k in names:  # what load_state_dict(strict=True) needs: every name, its shape, float32
    assert out[k].shape == model[k].shape and out[k].dtype == torch.float32, k
' run/checkpoints/step_00000006.h5 art.ptz
fi

# the artifact alone, and bad input
expect_ok golf_no_eval "$CTRAIN" ckpt golf run/checkpoints/step_00000006.h5 --out only.stz --no-eval
if grep -q roundtrip out; then fail golf_no_eval_skips "$(cat out)"; else pass golf_no_eval_skips; fi
cmp -s art.stz only.stz && pass golf_deterministic || fail golf_deterministic "two artifacts of one checkpoint differ"
# the size against parameter-golf's 16,000,000-byte cap, with the code's share as train_gpt.py prints it
size=$(stat -c %s only.stz)
# without --code-bytes the code is ctrain's own: its sources as a brotli-compressed tar, measured by
# the build (docs/model.md, "The code's size"); the same figure as the script gives now
code=$(bash "$CT_ROOT/scripts/code-size.sh" | cut -d' ' -f1)
expect_grep golf_own_code_size "^Code size: $code bytes \(ctrain's sources: [0-9]+ bytes, a tar of them brotli-compressed" out
expect_grep golf_cap_with_own_code "^size: $((size + code)) bytes with the code, under the 16000000-byte cap by $((16000000 - size - code)) bytes$" out
printf '%01000d' 0 >train_gpt.py
expect_ok golf_code_file "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes train_gpt.py
expect_grep golf_code_size_line '^Code size: 1000 bytes$' out
expect_grep golf_total_line "^Total submission size int8\+zlib: $((size + 1000)) bytes$" out
# above the cap: refused, naming the sizes and the limit, the file there kept; --allow-oversize writes it
expect_fail golf_code_over_cap 1 "'only.stz': the artifact's $size bytes and the code's 15999999 make $((size + 15999999)) bytes, above parameter-golf's limit of 16000000 bytes: not written \(--allow-oversize" \
    "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes 15999999
cmp -s art.stz only.stz && [ -z "$(ls only.stz.* 2>/dev/null)" ] && pass golf_over_cap_kept ||
    fail golf_over_cap_kept "only.stz changed or a pending file is left: $(ls only.stz*)"
expect_ok golf_over_cap_allowed "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes 15999999 --allow-oversize
expect_grep golf_over_cap_said "^size: $((size + 15999999)) bytes with the code, OVER the 16000000-byte cap by $((size - 1)) bytes$" out
expect_fail golf_code_bytes_bad 2 "--code-bytes 'nope' is neither a byte count nor a readable file" \
    "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes nope
expect_fail golf_not_a_checkpoint 1 "'val.h5' has no root attribute 'format': not a ctrain checkpoint" "$CTRAIN" ckpt golf val.h5
expect_fail golf_bad_device 2 "device = 'tpu': expected auto, cpu or cuda" "$CTRAIN" ckpt golf run --device tpu --out x.stz
expect_fail golf_no_val_data 1 "val_files: no files match 'nothing\*.h5'" \
    "$CTRAIN" ckpt golf run --out x.stz --val-files 'nothing*.h5'
: >plainfile # a folder that cannot be made: a file stands in its place
expect_fail golf_unwritable 1 "'plainfile' exists but is not a directory" "$CTRAIN" ckpt golf run --out plainfile/a.stz
expect_ok golf_help "$CTRAIN" ckpt golf --help
expect_grep golf_help_text '^usage: ctrain ckpt golf FILE' out

# golf_artifact=1: the same at the end of training, into out_dir
expect_ok golf_at_end "$CTRAIN" train "${run[@]}" golf_artifact=1 out_dir=run2
cp out end.out
cmp -s run2/final_model.int8.stz art.stz && pass golf_at_end_same_artifact \
    || fail golf_at_end_same_artifact "run2/final_model.int8.stz differs from ckpt golf's art.stz"
a=$(grep '^final_int8_zlib_roundtrip_exact' end.out); b=$(grep '^final_int8_zlib_roundtrip_exact' golf.out)
[ -n "$a" ] && [ "$a" = "$b" ] && pass golf_at_end_same_roundtrip || fail golf_at_end_same_roundtrip "'$a' vs '$b'"
expect_ok golf_at_end_checkpoint_unquantized "$CTRAIN" ckpt diff --exact run2 run
# without --out the artifact goes to the run's directory (beside checkpoints/), not the current one
expect_ok golf_default_out "$CTRAIN" ckpt golf run --no-eval
[ -f run/final_model.int8.stz ] && [ ! -e final_model.int8.stz ] && cmp -s run/final_model.int8.stz art.stz \
    && pass golf_default_in_run_dir || fail golf_default_in_run_dir "$(ls run . | tr '\n' ' ')"


# ---- int6-zstd: the 1.1248 record's mixed int6 + zstd level 22 ----
expect_fail golf6_bad_format 2 "--format 'int4': expected int8-zlib, int6-zstd, gptq-brotli or gptq-pergroup" \
    "$CTRAIN" ckpt golf run --format int4 --out x.zst
expect_fail golf6_bad_key 2 "golf_format = 'int4': expected int8-zlib, int6-zstd, gptq-brotli or gptq-pergroup" \
    "$CTRAIN" train "${run[@]}" golf_format=int4 out_dir=bad
expect_fail golf6_dequantized_is_out 2 "--dequantized 'x.zst' is the artifact's path too" \
    "$CTRAIN" ckpt golf run --format int6-zstd --out x.zst --dequantized x.zst
if ! "$CTRAIN" --version | grep -q '^zstd: [0-9]'; then
    skip_rest "ctrain built without libzstd (scripts/install-deps.sh installs libzstd-dev)"
fi
expect_ok golf6_runs "$CTRAIN" ckpt golf run --format int6-zstd --out art6.zst --dequantized deq6.safetensors \
    --code-bytes 1000
cp out golf6.out
size6=$(stat -c %s art6.zst)
# the tok_emb matrix int8, the 3 x 4 block matrices int6; c_k, c_v (160 x 320) and the small
# tensors kept as float16
expect_grep golf6_counts '^int6 artifact: [0-9]+ parameters in 32 tensors: 12 int6, 1 int8, 19 kept as floats \(payload:[0-9]+ raw:[0-9]+\) -> art6.zst$' golf6.out
expect_grep golf6_size_line "^Serialized model int6\+zstd: $size6 bytes$" golf6.out
expect_grep golf6_total_line "^Total submission size int6\+zstd: $((size6 + 1000)) bytes$" golf6.out
expect_grep golf6_cap_line "^size: $((size6 + 1000)) bytes with the code, under the 16000000-byte cap by $((16000000 - size6 - 1000)) bytes$" golf6.out
expect_grep golf6_roundtrip_line '^final_int6_roundtrip val_loss:[0-9.]+ val_bpb:[0-9.]+ eval_time:[0-9]+ms$' golf6.out
expect_grep golf6_roundtrip_exact '^final_int6_roundtrip_exact val_loss:[0-9]+\.[0-9]{8} val_bpb:[0-9]+\.[0-9]{8}$' golf6.out
size8=$(stat -c %s art.stz)
[ "$size6" -lt "$size8" ] && pass golf6_smaller_than_int8 \
    || fail golf6_smaller_than_int8 "int6-zstd $size6 bytes, int8-zlib $size8 bytes of the same weights"

if ! "$PY" -c 'import h5py, numpy, torch, zstandard' 2>/dev/null; then
    skip_python golf6_bytes_match_pytorch "h5py/numpy/torch/zstandard not importable by $PY"
    skip_python golf6_ptz_converts "h5py/numpy/torch/zstandard not importable by $PY"
    skip_python golf6_ptz_is_record_format "h5py/numpy/torch/zstandard not importable by $PY"
    skip_python golf6_ptz_damaged "h5py/numpy/torch/zstandard not importable by $PY"
else
    check golf6_bytes_match_pytorch "$REF_LOSS"'
import h5py, json, numpy as np, re, struct, sys, torch, zstandard

ck, art, deq_file, out = sys.argv[1:5]
blob = open(art, "rb").read()
raw = zstandard.ZstdDecompressor().decompress(blob)
assert zstandard.ZstdCompressor(level=22, write_checksum=True).compress(raw) == blob, \
    "not zstd level 22 (with its checksum) of the container"

def safetensors(raw):
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__")
    np_type = {"I8": "<i1", "F16": "<f2", "F32": "<f4"}
    return meta, {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], np_type[v["dtype"]])
                  .reshape(v["shape"]) for k, v in header.items()}, list(header)

meta, got, order = safetensors(raw)
assert meta["format"] == "mixed_int6_v1", meta

# the record rule (mixed_quantize_int6 with the mlp and attn categories), from its description
CONTROL = ("attn_scale", "attn_scales", "mlp_scale", "mlp_scales", "resid_mix", "resid_mixes", "q_gain",
           "skip_weight", "skip_weights", "smear")
Q = 99.99984 / 100.0
def category(name):
    if "tok_emb" in name or "lm_head" in name: return "embed"
    if ".mlp." in name: return "mlp"
    if ".attn." in name or (".proj." in name and ".mlp." not in name): return "attn"
    return "other"
def int8(t):
    if t.ndim == 2:
        clip = torch.quantile(t.abs(), Q, dim=1)
        scale = (clip / 127.0).clamp_min(1.0 / 127.0)
        c = torch.maximum(torch.minimum(t, clip[:, None]), -clip[:, None])
        return torch.clamp(torch.round(c / scale[:, None]), -127, 127).to(torch.int8), scale.to(torch.float16)
    clip = float(torch.quantile(t.abs().flatten(), Q).item())
    scale = torch.tensor(clip / 127.0 if clip > 0 else 1.0, dtype=torch.float32)
    return torch.clamp(torch.round(torch.clamp(t, -clip, clip) / scale), -127, 127).to(torch.int8), scale
def int6(t):
    if t.ndim == 2:
        scale = (t.abs().amax(dim=1) / 31.0).clamp_min(1.0 / 31.0).to(torch.float16)
        return torch.clamp(torch.round(t / scale.float()[:, None]), -32, 31).to(torch.int8), scale
    amax = t.abs().max().item()
    scale = torch.tensor(amax / 31.0 if amax > 0 else 1.0, dtype=torch.float16)
    return torch.clamp(torch.round(t / scale.float()), -32, 31).to(torch.int8), scale

# state_dict order: the order of the weights ctrain read back (h5py lists a group sorted by name)
_, ctrain_deq, names = safetensors(open(deq_file, "rb").read())
with h5py.File(ck, "r") as f:
    assert sorted(names) == sorted(f["model"]), "dequantized weights: names differ from the checkpoint"
    model = {k: torch.from_numpy(f["model"][k][()]) for k in names}
want, want_m = {}, {}
for name, t in model.items():
    if t.numel() <= 65536:
        want[name], want_m[name] = t.to(torch.float16), "passthrough"
    elif any(p in name for p in CONTROL):
        want[name], want_m[name] = t.float(), "passthrough_ctrl"
    else:
        kind = "int6" if category(name) in ("mlp", "attn") else "int8"
        want[name + ".q"], want[name + ".scale"] = (int6 if kind == "int6" else int8)(t)
        want_m[name] = {"type": kind}
assert order == list(want), ("tensor order", order[:4], list(want)[:4])
bad = [k for k in want if got[k].dtype != want[k].numpy().dtype or got[k].tobytes() != want[k].numpy().tobytes()]
assert not bad, ("bytes differ", bad[:5])
assert json.loads(meta["m"]) == want_m, "the meta dict differs"
assert sum(v == {"type": "int6"} for v in want_m.values()) == 12
# the fixture: most int6 row scales (0.89 here) above their 1/31 floor, so that the bytes show the scale formula
rows = [want[n + ".scale"].float() for n in want_m if want_m[n] == {"type": "int6"}]
above = sum(int((s > 1.001 / 31).sum()) for s in rows) / sum(s.numel() for s in rows)
print("int6 rows above the scale floor:", above)
assert above >= 0.75, ("int6 rows above the 1/31 scale floor", above)

# the record dequantization (dequantize_mixed_int6) against the weights ctrain read back
deq = {}
for name, t in model.items():
    info = want_m[name]
    if isinstance(info, str):
        deq[name] = torch.from_numpy(got[name].copy()).float()
        continue
    q, s = torch.from_numpy(got[name + ".q"].copy()), torch.from_numpy(np.array(got[name + ".scale"]))
    deq[name] = q.float() * s.float().view(q.shape[0], *([1] * (q.ndim - 1))) if s.ndim > 0 else q.float() * float(s.item())
    if info["type"] == "int6":  # within half a step of the checkpoint weights (plus float32 division rounding)
        step = s.float().view(-1, 1).double()
        err = (t.double() - deq[name].double()).abs()
        assert (err <= step * (0.5 + 2.0 ** -18)).all(), (name, float((err / step).max()))
        assert q.min() >= -32 and q.max() <= 31, name
    elif info["type"] == "int8":
        assert q.min() >= -127 and q.max() <= 127, name
for name in names:
    if want_m[name] == "passthrough":  # float16 rounding: half an ulp
        err = (model[name].double() - deq[name].double()).abs()
        assert (err <= torch.maximum(model[name].double().abs() * 2.0 ** -11, torch.tensor(2.0 ** -25))).all(), name
for name in names:
    assert ctrain_deq[name].dtype == np.float32 and ctrain_deq[name].tobytes() == deq[name].numpy().tobytes(), \
        ("ctrain read back other weights", name)

# the round trip as the record evaluates it, with the project model on those weights
loss = ref_round_trip_loss(ck, deq, sys.argv[5])
printed = float(re.search(r"final_int6_roundtrip_exact val_loss:([0-9.]+)", open(out).read()).group(1))
assert abs(printed - loss) <= 2e-6 * abs(loss) + 1e-8, (printed, loss)
print("int6 round trip val_loss", printed, "PyTorch", loss)
' run/checkpoints/step_00000006.h5 art6.zst deq6.safetensors golf6.out "$CT_ROOT/tests/parity"
    # the .ptz the record writes and reads back, converted from the artifact (scripts/stz_to_ptz.py)
    expect_ok golf6_ptz_converts "$PY" "$CT_ROOT/scripts/stz_to_ptz.py" art6.zst art6.ptz
    check golf6_ptz_is_record_format '
import io, sys, h5py, numpy as np, struct, json, torch, zstandard
ck, ptz, deq_file = sys.argv[1:4]
blob = open(ptz, "rb").read()
raw = zstandard.ZstdDecompressor().decompress(blob)
assert zstandard.ZstdCompressor(level=22).compress(raw) == blob, "not zstd level 22"
# the record reads it back so: torch.load of the zstd stream, then dequantize_mixed_int6 with the
# model state_dict as the template (written again here from its description)
obj = torch.load(io.BytesIO(raw), map_location="cpu")
assert set(obj) == {"w", "m"}, sorted(obj)
w, m = obj["w"], obj["m"]
raw_deq = open(deq_file, "rb").read()
n = struct.unpack("<Q", raw_deq[:8])[0]
header = json.loads(raw_deq[8:8 + n])
header.pop("__metadata__")
names = list(header)  # state_dict order, as ctrain read the weights back
with h5py.File(ck, "r") as f:
    model = {k: torch.from_numpy(f["model"][k][()]) for k in names}
assert list(m) == names, "meta: names or order"
assert list(w) == [k for name in names for k in ([name] if isinstance(m[name], str) else [name + ".q", name + ".scale"])]
out = {}
for name, orig in model.items():
    info = m[name]
    if info in ("passthrough", "passthrough_ctrl", "passthrough_fp16"):
        t = w[name]
        assert t.dtype == (torch.float16 if info == "passthrough" else torch.float32), (name, t.dtype)
        out[name] = t.to(orig.dtype) if t.dtype == torch.float16 else t
        continue
    assert info in ({"type": "int6"}, {"type": "int8"}), (name, info)
    q, s = w[name + ".q"], w[name + ".scale"]
    assert q.dtype == torch.int8 and q.shape == orig.shape, name
    if s.ndim > 0:
        out[name] = (q.float() * s.float().view(q.shape[0], *([1] * (q.ndim - 1)))).to(orig.dtype)
    else:
        out[name] = (q.float() * float(s.item())).to(orig.dtype)
for name in names:  # what load_state_dict(strict=True) needs, and the same weights as ctrain read back
    lo, hi = header[name]["data_offsets"]
    assert out[name].dtype == torch.float32 and out[name].shape == model[name].shape, name
    assert out[name].numpy().tobytes() == raw_deq[8 + n + lo:8 + n + hi], ("differs from ctrain", name)
' run/checkpoints/step_00000006.h5 art6.ptz deq6.safetensors
    head -c 1000 art6.zst >cut6.zst
    expect_fail golf6_ptz_damaged 1 "cut6.zst: not a zstd stream or damaged .*not a ctrain golf artifact" \
        "$PY" "$CT_ROOT/scripts/stz_to_ptz.py" cut6.zst cut6.ptz
fi

expect_ok golf6_no_eval "$CTRAIN" ckpt golf run --format int6-zstd --out only6.zst --no-eval
if grep -q roundtrip out; then fail golf6_no_eval_skips "$(cat out)"; else pass golf6_no_eval_skips; fi
cmp -s art6.zst only6.zst && pass golf6_deterministic || fail golf6_deterministic "two int6 artifacts of one checkpoint differ"
# without --out: final_model.int6.safetensors.zst in the run's directory
expect_ok golf6_default_out "$CTRAIN" ckpt golf run --format int6-zstd --no-eval
cmp -s run/final_model.int6.safetensors.zst art6.zst && pass golf6_default_in_run_dir \
    || fail golf6_default_in_run_dir "$(ls run)"
# golf_format=int6-zstd with golf_artifact=1: the same at the end of training; ckpt golf of
# that run then takes its format without --format
expect_ok golf6_at_end "$CTRAIN" train "${run[@]}" golf_artifact=1 golf_format=int6-zstd out_dir=run3
cp out end6.out
cmp -s run3/final_model.int6.safetensors.zst art6.zst && pass golf6_at_end_same_artifact \
    || fail golf6_at_end_same_artifact "run3/final_model.int6.safetensors.zst differs from ckpt golf's art6.zst"
a=$(grep '^final_int6_roundtrip_exact' end6.out); b=$(grep '^final_int6_roundtrip_exact' golf6.out)
[ -n "$a" ] && [ "$a" = "$b" ] && pass golf6_at_end_same_roundtrip || fail golf6_at_end_same_roundtrip "'$a' vs '$b'"
expect_ok golf6_format_of_the_run "$CTRAIN" ckpt golf run3 --out again6.zst --no-eval
expect_grep golf6_format_of_the_run_said "^Serialized model int6\+zstd: $size6 bytes$" out
expect_ok golf6_format_flag_wins "$CTRAIN" ckpt golf run3 --format int8-zlib --out again8.stz --no-eval
cmp -s again8.stz art.stz && pass golf6_format_flag_wins_same || fail golf6_format_flag_wins_same "again8.stz differs from art.stz"

finish
