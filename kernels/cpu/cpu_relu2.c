/* cpu_relu2.c — the MLP activation relu(u)^2, forward and backward, one fused pass each.
 *
 * Both loops compute their product unconditionally and then select it or zero, which (with the
 * Makefile's -fno-trapping-math) GCC turns into vector compare-and-blend. The natural
 * `u > 0 ? u * u : 0` compiled to a scalar loop with a data-dependent branch, mispredicted about
 * half the time: 6% of a training step, measured. The select gives the same bits for every input,
 * NaN and -0 included. */
#include <stddef.h>

#include "cpu_ops.h"

void cpu_relu2_forward(float *h, const float *u, int N, int C) {
    const size_t count = (size_t)N * C;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        const float square = u[i] * u[i];
        h[i] = u[i] > 0.0f ? square : 0.0f;
    }
}

void cpu_relu2_backward(float *du, const float *dh, const float *u, int N, int C) {
    const size_t count = (size_t)N * C;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) {
        const float grad = 2.0f * u[i] * dh[i];
        du[i] += u[i] > 0.0f ? grad : 0.0f;
    }
}
