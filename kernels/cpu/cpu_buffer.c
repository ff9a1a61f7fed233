/* cpu_buffer.c — whole-buffer passes the backends need between ops (zero a gradient, add one
 * gradient into another, copy an activation), spread over the OpenMP threads. Done serially
 * they cost 2% of a step in memset and left the other threads spinning at the next barrier.
 * Every element is independent, so the bits do not depend on the thread count. */
#include <stddef.h>
#include <string.h>

#include "cpu_ops.h"

/* 16 KiB pieces: whole cache lines per thread, and few enough to keep the loop overhead nil. */
enum { BUFFER_PIECE = 4096 };

void cpu_zero(float *x, size_t n) {
    const size_t pieces = (n + BUFFER_PIECE - 1) / BUFFER_PIECE;
    #pragma omp parallel for schedule(static)
    for (size_t p = 0; p < pieces; p++) {
        const size_t start = p * BUFFER_PIECE;
        memset(x + start, 0, (n - start < BUFFER_PIECE ? n - start : BUFFER_PIECE) * sizeof(float));
    }
}

void cpu_copy(float *dst, const float *src, size_t n) {
    const size_t pieces = (n + BUFFER_PIECE - 1) / BUFFER_PIECE;
    #pragma omp parallel for schedule(static)
    for (size_t p = 0; p < pieces; p++) {
        const size_t start = p * BUFFER_PIECE;
        memcpy(dst + start, src + start, (n - start < BUFFER_PIECE ? n - start : BUFFER_PIECE) * sizeof(float));
    }
}

void cpu_add_into(float *dst, const float *src, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void cpu_scale(float *x, float s, size_t n) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
