#!/usr/bin/env bash
# step_profile.sh [BUILD] [SHAPE] — where one whole training step's GPU time goes (issue 14's
# per-op table), on a GPU machine with Nsight Compute (ncu):
#   1. bench_gpu_step 5 SHAPE unprofiled: the step time, the bf16 product rate and the copy rate
#      of this GPU, the tokens and model FLOPs per step;
#   2. the same benchmark under ncu with CT_PROFILE_LAST_STEP=1 (`--profile-from-start off`: the
#      last step alone, every kernel of its micro-batches, CUDA graph nodes included, and of its
#      optimizer step), each kernel's duration and DRAM bytes (`--clock-control none`: the clocks
#      a training run has; caches flushed before each kernel, ncu's default, so the bytes are what
#      each kernel must move);
#   3. tests/bench/ncu_ops.py: per op class, the time, its share, the DRAM bytes and the floor
#      (bytes over the copy rate, FLOPs over the product rate), and the longest kernels.
# SHAPE: baseline (default), wide or small (bench_gpu_step's). ncu: NCU, else the one on PATH.
# Prints the table and BENCH lines; fails when ncu is missing or either run fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
shape=${2:-baseline}
case "$shape" in baseline|wide|small) ;; *) echo "step_profile.sh: shape '$shape': expected baseline, wide or small" >&2; exit 2 ;; esac
ncu=${NCU:-$(command -v ncu || true)}
[ -n "$ncu" ] && [ -x "$ncu" ] || { echo "step_profile.sh: ncu (Nsight Compute) is not on PATH (or set NCU=PATH)" >&2; exit 1; }
work=$(mktemp -d /tmp/ctrain-profile.XXXXXX)
trap 'rm -rf "$work"' EXIT
bench=$build/bench/bench_gpu_step

echo "== $shape, unprofiled: bench_gpu_step 5 $shape"
"$bench" 5 "$shape" >"$work/bench.log" 2>&1 || { tail -20 "$work/bench.log"; exit 1; }
grep -vE '^BENCH ' "$work/bench.log" | sed 's/^/  /'
echo "== $shape, one step under $("$ncu" --version | tail -1)"
CT_PROFILE_LAST_STEP=1 "$ncu" --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum -o "$work/step" \
    "$bench" 1 "$shape" >"$work/ncu.log" 2>&1 || { tail -30 "$work/ncu.log"; exit 1; }
"$ncu" --import "$work/step.ncu-rep" --page raw --csv --print-units base \
    >"$work/step.csv" 2>"$work/import.err" || { tail -20 "$work/import.err"; exit 1; }
python3 "$root/tests/bench/ncu_ops.py" "$work/step.csv" "$work/bench.log" "$shape"
