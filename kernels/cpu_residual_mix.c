/* cpu_residual_mix.c — the Block input mix out = mix[0]*x + mix[1]*x0 (per channel), forward and
 * backward (to x, x0 and the [2,C] mix parameter). */
#include <stddef.h>

#include "cpu_ops.h"

void residual_mix_forward(float *out, const float *x, const float *x0, const float *mix, int N, int C) {
    const float *mix_x = mix, *mix_x0 = mix + C;
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) out[row + c] = mix_x[c] * x[row + c] + mix_x0[c] * x0[row + c];
    }
}

void residual_mix_backward(float *dx, float *dx0, float *dmix, const float *dout, const float *x,
                           const float *x0, const float *mix, int N, int C) {
    /* One pass per channel block: the dmix sums over tokens run in token order in one thread,
     * and the same pass produces dx and dx0 for those channels. */
    const float *mix_x = mix, *mix_x0 = mix + C;
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sum_x[CPU_CHANNEL_BLOCK] = {0}, sum_x0[CPU_CHANNEL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            for (int k = 0; k < width; k++) {
                const float g = dout[row + k];
                dx[row + k] += mix_x[c0 + k] * g;
                dx0[row + k] += mix_x0[c0 + k] * g;
                sum_x[k] += (double)g * x[row + k];
                sum_x0[k] += (double)g * x0[row + k];
            }
        }
        for (int k = 0; k < width; k++) {
            dmix[c0 + k] += (float)sum_x[k];
            dmix[C + c0 + k] += (float)sum_x0[k];
        }
    }
}
