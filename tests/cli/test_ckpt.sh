#!/usr/bin/env bash
# test_ckpt.sh — checkpoints written by real `ctrain train` runs, read from the outside: h5dump
# shows the layout, h5py + torch load /model under train_gpt.py's state_dict names and shapes
# and recompute the content checksum as docs/checkpoint-format.md describes it; `ctrain ckpt
# info|verify|diff` behave (exit codes, messages naming the damaged tensor); runs work with
# HDF5_USE_FILE_LOCKING=FALSE (NFS/Lustre).
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

have_py=1
"$PY" -c 'import h5py, numpy, torch' 2>/dev/null || have_py=0
need_py() { # NAME -> 0 if h5py, numpy and torch import, else skips the rest of the script
    [ $have_py = 1 ] && return 0
    skip_rest_python "h5py/numpy/torch not importable by $PY (needed from case $1 on)"
}
have_h5dump=1
command -v h5dump >/dev/null || have_h5dump=0

# ---- help and usage errors ----
expect_ok ckpt_help "$CTRAIN" ckpt --help
expect_grep ckpt_help_lists_commands 'info FILE.*' out
for cmd in info verify diff; do
    expect_ok "help_$cmd" "$CTRAIN" ckpt "$cmd" --help
    expect_grep "help_${cmd}_usage" "usage: ctrain ckpt $cmd" out
done
expect_grep help_diff_documents_exact '--exact +exit 1 unless identical' out
expect_fail no_subcommand 2 'usage: ctrain ckpt' "$CTRAIN" ckpt
expect_fail unknown_subcommand 2 "unknown ckpt command 'frob'" "$CTRAIN" ckpt frob
expect_fail unknown_option 2 "unknown option '--bogus'" "$CTRAIN" ckpt verify --bogus x.h5
expect_fail info_needs_file 2 'no checkpoint file given' "$CTRAIN" ckpt info
expect_fail verify_needs_file 2 'no checkpoint file given' "$CTRAIN" ckpt verify
expect_fail diff_needs_two 2 'give two checkpoint files' "$CTRAIN" ckpt diff x.h5
expect_fail missing_file 1 "cannot open checkpoint 'nope.h5': No such file" "$CTRAIN" ckpt info nope.h5
echo 'not a checkpoint' >text.h5
expect_fail not_hdf5 1 "'text.h5' is not an HDF5 file" "$CTRAIN" ckpt verify text.h5

# ---- checkpoints from real runs ----
"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || { fail make_data "from-text failed"; exit 1; }
small=(train_files="$WORK/train.h5" vocab_size=256 num_layers=3 model_dim=32 num_heads=4 num_kv_heads=2
       train_seq_len=16 train_batch_tokens=256 grad_accum_slots=4 iterations=4 val_loss_every=0
       checkpoint_every=2 keep_checkpoints=2 threads=1)
expect_ok train_tied "$CTRAIN" train "${small[@]}" out_dir=tied
expect_ok train_untied "$CTRAIN" train "${small[@]}" tie_embeddings=0 out_dir=untied
expect_ok train_again "$CTRAIN" train "${small[@]}" out_dir=again
A=tied/checkpoints/step_00000002.h5
B=tied/checkpoints/step_00000004.h5
U=untied/checkpoints/step_00000004.h5
if [ ! -f "$B" ] || [ ! -f "$U" ]; then
    fail run_writes_checkpoints "no $B / $U after the runs: $(ls -R tied untied 2>&1 | head -c 300)"
    exit 1
fi
pass run_writes_checkpoints
[ "$(cat tied/checkpoints/latest)" = step_00000004.h5 ] && pass latest_names_newest \
    || fail latest_names_newest "latest holds '$(cat tied/checkpoints/latest)'"

