#!/usr/bin/env bash
# blas_cores.sh [BUILD] [CORES...] — the CPU backend's training speed with each OpenBLAS kernel
# set (OPENBLAS_CORETYPE) at 1 and 2 threads, side by side in one run; prints the median tokens/s
# of steps 6-30 and "BENCH cpu_train_tok_s_<core>_t<threads> N" lines. Model: 4 layers, dim 256,
# 4/2 heads, seq 256, 1024 tokens per step, byte-level data from /usr/share/common-licenses.
set -euo pipefail
build=${1:-build}
shift || true
cores=("$@")
[ ${#cores[@]} -gt 0 ] || cores=(Haswell SkylakeX Cooperlake)
ctrain=$(cd "$build" && pwd)/ctrain
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat /usr/share/common-licenses/* >"$work/text.txt"
"$ctrain" data from-text --out "$work/train.h5" "$work/text.txt" >/dev/null
run=(vocab_size=256 num_layers=4 model_dim=256 num_heads=4 num_kv_heads=2 train_batch_tokens=1024 train_seq_len=256
     grad_accum_slots=1 train_files="$work/train.h5" checkpoint_every=0 val_loss_every=0 train_log_every=1000
     check_train_tokens=0 iterations=30 device=cpu)
for threads in 1 2; do
    for core in "${cores[@]}"; do
        rm -rf "$work/out"
        OPENBLAS_CORETYPE=$core "$ctrain" train "${run[@]}" threads="$threads" out_dir="$work/out" >/dev/null
        read -r tok _ < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/out/metrics.jsonl" 5)
        printf '%-12s %d thread(s)  %6d tok/s\n' "$core" "$threads" "$tok"
        echo "BENCH cpu_train_tok_s_${core}_t${threads} $tok"
    done
done
