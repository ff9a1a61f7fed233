#!/usr/bin/env bash
# step_vs_train_gpt.sh — the whole training step, ctrain (device=cuda) side by side with
# parameter-golf's train_gpt.py on the same GPU, same data, in one run; then bench_gpu_step's
# shapes. train_gpt.py is not part of ctrain: fetch it from github.com/openai/parameter-golf and
# give its path. The data is synthetic: a SentencePiece BPE model (vocab 1024) trained on the
# spot on ctrain's own docs and sources, and shards of that text (tests/bench/golf_shards.py).
#   bash tests/bench/step_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS]
# Both run the baseline (9 x 512, heads 8/4, T 1024, 524,288 tokens per step, 8 micro-batches on
# one GPU); the figure is the mean step time over steps 6..STEPS from each program's own log.
# Needs a CUDA device, PyTorch with torch.compile, sentencepiece and ctrain built with CUDA.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: step_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS]}" && pwd)
train_gpt=$(readlink -f "${2:?usage: step_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS]}")
steps=${3:-30}
work=$(mktemp -d /tmp/ctrain-step-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
tokens=$(( (steps + 8) * 524288 ))
python3 "$root/tests/bench/golf_shards.py" "$work/data" "$tokens" 1048577 "$root"/docs/*.md "$root"/src/*/*.c

echo "== ctrain"
"$build/ctrain" data import-bin --out "$work/h5" "$work"/data/fineweb_*.bin >/dev/null
"$build/ctrain" train train_files="$work/h5/fineweb_train_*.h5" val_files="$work/h5/fineweb_val_*.h5" \
    iterations="$steps" val_loss_every=0 checkpoint_every=0 train_log_every=10 device=cuda \
    out_dir="$work/ctrain" >"$work/ctrain.log" 2>&1 || { tail -20 "$work/ctrain.log"; exit 1; }
grep -E '^cuda|^device' "$work/ctrain.log" || true
ctrain_ms=$(python3 - "$work/ctrain/metrics.jsonl" <<'PY'
import json, sys
ms = [json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l]
print(f"{sum(ms[5:]) / len(ms[5:]):.1f}")
PY
)

echo "== train_gpt.py (torch.compile, PyTorch $(python3 -c 'import torch; print(torch.__version__)'))"
(cd "$work" && DATA_PATH="$work/data" TOKENIZER_PATH="$work/data/sp1024.model" VOCAB_SIZE=1024 \
    ITERATIONS="$steps" WARMUP_STEPS=3 VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=1 MAX_WALLCLOCK_SECONDS=0 \
    RUN_ID=bench python3 "$train_gpt" >"$work/train_gpt.log" 2>&1) || { tail -20 "$work/train_gpt.log"; exit 1; }
grep -E 'peak memory' "$work/train_gpt.log" || true
torch_ms=$(python3 - "$work/train_gpt.log" <<'PY'
import re, sys
t = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step:(\d+)/\d+ train_loss:\S+ train_time:(\d+)ms", open(sys.argv[1]).read())}
last = max(t)
print(f"{(t[last] - t[5]) / (last - 5):.1f}")
PY
)
echo "== whole step, baseline, mean of steps 6..$steps"
echo "  ctrain       $ctrain_ms ms/step"
echo "  train_gpt.py $torch_ms ms/step"
python3 -c "import sys; c, t = map(float, sys.argv[1:]); print(f'  ratio (train_gpt.py / ctrain): {t / c:.2f}x  (target >= 1.5)')" "$ctrain_ms" "$torch_ms"
echo "BENCH step_ctrain_ms $ctrain_ms"
echo "BENCH step_train_gpt_ms $torch_ms"

echo "== bench_gpu_step (random tokens): baseline and 12 x 768 / T 2048"
"$build/bench/bench_gpu_step" 5 all | grep -v '^BENCH'
