/* cpu_rmsnorm.c — RMSNorm without weight (F.rms_norm over the last dim), forward and backward. */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x_row = x + (size_t)n * C;
        float *out_row = out + (size_t)n * C;
        double sum_sq = 0.0;
        for (int c = 0; c < C; c++) sum_sq += (double)x_row[c] * x_row[c];
        const float r = (float)(1.0 / sqrt(sum_sq / C + (double)eps));
        /* Read all of x_row before writing out_row, so out may equal x. */
        for (int c = 0; c < C; c++) out_row[c] = x_row[c] * r;
        if (rstd) rstd[n] = r;
    }
}

void cpu_rmsnorm_backward(float *dx, const float *dout, const float *x, const float *rstd, int N, int C) {
    /* With y = x*r and r = (mean(x^2)+eps)^(-1/2): dx_i = r*dout_i - x_i * r^3 * mean(dout*x). */
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x_row = x + (size_t)n * C;
        const float *dout_row = dout + (size_t)n * C;
        float *dx_row = dx + (size_t)n * C;
        const float r = rstd[n];
        double dot = 0.0;
        for (int c = 0; c < C; c++) dot += (double)dout_row[c] * x_row[c];
        const float x_coeff = (float)((double)r * r * r * dot / C);
        for (int c = 0; c < C; c++) dx_row[c] += r * dout_row[c] - x_coeff * x_row[c];
    }
}
