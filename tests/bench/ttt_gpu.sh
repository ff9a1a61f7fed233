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
# The same test-time training again with CT_TTT_BASE_GRADS=1 (docs/cuda.md, "Test-time training":
# the chunks' backward making every base weight gradient into a scratch buffer, the path before
# 2026-11-29): its tokens/s and the saving of not making them; its scores must be the same bits.
#   bash tests/bench/ttt_gpu.sh [BUILD] [VAL_TOKENS]     (defaults: build, 262144)
# TTT_GPU_DEVICE=cpu rehearses the flow without a GPU (a few thousand tokens: the CPU is slow;
# at least 8,196 for the two-rank check below, whose quarter of the split must hold one sequence
# of the frontier's 2,048 + 1).
# Then two ranks sharing the GPU against one (below), when mpiexec is there.
# Prints BENCH lines; fails when a run fails or the two-rank check does.
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
"$ctrain" eval "$work/m" --mode docs,ttt --device "$device" --dump "$work/dttt" "${ttt[@]}" >"$work/eval.log" 2>&1 ||
    { tail -20 "$work/eval.log"; exit 1; }
grep -E '^(cuda backend|cpu backend|ttt: [0-9]+ documents|ttt: global step)' "$work/eval.log" | sed 's/^/  /'
CT_TTT_BASE_GRADS=1 "$ctrain" eval "$work/m" --mode ttt --device "$device" --dump "$work/dttt_bg" "${ttt[@]}" \
    >"$work/eval_bg.log" 2>&1 || { tail -20 "$work/eval_bg.log"; exit 1; }
# mode, its BENCH name, the log with its result line: tokens/s, the record's split at that speed
declare -A ms_of=()
for run in "docs docs eval.log" "ttt ttt eval.log" "ttt ttt_base_grads eval_bg.log"; do
    read -r mode name log <<<"$run"
    read -r tokens ms < <(sed -n "s/^$mode val_loss:[0-9.]* val_bpb:[0-9.na]* tokens:\([0-9]*\) bytes:[0-9]* eval_time:\([0-9]*\)ms$/\1 \2/p" "$work/$log")
    [ -n "${tokens:-}" ] || { echo "  no '$mode' result line in $log"; exit 1; }
    awk -v m="$name" -v t="$tokens" -v ms="$ms" -v all="$record_tokens" 'BEGIN {
        tps = t / (ms / 1000)
        printf "  %-15s %9d tokens in %7.1f s: %9.0f tokens/s; the record'\''s split: %6.0f s on one GPU, %5.0f s on 8\n", m, t, ms / 1000, tps, all / tps, all / tps / 8
        printf "BENCH ttt_gpu_%s_tokens_per_s %.0f\n", m, tps
        printf "BENCH ttt_gpu_%s_record_split_s_1gpu %.0f\nBENCH ttt_gpu_%s_record_split_s_8gpu %.0f\n", m, all / tps, m, all / tps / 8 }'
    ms_of[$name]=$ms
done
awk -v a="${ms_of[ttt]}" -v b="${ms_of[ttt_base_grads]}" 'BEGIN {
    printf "  without the base weight gradients: %.1f s against %.1f s with them (CT_TTT_BASE_GRADS=1): %.2fx\n", a / 1000, b / 1000, b / a
    printf "BENCH ttt_gpu_ttt_speedup_without_base_grads %.3f\n", b / a }'
# the adapters' gradients do not depend on the base's: every score the same bits
if cmp -s "$work/dttt/losses.f32" "$work/dttt_bg/losses.f32"; then
    echo "  with and without CT_TTT_BASE_GRADS=1: every score the same bits"
else
    echo "  with and without CT_TTT_BASE_GRADS=1 the scores differ: $(cmp "$work/dttt/losses.f32" "$work/dttt_bg/losses.f32" 2>&1 | head -1)"
    exit 1
fi
echo "  the record's own test-time training on 8xH100: 455-509 s (its three seeds' logs)"

# The global step across ranks: two ranks sharing this GPU (mpiexec; the gradients summed through
# the host, as training with nccl = off) against one, on the split's first quarter (at most 65,536
# tokens): the documents scored before the first global step the same bits (their batches do not
# depend on the world size), the val_loss within the rounding of the gradients' sum across ranks
# (its relative difference printed; more than 1e-3 fails: a wrong sum is far more).
command -v mpiexec >/dev/null || { echo "  no mpiexec: the two-rank check did not run"; exit 0; }
small=$((val_tokens / 4 < 65536 ? val_tokens / 4 : 65536))
mkdir -p "$work/small"
python3 - "$work"/data/fineweb_val_*.bin "$work/small/fineweb_val_000000.bin" "$small" <<'EOF'
import sys
import numpy as np
header = np.fromfile(sys.argv[1], dtype="<i4", count=256)
t = np.fromfile(sys.argv[1], dtype="<u2", offset=1024)[: int(sys.argv[3]) + 1]
header[2] = len(t)
with open(sys.argv[2], "wb") as f:
    f.write(header.tobytes())
    f.write(t.tobytes())
EOF
# 16 prefix documents (some 15,000 tokens: chunks of 4,096 of which the global steps train all but
# the last, each a step of 2 rows, one per rank), more than the record's share, so that the
# gradients' sum across ranks runs
small_prefix=16
"$ctrain" data import-bin --out "$work/h5s" --bos-id 1 --vocab-size 8192 "$work/small/fineweb_val_000000.bin" >/dev/null
one=("$ctrain" eval "$work/m" --mode ttt --device "$device" --val-files "$work/h5s/fineweb_val_000000.h5" "${ttt[@]}"
     phased_ttt_prefix_docs="$small_prefix")
echo "== two ranks on one GPU against one: $small tokens, $small_prefix prefix documents"
"${one[@]}" --dump "$work/d1" >"$work/r1.log" 2>&1 || { tail -20 "$work/r1.log"; exit 1; }
NCCL_MULTI_RANK_GPU_ENABLE=1 timeout 600 mpiexec -launcher fork -n 2 "${one[@]}" --dump "$work/d2" >"$work/r2.log" 2>&1 ||
    { tail -20 "$work/r2.log"; exit 1; }
grep -E '^ttt: [0-9]+ documents|^ttt: global step' "$work/r2.log" | sed 's/^/  /'
python3 - "$work/d1" "$work/d2" <<'EOF'
import csv, json, sys
import numpy as np
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:3])
rel = abs(a["val_loss"] - b["val_loss"]) / a["val_loss"]
print(f"  val_loss 1 rank {a['val_loss']!r}, 2 ranks {b['val_loss']!r}: relative {rel:.1e}")
print(f"BENCH ttt_gpu_ranks2_val_loss_rel {rel:.3e}")
la, lb = (np.fromfile(d + "/losses.f32", dtype=np.uint32) for d in sys.argv[1:3])
same = differ = 0
for r in csv.DictReader(open(sys.argv[2] + "/docs.tsv"), delimiter="\t"):
    if r["segment"] == "0":
        s, n = int(r["start"]), int(r["predictions"])
        if (la[s:s + n] == lb[s:s + n]).all():
            same += 1
        else:
            differ += 1
print(f"  documents scored before the first global step: {same} the same bits, {differ} not")
sys.exit(0 if differ == 0 and rel <= 1e-3 and a["tokens"] == b["tokens"] else 1)
EOF
