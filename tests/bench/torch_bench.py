"""torch_bench.py — tokens/s of the independent PyTorch fp32 implementation (tests/parity/ref_gpt.py)
on a given configuration, for `make bench`'s side-by-side comparison with ctrain.
Usage: torch_bench.py DATA.h5 STEPS THREADS key=value ...
"""
import sys
import time

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/parity")
import ref_gpt  # noqa: E402


def main():
    data, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    cfg = dict(num_layers=9, model_dim=512, num_heads=8, num_kv_heads=4, mlp_mult=2, vocab_size=1024,
               tie_embeddings=1, rope_base=10000.0, logit_softcap=30.0, train_seq_len=1024,
               train_batch_tokens=524288, grad_accum_slots=8, iterations=20000, warmdown_iters=1200,
               tied_embed_lr=0.05, embed_lr=0.6, head_lr=0.008, matrix_lr=0.04, scalar_lr=0.04,
               muon_momentum=0.95, muon_backend_steps=5, muon_momentum_warmup_start=0.85,
               muon_momentum_warmup_steps=500, beta1=0.9, beta2=0.95, adam_eps=1e-8, grad_clip_norm=0.0)
    for kv in sys.argv[4:]:
        k, v = kv.split("=", 1)
        cfg[k] = type(cfg[k])(float(v)) if isinstance(cfg[k], (int, float)) else v
    D, V, L = cfg["model_dim"], cfg["vocab_size"], cfg["num_layers"]
    kvd = cfg["num_kv_heads"] * D // cfg["num_heads"]
    hid = cfg["mlp_mult"] * D
    g = torch.Generator().manual_seed(0)
    params = {"tok_emb.weight": torch.randn(V, D, generator=g) * 0.005,
              "skip_weights": torch.ones(min(L // 2, L - L // 2), D)}
    for i in range(L):
        p = f"blocks.{i}."
        params[p + "attn.c_q.weight"] = (torch.rand(D, D, generator=g) - 0.5) * 0.1
        params[p + "attn.c_k.weight"] = (torch.rand(kvd, D, generator=g) - 0.5) * 0.1
        params[p + "attn.c_v.weight"] = (torch.rand(kvd, D, generator=g) - 0.5) * 0.1
        params[p + "attn.proj.weight"] = torch.zeros(D, D)
        params[p + "attn.q_gain"] = torch.full((cfg["num_heads"],), 1.5)
        params[p + "mlp.fc.weight"] = (torch.rand(hid, D, generator=g) - 0.5) * 0.1
        params[p + "mlp.proj.weight"] = torch.zeros(D, hid)
        params[p + "attn_scale"] = torch.ones(D)
        params[p + "mlp_scale"] = torch.ones(D)
        params[p + "resid_mix"] = torch.stack((torch.ones(D), torch.zeros(D)))
    stream = ref_gpt.token_stream(data)
    ref_gpt.train(cfg, params, stream, 1)  # warm up allocators and threads
    t = time.perf_counter()
    ref_gpt.train(cfg, params, stream, steps)
    dt = (time.perf_counter() - t) / steps
    print(f"BENCH torch_step_ms {dt * 1000:.1f}")
    print(f"BENCH torch_tokens_per_s {cfg['train_batch_tokens'] / dt:.1f}")


if __name__ == "__main__":
    main()
