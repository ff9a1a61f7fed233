#!/usr/bin/env bash
# record_vs_train_gpt.sh BUILD RECORD_TRAIN_GPT_PY [STEPS] [BATCH_TOKENS] — the 1.1248 record's
# configuration trained side by side by ctrain (device=cuda) and by the record's own train_gpt.py
# (openai/parameter-golf records/track_10min_16mb/2026-03-21_11L_XSA4_EMA_PartialRoPE_LateQAT_1.1248,
# fetched, never committed) on one GPU, from the same initial weights, on the same shards (issue 36):
# per-step training losses compared, and ms/step of each.
#
# - Data: synthetic parameter-golf shards (golf_shards.py: a SentencePiece BPE of vocabulary 1024
#   trained on ctrain's docs and sources), imported for ctrain with `ctrain data import-bin`;
#   both read the same token stream (src/data/loader.h is train_gpt.py's loader).
# - Configuration: slurm/golf-record-8xh100.conf with STEPS steps (default 200) of BATCH_TOKENS
#   (default 131,072: 8 micro-batches of 8 x 2048; the record's 786,432 would take 6x longer),
#   warmdown over the last third (late QAT off, as the record's run had it: the file's comment), no
#   validation, no wall-clock cap. train_gpt.py gets every key of ctrain's resolved configuration
#   that it reads from its environment (the same names, upper-cased).
# - Initial weights: ctrain's (iterations=0, `ckpt export --live`), loaded into train_gpt.py's
#   model by tests/bench/record_train_gpt_driver.py, which also stands in for FlashAttention 3
#   (absent here) with PyTorch's SDPA; its --check-names runs first (names and shapes).
# Bounds (first statements, to be tightened once measured): the first step's loss within 5e-3
# relative (same weights, same tokens: bf16 products; train_gpt.py keeps tok_emb in bf16, ctrain
# in fp32), every step within 5e-2 (the runs drift apart through bf16 rounding and, at the end,
# QAT's rounding). Prints BENCH lines; exits 1 when a bound is missed or a run fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: record_vs_train_gpt.sh BUILD RECORD_TRAIN_GPT_PY [STEPS] [BATCH_TOKENS]"
build=$(cd "${1:?$usage}" && pwd)
train_gpt=$(readlink -f "${2:?$usage}")
steps=${3:-200}
batch=${4:-131072}
ctrain=$build/ctrain
work=$(mktemp -d /tmp/ctrain-record-side.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$root/tests/bench/golf_shards.py" "$work/data" $(((steps + 30) * (batch + 8))) 262145 \
    "$root"/docs/*.md "$root"/src/*/*.c >"$work/shards.log" 2>&1 || { tail -5 "$work/shards.log"; exit 1; }
"$ctrain" data import-bin --out "$work/h5" "$work"/data/fineweb_*.bin >/dev/null
keys=(--config "$root/slurm/golf-record-8xh100.conf" train_files="$work/h5/fineweb_train_*.h5"
      val_files="$work/h5/fineweb_val_*.h5" iterations="$steps" train_batch_tokens="$batch"
      warmdown_iters=$((steps / 3)) val_loss_every=0 max_wallclock_seconds=0 golf_artifact=0 eval_stride=0
      train_log_every=1 checkpoint_every=0 device=cuda)

# ctrain's initial weights, for both
"$ctrain" train "${keys[@]}" iterations=0 out_dir="$work/init" >"$work/init.log" 2>&1 ||
    { tail -20 "$work/init.log"; exit 1; }
"$ctrain" ckpt export "$work/init/checkpoints/step_00000000.h5" --live --out "$work/init.safetensors" >/dev/null

# train_gpt.py's environment: every resolved key it reads (its os.environ.get names)
names=$(grep -o 'os.environ.get("[A-Z0-9_]*"' "$train_gpt" | cut -d'"' -f2 | sort -u)
env_args=()
while IFS= read -r line; do
    k=${line%% = *} v=${line#* = }
    grep -qx "${k^^}" <<<"$names" && env_args+=("${k^^}=$v")
done < <("$ctrain" train "${keys[@]}" --print-config | grep -E '^[a-z0-9_]+ = ')
env_args+=(DATA_PATH="$work/data" TOKENIZER_PATH="$work/data/sp1024.model" RUN_ID=side)
echo "train_gpt.py's environment: ${env_args[*]}"
env "${env_args[@]}" python3 "$root/tests/bench/record_train_gpt_driver.py" "$train_gpt" "$work/init.safetensors" \
    --check-names

echo "== ctrain, $steps steps of $batch tokens"
"$ctrain" train "${keys[@]}" out_dir="$work/ctrain" >"$work/ctrain.log" 2>&1 || { tail -20 "$work/ctrain.log"; exit 1; }
echo "== train_gpt.py (the record's), the same"
(cd "$work" && env "${env_args[@]}" python3 "$root/tests/bench/record_train_gpt_driver.py" "$train_gpt" \
    "$work/init.safetensors" >"$work/train_gpt.log" 2>&1) || { tail -30 "$work/train_gpt.log"; exit 1; }
grep -E '^record_train_gpt_driver:' "$work/train_gpt.log" | sed 's/^/  /'

python3 - "$work/ctrain/metrics.jsonl" "$work/train_gpt.log" "$steps" <<'PY'
import json, re, sys
steps = int(sys.argv[3])
c = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "train_loss" in r:
        c[r["step"]] = (r["train_loss"], r["step_ms"])
t = {}
for m in re.finditer(r"^step:(\d+)/\d+ train_loss:(\S+) train_time:(\d+)ms", open(sys.argv[2]).read(), re.M):
    t[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
common = sorted(set(c) & set(t))
if len(common) < steps:
    sys.exit(f"only {len(common)} of {steps} steps logged by both (ctrain {len(c)}, train_gpt.py {len(t)})")
rel = {s: abs(c[s][0] - t[s][0]) / abs(t[s][0]) for s in common}
print(f"{'step':>6} {'ctrain':>9} {'train_gpt':>9} {'rel':>9}")
for s in common:
    if s <= 5 or s % 20 == 0 or s == common[-1]:
        print(f"{s:6d} {c[s][0]:9.4f} {t[s][0]:9.4f} {rel[s]:9.2e}")
first, worst = rel[common[0]], max(rel.values())
lo = 6  # steps 6.. (the first ones compile and warm up)
c_ms = sum(c[s][1] for s in common if s >= lo) / len([s for s in common if s >= lo])
t_ms = (t[common[-1]][1] - t[lo - 1][1]) / (common[-1] - lo + 1)
print(f"ms/step over steps {lo}-{common[-1]}: ctrain {c_ms:.1f}, train_gpt.py {t_ms:.1f} "
      f"(FlashAttention 3 replaced by SDPA); ratio train_gpt.py / ctrain {t_ms / c_ms:.2f}x")
print(f"BENCH record_side_first_loss_rel {first:.3e}")
print(f"BENCH record_side_max_loss_rel {worst:.3e}")
print(f"BENCH record_side_ctrain_ms {c_ms:.1f}")
print(f"BENCH record_side_train_gpt_ms {t_ms:.1f}")
print(f"BENCH record_side_ratio {t_ms / c_ms:.2f}")
bad = []
if first > 5e-3: bad.append(f"first step {first:.2e} > 5e-3")
if worst > 5e-2: bad.append(f"a step {worst:.2e} > 5e-2")
if bad: sys.exit("losses apart: " + "; ".join(bad))
print("losses: first step and every step within their bounds")
PY
