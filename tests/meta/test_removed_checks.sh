#!/usr/bin/env bash
# test_removed_checks.sh — the checks that each had a single point of detection are now caught
# through the CLI too: a copy of ctrain is built from a scratch copy of the checkout with three
# checks removed — `ckpt verify`'s content checksum comparison and its loader-cursor check
# (checkpoint/ckpt_verify.c), and the full-file data identity check on resume
# (checkpoint/ckpt_load.c) — and test_ckpt.sh, run by the real runner on that binary, must fail
# the case that reaches each one. Builds only what the change touches (the copy keeps the build's
# object files and times), about a minute on 2 cores.
source "$CT_ROOT/tests/cli/lib.sh"
source "$CT_ROOT/tests/meta/lib.sh"

copy_tree src
mkdir -p src/build && cp -a "$CT_BUILD/obj" "$CT_BUILD/libctrain.a" src/build/
plant plant_no_cursor_check src/checkpoint/ckpt_verify.c '    if (rc == 0) rc = check_cursor(path, m);' \
    '    (void)check_cursor; /* removed by tests/meta/test_removed_checks.sh */'
plant plant_no_content_crc src/checkpoint/ckpt_verify.c '    if (rc == 0 && crc != m->content_crc32)' \
    '    if (0 && crc != m->content_crc32)'
plant plant_no_full_identity src/checkpoint/ckpt_load.c \
    '    return m->file_crc32[i] < 0 || m->file_crc32[i] == f->tokens_crc32;' '    return 1;'
if make -C src --no-print-directory BUILD=build build/ctrain >make.log 2>&1; then pass broken_copy_builds
else fail broken_copy_builds "$(tail -c 800 make.log)"; fi
# only the two changed files were compiled again (and src/infer/golf_code_size.c, the code-size
# stamp, which the build compiles again whenever a source changes: docs/model.md, "The code's size")
n_compiled=$(grep -E '^(cc|gcc|clang).* -c ' make.log | grep -vc 'src/infer/golf_code_size\.c')
[ "$n_compiled" = 2 ] && pass only_changed_files_rebuilt || fail only_changed_files_rebuilt "$n_compiled files compiled: $(grep -E ' -c ' make.log | grep -oE '[^ ]+\.c ' | head)"

keep_only src cli/test_ckpt
fake_build fake "$WORK/src/build/ctrain"
expect_copy_fails removed_checks_are_caught "$WORK/src" "$WORK/fake" \
    "FAIL test_ckpt/verify_content_checksum_mismatch: expected exit 1, got 0" \
    "FAIL test_ckpt/verify_cursor_past_file: expected exit 1, got 0" \
    "FAIL test_ckpt/resume_refuses_changed_middle_token: expected exit 1, got 0"
finish
