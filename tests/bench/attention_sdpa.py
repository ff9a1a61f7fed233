"""attention_sdpa.py — the anchor for ctrain's attention benchmark: PyTorch's
scaled_dot_product_attention (causal, bf16) with the flash and cuDNN backends, on the shapes given
as B,H,KV,T,HD, timed as bench_gpu_attention times ctrain (median of CUDA-event timings after a
warm-up, inputs rotated over 2 random sets). Backward = (forward + backward) - forward, the
figure the issue quotes. GQA: enable_gqa=True where the backend takes it, else K/V repeated per
query head (outside the timed region). Prints "BENCH attn_<backend>_<shape>_{fwd,bwd}_ms X".
A shape B,H,KV,T,HD,SEG (T a multiple of SEG) is ctrain's segmented case, rows cut into
documents of SEG tokens: attention within segments (block-diagonal causal, flash_attn_varlen's
result) is exactly causal attention over B*T/SEG sequences of SEG, which is what runs here.
Usage: python3 attention_sdpa.py [repeats] B,H,KV,T,HD[,SEG] ..."""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, repeats):
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    times = []
    for r in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(r)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench(backend, name, B, H, KV, T, HD, repeats, SEG=0):
    shape = f"B{B}_H{H}_KV{KV}_T{T}_D{HD}" + (f"_S{SEG}" if SEG else "")
    if SEG:  # uniform segments: the same work as B*T/SEG causal sequences of SEG
        B, T = B * (T // SEG), SEG
    sets = []
    for _ in range(2):
        q = (torch.rand(B, H, T, HD, device="cuda") * 3 - 1.5).bfloat16().requires_grad_()
        k = (torch.rand(B, KV, T, HD, device="cuda") * 3 - 1.5).bfloat16()
        v = (torch.rand(B, KV, T, HD, device="cuda") * 2 - 1).bfloat16()
        dy = (torch.rand(B, H, T, HD, device="cuda") * 2 - 1).bfloat16()
        sets.append([q, k, v, dy])
    gqa = KV != H
    with sdpa_kernel(backend):
        try:
            F.scaled_dot_product_attention(sets[0][0], sets[0][1].requires_grad_(), sets[0][2].requires_grad_(),
                                           is_causal=True, enable_gqa=gqa).backward(sets[0][3])
        except RuntimeError:
            if not gqa:
                raise
            gqa = False
            for s in sets:
                s[1] = s[1].repeat_interleave(H // KV, dim=1)
                s[2] = s[2].repeat_interleave(H // KV, dim=1)
        for s in sets:
            s[1].requires_grad_()
            s[2].requires_grad_()

        def fwd(r):
            q, k, v, _ = sets[r % 2]
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        def fwd_bwd(r):
            q, k, v, dy = sets[r % 2]
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa).backward(dy)

        f = median_ms(fwd, repeats)
        fb = median_ms(fwd_bwd, repeats)
    pairs = B * H * T * (T + 1) / 2
    b = fb - f
    print(f"  {name:6s} {shape:26s} fwd {f:8.3f} ms {4 * HD * pairs / f * 1e-9:7.1f} TFLOP/s   "
          f"bwd {b:8.3f} ms {8 * HD * pairs / b * 1e-9:7.1f} TFLOP/s{'' if gqa or KV == H else '  (K/V repeated)'}")
    print(f"BENCH attn_{name}_{shape}_fwd_ms {f:.4f}\nBENCH attn_{name}_{shape}_bwd_ms {b:.4f}", flush=True)


def main():
    args = sys.argv[1:]
    repeats = 20
    if args and "," not in args[0]:
        repeats = int(args[0])
        args = args[1:]
    shapes = args or ["64,8,4,1024,64", "16,12,4,2048,64", "16,8,4,2048,128"]
    print(f"== PyTorch {torch.__version__} SDPA on {torch.cuda.get_device_name()}, causal bf16, median of {repeats}")
    for spec in shapes:
        B, H, KV, T, HD, *seg = (int(x) for x in spec.split(","))
        SEG = seg[0] if seg else 0
        if SEG and T % SEG:
            sys.exit(f"attention_sdpa.py: shape {spec}: T must be a multiple of SEG")
        for backend, name in ((SDPBackend.FLASH_ATTENTION, "flash"), (SDPBackend.CUDNN_ATTENTION, "cudnn")):
            try:
                bench(backend, name, B, H, KV, T, HD, repeats, SEG)
            except RuntimeError as e:
                print(f"  {name:6s} B{B}_H{H}_KV{KV}_T{T}_D{HD}: not available ({str(e).splitlines()[0][:100]})")


if __name__ == "__main__":
    main()
