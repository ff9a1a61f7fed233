#!/usr/bin/env bash
# checkpoint_stall.sh — how long a checkpoint stops training: the baseline model (9 x 512, heads
# 8/4, T 1024, 524,288 tokens per step; vocabulary 256, byte-level data made from ctrain's docs
# and sources) trained for 20 steps with a checkpoint every 5, once written in-line
# (checkpoint_async=off) and once in the background (on), on the given device.
#   bash tests/bench/checkpoint_stall.sh [BUILD] [DEVICE]     (defaults: build, cuda)
# Prints each run's checkpoint lines and the median step time: the stall of an in-line write is
# its time; that of a background write is the "training paused" figure.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
device=${2:-cuda}
work=$(mktemp -d /tmp/ctrain-ckpt-stall.XXXXXX)
trap 'rm -rf "$work"' EXIT
for i in 1 2 3; do cat "$root"/docs/*.md "$root"/src/*/*.c; done >"$work/text.txt" # ~1.3 M bytes: > one step
"$build/ctrain" data from-text --out "$work/train.h5" --val-out "$work/val.h5" --val-fraction 0.05 "$work/text.txt" \
    >/dev/null
for mode in off on; do
    "$build/ctrain" train train_files="$work/train.h5" val_files="$work/val.h5" vocab_size=256 iterations=20 \
        val_loss_every=0 checkpoint_every=5 keep_checkpoints=2 train_log_every=100 device="$device" \
        checkpoint_async=$mode out_dir="$work/$mode" >"$work/$mode.log" 2>&1 || { tail -5 "$work/$mode.log"; exit 1; }
    step_ms=$(python3 -c '
import json, statistics, sys
print(statistics.median(json.loads(l)["step_ms"] for l in open(sys.argv[1]) if "step_ms" in l))' "$work/$mode/metrics.jsonl")
    echo "== checkpoint_async=$mode: median step ${step_ms} ms"
    grep '^checkpoint:' "$work/$mode.log" | sed 's/^/  /'
    echo "BENCH ckpt_${mode}_step_ms $step_ms"
done
