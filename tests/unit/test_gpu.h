/* test_gpu.h — helpers shared by the CUDA op tests (tests/unit/test_gpu_*.c): device detection,
 * device buffers, host bf16 rounding, error measures.
 *
 * Every GPU test program follows the same rules:
 *  - built without CUDA (no nvcc): prints "SKIP <program>/rest: ..." and its END line, exits 0;
 *  - no usable device (cudaGetDeviceCount fails or returns 0): every case prints
 *    "SKIP <program>/<case>: no CUDA device" and the program exits 0 (`make test` on a machine
 *    without a GPU); `make test-gpu` (CT_REQUIRE_GPU=1) turns those skips into failures;
 *  - inputs are random (never all zeros), outputs are poisoned with NaN before each call, every
 *    result is compared with the CPU op (kernels/cpu/cpu_*.h) by ||gpu - cpu|| / ||cpu||, and the
 *    determinism of each op is checked by running it twice and comparing the bytes.
 * CT_TEST_VERBOSE=1 prints every measured error to stderr. */
#ifndef CT_TEST_GPU_H
#define CT_TEST_GPU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "refcheck.h"

#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common.h"
#include "cuda_ops.h"

/* 1 if a CUDA device can be used (checked once). */
static inline int gpu_available(void) {
    static int state = -1;
    if (state < 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        state = e == cudaSuccess && n > 0;
        if (!state) cudaGetLastError(); /* clear the sticky-free error state */
    }
    return state;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!gpu_available()) SKIP("no CUDA device");                                              \
    } while (0)

static inline int gpu_verbose(void) {
    const char *v = getenv("CT_TEST_VERBOSE");
    return v && v[0] == '1';
}

static inline void gpu_die(const char *what, cudaError_t e) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) gpu_die("cudaMalloc", e);
    return p;
}
static inline void dev_free(void *p) {
    if (p) cudaFree(p);
}
static inline void *dev_upload(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    cudaError_t e = cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) gpu_die("cudaMemcpy H2D", e);
    return p;
}
static inline void dev_put(void *dev, const void *host, size_t bytes) {
    cudaError_t e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) gpu_die("cudaMemcpy H2D", e);
}
static inline void dev_get(void *host, const void *dev, size_t bytes) {
    cudaError_t e = cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) gpu_die("cudaMemcpy D2H", e);
}
/* n floats of NaN on the device (outputs are poisoned before every call). */
static inline float *dev_nan(size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *d = dev_upload(h, n * sizeof(float));
    free(h);
    return d;
}
static inline void dev_poison(float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    dev_put(d, h, n * sizeof(float));
    free(h);
}
static inline float *dev_floats(const float *host, size_t n) { return dev_upload(host, n * sizeof(float)); }
static inline float *host_from_dev(const float *dev, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    dev_get(h, dev, n * sizeof(float));
    return h;
}
/* Synchronise and turn an asynchronous error into a test failure message. */
static inline int dev_sync_ok(void) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

/* ---- bf16 on the host (round to nearest even, as __float2bfloat16_rn) ----
 * In the host emulator's exact-bf16 mode (tests/gpu_emu/run.sh --exact-bf16) ct_bf16 is 4 bytes
 * and holds the fp32 value itself: these helpers then store it unrounded and host_round_bf16 is
 * the identity, so the references follow the kernels there too. */

#define HOST_BF16_EXACT (sizeof(ct_bf16) == sizeof(float))
static inline ct_bf16 host_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (HOST_BF16_EXACT) return (ct_bf16)u;
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ct_bf16)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ct_bf16)(u >> 16);
}
static inline float host_bf16_to_f32(ct_bf16 h) {
    uint32_t u = HOST_BF16_EXACT ? (uint32_t)h : (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* x rounded to bf16 (in place: the reference then sees what the GPU sees). */
static inline float host_bf16_value(float x) { return host_bf16_to_f32(host_f32_to_bf16(x)); }
static inline void host_round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = host_bf16_value(x[i]);
}
/* NaN in every element (outputs are poisoned before every call). */
static inline void dev_poison_bf16(ct_bf16 *d, size_t n) {
    ct_bf16 *h = malloc((n ? n : 1) * sizeof(ct_bf16));
    for (size_t i = 0; i < n; i++) h[i] = host_f32_to_bf16(NAN);
    dev_put(d, h, n * sizeof(ct_bf16));
    free(h);
}
/* Host fp32 values into a device bf16 buffer / a new device bf16 copy of them. */
static inline void dev_put_bf16(ct_bf16 *dev, const float *host, size_t n) {
    ct_bf16 *h = malloc((n ? n : 1) * sizeof(ct_bf16));
    for (size_t i = 0; i < n; i++) h[i] = host_f32_to_bf16(host[i]);
    dev_put(dev, h, n * sizeof(ct_bf16));
    free(h);
}
static inline ct_bf16 *dev_bf16(const float *host, size_t n) {
    ct_bf16 *d = dev_alloc(n * sizeof(ct_bf16));
    dev_put_bf16(d, host, n);
    return d;
}
/* Host fp32 values of a device bf16 buffer. */
static inline float *host_from_dev_bf16(const ct_bf16 *dev, size_t n) {
    ct_bf16 *h = malloc((n ? n : 1) * sizeof(ct_bf16));
    dev_get(h, dev, n * sizeof(ct_bf16));
    float *f = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = host_bf16_to_f32(h[i]);
    free(h);
    return f;
}

/* ---- error measures ---- */

/* ||a - b|| / ||b|| (b the CPU reference); NaN anywhere in a gives NaN (fails every bound). */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline void report(const char *what, double err, double bound) {
    if (gpu_verbose()) fprintf(stderr, "  %-40s rel err %.3e (bound %.1e)\n", what, err, bound);
}

/* CHECK that a relative error is within bound (NaN fails). */
#define CHECK_REL(what, got, ref, n, bound)                                                        \
    do {                                                                                           \
        double err_ = rel_err((got), (ref), (n));                                                  \
        report((what), err_, (bound));                                                             \
        CHECK(err_ <= (bound), "%s: relative error %.3e > %.1e", (what), err_, (double)(bound));    \
    } while (0)

#define CHECK_CUDA_OK(call)                                                                        \
    do {                                                                                           \
        if ((call) != 0) CHECK(0, "%s failed: %s", #call, ct_error());                             \
        CHECK(dev_sync_ok(), "%s: asynchronous CUDA error", #call);                               \
    } while (0)

static inline float *random_host(size_t n, double lo, double hi, uint64_t *rng) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    ref_fill(x, n, lo, hi, rng);
    return x;
}
static inline float *copy_host(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

#endif /* CT_HAVE_CUDA */

/* main() of a GPU test program in a build without CUDA: every case skipped, in tests/run.sh's
 * words ("SKIP <program>/rest", then the completion line), so that `make test` and `make asan`
 * pass on a build without nvcc and count the program's cases as skipped. */
#define GPU_TEST_MAIN_WITHOUT_CUDA()                                                               \
    int main(void) {                                                                               \
        printf("SKIP %s/rest: this build has no CUDA (nvcc was not found)\n", TEST_PROGRAM);       \
        printf("END %s\n", TEST_PROGRAM);                                                          \
        return 0;                                                                                  \
    }

#endif
