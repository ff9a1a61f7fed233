#!/usr/bin/env bash
# test_eval_stride.sh — sliding-window validation (eval_stride, the record's EVAL_STRIDE) in a run
# and in `ckpt golf`'s round trip, which eval_seq_len (EVAL_SEQ_LEN) runs on longer sequences with
# the NTK-scaled RoPE base: the lines and metrics.jsonl fields that say which evaluation
# it was and how long it took; the numbers against the project's PyTorch model evaluated by the
# record's rule (tests/parity/sliding.py, 1e-5 relative); 2 ranks (MPICH's mpiexec) give the
# numbers of 1; bad values are errors naming the key. (The windows themselves against brute
# force: tests/unit/test_eval.c.)
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
# tokenizer tables with varied bytes, leading spaces and boundaries (from-text's count one byte
# a token), so that val_bpb checks the bytes rule too
"$PY" - <<'PY' || { fail make_tables "h5py"; exit 1; }
import h5py, numpy as np
with h5py.File("val.h5", "r+") as f:
    t = np.arange(256)
    f["tokenizer/base_bytes"][...] = (t % 4 + 1).astype(np.int16)
    f["tokenizer/has_leading_space"][...] = (t % 3 == 0).astype(np.uint8)
    f["tokenizer/is_boundary_token"][...] = (t % 5 == 0).astype(np.uint8)
PY
# train_seq_len 32, stride 12 (T/stride not whole: windows end short of the split too)
run=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2
     train_seq_len=32 train_batch_tokens=256 grad_accum_slots=2 val_batch_size=256 iterations=6 warmdown_iters=2
     val_loss_every=3 checkpoint_every=0 threads=2 matrix_lr=0.08 tied_embed_lr=0.2)

# ---- errors naming the key ----
expect_fail stride_negative 2 'eval_stride = -1: expected 0 \(non-overlapping validation\) or a stride with 0 < eval_stride < train_seq_len = 32' \
    "$CTRAIN" train "${run[@]}" eval_stride=-1 out_dir=x
expect_fail stride_seq_len 2 'eval_stride = 32: expected 0 \(non-overlapping validation\) or a stride with 0 < eval_stride < train_seq_len = 32' \
    "$CTRAIN" train "${run[@]}" eval_stride=32 out_dir=x
expect_fail stride_not_int 2 "eval_stride" "$CTRAIN" train "${run[@]}" eval_stride=1.5 out_dir=x

# ---- a run: every validation sliding, the last also non-overlapping ----
expect_ok run_stride "$CTRAIN" train "${run[@]}" eval_stride=12 out_dir=s
cp out s.out
expect_grep val_line_sliding '^step 3/6  val_loss [0-9.]+  val_bpb [0-9.]+  sliding_window stride 12  eval_time [0-9]+ms  train_time [0-9]+ms$' s.out
expect_grep final_line_plain '^step 6/6  val_loss [0-9.]+  val_bpb [0-9.]+  non-overlapping  eval_time [0-9]+ms  train_time [0-9]+ms$' s.out
order=$(grep -E '^step 6/6  val_loss' s.out | sed -E 's/.*val_bpb [0-9.]+  //; s/  eval_time.*//' | tr '\n' '|')
[ "$order" = "non-overlapping|sliding_window stride 12|" ] && pass final_plain_then_sliding \
    || fail final_plain_then_sliding "final lines: $order"
expect_grep metrics_sliding '^\{"step": 3, "val_loss": [0-9.e-]+, "val_bpb": [0-9.e-]+, "eval_stride": 12, "eval_time_ms": [0-9.]+, "train_time_ms": [0-9.]+\}$' s/metrics.jsonl
expect_grep metrics_final_plain '^\{"step": 6, "val_loss": [0-9.e-]+, "val_bpb": [0-9.e-]+, "eval_stride": 0, "eval_time_ms": [0-9.]+' s/metrics.jsonl
# the checkpoint keeps the sliding one, the last validation
"$PY" - s/metrics.jsonl s/checkpoints/step_00000006.h5 <<'PY' && pass ckpt_keeps_sliding || fail ckpt_keeps_sliding "differs"
import json, sys, h5py
last = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l][-1]
assert last["eval_stride"] == 12, last
with h5py.File(sys.argv[2], "r") as f:
    assert f["metrics"].attrs["last_val_loss"] == last["val_loss"], (dict(f["metrics"].attrs), last)
