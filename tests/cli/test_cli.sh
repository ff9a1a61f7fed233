#!/usr/bin/env bash
# test_cli.sh — command-line conventions: --help everywhere, --version, exit codes
# (0 ok, 1 runtime failure, 2 usage/config error), errors on stderr naming the key or file.
source "$CT_ROOT/tests/cli/lib.sh"

expect_ok help "$CTRAIN" --help
expect_grep help_lists_commands 'train' out
expect_ok version "$CTRAIN" --version
expect_grep version_reports_hdf5 '^hdf5: 1\.' out
expect_grep version_reports_blas '^blas: OpenBLAS' out
expect_grep version_reports_mpi '^mpi: ' out
expect_grep version_reports_cuda '^cuda: ' out
expect_ok train_help "$CTRAIN" train --help
expect_grep train_help_lists_keys 'matrix_lr +float +0.04' out
expect_grep train_help_says_warmup_ignored 'warmup_steps.*ignored' out
expect_fail no_command 2 'usage' "$CTRAIN"
expect_fail unknown_command 2 "unknown command 'frobnicate'" "$CTRAIN" frobnicate
expect_fail unknown_option 2 "unknown option '--bogus'" "$CTRAIN" train --bogus
expect_fail unknown_key 2 "unknown configuration key 'num_layerz'" "$CTRAIN" train train_files=x num_layerz=3
# a misspelt key: the nearest key by edit distance, when one is close
expect_fail unknown_key_suggests 2 "unknown configuration key 'iteration'; did you mean 'iterations'\?" \
    "$CTRAIN" train train_files=x iteration=3
expect_fail unknown_key_suggests_typo 2 "unknown configuration key 'val_loss_evry'; did you mean 'val_loss_every'\?" \
    "$CTRAIN" train train_files=x val_loss_evry=3
expect_fail unknown_key_suggests_missing_underscore 2 "'matrixlr'; did you mean 'matrix_lr'\?" \
    "$CTRAIN" train train_files=x matrixlr=0.1
expect_fail unknown_key_far_no_suggestion 2 "unknown configuration key 'zzzzzzzzzzzz' \(see" \
    "$CTRAIN" train train_files=x zzzzzzzzzzzz=1
# train_gpt.py's upper-case spellings are keys too
expect_ok upper_case_keys "$CTRAIN" train --print-config train_files=x TRAIN_SEQ_LEN=64 ITERATIONS=10
expect_grep upper_case_key_set '^train_seq_len = 64$' out
printf 'TRAIN_SEQ_LEN = 64\ntrain_seq_len = 128\n' >twice.conf
expect_fail upper_and_lower_case_twice 2 "train_seq_len is set twice in this file \(first on line 1\)" \
    "$CTRAIN" train train_files=x --config twice.conf
expect_fail bad_int 2 "num_layers = 'three' is not an integer" "$CTRAIN" train train_files=x num_layers=three
expect_fail heads_not_dividing 2 'model_dim = 512 is not divisible by num_heads = 7' \
    "$CTRAIN" train train_files=x num_heads=7
expect_fail seq_not_dividing 2 'train_seq_len = 1000 does not divide' "$CTRAIN" train train_files=x train_seq_len=1000
expect_fail missing_train_files 2 'train_files is not set' "$CTRAIN" train
expect_fail missing_config_file 2 "cannot open config file 'nope.conf'" "$CTRAIN" train --config nope.conf
printf 'num_layers = 2\nmodel_dim: 3\n' >bad.conf
expect_fail bad_config_line 2 'bad.conf:2' "$CTRAIN" train --config bad.conf

