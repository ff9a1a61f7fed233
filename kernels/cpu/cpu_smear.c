/* cpu_smear.c — the record's SmearGate, forward and backward: each position of a sequence blends
 * in the previous position's vector by a learned per-channel gate,
 *   out[b,t,c] = (1 - g_c) x[b,t,c] + g_c x[b,t-1,c],  g_c = sigmoid(gate_c),  x[b,-1,:] = 0,
 * over B sequences of T positions (the first position of each sequence sees zeros). */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

static inline float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

void cpu_smear_forward(float *out, const float *x, const float *gate, int B, int T, int C) {
    const long N = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        const int first = n % T == 0;
        for (int c = 0; c < C; c++) {
            const float g = sigmoid(gate[c]);
            const float prev = first ? 0.0f : x[row - C + c];
            out[row + c] = (1.0f - g) * x[row + c] + g * prev;
        }
    }
}

void cpu_smear_backward(float *dx, float *dgate, const float *dout, const float *x, const float *gate, int B, int T,
                        int C) {
    const long N = (long)B * T;
    /* dx[t] = (1 - g) dout[t] + g dout[t+1] (position t feeds t+1 of the same sequence) */
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        const int last = n % T == T - 1;
        for (int c = 0; c < C; c++) {
            const float g = sigmoid(gate[c]);
            const float next = last ? 0.0f : dout[row + C + c];
            dx[row + c] += (1.0f - g) * dout[row + c] + g * next;
        }
    }
    /* dgate_c = g (1 - g) * sum_n dout[n,c] (x_prev[n,c] - x[n,c]): channel blocks to threads,
     * tokens in order, double accumulators (cpu_ops.h's rule for reductions over tokens) */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sum[CPU_CHANNEL_BLOCK] = {0};
        for (long n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            const int first = n % T == 0;
            for (int k = 0; k < width; k++) {
                const float prev = first ? 0.0f : x[row - C + k];
                sum[k] += (double)dout[row + k] * (double)(prev - x[row + k]);
            }
        }
        for (int k = 0; k < width; k++) {
            const float g = sigmoid(gate[c0 + k]);
            dgate[c0 + k] += (float)(sum[k] * (double)g * (double)(1.0f - g));
        }
    }
}
