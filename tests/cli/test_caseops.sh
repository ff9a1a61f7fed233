#!/usr/bin/env bash
# test_caseops.sh — the 1.0611 record's CaseOps data end to end, made here as its
# prepare_caseops_data.py describes it: text with its capitals written as operator characters
# (U+E001..U+E004, reserved pieces of a SentencePiece model trained here by Python's
# sentencepiece), uint16 .bin shards, and for validation a byte sidecar
# (fineweb_val_bytes_000000.bin: each token's bytes of the ORIGINAL text, operators and BOS 0).
# `ctrain data import-bin` stores the sidecar as the val file's /bytes_per_token (h5py reads it
# back equal), `data info` sums it, validation's val_bpb counts it, plain and sliding-window
# (recomputed here from the loss: not what the tokenizer tables would give), and `ctrain sample` case-encodes a prompt and
# prints the text with its capitals back. A sidecar of the wrong length, or one without its
# token shard, fails before anything is written.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

if ! "$CTRAIN" --version | grep -q '^sentencepiece: yes'; then
    skip_rest "this ctrain was built without SentencePiece (scripts/install-deps.sh installs it)"
fi
if ! "$PY" -c 'import sentencepiece, h5py, numpy' 2>/dev/null; then
    skip_rest_python "sentencepiece/h5py/numpy not importable by $PY (scripts/install-deps.sh --test)"
fi

# ---- the data: our own CaseOps encoder (tests/cli/caseops_ref.py, from the record's description), a model, shards ----
"$PY" - >make_data.out 2>&1 <<'EOF' || { fail make_data "$(tail -c 800 make_data.out)"; finish; }
import os, sys, numpy as np, sentencepiece as spm
sys.path.insert(0, os.environ['CT_ROOT'] + '/tests/cli')
from caseops_ref import TITLE, ALLCAPS, CAPNEXT, ESC, encode
def docs(path):
    text = open(path, encoding='utf-8').read()
    return [d.strip() + '\n' for d in text.split('\n\n') if d.strip()]
train_docs, val_docs = docs('/usr/share/common-licenses/GPL-3'), docs('/usr/share/common-licenses/Apache-2.0')
open('corpus.txt', 'w', encoding='utf-8').write(''.join(encode(d) for d in train_docs))
spm.SentencePieceTrainer.train(input='corpus.txt', model_prefix='caseops', model_type='bpe', vocab_size=320,
                               user_defined_symbols=[TITLE, ALLCAPS, CAPNEXT, ESC], byte_fallback=True,
                               add_dummy_prefix=False, normalization_rule_name='identity', unk_id=0, bos_id=1,
                               eos_id=2, pad_id=-1, minloglevel=2, character_coverage=1.0)
sp = spm.SentencePieceProcessor(model_file='caseops.model')
def shard(path, values):
    header = np.zeros(256, dtype='<i4')
    header[0], header[1], header[2] = 20240520, 1, len(values)
    open(path, 'wb').write(header.tobytes() + np.asarray(values, dtype='<u2').tobytes())
def tokens_and_bytes(documents):
    ids, counts, original = [], [], 0
    for d in documents:
        ids.append(1); counts.append(0)  # BOS: no bytes
        for piece in sp.encode_as_immutable_proto(encode(d)).pieces:
            ids.append(piece.id)
            surface = piece.surface
            counts.append(len(surface.encode('utf-8')) - 3 * sum(surface.count(c) for c in (TITLE, ALLCAPS, CAPNEXT, ESC)))
        original += len(d.encode('utf-8'))
    assert sum(counts) == original, ('the byte counts miss the original text', sum(counts), original)
    return ids, counts
train_ids, _ = tokens_and_bytes(train_docs)
val_ids, val_bytes = tokens_and_bytes(val_docs)
shard('fineweb_train_000000.bin', train_ids)
shard('fineweb_val_000000.bin', val_ids)
shard('fineweb_val_bytes_000000.bin', val_bytes)
print(len(train_ids), len(val_ids), sum(val_bytes))
EOF
pass make_data

# ---- import: the sidecar goes into the val file ----
expect_ok import_with_sidecar "$CTRAIN" data import-bin --out data --tokenizer caseops.model --bos-id 1 \
    fineweb_train_000000.bin fineweb_val_000000.bin fineweb_val_bytes_000000.bin
expect_grep import_names_sidecar 'fineweb_val_000000.bin \+ byte sidecar fineweb_val_bytes_000000.bin -> data/fineweb_val_000000.h5: [0-9]+ tokens, /bytes_per_token' out
[ "$(ls data)" = "$(printf 'fineweb_train_000000.h5\nfineweb_val_000000.h5')" ] && pass import_no_sidecar_file ||
    fail import_no_sidecar_file "data/ holds: $(ls data | tr '\n' ' ')"
check sidecar_round_trip "
import h5py, numpy as np
with h5py.File('data/fineweb_val_000000.h5', 'r') as f:
    got = f['bytes_per_token']
    assert got.dtype == np.uint16, got.dtype
    want = np.fromfile('fineweb_val_bytes_000000.bin', dtype='<u2', offset=1024)
    assert np.array_equal(got[:], want), 'counts differ'
    assert np.array_equal(f['tokens'][:], np.fromfile('fineweb_val_000000.bin', dtype='<u2', offset=1024))
with h5py.File('data/fineweb_train_000000.h5', 'r') as f:
    assert 'bytes_per_token' not in f, 'the train file got byte counts'
