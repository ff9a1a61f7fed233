#!/usr/bin/env bash
# test_data.sh — `ctrain data`: from-text and import-bin produce files that h5dump and h5py
# read back exactly; files written by h5py are accepted; bad shards and bad files fail with
# exit 1 and a message naming the file; usage errors exit 2.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

have_h5py=1
"$PY" -c 'import h5py, numpy' 2>/dev/null || have_h5py=0
need_h5py() { # NAME -> 0 if h5py is there, else skips the rest of the script
    [ $have_h5py = 1 ] && return 0
    skip_rest_python "h5py/numpy not importable by $PY (needed from case $1 on)"
}

# ---- help and usage errors ----
expect_ok data_help "$CTRAIN" data --help
expect_grep data_help_lists_commands 'import-bin.*from-text|from-text' out
for cmd in import-bin from-text info; do
    expect_ok "help_$cmd" "$CTRAIN" data "$cmd" --help
    expect_grep "help_${cmd}_usage" "usage: ctrain data $cmd" out
done
expect_fail no_subcommand 2 'usage: ctrain data' "$CTRAIN" data
expect_fail unknown_subcommand 2 "unknown data command 'frob'" "$CTRAIN" data frob
expect_fail unknown_option 2 "unknown option '--bogus'" "$CTRAIN" data from-text --out x.h5 --bogus a.txt
expect_fail option_without_value 2 'option --out needs a value' "$CTRAIN" data from-text a.txt --out
expect_fail from_text_needs_out 2 '--out FILE.h5 is required' "$CTRAIN" data from-text a.txt
expect_fail from_text_needs_input 2 'no text files given' "$CTRAIN" data from-text --out x.h5
expect_fail val_fraction_needs_val_out 2 '--val-fraction needs --val-out' \
    "$CTRAIN" data from-text --out x.h5 --val-fraction 0.1 a.txt
expect_fail bad_val_fraction 2 "--val-fraction '1.5'" \
    "$CTRAIN" data from-text --out x.h5 --val-out v.h5 --val-fraction 1.5 a.txt
expect_fail import_needs_out 2 '--out is required' "$CTRAIN" data import-bin a.bin
expect_fail import_needs_shards 2 'no shards given' "$CTRAIN" data import-bin --out d
expect_fail import_bad_vocab 2 "--vocab-size 'lots' is not an integer" "$CTRAIN" data import-bin --out d --vocab-size lots a.bin
expect_fail import_vocab_too_big 2 "--vocab-size '70000'" "$CTRAIN" data import-bin --out d --vocab-size 70000 a.bin
expect_fail import_file_for_many 2 "names one file but 2 shards" "$CTRAIN" data import-bin --out one.h5 a.bin b.bin
expect_fail info_needs_argument 2 'no file or glob given' "$CTRAIN" data info

# ---- from-text ----
{
    printf 'The quick brown fox jumps over the lazy dog.\n'
    printf 'UTF-8: \xc3\xa9\xe2\x82\xac \xf0\x9f\x99\x82\n'
    for i in $(seq 1 300); do printf 'line %d of a small corpus\n' "$i"; done
} >a.txt
printf 'second file, no trailing newline' >b.txt
expect_ok from_text "$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.25 a.txt b.txt
expect_grep from_text_reports 'wrote train.h5: [0-9]+ tokens' out
if [ -e train.h5.tmp ] || [ -e val.h5.tmp ]; then fail from_text_no_tmp_left "a .tmp file remains"; else pass from_text_no_tmp_left; fi

if command -v h5dump >/dev/null; then
    h5dump -H train.h5 >dump.txt 2>&1
    expect_grep h5dump_tokens_dataset 'DATASET "tokens"' dump.txt
    expect_grep h5dump_uint16 'H5T_STD_U16LE' dump.txt
    expect_grep h5dump_vocab_attribute 'ATTRIBUTE "vocab_size"' dump.txt
    expect_grep h5dump_tokenizer_attribute 'ATTRIBUTE "tokenizer"' dump.txt
    expect_grep h5dump_bos_attribute 'ATTRIBUTE "bos_id"' dump.txt
    expect_grep h5dump_luts 'DATASET "base_bytes"' dump.txt
    h5dump -a /tokens/vocab_size train.h5 >dump_vocab.txt 2>&1
    expect_grep h5dump_vocab_is_256 '\(0\): 256' dump_vocab.txt
