"""parity.py — compares a ctrain CPU run with the independent PyTorch reference (ref_gpt.py).

Usage: parity.py NAME INIT.h5 FINAL.h5 METRICS.jsonl LOSS_TOL TENSOR_TOL
       parity.py NAME --per-step CHECKPOINTS_DIR METRICS.jsonl LOSS_TOL TENSOR_TOL
  INIT.h5   ctrain checkpoint at step 0 (the initial weights both implementations start from)
  FINAL.h5  ctrain checkpoint after K steps of the same configuration
  METRICS   ctrain's metrics.jsonl of that run (per-step train_loss)
Whole run (the first form): trains K steps in PyTorch from INIT's /model on the same token
stream, then checks every per-step loss (relative error <= LOSS_TOL) and every tensor of /model
and of the optimizer state (||a - b|| / ||b|| <= TENSOR_TOL) against ctrain. The two bounds are
the caller's, each a stated margin over the error measured for that configuration
(tests/cli/test_parity.sh), so that a bug moving the loss by 5e-6 cannot hide under a bound of
1e-4 set for the noise of fp32 weights.
Step by step (--per-step, a run that wrote a checkpoint after every step): for each step k,
PyTorch starts from ctrain's checkpoint k — weights, Adam moments and step, Muon momentum, EMA,
SWA sum and count, the QAT switch — trains that one step and is compared with checkpoint k+1
and the step's logged loss; the verdicts give the worst step. This is how runs with QAT are
compared: its rounding is discontinuous, so a weight whose w/scale sits within fp32 noise of a
half-integer rounds one way here and the other way there, after which the two whole runs train
slightly different models; from the same state, one step is exact to fp32 noise.
When the run keeps weight averages or uses QAT (ema_enabled, swa_enabled, qat_enabled,
late_qat), one more verdict, "averages": every /ema or /swa tensor by TENSOR_TOL, the SWA count
and the QAT switch exactly. Prints PASS/FAIL lines for tests/run.sh with the worst figures and
their bounds.
"""
import glob
import json
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_gpt  # noqa: E402

torch.set_num_threads(2)


def read_config(h):
    cfg = {}
    for k, v in h["config"].attrs.items():
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, np.generic):
            v = v.item()
        cfg[k] = v
    return cfg


def rel_err(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    den = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / den) if den > 0 else float(np.linalg.norm(a - b))


def read_checkpoint(path):
    """Everything of a ctrain checkpoint the comparison needs, as numpy arrays."""
    with h5py.File(path, "r") as h:
        c = {"cfg": read_config(h), "step": int(h.attrs["step"])}
        c["model"] = {k: np.array(v[...]) for k, v in h["model"].items()}
        c["opt"] = {k: {s: np.array(g[s][...]) for s in g} for k, g in h["optimizer"].items()}
        c["adam_step"] = int(h["optimizer"].attrs["adam_step"])
        c["ema"] = {k: np.array(v[...]) for k, v in h["ema"].items()} if "ema" in h else None
        c["swa"] = {k: np.array(v[...]) for k, v in h["swa"].items()} if "swa" in h else None
        c["swa_count"] = int(h["swa"].attrs["count"]) if "swa" in h else 0
        c["qat"] = bool(h["qat"].attrs["active"]) if "qat" in h else False
    return c


def as_state(c):
    """A checkpoint's optimizer state as ref_gpt.train takes it."""
    t = lambda a: torch.from_numpy(np.array(a, dtype=np.float32))  # noqa: E731
    state = {"exp_avg": {}, "exp_avg_sq": {}, "momentum_buffer": {}, "adam_step": c["adam_step"],
             "swa_count": c["swa_count"], "qat": c["qat"]}
    for k, g in c["opt"].items():
        for s, a in g.items():
            state[s][k] = t(a)
    state["ema"] = {k: t(a) for k, a in c["ema"].items()} if c["ema"] is not None else None
    state["swa"] = {k: t(a) for k, a in c["swa"].items()} if c["swa"] is not None else None
    return state


