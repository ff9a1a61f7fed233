"""parity.py — compares a ctrain CPU run with the independent PyTorch reference (ref_gpt.py).

Usage: parity.py NAME INIT.h5 FINAL.h5 METRICS.jsonl TOL
  INIT.h5   ctrain checkpoint at step 0 (the initial weights both implementations start from)
  FINAL.h5  ctrain checkpoint after K steps of the same configuration
  METRICS   ctrain's metrics.jsonl of that run (per-step train_loss)
Trains K steps in PyTorch from INIT's /model on the same token stream, then checks every
per-step loss and every tensor of /model (and the optimizer state) against ctrain by relative
error ||a - b|| / ||b|| <= TOL. When the run keeps weight averages or uses QAT (ema_enabled,
swa_enabled, qat_enabled, late_qat), one more verdict, "averages": every /ema or /swa tensor by
the same bound, the SWA count and the QAT switch exactly. Prints PASS/FAIL lines for
tests/run.sh and the worst figures.
"""
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


def main():
    name, init_path, final_path, metrics_path, tol = sys.argv[1:6]
    tol = float(tol)
    with h5py.File(init_path, "r") as h:
        params = {k: torch.from_numpy(np.array(v[...], dtype=np.float32)) for k, v in h["model"].items()}
    with h5py.File(final_path, "r") as h:
        cfg = read_config(h)  # the run's configuration (the step-0 file was made with iterations=0)
        steps = int(h.attrs["step"])
        final = {k: np.array(v[...]) for k, v in h["model"].items()}
        opt = {k: {s: np.array(g[s][...]) for s in g} for k, g in h["optimizer"].items()}
        ema_c = {k: np.array(v[...]) for k, v in h["ema"].items()} if "ema" in h else None
        swa_c = {k: np.array(v[...]) for k, v in h["swa"].items()} if "swa" in h else None
        swa_count_c = int(h["swa"].attrs["count"]) if "swa" in h else 0
        qat_c = bool(h["qat"].attrs["active"]) if "qat" in h else False
    losses_c = [json.loads(line)["train_loss"] for line in open(metrics_path) if '"train_loss"' in line]
    stream = ref_gpt.token_stream(cfg["train_files"])

    losses_t, model, adams, momentum, averages = ref_gpt.train(cfg, params, stream, steps)

    ok = True
    if len(losses_c) != steps:
        print(f"FAIL {name}/loss_count: ctrain logged {len(losses_c)} steps, checkpoint says {steps}")
        ok = False
    worst_loss = max(abs(a - b) / abs(b) for a, b in zip(losses_c, losses_t))
    print(f"losses ctrain: {[round(x, 6) for x in losses_c]}")
    print(f"losses torch:  {[round(x, 6) for x in losses_t]}")
    if worst_loss <= tol:
        print(f"PASS {name}/losses (worst relative error {worst_loss:.2e} over {steps} steps)")
    else:
        print(f"FAIL {name}/losses: worst relative error {worst_loss:.2e} > {tol}")
        ok = False

    worst = (0.0, "")
    bad = []
    for k, t in model.p.items():
        e = rel_err(final[k], t.detach().numpy())
        worst = max(worst, (e, k))
        if e > tol:
            bad.append(f"{k} {e:.2e}")
    if set(final) != set(model.p):
        bad.append(f"tensor names differ: {sorted(set(final) ^ set(model.p))}")
    if bad:
        print(f"FAIL {name}/weights: {'; '.join(bad[:8])}")
        ok = False
    else:
        print(f"PASS {name}/weights ({len(final)} tensors, worst relative error {worst[0]:.2e} in {worst[1]})")

    # optimizer state: torch's Adam state and our Muon buffers against ctrain's /optimizer
    state_err = []
    for opt_t in adams.values():
        for pt in opt_t.param_groups[0]["params"]:
            key = next(k for k, v in model.p.items() if v is pt)
            st = opt_t.state[pt]
            for s in ("exp_avg", "exp_avg_sq"):
                state_err.append((rel_err(opt[key][s], st[s].numpy()), f"{key}/{s}"))
    for key, buf in momentum.items():
        state_err.append((rel_err(opt[key]["momentum_buffer"], buf.numpy()), f"{key}/momentum_buffer"))
    worst_state = max(state_err)
    if worst_state[0] <= tol:
        print(f"PASS {name}/optimizer_state ({len(state_err)} buffers, worst {worst_state[0]:.2e} in {worst_state[1]})")
    else:
        print(f"FAIL {name}/optimizer_state: {worst_state[0]:.2e} in {worst_state[1]}")
        ok = False
    # EMA / SWA state and the QAT switch
    if any(cfg.get(k, 0) for k in ("ema_enabled", "swa_enabled", "qat_enabled", "late_qat")):
        bad, errs = [], []
        # the reference keeps an EMA with ema_enabled and an SWA sum once it takes a snapshot;
        # ctrain's file holds /ema with ema_enabled and /swa (zeros until the first snapshot)
        # with swa_enabled and no EMA
        for group, ours, theirs in (("ema", ema_c, averages["ema"]), ("swa", swa_c, averages["swa"])):
            if theirs is None:
                continue
            if ours is None:
                bad.append(f"ctrain's checkpoint has no /{group}")
                continue
            for k, t in theirs.items():
                errs.append((rel_err(ours[k], t.numpy()), f"/{group}/{k}"))
        if (ema_c is None) != (averages["ema"] is None):
            bad.append(f"/ema {'in' if ema_c is not None else 'not in'} ctrain's checkpoint with ema_enabled = "
                       f"{cfg.get('ema_enabled', 0)}")
        if swa_count_c != averages["swa_count"]:
            bad.append(f"SWA count {swa_count_c} in ctrain's checkpoint, {averages['swa_count']} in the reference")
        if qat_c != averages["qat"]:
            bad.append(f"QAT switch {qat_c} in ctrain's checkpoint, {averages['qat']} in the reference")
        worst_avg = max(errs) if errs else (0.0, "no averaged tensors")
        if worst_avg[0] > tol:
            bad.append(f"{worst_avg[1]} {worst_avg[0]:.2e}")
        if bad:
            print(f"FAIL {name}/averages: {'; '.join(bad)}")
            ok = False
        else:
            print(f"PASS {name}/averages ({len(errs)} tensors, worst {worst_avg[0]:.2e} in {worst_avg[1]}; "
                  f"SWA count {swa_count_c}, QAT {'on' if qat_c else 'off'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
