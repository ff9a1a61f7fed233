"""gptq_ref.py — an independent PyTorch version of the 1.0611 record's quantizers, written from
their description (src/infer/golf_gptq.h, docs/model.md "The GPTQ quantizer"), for
tests/unit/test_golf_gptq.c to compare ctrain's C against.

Used two ways:
  as a module (tests/cli/test_golf_gptq.sh): quantize_model(weights, hessians, opts) gives the
  artifact's tensors by the record's rules, dequantize(...) the weights they give back;
  as a script, on one matrix (tests/unit/test_golf_gptq.c):

Usage: gptq_ref.py DIR ROWS COLS CLIP_SIGMAS CLIP_RANGE BLOCK_SIZE DAMP RANK GROUP
  reads  DIR/w.f32 (ROWS x COLS float32) and DIR/h.f32 (COLS x COLS float32, the Hessian)
  writes DIR/ref_q.i8 (ROWS x COLS int8), DIR/ref_scale.f16 (ROWS float16),
         DIR/ref_qa.i8, DIR/ref_sa.f16 (1), DIR/ref_qb.i8, DIR/ref_sb.f16: the LQER factors of the
         error W - q * scale at rank RANK, packed asymmetrically in groups of GROUP.
"""
import sys

import numpy as np
import torch


def gptq(w, h, clip_sigmas, clip_range, block_size, damp):
    rows, cols = w.shape
    h = h.clone()
    dead = torch.diag(h) == 0
    h[dead, dead] = 1
    h.diagonal().add_(damp * h.diag().mean())
    # largest diagonal first, ties by index: a stable sort
    _, perm = torch.sort(h.diag(), descending=True, stable=True)
    wp = w[:, perm].clone()
    wp[:, dead[perm]] = 0
    hp = h[perm][:, perm]
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(hp)), upper=True)
    std = w.double().std(dim=1).float()
    scale = (clip_sigmas * std / clip_range).clamp_min(1e-10).to(torch.float16)
    sf = scale.float()
    q = torch.zeros(rows, cols, dtype=torch.int8)
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        err = torch.zeros(rows, i2 - i1)
        for j in range(i2 - i1):
            c = i1 + j
            col = wp[:, c]
            level = torch.clamp(torch.round(col / sf), -clip_range, clip_range)
            q[:, perm[c]] = level.to(torch.int8)
            e = (col - level * sf) / u[c, c]
            err[:, j] = e
            wp[:, c + 1:i2] -= e.unsqueeze(1) * u[c, c + 1:i2].unsqueeze(0)
        if i2 < cols:
            wp[:, i2:] -= err @ u[i1:i2, i2:]
    return q, scale


def lqer(e, rank, group):
    u, s, vh = torch.linalg.svd(e, full_matrices=False)
    r = min(rank, s.numel())
    a = u[:, :r] * s[:r]
    b = vh[:r, :].clone()
    for j in range(r):  # the sign that makes each V row's largest-magnitude element positive
        at = int(torch.argmax(b[j].abs()))
        if b[j, at] < 0:
            b[j] = -b[j]
            a[:, j] = -a[:, j]
    sa = (a.abs().amax().clamp_min(1e-10) / 1.5).to(torch.float16)
    qa = torch.clamp(torch.round(a / sa.float()), -2, 1).to(torch.int8)
    bg = b.reshape(-1, group)
    sb = (bg.abs().amax(dim=1).clamp_min(1e-10) / 7.5).to(torch.float16)
    qb = torch.clamp(torch.round(bg / sb.float().unsqueeze(1)), -8, 7).to(torch.int8).reshape(b.shape)
    return qa, sa, qb, sb


def pack_sym(a, b, bits):
    rng = 2 ** (bits - 1) - 1
    sa = (a.abs().amax(dim=1).clamp_min(1e-10) / rng).to(torch.float16)
    sb = (b.abs().amax(dim=1).clamp_min(1e-10) / rng).to(torch.float16)
    qa = torch.clamp(torch.round(a / sa.float().view(-1, 1)), -rng, rng).to(torch.int8)
    qb = torch.clamp(torch.round(b / sb.float().view(-1, 1)), -rng, rng).to(torch.int8)
    return qa, sa, qb, sb


def lqer_factors(e, rank):
    """The rank-r SVD factors with the sign rule (see lqer)."""
    u, s, vh = torch.linalg.svd(e, full_matrices=False)
    r = min(rank, s.numel())
    a = u[:, :r] * s[:r]
    b = vh[:r, :].clone()
    for j in range(r):
        at = int(torch.argmax(b[j].abs()))
        if b[j, at] < 0:
            b[j] = -b[j]
            a[:, j] = -a[:, j]
    return a, b