# ---- h5dump ----
if [ $have_h5dump = 1 ]; then
    expect_ok h5dump_header h5dump -H "$B"
    cp out dump_h.txt
    expect_grep h5dump_cq_tensor 'DATASET "blocks.0.attn.c_q.weight"' dump_h.txt
    expect_grep h5dump_float32 'H5T_IEEE_F32LE' dump_h.txt
    expect_grep h5dump_momentum 'DATASET "momentum_buffer"' dump_h.txt
    expect_grep h5dump_exp_avg_sq 'DATASET "exp_avg_sq"' dump_h.txt
    expect_ok h5dump_attributes h5dump -A "$B"
    cp out dump_a.txt
    expect_grep h5dump_format_attr '"ctrain-checkpoint"' dump_a.txt
    expect_grep h5dump_config_group 'GROUP "config"' dump_a.txt
    expect_ok h5dump_properties h5dump -p -H -d /model/blocks.0.attn.c_q.weight "$B"
    expect_grep h5dump_fletcher32 'CHECKSUM FLETCHER32' out
    expect_ok h5dump_full h5dump "$B"
else
    skip_rest "h5dump not installed (apt-get install hdf5-tools)"
fi

# ---- h5py + torch: train_gpt.py's state_dict names and shapes, from the file's own /config ----
# The expected list is written here from train_gpt.py's GPT (not from ctrain's model.c).
expected_state_dict='
import h5py, numpy as np, sys, torch
def expected(cfg):
    V, L, D = int(cfg["vocab_size"]), int(cfg["num_layers"]), int(cfg["model_dim"])
    H, KV, hidden = int(cfg["num_heads"]), int(cfg["num_kv_heads"]), int(cfg["mlp_mult"]) * int(cfg["model_dim"])
    kv_dim, enc = KV * (D // H), L // 2
    shapes = {"tok_emb.weight": (V, D), "skip_weights": (min(enc, L - enc), D)}
    for i in range(L):
        p = f"blocks.{i}."
        shapes.update({p + "attn.c_q.weight": (D, D), p + "attn.c_k.weight": (kv_dim, D),
                       p + "attn.c_v.weight": (kv_dim, D), p + "attn.proj.weight": (D, D),
                       p + "attn.q_gain": (H,), p + "mlp.fc.weight": (hidden, D),
                       p + "mlp.proj.weight": (D, hidden), p + "attn_scale": (D,), p + "mlp_scale": (D,),
                       p + "resid_mix": (2, D)})
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, D)
    return shapes
'
if need_py h5py_state_dict; then
    for f in "$B" "$U"; do
        check "h5py_state_dict_$(dirname "$(dirname "$f")")" "$expected_state_dict"'
