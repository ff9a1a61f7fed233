#!/usr/bin/env bash
# test_tokenizer.sh — SentencePiece tokenizers (docs/data-format.md "Tokenizers"): with models
# trained here by Python's sentencepiece, `ctrain data luts` and `import-bin --tokenizer
# MODEL.model` store exactly the tables train_gpt.py's build_sentencepiece_luts makes (computed
# here again with the Python API) and the model's pieces; `--luts` carries them over; the old
# free-text --tokenizer still works; `ctrain data info` says which files hold pieces; `ctrain
# sample` prints what sp.decode makes of its ids, for each of SentencePiece's three leading-space
# rules, and with --tokenizer takes a text prompt as sp.encode makes it; bad models, options and
# files fail clearly.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

expect_ok luts_help "$CTRAIN" data luts --help
expect_grep luts_help_usage 'usage: ctrain data luts MODEL.model --out FILE.h5' out
expect_ok data_help_lists_luts "$CTRAIN" data --help
expect_grep data_help_luts '^  luts MODEL.model' out
expect_ok import_help "$CTRAIN" data import-bin --help
expect_grep import_help_model '--tokenizer MODEL.model' out
expect_ok sample_help "$CTRAIN" sample --help
expect_grep sample_help_pieces '--pieces FILE.h5' out
expect_grep sample_help_tokenizer '--tokenizer MODEL.model' out
expect_ok info_help "$CTRAIN" data info --help
expect_grep info_help_pieces '\+pieces' out

if ! "$CTRAIN" --version | grep -q '^sentencepiece: yes'; then
    # A build without the library says what to install, for both commands.
    printf 'not a model' >x.model
    expect_fail luts_without_library 1 "built without the SentencePiece library; install it \(Debian: apt-get install libsentencepiece-dev" \
        "$CTRAIN" data luts x.model --out x.h5
    expect_fail import_without_library 1 "--tokenizer: .*built without the SentencePiece library" \
        "$CTRAIN" data import-bin --out d --tokenizer x.model x.bin
    skip_rest "this ctrain was built without SentencePiece (scripts/install-deps.sh installs it)"
fi
if ! "$PY" -c 'import sentencepiece, h5py, numpy' 2>/dev/null; then
    skip_rest_python "sentencepiece/h5py/numpy not importable by $PY (scripts/install-deps.sh --test)"
fi

# ---- three models, one per leading-space rule, all with 400 pieces ----
# bpe: parameter-golf's settings (byte fallback, no dummy prefix, whitespace cleaned: every
# leading space mark of the text is dropped); uni: a unigram model with the dummy prefix and
# whitespace kept (only the first is dropped), unknown pieces and a user-defined symbol; keep:
# neither (none is dropped).
{
    cat /usr/share/common-licenses/GPL-3
    printf 'UTF-8: \xc3\xa9\xe2\x82\xac \xf0\x9f\x99\x82 \xe6\x97\xa5\xe6\x9c\xac\n  two  spaces  <sep>\n'
} >corpus.txt
{ cat /usr/share/common-licenses/GPL-2; printf 'UTF-8: \xc3\xa9\xe2\x82\xac\n'; } >corpus2.txt
"$PY" - <<'EOF' >train_models.out 2>&1 || { fail train_models "$(tail -c 600 train_models.out)"; exit 1; }
import sentencepiece as spm
common = dict(input='corpus.txt', vocab_size=400, minloglevel=2, character_coverage=0.995)
spm.SentencePieceTrainer.train(model_prefix='bpe', model_type='bpe', byte_fallback=True, add_dummy_prefix=False,
                               normalization_rule_name='nmt_nfkc', pad_id=0, bos_id=1, eos_id=2, unk_id=3, **common)
spm.SentencePieceTrainer.train(model_prefix='uni', model_type='unigram', add_dummy_prefix=True,
                               remove_extra_whitespaces=False, user_defined_symbols=['<sep>'], **common)
