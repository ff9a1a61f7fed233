#!/usr/bin/env bash
# attention_vs_sdpa.sh — ctrain's tensor-core attention side by side with PyTorch's SDPA (flash and
# cuDNN backends) on the same GPU in one run, and the ratios (>1: ctrain faster). The figures in
# docs/performance.md come from:  bash tests/bench/attention_vs_sdpa.sh [build] [repeats] [B,H,KV,T,HD ...]
# Needs a CUDA device; PyTorch is optional (without it only ctrain's times are printed).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
repeats=${2:-20}
shift $(( $# > 2 ? 2 : $# ))
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(64,8,4,1024,64 16,12,4,2048,64 16,8,4,2048,128)
log=$(mktemp /tmp/ctrain-attn-bench.XXXXXX)
trap 'rm -f "$log"' EXIT
"$build/bench/bench_gpu_attention" "$repeats" "${shapes[@]}" | tee "$log"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    python3 "$root/tests/bench/attention_sdpa.py" "$repeats" "${shapes[@]}" | tee -a "$log"
else
    echo "(PyTorch with CUDA not found: no SDPA anchor)"
fi
echo "== ratios (anchor time / ctrain time; >= 1.0 means ctrain is at least as fast)"
awk '/^BENCH attn_/ { split($2, p, "_"); who = p[2]; key = $2; sub("attn_" who "_", "", key); t[who, key] = $3; keys[key] = 1 }
     END { for (k in keys) if (("ctrain", k) in t) {
               line = sprintf("  %-34s", k);
               for (w = 1; w <= 2; w++) { who = w == 1 ? "flash" : "cudnn";
                   if ((who, k) in t) line = line sprintf("  vs %s %5.2fx", who, t[who, k] / t["ctrain", k]) }
               print line } }' "$log" | sort