with h5py.File(sys.argv[1], "r") as f:
    want = expected(dict(f["config"].attrs))
    state = {name: torch.from_numpy(d[()]) for name, d in f["model"].items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    assert got == want, (sorted(set(got.items()) ^ set(want.items())))
    assert all(v.dtype == torch.float32 for v in state.values())
    for name, shape in want.items():
        g = f["optimizer"][name]
        bufs = ["momentum_buffer"] if name.startswith("blocks.") and len(shape) == 2 and not name.endswith("resid_mix") \
            else ["exp_avg", "exp_avg_sq"]
        assert sorted(g.keys()) == sorted(bufs), (name, list(g.keys()))
        assert all(g[b].shape == shape and g[b].dtype == np.float32 for b in bufs), name
    assert int(f["optimizer"].attrs["adam_step"]) == int(f.attrs["step"]) == 4
    assert [s.decode() for s in f["loader/train/files"][()]] == [sys.argv[2]]
' "$f" "$WORK/train.h5"
    done
fi

# The content checksum, recomputed exactly as docs/checkpoint-format.md says.
content_crc32='
import h5py, numpy as np, struct, sys, zlib
def content_crc32(f):
    records = []
    def attributes(path, obj):
        for name, v in obj.attrs.items():
            if path == "/" and name == "content_crc32":
                continue
            if isinstance(v, (str, bytes)):
                payload = (v.encode() if isinstance(v, str) else v) + b"\0"
            elif np.issubdtype(np.asarray(v).dtype, np.integer):
                payload = struct.pack("<q", int(v))
            else:
                payload = struct.pack("<d", float(v))
            records.append((path + "@" + name, b"A", payload))
    def visit(name, obj):
        attributes("/" + name, obj)
        if isinstance(obj, h5py.Dataset):
            data = obj[()]
            if data.dtype.kind in "iuf":
                data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
            records.append(("/" + name, b"D", data.tobytes()))
    attributes("/", f)
    f.visititems(visit)
    crc = 0
    for key, kind, payload in sorted(records):
        crc = zlib.crc32(kind + key.encode() + b"\0" + payload, crc)
    return crc
with h5py.File(sys.argv[1], "r") as f:
    assert content_crc32(f) == int(f.attrs["content_crc32"]), (content_crc32(f), int(f.attrs["content_crc32"]))
'
if need_py h5py_content_crc32; then
    check h5py_content_crc32 "$content_crc32" "$B"
    check h5py_content_crc32_untied "$content_crc32" "$U"
fi

# ---- ctrain ckpt info / verify / diff ----
expect_ok info "$CTRAIN" ckpt info "$B"
cp out info.txt
expect_grep info_step '^step: +4 \(adam_step 4\)' info.txt
expect_grep info_world_device '^world size: +1' info.txt
expect_grep info_model '^model: +vocab_size 256, num_layers 3, model_dim 32' info.txt
expect_grep info_batch '^batch: +train_batch_tokens 256, train_seq_len 16, grad_accum_slots 4' info.txt
expect_grep info_tensor_row '^/model/blocks\.0\.attn\.c_q\.weight +\[32, 32\] +float32 +4\.0 KiB' info.txt
expect_grep info_optimizer_row '^/optimizer/tok_emb\.weight/exp_avg_sq +\[256, 32\]' info.txt
expect_grep info_total '^total: [0-9]+ tensors' info.txt

expect_ok verify_all "$CTRAIN" ckpt verify "$A" "$B" "$U"
expect_grep verify_says_valid "step_00000004.h5: valid \(step 4, [0-9]+ tensors" out

expect_ok diff_same "$CTRAIN" ckpt diff --exact "$B" again/checkpoints/step_00000004.h5
expect_grep diff_same_identical '^identical: yes' out
expect_grep diff_same_bitwise '^tensors: all [0-9]+ bitwise equal' out
expect_ok diff_steps "$CTRAIN" ckpt diff "$A" "$B"
cp out diff.txt
expect_grep diff_steps_not_identical '^identical: no' diff.txt
expect_grep diff_steps_position 'position differs: step 2 vs 4' diff.txt
expect_grep diff_steps_row '^/model/blocks\.0\.attn\.c_q\.weight +\[32, 32\] +[0-9.]+e[-+][0-9]+ +[0-9.]+e[-+][0-9]+ +[0-9.]+e[-+][0-9]+ +[0-9]+/1024' diff.txt
# the weights' distance as a whole, computed again from the files (h5py): the summary and a row
if need_py diff_summary_value; then
    "$PY" - "$A" "$B" diff.txt >diffsum.out 2>&1 <<'PY' && pass diff_summary_value || fail diff_summary_value "$(tail -c 400 diffsum.out)"
import re, sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    d = sum(float(np.sum((a["model"][k][()].astype(np.float64) - b["model"][k][()]) ** 2)) for k in a["model"])
    n = sum(float(np.sum(a["model"][k][()].astype(np.float64) ** 2)) for k in a["model"])
    x, y = a["model/blocks.0.attn.c_q.weight"][()].astype(np.float64), b["model/blocks.0.attn.c_q.weight"][()]
    row = np.linalg.norm(x - y) / max(np.linalg.norm(x), np.linalg.norm(y))
    count = len(a["model"])
text = open(sys.argv[3]).read()
m = re.search(r"^summary: model weights \|\|A-B\|\|/\|\|A\|\| = (\S+) over (\d+) tensors", text, re.M)
assert m and int(m.group(2)) == count, text[-400:]
assert abs(float(m.group(1)) - (d / n) ** 0.5) <= 1e-3 * (d / n) ** 0.5, (m.group(1), (d / n) ** 0.5)
r = re.search(r"^/model/blocks\.0\.attn\.c_q\.weight +\S+ \S+ +\S+ +\S+ +(\S+)", text, re.M)
assert r and abs(float(r.group(1)) - row) <= 1e-3 * row, (r and r.group(1), row)
PY
fi
# --model-only: the weights alone (the optimizer state is not listed; identical means equal weights)
expect_ok diff_model_only "$CTRAIN" ckpt diff --model-only "$A" "$B"
if grep -q '^/optimizer/' out; then fail diff_model_only_no_optimizer "$(grep -m1 '^/optimizer/' out)"; else pass diff_model_only_no_optimizer; fi
expect_ok diff_model_only_same "$CTRAIN" ckpt diff --model-only --exact "$B" again/checkpoints/step_00000004.h5
expect_grep diff_model_only_says '^identical \(model weights\): yes' out
"$CTRAIN" ckpt diff --exact "$A" "$B" >/dev/null 2>&1
rc=$?
[ $rc = 1 ] && pass diff_exact_differs || fail diff_exact_differs "diff --exact of different checkpoints exited $rc, expected 1"
expect_ok diff_untied "$CTRAIN" ckpt diff "$B" "$U"
expect_grep diff_untied_only_in_b '^/model/lm_head\.weight .*only in B' out
expect_grep diff_untied_config 'config differs: tie_embeddings 1 vs 0' out

# damage: a flipped byte inside a tensor's data, found with h5py, and a truncated copy
if need_py verify_flipped_byte; then
    cp "$B" flipped.h5
    check find_chunk '
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    print(f["/model/blocks.1.mlp.fc.weight"].id.get_chunk_info(0).byte_offset)
' flipped.h5
    offset=$(tail -n 1 py.out)
    "$PY" -c '
import sys
path, offset = sys.argv[1], int(sys.argv[2]) + 37
with open(path, "r+b") as f:
    f.seek(offset); b = f.read(1); f.seek(offset); f.write(bytes([b[0] ^ 0x01]))
' flipped.h5 "$offset"
    expect_fail verify_flipped_byte 1 "/model/blocks\.1\.mlp\.fc\.weight: cannot read the data \(HDF5: .*[Ff]letcher32" \
        "$CTRAIN" ckpt verify flipped.h5
    expect_grep verify_flipped_says_invalid 'flipped.h5: INVALID' out
fi
cp "$B" truncated.h5
truncate -s 60000 truncated.h5
expect_fail verify_truncated 1 "truncated.h5.*truncated" "$CTRAIN" ckpt verify truncated.h5

# Each later check of `ckpt verify`, reached through the CLI (tests/meta/test_removed_checks.sh
# removes each from a copy of ctrain, and these cases must then fail):
# a tensor rewritten through HDF5 (its chunks' Fletcher32 valid) is caught by the content checksum,
cp "$B" rewritten.h5
check make_rewritten_tensor '
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/model/blocks.0.attn.c_q.weight"]
    w = d[()]; w[1, 2] += 1.0; d[...] = w
' rewritten.h5
expect_fail verify_content_checksum_mismatch 1 "rewritten.h5': content checksum mismatch: content_crc32 is 0x[0-9a-f]{8} but the contents give 0x[0-9a-f]{8}" \
    "$CTRAIN" ckpt verify rewritten.h5
# and a loader cursor past the end of its file (checksum made to match) by the cursor check.
cp "$B" cursor.h5
check make_cursor_past_end "${content_crc32%%with h5py.File*}"'
with h5py.File(sys.argv[1], "r+") as f:
    g = f["loader/train"]
    g.attrs.modify("position", int(g["file_tokens"][0]) + 5)
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' cursor.h5
expect_fail verify_cursor_past_file 1 "cursor.h5': /loader/train: loader cursor position [0-9]+ is outside file '.*train.h5'" \
    "$CTRAIN" ckpt verify cursor.h5

# ---- ckpt export: safetensors read back by an independent parser, and into the PyTorch model ----
expect_fail export_needs_out 2 '--out is required' "$CTRAIN" ckpt export "$B"
expect_fail export_bad_dtype 2 "--dtype 'fp16': expected fp32 or bf16" "$CTRAIN" ckpt export "$B" --out x.st --dtype fp16
expect_fail export_bad_file 1 "cannot open checkpoint 'nope.h5'" "$CTRAIN" ckpt export nope.h5 --out x.st
[ ! -e x.st ] && pass export_failure_writes_nothing || fail export_failure_writes_nothing "x.st exists"
for ck in "$B" "$U"; do
    tag=$(basename "$(dirname "$(dirname "$ck")")")
    expect_ok "export_fp32_$tag" "$CTRAIN" ckpt export "$ck" --out "$tag.safetensors"
    expect_ok "export_bf16_$tag" "$CTRAIN" ckpt export "$ck" --out "$tag.bf16.safetensors" --dtype bf16
    if need_py "export_read_back_$tag"; then
        check "export_read_back_$tag" '
import h5py, json, numpy as np, struct, sys, torch
sys.path.insert(0, sys.argv[4])
from ref_gpt import RefGPT

def read_safetensors(path):  # the format, read from its definition: u64 length, JSON, bytes
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    assert (8 + n) % 8 == 0, "data not 8-byte aligned"
    data, out, end = blob[8 + n:], {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        assert lo == end, (name, lo, end)  # back to back, in order
        end = hi
        raw = np.frombuffer(data[lo:hi], dtype="<f4" if t["dtype"] == "F32" else "<u2")
        out[name] = (raw, t["dtype"], t["shape"])
    assert end == len(data), (end, len(data))
    return header, out

ck, fp32, bf16 = sys.argv[1], sys.argv[2], sys.argv[3]
with h5py.File(ck, "r") as f:
    model = {k: f["model"][k][()] for k in f["model"]}
    cfg = {k: f["config"].attrs[k] for k in f["config"].attrs}
    cfg = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in cfg.items()}
h, got = read_safetensors(fp32)
assert set(got) == set(model), sorted(set(got) ^ set(model))
for name, (raw, dtype, shape) in got.items():
    assert dtype == "F32" and list(shape) == list(model[name].shape), (name, dtype, shape)
    assert np.array_equal(raw.reshape(shape), model[name]), name  # bit for bit
assert h["__metadata__"]["format"] == "pt"
# the model configuration travels with the weights (strings, as safetensors metadata must be)
for k in ("vocab_size", "num_layers", "model_dim", "num_heads", "num_kv_heads", "mlp_mult", "tie_embeddings",
          "rope_base", "logit_softcap", "qk_gain_init", "tied_embed_init_std", "train_seq_len"):
    assert float(h["__metadata__"][k]) == float(cfg[k]), (k, h["__metadata__"].get(k), cfg[k])
_, got16 = read_safetensors(bf16)
for name, (raw, dtype, shape) in got16.items():
    want = torch.from_numpy(model[name]).to(torch.bfloat16).view(torch.int16).numpy().view("<u2").ravel()
    assert dtype == "BF16" and np.array_equal(raw, want), name  # torch rounding, bit for bit
# the project PyTorch model gives the same loss from the export as from the checkpoint
params = {k: torch.from_numpy(v.reshape(s).copy()) for k, (v, _, s) in got.items()}
ref = {k: torch.from_numpy(v) for k, v in model.items()}
c = {"num_layers": int(cfg["num_layers"]), "num_heads": int(cfg["num_heads"]), "num_kv_heads": int(cfg["num_kv_heads"]),
     "model_dim": int(cfg["model_dim"]), "rope_base": float(cfg["rope_base"]), "logit_softcap": float(cfg["logit_softcap"]),
     "tie_embeddings": int(cfg["tie_embeddings"]), "train_seq_len": int(cfg["train_seq_len"])}
tokens = torch.arange(2 * 16 + 1) % 256
x, y = tokens[:-1].view(2, 16), tokens[1:].view(2, 16)
a, b = RefGPT(c, params).loss(x, y).item(), RefGPT(c, ref).loss(x, y).item()
assert a == b and np.isfinite(a), (a, b)
' "$ck" "$tag.safetensors" "$tag.bf16.safetensors" "$CT_ROOT/tests/parity"
    fi
done

# ---- a command never writes over its input or into a checkpoints/ folder ----
# (the same path, a link to it, the run directory that resolves to it): refused before anything
# is written, and the checkpoint stays valid
cp -r tied guard
G=guard/checkpoints/step_00000004.h5
guard_sum=$(sha256sum <"$G")
expect_fail export_out_is_input 2 "--out '$G' is the input '$G': writing it would destroy the input" \
    "$CTRAIN" ckpt export "$G" --out "$G"
ln -s "$WORK/$G" guard_link.h5
expect_fail export_out_links_to_input 2 "--out 'guard_link.h5' is the input '$G' \(the same file\)" \
    "$CTRAIN" ckpt export "$G" --out guard_link.h5
expect_fail golf_out_is_input 2 "--out '$G' is the input '$G'" "$CTRAIN" ckpt golf guard --out "$G" --no-eval
expect_fail export_into_checkpoints 2 "--out 'guard/checkpoints/w.safetensors' lies in a checkpoints/ folder, where a resume would take it for a checkpoint" \
    "$CTRAIN" ckpt export "$G" --out guard/checkpoints/w.safetensors
[ "$(sha256sum <"$G")" = "$guard_sum" ] && [ "$(ls guard/checkpoints)" = "$(ls tied/checkpoints)" ] && pass guarded_input_untouched \
    || fail guarded_input_untouched "$(ls -l guard/checkpoints)"
expect_ok guarded_input_still_valid "$CTRAIN" ckpt verify "$G"
expect_ok export_makes_folder "$CTRAIN" ckpt export "$G" --out exports/new/w.safetensors
[ -s exports/new/w.safetensors ] && pass export_folder_made || fail export_folder_made "$(ls -R exports 2>&1)"

# ---- a non-finite tensor (checksums made to match) is invalid: never resumed from ----
if need_py nonfinite_tensor_invalid; then
    cp "$B" nonfinite.h5
    check make_nonfinite_tensor "${content_crc32%%with h5py.File*}"'
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/model/blocks.0.attn.c_q.weight"]
    w = d[()]; w[3, 5] = np.nan; d[...] = w
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' nonfinite.h5
    expect_fail nonfinite_tensor_invalid 1 "/model/blocks.0.attn.c_q.weight holds NaN at element $((3 * 32 + 5)): a diverged state" \
        "$CTRAIN" ckpt verify nonfinite.h5
fi

# ---- a checkpoint of a newer format is refused, not skipped, and never deleted ----
if need_py newer_format_refused; then
    cp -r tied newer
    check make_newer_format '
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs.modify("format_version", 3)
' newer/checkpoints/step_00000004.h5
    expect_fail newer_format_refused 1 "step_00000004.h5' was written by a newer ctrain \(format 3; this ctrain .* reads formats up to 2\)" \
        "$CTRAIN" train "${small[@]}" iterations=6 out_dir=newer
    if grep -q 'resumed from' out; then fail newer_format_no_fallback "fell back to an older checkpoint: $(head -c 300 out)"
    else pass newer_format_no_fallback; fi
    expect_fail newer_format_verify 1 'written by a newer ctrain' "$CTRAIN" ckpt verify newer/checkpoints/step_00000004.h5
    # a run that resumes from elsewhere into this directory never replaces it (same step) ...
    expect_fail newer_format_not_replaced 1 "not replacing '.*step_00000004.h5': it was written by a newer ctrain \(format 3" \
        "$CTRAIN" train "${small[@]}" iterations=6 out_dir=newer resume="$WORK/$A"
    check newer_format_still_there '
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    assert int(f.attrs["format_version"]) == 3, f.attrs["format_version"]
' newer/checkpoints/step_00000004.h5
    # ... and prunes around it, never deletes it
    cp -r tied newer2
    check make_newer_format_2 '
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs.modify("format_version", 3)
' newer2/checkpoints/step_00000002.h5
    expect_ok newer_format_other_resume "$CTRAIN" train "${small[@]}" iterations=8 out_dir=newer2 \
        resume="$WORK/$B" keep_checkpoints=1
    if [ -f newer2/checkpoints/step_00000002.h5 ]; then pass newer_format_not_pruned
    else fail newer_format_not_pruned "the newer-format checkpoint was deleted: $(ls newer2/checkpoints)"; fi
    expect_grep newer_format_prune_warning "not deleting .*step_00000002.h5': written by a newer ctrain \(format 3\)" err
fi

# ---- a run directory, its checkpoints/ or its `latest` name the checkpoint `latest` names ----
for arg in tied tied/checkpoints tied/checkpoints/latest; do
    expect_ok "verify_accepts_${arg//\//_}" "$CTRAIN" ckpt verify "$arg"
    expect_grep "verify_resolves_${arg//\//_}" '^tied/checkpoints/step_00000004.h5: valid' out
done
expect_ok info_accepts_run_dir "$CTRAIN" ckpt info tied
expect_grep info_run_dir_file '^file: +tied/checkpoints/step_00000004.h5' out
expect_ok diff_accepts_run_dirs "$CTRAIN" ckpt diff tied again
mkdir -p no_ckpts
expect_fail info_dir_without_checkpoints 1 "'no_ckpts' is a directory without checkpoints" "$CTRAIN" ckpt info no_ckpts
# without `latest`, the newest step_*.h5
cp -r tied nolatest && rm nolatest/checkpoints/latest
expect_ok verify_without_latest "$CTRAIN" ckpt verify nolatest
expect_grep verify_without_latest_newest '^nolatest/checkpoints/step_00000004.h5: valid' out

# ---- format 1 (before the data checksums) is still read and resumed from ----
if need_py format1_still_read; then
    cp -r tied old1
    check make_format1 "${content_crc32%%with h5py.File*}"'
with h5py.File(sys.argv[1], "r+") as f:
    del f["loader/train/file_crc32"], f["loader/train/file_sample_crc32"]
    f.attrs.modify("format_version", np.int32(1))
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' old1/checkpoints/step_00000004.h5
    expect_ok format1_verify "$CTRAIN" ckpt verify old1/checkpoints/step_00000004.h5
    expect_ok format1_resume "$CTRAIN" train "${small[@]}" iterations=6 out_dir=old1
    expect_grep format1_resume_from_it 'resumed from old1/checkpoints/step_00000004.h5: step 4' out
    expect_grep format1_note "is a format 1 checkpoint, which records no data checksums" out
fi

# ---- the data's identity: the file's tokens_crc32 and the CRC-32 of its first and last tokens ----
if need_py data_identity_recorded; then
    check data_identity_recorded '
import h5py, numpy as np, sys, zlib
K = 65536
with h5py.File(sys.argv[2], "r") as d:
    t = d["tokens"][()].astype("<u2")
    attr = int(d["tokens"].attrs["tokens_crc32"])
whole = zlib.crc32(t.tobytes())
sample = whole if len(t) <= 2 * K else zlib.crc32(t[-K:].tobytes(), zlib.crc32(t[:K].tobytes()))
assert attr == whole, (attr, whole)
with h5py.File(sys.argv[1], "r") as f:
    g = f["loader/train"]
    assert int(f.attrs["format_version"]) == 2
    assert list(g["file_crc32"][()]) == [whole], (g["file_crc32"][()], whole)
    assert list(g["file_sample_crc32"][()]) == [sample], (g["file_sample_crc32"][()], sample)
' "$B" "$WORK/train.h5"
fi

# Besides damage, verification refuses data kept outside the file (HDF5 external storage),
# /config values the command line would refuse, and a file whose name says another step than it
# holds (checksums made to match in each): resume and pruning go by names, and a copy named
# step_00000099.h5 was once resumed from as its own step and never pruned.
cp "$B" external.h5
check make_external_storage "${content_crc32%%with h5py.File*}"'
import os
with h5py.File(sys.argv[1], "r+") as f:
    w = f["/model/skip_weights"][()]
    raw = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "outside.raw")
    w.astype("<f4").tofile(raw)
    del f["/model/skip_weights"]
    f.create_dataset("/model/skip_weights", shape=w.shape, dtype="<f4", external=[(raw, 0, w.nbytes)])
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' external.h5
expect_fail verify_external_storage_refused 1 "external.h5': /model/skip_weights keeps its data in an external file, outside the checkpoint" \
    "$CTRAIN" ckpt verify external.h5
