#!/usr/bin/env bash
# test_tokenize.sh — `ctrain data tokenize` (and `data detokenize`) against Python's
# sentencepiece on a corpus made from the repository's docs and the common licenses, with
# documents of unicode, empty lines and one very long line: the ids of every document (BOS, then
# sp.encode) in JSONL, whole-file text and per-line standard input, split into validation (the
# first --val-docs) and training, cut into shards of exactly --shard-tokens (a document longer
# than a shard spans two); the same bytes for 1, 2 and 8 threads; .bin shards holding the same
# tokens; --part 1/3 + 2/3 + 3/3 (and slurm/tokenize.sbatch as an array) holding a one-process
# run's tokens; `data info` and a short training run on the output; bad input (not JSON, no
# "text", invalid UTF-8, a NUL inside a JSONL "text", an existing output) failing with the file and
# line and leaving no shard behind, nor does a stop (exit 75). CaseOps: the transform (the tests' own encoder,
# tests/cli/caseops_ref.py, written from the record's description) and each validation token's
# original byte count (summing to each document's UTF-8 length), the .bin byte sidecar, training
# counting it, and detokenize giving back every document. --byte-counts without a transform:
# the tables' bytes token for token, so the same val_bpb.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

if ! "$CTRAIN" --version | grep -q '^sentencepiece: yes'; then
    skip_rest "this ctrain was built without SentencePiece (scripts/install-deps.sh installs it)"
fi
if ! "$CTRAIN" --version | grep -q '^cjson: [0-9]'; then
    skip_rest "this ctrain was built without cJSON (scripts/install-deps.sh installs libcjson-dev)"
fi
if ! "$PY" -c 'import sentencepiece, h5py, numpy' 2>/dev/null; then
    skip_rest_python "sentencepiece/h5py/numpy not importable by $PY (scripts/install-deps.sh --test)"
fi

# ---- the corpus and three models ----
cat >common.py <<'EOF'
import glob, json, os, sys, h5py, numpy as np, sentencepiece as spm
sys.path.insert(0, os.environ['CT_ROOT'] + '/tests/cli')
from caseops_ref import TITLE, ALLCAPS, CAPNEXT, ESC, encode as caseops
def jsonl_docs(path):
    return [json.loads(l)['text'] for l in open(path, encoding='utf-8') if l.strip()]
def expected(model, texts, nval, with_caseops=False):
    """validation ids, their original byte counts (CaseOps) and training ids, as the record makes them"""
    sp = spm.SentencePieceProcessor(model_file=model)
    val, counts, train = [], [], []
    for i, t in enumerate(texts):
        enc = caseops(t) if with_caseops else t
        ids = [sp.bos_id()] + sp.encode(enc)
        (val if i < nval else train).extend(ids)
        if with_caseops and i < nval:
            c, escaped = [0], False  # BOS: no text
            for p in sp.encode_as_immutable_proto(enc).pieces:
                n = 0  # the bytes of the piece's text, less the operators (an escaped one is text)
                for ch in p.surface:
                    if escaped or ch not in (TITLE, ALLCAPS, CAPNEXT, ESC):
                        n += len(ch.encode('utf-8'))
                    escaped = not escaped and ch == ESC
                c.append(n)
            assert sum(c) == len(t.encode('utf-8')), ('byte counts miss the text of document', i, sum(c), len(t.encode()))
            counts.extend(c)
    return np.array(val), np.array(counts), np.array(train)
def stream(pattern, name='tokens'):
    files = sorted(glob.glob(pattern))
    assert files, 'no files match ' + pattern
    if pattern.endswith('.bin'):
        return np.concatenate([np.fromfile(f, dtype='<u2', offset=1024) for f in files]).astype(np.int64)
    return np.concatenate([h5py.File(f, 'r')[name][:] for f in files]).astype(np.int64)
def same(what, got, want):
    assert len(got) == len(want), (what, 'length', len(got), len(want))
    bad = np.nonzero(got != want)[0]
    assert len(bad) == 0, (what, 'first difference at', int(bad[0]), int(got[bad[0]]), int(want[bad[0]]))
