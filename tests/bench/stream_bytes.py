"""stream_bytes.py — the bytes the residual stream's kernels must move per micro-batch and per
step with residual_dtype fp32 and bf16 (issue 59), and their time at a given bandwidth: the
expected figures of docs/performance.md, "The bf16 residual stream", before a GPU measures them.

Each kernel of the CUDA backend's forward and backward that touches the stream is listed with the
[N, D] tensors it reads and writes (backend_cuda_step.c): S a stream tensor (fp32 or bf16 by
residual_dtype), B one that is bf16 either way (product inputs and outputs), F one that is fp32
either way (a norm's output gradient from a product). Each tensor counts once per read and once
per write, as bench_gpu_ops counts an op's floor; per-row vectors (rstd) and parameters are left
out (under 0.2% of these bytes). The ends of the stream (embedding, its norm, the SmearGate,
logits) run once per micro-batch and are left out too.
  python3 tests/bench/stream_bytes.py [baseline|record] [--bandwidth GB/s]   (default both, 3000)
"""
import sys

# kernel: (reads, writes) per general block; "skip_in" and "skip_out" kernels only in the blocks
# that have them (decoder blocks that add a skip; encoder blocks whose output feeds one)
FIRST_INPUT = {"mix_norm_forward (block 0's input)": ("S S", "S B")}  # x x0 | xm a
FORWARD_INPUT = {  # blocks 1..: the block before's output made in the same pass
    "out_mix_norm_forward (block input: previous output, mix, norm)": ("S S B B", "S S B"),  # xm x0 ao mo | x_out xm a
}
FORWARD = {"add_norm_forward (attention residual + MLP norm)": ("S B", "B")}  # xm ao | m_in
FORWARD_SKIP = {"out_mix_norm_forward: the skip and x_in": ("S", "S")}  # skip | x_in
BACKWARD = {
    "scaled_add_backward (MLP residual)": ("S B", "B"),  # dx mo | d mo
    "add_norm_backward (MLP norm + attention residual)": ("F S S B S", "S B B"),  # dout x_in x0 ao dx | dx a_in d ao
    "norm_mix_backward (attention norm + mix)": ("S F S S S", "S S"),  # dx dout x_in x0 dx0 | dx_in dx0
}
BACKWARD_SKIP_DECODER = {"scaled_add_backward (skip)": ("S S", "S")}  # dx skip | dskip
BACKWARD_SKIP_ENCODER = {"add_inplace (dx += dskip)": ("S S", "S")}
LAST = {  # once: the last block's output and the final norm, and the first backward
    "scaled_add_forward (last block output)": ("S B B", "S"),
    "rmsnorm_forward (final norm)": ("S", "B"),
    "rmsnorm_backward (final norm)": ("F S", "S"),
    "add_inplace (dx += dx0)": ("S S", "S"),
}

SHAPES = {  # layers, encoder blocks, skips, dim, tokens per micro-batch, micro-batches per step
    "baseline": (9, 4, 4, 512, 64 * 1024, 8),
    "record": (11, 5, 5, 512, 48 * 2048, 8),
}


def tensor_bytes(kinds, stream_size):
    return sum({"S": stream_size, "B": 2, "F": 4}[k] for k in kinds.split())


def table(shape, bandwidth):
    layers, enc, skips, dim, tokens, micro = SHAPES[shape]
    nd = tokens * dim
    per = {}
    for name, size in (("fp32", 4), ("bf16", 2)):
        total, rows = 0, []

        def add(kernels, times):
            nonlocal total
            for k, (r, w) in kernels.items():
                b = nd * (tensor_bytes(r, size) + tensor_bytes(w, size)) * times
                rows.append((k, times, b))
                total += b

        add(FIRST_INPUT, 1)
        add(FORWARD_INPUT, layers - 1)
        add(FORWARD, layers)
        add(FORWARD_SKIP, skips)
        add(BACKWARD, layers)
        add(BACKWARD_SKIP_DECODER, skips)
        add(BACKWARD_SKIP_ENCODER, skips)
        add(LAST, 1)
        per[name] = (total, rows)
    gb = lambda b: b / 1e9
    print(f"== {shape}: {layers} layers, {skips} skips, [N, D] = [{tokens}, {dim}], {micro} micro-batches per step")
    print(f"  {'kernel (per micro-batch)':64s} {'times':>5s} {'fp32 GB':>8s} {'bf16 GB':>8s}")
    for (k, t, b32), (_, _, b16) in zip(per["fp32"][1], per["bf16"][1]):
        print(f"  {k:64s} {t:5d} {gb(b32):8.2f} {gb(b16):8.2f}")
    t32, t16 = per["fp32"][0], per["bf16"][0]
    ms = lambda b: b / (bandwidth * 1e9) * 1e3
    print(f"  per micro-batch: fp32 {gb(t32):.2f} GB ({ms(t32):.1f} ms at {bandwidth:.0f} GB/s), "
          f"bf16 {gb(t16):.2f} GB ({ms(t16):.1f} ms): {gb(t32 - t16):.2f} GB and {ms(t32 - t16):.1f} ms less")
    print(f"  per step: fp32 {gb(t32 * micro):.1f} GB ({ms(t32 * micro):.0f} ms), bf16 {gb(t16 * micro):.1f} GB "
          f"({ms(t16 * micro):.0f} ms): {ms((t32 - t16) * micro):.0f} ms less")
    print(f"BENCH stream_bytes_{shape}_fp32_gb_per_micro {gb(t32):.2f}")
    print(f"BENCH stream_bytes_{shape}_bf16_gb_per_micro {gb(t16):.2f}")
    print(f"BENCH stream_bytes_{shape}_saved_ms_per_step {ms((t32 - t16) * micro):.1f}")


def main():
    args = sys.argv[1:]
    bandwidth = 3000.0
    if "--bandwidth" in args:
        at = args.index("--bandwidth")
        bandwidth = float(args[at + 1])
        del args[at:at + 2]
    for shape in args or list(SHAPES):
        if shape not in SHAPES:
            sys.exit(f"stream_bytes.py: unknown shape '{shape}' (baseline or record)")
        table(shape, bandwidth)


if __name__ == "__main__":
    main()
