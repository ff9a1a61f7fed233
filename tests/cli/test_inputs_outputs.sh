#!/usr/bin/env bash
# test_inputs_outputs.sh — inputs are never outputs: every command that writes files refuses,
# with exit 2 and a message naming both paths, an output that is a file it reads (the
# checkpoint, the data files the checkpoint names or the command line gives, a tokenizer's
# tables, a config file, a run's metrics) or another of its outputs, compared by identity (another
# spelling, a symbolic link, a hard link) before anything is written; the input is left
# byte for byte as it was (compared with a copy taken before).
source "$CT_ROOT/tests/cli/lib.sh"

# refused NAME PATTERN CMD... : CMD exits 2 naming both paths (PATTERN), and leaves every watched
# input as it was; a case that changed one is listed in $damaged (judged by untouched_by below),
# and the watched files are put back, so that each case is judged on its own.
watched=()
damaged=""
watch() { # FILES...: take a copy of each, to compare and put back
    local f
    for f in "$@"; do mkdir -p "pristine/$(dirname "$f")" && cp "$f" "pristine/$f" && watched+=("$f"); done
}
refused() {
    local name=$1 pattern=$2 f
    shift 2
    expect_fail "$name" 2 "$pattern" "$@"
    for f in "${watched[@]}"; do
        if ! cmp -s "$f" "pristine/$f"; then damaged+=" $name:$f"; cp "pristine/$f" "$f"; fi
    done
}
# untouched_by NAME : no case so far changed a watched input
untouched_by() { if [ -z "$damaged" ]; then pass "$1"; else fail "$1" "changed:$damaged"; fi; damaged=""; }

mkdir d
"$CTRAIN" data from-text --out d/train.h5 --val-out d/val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; finish; }
run=(train_files=d/train.h5 val_files=d/val.h5 vocab_size=256 num_layers=1 model_dim=32 num_heads=2 num_kv_heads=2
     train_seq_len=32 train_batch_tokens=256 grad_accum_slots=1 val_batch_size=256 iterations=2 val_loss_every=0
     checkpoint_every=0 threads=1)
expect_ok make_run "$CTRAIN" train "${run[@]}" out_dir=r
watch d/train.h5 d/val.h5

# ---- ckpt golf: the artifact and the dequantized weights never over the validation data ----
refused golf_out_is_val_data "--out 'd/val.h5' is the input 'd/val.h5': writing it would destroy the input \(val_files: the checkpoint's validation data\)" \
    "$CTRAIN" ckpt golf r --out d/val.h5
refused golf_out_is_val_data_other_spelling "--out '\./d/\.\./d/val\.h5' is the input 'd/val\.h5' \(the same file\)" \
    "$CTRAIN" ckpt golf r --out ./d/../d/val.h5 --no-eval
ln d/val.h5 val_hard.h5
refused golf_out_is_val_data_hard_link "--out 'val_hard\.h5' is the input 'd/val\.h5' \(the same file\)" \
    "$CTRAIN" ckpt golf r --out val_hard.h5
refused golf_dequantized_is_val_data "--dequantized 'd/val.h5' is the input 'd/val.h5'.*val_files" \
    "$CTRAIN" ckpt golf r --out art.stz --dequantized d/val.h5
[ ! -e art.stz ] && pass golf_refused_writes_nothing || fail golf_refused_writes_nothing "art.stz was written"
mkdir v2 && cp d/val.h5 v2/val_a.h5
watch v2/val_a.h5
refused golf_out_in_val_files_glob "--out 'v2/val_a.h5' is the input 'v2/val_a.h5'.*--val-files: the validation data of the round trip" \
    "$CTRAIN" ckpt golf r --val-files 'v2/*.h5' --out v2/val_a.h5
refused golf_dequantized_in_val_files_glob "--dequantized 'v2/val_a.h5' is the input 'v2/val_a.h5'.*--val-files" \
    "$CTRAIN" ckpt golf r --val-files 'v2/*.h5' --out art.stz --dequantized v2/val_a.h5
refused golf_out_is_train_data "--out 'd/train.h5' is the input 'd/train.h5'.*train_files: the checkpoint's training data" \
    "$CTRAIN" ckpt golf r --out d/train.h5 --no-eval
refused golf_outputs_one_file "--dequantized '\./w\.stz' is the artifact's path too \(--out 'w\.stz', the same file\)" \
    "$CTRAIN" ckpt golf r --out w.stz --dequantized ./w.stz
printf 'print(1)\n' >code.py
watch code.py
refused golf_out_is_code_file "--out 'code.py' is the input 'code.py'.*--code-bytes" \
    "$CTRAIN" ckpt golf r --code-bytes code.py --out code.py --no-eval
untouched_by golf_inputs_untouched

# ---- ckpt export: never over the data files the checkpoint names ----
refused export_out_is_val_data "--out 'd/val.h5' is the input 'd/val.h5'.*val_files: the checkpoint's validation data" \
    "$CTRAIN" ckpt export r --out d/val.h5
ln -s d/train.h5 train_link.h5
refused export_out_links_to_train_data "--out 'train_link.h5' is the input 'd/train.h5' \(the same file\).*train_files" \
    "$CTRAIN" ckpt export r --out train_link.h5
untouched_by export_inputs_untouched

