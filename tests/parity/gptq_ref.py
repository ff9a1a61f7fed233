"""gptq_ref.py — an independent PyTorch version of the 1.0611 record's quantizers, written from
their description (src/infer/golf_gptq.h, docs/model.md "The GPTQ quantizer"), for
tests/unit/test_golf_gptq.c to compare ctrain's C against.

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
