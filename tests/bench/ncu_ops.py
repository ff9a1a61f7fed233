#!/usr/bin/env python3
"""ncu_ops.py NCU_CSV BENCH_LOG LABEL -- where one training step's GPU time goes, per op class,
against its floor (issue 14: "a per-op table showing what remains between ctrain and the hardware
limits"). tests/bench/step_profile.sh makes both inputs on a GPU machine:

  NCU_CSV    `ncu --import STEP.ncu-rep --page raw --csv --print-units base` of one whole step
             profiled with gpu__time_duration.sum, dram__bytes_read.sum and dram__bytes_write.sum
             (bench_gpu_step with CT_PROFILE_LAST_STEP=1 under `ncu --profile-from-start off`);
  BENCH_LOG  an unprofiled bench_gpu_step run of the same shape: its BENCH lines give the step
             time, the bf16 product rate and the copy rate measured on that GPU, the tokens per
             step and the model's FLOPs per token (all, and attention's).

Each kernel goes to one class by its name (ours by their function names, cuBLAS by its kernel
families; a name that matches no class is listed as "other: NAME", never hidden in a class). A
class's floor is the larger of its DRAM bytes over the copy rate and, for the matrix products and
attention, its FLOPs over the bf16 product rate (docs/model.md's count: attention's share split
1:2 between forward and backward; the products' FLOPs leave out Newton-Schulz's, about 0.4% of a
baseline step's). Prints a Markdown table and BENCH lines; exits 1 naming what is missing or
malformed in an input.
"""
import csv
import re
import sys

# (key, title, pattern on the kernel's function name): the first match wins
CLASSES = [
    ("attention_fwd", "attention forward", r"^attention_forward"),
    ("attention_bwd", "attention backward (dq, dk/dv)", r"^attention_backward"),
    ("qk_rope", "QK-norm + RoPE", r"^qk_norm_rope"),
    ("norm_residual", "norms, residual mixes, scaled adds",
     r"^(rmsnorm|mix_norm|out_mix_norm|add_norm|norm_mix|residual_mix|scaled_add|add_scalar_scaled|add_inplace"
     r"|scale_inplace)"),
    ("relu2", "relu^2", r"^relu2"),
    ("logits", "logits + softcap + cross-entropy", r"^softcap_ce"),
    ("embedding", "embeddings (token, bigram hash)", r"^(embedding|bigram)"),
    ("reductions", "column sums and reductions", r"^(colsum|reduce_)"),
    ("record_ops", "XSA, SmearGate, skip gates", r"^(xsa|smear|skip_gate)"),
    ("optimizer", "optimizer element-wise (Muon, Adam, EMA, clip)",
     r"^(adam|muon|ns_|weight_decay|ema_update|swa_add|clip_scale|fake_quant)"),
    ("conversions", "fp32/bf16 conversions", r"^(bf16_to_f32|f32_to_bf16)"),
    ("nccl", "NCCL", r"^nccl"),
    ("products", "cuBLAS matrix products (model, Newton-Schulz)", r"(?i)(gemm|gemv|xmma|cutlass|nvjet|splitk|cublas)"),
]
TIME, READ, WRITE = "gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum"
TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "second": 1.0,
              "s": 1.0}
BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def die(msg):
    sys.exit(f"ncu_ops.py: {msg}")


def base_name(name):
    """The function name, whichever way ncu printed it (--print-kernel-base function or
    demangled): without `void `, namespaces (nvcc puts a static kernel in one of its own),
    template arguments and parameters."""
    name = name.strip().replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    return re.split(r"[(<]", name, 1)[0].strip().split("::")[-1]


def classify(name):
    """(key, title) of a kernel's class: ours by the function name, cuBLAS's by any part of the
    name (its kernels are templates of other namespaces, e.g. cutlass::Kernel2<...>)."""
    base = base_name(name)
    for key, title, pattern in CLASSES:
        if re.search(pattern, name if key == "products" else base):
            return key, title, base
    return f"other_{base}", f"other: {base}", base


def number(text, path, what):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        die(f"{path}: {what}: '{text}' is not a number")


def read_kernels(path):
    """[(kernel name as printed, seconds, DRAM bytes)] from ncu's raw CSV page."""
    try:
        rows = list(csv.reader(open(path, newline="")))
    except OSError as e:
        die(f"{path}: {e.strerror}")
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        die(f"{path}: no header row with a 'Kernel Name' column (expected `ncu --page raw --csv` output)")
    header = rows[head]
    col = {}
    for metric in (TIME, READ, WRITE, "Kernel Name", "ID"):
        if metric not in header:
            die(f"{path}: no '{metric}' column (profile with --metrics {TIME},{READ},{WRITE})")
        col[metric] = header.index(metric)
    units = {TIME: "nsecond", READ: "byte", WRITE: "byte"}
    body = rows[head + 1:]
    if body and not body[0][col["ID"]].strip():  # the units row
        units = {m: body[0][col[m]].strip() or units[m] for m in units}
        body = body[1:]
    for m, table in ((TIME, TIME_UNITS), (READ, BYTE_UNITS), (WRITE, BYTE_UNITS)):
        if units[m] not in table:
            die(f"{path}: {m} in unit '{units[m]}' (expected one of {', '.join(table)}; --print-units base)")
    kernels = []
    for n, r in enumerate(body, head + 2):
        if len(r) < len(header):
            die(f"{path}:{n}: {len(r)} fields, the header has {len(header)}")
        kernels.append((r[col["Kernel Name"]],
                        number(r[col[TIME]], path, f"line {n} {TIME}") * TIME_UNITS[units[TIME]],
                        number(r[col[READ]], path, f"line {n} {READ}") * BYTE_UNITS[units[READ]] +
                        number(r[col[WRITE]], path, f"line {n} {WRITE}") * BYTE_UNITS[units[WRITE]]))
    if not kernels:
        die(f"{path}: no kernel rows (was the profiled step empty? CT_PROFILE_LAST_STEP=1 and --profile-from-start off)")
    return kernels


