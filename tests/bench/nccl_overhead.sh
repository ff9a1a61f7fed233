#!/usr/bin/env bash
# nccl_overhead.sh — what the multi-GPU path costs on one GPU: the baseline model (9 x 512, heads
# 8/4, T 1024, 524,288 tokens per step; byte-level data made from ctrain's docs and sources)
# trained STEPS steps (default 20) with nccl=off and with nccl=on (communicator, bucketed
# gradient reduction on its own stream, sharded Muon with its updates broadcast, all with one
# rank), and nccl=on with CT_MUON_COMBINE=allreduce (the Muon updates summed instead, the
# earlier path), then the final checkpoints compared bit for bit with nccl=off's.
#   bash tests/bench/nccl_overhead.sh [BUILD] [STEPS]
# Prints the median step time of each run (steps after the first two) and the overhead.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-20}
work=$(mktemp -d /tmp/ctrain-nccl-overhead.XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in 1 2 3; do cat "$root"/docs/*.md "$root"/src/*/*.c; done >"$work/text.txt" # ~1.3 M bytes: > one step
"$build/ctrain" data from-text --out "$work/train.h5" --val-out "$work/val.h5" --val-fraction 0.05 "$work/text.txt" \
    >/dev/null
declare -A ms
for mode in off on on_allreduce; do
    combine=broadcast
    [ $mode = on_allreduce ] && combine=allreduce
    CT_MUON_COMBINE=$combine "$build/ctrain" train train_files="$work/train.h5" vocab_size=256 iterations="$steps" \
        val_loss_every=0 checkpoint_every=0 train_log_every=100 device=cuda nccl=${mode%_allreduce} \
        out_dir="$work/$mode" >"$work/$mode.log" 2>&1 || { tail -5 "$work/$mode.log"; exit 1; }
    ms[$mode]=$(python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l]
print(statistics.median(r["step_ms"] for r in rows[2:]))' "$work/$mode/metrics.jsonl")
    echo "== nccl=$mode: median step ${ms[$mode]} ms"
    grep '^nccl:' "$work/$mode.log" | sed 's/^/  /' || true
    echo "BENCH nccl_${mode}_step_ms ${ms[$mode]}"
done
python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'BENCH nccl_overhead_percent {100 * (b - a) / a:.2f}')" \
    "${ms[off]}" "${ms[on]}"
python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'BENCH muon_broadcast_vs_allreduce_ms {b - a:.3f}')" \
    "${ms[on_allreduce]}" "${ms[on]}"
final=$(printf 'step_%08d.h5' "$steps")
for mode in on on_allreduce; do
    if "$build/ctrain" ckpt diff --exact "$work/off/checkpoints/$final" "$work/$mode/checkpoints/$final" >/dev/null; then
        echo "nccl=$mode: final weights and optimizer state bitwise equal to nccl=off's"
    else
        echo "nccl=$mode: final weights and optimizer state DIFFER from nccl=off's"; exit 1
    fi
done
