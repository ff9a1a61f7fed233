#!/usr/bin/env bash
# test_train_gpt_env.sh — a run started the way train_gpt.py is (docs/configuration.md,
# "train_gpt.py's environment"): DATA_PATH's shards imported once into an HDF5 copy beside them
# and reused while they are unchanged (changed, added or removed shards import again; ranks
# starting together import once), TOKENIZER_PATH's tables in it (val_bpb), RUN_ID as out_dir,
# max_wallclock_seconds at train_gpt.py's 600, and the command line winning over all of it.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import sentencepiece, numpy' 2>/dev/null || skip_rest "sentencepiece/numpy not importable by $PY (scripts/install-deps.sh --test)"
"$CTRAIN" --version | grep -q '^sentencepiece: yes' || skip_rest "ctrain built without SentencePiece"

mkdir -p data/datasets/fb data/tokenizers
# train_gpt.py's layout: shards (header: magic 20240520, version 1, count; uint16 tokens) and a model
shards() {
    "$PY" - "$@" <<'PY'
import sys, numpy as np
seed = int(sys.argv[1])
rng = np.random.default_rng(seed)
for name in sys.argv[2:]:
    n = 60000 if "train" in name else 20000
    h = np.zeros(256, dtype="<i4"); h[0] = 20240520; h[1] = 1; h[2] = n
    with open("data/datasets/fb/" + name, "wb") as f:
        f.write(h.tobytes()); f.write(rng.integers(0, 400, n, dtype="<u2").tobytes())
PY
}
shards 1 fineweb_train_000000.bin fineweb_train_000001.bin fineweb_val_000000.bin
"$PY" - <<'PY' >/dev/null 2>&1 || { fail make_tokenizer "sentencepiece training failed"; exit 1; }
import sentencepiece as spm
spm.SentencePieceTrainer.train(input='/usr/share/common-licenses/GPL-3', model_prefix='data/tokenizers/fineweb_1024_bpe',
    model_type='bpe', vocab_size=400, byte_fallback=True, add_dummy_prefix=False, pad_id=0, bos_id=1, eos_id=2,
    unk_id=3, minloglevel=2)
PY
export DATA_PATH=data/datasets/fb TOKENIZER_PATH=data/tokenizers/fineweb_1024_bpe.model
export VOCAB_SIZE=400 NUM_LAYERS=1 MODEL_DIM=32 NUM_HEADS=2 NUM_KV_HEADS=1 TRAIN_BATCH_TOKENS=1024 TRAIN_SEQ_LEN=64
export VAL_BATCH_SIZE=4096 ITERATIONS=2 THREADS=1
cache=data/datasets/fb/ctrain-h5

# one command, as `torchrun train_gpt.py` with that environment
RUN_ID=first expect_ok data_path_trains "$CTRAIN" train
cp out first.out
# the copy's folder is named after what it is made from (vocab_size, the tokenizer's checksum, the inputs)
copy_re="$cache/vocab400-sp[0-9a-f]{8}-[0-9a-f]{8}"
expect_grep imported_once "^DATA_PATH: importing 3 shards once into $copy_re " first.out
copy=$(sed -n 's/^DATA_PATH: importing 3 shards once into \([^ ]*\) .*/\1/p' first.out)
missing=""
for f in fineweb_train_000000 fineweb_train_000001 fineweb_val_000000; do [ -f "$copy/$f.h5" ] || missing+=" $f.h5"; done
[ -n "$copy" ] && [ -z "$missing" ] && pass copies_beside_shards || fail copies_beside_shards "missing in '$copy':$missing"
expect_grep run_id_is_out_dir '^  out_dir += runs/first  \(environment: RUN_ID\)$' first.out
[ -f runs/first/checkpoints/step_00000002.h5 ] && pass run_id_run_written || fail run_id_run_written "$(ls -R runs | head)"
expect_grep train_files_from_data_path "^  train_files += $copy_re/fineweb_train_\*\.h5  \(environment: DATA_PATH\)$" first.out
expect_grep wallclock_as_train_gpt '^  max_wallclock_seconds += 600  \(environment: DATA_PATH' first.out
expect_grep tokenizer_tables_val_bpb '^step 2/2  val_loss [0-9.]+  val_bpb [0-9.]+' first.out
# the same tokens as the documented manual import
"$CTRAIN" data import-bin --out manual/ --tokenizer "$TOKENIZER_PATH" --vocab-size 400 --bos-id 1 \
    data/datasets/fb/fineweb_train_000000.bin >/dev/null 2>&1
