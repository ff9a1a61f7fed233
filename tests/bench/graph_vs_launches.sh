#!/usr/bin/env bash
# graph_vs_launches.sh — the micro-batches replayed as one CUDA graph (cuda_graph=1, the default)
# against launched kernel by kernel (cuda_graph=0), with real cuBLAS under capture: the baseline
# model (9 x 512, heads 8/4, T 1024, 524,288 tokens per step; byte-level data made from ctrain's
# docs and sources) trained STEPS steps (default 20) each way, the two final checkpoints compared
# bit for bit, and the median step time of each (steps after the first two).
#   bash tests/bench/graph_vs_launches.sh [BUILD] [STEPS]
# Fails when the checkpoints differ or the graph was not captured (the run then falls back to
# launches with a warning).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-20}
work=$(mktemp -d /tmp/ctrain-graph-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in 1 2 3; do cat "$root"/docs/*.md "$root"/src/*/*.c; done >"$work/text.txt" # ~1.3 M bytes: > one step
"$build/ctrain" data from-text --out "$work/train.h5" --val-out "$work/val.h5" --val-fraction 0.05 "$work/text.txt" \
    >/dev/null
declare -A ms
for graph in 1 0; do
    "$build/ctrain" train train_files="$work/train.h5" vocab_size=256 iterations="$steps" val_loss_every=0 \
        checkpoint_every=0 train_log_every=100 device=cuda cuda_graph=$graph out_dir="$work/g$graph" \
        >"$work/g$graph.log" 2>&1 || { tail -5 "$work/g$graph.log"; exit 1; }
    ms[$graph]=$(python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l]
print(statistics.median(r["step_ms"] for r in rows[2:]))' "$work/g$graph/metrics.jsonl")
    echo "== cuda_graph=$graph: median step ${ms[$graph]} ms"
    grep -E 'CUDA graph|launch by launch|could not be captured' "$work/g$graph.log" | sed 's/^/  /' || true
    echo "BENCH graph${graph}_step_ms ${ms[$graph]}"
done
python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'BENCH graph_saving_percent {100 * (b - a) / b:.2f}')" \
    "${ms[1]}" "${ms[0]}"
if grep -q 'could not be captured' "$work/g1.log"; then
    echo "the graph was not captured: $(grep -m1 'could not be captured' "$work/g1.log")"; exit 1
fi
final=$(printf 'step_%08d.h5' "$steps")
if "$build/ctrain" ckpt diff --exact "$work/g1/checkpoints/$final" "$work/g0/checkpoints/$final" >/dev/null; then
    echo "final weights and optimizer state: bitwise equal"
else
    echo "final weights and optimizer state: DIFFER"; exit 1
fi
