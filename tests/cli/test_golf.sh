#!/usr/bin/env bash
# test_golf.sh — `ctrain ckpt golf`, the parameter-golf artifact: its bytes equal an independent
# PyTorch implementation of train_gpt.py's int8 rule (written here from the rule's description:
# torch.quantile clip per row, float16 row scales, small tensors kept as float16 and control
# tensors as float32) compressed by Python's zlib at level 9; the round-trip val_loss it prints
# equals the project's PyTorch model (tests/parity/ref_gpt.py) evaluated on the dequantized
# weights; bad input gives clear errors.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
check() { # NAME PYTHON_CODE ARGS...
    local name=$1 code=$2
    shift 2
    if "$PY" -c "$code" "$@" >py.out 2>&1; then pass "$name"; else fail "$name" "$(tail -c 800 py.out)"; fi
}

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
# model_dim 320: tok_emb (256 x 320) and every block matrix exceed 65,536 elements (int8 per
# row); the norms' gains, q_gain, resid_mix and skip_weights stay floats
run=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=3 model_dim=320 num_heads=4 num_kv_heads=2
     train_seq_len=32 train_batch_tokens=512 grad_accum_slots=2 val_batch_size=512 iterations=6 val_loss_every=0
     checkpoint_every=0 threads=2)
expect_ok golf_train "$CTRAIN" train "${run[@]}" out_dir=run
expect_ok golf_runs "$CTRAIN" ckpt golf run --out art.stz
cp out golf.out
expect_grep golf_checkpoint_named '^run/checkpoints/step_00000006.h5$' golf.out
expect_grep golf_counts '^int8 artifact: [0-9]+ parameters in 32 tensors, 13 quantized to int8$' golf.out
expect_grep golf_size_line '^Serialized model int8\+zlib: [0-9]+ bytes \(payload:[0-9]+ raw:[0-9]+ payload_ratio:[0-9.]+x\) -> art.stz$' golf.out
expect_grep golf_roundtrip_line '^final_int8_zlib_roundtrip val_loss:[0-9.]+ val_bpb:[0-9.]+ eval_time:[0-9]+ms$' golf.out
expect_grep golf_roundtrip_exact '^final_int8_zlib_roundtrip_exact val_loss:[0-9.]{10} val_bpb:[0-9.]{10}$' golf.out

if ! "$PY" -c 'import h5py, numpy, torch' 2>/dev/null; then
    skip_rest "h5py/numpy/torch not importable by $PY"
else
    check golf_bytes_match_pytorch '
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

# the round trip: dequantize as train_gpt.py does, evaluate as its eval_val with the project model
sys.path.insert(0, sys.argv[4])
from ref_gpt import RefGPT
deq = {}
for name in names:
    if "quantized/" + name in got:
        q = torch.from_numpy(got["quantized/" + name].copy()).float()
        s = torch.from_numpy(np.array(got["scales/" + name])).float()
        deq[name] = q * s.view(-1, 1) if q.ndim == 2 else q * float(s)
    else:
        deq[name] = torch.from_numpy(got["passthrough/" + name].copy()).float()
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
    loss = RefGPT(c, deq).loss(x, y).item()
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
expect_grep golf_cap_artifact_only "^size: $size bytes \(artifact only: give --code-bytes for the code's share\), under the 16000000-byte cap by $((16000000 - size)) bytes$" out
printf '%01000d' 0 >train_gpt.py
expect_ok golf_code_file "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes train_gpt.py
expect_grep golf_code_size_line '^Code size: 1000 bytes$' out
expect_grep golf_total_line "^Total submission size int8\+zlib: $((size + 1000)) bytes$" out
expect_ok golf_code_over_cap "$CTRAIN" ckpt golf run --out only.stz --no-eval --code-bytes 15999999
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

finish