class Worst:
    """The worst relative error seen of one kind, over tensors and steps, and what exceeded TOL."""

    def __init__(self, tol):
        self.tol, self.err, self.where, self.bad, self.count = tol, 0.0, "", [], 0

    def add(self, err, where):
        self.count += 1
        if err >= self.err:
            self.err, self.where = err, where
        if err > self.tol:
            self.bad.append(f"{where} {err:.2e}")


def compare_step(after, cfg, label, model, adams, momentum, averages, w):
    """Add the errors of PyTorch's state against ctrain's checkpoint `after` to w's trackers."""
    for k, t in model.p.items():
        w["weights"].add(rel_err(after["model"][k], t.detach().numpy()), f"{label}{k}")
    if set(after["model"]) != set(model.p):
        w["names"].append(f"tensor names differ: {sorted(set(after['model']) ^ set(model.p))}")
    for opt_t in adams.values():
        for pt in opt_t.param_groups[0]["params"]:
            key = next(k for k, v in model.p.items() if v is pt)
            st = opt_t.state[pt]
            for s in ("exp_avg", "exp_avg_sq"):
                w["optimizer_state"].add(rel_err(after["opt"][key][s], st[s].numpy()), f"{label}{key}/{s}")
    for key, buf in momentum.items():
        w["optimizer_state"].add(rel_err(after["opt"][key]["momentum_buffer"], buf.numpy()),
                                 f"{label}{key}/momentum_buffer")
    # the reference keeps an EMA with ema_enabled and an SWA sum once it takes a snapshot;
    # ctrain's file holds /ema with ema_enabled and /swa (zeros until the first snapshot) with
    # swa_enabled and no EMA
    for group in ("ema", "swa"):
        theirs = averages[group]
        if theirs is None:
            continue
        if after[group] is None:
            w["averages_bad"].append(f"{label}ctrain's checkpoint has no /{group}")
            continue
        for k, t in theirs.items():
            w["averages"].add(rel_err(after[group][k], t.numpy()), f"{label}/{group}/{k}")
    if (after["ema"] is None) != (averages["ema"] is None):
        w["averages_bad"].append(f"{label}/ema {'in' if after['ema'] is not None else 'not in'} ctrain's checkpoint "
                                 f"with ema_enabled = {cfg.get('ema_enabled', 0)}")
    if after["swa_count"] != averages["swa_count"]:
        w["averages_bad"].append(f"{label}SWA count {after['swa_count']} in ctrain's checkpoint, "
                                 f"{averages['swa_count']} in the reference")
    if after["qat"] != averages["qat"]:
        w["averages_bad"].append(f"{label}QAT switch {after['qat']} in ctrain's checkpoint, {averages['qat']} in the "
                                 f"reference")


def report(name, cfg, tol, losses_c, losses_t, steps, w, how):
    """tol: the bound of the losses' relative error (the tensors' is in w's trackers)."""
    ok = True
    if len(losses_c) != len(losses_t):
        print(f"FAIL {name}/loss_count: ctrain logged {len(losses_c)} steps, the reference trained {len(losses_t)}")
        ok = False
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(losses_c, losses_t))
    print(f"losses ctrain: {[round(x, 6) for x in losses_c]}")
    print(f"losses torch:  {[round(x, 6) for x in losses_t]}")
    if worst_loss <= tol:
        print(f"PASS {name}/losses (worst relative error {worst_loss:.2e} over {steps} steps{how}; bound {tol:g})")
    else:
        print(f"FAIL {name}/losses: worst relative error {worst_loss:.2e} > {tol}")
        ok = False
    bad = w["weights"].bad + w["names"]
    if bad:
        print(f"FAIL {name}/weights: {'; '.join(bad[:8])}")
        ok = False
    else:
        print(f"PASS {name}/weights ({w['weights'].count} tensors, worst relative error {w['weights'].err:.2e} in "
              f"{w['weights'].where}; bound {w['weights'].tol:g})")
    o = w["optimizer_state"]
    if not o.bad:
        print(f"PASS {name}/optimizer_state ({o.count} buffers, worst {o.err:.2e} in {o.where}; bound {o.tol:g})")
    else:
        print(f"FAIL {name}/optimizer_state: {'; '.join(o.bad[:8])}")
        ok = False
    if any(cfg.get(k, 0) for k in ("ema_enabled", "swa_enabled", "qat_enabled", "late_qat")):
        a = w["averages"]
        bad = w["averages_bad"] + a.bad
        if bad:
            print(f"FAIL {name}/averages: {'; '.join(bad[:8])}")
            ok = False
        else:
            where = a.where if a.count else "no averaged tensors"
            print(f"PASS {name}/averages ({a.count} tensors, worst {a.err:.2e} in {where}; bound {a.tol:g}; SWA "
                  f"count {w['swa_count']}, QAT {'on' if w['qat'] else 'off'})")
    return ok


