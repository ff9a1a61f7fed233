#!/usr/bin/env bash
# step_vs_train_gpt.sh — the whole training step, ctrain (device=cuda) side by side with
# parameter-golf's train_gpt.py on the same GPU, same data, in one run, for two shapes:
#   baseline  9 x 512, heads 8/4, T 1024      (train_gpt.py's defaults)
#   wide      12 x 768, heads 12/4, T 2048
# both with 524,288 tokens per step in 8 micro-batches on one GPU. train_gpt.py is not part of
# ctrain: fetch it from github.com/openai/parameter-golf and give its path. The data is
# synthetic: a SentencePiece BPE model (vocab 1024) trained on the spot on ctrain's own docs and
# sources, and shards of that text (tests/bench/golf_shards.py).
#   bash tests/bench/step_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS] [SHAPE...]
# Beside them, the project's own PyTorch model (tests/parity/ref_gpt.py via step_torch.py: bf16
# autocast, torch.compile, SDPA) on random tokens, as an anchor that needs no fetched file.
# ctrain runs twice per shape: the residual stream in fp32 and in bf16 (residual_dtype, issue
# 59; BENCH step_<shape>_ctrain_* and step_<shape>_ctrain_bf16s_*).
# Per shape: the mean step time over steps 6..STEPS from each program's own log, tokens/s, MFU
# (docs/model.md's FLOPs over the cuBLAS bf16 rate bench_gpu_step measures in the same run) and
# peak device memory (ctrain: its one allocation; train_gpt.py: max_memory_allocated).
# Needs a CUDA device, PyTorch with torch.compile, sentencepiece and ctrain built with CUDA.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
usage="usage: step_vs_train_gpt.sh BUILD TRAIN_GPT_PY [STEPS] [baseline|wide ...]"
build=$(cd "${1:?$usage}" && pwd)
train_gpt=$(readlink -f "${2:?$usage}")
steps=${3:-30}
shift $(( $# > 3 ? 3 : $# ))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(baseline wide)
work=$(mktemp -d /tmp/ctrain-step-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$root/tests/bench/golf_shards.py" "$work/data" $(( (steps + 8) * 524288 )) 1048577 \
    "$root"/docs/*.md "$root"/src/*/*.c
"$build/ctrain" data import-bin --out "$work/h5" "$work"/data/fineweb_*.bin >/dev/null
peak=$("$build/bench/bench_gpu_step" 1 small | sed -n 's/^bf16 matrix-product rate.*: \([0-9.]*\) TFLOP\/s$/\1/p')
echo "bf16 matrix-product rate of this GPU (cuBLAS 8192^3, random operands): $peak TFLOP/s"

for shape in "${shapes[@]}"; do
    case $shape in
    baseline) L=9 D=512 H=8 KV=4 T=1024 ;;
    wide) L=12 D=768 H=12 KV=4 T=2048 ;;
    *) echo "unknown shape '$shape' (baseline or wide)" >&2; exit 2 ;;
    esac
    keys=(num_layers=$L model_dim=$D num_heads=$H num_kv_heads=$KV train_seq_len=$T)
    flops=$("$build/ctrain" train --print-flops-per-token "${keys[@]}" train_files=x)
    for dtype in fp32 bf16; do
        "$build/ctrain" train train_files="$work/h5/fineweb_train_*.h5" val_files="$work/h5/fineweb_val_*.h5" \
            "${keys[@]}" iterations="$steps" val_loss_every=0 checkpoint_every=0 train_log_every=10 device=cuda \
            residual_dtype=$dtype out_dir="$work/ctrain-$shape-$dtype" >"$work/ctrain-$shape-$dtype.log" 2>&1 ||
            { tail -20 "$work/ctrain-$shape-$dtype.log"; exit 1; }
    done
    (cd "$work" && DATA_PATH="$work/data" TOKENIZER_PATH="$work/data/sp1024.model" VOCAB_SIZE=1024 \
        NUM_LAYERS=$L MODEL_DIM=$D NUM_HEADS=$H NUM_KV_HEADS=$KV TRAIN_SEQ_LEN=$T \
        ITERATIONS="$steps" WARMUP_STEPS=3 VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=1 MAX_WALLCLOCK_SECONDS=0 \
        RUN_ID="$shape" python3 "$train_gpt" >"$work/train_gpt-$shape.log" 2>&1) ||
        { tail -20 "$work/train_gpt-$shape.log"; exit 1; }
    python3 "$root/tests/bench/step_torch.py" "$shape" "$steps" >"$work/ref-$shape.log" 2>&1 ||
        echo "(the ref_gpt.py anchor failed: $(tail -1 "$work/ref-$shape.log"))"
    python3 - "$shape" "$flops" "$peak" "$work/ctrain-$shape" "$work/train_gpt-$shape.log" "$work/ref-$shape.log" <<'PY'
