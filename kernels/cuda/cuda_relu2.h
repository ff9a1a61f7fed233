/* cuda_relu2.h — relu^2 and leaky relu^2 on bf16, forward and backward (cuda_relu2.cu), the pair
 * of cpu_relu2.c (slope = mlp_negative_slope; 0 = relu^2, the kernels' bits before the slope).
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_RELU2_H
#define CT_CUDA_RELU2_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* h = bf16(u^2) for u > 0, else bf16((slope*u)^2) (0 at slope 0: relu^2) over n elements, u bf16
 * (the fc product's output); the fp32 products of cpu_relu2_forward. */
int cuda_relu2_forward(ct_bf16 *h, const ct_bf16 *u, size_t n, float slope, cudaStream_t stream);
/* du = bf16((2u)*dh) for u > 0, else bf16((k*u)*dh) with k = 2*slope^2 (0 at slope 0), as
 * cpu_relu2_backward (WRITTEN: its only consumer is the fc product), dh and u bf16; du may be dh
 * (in place). h, when not NULL (and apart from du, dh and u), gets cuda_relu2_forward's result in
 * the same pass (the weight gradient's input, recomputed instead of kept). */
int cuda_relu2_backward(ct_bf16 *du, ct_bf16 *h, const ct_bf16 *dh, const ct_bf16 *u, size_t n, float slope,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
