#!/usr/bin/env bash
# test_planted_bugs.sh — the record stack's bugs that once slipped past the suite stay caught
# (issue 61): in a scratch copy of the checkout, one bug at a time is planted in the CPU code,
# only what it touches is built (each bug on a fresh copy of the build's objects), and the real
# runner, run on the affected test programs only, must fail naming the case that sees it:
#   muon_wd_on_adam       Adam's groups decayed by muon_wd    test_cpu_optim, test_parity's optim_tied
#                         (the parity cases had muon_wd = adam_wd, so this passed them all)
#   ln_scale_formula      1/sqrt(l+2) for block l's factor    test_cpu_record_ops' test_ln_scale
#                         (only the PyTorch parity saw it)
#   golf_int6_divisor     the artifact's int6 scale rowmax/32 test_golf's golf6_bytes_match_pytorch
#                         (its fixture's rows all sat at the 1/31 floor)
#   qat_int6_divisor      QAT's int6 scale rowmax/32          test_cpu_record_ops, test_parity's
#                                                             optim_untied_swa (rows above 1)
#   rope_table_frequency  RoPE frequencies base^(-2i/(rd+2))  test_cpu_record_ops' test_partial_rope
#                         (its full-RoPE check ran one call twice, its reference took the tables)
#   rope_ntk_head_dim     NTK scaling with head_dim for r     test_parity's record and record_full
#                         (moves the loss by 5e-6 relative: losses, not only weights)
# and, without a bug, test_parity with PyTorch hidden under CI=true must fail, not skip.
# About 4 minutes on 2 cores.
source "$CT_ROOT/tests/cli/lib.sh"
source "$CT_ROOT/tests/meta/lib.sh"
if ! /usr/bin/python3 -c 'import torch, h5py, zstandard' 2>/dev/null; then
    skip_rest_python "python3-torch / python3-h5py / python3-zstandard not installed (the programs it runs compare with PyTorch)"
fi

copy_tree src

# bug NAME FILE OLD NEW "MAKE TARGETS" "PROGRAMS" PATTERN...: OLD (one line of FILE) becomes NEW,
# the targets (files of the build folder, or make options: "-o libctrain.a") are built in the
# copy's folder b_NAME (the build's objects, copied fresh), the programs run on it and must fail
# with every PATTERN; then FILE is put back as it was.
bug() {
    local name=$1 file=$WORK/src/$2 old=$3 new=$4 targets=$5 programs=$6 target
    shift 6
    cp -p "$file" "$WORK/saved" # -p: its time, so that the next bug's fresh objects are not older
    plant "plant_$name" "$file" "$old" "$new"
    mkdir -p "src/b_$name" && cp -a "$CT_BUILD/obj" "$CT_BUILD/libctrain.a" "src/b_$name/"
    local made=()
    for target in $targets; do # the build folder's files; options (-o) as they are
        if [ "${target#-}" = "$target" ]; then made+=("b_$name/$target"); else made+=("$target"); fi
    done
    if make -C src --no-print-directory BUILD="b_$name" "${made[@]}" >"$name.make.log" 2>&1; then
        expect_programs_fail "${name}_is_caught" "$WORK/src" "$WORK/src/b_$name" "$programs" "$@"
    else
        fail "${name}_is_caught" "building the planted copy failed: $(tail -c 800 "$name.make.log")"
    fi
    cp -p "$WORK/saved" "$file"
    rm -rf "src/b_$name"
}

bug muon_wd_on_adam src/backend/backend_common.c \
    '    case PARAM_SCALAR: lr = backend_adam_lr(group, h), wd = h->adam_wd; break;' \
    '    case PARAM_SCALAR: lr = backend_adam_lr(group, h), wd = h->muon_wd; break;' \
    "ctrain tests/test_cpu_optim" "unit/test_cpu_optim cli/test_parity" \
    'FAIL test_cpu_optim/step_decays_each_group_by_its_own_wd' 'FAIL parity_optim_tied/weights'

# a header every object includes: only the unit test is compiled again (-o: the library stands)
bug ln_scale_formula src/model/model.h \
    '    return s->ln_scale ? 1.0f / sqrtf((float)(layer + 1)) : 1.0f;' \
    '    return s->ln_scale ? 1.0f / sqrtf((float)(layer + 2)) : 1.0f;' \
    "-o libctrain.a tests/test_cpu_record_ops" "unit/test_cpu_record_ops" \
    'FAIL test_cpu_record_ops/test_ln_scale'

bug golf_int6_divisor src/infer/golf_quant.c \
    '        float s = row_max / 31.0f;' '        float s = row_max / 32.0f;' \
    "ctrain" "cli/test_golf" \
    'FAIL test_golf/golf6_bytes_match_pytorch'

bug qat_int6_divisor kernels/cpu/cpu_fake_quant.c \
    '        float scale = row_max / 31.0f;' '        float scale = row_max / 32.0f;' \
    "ctrain tests/test_cpu_record_ops" "unit/test_cpu_record_ops cli/test_parity" \
    'FAIL test_cpu_record_ops/test_fake_quant_int6' 'FAIL parity_optim_untied_swa/(losses|weights)'

bug rope_table_frequency kernels/rope_tables.c \
    '        float exponent = (float)(2 * i) / (float)head_dim;' \
    '        float exponent = (float)(2 * i) / (float)(head_dim + 2);' \
    "tests/test_cpu_record_ops" "unit/test_cpu_record_ops" \
    'FAIL test_cpu_record_ops/test_partial_rope'

bug rope_ntk_head_dim src/model/model.c \
    '    double r = s->rope_dims, scale = (double)seq_len / (double)s->rope_train_seq_len;' \
    '    double r = s->head_dim, scale = (double)seq_len / (double)s->rope_train_seq_len;' \
    "ctrain" "cli/test_parity" \
    'FAIL parity_record/losses' 'FAIL parity_record_full/losses'

# no bug: PyTorch hidden (a torch module that fails to import) under CI=true
mkdir -p notorch/torch && echo 'raise ImportError("hidden by tests/meta/test_planted_bugs.sh")' >notorch/torch/__init__.py
mkdir -p src/b_ci && ln -s "$CTRAIN" src/b_ci/ctrain
CI=true PYTHONPATH="$WORK/notorch" expect_programs_fail ci_without_torch_fails "$WORK/src" "$WORK/src/b_ci" \
    "cli/test_parity" 'FAIL test_parity/python_modules: .*CI=true'
finish