"
expect_ok info_sidecar "$CTRAIN" data info data/fineweb_val_000000.h5
want_bytes=$("$PY" -c "import numpy as np; print(int(np.fromfile('fineweb_val_bytes_000000.bin', dtype='<u2', offset=1024).astype(np.int64).sum()))")
expect_grep info_sums_sidecar "^bytes_per_token: in every file, $want_bytes bytes of original text" out

# ---- validation counts the sidecar's bytes ----
expect_ok train_caseops "$CTRAIN" train train_files='data/fineweb_train_*.h5' val_files='data/fineweb_val_*.h5' \
    vocab_size=320 num_layers=2 model_dim=64 num_heads=2 num_kv_heads=1 train_seq_len=64 train_batch_tokens=1024 \
    grad_accum_slots=2 iterations=3 val_loss_every=0 device=cpu threads=2 out_dir=run
expect_grep train_says_sidecar 'val data: .*val_bpb from its bytes_per_token' out
# bpb_check NAME RUN STRIDE: the run's last val_bpb is its val_loss over the sidecar's bytes of
# the scored targets: positions 0 .. (n-1)//T*T of the split once (STRIDE 0), or each sliding
# window's scored positions (train_gpt.py's rule, docs/model.md: the first window all of its
# positions, each later one its last STRIDE, a short one at the end all of its own)
bpb_check() {
    check "$1" "
import json, math, h5py, numpy as np
rec = [json.loads(l) for l in open('$2/metrics.jsonl') if '\"val_loss\"' in l][-1]
with h5py.File('data/fineweb_val_000000.h5', 'r') as f:
    tokens, counts = f['tokens'][:].astype(np.int64), f['bytes_per_token'][:].astype(np.int64)
    base, lead, boundary = (f['tokenizer/' + k][:].astype(np.int64) for k in ('base_bytes', 'has_leading_space', 'is_boundary_token'))
T, stride = 64, $3
total = (len(tokens) - 1) // T * T
if stride == 0:
    positions = np.arange(total)
else:
    parts = []
    for w, start in enumerate(range(0, total, stride)):
        length = min(T, total - start)
        first = 0 if w == 0 else (length - stride if length > stride else 0)
        parts.append(np.arange(start + first, start + length))
    positions = np.concatenate(parts)
sidecar = counts[positions + 1].sum()
tgt, prev = tokens[positions + 1], tokens[positions]
tables = (base[tgt] + (lead[tgt] & (1 - boundary[prev]))).sum()
want = rec['val_loss'] / math.log(2) * len(positions) / sidecar
assert abs(rec['val_bpb'] - want) <= 1e-12 * want, (rec['val_bpb'], want)
other = rec['val_loss'] / math.log(2) * len(positions) / tables
assert abs(other - want) > 1e-3 * want, ('the tables would give the same bpb: the test proves nothing', other, want)
"
}
bpb_check val_bpb_from_sidecar run 0
expect_ok train_caseops_sliding "$CTRAIN" train train_files='data/fineweb_train_*.h5' val_files='data/fineweb_val_*.h5' \
    vocab_size=320 num_layers=2 model_dim=64 num_heads=2 num_kv_heads=1 train_seq_len=64 train_batch_tokens=1024 \
    grad_accum_slots=2 iterations=3 val_loss_every=0 eval_stride=16 device=cpu threads=2 out_dir=run_sliding
bpb_check val_bpb_sliding_from_sidecar run_sliding 16

# ---- sample: a plain prompt in, the text with its capitals out ----
expect_ok sample_caseops "$CTRAIN" sample run --prompt 'The NASA Foundation' --tokenizer caseops.model --tokens 4 \
    --device cpu
expect_grep sample_restores_capitals '^The NASA Foundation' out
expect_grep sample_notes_caseops 'CaseOps tokenizer' err
expect_ok sample_caseops_ids "$CTRAIN" sample run --prompt 'The NASA Foundation' --tokenizer caseops.model --tokens 4 \
    --device cpu --ids
check sample_prompt_case_encoded "
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='caseops.model')
want = sp.encode('\ue001the \ue002nasa \ue001foundation')
got = [int(x) for x in open('$WORK/out').read().split()][:len(want)]
assert got == want, (got, want)
"

# ---- bad sidecars fail before anything is written ----
"$PY" -c "
import numpy as np
v = np.fromfile('fineweb_val_bytes_000000.bin', dtype='<u2', offset=1024)[:-1]
h = np.zeros(256, dtype='<i4'); h[0], h[1], h[2] = 20240520, 1, len(v)
open('fineweb_val_bytes_000001.bin', 'wb').write(h.tobytes() + v.tobytes())
" && cp fineweb_val_000000.bin fineweb_val_000001.bin
expect_fail sidecar_length_differs 1 "byte sidecar 'fineweb_val_bytes_000001.bin' holds [0-9]+ counts but its token shard 'fineweb_val_000001.bin' holds [0-9]+ tokens" \
    "$CTRAIN" data import-bin --out bad --vocab-size 320 fineweb_train_000000.bin fineweb_val_000001.bin fineweb_val_bytes_000001.bin
[ ! -e bad ] || [ -z "$(ls -A bad)" ] && pass sidecar_length_nothing_written || fail sidecar_length_nothing_written "$(ls -la bad)"
expect_fail sidecar_alone 2 "'fineweb_val_bytes_000000.bin' is a CaseOps byte sidecar .* its token shard 'fineweb_val_000000.bin' is not among the shards given" \
    "$CTRAIN" data import-bin --out bad2 --vocab-size 320 fineweb_train_000000.bin fineweb_val_bytes_000000.bin
[ ! -e bad2 ] && pass sidecar_alone_nothing_written || fail sidecar_alone_nothing_written "$(ls -la bad2)"

finish
