/* cuda_linear.h — the bias-free linear layer on cuda_gemm (cuda_linear.cu), the pair of
 * cpu_linear.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_LINEAR_H
#define CT_CUDA_LINEAR_H

#include "cuda_common.h"
#include "cuda_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* linear without bias, torch layout W [out, in]: out [N,out] = x [N,in] @ W^T (bf16), out_type
 * CT_F32 or CT_BF16 (the fp32 accumulator rounded once: for outputs that only feed products). */
int cuda_linear_forward(cublasHandle_t handle, void *out, int out_type, const ct_bf16 *x, const ct_bf16 *W, int N,
                        int in_features, int out_features);
/* dx [N,in] (+= when dx_accumulate, else =) dout @ W, dx_type CT_F32 or CT_BF16 (written only);
 * dW [out,in] (fp32) += dout^T @ x. dout, x and W bf16. dx or dW may be NULL (skipped). */
int cuda_linear_backward(cublasHandle_t handle, void *dx, int dx_type, int dx_accumulate, float *dW,
                         const ct_bf16 *dout, const ct_bf16 *x, const ct_bf16 *W, int N, int in_features,
                         int out_features);

#ifdef __cplusplus
}
#endif

#endif
