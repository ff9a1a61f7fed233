/* cpu_weights.c — weight decay, the EMA and SWA's sum over whole weight buffers (cpu_weights.h). */
#include "cpu_weights.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/* Element-wise loops below this size are not worth waking the thread team for. */
enum { PARALLEL_MIN_ELEMS = 1 << 15 };

void cpu_weight_decay(float *p, size_t n, double factor) {
    assert(p || n == 0);
    const float f = (float)factor;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) p[i] = p[i] * f;
}

void cpu_ema_update(float *ema, const float *w, size_t n, double decay) {
    assert((ema && w) || n == 0);
    const float d = (float)decay, one_minus_d = (float)(1.0 - decay);
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) ema[i] = fmaf(w[i], one_minus_d, ema[i] * d);
}

void cpu_swa_add(float *sum, const float *w, size_t n, int start) {
    assert((sum && w) || n == 0);
    if (start) {
        if (n) memcpy(sum, w, n * sizeof(float));
        return;
    }
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) sum[i] = sum[i] + w[i];
}
