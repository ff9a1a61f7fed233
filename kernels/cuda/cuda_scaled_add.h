/* cuda_scaled_add.h — the scaled residual add out = x + scale * branch (cuda_scaled_add.cu),
 * the pair of cpu_scaled_add.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. The residual stream's tensors
 * (`void *`, of the element type `dtype`) and the rounding points of CT_BF16 are those of
 * cuda_rmsnorm.h: scales rounded to bf16 first, each stream value rounded once where stored. */
#ifndef CT_CUDA_SCALED_ADD_H
#define CT_CUDA_SCALED_ADD_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = (x + inner_scale[c] * inner) + scale[c] * branch (out may equal x), branches bf16 (the
 * attention and MLP projections' outputs); inner and inner_scale may be NULL (out = x +
 * scale * branch). The block output x1 + mlp_scale * mo from xm, without a stored x1 (with
 * CT_BF16, x1 rounded as cuda_add_norm_forward stores it). out and x of type dtype. */
int cuda_scaled_add_forward(void *out, const void *x, const ct_bf16 *inner, const float *inner_scale,
                            const ct_bf16 *branch, const float *scale, int N, int C, int dtype, cudaStream_t stream);
/* Backward of out = x + scale * branch given dout (a CudaScaledAddBackward's tensors and shape):
 * dx += dout (dx may be NULL: the caller keeps dout as dx), dbranch = scale * dout (fp32,
 * WRITTEN, may be NULL), dbranch_bf16 = bf16(scale * dout) (may be NULL), dscale [C] += sum_n
 * dout * branch (partials: cuda_colsum_doubles(N, C, 1)). The branch is fp32 (branch) or bf16
 * (branch_bf16): exactly one of them is given. dx and dout of type dtype (CT_BF16: scale
 * rounded to bf16 first; a bf16 stream's fp32 branch is not a case the backend has). */
typedef struct {
    void *dx;              /* += dout (may be NULL) */
    float *dbranch;        /* written (may be NULL) */
    ct_bf16 *dbranch_bf16; /* written (may be NULL) */
    float *dscale;         /* [C] += */
    const void *dout;
    const float *branch;         /* exactly one of branch ... */
    const ct_bf16 *branch_bf16;  /* ... and branch_bf16 */
    const float *scale;
    double *partials; /* cuda_colsum_doubles(N, C, 1) */
    int N, C;
    int dtype; /* dx, dout */
} CudaScaledAddBackward;
int cuda_scaled_add_backward(const CudaScaledAddBackward *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
