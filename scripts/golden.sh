#!/usr/bin/env bash
# golden.sh — what a ctrain build prints and writes for a fixed set of commands, to show that a
# change meant to move code (issue 35's splits) changed no behaviour:
#   scripts/golden.sh record CTRAIN DIR    help of every command, errors, the data tools, two CPU
#                                          training runs (one stopped and resumed), checkpoints,
#                                          export, golf, sample; timings and dates masked
#   scripts/golden.sh compare CTRAIN A B   the same text, every checkpoint the same bits (ckpt diff
#                                          --exact), artifacts and exports byte for byte, the data
#                                          files the same content (h5dump); prints SAME or DIFFERENT
# Record with the build before the change and the one after, then compare (docs/testing.md).
set -u
case "${1:-}" in
    record) [ $# = 3 ] || { echo "usage: scripts/golden.sh record CTRAIN DIR" >&2; exit 2; } ;;
    compare) [ $# = 4 ] || { echo "usage: scripts/golden.sh compare CTRAIN A B" >&2; exit 2; } ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
mode=$1
shift

if [ "$mode" = compare ]; then
    ct=$1; a=$2; b=$3; bad=0
    tmp=$(mktemp)
    diff -r "$a/txt" "$b/txt" || bad=1
    for f in $(cd "$a" && find run* -name 'step_*.h5' | sort); do
        "$ct" ckpt diff "$a/$f" "$b/$f" --exact >"$tmp" 2>&1 || { echo "DIFF $f"; cat "$tmp"; bad=1; }
    done
    for f in $(cd "$a" && find . -name '*.safetensors' -o -name '*.stz' -o -name '*.bin' | sort); do
        cmp "$a/$f" "$b/$f" || bad=1
    done
    for f in $(cd "$a" && find d shards sp_luts.h5 -name '*.h5' | sort); do
        cmp <(h5dump "$a/$f" | sed 1d) <(h5dump "$b/$f" | sed 1d) >/dev/null || { echo "DIFF $f"; bad=1; }
    done
    echo "checked $(ls "$a/txt" | wc -l) outputs, $(cd "$a" && find run* -name 'step_*.h5' | wc -l) checkpoints"
    rm -f "$tmp"
    [ $bad = 0 ] && echo SAME || echo DIFFERENT
    exit $bad
fi

ct=$(readlink -f "$1"); out=$2
rm -rf "$out"; mkdir -p "$out/txt"; cd "$out"
export OMP_NUM_THREADS=1 CTRAIN_NO_COLOR=1
mask() { sed -E -e 's/[0-9]+(\.[0-9]+)? ?(ms|s|µs|us|min|h|tok\/s|M tok\/s|tokens\/s|GiB\/s|MB\/s|B\/s)\b/<T>/g' \
                -e 's/(eta|ETA|elapsed|time|train_time)[=: ]+[^ ,]+/\1=<T>/g' -e 's/pid [0-9]+/pid <P>/g'  -e 's/(content_crc32:? *)0x[0-9a-f]+/\1<CRC>/g' \
                -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+Z?/<DATE>/g'; }
run() { local name=$1; shift; { "$@"; echo "rc=$?"; } >"txt/$name.raw" 2>&1; mask <"txt/$name.raw" >"txt/$name.txt"; rm "txt/$name.raw"; }
# help of every command and subcommand
run help $ct --help
for c in train data sample plot launch-check ckpt; do run "help_$c" $ct $c --help; done
for c in import-bin from-text info luts; do run "help_data_$c" $ct data $c --help; done
for c in info verify diff export golf; do run "help_ckpt_$c" $ct ckpt $c --help; done
# errors
run err_nocmd $ct frobnicate
run err_key $ct train iteration=5
run err_value $ct train iterations=abc
run err_value2 $ct train model_dim=7 num_heads=3
run err_nodata $ct train train_files=/nonexistent.h5
run err_info $ct data info /nonexistent.h5
run err_ckpt $ct ckpt info /nonexistent.h5
# data tools
mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | LC_ALL=C sort)
run from_text $ct data from-text --out d/train.h5 --val-out d/val.h5 --val-fraction 0.1 "${texts[@]}"
run info $ct data info d/train.h5 d/val.h5
/usr/bin/python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(1)
for name, n in (("fineweb_train_000000.bin", 300000), ("fineweb_val_000000.bin", 70000)):
    h = np.zeros(256, dtype="<i4"); h[0] = 20240520; h[1] = 1; h[2] = n
    with open(name, "wb") as f:
        f.write(h.tobytes()); f.write(rng.integers(0, 1024, n, dtype="<u2").tobytes())
PY
run import_bin $ct data import-bin --out shards fineweb_train_000000.bin fineweb_val_000000.bin
run import_info $ct data info 'shards/*.h5'
run import_bad $ct data import-bin --out bad d/train.h5
/usr/bin/python3 - <<'PY' >/dev/null 2>&1
import sentencepiece as spm
spm.SentencePieceTrainer.train(input='/usr/share/common-licenses/GPL-3', model_prefix='sp', model_type='bpe', vocab_size=400,
  byte_fallback=True, add_dummy_prefix=False, pad_id=0, bos_id=1, eos_id=2, unk_id=3, minloglevel=2)
PY
run luts $ct data luts sp.model --out sp_luts.h5
h5dump sp_luts.h5 >txt/luts_h5dump.txt 2>&1
for f in d/train.h5 d/val.h5; do h5dump -H "$f" | sed '1d' >"txt/h5dump_$(basename $f).txt"; done
# two training runs (the second stopped at step 6 and resumed)
cfg=(vocab_size=256 num_layers=2 model_dim=64 num_heads=4 num_kv_heads=2 train_seq_len=32 train_batch_tokens=512
     grad_accum_slots=2 iterations=12 warmdown_iters=4 val_loss_every=6 val_batch_size=2048 train_log_every=3
     checkpoint_every=6 train_files=d/train.h5 val_files=d/val.h5 device=cpu threads=1)
run train_a $ct train "${cfg[@]}" out_dir=runA
CTRAIN_FAULT=TERM@6.0 run train_b1 $ct train "${cfg[@]}" out_dir=runB
run train_b2 $ct train "${cfg[@]}" out_dir=runB
run ckinfo $ct ckpt info runA
run ckverify $ct ckpt verify runA/checkpoints/*.h5
run ckdiff $ct ckpt diff runA runB --exact
run export $ct ckpt export runA --out runA/model.safetensors
run golf $ct ckpt golf runA
run sample $ct sample runA --prompt "The " --tokens 40 --seed 3
run sample_greedy $ct sample runA --prompt "GNU" --tokens 20 --temperature 0
# the CUDA backend where it cannot run
run cuda_nogpu $ct train "${cfg[@]}" out_dir=runC device=cuda
