/* cpu_skip_gate.c — the gated U-Net skip of the 1.0611 record (skip_gates_enabled), forward and
 * backward: a decoder block's input is the lerp from the weighted skip to the stream,
 *   out = lerp(start = w[c] * skip, end = x, s = sigmoid(gate[c])) = s * x + (1 - s) * w * skip,
 * evaluated as torch.lerp does (start + s*(end - start) for s < 0.5, else end - (end - start)*(1 - s)),
 * so the CUDA op, which rounds those same steps as train_gpt.py's bf16 tensors, has one formula
 * to follow. The gate weights the decoder stream, not the skip (docs/model.md, "Skip gates"). */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

static inline float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

float cpu_lerp(float start, float end, float weight) {
    const float diff = end - start;
    return weight < 0.5f ? start + weight * diff : end - diff * (1.0f - weight);
}

void cpu_skip_gate_forward(float *out, const float *x, const float *skip, const float *w, const float *gate, int N,
                           int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) out[row + c] = cpu_lerp(w[c] * skip[row + c], x[row + c], sigmoid(gate[c]));
    }
}

void cpu_skip_gate_backward(float *dx, float *dskip, float *dw, float *dgate, const float *dout, const float *x,
                            const float *skip, const float *w, const float *gate, int N, int C) {
    /* input gradients: dx += s * dout, dskip += w * ((1 - s) * dout), rows to threads */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const float s = sigmoid(gate[c]), d = dout[row + c];
            dx[row + c] += s * d;
            dskip[row + c] += w[c] * ((1.0f - s) * d);
        }
    }
    /* dw_c = sum_n ((1 - s) dout) skip, dgate_c = sum_n (s (1 - s) dout) (x - w skip), the
     * element products the CUDA op makes: channel blocks to threads, tokens in order, double
     * accumulators (cpu_ops.h's rule for reductions over tokens) */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sum_w[CPU_CHANNEL_BLOCK] = {0}, sum_g[CPU_CHANNEL_BLOCK] = {0};
        float om[CPU_CHANNEL_BLOCK], sg[CPU_CHANNEL_BLOCK]; /* 1 - s, s (1 - s) */
        for (int k = 0; k < width; k++) {
            const float s = sigmoid(gate[c0 + k]);
            om[k] = 1.0f - s;
            sg[k] = s * om[k];
        }
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            for (int k = 0; k < width; k++) {
                const float d = dout[row + k];
                sum_w[k] += (double)(om[k] * d) * (double)skip[row + k];
                sum_g[k] += (double)(sg[k] * d) * (double)(x[row + k] - w[c0 + k] * skip[row + k]);
            }
        }
        for (int k = 0; k < width; k++) {
            dw[c0 + k] += (float)sum_w[k];
            dgate[c0 + k] += (float)sum_g[k];
        }
    }
}