import json, re, sys
shape, flops, peak = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def ctrain_run(run):  # mean ms of steps 6.., the allocation
    ms = [json.loads(l)["step_ms"] for l in open(run + "/metrics.jsonl") if '"step_ms"' in l]
    mem = float(re.search(r"^cuda backend: .*?([0-9.]+) GiB allocated", open(run + ".log").read(), re.M).group(1))
    return sum(ms[5:]) / len(ms[5:]), mem
c_ms, c_mem = ctrain_run(sys.argv[4] + "-fp32")
b_ms, b_mem = ctrain_run(sys.argv[4] + "-bf16")
log = open(sys.argv[5]).read()
t = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step:(\d+)/\d+ train_loss:\S+ train_time:(\d+)ms", log)}
last = max(t)
p_ms = (t[last] - t[5]) / (last - 5)
p_mem = float(re.search(r"peak memory allocated: (\d+) MiB", log).group(1)) / 1024
tok = 524288
rows = [("ctrain", c_ms, c_mem), ("ctrain bf16s", b_ms, b_mem), ("train_gpt.py", p_ms, p_mem)]
ref = open(sys.argv[6]).read()
r_ms = re.search(r"^BENCH torch_ref_\w+_ms ([0-9.]+)", ref, re.M)
if r_ms:
    rows.append(("ref_gpt.py", float(r_ms.group(1)),
                 float(re.search(r"^BENCH torch_ref_\w+_peak_gib ([0-9.]+)", ref, re.M).group(1))))
print(f"== {shape}: mean of steps 6..{last}")
for name, v, mem in rows:
    tps = tok / (v / 1000)
    print(f"  {name:13s} {v:8.1f} ms/step  {tps / 1e6:5.2f} M tok/s  MFU {100 * tps * flops / (peak * 1e12):4.1f}%  peak {mem:5.1f} GiB")
print(f"  ratio (train_gpt.py / ctrain): {p_ms / c_ms:.2f}x fp32 stream, {p_ms / b_ms:.2f}x bf16 stream  (target >= 1.5)")
print(f"  bf16 stream / fp32 stream step time: {b_ms / c_ms:.3f}")
if r_ms:
    print(f"  ratio (ref_gpt.py / ctrain): {rows[3][1] / c_ms:.2f}x")
for name, v, mem in rows:
    key = {"ctrain": "ctrain", "ctrain bf16s": "ctrain_bf16s", "train_gpt.py": "train_gpt", "ref_gpt.py": "ref_gpt"}[name]
    print(f"BENCH step_{shape}_{key}_ms {v:.1f}")
    print(f"BENCH step_{shape}_{key}_mfu {100 * tok / (v / 1000) * flops / (peak * 1e12):.1f}")
    print(f"BENCH step_{shape}_{key}_peak_gib {mem:.2f}")
print(f"BENCH step_{shape}_ratio {p_ms / c_ms:.2f}")
print(f"BENCH step_{shape}_bf16s_ratio {p_ms / b_ms:.2f}")
print(f"BENCH step_peak_bf16_tflops {peak:.0f}")
PY
done
