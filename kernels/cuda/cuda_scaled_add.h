/* cuda_scaled_add.h — the scaled residual add out = x + scale * branch (cuda_scaled_add.cu),
 * the pair of cpu_scaled_add.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_SCALED_ADD_H
#define CT_CUDA_SCALED_ADD_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = (x + inner_scale[c] * inner) + scale[c] * branch (out may equal x), branches bf16 (the
 * attention and MLP projections' outputs); inner and inner_scale may be NULL (out = x +
 * scale * branch). The block output x1 + mlp_scale * mo from xm, without a stored x1. */
int cuda_scaled_add_forward(float *out, const float *x, const ct_bf16 *inner, const float *inner_scale,
                            const ct_bf16 *branch, const float *scale, int N, int C, cudaStream_t stream);
/* Backward of out = x + scale * branch given dout: dx += dout (dx may be NULL: the caller keeps
 * dout as dx), dbranch = scale * dout (fp32, WRITTEN, may be NULL), dbranch_bf16 =
 * bf16(scale * dout) (may be NULL), dscale [C] += sum_n dout * branch (partials:
 * cuda_colsum_doubles(N, C, 1)). The branch is fp32 (branch) or bf16 (branch_bf16): exactly one
 * of them is given. */
int cuda_scaled_add_backward(float *dx, float *dbranch, ct_bf16 *dbranch_bf16, float *dscale, const float *dout,
                             const float *branch, const ct_bf16 *branch_bf16, const float *scale, int N, int C,
                             double *partials, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
