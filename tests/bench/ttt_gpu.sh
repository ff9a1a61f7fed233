#!/usr/bin/env bash
# ttt_gpu.sh — the GPU check's `ttt` stage (docs/testing.md; issue 57): the 1.0611 record's
# score-first phased LoRA test-time training (`ctrain eval --mode ttt --device cuda`) on one GPU,
# its tokens/s beside the same windows scored by the base model alone (`--mode docs`), and from
# them the seconds the record's whole validation split would take on one GPU and on eight, beside
# the record's 455–509 s on 8×H100 (its logs' TTT eval time).
#
# The model: slurm/golf-frontier-8xh100.conf (11 × 512, 4× MLP, depth recurrence on, the parallel
# lanes, every gate) at its initial weights, with the record's vocabulary of 8,192 (the head's
# LoRA and the logits at their real size) — the speed does not depend on what was learned. The
# TTT settings: the record's log (rank 80, chunks of 48 in windows of 2,048, 64 documents a batch,
# AdamW lr 1e-4, decay 0.5, betas 0/0.99; 3 phases of global SGD, 32 sequences a step), with the
# prefix documents scaled to this split as the record's are to its (2,500 of its 50,000
# documents: 5%) and the global step's chunks of 4,096 tokens instead of 32,768 (a chunk is one
# learning rate and the last one is not trained on: the record's size would leave this prefix,
# some 13,000 tokens, one untrained chunk; its cost per prefix token is about the same).
# The data: synthetic parameter-golf shards (tests/bench/golf_shards.py --bos: ctrain's docs and
# sources as text, repeated), imported with vocab_size 8192, the validation split cut into
# documents of geometric lengths with the mean of the record's split (957 tokens: 47,851,520
# tokens in 50,000 documents). TTT's cost per token grows with a document's length (each chunk's
# forward sees up to its window), so how fineweb's lengths spread matters too: the scaled figure
# is an estimate.
# Scaling to 8 GPUs divides by 8: ctrain's assignment of batches to ranks is static (LPT, the
# global steps' sequences shared out), so this assumes the ranks' shares are even.
#   bash tests/bench/ttt_gpu.sh [BUILD] [VAL_TOKENS]     (defaults: build, 262144)
# TTT_GPU_DEVICE=cpu rehearses the flow without a GPU (a few thousand tokens: the CPU is slow).
# Prints BENCH lines; fails when a run fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
val_tokens=${2:-262144}
[[ "$val_tokens" =~ ^[1-9][0-9]*$ ]] || { echo "ttt_gpu.sh: VAL_TOKENS '$val_tokens': expected a count > 0" >&2; exit 2; }
work=$(mktemp -d /tmp/ctrain-ttt-gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
ctrain=$build/ctrain
device=${TTT_GPU_DEVICE:-cuda}
record_tokens=47851520 record_docs=50000 record_prefix=2500

python3 "$root/tests/bench/golf_shards.py" "$work/data" 1048576 $((val_tokens + 1)) --bos \
    "$root"/docs/*.md "$root"/src/*/*.c >"$work/shards.log" 2>&1 || { tail -5 "$work/shards.log"; exit 1; }
# documents of the record's mean length: the split's tokens cut at BOS (id 1, written over the
# token there) after geometric lengths of mean 957 (fixed seed), the first at position 0; prints
# the documents and the prefix the record's share of them makes
read -r docs prefix < <(python3 - "$work"/data/fineweb_val_*.bin "$record_prefix" "$record_docs" <<'EOF'
import sys
import numpy as np
path = sys.argv[1]
header = np.fromfile(path, dtype="<i4", count=256)
t = np.fromfile(path, dtype="<u2", offset=1024)
at = np.cumsum(np.random.default_rng(57).geometric(1 / 957, size=len(t) // 100 + 2))
t[at[at < len(t)]] = 1
t[0] = 1
with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(t.tobytes())
docs = int((t == 1).sum())
print(docs, max(3, round(docs * int(sys.argv[2]) / int(sys.argv[3]))))
EOF
)
"$ctrain" data import-bin --out "$work/h5" --bos-id 1 --vocab-size 8192 "$work"/data/fineweb_*.bin >/dev/null
echo "== validation split: $val_tokens tokens, $docs documents (mean $((val_tokens / (docs > 0 ? docs : 1))) tokens; the record's 957), $prefix prefix documents in 3 phases"

frontier=(--config "$root/slurm/golf-frontier-8xh100.conf" train_files="$work/h5/fineweb_train_*.h5"
          val_files="$work/h5/fineweb_val_*.h5" val_loss_every=0 device="$device")
"$ctrain" train "${frontier[@]}" iterations=0 enable_looping_at=0 golf_artifact=0 out_dir="$work/m" \
    >"$work/train.log" 2>&1 || { tail -20 "$work/train.log"; exit 1; }
ttt=(ttt_lora_rank=80 ttt_lora_alpha=144 ttt_lora_lr=1e-4 ttt_chunk_size=48 ttt_eval_seq_len=2048 ttt_batch_size=64
     ttt_grad_steps=1 ttt_optimizer=adam ttt_weight_decay=0.5 ttt_beta1=0 ttt_beta2=0.99
     phased_ttt_prefix_docs="$prefix" phased_ttt_num_phases=3 global_ttt_lr=1e-3 global_ttt_momentum=0.9
     global_ttt_chunk_tokens=4096 global_ttt_batch_seqs=32 global_ttt_grad_clip=1.0)
"$ctrain" eval "$work/m" --mode docs,ttt --device "$device" "${ttt[@]}" >"$work/eval.log" 2>&1 ||
    { tail -20 "$work/eval.log"; exit 1; }
grep -E '^(cuda backend|cpu backend|ttt: [0-9]+ documents|ttt: global step)' "$work/eval.log" | sed 's/^/  /'
for mode in docs ttt; do
    read -r tokens ms < <(sed -n "s/^$mode val_loss:[0-9.]* val_bpb:[0-9.na]* tokens:\([0-9]*\) bytes:[0-9]* eval_time:\([0-9]*\)ms$/\1 \2/p" "$work/eval.log")
    [ -n "${tokens:-}" ] || { echo "  no '$mode' result line in the evaluation's output"; exit 1; }
    awk -v m="$mode" -v t="$tokens" -v ms="$ms" -v all="$record_tokens" 'BEGIN {
        tps = t / (ms / 1000)
        printf "  %-4s %9d tokens in %7.1f s: %9.0f tokens/s; the record'\''s split: %6.0f s on one GPU, %5.0f s on 8\n", m, t, ms / 1000, tps, all / tps, all / tps / 8
        printf "BENCH ttt_gpu_%s_tokens_per_s %.0f\n", m, tps
        printf "BENCH ttt_gpu_%s_record_split_s_1gpu %.0f\nBENCH ttt_gpu_%s_record_split_s_8gpu %.0f\n", m, all / tps, m, all / tps / 8 }'
done
echo "  the record's own test-time training on 8xH100: 455-509 s (its three seeds' logs)"
