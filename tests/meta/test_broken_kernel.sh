#!/usr/bin/env bash
# test_broken_kernel.sh — a bug in a CUDA kernel fails `make test` on a machine without a GPU:
# in a scratch copy of the checkout, RMSNorm's reciprocal standard deviation divides by C + 1
# instead of C (kernels/cuda/cuda_rmsnorm.cu), and test_cuda_emulated.sh (the host emulator's
# quick set), run by the real runner, must fail the norm cases of the op table (test_gpu_ops).
# About five minutes on 2 cores.
source "$CT_ROOT/tests/cli/lib.sh"
source "$CT_ROOT/tests/meta/lib.sh"

# the emulator compiles the quick set's test sources; on the plain build they skip (no GPU)
copy_tree k && keep_only k cli/test_cuda_emulated unit/test_gpu_ops unit/test_gpu_optim unit/test_gpu_step
plant plant_rmsnorm_off_by_one k/kernels/cuda/cuda_rmsnorm.cu \
    '    return (float)(1.0 / sqrt(sum_sq / C + (double)eps));' '    return (float)(1.0 / sqrt(sum_sq / (C + 1) + (double)eps));'
fake_build fake "$CTRAIN"
expect_copy_fails broken_kernel_is_caught "$WORK/k" "$WORK/fake" \
    'FAIL test_gpu_ops/rmsnorm_fwd_ragged' 'FAIL test_gpu_ops/add_norm_bwd_ragged'
finish