spm.SentencePieceTrainer.train(model_prefix='keep', model_type='bpe', byte_fallback=True, add_dummy_prefix=False,
                               remove_extra_whitespaces=False, **common)
spm.SentencePieceTrainer.train(model_prefix='small', model_type='bpe', **dict(common, vocab_size=300))
# bpe's settings on another text: the same special and byte pieces, other merged pieces
spm.SentencePieceTrainer.train(model_prefix='other', model_type='bpe', byte_fallback=True, add_dummy_prefix=False,
                               normalization_rule_name='nmt_nfkc', pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                               **dict(common, input='corpus2.txt'))
EOF
pass train_models

# train_gpt.py's build_sentencepiece_luts, written again from its rule, and the pieces and types
# the Python API gives; compared with what ctrain stored in FILE.
cat >expect.py <<'EOF'
import sys, h5py, numpy as np, sentencepiece as spm
def tables(sp):
    n = sp.vocab_size()
    base = np.zeros(n, np.int16); space = np.zeros(n, np.uint8); boundary = np.ones(n, np.uint8)
    for i in range(n):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
            continue
        boundary[i] = 0
        if sp.is_byte(i):
            base[i] = 1
            continue
        piece = sp.id_to_piece(i)
        if piece.startswith('\u2581'):
            space[i] = 1
            piece = piece[1:]
        base[i] = len(piece.encode('utf-8'))
    return base, space, boundary
def piece_type(sp, i):
    return 3 if sp.is_control(i) else 2 if sp.is_unknown(i) else 5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1
def check(model, path):
    sp = spm.SentencePieceProcessor(model_file=model)
    with h5py.File(path, 'r') as f:
        t = f['tokenizer']
        for name, want in zip(('base_bytes', 'has_leading_space', 'is_boundary_token'), tables(sp)):
            got = t[name][:]
            assert got.dtype == want.dtype, (name, got.dtype)
            assert got.tobytes() == want.tobytes(), (name, np.nonzero(got != want)[0][:10])
        pieces = [p.decode('utf-8') for p in t['pieces'][:]]
        assert pieces == [sp.id_to_piece(i) for i in range(sp.vocab_size())], 'pieces differ'
        types = t['piece_type'][:]
        assert list(types) == [piece_type(sp, i) for i in range(sp.vocab_size())], 'piece types differ'
        return f
if __name__ == '__main__':
    check(sys.argv[1], sys.argv[2])
EOF

for m in bpe uni keep; do
    expect_ok "luts_$m" "$CTRAIN" data luts "$m.model" --out "${m}_luts.h5"
    expect_grep "luts_${m}_reports" "^wrote ${m}_luts.h5: /tokenizer tables and pieces of sentencepiece:$m.model \(vocab 400\)" out
    # ctrain checks its decoding against the library's on every id and warns if they differ
    if [ -s err ]; then fail "luts_${m}_decodes_as_library" "$(head -c 400 err)"; else pass "luts_${m}_decodes_as_library"; fi
    check "luts_${m}_tables_are_train_gpt_rule" "import sys; sys.path.insert(0, '.'); import expect; expect.check('$m.model', '${m}_luts.h5')"
done
if command -v h5dump >/dev/null; then
    h5dump -d /tokenizer/pieces bpe_luts.h5 >dump.txt 2>&1
    expect_grep h5dump_pieces_are_text '"<0x41>"' dump.txt
    expect_grep h5dump_leading_space_rule 'ATTRIBUTE "leading_space"' dump.txt
else
    skip_rest "h5dump not installed (Debian: hdf5-tools)"
fi

# ---- import-bin --tokenizer MODEL.model ----
"$PY" - <<'EOF' >shards.out 2>&1 || fail make_shards "$(tail -c 600 shards.out)"
import numpy as np, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='bpe.model')
ids = []
for para in open('corpus.txt').read().split('\n\n'):
    if para.strip():
        ids += [sp.bos_id()] + sp.encode(para)
