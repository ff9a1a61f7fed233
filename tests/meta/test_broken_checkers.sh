#!/usr/bin/env bash
# test_broken_checkers.sh — tests whose own checker breaks must fail, not vanish: in a scratch
# copy of the checkout, with the real runner, each of these deliberate bugs must make the suite
# fail, naming the case:
#   - parity.py (the PyTorch parity check) raising after its reference training;
#   - the fuzz test's generator making no files (nothing would be judged);
#   - the docs path checker raising (an empty list of missing paths would pass);
#   - test_train's loss reader printing nothing (two empty loss lists are equal).
source "$CT_ROOT/tests/cli/lib.sh"
source "$CT_ROOT/tests/meta/lib.sh"
fake_build build "$CTRAIN"

copy_tree parity && keep_only parity cli/test_parity
plant plant_parity_raise parity/tests/parity/parity.py \
    '    losses_t, model, adams, momentum, averages = ref_gpt.train(cfg, params, stream, steps)' \
    '    losses_t, model, adams, momentum, averages = ref_gpt.train(cfg, params, stream, steps)
    raise KeyError("planted after the reference training")'
expect_copy_fails parity_checker_raising_fails "$WORK/parity" "$WORK/build" \
    'FAIL test_parity/tied_checker: parity.py exited with status 1 without a verdict.*KeyError' \
    'FAIL test_parity/untied_clip_checker: parity.py exited with status 1'

copy_tree fuzz && keep_only fuzz cli/test_fuzz
plant plant_fuzz_no_files fuzz/tests/cli/test_fuzz.sh 'for k in range(count):' 'for k in range(0):'
expect_copy_fails fuzz_empty_generator_fails "$WORK/fuzz" "$WORK/build" \
    'FAIL test_fuzz/fuzz_checkpoint_verify: ckpts holds 0 files, expected 250: the generator failed' \
    'FAIL test_fuzz/fuzz_data_info: datas holds 0 files, expected 250'

copy_tree docs && keep_only docs cli/test_docs
plant plant_docs_checker_raise docs/tests/cli/test_docs.sh 'root = sys.argv[1]' 'root = sys.argv[1]
raise ImportError("planted")'
expect_copy_fails docs_checker_raising_fails "$WORK/docs" "$WORK/build" \
    'FAIL test_docs/docs_name_existing_paths: the path checker exited with status 1: .*ImportError'

copy_tree train && keep_only train cli/test_train
plant plant_empty_losses train/tests/cli/test_train.sh \
    "losses() { /usr/bin/python3 -c 'import json,sys; [print(repr(json.loads(l).get(\"train_loss\", json.loads(l).get(\"val_loss\")))) for l in open(sys.argv[1])]' \"\$1\"; }" \
    'losses() { :; }'
expect_copy_fails empty_losses_fail "$WORK/train" "$WORK/build" \
    'FAIL test_train/bitwise_across_thread_counts: no losses to compare' 'FAIL test_train/bitwise_across_runs: no losses to compare'
finish