PY
# without the key, a run prints and logs as it always did
expect_ok run_plain "$CTRAIN" train "${run[@]}" out_dir=p
if grep -qE 'eval_time|sliding|non-overlapping' out || grep -q eval_stride p/metrics.jsonl; then
    fail plain_unchanged "$(grep -E 'val_loss' out | head -3)"
else pass plain_unchanged; fi
# the same weights: the final non-overlapping validation of the stride run is the plain run's
a=$(grep '"step": 6, "val_loss"' p/metrics.jsonl | sed 's/, "train_time_ms.*//')
b=$(grep '"step": 6, "val_loss"' s/metrics.jsonl | grep '"eval_stride": 0' | sed 's/, "eval_stride.*//')
expect_same plain_equals_stride_runs_plain "final val_loss and val_bpb" "$a" "$b"
# train_gpt.py's variable
EVAL_STRIDE=12 expect_ok env_stride "$CTRAIN" train "${run[@]}" iterations=0 out_dir=e
expect_grep env_stride_banner '^  eval_stride += 12  \(environment: EVAL_STRIDE\)$' out
expect_grep env_stride_used '^step 0/0  val_loss [0-9.]+  val_bpb [0-9.]+  sliding_window stride 12' out

# ---- the numbers against PyTorch (the record's rule written again in tests/parity/sliding.py) ----
if ! "$PY" -c 'import torch, h5py' 2>/dev/null; then
    skip_python torch_non_overlapping "python3-torch / python3-h5py not installed"
    skip_python torch_sliding "python3-torch / python3-h5py not installed"
else
    "$PY" "$CT_ROOT/tests/parity/sliding.py" torch s/checkpoints/step_00000006.h5 s/metrics.jsonl 1e-5 >py.out 2>&1
    rc=$?
    sed "s/^\(PASS\|FAIL\) torch\//\1 $TEST_NAME\/torch_/" py.out | grep -E '^(PASS|FAIL) '
    [ "$(grep -cE '^(PASS|FAIL) ' py.out)" = 2 ] || fail torch_checker "sliding.py exited $rc without two verdicts: $(tail -c 600 py.out)"
fi

# ---- 2 ranks give the numbers of 1 (the windows shared out as contiguous ranges) ----
if command -v mpiexec >/dev/null 2>&1; then
    for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL)'); do unset "$v"; done
    # the initial weights (the same for any world size), a wide embedding so that the losses vary
    r1=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2
        train_seq_len=32 train_batch_tokens=256 grad_accum_slots=2 val_batch_size=256 iterations=0 threads=1
        tied_embed_init_std=0.5 eval_stride=12)
    expect_ok ranks_1 "$CTRAIN" train "${r1[@]}" out_dir=w1
    expect_ok ranks_2 timeout 120 mpiexec -launcher fork -n 2 "$CTRAIN" train "${r1[@]}" out_dir=w2 collective_timeout=60
    expect_grep ranks_2_ran '^2 ranks \(pmi2\)' out
    "$PY" - w1/metrics.jsonl w2/metrics.jsonl <<'PY' >close.out 2>&1 && pass ranks_2_equal_1 || fail ranks_2_equal_1 "$(cat close.out)"
import json, sys
def vals(p):
    return [(r["eval_stride"], r["val_loss"], r["val_bpb"]) for r in map(json.loads, open(p)) if "val_loss" in r]
a, b = vals(sys.argv[1]), vals(sys.argv[2])
assert len(a) == len(b) == 2 and [x[0] for x in a] == [x[0] for x in b] == [0, 12], (a, b)
worst = max(abs(x - y) / abs(y) for p, q in zip(a, b) for x, y in zip(p[1:], q[1:]))
print(f"worst relative difference {worst:.2e}")
assert worst <= 1e-12, (a, b)
PY
else
    for c in ranks_1 ranks_2 ranks_2_ran ranks_2_equal_1; do skip "$c" "mpiexec not installed (apt-get install mpich)"; done