else
    skip_rest "h5dump not installed (Debian: hdf5-tools)"
fi

if need_h5py from_text_h5py_round_trip; then
    check from_text_h5py_round_trip "
import h5py, numpy as np
text = open('a.txt','rb').read() + open('b.txt','rb').read()
with h5py.File('train.h5','r') as t, h5py.File('val.h5','r') as v:
    tr, va = t['tokens'], v['tokens']
    got = bytes(np.concatenate([tr[:], va[:]]).astype(np.uint8))
    assert got == text, 'bytes differ'
    assert tr.dtype == np.uint16, tr.dtype
    assert len(va) == int(len(text) * 0.25), (len(va), len(text))
    a = tr.attrs
    assert int(a['vocab_size']) == 256 and a['vocab_size'].dtype == np.int64
    assert int(a['bos_id']) == -1
    tok = a['tokenizer']; tok = tok.decode() if isinstance(tok, bytes) else tok
    assert tok == 'bytes', tok
    lut = t['tokenizer']
    assert (lut['base_bytes'][:] == 1).all() and lut['base_bytes'].dtype == np.int16 and len(lut['base_bytes']) == 256
    assert not lut['has_leading_space'][:].any() and not lut['is_boundary_token'][:].any()
"
fi

expect_ok info_from_text "$CTRAIN" data info 'train.h5'
expect_grep info_shows_file '^train\.h5 +[0-9]+ +uint16 +256 +-1 +yes +bytes$' out
expect_grep info_checked 'checked [0-9]+ tokens: all below vocab_size 256' out
expect_fail from_text_missing_input 1 "cannot open text file 'missing.txt'" \
    "$CTRAIN" data from-text --out m.h5 missing.txt
if [ -e m.h5 ] || [ -e m.h5.tmp ]; then fail missing_input_leaves_nothing "m.h5 or m.h5.tmp exists"
else pass missing_input_leaves_nothing; fi

# ---- import-bin ----
if need_h5py import_bin_round_trip; then
    "$PY" - <<'EOF'
import numpy as np
def shard(path, tokens, magic=20240520, version=1, count=None, cut=0):
    header = np.zeros(256, dtype='<i4')
    header[0], header[1] = magic, version
    header[2] = len(tokens) if count is None else count
    data = header.tobytes() + np.asarray(tokens, dtype='<u2').tobytes()
    open(path, 'wb').write(data[:len(data) - cut])
rng = np.random.default_rng(1)
shard('fineweb_train_000000.bin', rng.integers(0, 1024, 1_500_000))  # crosses a 1M-token chunk
shard('fineweb_train_000001.bin', rng.integers(0, 1024, 777))
shard('bytes.bin', rng.integers(0, 256, 5000))
shard('bad_magic.bin', [1, 2, 3], magic=12345)
shard('bad_version.bin', [1, 2, 3], version=2)
shard('truncated.bin', [1, 2, 3, 4], cut=3)
shard('big_token.bin', [1, 2, 3, 1500, 5])
EOF
    expect_ok import_bin "$CTRAIN" data import-bin --out shards --tokenizer sp1024 \
        fineweb_train_000000.bin fineweb_train_000001.bin
    expect_grep import_reports 'fineweb_train_000000.bin -> shards/fineweb_train_000000.h5: 1500000 tokens' out
    if [ -s err ]; then fail import_quiet_without_tty "stderr: $(head -c 300 err)"; else pass import_quiet_without_tty; fi
    check import_bin_round_trip "
import h5py, numpy as np
for i in (0, 1):
    name = 'fineweb_train_%06d' % i
    want = np.fromfile(name + '.bin', dtype='<u2', offset=1024)
    with h5py.File('shards/%s.h5' % name, 'r') as f:
        d = f['tokens']
        assert d.dtype == np.uint16 and d.chunks is not None, (d.dtype, d.chunks)
        assert np.array_equal(d[:], want), 'tokens differ in ' + name
        assert int(d.attrs['vocab_size']) == 1024 and int(d.attrs['bos_id']) == -1
        tok = d.attrs['tokenizer']; tok = tok.decode() if isinstance(tok, bytes) else tok
        assert tok == 'sp1024', tok
