"""step_torch.py — the project's own PyTorch model (tests/parity/ref_gpt.py, written from
docs/model.md) as a GPU anchor for the whole-step benchmark (step_vs_train_gpt.sh): bf16
autocast, torch.compile, SDPA attention (flash) in place of ref_gpt's explicit softmax, Muon
(momentum + Newton-Schulz in bf16, as train_gpt.py) on the block matrices and fused Adam on the
rest, random tokens; 524,288 tokens per step in 8 micro-batches on one GPU.
Usage: step_torch.py baseline|wide STEPS
Prints the mean step time over steps 6..STEPS (CUDA events), tokens/s and peak memory.
"""
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/parity")
import ref_gpt  # noqa: E402

SHAPES = {"baseline": (9, 512, 8, 4, 1024), "wide": (12, 768, 12, 4, 2048)}


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def newton_schulz_bf16(g):
    """train_gpt.py's zeropower: ref_gpt's Newton-Schulz on the bf16 matrix (bf16 products)."""
    return ref_gpt.newton_schulz(g.bfloat16(), 5)


def main():
    shape, steps = sys.argv[1], int(sys.argv[2])
    L, D, H, KV, T = SHAPES[shape]
    V, tokens, slots, dev = 1024, 524288, 8, "cuda"
    kvd, hid = KV * D // H, 2 * D
    cfg = dict(num_layers=L, model_dim=D, num_heads=H, num_kv_heads=KV, rope_base=10000.0, logit_softcap=30.0,
               tie_embeddings=1, train_seq_len=T)
    g = torch.Generator().manual_seed(0)
    u = lambda *s: (torch.rand(*s, generator=g) - 0.5) * 0.1  # noqa: E731
    params = {"tok_emb.weight": torch.randn(V, D, generator=g) * 0.005,
              "skip_weights": torch.ones(min(L // 2, L - L // 2), D)}
    for i in range(L):
        p = f"blocks.{i}."
        params.update({p + "attn.c_q.weight": u(D, D), p + "attn.c_k.weight": u(kvd, D),
                       p + "attn.c_v.weight": u(kvd, D), p + "attn.proj.weight": u(D, D) * 0.1,
                       p + "attn.q_gain": torch.full((H,), 1.5), p + "mlp.fc.weight": u(hid, D),
                       p + "mlp.proj.weight": u(D, hid) * 0.1, p + "attn_scale": torch.ones(D),
                       p + "mlp_scale": torch.ones(D), p + "resid_mix": torch.stack((torch.ones(D), torch.zeros(D)))})
    ref_gpt.causal_attention = sdpa_attention
    model = ref_gpt.RefGPT(cfg, {k: v.to(dev) for k, v in params.items()})
    model.cos, model.sin = model.cos.to(dev), model.sin.to(dev)
    loss_fn = torch.compile(model.loss)
    ns = torch.compile(newton_schulz_bf16)
    matrices = [t for n, t in model.p.items() if ref_gpt.is_matrix(n)]
    adam = torch.optim.Adam([t for n, t in model.p.items() if not ref_gpt.is_matrix(n)], lr=0.01, betas=(0.9, 0.95),
                            eps=1e-8, fused=True)
    bufs = [torch.zeros_like(t) for t in matrices]
    B = tokens // slots // T
    gen = torch.Generator(device=dev).manual_seed(0)

    def step():
        for _ in range(slots):
            tok = torch.randint(0, V, (B, T + 1), device=dev, generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = loss_fn(tok[:, :-1], tok[:, 1:])
            (loss / slots).backward()
        adam.step()
        with torch.no_grad():
            for t, buf in zip(matrices, bufs):
                buf.mul_(0.95).add_(t.grad)
                upd = ns(t.grad.add(buf, alpha=0.95))
                t.add_(upd.to(t.dtype), alpha=-0.04 * max(1, t.shape[0] / t.shape[1]) ** 0.5)
        for t in model.p.values():
            t.grad = None
        return loss

    times = []
    for s in range(steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    mean = sum(times[5:]) / len(times[5:])
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"ref_gpt.py (torch.compile, bf16 autocast, SDPA) {shape}: {mean:.1f} ms/step, "
          f"{tokens / mean * 1000 / 1e6:.2f} M tok/s, peak {peak:.1f} GiB")
    print(f"BENCH torch_ref_{shape}_ms {mean:.1f}")
    print(f"BENCH torch_ref_{shape}_peak_gib {peak:.2f}")


if __name__ == "__main__":
    main()