# config file < command line; --print-config writes a loadable file
printf 'num_layers = 2   # small\ntrain_files = "a b/*.h5"\nmatrix_lr = 0.5\n' >run.conf
expect_ok print_config "$CTRAIN" train --config run.conf matrix_lr=0.25 --print-config
cp out printed.conf
expect_grep cli_overrides_file '^matrix_lr = 0.25$' printed.conf
expect_grep file_value_kept '^num_layers = 2$' printed.conf
expect_grep spaced_value_kept '^train_files = a b/\*.h5$' printed.conf
expect_ok print_hash_value "$CTRAIN" train train_files=x 'out_dir=runs/#1' --print-config
expect_grep hash_value_quoted '^out_dir = "runs/#1"$' out
expect_ok printed_config_reloads "$CTRAIN" train --config printed.conf --print-config
if cmp -s out printed.conf; then pass print_config_round_trip; else fail print_config_round_trip "$(diff printed.conf out | head)"; fi

# train_gpt.py's environment: config file < environment < command line
printf 'iterations = 7\ntrain_seq_len = 32\nmatrix_lr = 0.5\n' >env.conf
expect_ok env_read env ITERATIONS=10 TRAIN_SEQ_LEN=64 VAL_LOSS_EVERY=5 "$CTRAIN" train train_files=x --config env.conf \
    matrix_lr=0.25 TRAIN_SEQ_LEN=128 --print-config
expect_grep env_over_file '^iterations = 10$' out
expect_grep env_key_set '^val_loss_every = 5$' out
expect_grep command_line_over_env '^train_seq_len = 128$' out
expect_grep command_line_over_file '^matrix_lr = 0.25$' out
expect_fail env_bad_value 2 "environment variable ITERATIONS: iterations = 'ten' is not an integer" \
    env ITERATIONS=ten "$CTRAIN" train train_files=x --print-config
expect_fail env_refused_names_variable 2 "from the environment: TRAIN_SEQ_LEN" \
    env TRAIN_SEQ_LEN=1000 "$CTRAIN" train train_files=x
# lower-case variables are not keys (only train_gpt.py's upper-case spellings are read)
expect_ok env_lower_case_ignored env iterations=3 "$CTRAIN" train train_files=x --print-config
expect_grep env_lower_case_default '^iterations = 20000$' out

# several --config files: read in order, every file's keys taken, a later file's value winning;
# the banner at the start of a run names the file each value came from
printf 'num_layers = 2\nmodel_dim = 64\nmatrix_lr = 0.5\n' >base.conf
printf 'model_dim = 32\nnum_heads = 2\nnum_kv_heads = 2\n' >over.conf
expect_ok configs_layered "$CTRAIN" train --config base.conf --config=over.conf train_files=x --print-config
expect_grep configs_first_file_kept '^num_layers = 2$' out
expect_grep configs_first_file_float_kept '^matrix_lr = 0\.5$' out
expect_grep configs_later_file_wins '^model_dim = 32$' out
expect_grep configs_later_file_key '^num_heads = 2$' out
expect_ok configs_other_order "$CTRAIN" train --config over.conf --config base.conf train_files=x --print-config
expect_grep configs_order_decides '^model_dim = 64$' out
# a run without data stops at the data (exit 1), after the banner
"$CTRAIN" train --config base.conf --config over.conf train_files='nothing_here_*.h5' out_dir=o2 >banner.out 2>&1
expect_grep configs_banner_names_first_file '^  num_layers += 2  \(config file base\.conf\)$' banner.out
expect_grep configs_banner_names_later_file '^  model_dim += 32  \(config file over\.conf\)$' banner.out

# the configuration files shipped beside the sbatch scripts load and validate
for f in "$CT_ROOT"/slurm/*.conf; do
    expect_ok "slurm_conf_$(basename "$f" .conf)" "$CTRAIN" train --config "$f" --print-config
done

# a launch check inside a Slurm job but not started by srun is no launch of the job: it fails
expect_fail launch_check_outside_srun 1 "SLURM_NTASKS=8 but this process was not started by srun: 1 of 8 tasks runs" \
    env -u SLURM_PROCID -u SLURM_STEP_ID -u PMI_FD SLURM_JOB_ID=5 SLURM_NTASKS=8 "$CTRAIN" launch-check

expect_fail missing_data 1 "train_files.*no files match 'nothing_here_\*.h5'" \
    "$CTRAIN" train train_files='nothing_here_*.h5' out_dir=o

finish