def read_bench(path, label):
    want = {"peak": "gpu_peak_bf16_tflops", "copy": "gpu_copy_tbps", "step_ms": f"gpu_{label}_step_ms",
            "tokens": f"gpu_{label}_tokens_per_step", "flops": f"gpu_{label}_flops_per_token",
            "att_flops": f"gpu_{label}_attention_flops_per_token"}
    got = {}
    try:
        for line in open(path):
            parts = line.split()
            if len(parts) == 3 and parts[0] == "BENCH":
                got[parts[1]] = parts[2]
    except OSError as e:
        die(f"{path}: {e.strerror}")
    out = {}
    for key, name in want.items():
        if name not in got:
            die(f"{path}: no 'BENCH {name}' line (a bench_gpu_step run of shape '{label}')")
        out[key] = number(got[name], path, name)
        if out[key] <= 0 and key != "att_flops":
            die(f"{path}: BENCH {name} is {got[name]}, expected a positive number")
    return out


def main():
    if len(sys.argv) != 4:
        die("usage: ncu_ops.py NCU_CSV BENCH_LOG LABEL")
    kernels = read_kernels(sys.argv[1])
    b = read_bench(sys.argv[2], sys.argv[3])
    peak, copy = b["peak"] * 1e12, b["copy"] * 1e12
    flops = {"products": (b["flops"] - b["att_flops"]) * b["tokens"],
             "attention_fwd": b["att_flops"] / 3 * b["tokens"], "attention_bwd": b["att_flops"] * 2 / 3 * b["tokens"]}
    rows = {}  # key -> [title, calls, seconds, bytes]
    names = {}  # function name (a product's with its templates) -> [calls, seconds]
    for full, sec, nbytes in kernels:
        key, title, name = classify(full)
        r = rows.setdefault(key, [title, 0, 0.0, 0.0])
        r[1] += 1
        r[2] += sec
        r[3] += nbytes
        shown = name if key != "products" else full.split("(")[0].replace("void ", "")[:110]
        n = names.setdefault(shown, [0, 0.0])
        n[0] += 1
        n[1] += sec
    total = sum(r[2] for r in rows.values())
    floor_total = 0.0
    print(f"one step of {b['tokens']:.0f} tokens: {len(kernels)} kernels, {total * 1e3:.1f} ms of kernel time; "
          f"the step takes {b['step_ms']:.1f} ms unprofiled (bf16 products {b['peak']:.0f} TFLOP/s, "
          f"copies {b['copy']:.2f} TB/s, measured in the same call)")
    print()
    print("| op class | kernels | ms per step | share | DRAM GB | floor ms (bytes / FLOPs) | time / floor |")
    print("|---|---|---|---|---|---|---|")
    for key, (title, calls, sec, nbytes) in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        bytes_floor = nbytes / copy
        flop_floor = flops.get(key, 0.0) / peak
        floor = max(bytes_floor, flop_floor)
        floor_total += floor
        ratio = f"{sec / floor:.1f}x" if floor > 0 else "-"
        print(f"| {title} | {calls} | {sec * 1e3:.2f} | {100 * sec / total:.1f}% | {nbytes / 1e9:.2f} | "
              f"{floor * 1e3:.2f} ({bytes_floor * 1e3:.2f} / {flop_floor * 1e3:.2f}) | {ratio} |")
    gap = b["step_ms"] / 1e3 - total
    print(f"| all kernels | {len(kernels)} | {total * 1e3:.2f} | 100% | {sum(r[3] for r in rows.values()) / 1e9:.2f} | "
          f"{floor_total * 1e3:.2f} | {total / floor_total:.1f}x |")
    print(f"| between kernels (launches, host, waits): step time less kernel time | | {gap * 1e3:.2f} | | | | |")
    print()
    print("the 12 kernels that take longest, per step:")
    for name, (calls, sec) in sorted(names.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {sec * 1e3:9.2f} ms  {calls:5d} calls  {sec / calls * 1e6:9.1f} us each  {name}")
    print(f"BENCH profile_kernels_per_step {len(kernels)}")
    print(f"BENCH profile_kernel_ms_per_step {total * 1e3:.2f}")
    print(f"BENCH profile_floor_ms_per_step {floor_total * 1e3:.2f}")
    print(f"BENCH profile_between_kernels_ms {gap * 1e3:.2f}")
    for key, (_, _, sec, _) in sorted(rows.items()):
        if not key.startswith("other_"):
            print(f"BENCH profile_{key}_ms {sec * 1e3:.2f}")


if __name__ == "__main__":
    main()