cp "$B" badconfig.h5
check make_invalid_config "${content_crc32%%with h5py.File*}"'
with h5py.File(sys.argv[1], "r+") as f:
    f["config"].attrs.modify("iterations", -1)
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' badconfig.h5
expect_fail verify_invalid_config_refused 1 "badconfig.h5': /config: .*iterations" "$CTRAIN" ckpt verify badconfig.h5
cp "$B" stepcursor.h5
check make_step_past_cursor "${content_crc32%%with h5py.File*}"'
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs.modify("step", 25)
    f["optimizer"].attrs.modify("adam_step", 25)
    f.attrs.modify("content_crc32", np.uint32(content_crc32(f)))
' stepcursor.h5
expect_fail verify_step_disagrees_with_cursor 1 "stepcursor.h5': the loader has taken 1040 tokens \(/loader/train stream_tokens\), but step 25 of this batch geometry takes 6500 \(260 per step\)" \
    "$CTRAIN" ckpt verify stepcursor.h5
cp -r tied renamed && cp renamed/checkpoints/step_00000002.h5 renamed/checkpoints/step_00000099.h5
expect_fail verify_name_disagrees_refused 1 "step_00000099.h5' holds step 2, but its name says step 99" \
    "$CTRAIN" ckpt verify renamed/checkpoints/step_00000099.h5
