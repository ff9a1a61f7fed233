#!/usr/bin/env bash
# tokenize.sh BUILD THREADS — `ctrain data tokenize` tokens/s on 1 thread and on THREADS, beside a
# Python sentencepiece loop over the same documents (the record's prepare_caseops_data.py method:
# [bos] + sp.encode(text) per document, one process), all in one run on this machine. The corpus:
# the repository's docs and the common licenses, repeated to about 12 MB of JSONL (1,000
# documents); the model: a 1,024-piece BPE trained here on part of it. ctrain's time is the whole
# command (loading the model, reading, writing HDF5 shards); Python's is its encoding loop alone.
# Prints BENCH lines.
set -euo pipefail
build=$(cd "$1" && pwd) threads=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/ctrain-tokenize-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - "$root" <<'PY'
import glob, json, sys, sentencepiece as spm
texts = []
for p in sorted(glob.glob(sys.argv[1] + '/docs/*.md')) + sorted(glob.glob('/usr/share/common-licenses/*')):
    try:
        texts.append(open(p, encoding='utf-8').read())
    except (UnicodeDecodeError, IsADirectoryError):
        pass
paragraphs = [q for t in texts for q in t.split('\n\n') if q.strip()]
with open('corpus.jsonl', 'w') as f:  # documents of 30 paragraphs, each starting elsewhere
    for i in range(1000):
        f.write(json.dumps({'text': '\n\n'.join(paragraphs[(i * 7 + k) % len(paragraphs)] for k in range(30))}) + '\n')
open('sample.txt', 'w').write('\n'.join(texts))
spm.SentencePieceTrainer.train(input='sample.txt', model_prefix='m', model_type='bpe', vocab_size=1024,
                               byte_fallback=True, minloglevel=2, character_coverage=1.0, max_sentence_length=400000)
PY
rate() { # THREADS -> tokens/s of the whole command
    local t0 t1
    rm -rf "out$1"
    t0=$(date +%s.%N)
    "$build/ctrain" data tokenize --tokenizer m.model --out "out$1" --val-docs 100 --threads "$1" corpus.jsonl \
        >"tok$1.log" 2>&1
    t1=$(date +%s.%N)
    local tokens
    tokens=$(sed -n 's/.*: 100 validation documents, \([0-9]*\) tokens.*; \([0-9]*\) training tokens.*/\1 \2/p' "tok$1.log")
    awk -v a="$tokens" -v t0="$t0" -v t1="$t1" 'BEGIN { split(a, x, " "); printf "%.0f %d\n", (x[1] + x[2]) / (t1 - t0), x[1] + x[2] }'
}
read -r one tokens < <(rate 1)
read -r all _ < <(rate "$threads")
py=$(/usr/bin/python3 - <<'PY'
import json, time, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='m.model')
docs = [json.loads(l)['text'] for l in open('corpus.jsonl')]
t0 = time.perf_counter()
n = 0
for d in docs:
    n += len([sp.bos_id()] + sp.encode(d))
print(f'{n / (time.perf_counter() - t0):.0f} {n}')
PY
)
read -r py_rate py_tokens <<<"$py"
[ "$py_tokens" = "$tokens" ] || { echo "ctrain wrote $tokens tokens, Python's loop made $py_tokens" >&2; exit 1; }
echo "  $tokens tokens, $(du -k corpus.jsonl | cut -f1) KiB of JSONL, vocabulary 1024"
echo "  ctrain data tokenize, 1 thread:          ${one} tokens/s (the whole command)"
echo "  ctrain data tokenize, $threads threads:          ${all} tokens/s"
echo "  Python sentencepiece loop, 1 process:    ${py_rate} tokens/s (encoding only)"
echo "BENCH tokenize_1thread_tokens_per_s $one"
echo "BENCH tokenize_${threads}threads_tokens_per_s $all"
echo "BENCH tokenize_python_loop_tokens_per_s $py_rate"