"
    expect_ok info_imported "$CTRAIN" data info 'shards/*.h5'
    expect_grep info_total 'total \(2 files\) +1500777 ' out
    expect_grep info_sorted_first '^shards/fineweb_train_000000.h5 ' out

    # single output file, copying the byte-level tables of train.h5
    expect_ok import_single_with_luts "$CTRAIN" data import-bin --out one.h5 --vocab-size 256 --bos-id 1 \
        --tokenizer bytes --luts train.h5 bytes.bin
    check import_luts_copied "
import h5py, numpy as np
with h5py.File('one.h5','r') as o, h5py.File('train.h5','r') as t:
    for name in ('base_bytes', 'has_leading_space', 'is_boundary_token'):
        assert np.array_equal(o['tokenizer/' + name][:], t['tokenizer/' + name][:]), name
    assert int(o['tokens'].attrs['bos_id']) == 1
    assert np.array_equal(o['tokens'][:], np.fromfile('bytes.bin', dtype='<u2', offset=1024))
"
    # a tables-only file, as the h5py recipe of docs/data-format.md makes (bool flags here)
    "$PY" -c "
import h5py, numpy as np
with h5py.File('luts_only.h5', 'w') as f:
    f['tokenizer/base_bytes'] = (np.arange(1024) % 5).astype(np.int16)
    f['tokenizer/has_leading_space'] = np.arange(1024) % 3 == 0
    f['tokenizer/is_boundary_token'] = np.arange(1024) < 4
"
    expect_ok import_luts_only_file "$CTRAIN" data import-bin --out luts_copy.h5 --luts luts_only.h5 \
        fineweb_train_000001.bin
    check import_luts_only_copied "
import h5py, numpy as np
with h5py.File('luts_copy.h5','r') as o:
    t = o['tokenizer']
    assert np.array_equal(t['base_bytes'][:], np.arange(1024) % 5)
    assert np.array_equal(t['has_leading_space'][:], (np.arange(1024) % 3 == 0).astype(np.uint8))
    assert np.array_equal(t['is_boundary_token'][:], (np.arange(1024) < 4).astype(np.uint8))