EOF
"$PY" - "$CT_ROOT" >make_data.out 2>&1 <<'EOF' || { fail make_data "$(tail -c 800 make_data.out)"; finish; }
import sys, glob, json, os
sys.path.insert(0, '.')
from common import *
root = sys.argv[1]
docs = []
for p in sorted(glob.glob(root + '/docs/*.md')) + sorted(glob.glob('/usr/share/common-licenses/*')):
    try:
        t = open(p, encoding='utf-8').read()
    except (UnicodeDecodeError, IsADirectoryError):
        continue
    if t.strip(): docs.append(t)
docs = docs[:30]
words = open('/usr/share/common-licenses/GPL-3', encoding='utf-8').read().split()
extra = ['Ünïcödé: ΑΒΓ αβγ, кириллица, 中文字符, 日本語のテキスト, emoji 😀🚀, combining e\u0301, RTL עברית.\n',
         '\n\nempty lines before,\n\n\n\nbetween\n\nand after\n\n\n',
         ' '.join(words[i % len(words)] for i in range(60000)),  # one very long line: longer than a shard
         'MixedCase iPhone McDONALD NASA\'s B2B x3Y \ue001literal operator\ue004 and \u2581 space mark\n']
docs = [extra[0], extra[3], extra[1]] + docs[:6] + [extra[2]] + docs[6:]  # the first four: validation
with open('corpus.jsonl', 'w', encoding='utf-8') as f:
    for i, d in enumerate(docs):  # \u escapes (surrogate pairs too) and raw UTF-8, alternately
        f.write(json.dumps({'text': d, 'id': len(d)}, ensure_ascii=i % 2 == 0) + '\n')
        if len(d) % 3 == 0: f.write('\n')  # blank lines are skipped
os.makedirs('texts', exist_ok=True)
for i, d in enumerate(extra + docs[4:7]):
    open('texts/t%02d.txt' % i, 'w', encoding='utf-8').write(d)
open('texts/t99_empty.txt', 'w').close()  # an empty file: no document
with open('lines.txt', 'w', encoding='utf-8', newline='') as f:
    f.write('first line\nsecond, with CRLF\r\n\n   \nafter blank lines\n' + extra[0] + 'no final newline')
train = ''.join(docs)
open('train.txt', 'w', encoding='utf-8').write(train)
open('train_caseops.txt', 'w', encoding='utf-8').write(caseops(train))
common = dict(model_type='bpe', vocab_size=600, byte_fallback=True, minloglevel=2, character_coverage=1.0,
              max_sentence_length=400000)
spm.SentencePieceTrainer.train(input='train.txt', model_prefix='m', **common)  # nmt_nfkc, dummy prefix
spm.SentencePieceTrainer.train(input='train_caseops.txt', model_prefix='cm', user_defined_symbols=[TITLE, ALLCAPS, CAPNEXT, ESC],
                               add_dummy_prefix=False, remove_extra_whitespaces=False, normalization_rule_name='identity',
                               unk_id=0, bos_id=1, eos_id=2, pad_id=-1, **common)
spm.SentencePieceTrainer.train(input='train.txt', model_prefix='nobos', bos_id=-1, **common)
spm.SentencePieceTrainer.train(input='train.txt', model_prefix='idm', add_dummy_prefix=False, remove_extra_whitespaces=False,
                               normalization_rule_name='identity', **common)  # text kept as it is
# two ASCII documents (no byte pieces) for validation, then the rest; without leading white space,
# which the tables' rule does not count after BOS (it expects a dummy prefix) but the text has
with open('ascii.jsonl', 'w') as f:
    for d in [open('/usr/share/common-licenses/' + n).read().lstrip() for n in ('GPL-3', 'Apache-2.0')] + docs:
        f.write(json.dumps({'text': d}) + '\n')
print(len(docs), 'documents')
EOF
pass make_data

# ---- JSONL: ids as Python's sentencepiece makes them ----
expect_ok tokenize_jsonl "$CTRAIN" data tokenize --tokenizer m.model --out shards --val-docs 4 --shard-tokens 20000 \
    --threads 2 corpus.jsonl
