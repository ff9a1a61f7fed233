#!/usr/bin/env bash
# record_step.sh BUILD DATA.h5 THREADS — the CPU step time of the 1.1248 record's shape (11 x 512,
# 3x MLP, T 2048, slurm/golf-record-8xh100.conf's model keys) beside the same shape without the
# record's model features, so their cost shows apart from the size; a reduced batch of 16,384
# tokens (8 slots of one 2,048-token sequence), the median of steps 2-3. Prints BENCH lines.
set -euo pipefail
build=$1 data=$2 threads=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ctrain-record-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
shape=(vocab_size=1024 num_layers=11 model_dim=512 num_heads=8 num_kv_heads=4 mlp_mult=3 train_seq_len=2048
       train_batch_tokens=16384 grad_accum_slots=8 iterations=3 val_loss_every=0 checkpoint_every=0 threads=$threads
       device=cpu train_files="$data")
features=(rope_dims=16 rope_train_seq_len=1024 ln_scale=1 xsa_last_n=4 smear_gate=1 bigram_vocab_size=2048
          bigram_dim=128 ortho_init=1)
"$build/ctrain" train "${shape[@]}" out_dir="$work/plain" >"$work/plain.log"
"$build/ctrain" train "${shape[@]}" "${features[@]}" out_dir="$work/record" >"$work/record.log"
read -r p_tps p_ms < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/plain/metrics.jsonl")
read -r r_tps r_ms < <(/usr/bin/python3 "$root/tests/bench/median_rate.py" "$work/record/metrics.jsonl")
echo "  11 x 512, 3x MLP, T 2048, without the record's features: ${p_ms} ms/step  ${p_tps} tokens/s"
echo "  the same with them (the record's model):                 ${r_ms} ms/step  ${r_tps} tokens/s"
echo "BENCH record_plain_reduced_step_ms $p_ms"
echo "BENCH record_reduced_step_ms $r_ms"
echo "BENCH record_reduced_tokens_per_s $r_tps"
