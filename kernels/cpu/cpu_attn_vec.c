/* cpu_attn_vec.c — the fp32 reductions used by the attention ops (sum, dot, max), written so
 * that GCC vectorises them without -ffast-math while the result stays a fixed function of the
 * input: the grouping of the additions depends only on the length, never on threads. */
#include "cpu_attention.h"

#include <math.h>

/* Eight interleaved accumulators, combined in lane order at the end. Eight floats fill one AVX
 * or two SSE registers, which also hides the add latency. */
#define LANES 8

float cpu_attn_sum(const float *x, int n) {
    float lane[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += x[i + j];
    float total = 0.0f;
    for (; i < n; i++) total += x[i];
    for (int j = 0; j < LANES; j++) total += lane[j];
    return total;
}

float cpu_attn_dot(const float *x, const float *y, int n) {
    float lane[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) lane[j] += x[i + j] * y[i + j];
    float total = 0.0f;
    for (; i < n; i++) total += x[i] * y[i];
    for (int j = 0; j < LANES; j++) total += lane[j];
    return total;
}

/* Max is exact in any order, so letting OpenMP SIMD regroup it (GCC will not on its own, for
 * want of -ffinite-math-only) keeps it deterministic. NaNs are skipped; the callers' exp
 * turns them back into NaN. */
float cpu_attn_max(const float *x, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