expect_grep tokenize_summary '^tokenized [0-9]+ documents in .*: 4 validation documents' out
check ids_match_python "
from common import *
texts = jsonl_docs('corpus.jsonl')
val, _, train = expected('m.model', texts, 4)
same('val', stream('shards/val_*.h5'), val)
same('train', stream('shards/train_*.h5'), train)
sizes = [len(h5py.File(f, 'r')['tokens']) for f in sorted(glob.glob('shards/train_*.h5'))]
assert all(s == 20000 for s in sizes[:-1]) and 0 < sizes[-1] <= 20000, sizes
sp = spm.SentencePieceProcessor(model_file='m.model')
assert max(len(sp.encode(t)) for t in texts) > 20000, 'no document is longer than a shard: the split is untested'
"
check shard_attributes "
from common import *
sp = spm.SentencePieceProcessor(model_file='m.model')
for f in sorted(glob.glob('shards/*.h5')):
    h = h5py.File(f, 'r')
    t = h['tokens']
    assert t.attrs['bos_id'] == sp.bos_id() and t.attrs['vocab_size'] == 600, (f, dict(t.attrs))
    assert t[0] == sp.bos_id() or 'train_000000' not in f, f
    assert 'data tokenize --tokenizer m.model' in h.attrs['provenance'], h.attrs['provenance']
    assert len(h['tokenizer/pieces']) == 600 and 'bytes_per_token' not in h, f
"
expect_ok data_info "$CTRAIN" data info 'shards/*.h5'
expect_grep data_info_crc 'tokens_crc32: matches in every file' out
expect_ok train_on_output "$CTRAIN" train train_files='shards/train_*.h5' val_files='shards/val_*.h5' vocab_size=600 \
    num_layers=2 model_dim=64 num_heads=2 num_kv_heads=1 train_seq_len=64 train_batch_tokens=1024 grad_accum_slots=2 \
    iterations=3 val_loss_every=0 device=cpu threads=2 out_dir=run
expect_grep train_reports_val_bpb '"val_bpb"' run/metrics.jsonl

# ---- the same bytes for 1, 2 and 8 threads ----
"$CTRAIN" data tokenize --tokenizer m.model --out t1 --val-docs 4 --shard-tokens 20000 --threads 1 corpus.jsonl >/dev/null 2>&1
"$CTRAIN" data tokenize --tokenizer m.model --out t8 --val-docs 4 --shard-tokens 20000 --threads 8 corpus.jsonl >/dev/null 2>&1
expect_same threads_1_equals_2 "files and checksums" "$(cd t1 2>/dev/null && md5sum *)" "$(cd shards && md5sum *)"
expect_same threads_8_equals_2 "files and checksums" "$(cd t8 2>/dev/null && md5sum *)" "$(cd shards && md5sum *)"