fi

# ---- ckpt golf's round trip: the sliding window's lines after the non-overlapping ones ----
expect_ok golf_stride "$CTRAIN" ckpt golf s --out g.stz
cp out golf.out
expect_grep golf_plain_line '^final_int8_zlib_roundtrip val_loss:[0-9.]+ val_bpb:[0-9.]+ eval_time:[0-9]+ms$' golf.out
expect_grep golf_sliding_line '^final_int8_zlib_sliding_window val_loss:[0-9.]+ val_bpb:[0-9.]+ stride:12 eval_time:[0-9]+ms$' golf.out
expect_grep golf_sliding_exact '^final_int8_zlib_sliding_window_exact val_loss:[0-9.]{10} val_bpb:[0-9.]{10}$' golf.out
order=$(grep -oE '^final_int8_zlib_[a-z_]+' golf.out | tr '\n' '|')
[ "$order" = "final_int8_zlib_roundtrip|final_int8_zlib_roundtrip_exact|final_int8_zlib_sliding_window|final_int8_zlib_sliding_window_exact|" ] \
    && pass golf_order || fail golf_order "$order"
expect_ok golf_stride_option "$CTRAIN" ckpt golf p --out g2.stz --eval-stride 8
expect_grep golf_stride_option_used '^final_int8_zlib_sliding_window val_loss:[0-9.]+ val_bpb:[0-9.]+ stride:8 eval_time:' out
expect_ok golf_stride_zero "$CTRAIN" ckpt golf s --out g3.stz --eval-stride 0
if grep -q sliding out; then fail golf_stride_zero_plain "$(grep sliding out)"; else pass golf_stride_zero_plain; fi
expect_fail golf_stride_bad 2 'eval_stride = 40: expected 0 \(non-overlapping validation\) or a stride with 0 < eval_stride < train_seq_len = 32' \
    "$CTRAIN" ckpt golf s --out g4.stz --eval-stride 40
# the round trip of the artifact's weights, by the record's rule, in PyTorch: the sliding value
# golf printed is sliding.py's on the dequantized weights (written as a checkpoint's /model), on
# sequences of T tokens (the model's RoPE tables for T: NTK-scaled above rope_train_seq_len)
cat >golf_torch.py <<'PY'
import json, re, struct, sys, zlib
import h5py, numpy as np, torch
sys.path.insert(0, sys.argv[4])
import sliding
raw = zlib.decompress(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n]); header.pop("__metadata__")
data = raw[8 + n:]
kinds = {"I8": "<i1", "F16": "<f2", "F32": "<f4"}
got = {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], kinds[v["dtype"]]).reshape(v["shape"])
       for k, v in header.items()}
with h5py.File(sys.argv[2], "r") as h:
    cfg = sliding.read_config(h)
    names = list(h["model"])
deq = {}
for k in names:
    if "quantized/" + k in got:
        q, s = torch.from_numpy(got["quantized/" + k].astype(np.float32)), torch.from_numpy(got["scales/" + k].astype(np.float32))
        deq[k] = q * s.view(-1, 1) if q.ndim == 2 else q * float(s)
    else:
        deq[k] = torch.from_numpy(got["passthrough/" + k].astype(np.float32))
with h5py.File("val.h5", "r") as h:
    tokens = np.asarray(h["tokens"][:], dtype=np.int64)
    luts = (np.asarray(h["tokenizer/base_bytes"][:], dtype=np.int64), np.asarray(h["tokenizer/has_leading_space"][:], dtype=bool),
            np.asarray(h["tokenizer/is_boundary_token"][:], dtype=bool))
