"""sliding.py — ctrain's validation of a checkpoint's weights against the project's PyTorch model
(ref_gpt.py) evaluated by the record's rules, written here from their description
(docs/model.md, "Validation"):

  non-overlapping (eval_stride 0, train_gpt.py's eval_val): the split's first
      num_seqs * T + 1 tokens, num_seqs = (tokens - 1) // T, as num_seqs sequences of T;
  sliding window (eval_stride S, the record's eval_val_sliding): total = num_seqs * T; a window
      starts at every multiple of S below total and holds min(T, total - start) tokens (a
      shorter one padded with token 0 to T); the first window scores all its positions, every
      later one its positions from max(length - S, 0) on.
  val_loss = the scored losses' sum / their count; val_bpb = val_loss / ln 2 * count / bytes,
  where a target's bytes are base_bytes[target] + (has_leading_space[target] and not
  is_boundary_token[previous token]).

Usage: sliding.py NAME CHECKPOINT.h5 METRICS.jsonl TOL
  CHECKPOINT  a ctrain checkpoint (its /model weights, its /config: train_seq_len, eval_stride,
              val_files)
  METRICS     the run's metrics.jsonl: the validation lines of the checkpoint's step, one with
              "eval_stride": 0 and one with the checkpoint's eval_stride
Prints PASS/FAIL lines (tests/run.sh counts them); exits 1 after a FAIL.
"""
import glob
import json
import math
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_gpt  # noqa: E402
from parity import read_config  # noqa: E402

torch.set_num_threads(2)


class _UnreducedF:
    """torch.nn.functional whose cross_entropy keeps every position's loss (reduction "none"),
    so that RefGPT.loss, unchanged, returns the per-position losses a sliding window needs."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def cross_entropy(*args, **kwargs):
        kwargs["reduction"] = "none"
        return F.cross_entropy(*args, **kwargs)


def position_losses(model, x, y):
    saved = ref_gpt.F
    ref_gpt.F = _UnreducedF()
    try:
        with torch.no_grad():
            out = model.loss(x, y)
    finally:
        ref_gpt.F = saved
    if out.numel() != x.numel():
        raise RuntimeError(f"RefGPT.loss gave {out.numel()} losses for {x.numel()} positions")
    return out.reshape(x.shape).double()


def target_bytes(luts, prev, tgt):
    base, space, boundary = luts
    return float((base[tgt] + (space[tgt] & ~boundary[prev])).sum())


def evaluate(model, tokens, T, stride, luts, batch=16):
    """(val_loss, val_bpb, scored token count) by the rule above; stride 0 = non-overlapping."""
    num_seqs = (len(tokens) - 1) // T
    total = num_seqs * T
    if stride == 0:
        windows = [(i * T, T, 0) for i in range(num_seqs)]
    else:
        windows = []
        for start in range(0, total, stride):
            length = min(T, total - start)
            first = 0 if start == 0 else max(length - stride, 0)
            windows.append((start, length, first))
    loss_sum = count = nbytes = 0.0
    for b in range(0, len(windows), batch):
        group = windows[b:b + batch]
        x = torch.zeros(len(group), T, dtype=torch.int64)
        y = torch.zeros(len(group), T, dtype=torch.int64)
        for i, (start, length, _) in enumerate(group):
            x[i, :length] = torch.from_numpy(tokens[start:start + length])
            y[i, :length] = torch.from_numpy(tokens[start + 1:start + length + 1])
        losses = position_losses(model, x, y)
        for i, (start, length, first) in enumerate(group):
            loss_sum += float(losses[i, first:length].sum())
            count += length - first
            nbytes += target_bytes(luts, x[i, first:length].numpy(), y[i, first:length].numpy())
    val_loss = loss_sum / count
    return val_loss, val_loss / math.log(2.0) * count / nbytes, int(count)


def main():
    name, ckpt, metrics_path, tol = sys.argv[1:5]
    tol = float(tol)
    with h5py.File(ckpt, "r") as h:
        cfg = read_config(h)
        step = int(h.attrs["step"])
        params = {k: torch.from_numpy(np.array(v[...], dtype=np.float32)) for k, v in h["model"].items()}
    T, stride = int(cfg["train_seq_len"]), int(cfg["eval_stride"])
    files = sorted(glob.glob(cfg["val_files"]))
    parts, luts = [], None
    for f in files:
        with h5py.File(f, "r") as h:
            parts.append(np.asarray(h["tokens"][:], dtype=np.int64))
            if luts is None:
                luts = (np.asarray(h["tokenizer/base_bytes"][:], dtype=np.int64),
                        np.asarray(h["tokenizer/has_leading_space"][:], dtype=bool),
                        np.asarray(h["tokenizer/is_boundary_token"][:], dtype=bool))
    tokens = np.concatenate(parts)
    rows = [json.loads(line) for line in open(metrics_path)]
    rows = {r.get("eval_stride", 0): r for r in rows if "val_loss" in r and r["step"] == step}
    model = ref_gpt.RefGPT(cfg, params)
    ok = True
    for s, what in ((0, "non_overlapping"), (stride, "sliding")):
        if s not in rows:
            print(f"FAIL {name}/{what}: no validation line with eval_stride {s} at step {step} in {metrics_path}")
            ok = False
            continue
        loss, bpb, count = evaluate(model, tokens, T, s, luts)
        e_loss = abs(rows[s]["val_loss"] - loss) / abs(loss)
        e_bpb = abs(rows[s]["val_bpb"] - bpb) / abs(bpb)
        detail = (f"stride {s}, {count} scored tokens: val_loss ctrain {rows[s]['val_loss']:.8f} torch {loss:.8f} "
                  f"(rel {e_loss:.1e}), val_bpb ctrain {rows[s]['val_bpb']:.8f} torch {bpb:.8f} (rel {e_bpb:.1e})")
        if e_loss <= tol and e_bpb <= tol:
            print(f"PASS {name}/{what} ({detail})")
        else:
            print(f"FAIL {name}/{what}: {detail} > {tol}")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