expect_ok renamed_run_goes_on "$CTRAIN" train "${small[@]}" iterations=8 out_dir=renamed
expect_grep renamed_run_resumed_from_4 'resumed from renamed/checkpoints/step_00000004.h5: step 4' out
# keep_checkpoints=2: the copy does not count among the kept (steps 8 and 6), nor is it deleted
[ "$(ls renamed/checkpoints | tr '\n' ' ')" = "latest step_00000006.h5 step_00000008.h5 step_00000099.h5 " ] \
    && pass renamed_copy_not_counted || fail renamed_copy_not_counted "$(ls renamed/checkpoints | tr '\n' ' ')"
expect_grep renamed_copy_warned "step_00000099.h5' holds step 2, not the step its name says; not counted in keep_checkpoints" err

# A long string attribute (60 KB, as large as HDF5 keeps one in an object header) is cut by ckpt info
cp "$B" longattr.h5
check make_long_attribute '
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f.attrs.modify("device", "d" * 60000)
' longattr.h5
expect_ok info_long_attribute "$CTRAIN" ckpt info longattr.h5
[ "$(wc -c <out)" -lt 20000 ] && grep -q '^device: *d*\.\.\. (60000 bytes in all)$' out && pass info_long_attribute_cut \
    || fail info_long_attribute_cut "$(wc -c <out) bytes of output: $(grep '^device' out | head -c 300)"

