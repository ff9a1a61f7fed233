/* cpu_scaled_add.c — scaled residual add out = x + scale[c]*branch (attn_scale, mlp_scale,
 * skip_weights), forward and backward (to x, branch and scale). */
#include <stddef.h>

#include "cpu_ops.h"

void cpu_scaled_add_forward(float *out, const float *x, const float *branch, const float *scale, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) out[row + c] = x[row + c] + scale[c] * branch[row + c];
    }
}

void cpu_scaled_add_backward(float *dx, float *dbranch, float *dscale, const float *dout,
                         const float *branch, const float *scale, int N, int C) {
    /* Input gradients: independent per element, so rows go to threads. */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        if (dx)
            for (int c = 0; c < C; c++) dx[row + c] += dout[row + c];
        for (int c = 0; c < C; c++) dbranch[row + c] += scale[c] * dout[row + c];
    }
    /* dscale sums over tokens: channel blocks go to threads, each summing its tokens in order.
     * A separate pass: mixing strided writes into it was several times slower (cache-set
     * conflicts between streams at the same 4 KiB offsets). */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sum[CPU_CHANNEL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            for (int k = 0; k < width; k++) sum[k] += (double)dout[row + k] * branch[row + k];
        }
        for (int k = 0; k < width; k++) dscale[c0 + k] += (float)sum[k];
    }
}
