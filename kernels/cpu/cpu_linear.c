/* cpu_linear.c — bias-free linear layer (torch layout W[out,in]) as cpu_sgemm calls. */
#include "cpu_ops.h"

void cpu_linear_forward(float *out, const float *x, const float *W, int N, int in_features, int out_features) {
    /* out[N,out] = x[N,in] @ W^T */
    cpu_sgemm(0, 1, N, out_features, in_features, 1.0f, x, in_features, W, in_features, 0.0f, out,
              out_features);
}

void cpu_linear_backward(float *dx, float *dW, const float *dout, const float *x, const float *W, int N,
                     int in_features, int out_features) {
    /* dx[N,in] += dout[N,out] @ W[out,in] */
    cpu_sgemm(0, 0, N, in_features, out_features, 1.0f, dout, out_features, W, in_features, 1.0f, dx,
              in_features);
    /* dW[out,in] += dout^T @ x: a reduction over tokens, ordered by cpu_sgemm's fixed tiling.
     * NULL when only the input gradient is wanted (test-time training's frozen base weights). */
    if (dW)
        cpu_sgemm(1, 0, out_features, in_features, N, 1.0f, dout, out_features, x, in_features, 1.0f, dW,
                  in_features);
}
