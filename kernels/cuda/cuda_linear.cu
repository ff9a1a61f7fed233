/* cuda_linear.cu — the bias-free linear layer (torch layout W [out, in]) as cuda_gemm calls on bf16
 * operands (see cuda_linear.h); the pair of cpu_linear.c. */
#include "cuda_common.cuh"
#include "cuda_gemm.h"
#include "cuda_linear.h"

extern "C" int cuda_linear_forward(cublasHandle_t handle, void *out, int out_type, const ct_bf16 *x, const ct_bf16 *W,
                                   int N, int in_features, int out_features) {
    /* out[N,out] = x[N,in] @ W[out,in]^T; a bf16 out is the fp32 accumulator rounded once */
    if (cuda_gemm(handle, 0, 1, N, out_features, in_features, 1.0f, x, CT_BF16, in_features, W, CT_BF16, in_features,
                  0.0f, out, out_type, out_features) != 0)
        return ct_fail_prefix("linear forward");
    return 0;
}

extern "C" int cuda_linear_backward(cublasHandle_t handle, void *dx, int dx_type, int dx_accumulate, float *dW,
                                    const ct_bf16 *dout, const ct_bf16 *x, const ct_bf16 *W, int N, int in_features,
                                    int out_features) {
    /* a bf16 sum would round the running total, not only this product's contribution */
    if (dx && dx_type == CT_BF16 && dx_accumulate)
        return ct_fail("linear backward: a bf16 input gradient cannot be accumulated into");
    /* dx[N,in] (+)= dout[N,out] @ W[out,in] */
    if (dx && cuda_gemm(handle, 0, 0, N, in_features, out_features, 1.0f, dout, CT_BF16, out_features, W, CT_BF16,
                        in_features, dx_accumulate ? 1.0f : 0.0f, dx, dx_type, in_features) != 0)
        return ct_fail_prefix("linear backward (input gradient)");
    /* dW[out,in] += dout^T @ x: dout stored [N,out] = op(A) transposed, x [N,in] */
    if (dW && cuda_gemm(handle, 1, 0, out_features, in_features, N, 1.0f, dout, CT_BF16, out_features, x, CT_BF16,
                        in_features, 1.0f, dW, CT_F32, in_features) != 0)
        return ct_fail_prefix("linear backward (weight gradient)");
    return 0;
}