def shard(path, tokens):
    header = np.zeros(256, dtype='<i4')
    header[:3] = 20240520, 1, len(tokens)
    open(path, 'wb').write(header.tobytes() + np.asarray(tokens, dtype='<u2').tobytes())
cut = len(ids) * 9 // 10
shard('fineweb_train_000000.bin', ids[:cut])
shard('fineweb_val_000000.bin', ids[cut:])
shard('big_id.bin', [1, 2, 450])
EOF
expect_ok import_model "$CTRAIN" data import-bin --out data --tokenizer bpe.model --bos-id 1 \
    fineweb_train_000000.bin fineweb_val_000000.bin
expect_grep import_model_reports '^tokenizer: sentencepiece:bpe.model \(vocab 400\)' out
check import_model_tables "
import sys, h5py, numpy as np; sys.path.insert(0, '.'); import expect
for split in ('train', 'val'):
    path = 'data/fineweb_%s_000000.h5' % split
    expect.check('bpe.model', path)
    with h5py.File(path, 'r') as f, h5py.File('bpe_luts.h5', 'r') as l:
        a = f['tokens'].attrs
        assert int(a['vocab_size']) == 400, a['vocab_size']
        tok = a['tokenizer']; tok = tok.decode() if isinstance(tok, bytes) else tok
        assert tok == 'sentencepiece:bpe.model (vocab 400)', tok
        for name in ('base_bytes', 'has_leading_space', 'is_boundary_token', 'pieces', 'piece_type'):
            assert list(f['tokenizer'][name][:]) == list(l['tokenizer'][name][:]), name
        for name in ('leading_space', 'unk_surface'):
            assert f['tokenizer/pieces'].attrs[name] == l['tokenizer/pieces'].attrs[name], name
        want = np.fromfile('fineweb_%s_000000.bin' % split, dtype='<u2', offset=1024)
        assert np.array_equal(f['tokens'][:], want), 'tokens differ'
"
expect_ok info_model_data "$CTRAIN" data info 'data/*.h5'
expect_grep info_shows_model '^data/fineweb_val_000000.h5 .* yes\+pieces +sentencepiece:bpe.model \(vocab 400\)$' out
expect_grep info_total_pieces '^total \(2 files\) +[0-9]+ +400 +yes\+pieces$' out

# --luts carries the pieces of a `data luts` file over
expect_ok import_luts_with_pieces "$CTRAIN" data import-bin --out copied.h5 --vocab-size 400 --luts bpe_luts.h5 \
    fineweb_val_000000.bin
check import_luts_pieces_copied "import sys; sys.path.insert(0, '.'); import expect; expect.check('bpe.model', 'copied.h5')"

# the old free-text --tokenizer: stored as it is, no tables
expect_ok import_free_text "$CTRAIN" data import-bin --out text.h5 --vocab-size 400 --tokenizer sp400-custom \
    fineweb_val_000000.bin
if [ -s err ]; then fail import_free_text_quiet "stderr: $(head -c 300 err)"; else pass import_free_text_quiet; fi
cp bpe.model bpe.spm
expect_ok import_file_as_text "$CTRAIN" data import-bin --out text2.h5 --vocab-size 400 --tokenizer bpe.spm \
    fineweb_val_000000.bin
expect_grep import_file_as_text_note "note: --tokenizer 'bpe.spm' names a file but is stored as free text" err
check import_free_text_stored "
import h5py
with h5py.File('text.h5', 'r') as f:
    tok = f['tokens'].attrs['tokenizer']; tok = tok.decode() if isinstance(tok, bytes) else tok
    assert tok == 'sp400-custom', tok
    assert 'tokenizer' not in f, list(f)
"