cmp <(h5dump -d /tokens manual/fineweb_train_000000.h5 | sed 1d) <(h5dump -d /tokens "$copy/fineweb_train_000000.h5" | sed 1d) \
    >/dev/null && pass copy_same_as_import_bin || fail copy_same_as_import_bin "the tokens differ"

# a second run reuses the copy
RUN_ID=second expect_ok data_path_reused "$CTRAIN" train
expect_grep reuse_said "^DATA_PATH: 3 shards, imported earlier into $copy " out
if grep -q 'importing' out; then fail reuse_no_import "$(grep importing out)"; else pass reuse_no_import; fi

# a changed shard (other tokens, same size), a removed one: imported again, no stale copy left
shards 2 fineweb_train_000001.bin
rm data/datasets/fb/fineweb_train_000000.bin
RUN_ID=third expect_ok changed_shards_reimported "$CTRAIN" train
expect_grep changed_shards_import_line "^DATA_PATH: importing 2 shards once" out
stale=$(ls "$cache"/*/fineweb_train_000000.h5 2>/dev/null)
[ -z "$stale" ] && [ ! -e "$copy" ] && pass removed_shard_copy_removed || fail removed_shard_copy_removed "stale copy kept: $stale"
expect_grep changed_shard_trained_on '^train data: 1 file\(s\), 60000 tokens' out

# the ranks of a job start together: one imports, the other waits and reuses its copy
touch data/datasets/fb/fineweb_train_000001.bin
RUN_ID=r0 "$CTRAIN" train >rank0.out 2>&1 &
p0=$!
RUN_ID=r1 "$CTRAIN" train >rank1.out 2>&1
rc1=$?
wait $p0
rc0=$?
n=$(cat rank0.out rank1.out | grep -c '^DATA_PATH: importing')
if [ $rc0 = 0 ] && [ $rc1 = 0 ] && [ "$n" = 1 ] && cat rank0.out rank1.out | grep -q 'imported earlier'
then pass together_import_once; else fail together_import_once "exits $rc0 $rc1, $n imports: $(tail -c 300 rank1.out)"; fi

# the command line (and OUT_DIR, MAX_WALLCLOCK_SECONDS) win over DATA_PATH and RUN_ID
"$CTRAIN" data from-text --out own/train.h5 --val-out own/val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1
RUN_ID=x OUT_DIR=mine MAX_WALLCLOCK_SECONDS=0 expect_ok command_line_wins "$CTRAIN" train --print-config \
    train_files=own/train.h5 val_files=own/val.h5 vocab_size=256
expect_grep command_line_train_files '^train_files = own/train.h5$' out
expect_grep out_dir_over_run_id '^out_dir = mine$' out
expect_grep max_wallclock_env_wins '^max_wallclock_seconds = 0$' out

# CTRAIN_DATA_CACHE puts the copy elsewhere (DATA_PATH read-only on a cluster)
CTRAIN_DATA_CACHE=$WORK/elsewhere RUN_ID=c expect_ok data_cache_elsewhere "$CTRAIN" train
ls elsewhere/vocab400-*/import.txt >/dev/null 2>&1 && pass data_cache_used || fail data_cache_used "$(ls -R elsewhere 2>&1)"

# a DATA_PATH without shards names it and train_gpt.py's layout
mkdir empty
DATA_PATH=empty expect_fail data_path_no_shards 1 "DATA_PATH = 'empty': no fineweb_train_\*\.bin shards in it" \
    "$CTRAIN" train
finish
