#!/usr/bin/env bash
# cpu_scaling.sh [BUILD] [THREADS...] — the CPU backend's thread scaling against PyTorch, side by
# side in one run on this machine (issue 15 item 8: the curve for docs/performance.md). At each
# thread count (default 1 2 4 8 16 ... up to the cores there are): ctrain's median tokens/s over
# steps 2-7 and the independent PyTorch fp32 implementation's (tests/parity/ref_gpt.py via
# torch_bench.py, torch.set_num_threads) on `make bench`'s model: 4 layers x 256, heads 4/2, seq
# 256, vocab 1024, 16384 tokens per step in 8 micro-batches, synthetic tokens. Prints a table
# (speed-up over one thread, ctrain / PyTorch) and "BENCH cpu_scaling_<who>_t<N> tok/s" lines.
# PyTorch is skipped, with a note, where `import torch` fails; CTRAIN_PYTHON names the Python
# (default /usr/bin/python3; it needs h5py and numpy for the data).
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
shift || true
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${CTRAIN_PYTHON:-/usr/bin/python3}
threads=("$@")
if [ ${#threads[@]} -eq 0 ]; then
    cores=$(nproc)
    for t in 1 2 4 8 16 32 64 128; do [ "$t" -le "$cores" ] && threads+=("$t"); done
    [ "${threads[-1]}" -eq "$cores" ] || threads+=("$cores")
fi
steps=${BENCH_STEPS:-6}
work=$(mktemp -d /tmp/ctrain-scaling.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$build/ctrain" --version | grep -i -E 'blas|openmp' || true
"$py" "$root/tests/bench/synthetic_tokens.py" "$work/data.h5" 1024 4000000
cfg=(vocab_size=1024 num_layers=4 model_dim=256 num_heads=4 num_kv_heads=2 train_seq_len=256
     train_batch_tokens=16384 grad_accum_slots=8)
have_torch=1
"$py" -c 'import torch' 2>/dev/null || { have_torch=0; echo "note: no PyTorch in $py: ctrain only"; }
[ $have_torch = 0 ] || "$py" -c '
import re, torch
m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
print("torch", torch.__version__, "BLAS", m.group(1) if m else "unknown", "(MKL available)" if torch.backends.mkl.is_available() else "")'

printf '%8s %12s %10s %12s %10s %10s\n' threads ctrain_tok/s speedup torch_tok/s speedup ratio
c1="" t1=""
for t in "${threads[@]}"; do
    rm -rf "$work/out"
    OMP_NUM_THREADS=$t "$build/ctrain" train "${cfg[@]}" train_files="$work/data.h5" iterations=$((steps + 1)) \
        val_loss_every=0 threads="$t" device=cpu out_dir="$work/out" checkpoint_every=0 >"$work/ctrain.log"
    read -r c _ < <("$py" "$root/tests/bench/median_rate.py" "$work/out/metrics.jsonl")
    tt=0
    if [ $have_torch = 1 ]; then
        tt=$(OMP_NUM_THREADS=$t "$py" "$root/tests/bench/torch_bench.py" "$work/data.h5" "$steps" "$t" "${cfg[@]}" |
             awk '/BENCH torch_tokens_per_s/{printf "%d", $3}')
    fi
    c1=${c1:-$c} t1=${t1:-$tt}
    "$py" -c '
import sys
t, c, tt, c1, t1 = map(float, sys.argv[1:])
cs = c / c1
ts = tt / t1 if t1 else 0
ratio = c / tt if tt else 0
print(f"{int(t):8d} {c:12.0f} {cs:9.2f}x {tt:12.0f} {ts:9.2f}x {ratio:9.2f}x")' "$t" "$c" "$tt" "$c1" "$t1"
    echo "BENCH cpu_scaling_ctrain_t$t $c" >>"$work/bench.txt"
    [ $have_torch = 0 ] || echo "BENCH cpu_scaling_torch_t$t $tt" >>"$work/bench.txt"
done
cat "$work/bench.txt"
