/* refcheck.h — helpers for the reference tests of the math ops (kernels/).
 *
 * How an op is checked: a plain double-precision reference forward is written in the test;
 * (1) the fp32 forward must match it, (2) the fp32 backward must match central finite
 * differences of the double reference of L = sum(out * R) for a random R, both by relative
 * norm error ||a - b|| / ||b||. Finite differences in double are accurate to ~1e-9, so the
 * bound checks our fp32 backward against the true derivative, not against itself. */
#ifndef CT_TEST_REFCHECK_H
#define CT_TEST_REFCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The bounds of the op tests (test_cpu_ops.c's header says why each is what it is). */
#define FORWARD_TOL 1e-5
#define GRADIENT_TOL 1e-4
#define ACCUMULATE_TOL 1e-6
#define FD_STEP 1e-6

/* Check a measured error against its bound, printing it when the test's `verbose` is set
 * (CT_TEST_VERBOSE); for test programs that include harness.h (CHECK) and define
 * `static int verbose`. */
#define CHECK_ERR(label, err, tol)                                                                \
    do {                                                                                          \
        double err_ = (err);                                                                      \
        if (verbose) fprintf(stderr, "#   %-34s %.2e  (bound %.0e)\n", label, err_, (double)(tol)); \
        CHECK(err_ <= (tol), "%s: relative error %.3e exceeds %g", label, err_, (double)(tol));   \
    } while (0)

/* xorshift64* — deterministic test inputs, independent of libc. */
static inline double ref_rand01(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    *state = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform in [lo, hi); never produces an all-zero buffer for n > 0 with lo < hi. */
static inline void ref_fill(float *x, size_t n, double lo, double hi, uint64_t *state) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * ref_rand01(state));
}

static inline void ref_to_double(const float *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i];
}

/* Test buffers; the tests free them with free(). */
static inline float *ref_new_floats(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (!x) abort();
    return x;
}
static inline double *ref_new_doubles(size_t n) {
    double *x = calloc(n ? n : 1, sizeof(double));
    if (!x) abort();
    return x;
}
static inline float *ref_random_floats(size_t n, double lo, double hi, uint64_t *state) {
    float *x = ref_new_floats(n);
    ref_fill(x, n, lo, hi, state);
    return x;
}
static inline double *ref_doubles_of(const float *x, size_t n) {
    double *y = ref_new_doubles(n);
    ref_to_double(x, y, n);
    return y;
}

/* ||a - b|| / ||b|| with a in fp32 and b in double. */
static inline double ref_rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Central-difference gradient of f at x (x is perturbed in place and restored). */
typedef double (*ref_scalar_fn)(const double *x, void *ctx);
static inline void ref_numgrad(ref_scalar_fn f, double *x, size_t n, void *ctx, double eps, double *grad) {
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + eps;
        double fp = f(x, ctx);
        x[i] = saved - eps;
        double fm = f(x, ctx);
        x[i] = saved;
        grad[i] = (fp - fm) / (2 * eps);
    }
}

/* A copy of n floats (the first call of a backward, kept to compare the second with). */
static inline float *ref_copy_floats(const float *x, size_t n) {
    float *y = ref_new_floats(n);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* ||twice - 2*once|| / ||2*once||: a backward called a second time from the first call's
 * result must add the same again (the += contract of every backward). */
static inline double ref_doubling_err(const float *once, const float *twice, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)twice[i] - 2.0 * once[i];
        num += d * d;
        den += 4.0 * (double)once[i] * once[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Poison an output buffer so an op that forgets to write part of it is caught. */
static inline void ref_poison(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

#endif
