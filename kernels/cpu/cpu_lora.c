/* cpu_lora.c — test-time training's low-rank adapters (LoRA) as cpu_sgemm calls: the
 * adapter's forward out += s * (x A^T) B^T beside a base linear layer, and its backward.
 * Every product is one cpu_sgemm, so the bits depend on the shapes only (cpu_ops.h). */
#include "cpu_ops.h"

void cpu_lora_forward(float *out, float *h, const float *x, const float *A, const float *B, float s, int N, int in,
                      int r, int out_features) {
    /* h[N,r] = x[N,in] @ A^T, kept for the backward */
    cpu_sgemm(0, 1, N, r, in, 1.0f, x, in, A, in, 0.0f, h, r);
    /* out[N,out] += s * h @ B^T (s as the product's alpha: no [N,out] temporary) */
    cpu_sgemm(0, 1, N, out_features, r, s, h, r, B, r, 1.0f, out, out_features);
}

void cpu_lora_backward_h(float *dx, float *dA, const float *dh, const float *x, const float *A, int N, int in, int r) {
    /* dA[r,in] += dh^T @ x: a reduction over tokens, ordered by cpu_sgemm's fixed tiling */
    cpu_sgemm(1, 0, r, in, N, 1.0f, dh, r, x, in, 1.0f, dA, in);
    /* dx[N,in] += dh[N,r] @ A[r,in] */
    if (dx) cpu_sgemm(0, 0, N, in, r, 1.0f, dh, r, A, in, 1.0f, dx, in);
}

void cpu_lora_backward(float *dx, float *dA, float *dB, float *dh, const float *dout, const float *x, const float *h,
                       const float *A, const float *B, float s, int N, int in, int r, int out_features) {
    /* dh[N,r] = s * dout[N,out] @ B[out,r] (written: the caller's scratch) */
    cpu_sgemm(0, 0, N, r, out_features, s, dout, out_features, B, r, 0.0f, dh, r);
    /* dB[out,r] += s * dout^T @ h */
    cpu_sgemm(1, 0, out_features, r, N, s, dout, out_features, h, r, 1.0f, dB, r);
    cpu_lora_backward_h(dx, dA, dh, x, A, N, in, r);
}