def trackers(tol):
    return {"weights": Worst(tol), "optimizer_state": Worst(tol), "averages": Worst(tol), "names": [],
            "averages_bad": []}


def train_losses(metrics_path):
    return [json.loads(line)["train_loss"] for line in open(metrics_path) if '"train_loss"' in line]


def whole_run(name, init_path, final_path, metrics_path, tol, tensor_tol):
    with h5py.File(init_path, "r") as h:
        params = {k: torch.from_numpy(np.array(v[...], dtype=np.float32)) for k, v in h["model"].items()}
    final = read_checkpoint(final_path)
    cfg, steps = final["cfg"], final["step"]  # the run's configuration (the step-0 file had iterations=0)
    stream = ref_gpt.token_stream(cfg["train_files"])
    losses_t, model, adams, momentum, averages = ref_gpt.train(cfg, params, stream, steps)
    w = trackers(tensor_tol)
    compare_step(final, cfg, "", model, adams, momentum, averages, w)
    w["swa_count"], w["qat"] = final["swa_count"], final["qat"]
    return report(name, cfg, tol, train_losses(metrics_path), losses_t, steps, w, "")


def per_step(name, ckpt_dir, metrics_path, tol, tensor_tol):
    files = sorted(glob.glob(f"{ckpt_dir}/step_*.h5"))
    if len(files) < 2:
        raise FileNotFoundError(f"{ckpt_dir}: --per-step needs a checkpoint after every step, found {len(files)}")
    w = trackers(tensor_tol)
    losses_t, stream = [], None
    before = read_checkpoint(files[0])
    for path in files[1:]:
        after = read_checkpoint(path)
        if after["step"] != before["step"] + 1:
            raise ValueError(f"{path}: step {after['step']} does not follow step {before['step']}")
        cfg = after["cfg"]
        if stream is None:
            stream = ref_gpt.token_stream(cfg["train_files"])
        params = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in before["model"].items()}
        lt, model, adams, momentum, averages = ref_gpt.train(cfg, params, stream, 1, start=before["step"],
                                                             state=as_state(before))
        losses_t += lt
        compare_step(after, cfg, f"step {after['step']}: ", model, adams, momentum, averages, w)
        before = after
    w["swa_count"], w["qat"] = before["swa_count"], before["qat"]
    first = read_checkpoint(files[0])["step"]
    losses_c = train_losses(metrics_path)[first:before["step"]]
    return report(name, cfg, tol, losses_c, losses_t, len(files) - 1, w, ", each from ctrain's state")


def main():
    if len(sys.argv) == 7 and sys.argv[2] == "--per-step":
        name, _, ckpt_dir, metrics_path, tol, tensor_tol = sys.argv[1:7]
        return 0 if per_step(name, ckpt_dir, metrics_path, float(tol), float(tensor_tol)) else 1
    if len(sys.argv) != 7:
        raise SystemExit(__doc__)
    name, init_path, final_path, metrics_path, tol, tensor_tol = sys.argv[1:7]
    return 0 if whole_run(name, init_path, final_path, metrics_path, float(tol), float(tensor_tol)) else 1


if __name__ == "__main__":
    sys.exit(main())
