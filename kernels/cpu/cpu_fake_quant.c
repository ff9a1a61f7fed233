/* cpu_fake_quant.c — int6 per-row straight-through fake quantization (cpu_fake_quant.h). */
#include "cpu_fake_quant.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

/* Rows together below this many elements are not worth waking the thread team for. */
enum { PARALLEL_MIN_ELEMS = 1 << 15 };

void cpu_fake_quant_int6_rows(float *dst, const float *src, int rows, int cols) {
    assert(dst && src && dst != src && rows >= 0 && cols >= 0);
    const float min_scale = (float)(1.0 / 31.0); /* clamp_min(1.0 / 31.0) on an fp32 tensor */
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= PARALLEL_MIN_ELEMS)
    for (int r = 0; r < rows; r++) {
        const float *w = src + (size_t)r * cols;
        float *out = dst + (size_t)r * cols;
        float row_max = 0.0f;
        for (int c = 0; c < cols; c++) row_max = fmaxf(row_max, fabsf(w[c]));
        float scale = row_max / 31.0f;
        scale = scale < min_scale ? min_scale : scale;
        for (int c = 0; c < cols; c++) {
            /* rintf rounds half to even in the default rounding mode, as torch.round */
            float q = rintf(w[c] / scale);
            q = q < -32.0f ? -32.0f : q > 31.0f ? 31.0f : q;
            const float w_q = q * scale;
            out[c] = w[c] + (w_q - w[c]);
        }
    }
}