# ---- train: out_dir's files never over the config file or the data it reads ----
watch r/config.txt
cp r/config.txt m.conf && mkdir r4 && ln m.conf r4/metrics.jsonl
watch m.conf
refused train_config_is_out_dir_metrics "out_dir's metrics.jsonl 'r4/metrics.jsonl' is the input 'm\.conf' \(the same file\).*--config" \
    "$CTRAIN" train --config m.conf out_dir=r4
mkdir r5 && ln d/val.h5 r5/config.txt
refused train_val_data_is_out_dir_config "out_dir's config.txt 'r5/config.txt' is the input 'd/val\.h5' \(the same file\).*val_files" \
    "$CTRAIN" train "${run[@]}" out_dir=r5
mkdir -p r2/checkpoints && cp d/train.h5 r2/checkpoints/data.h5
refused train_data_in_checkpoints "train_files 'r2/checkpoints/data.h5' lies in out_dir's checkpoints/ folder" \
    "$CTRAIN" train "${run[@]}" train_files=r2/checkpoints/data.h5 out_dir=r2
[ ! -e r2/config.txt ] && [ ! -e r2/metrics.jsonl ] && pass train_refused_writes_nothing \
    || fail train_refused_writes_nothing "$(ls -A r2)"
mkdir r3 && ln d/val.h5 r3/metrics.jsonl
refused train_metrics_is_val_data "out_dir's metrics.jsonl 'r3/metrics.jsonl' is the input 'd/val.h5' \(the same file\)" \
    "$CTRAIN" train "${run[@]}" out_dir=r3
# --print-config (slurm/submit's check before the queue) makes the same check, so a colliding
# configuration is refused before the job waits, not when it starts
refused print_config_metrics_is_val_data "out_dir's metrics.jsonl 'r3/metrics.jsonl' is the input 'd/val\.h5' \(the same file\)" \
    "$CTRAIN" train "${run[@]}" out_dir=r3 --print-config
refused print_config_config_is_out_dir_metrics "out_dir's metrics.jsonl 'r4/metrics.jsonl' is the input 'm\.conf' \(the same file\)" \
    "$CTRAIN" train --config m.conf out_dir=r4 --print-config --world-size 1
untouched_by train_inputs_untouched

# ---- train: out_dir's own config.txt is the run's record, a --config file to rerun or resume it
# with: read whole before anything is written, then replaced (atomically) by the resolved
# configuration of the run that read it ----
expect_ok own_config_first_run "$CTRAIN" train "${run[@]}" out_dir=rc
expect_ok own_config_rerun "$CTRAIN" train --config rc/config.txt iterations=4
expect_grep own_config_resumes "^resumed from rc/checkpoints/step_00000002\.h5: step 2" "$WORK/out"
expect_grep own_config_trains_further '^\{"step": 4, "val_loss"' rc/metrics.jsonl
expect_grep own_config_holds_new_configuration '^iterations = 4$' rc/config.txt
expect_ok own_config_loads_again "$CTRAIN" train --config rc/config.txt --print-config
expect_same own_config_is_resolved_configuration "configurations" "$(grep -v '^#' rc/config.txt)" "$(grep -v '^#' "$WORK/out")"

# ---- plot: the figure never over a run's metrics.jsonl or config.txt ----
watch r/metrics.jsonl
refused plot_out_is_metrics "--out 'r/metrics.jsonl' is the input 'r/metrics.jsonl'.*a run's metrics" \
    "$CTRAIN" plot r --out r/metrics.jsonl
ln r/config.txt config_hard.png
refused plot_out_is_config "--out 'config_hard\.png' is the input 'r/config.txt' \(the same file\).*a run's configuration" \
    "$CTRAIN" plot r --out config_hard.png
untouched_by plot_inputs_untouched

# ---- data: from-text's two outputs, import-bin's --luts file ----
printf 'a small corpus\n' >t.txt
refused from_text_outputs_one_file "--val-out '\./o\.h5' is the training file's path too \(--out 'o\.h5', the same file\)" \
    "$CTRAIN" data from-text --out o.h5 --val-out ./o.h5 t.txt
[ ! -e o.h5 ] && pass from_text_refused_writes_nothing || fail from_text_refused_writes_nothing "o.h5 was written"
/usr/bin/python3 -c '
import struct
h = [0] * 256
h[0], h[1], h[2] = 20240520, 1, 100
open("s.bin", "wb").write(struct.pack("<256i", *h) + struct.pack("<100H", *[i % 200 for i in range(100)]))
' || fail make_shard "python3 could not write s.bin"
cp d/train.h5 luts.h5
watch luts.h5
refused import_out_is_luts "--out 'luts.h5' is the input 'luts.h5'.*--luts" \
    "$CTRAIN" data import-bin --out luts.h5 --vocab-size 256 --tokenizer bytes --luts luts.h5 s.bin
printf 'not a real model: refused before it is read\n' >m.model
watch m.model
ln -s m.model model_link.h5
refused luts_out_links_to_model "--out 'model_link\.h5' is the input 'm\.model' \(the same file\).*the SentencePiece model" \
    "$CTRAIN" data luts m.model --out model_link.h5
untouched_by data_inputs_untouched
expect_ok import_beside_luts "$CTRAIN" data import-bin --out s.h5 --vocab-size 256 --tokenizer bytes --luts luts.h5 s.bin

finish