# ---- data info: which files hold pieces ----
expect_ok info_luts_copied "$CTRAIN" data info copied.h5
expect_grep info_luts_copied_pieces '^copied.h5 .* yes\+pieces +$' out
expect_ok info_free_text "$CTRAIN" data info text.h5
expect_grep info_free_text_no_luts '^text.h5 .* -1 +no +sp400-custom$' out
"$CTRAIN" data from-text --out bytes.h5 corpus.txt >/dev/null 2>&1 || fail make_bytes "from-text failed"
expect_ok info_bytes "$CTRAIN" data info bytes.h5
expect_grep info_bytes_no_pieces '^bytes.h5 .* -1  yes   bytes$' out
expect_grep info_bytes_total '^total \(1 file\) +[0-9]+ +256 +yes$' out
# pieces without the tables, and pieces that data info reads and rejects
"$PY" - <<'EOF'
import h5py, shutil
shutil.copy('text.h5', 'pieces_only.h5')
shutil.copy('data/fineweb_val_000000.h5', 'bad_pieces.h5')
with h5py.File('bpe_luts.h5', 'r') as src, h5py.File('pieces_only.h5', 'r+') as f:
    src.copy('tokenizer/pieces', f, 'tokenizer/pieces')
    src.copy('tokenizer/piece_type', f, 'tokenizer/piece_type')
with h5py.File('bad_pieces.h5', 'r+') as f:
    f['tokenizer/piece_type'][7] = 9
EOF
expect_ok info_pieces_only "$CTRAIN" data info pieces_only.h5
expect_grep info_pieces_only_shown '^pieces_only.h5 .* no\+pieces +sp400-custom$' out
expect_fail info_bad_pieces 1 "'bad_pieces.h5': /tokenizer/piece_type\[7\] = 9, expected a SentencePiece piece type" \
    "$CTRAIN" data info bad_pieces.h5

# ---- errors ----
expect_fail model_missing 1 "--tokenizer: cannot open SentencePiece model 'nope.model': No such file or directory" \
    "$CTRAIN" data import-bin --out bad --tokenizer nope.model fineweb_val_000000.bin
cp corpus.txt text.model
expect_fail model_not_a_model 1 "'text.model' is not a SentencePiece model" \
    "$CTRAIN" data luts text.model --out bad.h5
# damaged models fail with a message, never a crash, whatever the cut
size=$(stat -c %s bpe.model)
for cut in 1 10 100 1000 $((size / 2)) $((size - 100)); do
    head -c "$cut" bpe.model >cut.model
    "$CTRAIN" data luts cut.model --out cut.h5 >cut.out 2>cut.err
    rc=$?
    if [ $rc -eq 0 ] || { [ $rc -eq 1 ] && grep -q "cut.model" cut.err; }; then pass "model_cut_$cut"
    else fail "model_cut_$cut" "exit $rc: $(head -c 300 cut.err)"; fi
done
mkdir -p dir.model
expect_fail model_directory 1 "SentencePiece model 'dir.model' is not a regular file" \
    "$CTRAIN" data luts dir.model --out bad.h5
expect_fail model_vocab_mismatch 1 "--vocab-size 1024 does not match SentencePiece model 'bpe.model', which has 400 pieces" \
    "$CTRAIN" data import-bin --out bad --vocab-size 1024 --tokenizer bpe.model fineweb_val_000000.bin
expect_fail model_and_luts 2 'give --tokenizer MODEL.model or --luts FILE.h5, not both' \
    "$CTRAIN" data import-bin --out bad --tokenizer bpe.model --luts bpe_luts.h5 fineweb_val_000000.bin
expect_fail model_bos_too_big 2 "--bos-id '400' is not below the model's vocabulary size 400" \
    "$CTRAIN" data import-bin --out bad --bos-id 400 --tokenizer bpe.model fineweb_val_000000.bin
expect_fail model_token_over_vocab 1 "shard 'big_id.bin': token 2 is 450, which is >= vocab_size 400" \
    "$CTRAIN" data import-bin --out bad --tokenizer bpe.model big_id.bin
