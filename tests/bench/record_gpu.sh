#!/usr/bin/env bash
# record_gpu.sh — the 1.1248 record's configuration (slurm/golf-record-8xh100.conf: 11 x 512,
# 3x MLP, T 2048, XSA, SmearGate, bigram, EMA, late QAT) on the GPU (issue 36):
#   1. its step time at its own 786,432 tokens per step on this one GPU (8 micro-batches; the
#      record's 8 GPUs each take an eighth): median of steps 2..STEPS, and the allocation, with
#      the residual stream in fp32 and in bf16 (residual_dtype, issue 59), one after the other;
#   2. exact resume with its keys (98,304 tokens per step, 6 steps, a checkpoint every 2), for
#      each residual_dtype: a run stopped by SIGTERM in step 3 (CTRAIN_FAULT) and started again
#      must give the uninterrupted run's losses and step-6 checkpoint bit for bit (`ckpt diff
#      --exact`).
# Data: synthetic parameter-golf shards (tests/bench/golf_shards.py: a SentencePiece BPE of
# vocabulary 1024 trained on ctrain's docs and sources), imported with `ctrain data import-bin`.
#   bash tests/bench/record_gpu.sh [BUILD] [STEPS]      (defaults: build, 12)
# Prints BENCH lines; fails when a run fails or the resume is not bitwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-12}
work=$(mktemp -d /tmp/ctrain-record-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
ctrain=$build/ctrain
python3 "$root/tests/bench/golf_shards.py" "$work/data" $(((steps + 4) * 786432)) 1048577 \
    "$root"/docs/*.md "$root"/src/*/*.c >"$work/shards.log" 2>&1 || { tail -5 "$work/shards.log"; exit 1; }
"$ctrain" data import-bin --out "$work/h5" "$work"/data/fineweb_*.bin >/dev/null
record=(--config "$root/slurm/golf-record-8xh100.conf" train_files="$work/h5/fineweb_train_*.h5"
        val_files="$work/h5/fineweb_val_*.h5" val_loss_every=0 golf_artifact=0 max_wallclock_seconds=0
        eval_stride=0 device=cuda)

# BENCH names: record_gpu_* for fp32 (the names of the runs before residual_dtype), record_gpu_bf16s_* for bf16
for dtype in fp32 bf16; do
    tag=$([ $dtype = fp32 ] && echo "" || echo "bf16s_")
    echo "== the record's configuration, 786,432 tokens per step on one GPU, $steps steps, residual_dtype=$dtype"
    "$ctrain" train "${record[@]}" residual_dtype=$dtype iterations="$steps" checkpoint_every=0 train_log_every=1 \
        out_dir="$work/time-$dtype" >"$work/time-$dtype.log" 2>&1 || { tail -20 "$work/time-$dtype.log"; exit 1; }
    grep -E '^(model|cuda backend):' "$work/time-$dtype.log" | sed 's/^/  /'
    read -r tps ms < <(python3 "$root/tests/bench/median_rate.py" "$work/time-$dtype/metrics.jsonl")
    gib=$(sed -n 's/^cuda backend: .*, \([0-9.]*\) GiB allocated.*/\1/p' "$work/time-$dtype.log")
    echo "  median of steps 2-$steps: $ms ms/step, $tps tokens/s; $gib GiB allocated"
    echo "BENCH record_gpu_${tag}step_ms $ms"
    echo "BENCH record_gpu_${tag}tokens_per_s $tps"
    echo "BENCH record_gpu_${tag}alloc_gib ${gib:-0}"
done

source "$root/tests/bench/bitwise_resume.sh"
ok=1
for dtype in fp32 bf16; do
    tag=$([ $dtype = fp32 ] && echo "" || echo "bf16s_")
    echo "== exact resume with the record's keys, residual_dtype=$dtype: SIGTERM in step 3, started again, against uninterrupted"
    bitwise_resume "$ctrain" "$work" "record_gpu_${tag}resume_bitwise" 3.5 6 -- "${record[@]}" iterations=6 \
        checkpoint_every=2 train_batch_tokens=98304 residual_dtype=$dtype || ok=0
done
[ $ok -eq 1 ]
