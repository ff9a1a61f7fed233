#!/usr/bin/env bash
# test_train_gpt_env.sh — a run started the way train_gpt.py is (docs/configuration.md,
# "train_gpt.py's environment"): DATA_PATH's shards imported once into an HDF5 copy beside them
# and reused while they are unchanged (changed, added or removed shards import again; ranks
# starting together import once), TOKENIZER_PATH's tables in it (val_bpb), RUN_ID as out_dir,
# max_wallclock_seconds at train_gpt.py's 600, and the command line winning over all of it.
# A failed or stopped import (exit 75) leaves every copy as it was; another TOKENIZER_PATH or
# changed shards get a copy of their own beside one a run is reading; without RUN_ID each run
# gets a fresh folder (the Slurm job's under Slurm, so a requeue resumes).
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import sentencepiece, numpy' 2>/dev/null || skip_rest_python "sentencepiece/numpy not importable by $PY (scripts/install-deps.sh --test)"
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

# every file of every copy, with its checksum (the lock files aside): what a failed or stopped
# import must leave exactly as it was
copies() { (cd "$cache" && find . -type f ! -name '*.lock' | sort | xargs -r md5sum); }
tmp_left() { find "$cache" -name '*.tmp*' | head -3; }
before=$(copies)

# a re-import that fails leaves the good copy as it was, and names the variable to set: a
# VOCAB_SIZE below the shards' largest token (no tokenizer: run where train_gpt.py's default is absent)
mkdir notok
(cd notok && env -u TOKENIZER_PATH DATA_PATH="$WORK/data/datasets/fb" VOCAB_SIZE=300 RUN_ID=v "$CTRAIN" train) \
    >small.out 2>small.err
rc=$?
[ $rc = 1 ] && grep -q "which is >= vocab_size 300 (set VOCAB_SIZE)" small.err && pass failed_import_names_vocab_size \
    || fail failed_import_names_vocab_size "exit $rc: $(grep -m1 'vocab_size 300' small.err)"
expect_same failed_vocab_import_keeps_copy "copies" "$before" "$(copies)"
# ... and a TOKENIZER_PATH that is not a SentencePiece model
echo "not a model" >bogus.model
TOKENIZER_PATH=bogus.model RUN_ID=t expect_fail failed_import_names_tokenizer_path 1 "TOKENIZER_PATH: .*bogus\.model" \
    "$CTRAIN" train
expect_same failed_tokenizer_import_keeps_copy "copies" "$before" "$(copies)"
left=$(tmp_left)
[ -z "$left" ] && pass failed_import_no_partial_files || fail failed_import_no_partial_files "$left"
RUN_ID=after expect_ok after_failed_import_reuses "$CTRAIN" train
expect_grep after_failed_import_reused "^DATA_PATH: 2 shards, imported earlier into $copy_re " out
# import-bin's own message still names its flag
"$CTRAIN" data import-bin --out bin300/ --vocab-size 300 data/datasets/fb/fineweb_val_000000.bin >/dev/null 2>bin300.err
grep -q "which is >= vocab_size 300 (set --vocab-size)" bin300.err && pass import_bin_names_its_flag \
    || fail import_bin_names_its_flag "$(tail -c 300 bin300.err)"

# a stop (SIGTERM, or stop_signal's SIGUSR1) during a first import: exit 75, the partial import
# removed, the copies made before untouched; the next start imports it whole
touch data/datasets/fb/fineweb_val_000000.bin
CTRAIN_FAULT=TERM@import:70000 RUN_ID=s1 expect_fail term_during_import_exit_75 75 \
    "DATA_PATH: stopped by signal 15 while importing its shards" "$CTRAIN" train
left=$(tmp_left)
[ -z "$left" ] && pass term_during_import_no_partial || fail term_during_import_no_partial "$left"
expect_same term_during_import_keeps_copies "copies" "$before" "$(copies)"
CTRAIN_FAULT=USR1@import:30000 RUN_ID=s2 expect_fail usr1_during_import_exit_75 75 "stopped by signal 10" "$CTRAIN" train
left=$(tmp_left)
[ -z "$left" ] && expect_same usr1_during_import_keeps_copies "copies" "$before" "$(copies)" \
    || fail usr1_during_import_keeps_copies "partial files left: $left"
RUN_ID=s3 expect_ok after_stop_imports_whole "$CTRAIN" train
expect_grep after_stop_import_line "^DATA_PATH: importing 2 shards once into $copy_re " out

# a copy in use is never replaced or removed under the run reading it: a run stopped (SIGSTOP)
# at step 2 while another TOKENIZER_PATH, then changed shards, import beside it
"$PY" - <<'PY' >/dev/null 2>&1 || fail make_tokenizer_2 "sentencepiece training failed"
import sentencepiece as spm
spm.SentencePieceTrainer.train(input='/usr/share/common-licenses/Apache-2.0', model_prefix='tok2', model_type='bpe',
    vocab_size=400, byte_fallback=True, add_dummy_prefix=False, pad_id=0, bos_id=1, eos_id=2, unk_id=3, minloglevel=2)