leftovers=$(find bad -type f 2>/dev/null | head -3)
[ -z "$leftovers" ] && pass errors_leave_no_files || fail errors_leave_no_files "$leftovers"
expect_fail luts_needs_out 2 '--out FILE.h5 is required' "$CTRAIN" data luts bpe.model
expect_fail luts_needs_one_model 2 'give one SentencePiece model \(got 2\)' "$CTRAIN" data luts bpe.model uni.model --out x.h5
: >plainfile # a folder that cannot be made: a file stands in its place
expect_fail luts_bad_out_dir 1 "'plainfile' exists but is not a directory" "$CTRAIN" data luts bpe.model --out plainfile/x.h5
# malformed pieces in a file given to --luts
"$PY" - <<'EOF'
import h5py, numpy as np
def make(path, types=None, leading='keep', pieces=None):
    with h5py.File('bpe_luts.h5', 'r') as src, h5py.File(path, 'w') as f:
        for k in ('base_bytes', 'has_leading_space', 'is_boundary_token'):
            f['tokenizer/' + k] = src['tokenizer/' + k][:]
        f['tokenizer/pieces'] = src['tokenizer/pieces'][:] if pieces is None else pieces
        f['tokenizer/piece_type'] = src['tokenizer/piece_type'][:] if types is None else types
        f['tokenizer/pieces'].attrs['leading_space'] = leading
t = h5py.File('bpe_luts.h5', 'r')['tokenizer/piece_type'][:].copy(); t[7] = 9
make('bad_type.h5', types=t)
make('bad_rule.h5', leading='sometimes')
make('short_types.h5', types=np.ones(399, np.uint8))
b = h5py.File('bpe_luts.h5', 'r')['tokenizer/piece_type'][:].copy(); b[300] = 6
make('bad_byte.h5', types=b)
make('fixed_strings.h5', pieces=np.array([b'x'] * 400, dtype='S4'))
with h5py.File('bpe_luts.h5', 'r') as src, h5py.File('vocab300.h5', 'w') as f:
    for k in ('base_bytes', 'has_leading_space', 'is_boundary_token', 'pieces', 'piece_type'):
        f['tokenizer/' + k] = src['tokenizer/' + k][:300]
EOF
expect_fail pieces_bad_type 1 "--luts: 'bad_type.h5': /tokenizer/piece_type\[7\] = 9, expected a SentencePiece piece type" \
    "$CTRAIN" data import-bin --out bad.h5 --vocab-size 400 --luts bad_type.h5 fineweb_val_000000.bin
expect_fail pieces_bad_rule 1 "'bad_rule.h5': attribute leading_space of /tokenizer/pieces is 'sometimes', expected keep, strip_first or strip_until_text" \
    "$CTRAIN" data import-bin --out bad.h5 --vocab-size 400 --luts bad_rule.h5 fineweb_val_000000.bin
expect_fail pieces_short_types 1 "'short_types.h5': /tokenizer/piece_type has 399 entries but /tokenizer/pieces has 400" \
    "$CTRAIN" data import-bin --out bad.h5 --vocab-size 400 --luts short_types.h5 fineweb_val_000000.bin
expect_fail pieces_bad_byte 1 "'bad_byte.h5': piece 300 is a byte piece \(type 6\) but reads '.*', expected <0xNN>" \
    "$CTRAIN" data import-bin --out bad.h5 --vocab-size 400 --luts bad_byte.h5 fineweb_val_000000.bin
expect_fail pieces_fixed_strings 1 "'fixed_strings.h5': /tokenizer/pieces has dtype .*, expected variable-length strings" \
    "$CTRAIN" data import-bin --out bad.h5 --vocab-size 400 --luts fixed_strings.h5 fineweb_val_000000.bin

# ---- training with val_bpb, then text from the model ----
run=(train_files='data/fineweb_train_*.h5' val_files='data/fineweb_val_*.h5' vocab_size=400 num_layers=2 model_dim=32
     num_heads=4 num_kv_heads=2 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=1 iterations=20
     val_loss_every=20 threads=2)