T, stride = int(sys.argv[5]), int(sys.argv[6])
cfg["train_seq_len"] = T
loss, bpb, _ = sliding.evaluate(sliding.ref_gpt.RefGPT(cfg, deq), tokens, T, stride, luts)
m = re.search(r"sliding_window_exact val_loss:([0-9.]+) val_bpb:([0-9.]+)", open(sys.argv[3]).read())
pl, pb = float(m.group(1)), float(m.group(2))
print("golf", pl, pb, "torch", loss, bpb)
assert abs(pl - loss) <= 1e-5 * loss and abs(pb - bpb) <= 1e-5 * bpb, (pl, pb, loss, bpb)
PY
golf_matches_torch() { # NAME ARTIFACT CHECKPOINT GOLF_OUTPUT T STRIDE
    local name=$1; shift
    if "$PY" -c 'import torch, h5py' 2>/dev/null; then
        "$PY" golf_torch.py "$1" "$2" "$3" "$CT_ROOT/tests/parity" "$4" "$5" >"$name.py.out" 2>&1 && pass "$name" ||
            fail "$name" "$(tail -c 600 "$name.py.out")"
    else skip_python "$name" "python3-torch / python3-h5py not installed"; fi
}
golf_matches_torch golf_sliding_matches_torch g.stz s/checkpoints/step_00000006.h5 golf.out 32 12
# golf_artifact = 1: the same lines at the end of the run
expect_ok golf_at_end "$CTRAIN" train "${run[@]}" eval_stride=12 golf_artifact=1 out_dir=ga
expect_grep golf_at_end_sliding '^final_int8_zlib_sliding_window val_loss:[0-9.]+ val_bpb:[0-9.]+ stride:12 eval_time:[0-9]+ms$' out

# ---- eval_seq_len (the record's EVAL_SEQ_LEN): the round trip on longer sequences ----
expect_fail seq_len_negative 2 'eval_seq_len = -1: expected 0 \(train_seq_len\) or a sequence length' \
    "$CTRAIN" train "${run[@]}" eval_seq_len=-1 out_dir=x
expect_fail seq_len_below_stride 2 'eval_stride = 12: expected a stride below eval_seq_len = 8 too' \
    "$CTRAIN" train "${run[@]}" eval_stride=12 eval_seq_len=8 out_dir=x
# trained on 32 tokens with the NTK reference at 32, the artifact evaluated on 64: the RoPE base
# scaled by (64/32)^(8/6) (head_dim 8), the windows 64 long; in-run validation stays at 32
expect_ok seq_len_run "$CTRAIN" train "${run[@]}" rope_train_seq_len=32 eval_stride=12 eval_seq_len=64 golf_artifact=1 \
    out_dir=n
cp out n.out
expect_grep seq_len_line '^round trip on sequences of eval_seq_len = 64 tokens \(trained on 32; RoPE base 25198\.4\)$' n.out
expect_grep seq_len_sliding '^final_int8_zlib_sliding_window val_loss:[0-9.]+ val_bpb:[0-9.]+ stride:12 eval_time:[0-9]+ms$' n.out
expect_grep seq_len_in_run_validation '^step 6/6  val_loss [0-9.]+  val_bpb [0-9.]+  non-overlapping' n.out
golf_matches_torch seq_len_matches_torch n/final_model.int8.stz n/checkpoints/step_00000006.h5 n.out 64 12
# the same artifact at train_seq_len (--eval-seq-len 0): no such line, other numbers
expect_ok seq_len_option_zero "$CTRAIN" ckpt golf n --out n0.stz --eval-seq-len 0
if grep -q '^round trip on sequences' out; then fail seq_len_option_zero_plain "$(grep '^round trip' out)"
elif [ "$(grep -o 'sliding_window_exact.*' out)" = "$(grep -o 'sliding_window_exact.*' n.out)" ]; then
    fail seq_len_option_zero_plain "the same numbers on 32 tokens as on 64"
else pass seq_len_option_zero_plain; fi
expect_fail seq_len_option_too_long 1 "fewer than one sequence of eval_seq_len \+ 1 = 1000001" \
    "$CTRAIN" ckpt golf n --out n1.stz --eval-seq-len 1000000

finish
