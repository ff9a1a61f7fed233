/* cpu_bigram.c — the record's bigram hash embedding: the learned scalar scale of the branch added
 * to the token embedding. The buckets are kernels/bigram_hash.c's; the table lookup and the
 * projection are the ordinary embedding and linear ops. */
#include <stddef.h>

#include "cpu_ops.h"

void cpu_add_scalar_scaled_forward(float *out, const float *x, const float *branch, const float *scale, size_t n) {
    const float s = scale[0];
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + branch[i] * s;
}

void cpu_add_scalar_scaled_backward(float *dbranch, float *dscale, const float *dout, const float *branch,
                                    const float *scale, size_t n) {
    const float s = scale[0];
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dbranch[i] += dout[i] * s;
    /* one sum over every element, in index order: the same bits for any thread count */
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)dout[i] * branch[i];
    dscale[0] += (float)sum;
}
