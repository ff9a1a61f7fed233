/* cpu_relu2.c — the MLP activation relu(u)^2, forward and backward, one fused pass each. */
#include <stddef.h>

#include "cpu_ops.h"

void relu2_forward(float *h, const float *u, int N, int C) {
    const size_t count = (size_t)N * C;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) h[i] = u[i] > 0.0f ? u[i] * u[i] : 0.0f;
}

void relu2_backward(float *du, const float *dh, const float *u, int N, int C) {
    const size_t count = (size_t)N * C;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) du[i] += u[i] > 0.0f ? 2.0f * u[i] * dh[i] : 0.0f;
}