expect_ok train_tokenized "$CTRAIN" train "${run[@]}" out_dir=run
check val_bpb_reported "
import json
rows = [json.loads(l) for l in open('run/metrics.jsonl') if 'val_bpb' in l]
assert rows and rows[-1]['val_bpb'] > 0, rows
"

# ids from --ids, text without: the text is what sp.decode makes of the ids. The prompt starts
# with a control piece and space-mark pieces of the model that decodes (the leading-space rules
# act at the start) and the sampling is hot, so byte pieces, controls and words all appear.
for m in bpe uni keep; do
    prompt=$("$PY" -c "
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='$m.model')
control = [i for i in range(sp.vocab_size()) if sp.is_control(i)]
space = [i for i in range(sp.vocab_size()) if sp.id_to_piece(i).startswith('\u2581') and not sp.is_byte(i)]
print(','.join(map(str, control[:1] + space[:2] + space[:1])))
")
    for seed in 1 2; do
        args=(sample run --prompt-ids "$prompt" --tokens 60 --temperature 2 --top-k 0 --seed "$seed")
        [ "$m" = bpe ] || args+=(--pieces "${m}_luts.h5")
        expect_ok "sample_${m}_${seed}_ids" "$CTRAIN" "${args[@]}" --ids
        cp out ids.txt
        expect_ok "sample_${m}_${seed}_text" "$CTRAIN" "${args[@]}"
        check "sample_${m}_${seed}_is_sp_decode" "
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='$m.model')
ids = [int(t) for t in open('ids.txt').read().split()]
assert len(ids) == 4 + 60, len(ids)
want = sp.decode(ids).encode('utf-8') + b'\n'
got = open('out', 'rb').read()
assert got == want, (got[:200], want[:200])
"
    done
done
# byte runs that SentencePiece's UTF-8 rules reject or cut (overlong, surrogate, above U+10FFFF,
# cut short by a control piece, by a word or by the end), as the prompt: decoded like sp.decode
"$PY" - >byte_prompts.txt <<'EOF'
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='bpe.model')
b = lambda *xs: [sp.piece_to_id('<0x%02X>' % x) for x in xs]
word = [i for i in range(sp.vocab_size()) if sp.id_to_piece(i).startswith('\u2581') and not sp.is_byte(i)][0]
for seq in (b(0xC0, 0x80, 0xED, 0xA0, 0x80, 0xF4, 0x90, 0x80, 0x80, 0x41) + [2] + b(0xE2, 0x82),
            b(0xF0, 0x9F, 0x99) + [word] + b(0xF0, 0x9F, 0x99, 0x82, 0xEF, 0xBF, 0xBD, 0xE2, 0x82),
            [3, 3] + b(0x80, 0xC3, 0xA9, 0xFF) + [word, 1] + b(0xE6, 0x97)):
    print(','.join(map(str, seq)))
EOF
n=0
while read -r ids; do
    n=$((n + 1))
    args=(sample run --prompt-ids "$ids" --tokens 1 --temperature 0)
    "$CTRAIN" "${args[@]}" --ids >ids.txt 2>/dev/null
    expect_ok "sample_bytes_${n}_text" "$CTRAIN" "${args[@]}"
    check "sample_bytes_${n}_is_sp_decode" "
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='bpe.model')
ids = [int(t) for t in open('ids.txt').read().split()]
want = sp.decode(ids).encode('utf-8') + b'\n'
got = open('out', 'rb').read()
assert len(ids) > 1 and got == want, (ids, got, want)
"
done <byte_prompts.txt
# the default prompt is the data's bos_id
expect_ok sample_default_prompt "$CTRAIN" sample run --tokens 3 --ids
expect_grep sample_default_prompt_is_bos '^1 ' out
expect_fail sample_text_prompt 2 "not byte-level .*: give --tokenizer MODEL.model .* to encode --prompt, or the prompt as --prompt-ids" \
    "$CTRAIN" sample run --prompt "The "
