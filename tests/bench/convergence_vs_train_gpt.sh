#!/usr/bin/env bash
# convergence_vs_train_gpt.sh — does the bf16 residual stream (residual_dtype, issue 59) train as
# well as the fp32 one? ctrain with residual_dtype=fp32 and =bf16, two seeds each, and
# parameter-golf's train_gpt.py (given by path, never committed), on the same GPU, the same
# data, the baseline model (9 x 512, T 1024), STEPS steps of BATCH tokens, then val_bpb on text
# none of them trained on. The data: a SentencePiece BPE (vocab 1024) trained on ctrain's docs and
# host sources, training shards of that text, a validation shard of held-out docs and kernel
# sources (tests/bench/golf_shards.py --held-out); ctrain reads them imported with the tokenizer's
# tables (`data import-bin --tokenizer`), so both programs report bits per byte the same way.
#   bash tests/bench/convergence_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS] [BATCH]   (300, 131072)
# Prints each run's val_bpb and the comparison the issue asks for: bf16 against fp32 at the same
# seed, beside the seed-to-seed spread of fp32, and each against train_gpt.py; BENCH lines.
# A run that fails fails the script; the figures are measurements, not a pass/fail judgement.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: convergence_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS] [BATCH]"
build=$(cd "${1:?$usage}" && pwd)
train_gpt=$(readlink -f "${2:?$usage}")
steps=${3:-300}
batch=${4:-131072}
work=$(mktemp -d /tmp/ctrain-convergence.XXXXXX)
trap 'rm -rf "$work"' EXIT
held_out=("$root/docs/model.md" "$root/docs/cuda.md" "$root"/kernels/cpu/*.c)
train_text=()
for f in "$root"/docs/*.md "$root"/src/*/*.c; do
    case " ${held_out[*]} " in *" $f "*) ;; *) train_text+=("$f") ;; esac
done
python3 "$root/tests/bench/golf_shards.py" "$work/data" $(((steps + 8) * batch)) 1048576 "${train_text[@]}" \
    --held-out "${held_out[@]}"
"$build/ctrain" data import-bin --tokenizer "$work/data/sp1024.model" --out "$work/h5" "$work"/data/fineweb_*.bin >/dev/null

val_bpb_ctrain() { python3 -c 'import json,sys; print([json.loads(l)["val_bpb"] for l in open(sys.argv[1]) if "\"val_bpb\"" in l][-1])' "$1/metrics.jsonl"; }
declare -A bpb
for dtype in fp32 bf16; do
    for seed in 1337 1338; do
        run=$work/ctrain-$dtype-$seed
        "$build/ctrain" train train_files="$work/h5/fineweb_train_*.h5" val_files="$work/h5/fineweb_val_*.h5" \
            iterations="$steps" train_batch_tokens="$batch" val_loss_every=0 checkpoint_every=0 train_log_every=50 \
            warmdown_iters=$((steps / 4)) seed=$seed device=cuda residual_dtype=$dtype out_dir="$run" \
            >"$run.log" 2>&1 || { tail -20 "$run.log"; exit 1; }
        bpb[$dtype-$seed]=$(val_bpb_ctrain "$run")
        echo "ctrain residual_dtype=$dtype seed=$seed: val_bpb ${bpb[$dtype-$seed]} after $steps steps"
    done
done
(cd "$work" && DATA_PATH="$work/data" TOKENIZER_PATH="$work/data/sp1024.model" VOCAB_SIZE=1024 SEED=1337 \
    ITERATIONS="$steps" TRAIN_BATCH_TOKENS="$batch" WARMDOWN_ITERS=$((steps / 4)) WARMUP_STEPS=3 VAL_LOSS_EVERY=0 \
    TRAIN_LOG_EVERY=50 MAX_WALLCLOCK_SECONDS=0 RUN_ID=convergence python3 "$train_gpt" >"$work/train_gpt.log" 2>&1) ||
    { tail -20 "$work/train_gpt.log"; exit 1; }
bpb[train_gpt]=$(sed -n "s/^step:$steps\/$steps val_loss:[^ ]* val_bpb:\([0-9.]*\).*/\1/p" "$work/train_gpt.log" | tail -1)
[ -n "${bpb[train_gpt]}" ] || { echo "no val_bpb at step $steps in train_gpt.py's log"; tail -5 "$work/train_gpt.log"; exit 1; }
echo "train_gpt.py seed=1337: val_bpb ${bpb[train_gpt]} after $steps steps"

python3 - "$steps" "${bpb[fp32-1337]}" "${bpb[fp32-1338]}" "${bpb[bf16-1337]}" "${bpb[bf16-1338]}" "${bpb[train_gpt]}" <<'PY'
import sys
steps = sys.argv[1]
f1, f2, b1, b2, ref = map(float, sys.argv[2:])
spread = abs(f1 - f2)
delta = (abs(b1 - f1) + abs(b2 - f2)) / 2
fp32_mean, bf16_mean = (f1 + f2) / 2, (b1 + b2) / 2
print(f"== val_bpb after {steps} steps")
print(f"  fp32 stream: {f1:.4f} {f2:.4f} (seed spread {spread:.4f})")
print(f"  bf16 stream: {b1:.4f} {b2:.4f} (mean |bf16 - fp32| at the same seed {delta:.4f})")
print(f"  train_gpt.py: {ref:.4f}; fp32 mean - train_gpt {fp32_mean - ref:+.4f}, bf16 mean - train_gpt {bf16_mean - ref:+.4f}")
print(f"  bf16 within the fp32 seed spread: {'yes' if delta <= spread else 'no'}")
for k, v in [("fp32_s1337", f1), ("fp32_s1338", f2), ("bf16s_s1337", b1), ("bf16s_s1338", b2), ("train_gpt", ref)]:
    print(f"BENCH convergence_{k}_val_bpb {v:.4f}")
print(f"BENCH convergence_fp32_seed_spread {spread:.4f}")
print(f"BENCH convergence_bf16s_vs_fp32 {delta:.4f}")
PY