PY
CTRAIN_FAULT=STOP@2.0 RUN_ID=long ITERATIONS=4 "$CTRAIN" train >long.out 2>&1 &
plong=$!
for _ in $(seq 600); do
    case $(ps -o stat= -p $plong) in T*) break ;; esac
    sleep 0.1
done
long_copy=$(sed -n 's/^DATA_PATH: 2 shards, imported earlier into \([^ ]*\) .*/\1/p' long.out)
TOKENIZER_PATH=tok2.model RUN_ID=tok2 expect_ok other_tokenizer_while_running "$CTRAIN" train
if grep -qE "^DATA_PATH: importing 2 shards once into $cache/vocab400-sp[0-9a-f]{8}-" out && ! grep -q "into $long_copy " out
then pass other_tokenizer_own_copy; else fail other_tokenizer_own_copy "$(grep DATA_PATH out | head -3)"; fi
touch data/datasets/fb/fineweb_train_000001.bin
RUN_ID=moved expect_ok changed_shards_while_running "$CTRAIN" train
expect_grep copy_in_use_kept "^DATA_PATH: kept $long_copy, made from the shards as they were before they changed: a run is reading it" out
kill -CONT $plong
wait $plong
rc=$?
[ -n "$long_copy" ] && [ $rc = 0 ] && grep -q '^step 4/4 ' long.out && pass copy_in_use_survives \
    || fail copy_in_use_survives "copy '$long_copy', exit $rc: $(grep -m2 'error' long.out)"
RUN_ID=later expect_ok after_run_ends "$CTRAIN" train
expect_grep stale_copy_removed_once_unused "^DATA_PATH: removed $long_copy, made from the shards as they were" out

# without RUN_ID or out_dir each run is a new one in a folder of its own (train_gpt.py's fresh
# run id), said at the start; not a resume of the last run with the new hyperparameters
mkdir fresh
(cd fresh && env -u RUN_ID DATA_PATH="$WORK/data/datasets/fb" TOKENIZER_PATH="$WORK/$TOKENIZER_PATH" MATRIX_LR=0.04 \
    "$CTRAIN" train) >fresh1.out 2>&1
rc1=$?
(cd fresh && env -u RUN_ID DATA_PATH="$WORK/data/datasets/fb" TOKENIZER_PATH="$WORK/$TOKENIZER_PATH" MATRIX_LR=0.02 \
    "$CTRAIN" train) >fresh2.out 2>&1
rc2=$?
d1=$(sed -n 's/^run folder: \(runs\/[^ ]*\) (a fresh run id.*/\1/p' fresh1.out)
d2=$(sed -n 's/^run folder: \(runs\/[^ ]*\) (a fresh run id.*/\1/p' fresh2.out)
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ -n "$d1" ] && [ -n "$d2" ] && [ "$d1" != "$d2" ] \
    && [ -f "fresh/$d1/checkpoints/step_00000002.h5" ] && [ -f "fresh/$d2/checkpoints/step_00000002.h5" ]
then pass fresh_run_each_time; else fail fresh_run_each_time "exits $rc1 $rc2, folders '$d1' '$d2': $(tail -c 200 fresh2.out)"; fi
if grep -qE 'resumed from|already finished' fresh2.out; then fail second_call_not_resumed "$(grep -E 'resumed|finished' fresh2.out)"
else expect_grep second_call_not_resumed '^  out_dir += runs/[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}  \(environment: DATA_PATH without RUN_ID: a fresh run id\)$' fresh2.out; fi
# under Slurm the run id is the job's: a requeued job (same SLURM_JOB_ID) resumes its run
(cd fresh && env -u RUN_ID SLURM_JOB_ID=4242 DATA_PATH="$WORK/data/datasets/fb" TOKENIZER_PATH="$WORK/$TOKENIZER_PATH" \
    "$CTRAIN" train) >slurm1.out 2>&1
(cd fresh && env -u RUN_ID SLURM_JOB_ID=4242 ITERATIONS=3 DATA_PATH="$WORK/data/datasets/fb" \
    TOKENIZER_PATH="$WORK/$TOKENIZER_PATH" "$CTRAIN" train) >slurm2.out 2>&1
rc=$?
[ $rc = 0 ] && grep -q '^run folder: runs/4242 (the Slurm job' slurm1.out \
    && grep -q '^resumed from runs/4242/checkpoints/step_00000002.h5' slurm2.out && pass slurm_requeue_resumes_its_run \
    || fail slurm_requeue_resumes_its_run "exit $rc: $(grep -E 'run folder|resumed' slurm1.out slurm2.out)"
expect_ok slurm_array_task_run_id env -u RUN_ID SLURM_JOB_ID=4303 SLURM_ARRAY_JOB_ID=4300 SLURM_ARRAY_TASK_ID=3 \
    "$CTRAIN" train --print-config
expect_grep slurm_array_task_out_dir '^out_dir = runs/4300_3$' out
expect_fail mpiexec_ranks_need_run_id 2 "cannot agree on a fresh run id outside Slurm; set RUN_ID" \
    env -u RUN_ID PMI_SIZE=2 "$CTRAIN" train --print-config

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