expect_fail sample_pieces_missing 1 "--pieces: .*'nope.h5'" "$CTRAIN" sample run --pieces nope.h5
expect_fail sample_pieces_absent 1 "--pieces: 'text.h5' has no /tokenizer/pieces" "$CTRAIN" sample run --pieces text.h5
expect_fail sample_pieces_wrong_vocab 1 "--pieces: 'vocab300.h5': /tokenizer/pieces has 300 entries, expected vocab_size = 400" \
    "$CTRAIN" sample run --pieces vocab300.h5
# a model whose data has no pieces prints ids, and says why on stderr
expect_ok train_free_text "$CTRAIN" train "${run[@]}" train_files=text.h5 val_loss_every=0 iterations=2 out_dir=run_text
expect_ok sample_without_pieces "$CTRAIN" sample run_text --tokens 3 --prompt-ids 5
expect_grep sample_without_pieces_ids '^5( [0-9]+){3}$' out
expect_grep sample_without_pieces_note "printing token ids: 'text.h5' has no /tokenizer/pieces" err

# ---- a text prompt, encoded with --tokenizer MODEL.model ----
# --ids prints the prompt's ids, then the N generated: the prompt must be sp.encode(TEXT), and the
# greedy continuation the one from --prompt-ids sp.encode(TEXT). run's data stores bpe's pieces
# (the model is checked against them); run_text's has none (uni's own pieces decode).
encode() { "$PY" -c "import sys, sentencepiece as s; print(*s.SentencePieceProcessor(model_file=sys.argv[1]).encode(sys.argv[2]), sep=',')" "$@"; }
texts=("The GNU General Public License" $'UTF-8: \xc3\xa9\xe2\x82\xac \xf0\x9f\x99\x82 \xe6\x97\xa5\xe6\x9c\xac\n  two  spaces  <sep> \xe4\xb8\x8d\xe8\xa7\x81')
for case in bpe:run uni:run_text; do
    m=${case%%:*} r=${case#*:}
    for k in 0 1; do
        text=${texts[$k]} name="prompt_${m}_$k"
        ids=$(encode "$m.model" "$text")
        args=(sample "$r" --tokens 8 --temperature 0)
        expect_ok "${name}_ids" "$CTRAIN" "${args[@]}" --tokenizer "$m.model" --prompt "$text" --ids
        cp out text_ids.txt
        check "${name}_is_sp_encode" "
import sys, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='$m.model')
want = sp.encode(sys.argv[1])
ids = [int(t) for t in open('text_ids.txt').read().split()]
assert want and ids[:len(want)] == want and len(ids) == len(want) + 8, (ids, want)
" "$text"
        expect_ok "${name}_as_ids" "$CTRAIN" "${args[@]}" --prompt-ids "$ids" --ids
        cmp -s out text_ids.txt && pass "${name}_greedy_as_ids" || fail "${name}_greedy_as_ids" "$(cat out) vs $(cat text_ids.txt)"
        expect_ok "${name}_text" "$CTRAIN" "${args[@]}" --tokenizer "$m.model" --prompt "$text"
        if grep -v '^device: ' err | grep -q .; then fail "${name}_quiet" "$(head -c 300 err)"; else pass "${name}_quiet"; fi
        check "${name}_text_is_sp_decode" "
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file='$m.model')
ids = [int(t) for t in open('text_ids.txt').read().split()]
got, want = open('out', 'rb').read(), sp.decode(ids).encode('utf-8') + b'\n'
assert got == want, (got, want)
"
    done