def quantize_model(weights, hessians, o):
    """The gptq-brotli rules (src/infer/golf_gptq_artifact.c's top comment) on a dict of float32
    tensors in model order; hessians: name -> H or absent; o: the GPTQ keys. Returns
    (tensors by artifact key, plan letters by name)."""
    out, plan, err = {}, {}, {}
    for name, t in weights.items():
        if (o["gated_attn_quant_gate"] and t.ndim == 2 and name.endswith(".attn_gate_w")
                and 32 <= t.numel() <= 8192):
            row_max = t.abs().amax(dim=1).clamp_min(1e-10)
            s = (row_max / 127.0).to(torch.float16)
            out[name + ".gq"] = torch.clamp(torch.round(t / s.float().view(-1, 1)), -127, 127).to(torch.int8)
            out[name + ".gs"] = s
            plan[name] = "g"
            continue
        if t.numel() <= 65536 or t.ndim != 2:
            out[name] = t.to(torch.float16)
            plan[name] = "h"
            continue
        bits = o["embed_bits"] if "tok_emb" in name else o["matrix_bits"]
        cs = (o["embed_clip_sigmas"] if "tok_emb" in name else o["mlp_clip_sigmas"] if ".mlp." in name
              else o["attn_clip_sigmas"] if ".attn." in name else o["matrix_clip_sigmas"])
        rng = 2 ** (bits - 1) - 1
        if name in hessians:
            q, s = gptq(t, hessians[name], cs, rng, 128, 0.01)
            plan[name] = "q"
        else:
            std = t.double().std(dim=1).float()
            s = (cs * std / rng).clamp_min(1e-10).to(torch.float16)
            q = torch.clamp(torch.round(t / s.float().view(-1, 1)), -rng, rng).to(torch.int8)
            plan[name] = "r"
        out[name + ".q"], out[name + ".scale"] = q, s
        err[name] = float((t.double() - q.double() * s.double().view(-1, 1)).norm())
    if o["lqer_enabled"]:
        for name in sorted(err, key=lambda k: -err[k])[:o["lqer_top_k"]]:
            t, q, s = weights[name], out[name + ".q"], out[name + ".scale"]
            a, b = lqer_factors(t - q.float() * s.float().view(-1, 1), o["lqer_rank"])
            if o["lqer_asym_enabled"] and b.numel() % o["lqer_asym_group"] == 0:
                sa = (a.abs().amax().clamp_min(1e-10) / 1.5).to(torch.float16)
                qa = torch.clamp(torch.round(a / sa.float()), -2, 1).to(torch.int8)
                bg = b.reshape(-1, o["lqer_asym_group"])
                sb = (bg.abs().amax(dim=1).clamp_min(1e-10) / 7.5).to(torch.float16)
                qb = torch.clamp(torch.round(bg / sb.float().unsqueeze(1)), -8, 7).to(torch.int8).reshape(b.shape)
                out.update({name + ".lqA_a": qa, name + ".lqAs_a": sa, name + ".lqB_a": qb, name + ".lqBs_a": sb})
                plan[name] += "a"
            else:
                qa, sa, qb, sb = pack_sym(a, b, o["lqer_factor_bits"])
                out.update({name + ".lqA": qa, name + ".lqAs": sa, name + ".lqB": qb, name + ".lqBs": sb})
                plan[name] += "s"
    for name in plan:
        plan[name] = (plan[name] + "-")[:2]
    return out, plan


def dequantize(tensors, plan, name):
    """The record's dequantize_mixed for one tensor, in float32."""
    kind = plan[name]
    if kind[0] == "h":
        return tensors[name].float()
    if kind[0] == "g":
        return tensors[name + ".gq"].float() * tensors[name + ".gs"].float().view(-1, 1)
    w = tensors[name + ".q"].float() * tensors[name + ".scale"].float().view(-1, 1)
    if kind[1] == "a":
        qa = tensors[name + ".lqA_a"].float() * float(tensors[name + ".lqAs_a"])
        qb_t, sb_t = tensors[name + ".lqB_a"], tensors[name + ".lqBs_a"]
        g = qb_t.numel() // sb_t.numel()
        qb = (qb_t.reshape(-1, g).float() * sb_t.float().view(-1, 1)).reshape(qb_t.shape)
        w = w + qa @ qb
    elif kind[1] == "s":
        qa = tensors[name + ".lqA"].float() * tensors[name + ".lqAs"].float().view(-1, 1)
        qb = tensors[name + ".lqB"].float() * tensors[name + ".lqBs"].float().view(-1, 1)
        w = w + qa @ qb
    return w


def main():
    d = sys.argv[1]
    rows, cols = int(sys.argv[2]), int(sys.argv[3])
    clip_sigmas, clip_range = float(sys.argv[4]), int(sys.argv[5])
    block_size, damp, rank, group = int(sys.argv[6]), float(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    w = torch.from_numpy(np.fromfile(f"{d}/w.f32", dtype=np.float32).reshape(rows, cols))
    h = torch.from_numpy(np.fromfile(f"{d}/h.f32", dtype=np.float32).reshape(cols, cols))
    q, scale = gptq(w, h, clip_sigmas, clip_range, block_size, damp)
    q.numpy().tofile(f"{d}/ref_q.i8")
    scale.numpy().tofile(f"{d}/ref_scale.f16")
    e = w - q.float() * scale.float().unsqueeze(1)
    qa, sa, qb, sb = lqer(e, rank, group)
    qa.numpy().tofile(f"{d}/ref_qa.i8")
    sa.reshape(1).numpy().tofile(f"{d}/ref_sa.f16")
    qb.numpy().tofile(f"{d}/ref_qb.i8")
    sb.numpy().tofile(f"{d}/ref_sb.f16")


if __name__ == "__main__":
    main()
