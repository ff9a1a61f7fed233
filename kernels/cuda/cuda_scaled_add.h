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
/* Backward of out = x + scale * branch given dout (a CudaScaledAddBackward's tensors and shape):
 * dx += dout (dx may be NULL: the caller keeps dout as dx), dbranch = scale * dout (fp32,
 * WRITTEN, may be NULL), dbranch_bf16 = bf16(scale * dout) (may be NULL), dscale [C] += sum_n
 * dout * branch (partials: cuda_colsum_doubles(N, C, 1)). The branch is fp32 (branch) or bf16
 * (branch_bf16): exactly one of them is given. */
typedef struct {
    float *dx;             /* += dout (may be NULL) */
    float *dbranch;        /* written (may be NULL) */
    ct_bf16 *dbranch_bf16; /* written (may be NULL) */
    float *dscale;         /* [C] += */
    const float *dout;
    const float *branch;         /* exactly one of branch ... */
    const ct_bf16 *branch_bf16;  /* ... and branch_bf16 */
    const float *scale;
    double *partials; /* cuda_colsum_doubles(N, C, 1) */
    int N, C;
} CudaScaledAddBackward;
int cuda_scaled_add_backward(const CudaScaledAddBackward *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
