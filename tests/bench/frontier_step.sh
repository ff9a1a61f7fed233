#!/usr/bin/env bash
# frontier_step.sh BUILD THREADS — the CPU step time of the 1.0611 record's shape
# (slurm/golf-frontier-8xh100.conf's model and packing: 11 x 512, 4x LeakyReLU^2 MLP, skip and
# sparse attention gates, the BOS-masked SmearGate, packed rows cut at BOS, parallel lanes from
# block 8 on) before
# and after its depth recurrence switches on (blocks 3..5 twice more: 17 block runs instead of
# 11), beside the same 11 x 512 4x-MLP shape without the record's features; vocabulary 1024
# (random tokens in documents of about 800 behind BOS id 1, synthetic_tokens.py) and a reduced
# batch of 16,384 tokens (8 slots: packed rows of 2,048), the median of steps 2-3. Then GPTQ's
# calibration of the looped run's weights (`ckpt hessians`, 2 slots of 2,048 tokens) and its
# gptq-brotli artifact with those Hessians (`ckpt golf --no-eval`: GPTQ, LQER, brotli), timed.
# The 1.1248 record's shape is record_step.sh's. Prints BENCH lines.
set -euo pipefail
build=$1 threads=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ctrain-frontier-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/tests/bench/synthetic_tokens.py" "$work/docs.h5" 1024 3000000 800
batch=(vocab_size=1024 train_seq_len=2048 train_batch_tokens=16384 grad_accum_slots=8 iterations=3 val_files= golf_artifact=0
       val_loss_every=0 checkpoint_every=0 threads=$threads device=cpu train_files="$work/docs.h5")
"$build/ctrain" train num_layers=11 mlp_mult=4 "${batch[@]}" out_dir="$work/plain" >"$work/plain.log"
# enable_looping_at = 1 never loops within the run; 0 loops from the first step
"$build/ctrain" train --config "$root/slurm/golf-frontier-8xh100.conf" "${batch[@]}" enable_looping_at=1 \
    out_dir="$work/preloop" >"$work/preloop.log"
"$build/ctrain" train --config "$root/slurm/golf-frontier-8xh100.conf" "${batch[@]}" enable_looping_at=0 \
    out_dir="$work/looped" >"$work/looped.log"
read -r p_tps p_ms < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/plain/metrics.jsonl")
read -r e_tps e_ms < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/preloop/metrics.jsonl")
read -r l_tps l_ms < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/looped/metrics.jsonl")
echo "  11 x 512, 4x MLP, T 2048, without the record's features: ${p_ms} ms/step  ${p_tps} tokens/s"
echo "  the 1.0611 record's model, before looping (11 block runs):  ${e_ms} ms/step  ${e_tps} tokens/s"
echo "  the same, looping (17 block runs):                          ${l_ms} ms/step  ${l_tps} tokens/s"
echo "BENCH frontier_plain_reduced_step_ms $p_ms"
echo "BENCH frontier_preloop_reduced_step_ms $e_ms"
echo "BENCH frontier_reduced_step_ms $l_ms"
echo "BENCH frontier_reduced_tokens_per_s $l_tps"
# GPTQ's calibration and the artifact of the looped run's weights (its final checkpoint)
start=$(date +%s.%N)
"$build/ctrain" ckpt hessians "$work/looped" gptq_calibration_batches=2 --out "$work/h.h5" >"$work/hessians.log"
mid=$(date +%s.%N)
"$build/ctrain" ckpt golf "$work/looped" --format gptq-brotli --hessians "$work/h.h5" --out "$work/a.br" --no-eval \
    >"$work/golf.log"
end=$(date +%s.%N)
read -r h_s g_s < <(/usr/bin/python3 -c "import sys; a, b, c = map(float, sys.argv[1:]); print('%.1f %.1f' % (b - a, c - b))" \
    "$start" "$mid" "$end")
bytes=$(sed -n 's/^Serialized model quantized+brotli: \([0-9]*\) bytes$/\1/p' "$work/golf.log")
echo "  GPTQ calibration, 2 slots of 2,048 tokens (ckpt hessians, the whole command): ${h_s} s"
echo "  gptq-brotli artifact with those Hessians (ckpt golf --no-eval: GPTQ, LQER, brotli): ${g_s} s, ${bytes} bytes"
echo "BENCH frontier_hessians_2_slots_s $h_s"
echo "BENCH frontier_gptq_brotli_s $g_s"
