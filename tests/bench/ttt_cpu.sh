#!/usr/bin/env bash
# ttt_cpu.sh BUILD THREADS — the test-time-training evaluation's speed on the CPU (issue 57): the
# validation tokens/s of `ctrain eval`'s plain, docs (the TTT windows, base model alone) and ttt
# (per-document LoRA, 3 global steps) modes, in one run on this machine, on a small model of the
# 1.0611 record's make (6 x 128, 4/2 heads, depth recurrence, lanes, the BOS SmearGate, XSA, the
# sparse gate, skip gates) at its initial weights (the speed does not depend on what was learned),
# with the record's TTT settings scaled down: rank 16, chunks of 48 in windows of 256, 16 documents
# a batch, 3 phases over 48 prefix documents, rows of 256 in chunks of 4,096 tokens. The data:
# 64k random tokens of vocabulary 1,024 in documents of geometric lengths (mean 300) starting at BOS.
# Prints BENCH lines (tokens/s; ttt's phases' SGD included).
set -euo pipefail
build=$(cd "$1" && pwd) threads=$2
work=$(mktemp -d /tmp/ctrain-ttt-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - <<'PY'
import h5py, numpy as np
rng = np.random.default_rng(7)
def split(n):
    t = rng.integers(2, 1024, size=n)
    at = np.cumsum(rng.geometric(1 / 300, size=n // 100))
    t[0] = 1
    t[at[at < n]] = 1
    return t
for name, n in (("train.h5", 200000), ("val.h5", 65536 + 1)):
    with h5py.File(name, "w") as h:
        d = h.create_dataset("tokens", data=split(n).astype(np.uint16), chunks=True)
        d.attrs["vocab_size"] = np.int64(1024)
        d.attrs["bos_id"] = np.int64(1)
        d.attrs["tokenizer"] = "synthetic"
PY
model=(train_files=train.h5 val_files=val.h5 vocab_size=1024 num_layers=6 model_dim=128 num_heads=4 num_kv_heads=2
       train_seq_len=256 train_batch_tokens=4096 grad_accum_slots=1 iterations=0 val_loss_every=0 threads="$threads"
       smear_gate_enabled=1 gate_window=12 num_loops=1 loop_start=2 loop_end=3 enable_looping_at=0
       parallel_start_layer=4 xsa_last_n=2 skip_gates_enabled=1 sparse_attn_gate_enabled=1 ln_scale=1 out_dir=m)
"$build/ctrain" train "${model[@]}" >train.log 2>&1 || { tail -5 train.log; exit 1; }
ttt=(ttt_lora_rank=16 ttt_chunk_size=48 ttt_eval_seq_len=256 ttt_batch_size=16 ttt_weight_decay=0.5 ttt_beta2=0.99
     phased_ttt_prefix_docs=48 phased_ttt_num_phases=3 global_ttt_chunk_tokens=4096 global_ttt_batch_seqs=16)
"$build/ctrain" eval m --mode plain,docs,ttt "${ttt[@]}" threads="$threads" >eval.log 2>&1 || { tail -5 eval.log; exit 1; }
grep -E '^ttt: [0-9]+ documents|^ttt: global step' eval.log | sed 's/^/  /'
for mode in plain docs ttt; do
    read -r tokens ms < <(sed -n "s/^$mode val_loss:[0-9.]* val_bpb:[0-9.na]* tokens:\([0-9]*\) bytes:[0-9]* eval_time:\([0-9]*\)ms$/\1 \2/p" eval.log)
    awk -v m="$mode" -v t="$tokens" -v ms="$ms" 'BEGIN { printf "  %-5s %8d tokens in %7.1f s: %9.0f tokens/s\nBENCH ttt_cpu_%s_tokens_per_s %.0f\n", m, t, ms / 1000, t / (ms / 1000), m, t / (ms / 1000) }'
done