done
# --bos: the data's bos_id (1) before the encoded prompt, the same continuation as --prompt-ids
# 1,sp.encode(TEXT); refused where the data records none
ids=$(encode bpe.model "${texts[0]}")
expect_ok prompt_bos "$CTRAIN" sample run --tokens 8 --temperature 0 --tokenizer bpe.model --prompt "${texts[0]}" --bos --ids
cp out bos_ids.txt
grep -q "^1 ${ids//,/ } " bos_ids.txt && pass prompt_bos_first || fail prompt_bos_first "$(cat bos_ids.txt) vs 1,$ids"
expect_ok prompt_bos_as_ids "$CTRAIN" sample run --tokens 8 --temperature 0 --prompt-ids "1,$ids" --ids
cmp -s out bos_ids.txt && pass prompt_bos_greedy_as_ids || fail prompt_bos_greedy_as_ids "$(cat out) vs $(cat bos_ids.txt)"
expect_ok prompt_ids_bos "$CTRAIN" sample run --tokens 8 --temperature 0 --prompt-ids "$ids" --bos --ids
cmp -s out bos_ids.txt && pass prompt_ids_bos_same || fail prompt_ids_bos_same "$(cat out) vs $(cat bos_ids.txt)"
expect_ok default_prompt_bos "$CTRAIN" sample run --tokens 3 --ids --bos
expect_grep default_prompt_bos_once '^1( [0-9]+){3}$' out
expect_fail prompt_bos_none 2 "--bos: the training data 'text.h5' records no bos_id \\(its bos_id is -1" \
    "$CTRAIN" sample run_text --tokens 3 --prompt-ids 5 --bos

# a model that is not the data's: vocabulary size, then pieces (file, first index that differs,
# both values): other.model differs from the data's bpe.model only after the byte pieces
expect_fail prompt_model_vocab 1 "--tokenizer: SentencePiece model 'small.model' has 300 pieces but the checkpoint 'run/checkpoints/step_[0-9]+.h5' has vocab_size 400" \
    "$CTRAIN" sample run --tokenizer small.model --prompt "The "
"$PY" - >first_diff.txt <<'EOF'
import sentencepiece as spm
a, b = (spm.SentencePieceProcessor(model_file=m) for m in ('other.model', 'bpe.model'))
t = lambda sp, i: 3 if sp.is_control(i) else 2 if sp.is_unknown(i) else 5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1
i = next(i for i in range(400) if (a.id_to_piece(i), t(a, i)) != (b.id_to_piece(i), t(b, i)))
assert i > 260, i
print("piece %d is '%s' (type %d) in the model but '%s' (type %d) in /tokenizer/pieces" % (i, a.id_to_piece(i), t(a, i), b.id_to_piece(i), t(b, i)))
EOF
expect_fail prompt_model_not_data 1 "--tokenizer: SentencePiece model 'other.model' is not the tokenizer of 'data/fineweb_train_000000.h5': piece" \
    "$CTRAIN" sample run --tokenizer other.model --prompt "The "
grep -qF -- "$(cat first_diff.txt)" err && pass prompt_model_not_data_names_piece || fail prompt_model_not_data_names_piece "$(cat first_diff.txt) :: $(cat err)"
expect_fail prompt_model_not_pieces 1 "--tokenizer: SentencePiece model 'uni.model' is not the tokenizer of 'bpe_luts.h5': piece" \
    "$CTRAIN" sample run_text --pieces bpe_luts.h5 --tokenizer uni.model --prompt-ids 5
expect_fail prompt_model_missing 1 "--tokenizer: cannot open SentencePiece model 'nope.model'" \
    "$CTRAIN" sample run --tokenizer nope.model --prompt "The "
expect_fail prompt_model_not_model 1 "--tokenizer: 'text.model' is not a SentencePiece model" \
    "$CTRAIN" sample run --tokenizer text.model --prompt "The "
expect_fail prompt_encodes_to_nothing 2 "--prompt '   ' encodes to no tokens with SentencePiece model 'bpe.model'" \
    "$CTRAIN" sample run --tokenizer bpe.model --prompt "   "
expect_fail prompt_and_ids 2 'give --prompt or --prompt-ids, not both' \
    "$CTRAIN" sample run --tokenizer bpe.model --prompt "The " --prompt-ids 5

finish
