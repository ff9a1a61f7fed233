#!/usr/bin/env bash
# frontier_gpu.sh — the GPU check's `frontier` stage (docs/testing.md): the 1.0611 record's configuration (slurm/golf-frontier-8xh100.conf: 11 x 512,
# 4x LeakyReLU(0.5)^2 MLP, skip gates, the sparse attention gate, the BOS-masked SmearGate, depth
# recurrence of blocks 3..5, document packing, Polar Express + MuonEq-R, EMA, its parallel lanes
# from block 8 on) on the GPU (issue 56):
#   1. its step time at its own 786,432 tokens per step on this one GPU (8 packed rows of 98,304
#      tokens; the record's 8 GPUs each take one), before and after looping switches on
#      (enable_looping_at of the run's steps), and the allocation, with the residual stream in
#      fp32 and in bf16, one after the other;
#   2. GPTQ's calibration on the GPU and the gptq-brotli artifact (issue 58), timed;
#   3. exact resume across the looping switch (98,304 tokens per step, 6 steps, looping from step
#      3, a checkpoint every step): a run stopped by SIGTERM in step 2 and started again must give
#      the uninterrupted run's losses and step-6 checkpoint bit for bit (`ckpt diff --exact`).
# Data: synthetic parameter-golf shards (tests/bench/golf_shards.py --bos: a SentencePiece BPE of
# vocabulary 1024 trained on ctrain's docs and sources, each file a document behind BOS id 1),
# imported with `ctrain data import-bin --bos-id 1`; the model's vocabulary is that 1024, not the
# record's 8192 (the embedding and logits are a small part of the step: docs/performance.md).
#   bash tests/bench/frontier_gpu.sh [BUILD] [STEPS]      (defaults: build, 12)
# Prints BENCH lines; fails when a run fails or the resume is not bitwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-12}
work=$(mktemp -d /tmp/ctrain-frontier-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
ctrain=$build/ctrain
python3 "$root/tests/bench/golf_shards.py" "$work/data" $(((steps + 4) * 786432)) 1048577 --bos \
    "$root"/docs/*.md "$root"/src/*/*.c >"$work/shards.log" 2>&1 || { tail -5 "$work/shards.log"; exit 1; }
"$ctrain" data import-bin --out "$work/h5" --bos-id 1 "$work"/data/fineweb_*.bin >/dev/null
frontier=(--config "$root/slurm/golf-frontier-8xh100.conf" train_files="$work/h5/fineweb_train_*.h5"
          val_files="$work/h5/fineweb_val_*.h5" vocab_size=1024 val_loss_every=0 golf_artifact=0 device=cuda)

# median ms/step and tokens/s of steps [from, to] of a run's metrics.jsonl
median_of() {
    python3 - "$1" "$2" "$3" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
sel = [r for r in rows if int(sys.argv[2]) <= r["step"] <= int(sys.argv[3])]
if not sel:
    sys.exit("no steps in range")
print(f'{statistics.median(r["step_ms"] for r in sel):.1f} {statistics.median(r["tokens_per_s"] for r in sel):.0f}')
EOF
}

# BENCH names: frontier_gpu_* for fp32, frontier_gpu_bf16s_* for the bf16 residual stream
for dtype in fp32 bf16; do
    tag=$([ $dtype = fp32 ] && echo "" || echo "bf16s_")
    echo "== the 1.0611 record's configuration, 786,432 tokens per step on one GPU, $steps steps, residual_dtype=$dtype"
    "$ctrain" train "${frontier[@]}" residual_dtype=$dtype iterations="$steps" checkpoint_every=0 train_log_every=1 \
        out_dir="$work/time-$dtype" >"$work/time-$dtype.log" 2>&1 || { tail -20 "$work/time-$dtype.log"; exit 1; }
    grep -E '^(model|cuda backend|layer_loop)' "$work/time-$dtype.log" | sed 's/^/  /'
    switch=$(sed -n 's/^layer_loop:enabled step:\([0-9]*\).*/\1/p' "$work/time-$dtype.log" | head -1)
    [ -n "$switch" ] || { echo "  looping never switched on"; exit 1; }
    read -r pre_ms pre_tps < <(median_of "$work/time-$dtype/metrics.jsonl" 2 $((switch - 1)))
    read -r loop_ms loop_tps < <(median_of "$work/time-$dtype/metrics.jsonl" $((switch + 1)) "$steps")
    gib=$(sed -n 's/^cuda backend: .*, \([0-9.]*\) GiB allocated.*/\1/p' "$work/time-$dtype.log")
    echo "  before looping (steps 2-$((switch - 1))): $pre_ms ms/step, $pre_tps tokens/s"
    echo "  looping (steps $((switch + 1))-$steps): $loop_ms ms/step, $loop_tps tokens/s; $gib GiB allocated"
    echo "BENCH frontier_gpu_${tag}step_ms $loop_ms"
    echo "BENCH frontier_gpu_${tag}preloop_step_ms $pre_ms"
    echo "BENCH frontier_gpu_${tag}tokens_per_s $loop_tps"
    echo "BENCH frontier_gpu_${tag}alloc_gib ${gib:-0}"
done

# GPTQ's calibration on the GPU (issue 58): the fp32 run's final weights over the record's 16
# micro-batch slots of train_files (`ckpt hessians --device cuda`, the whole command), beside the
# record's "collected 67 Hessians in 4.7s"; then the gptq-brotli artifact with those Hessians on
# this machine's CPU (`ckpt golf --no-eval`: GPTQ, LQER, brotli), its seconds and bytes (12 steps'
# weights: a trained model's compress better)
echo "== GPTQ calibration (16 slots of 98,304 tokens, device cuda) and the gptq-brotli artifact"
start=$(date +%s.%N)
"$ctrain" ckpt hessians "$work/time-fp32" gptq_calibration_batches=16 --device cuda --out "$work/h.h5" \
    >"$work/hessians.log" 2>&1 || { tail -20 "$work/hessians.log"; exit 1; }
mid=$(date +%s.%N)
"$ctrain" ckpt golf "$work/time-fp32" --format gptq-brotli --hessians "$work/h.h5" --out "$work/a.br" --no-eval \
    >"$work/golf.log" 2>&1 || { tail -20 "$work/golf.log"; exit 1; }
end=$(date +%s.%N)
read -r h_s g_s < <(python3 -c "import sys; a, b, c = map(float, sys.argv[1:]); print('%.1f %.1f' % (b - a, c - b))" \
    "$start" "$mid" "$end")
bytes=$(sed -n 's/^Serialized model quantized+brotli: \([0-9]*\) bytes$/\1/p' "$work/golf.log")
echo "  ckpt hessians (16 slots, cuda): $h_s s (the record: 4.7 s on 8xH100); ckpt golf gptq-brotli: $g_s s, ${bytes:-?} bytes"
echo "BENCH frontier_gpu_hessians_16_slots_s $h_s"
echo "BENCH frontier_gpu_gptq_brotli_s $g_s"
echo "BENCH frontier_gpu_gptq_brotli_bytes ${bytes:-0}"

source "$root/tests/bench/bitwise_resume.sh"
ok=1
for dtype in fp32 bf16; do
    tag=$([ $dtype = fp32 ] && echo "" || echo "bf16s_")
    echo "== exact resume across the looping switch, residual_dtype=$dtype: SIGTERM in step 2, started again, against uninterrupted"
    bitwise_resume "$ctrain" "$work" "frontier_gpu_${tag}resume_bitwise" 2.0 6 -- "${frontier[@]}" iterations=6 \
        enable_looping_at=0.5 checkpoint_every=1 train_batch_tokens=98304 grad_accum_slots=1 residual_dtype=$dtype || ok=0
done
[ $ok -eq 1 ]