# ---- text files, standard input, .bin shards ----
expect_ok tokenize_text_files "$CTRAIN" data tokenize --tokenizer m.model --out txt --val-docs 1 texts/*.txt
check text_ids_match_python "
from common import *
texts = [t for t in (open(p, encoding='utf-8').read() for p in sorted(glob.glob('texts/*.txt'))) if t]
val, _, train = expected('m.model', texts, 1)
same('val', stream('txt/val_*.h5'), val)
same('train', stream('txt/train_*.h5'), train)
"
expect_ok tokenize_stdin_per_line bash -c "cat lines.txt | '$CTRAIN' data tokenize --tokenizer m.model --out lines --doc-per-line -"
check per_line_ids_match_python "
from common import *
raw = open('lines.txt', encoding='utf-8', newline='').read().split('\n')
texts = [l[:-1] if l.endswith('\r') else l for l in raw if l.strip(' \t\r\n')]
assert len(texts) == 5, texts
_, _, train = expected('m.model', texts, 0)
same('train', stream('lines/train_*.h5'), train)
"
expect_ok tokenize_bin "$CTRAIN" data tokenize --tokenizer m.model --out bin --val-docs 4 --shard-tokens 20000 \
    --format bin corpus.jsonl
check bin_equals_hdf5 "
from common import *
same('val', stream('bin/val_*.bin'), stream('shards/val_*.h5'))
same('train', stream('bin/train_*.bin'), stream('shards/train_*.h5'))
assert sorted(os.listdir('bin')) == sorted(f[:-3] + '.bin' for f in os.listdir('shards')), os.listdir('bin')
"

# ---- a Slurm array's parts ----
for i in 1 2 3; do
    "$CTRAIN" data tokenize --tokenizer m.model --out parts --val-docs 4 --shard-tokens 20000 --part $i/3 \
        corpus.jsonl >>parts.log 2>&1 || echo "part $i failed" >>parts.log
done
check parts_equal_one_run "
from common import *
assert 'failed' not in open('parts.log').read(), open('parts.log').read()[-400:]
names = sorted(os.listdir('parts'))
for i in (1, 2, 3):
    assert any('_p%03dof003_' % i in n for n in names), ('part', i, 'wrote nothing', names)
same('val', stream('parts/val_*.h5'), stream('shards/val_*.h5'))
same('train', stream('parts/train_*.h5'), stream('shards/train_*.h5'))
"

# validation documents in two parts: the counts of the documents before a part's range decide
"$CTRAIN" data tokenize --tokenizer m.model --out one12 --val-docs 12 --shard-tokens 20000 corpus.jsonl >/dev/null 2>&1
for i in 1 2 3; do
    "$CTRAIN" data tokenize --tokenizer m.model --out parts12 --val-docs 12 --shard-tokens 20000 --part $i/3 \
        corpus.jsonl >>parts12.log 2>&1 || echo "part $i failed" >>parts12.log
done
check parts_share_validation "
from common import *
assert 'failed' not in open('parts12.log').read(), open('parts12.log').read()[-400:]
names = sorted(os.listdir('parts12'))
assert any(n.startswith('val_p001') for n in names) and any(n.startswith('val_p002') for n in names), names
same('val', stream('parts12/val_*.h5'), stream('one12/val_*.h5'))
same('train', stream('parts12/train_*.h5'), stream('one12/train_*.h5'))
"
# slurm/tokenize.sbatch as a 3-task array (--array=4-6: task 5 is part 2/3), Slurm's variables set by hand
for i in 4 5 6; do
    SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_COUNT=3 SLURM_CPUS_PER_TASK=2 CTRAIN_HOME=$CT_ROOT \
        CTRAIN=$CTRAIN bash "$CT_ROOT/slurm/tokenize.sbatch" --tokenizer m.model --out array --val-docs 4 \
        --shard-tokens 20000 corpus.jsonl >>array.log 2>&1 || echo "task $i failed" >>array.log
done
check slurm_array_equals_parts "
from common import *
assert 'failed' not in open('array.log').read(), open('array.log').read()[-400:]
assert sorted(os.listdir('array')) == sorted(os.listdir('parts')), (os.listdir('array'), os.listdir('parts'))
for f in os.listdir('array'):
    same(f, stream('array/' + f), stream('parts/' + f))
"

# ---- bad input ----
{ head -3 corpus.jsonl; echo '{"text": "unterminated'; } >bad_json.jsonl
{ head -2 corpus.jsonl; echo '{"body": "no text field"}'; } >no_text.jsonl
{ head -2 corpus.jsonl; printf '{"text": "caf\xe9 au lait"}\n'; } >bad_utf8.jsonl
expect_fail bad_json_names_line 1 "'bad_json.jsonl' line 4 is not JSON" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e1 bad_json.jsonl
expect_fail no_text_names_line 1 "'no_text.jsonl' line 3 has no \"text\" field" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e2 no_text.jsonl
expect_fail invalid_utf8_names_document 1 "document 3 \('bad_utf8.jsonl' line 3\) is not valid UTF-8" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e3 bad_utf8.jsonl
left=$(find e1 e2 e3 -type f 2>/dev/null)
[ -z "$left" ] && pass bad_input_nothing_written || fail bad_input_nothing_written "files left: $(echo $left)"
expect_ok replace_invalid "$CTRAIN" data tokenize --tokenizer m.model --out e4 --replace-invalid bad_utf8.jsonl
expect_grep replace_invalid_counts '^--replace-invalid: 1 bytes of invalid UTF-8 in 1 documents written as U\+FFFD' out
check replace_invalid_ids "
from common import *
texts = [json.loads(l.decode('utf-8', 'replace'))['text'] for l in open('bad_utf8.jsonl', 'rb') if l.strip()]
_, _, train = expected('m.model', texts, 0)
same('train', stream('e4/train_*.h5'), train)
"
# a NUL in a JSONL "text" (\u0000 or a raw byte) is a NUL of the document, as in a text file: cJSON's
# string ends at it, and the rest of the document was dropped without a word (exit 0)
printf '{"text": "before\\u0000after the escape", "id": "\\u0000"}\n{"text": "raw\000byte then more"}\n' >nul.jsonl
expect_fail nul_in_json_text 1 "document 1 \('nul.jsonl' line 1\) is not valid UTF-8: its byte 6 \(0x00\)" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e9 nul.jsonl
[ ! -e e9 ] || [ -z "$(ls -A e9)" ] && pass nul_nothing_written || fail nul_nothing_written "e9 holds: $(ls e9)"
expect_ok nul_replaced "$CTRAIN" data tokenize --tokenizer m.model --out e10 --replace-invalid nul.jsonl
expect_grep nul_replaced_counts '^--replace-invalid: 2 bytes of invalid UTF-8 in 2 documents written as U\+FFFD' out
check nul_replaced_ids "
from common import *
texts = [json.loads(l, strict=False)['text'].replace('\\0', '\\ufffd') for l in open('nul.jsonl', encoding='utf-8') if l.strip()]
assert texts[0].endswith('after the escape') and texts[1].endswith('then more'), texts
_, _, train = expected('m.model', texts, 0)
same('train', stream('e10/train_*.h5'), train)
"
# a file given twice (here through a link): its documents in validation and training both (exit 0)
ln -s corpus.jsonl again.jsonl
expect_fail input_given_twice 2 "INPUT 'again.jsonl' is the file 'corpus.jsonl' given before it" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e11 --val-docs 4 corpus.jsonl texts/t00.txt again.jsonl
expect_fail existing_output_refused 1 "--out 'shards' already holds '(train|val)_0000[0-9]+\.h5'" \
    "$CTRAIN" data tokenize --tokenizer m.model --out shards --val-docs 4 corpus.jsonl
# a failure after shards were written (the bad line comes in the second batch of 512 documents)
"$PY" -c "
import json
with open('late_bad.jsonl', 'w') as f:
    for i in range(700): f.write(json.dumps({'text': 'document number %d of many' % i}) + '\n')
    f.write('not json\n')
"
expect_fail late_failure_removes_shards 1 "'late_bad.jsonl' line 701 is not JSON.*shard files written before it removed" \
    "$CTRAIN" data tokenize --tokenizer m.model --out late --threads 1 --shard-tokens 100 late_bad.jsonl
[ -d late ] && [ -z "$(ls -A late)" ] && pass late_failure_leaves_nothing ||
    fail late_failure_leaves_nothing "late/ holds: $(ls -A late 2>&1 | head -5 | tr '\n' ' ')"
# a stop (a preempted job's signal) after the first batch: exit 75, nothing kept
CTRAIN_FAULT=TERM@import:1000 expect_fail stop_exit_75 75 "stopped by signal 15 after 512 documents; the [0-9]+ shard files written before it removed; nothing kept" \
    "$CTRAIN" data tokenize --tokenizer m.model --out stopped --threads 1 --shard-tokens 100 late_bad.jsonl
[ -d stopped ] && [ -z "$(ls -A stopped)" ] && pass stop_leaves_nothing ||
    fail stop_leaves_nothing "stopped/ holds: $(ls -A stopped 2>&1 | head -5 | tr '\n' ' ')"
expect_fail model_without_bos 1 "has no BOS piece" \
    "$CTRAIN" data tokenize --tokenizer nobos.model --out e5 corpus.jsonl
expect_fail needs_tokenizer 2 "--tokenizer MODEL.model is required" "$CTRAIN" data tokenize --out e6 corpus.jsonl
expect_fail bad_part 2 "--part '4/3' is not I/N" "$CTRAIN" data tokenize --tokenizer m.model --out e6 --part 4/3 corpus.jsonl
expect_fail part_needs_files 1 "input 'standard input' is not a regular file" \
    bash -c "cat corpus.jsonl | '$CTRAIN' data tokenize --tokenizer m.model --out e7 --part 1/2 --input-format jsonl -"

# ---- --byte-counts without a transform: the same bytes as the tables, so the same val_bpb ----
expect_ok tokenize_byte_counts "$CTRAIN" data tokenize --tokenizer idm.model --out bc --val-docs 2 --byte-counts ascii.jsonl
"$CTRAIN" data tokenize --tokenizer idm.model --out nbc --val-docs 2 ascii.jsonl >/dev/null 2>&1
check byte_counts_equal_tables "
from common import *
h = h5py.File('bc/val_000000.h5', 'r')
t, c = h['tokens'][:].astype(np.int64), h['bytes_per_token'][:].astype(np.int64)
base, lead, boundary = (h['tokenizer/' + k][:].astype(np.int64) for k in ('base_bytes', 'has_leading_space', 'is_boundary_token'))
tables = base[t] + lead[t] * (1 - boundary[np.concatenate([[t[0]], t[:-1]])])
same('bytes per token', c, tables)
texts = jsonl_docs('ascii.jsonl')[:2]
assert c.sum() == sum(len(x.encode()) for x in texts), (c.sum(), [len(x) for x in texts])
same('tokens', t, stream('nbc/val_*.h5'))
"
for d in bc nbc; do
    "$CTRAIN" train train_files="$d/train_*.h5" val_files="$d/val_*.h5" vocab_size=600 num_layers=2 model_dim=64 \
        num_heads=2 num_kv_heads=1 train_seq_len=64 train_batch_tokens=1024 grad_accum_slots=2 iterations=3 \
        val_loss_every=0 device=cpu threads=2 out_dir=run_$d >train_$d.log 2>&1
done
expect_grep byte_counts_used 'val_bpb from its bytes_per_token' train_bc.log
expect_same val_bpb_sidecar_equals_tables "val_bpb" "$(grep -o '"val_bpb": [0-9.e+-]*' run_bc/metrics.jsonl 2>/dev/null)" \
    "$(grep -o '"val_bpb": [0-9.e+-]*' run_nbc/metrics.jsonl 2>/dev/null)"

# ---- CaseOps ----
expect_fail caseops_needs_operators 1 "does not hold the four CaseOps operators" \
    "$CTRAIN" data tokenize --tokenizer m.model --out e8 --caseops corpus.jsonl
expect_ok tokenize_caseops "$CTRAIN" data tokenize --tokenizer cm.model --out co --val-docs 4 --shard-tokens 20000 \
    --caseops corpus.jsonl
check caseops_ids_and_bytes "
from common import *
val, counts, train = expected('cm.model', jsonl_docs('corpus.jsonl'), 4, with_caseops=True)
same('val', stream('co/val_*.h5'), val)
same('val bytes', stream('co/val_*.h5', 'bytes_per_token'), counts)
same('train', stream('co/train_*.h5'), train)
assert all('bytes_per_token' not in h5py.File(f, 'r') for f in glob.glob('co/train_*.h5'))
"
expect_ok tokenize_caseops_bin "$CTRAIN" data tokenize --tokenizer cm.model --out cob --val-docs 4 \
    --shard-tokens 20000 --caseops --format bin corpus.jsonl
check caseops_bin_sidecar "
from common import *
same('val', stream('cob/val_0*.bin'), stream('co/val_*.h5'))
same('val bytes', stream('cob/val_bytes_*.bin'), stream('co/val_*.h5', 'bytes_per_token'))
same('train', stream('cob/train_*.bin'), stream('co/train_*.h5'))
"
expect_ok train_caseops "$CTRAIN" train train_files='co/train_*.h5' val_files='co/val_*.h5' vocab_size=600 \
    num_layers=2 model_dim=64 num_heads=2 num_kv_heads=1 train_seq_len=64 train_batch_tokens=1024 grad_accum_slots=2 \
    iterations=3 val_loss_every=0 device=cpu threads=2 out_dir=run_co
expect_grep train_counts_sidecar 'val data: .*val_bpb from its bytes_per_token' out
"$CTRAIN" data detokenize 'co/val_*.h5' >detok.jsonl 2>detok.err && "$CTRAIN" data detokenize 'co/train_*.h5' >>detok.jsonl 2>>detok.err
check detokenize_round_trip "
from common import *
texts = jsonl_docs('corpus.jsonl')
back = jsonl_docs('detok.jsonl')
assert len(back) == len(texts), (len(back), len(texts), open('detok.err').read()[-300:])
# SentencePiece writes a space as U+2581 and decodes every U+2581 as a space: the one change
for i, (a, b) in enumerate(zip(texts, back)):
    assert a.replace('\u2581', ' ') == b, ('document', i, 'differs from byte', next(k for k in range(len(a)) if a[k:k+1] != b[k:k+1]))
assert sum('\u2581' in t for t in texts) >= 1
"

# a document of nothing but its BOS (an empty "text") comes back as one: detokenize skipped it
printf '{"text": "one"}\n{"text": ""}\n{"text": ""}\n{"text": "four"}\n' >empties.jsonl
"$CTRAIN" data tokenize --tokenizer m.model --out empties empties.jsonl >/dev/null 2>&1
"$CTRAIN" data detokenize 'empties/train_*.h5' >empties.out 2>&1
expect_same detokenize_empty_documents "documents" "$(cat empties.jsonl | tr -d ' ')" "$(cat empties.out)"

finish
