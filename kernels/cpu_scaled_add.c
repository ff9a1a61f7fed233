/* cpu_scaled_add.c — scaled residual add out = x + scale[c]*branch (attn_scale, mlp_scale,
 * skip_weights), forward and backward (to x, branch and scale). */
#include <stddef.h>

#include "cpu_ops.h"

void scaled_add_forward(float *out, const float *x, const float *branch, const float *scale, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) out[row + c] = x[row + c] + scale[c] * branch[row + c];
    }
}

void scaled_add_backward(float *dx, float *dbranch, float *dscale, const float *dout,
                         const float *branch, const float *scale, int N, int C) {
    /* One pass per channel block: dscale's sum over tokens runs in token order in one thread,
     * and the same pass produces dx and dbranch for those channels. */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sum[CPU_CHANNEL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            for (int k = 0; k < width; k++) {
                const float g = dout[row + k];
                if (dx) dx[row + k] += g;
                dbranch[row + k] += scale[c0 + k] * g;
                sum[k] += (double)g * branch[row + k];
            }
        }
        for (int k = 0; k < width; k++) dscale[c0 + k] += (float)sum[k];
    }
}
