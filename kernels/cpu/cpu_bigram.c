/* cpu_bigram.c — the record's bigram hash embedding: the bucket of each position's (previous,
 * current) token pair, and the learned scalar scale of the branch added to the token
 * embedding. The table lookup and the projection are the ordinary embedding and linear ops. */
#include <stddef.h>

#include "cpu_ops.h"

void cpu_bigram_hash(int32_t *buckets, const int32_t *ids, int B, int T, int num_buckets) {
    const int32_t mod = num_buckets - 1;
    const long N = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        if (n % T == 0) {
            buckets[n] = mod;
            continue;
        }
        /* torch int32 arithmetic: the products wrap, the remainder takes the divisor's sign */
        const int32_t a = (int32_t)(36313u * (uint32_t)ids[n]), b = (int32_t)(27191u * (uint32_t)ids[n - 1]);
        int32_t r = (a ^ b) % mod;
        if (r < 0) r += mod;
        buckets[n] = r;
    }
}

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