# A token in the middle of a training file changed (beyond the first and last 65536 tokens that
# the sample checksum covers; the file's tokens_crc32 rewritten to match, as a converter would):
# only the full-file checksum tells, and the resume is refused.
cat /usr/share/common-licenses/* >big.txt
"$CTRAIN" data from-text --out big.h5 big.txt >/dev/null 2>&1 || fail make_big_data "from-text failed"
expect_ok identity_first_run "$CTRAIN" train "${small[@]}" train_files="$WORK/big.h5" iterations=2 out_dir=ident
check change_middle_token '
import h5py, numpy as np, sys, zlib
with h5py.File(sys.argv[1], "r+") as f:
    d = f["tokens"]
    t = d[()]
    assert len(t) > 2 * 65536 + 1000, len(t)
    i = len(t) // 2
    t[i] = (int(t[i]) + 1) % 256
    d[...] = t
    d.attrs.modify("tokens_crc32", zlib.crc32(t.astype("<u2").tobytes()))
' big.h5
expect_fail resume_refuses_changed_middle_token 1 "the training data differs: '.*big.h5' holds other tokens than when the checkpoint was written \(the same count, [0-9]+, but tokens_crc32 is 0x[0-9a-f]{8} now, 0x[0-9a-f]{8} then\)" \
    "$CTRAIN" train "${small[@]}" train_files="$WORK/big.h5" iterations=4 out_dir=ident

# ---- HDF5_USE_FILE_LOCKING=FALSE (NFS / Lustre without flock) ----
expect_ok nolock_train env HDF5_USE_FILE_LOCKING=FALSE "$CTRAIN" train "${small[@]}" iterations=2 out_dir=nolock
expect_ok nolock_verify env HDF5_USE_FILE_LOCKING=FALSE "$CTRAIN" ckpt verify nolock/checkpoints/step_00000002.h5

# ---- docs/checkpoint-format.md lists exactly the keys that must match on resume ----
doc_keys=$(awk '/<!-- shape-keys:begin -->/{on=1; next} /<!-- shape-keys:end -->/{on=0} on' \
    "$CT_ROOT/docs/checkpoint-format.md" | grep -oE '`[a-z0-9_]+`' | tr -d '`' | sort)
table_keys=$("$CTRAIN" train --help-markdown | grep '| must match |' | grep -oE '^\| `[a-z0-9_]+`' | tr -d '|` ' | sort)
if [ -n "$table_keys" ] && [ "$doc_keys" = "$table_keys" ]; then pass doc_lists_shape_keys
else fail doc_lists_shape_keys "docs/checkpoint-format.md: $(echo $doc_keys) vs key table: $(echo $table_keys)"; fi

finish