"
    expect_fail import_luts_wrong_vocab 1 "--luts: 'train.h5': /tokenizer/base_bytes has 256 entries, expected vocab_size = 1024" \
        "$CTRAIN" data import-bin --out one1024.h5 --luts train.h5 bytes.bin

    expect_fail bad_magic 1 "shard 'bad_magic.bin' has magic number 12345, expected 20240520" \
        "$CTRAIN" data import-bin --out bad bad_magic.bin
    expect_fail bad_version 1 "shard 'bad_version.bin' has version 2, expected 1" \
        "$CTRAIN" data import-bin --out bad bad_version.bin
    expect_fail truncated 1 "shard 'truncated.bin' size mismatch: .*1032 bytes were expected, but the file has 1029" \
        "$CTRAIN" data import-bin --out bad truncated.bin
    expect_fail token_over_vocab 1 "shard 'big_token.bin': token 3 is 1500, which is >= vocab_size 1024" \
        "$CTRAIN" data import-bin --out bad big_token.bin
    # headers are all checked before anything is converted
    expect_fail bad_shard_stops_all 1 "bad_magic.bin" \
        "$CTRAIN" data import-bin --out bad2 fineweb_train_000001.bin bad_magic.bin
    leftovers=$(find bad bad2 -type f 2>/dev/null | head -5)
    if [ -z "$leftovers" ]; then pass bad_shards_leave_no_files; else fail bad_shards_leave_no_files "$leftovers"; fi
    expect_fail bin_given_to_info 1 "'bytes.bin' is an llm.c/parameter-golf .bin shard.*import-bin" \
        "$CTRAIN" data info bytes.bin
    # many shards, few file descriptors: each shard is open only while it is read
    mkdir -p many
    for i in $(seq -w 1 40); do cp fineweb_train_000001.bin "many/s_$i.bin"; done
    expect_ok import_many_shards_few_fds bash -c "ulimit -n 24 && exec \"\$0\" data import-bin --out many_h5 many/s_*.bin" \
        "$CTRAIN"
    n=$(ls many_h5/*.h5 2>/dev/null | wc -l)
    [ "$n" -eq 40 ] && pass import_many_shards_all_written || fail import_many_shards_all_written "$n of 40 files"
fi

# ---- files written by h5py ----
if need_h5py h5py_file_accepted; then
    "$PY" - <<'EOF'
import h5py, numpy as np
with h5py.File('py.h5', 'w') as f:
    d = f.create_dataset('tokens', data=np.arange(200_000, dtype=np.uint16) % 1000, chunks=True)
    d.attrs['vocab_size'] = 1000          # Python int -> int64
    d.attrs['bos_id'] = 7
    d.attrs['tokenizer'] = 'sp1000 ünïcode'   # Python str -> variable-length UTF-8
    t = f.create_group('tokenizer')
    t['base_bytes'] = np.full(1000, 2, dtype=np.int16)
    t['has_leading_space'] = np.arange(1000) % 2 == 0   # numpy bool
    t['is_boundary_token'] = np.zeros(1000, dtype=np.uint8)
with h5py.File('py_gzip32.h5', 'w') as f:
    d = f.create_dataset('tokens', data=np.arange(100_000, dtype=np.uint32) * 3, compression='gzip')
    d.attrs['vocab_size'] = 300_000
with h5py.File('py_float.h5', 'w') as f:
    f.create_dataset('tokens', data=np.arange(10, dtype=np.float32)).attrs['vocab_size'] = 10
with h5py.File('py_int8.h5', 'w') as f:
    f.create_dataset('tokens', data=np.arange(10, dtype=np.int8)).attrs['vocab_size'] = 10
with h5py.File('py_2d.h5', 'w') as f:
    f.create_dataset('tokens', data=np.zeros((3, 4), dtype=np.uint16)).attrs['vocab_size'] = 10
with h5py.File('py_novocab.h5', 'w') as f:
    f.create_dataset('tokens', data=np.zeros(4, dtype=np.uint16))
with h5py.File('py_empty.h5', 'w') as f:
    f.create_dataset('tokens', data=np.zeros(0, dtype=np.uint16)).attrs['vocab_size'] = 10
with h5py.File('py_oor.h5', 'w') as f:
    f.create_dataset('tokens', data=np.array([1, 2, 3, 10, 4], dtype=np.uint16)).attrs['vocab_size'] = 10
import os
os.makedirs('mixed', exist_ok=True)
for name, vocab in (('mixed/a.h5', 1024), ('mixed/b.h5', 2048)):
    with h5py.File(name, 'w') as f:
        f.create_dataset('tokens', data=np.zeros(4, dtype=np.uint16)).attrs['vocab_size'] = vocab
EOF
    expect_ok h5py_file_accepted "$CTRAIN" data info py.h5
    expect_grep h5py_file_described '^py\.h5 +200000 +uint16 +1000 +7 +yes +sp1000 ünïcode$' out
    expect_ok h5py_gzip_uint32 "$CTRAIN" data info py_gzip32.h5
    expect_grep h5py_gzip_uint32_max 'largest id 299997' out
    expect_fail h5py_float 1 "'py_float.h5': /tokens has dtype float32, expected uint16" "$CTRAIN" data info py_float.h5
    expect_fail h5py_int8 1 "'py_int8.h5': /tokens has dtype int8" "$CTRAIN" data info py_int8.h5
    expect_fail h5py_2d 1 "'py_2d.h5': /tokens has 2 dimensions \[3 x 4\]" "$CTRAIN" data info py_2d.h5
    expect_fail h5py_no_vocab 1 "'py_novocab.h5': /tokens has no vocab_size attribute" "$CTRAIN" data info py_novocab.h5
    expect_fail h5py_empty 1 "'py_empty.h5': /tokens is empty" "$CTRAIN" data info py_empty.h5
    expect_fail token_out_of_range 1 "'py_oor.h5': token 3 of /tokens is 10, which is >= vocab_size 10" \
        "$CTRAIN" data info py_oor.h5
    expect_fail vocab_disagree 1 "'mixed/a.h5' has 1024 but 'mixed/b.h5' has 2048" "$CTRAIN" data info 'mixed/*.h5'
fi

expect_fail info_empty_glob 1 "no files match 'nothing_here_\*\.h5'" "$CTRAIN" data info 'nothing_here_*.h5'
expect_fail info_missing_file 1 "cannot open data file 'absent.h5': No such file" "$CTRAIN" data info absent.h5
expect_fail info_text_file 1 "'a.txt' is not an HDF5 file" "$CTRAIN" data info a.txt

# ---- tokens_crc32: written by the converters, checked by data info, addable with h5py ----
if need_h5py tokens_crc32_of_import && [ -f shards/fineweb_train_000000.h5 ]; then
    check tokens_crc32_of_import "
import h5py, numpy as np, zlib
for i in (0, 1):
    name = 'fineweb_train_%06d' % i
    want = zlib.crc32(np.fromfile(name + '.bin', dtype='<u2', offset=1024).tobytes())
    with h5py.File('shards/%s.h5' % name, 'r') as f:
        got = int(f['tokens'].attrs['tokens_crc32'])
    assert got == want, (name, got, want)
"
    expect_ok tokens_crc32_info "$CTRAIN" data info 'shards/*.h5'
    expect_grep tokens_crc32_info_says 'tokens_crc32: matches in every file' out
    cp shards/fineweb_train_000000.h5 middle.h5
    check change_middle_token "
import h5py
with h5py.File('middle.h5', 'r+') as f:
    d = f['tokens']; d[750000] = (int(d[750000]) + 1) % 1024
"
    expect_fail tokens_crc32_mismatch 1 "'middle.h5': the tokens do not match the file's tokens_crc32 attribute \(it says 0x[0-9a-f]{8}, the tokens give 0x[0-9a-f]{8}\): the file was changed or damaged" \
        "$CTRAIN" data info middle.h5
    check h5py_recipe_adds_crc "
import h5py, numpy as np, zlib
with h5py.File('py_gzip32.h5', 'r') as f:
    t = f['tokens'][()]
with h5py.File('py_crc.h5', 'w') as f:
    d = f.create_dataset('tokens', data=t)
    d.attrs['vocab_size'] = 300000
with h5py.File('py_crc_added.h5', 'w') as f:
    d = f.create_dataset('tokens', data=t)
    d.attrs['vocab_size'] = 300000
    d.attrs['tokens_crc32'] = np.uint32(zlib.crc32(t.astype('<u4').tobytes()))
"
    expect_ok h5py_without_crc "$CTRAIN" data info py_crc.h5
    expect_grep h5py_without_crc_says 'tokens_crc32: no file has one' out
    expect_ok h5py_recipe_crc "$CTRAIN" data info py_crc_added.h5
    expect_grep h5py_recipe_crc_matches 'tokens_crc32: matches in every file' out
fi

# ---- /tokens as a link to another file, or its data in raw files outside: said so, not "damaged" ----
"$PY" - <<'EOF2' || fail make_external_data "h5py could not write the files"
import h5py
t = h5py.File("train.h5", "r")["tokens"][()]
t.astype("<u2").tofile("raw.bin")
with h5py.File("ext_storage.h5", "w") as f:
    f.create_dataset("tokens", shape=t.shape, dtype="<u2", external=[("raw.bin", 0, t.nbytes)]).attrs["vocab_size"] = 256
with h5py.File("ext_link.h5", "w") as f:
    f["tokens"] = h5py.ExternalLink("train.h5", "/tokens")
EOF2
expect_fail info_external_storage 1 "'ext_storage.h5': /tokens keeps its data in 1 external raw file\(s\) outside this file, which ctrain does not support" \
    "$CTRAIN" data info ext_storage.h5
expect_fail info_external_link 1 "'ext_link.h5': /tokens is an external \(other-file\) link, which ctrain does not support" \
    "$CTRAIN" data info ext_link.h5
expect_fail train_external_link 1 "train_files: 'ext_link.h5': /tokens is an external \(other-file\) link" \
    "$CTRAIN" train train_files=ext_link.h5 vocab_size=256 iterations=1 out_dir=extrun

# ---- a huge string attribute (1 MB tokenizer text) is cut when printed ----
"$PY" - <<'EOF2' || fail make_long_attribute "h5py could not write the file"
import h5py, numpy as np
with h5py.File("longattr.h5", "w", libver="latest") as f:
    d = f.create_dataset("tokens", data=np.arange(1000, dtype=np.uint16) % 256)
    d.attrs["vocab_size"] = 256
    d.attrs["tokenizer"] = "t" * 1_000_000
EOF2
expect_ok info_long_attribute "$CTRAIN" data info longattr.h5
[ "$(wc -c <out)" -lt 2000 ] && grep -q '\.\.\. (1000000 bytes in all)' out && pass info_long_attribute_cut \
    || fail info_long_attribute_cut "$(wc -c <out) bytes of output: $(head -c 300 out)"

# ---- a writer makes the folder of its output, as import-bin always did ----
expect_ok from_text_makes_folder "$CTRAIN" data from-text --out new/sub/t.h5 --val-out new/val/v.h5 \
    /usr/share/common-licenses/GPL-3
[ -f new/sub/t.h5 ] && [ -f new/val/v.h5 ] && pass from_text_folder_made || fail from_text_folder_made "$(ls -R new 2>&1)"

# ---- a closed pipe ends the output quietly (no "crashed (signal 13)"), as other tools do ----
"$CTRAIN" data info 'train.h5' 'val.h5' 2>pipe.err | true
rc=${PIPESTATUS[0]}
if { [ $rc = 0 ] || [ $rc = 141 ]; } && [ ! -s pipe.err ]; then pass info_closed_pipe_quiet
else fail info_closed_pipe_quiet "exit $rc: $(head -c 300 pipe.err)"; fi

# ---- an output that is one of the inputs is refused before anything is written ----
printf 'a corpus that must survive\n' >corpus.txt && cp corpus.txt corpus.bak && ln -sf corpus.txt corpus_link.txt
expect_fail from_text_out_is_input 2 "--out 'corpus.txt' is the input 'corpus.txt': writing it would destroy the input" \
    "$CTRAIN" data from-text --out corpus.txt corpus.txt
expect_fail from_text_val_out_links_to_input 2 "--val-out 'corpus_link.txt' is the input 'corpus.txt' \(the same file\)" \
    "$CTRAIN" data from-text --out c.h5 --val-out corpus_link.txt corpus.txt
cmp -s corpus.txt corpus.bak && [ ! -e c.h5 ] && pass from_text_input_untouched || fail from_text_input_untouched "$(ls -l corpus* c.h5 2>&1)"
cp fineweb_train_000001.bin shard.h5
expect_fail import_out_is_input 2 "--out 'shard.h5' is the input 'shard.h5'" "$CTRAIN" data import-bin --out shard.h5 shard.h5
mkdir -p run/checkpoints
expect_fail from_text_into_checkpoints 2 "--out 'run/checkpoints/t.h5' lies in a checkpoints/ folder" \
    "$CTRAIN" data from-text --out run/checkpoints/t.h5 corpus.txt

# ---- a stop (a preempted job's SIGTERM, Slurm's SIGUSR1) ends an import: its partial file is
# removed, an earlier output stays as it was, and the exit is 75 (requeue: the same command again) ----
no_tmp() { [ -z "$(find "$@" -name '*.tmp*' 2>/dev/null)" ]; }
mkdir -p stopped
CTRAIN_FAULT=TERM@import:70000 expect_fail import_bin_stop_exit_75 75 'import stopped by signal 15' \
    "$CTRAIN" data import-bin --out stopped --vocab-size 1024 fineweb_train_000000.bin
no_tmp stopped && [ ! -e stopped/fineweb_train_000000.h5 ] && pass import_bin_stop_no_partial ||
    fail import_bin_stop_no_partial "$(ls -la stopped)"
CTRAIN_FAULT=USR1@import:70000 expect_fail import_bin_usr1_exit_75 75 'import stopped by signal 10' \
    "$CTRAIN" data import-bin --out stopped --vocab-size 1024 fineweb_train_000000.bin
yes 'a line of text to import, long enough to take more than one block' | head -c 3000000 >big.txt
cp train.h5 big.h5 && cp train.h5 big.bak
CTRAIN_FAULT=TERM@import:1000 expect_fail from_text_stop_exit_75 75 'from-text stopped by signal 15.*nothing written' \
    "$CTRAIN" data from-text --out big.h5 --val-out bigv.h5 --val-fraction 0.1 big.txt
no_tmp . && [ ! -e bigv.h5 ] && cmp -s big.h5 big.bak && pass from_text_stop_keeps_outputs ||
    fail from_text_stop_keeps_outputs "$(ls -la big* 2>&1)"

finish
