/* bench_gpu.h — what the GPU benchmarks (bench_gpu_attention.c, bench_gpu_step.c) share:
 * device allocation that exits with a message on failure, random device buffers (fp32 and bf16,
 * never zeros), and the comparator for taking medians. Define BENCH_PROGRAM (the program's name
 * in messages) before including; CUDA builds only. */
#ifndef CT_BENCH_GPU_H
#define CT_BENCH_GPU_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "common.h"
#include "cuda_ops.h"
#include "refcheck.h"

static void die(const char *what) {
    fprintf(stderr, BENCH_PROGRAM ": %s: %s\n", what, ct_error());
    exit(1);
}
static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, BENCH_PROGRAM ": cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}
/* n uniform values in [lo, hi) on the device. */
static float *drandom(size_t n, double lo, double hi, uint64_t *rng) {
    float *h = malloc(n * sizeof(float));
    ref_fill(h, n, lo, hi, rng);
    float *d = dalloc(n * sizeof(float));
    cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
    return d;
}
/* The same as bf16 (rounded on the device by cuda_f32_to_bf16). */
static ct_bf16 *drandom_bf16(size_t n, double lo, double hi, uint64_t *rng) {
    float *f = drandom(n, lo, hi, rng);
    ct_bf16 *d = dalloc(n * 2);
    if (cuda_f32_to_bf16(d, f, n, 0) != 0) die("f32_to_bf16");
    cudaFree(f);
    return d;
}
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

#endif
