/* test_cpu_vecmath.c — the vectorizable exp and tanh of kernels/cpu/cpu_vecmath.h against double
 * precision libm over dense sweeps (error in units in the last place of the fp32 result), their
 * special values, and the threaded whole-buffer passes of kernels/cpu/cpu_buffer.c.
 * CT_TEST_VERBOSE=1 prints the measured worst errors. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_ops.h"
#include "cpu_vecmath.h"
#include "harness.h"

/* Bounds: glibc's own tanhf is off by 2.1 ulp at worst on the same sweep (measured); exp has
 * no cancellation anywhere, so a correct implementation is within about 1 ulp. */
#define EXP_MAX_ULP 2.0
#define TANH_MAX_ULP 3.0

static int verbose;

/* |got - want| in units of the spacing of fp32 numbers at want. */
static double ulp_error(float got, double want) {
    const float w = (float)want;
    const double spacing = (double)nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return fabs((double)got - want) / spacing;
}

/* The worst error of f against its double-precision reference over every x of [lo, hi), with a
 * step relative to |x| (about 200k points per decade of x); printed with CT_TEST_VERBOSE. */
static void check_sweep(const char *name, float (*f)(float), double (*ref)(double), float lo, float hi,
                        double max_ulp) {
    double worst = 0, worst_x = 0;
    long points = 0;
    for (float x = lo; x < hi; x += fabsf(x) > 1e-6f ? fabsf(x) * 1e-5f : 1e-11f, points++) {
        double e = ulp_error(f(x), ref((double)x));
        if (e > worst) worst = e, worst_x = x;
    }
    if (verbose) fprintf(stderr, "#   %s worst %.2f ulp at x = %.9g over %ld points\n", name, worst, worst_x, points);
    CHECK(worst <= max_ulp, "%s is off by %.2f ulp at x = %.9g (bound %g)", name, worst, worst_x, max_ulp);
}

static float vec_expf_fn(float x) { return vec_expf(x); }
static float vec_tanhf_fn(float x) { return vec_tanhf(x); }

static void test_exp_accuracy(void) { check_sweep("vec_expf", vec_expf_fn, exp, -87.336f, 88.7228f, EXP_MAX_ULP); }

static void test_tanh_accuracy(void) { check_sweep("vec_tanhf", vec_tanhf_fn, tanh, -20.0f, 20.0f, TANH_MAX_ULP); }

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static void test_special_values(void) {
    CHECK(vec_expf(0.0f) == 1.0f && vec_expf(-0.0f) == 1.0f, "exp(0) = %g", (double)vec_expf(0.0f));
    CHECK(isnan(vec_expf(NAN)), "exp(NaN) = %g", (double)vec_expf(NAN));
    CHECK(vec_expf(-INFINITY) == 0.0f && vec_expf(-100.0f) == 0.0f, "exp(-Inf) / exp(-100) not 0");
    CHECK(same_bits(vec_expf(-87.34f), 0.0f), "exp(-87.34) (subnormal) = %g, expected a flush to 0",
          (double)vec_expf(-87.34f));
    CHECK(isinf(vec_expf(INFINITY)) && isinf(vec_expf(88.723f)), "exp(+Inf) / exp(88.723) not +Inf");
    /* both ends of the normal range are reached (2^128 needs the split scale) */
    const float top = 88.7228f, bottom = -87.3365f;
    CHECK(isfinite(vec_expf(top)) && ulp_error(vec_expf(top), exp((double)top)) <= EXP_MAX_ULP, "exp(%.9g) = %g",
          (double)top, (double)vec_expf(top));
    CHECK(ulp_error(vec_expf(bottom), exp((double)bottom)) <= EXP_MAX_ULP, "exp(%.9g) = %g", (double)bottom,
          (double)vec_expf(bottom));

    CHECK(same_bits(vec_tanhf(0.0f), 0.0f) && same_bits(vec_tanhf(-0.0f), -0.0f), "tanh(+-0) loses the sign");
    CHECK(vec_tanhf(INFINITY) == 1.0f && vec_tanhf(-INFINITY) == -1.0f, "tanh(+-Inf) not +-1");
    CHECK(vec_tanhf(1e30f) == 1.0f && vec_tanhf(-10.0f) == -1.0f, "tanh saturates wrongly");
    CHECK(isnan(vec_tanhf(NAN)), "tanh(NaN) = %g", (double)vec_tanhf(NAN));
    CHECK(vec_tanhf(1e-30f) == 1e-30f, "tanh(1e-30) = %g", (double)vec_tanhf(1e-30f));
    /* odd symmetry holds bit for bit */
    for (float x = 1e-3f; x < 12.0f; x *= 1.37f)
        CHECK(same_bits(vec_tanhf(-x), -vec_tanhf(x)), "tanh(-%g) != -tanh(%g)", (double)x, (double)x);
}

/* The loops the softcapped cross-entropy runs are vectorized; the scalar and vector code must
 * agree bit for bit (no FMA contraction, no approximate reciprocal). */
static void test_vector_loop_equals_scalar(void) {
    /* random arguments over [-120, 120] (every branch of both: flushes, overflow, the tanh cap
     * at 9.1, its small-argument series) plus the special values, in an odd count so that the
     * vector loop has a scalar tail */
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.7228f, 88.723f, -87.3365f, -87.34f, 0.5f, -0.5f,
                             9.1f, -9.2f, 1e-30f, -1e-30f};
    enum { n = 4099 };
    float *x = ct_malloc(n * sizeof(float), "x"), *e = ct_malloc(n * sizeof(float), "e"),
          *t = ct_malloc(n * sizeof(float), "t");
    uint64_t s = 7;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 240.0 - 120.0);
    }
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[7 * i + 3] = special[i];
    for (int i = 0; i < n; i++) e[i] = vec_expf(x[i]);
    for (int i = 0; i < n; i++) t[i] = vec_tanhf(x[i] / 10.0f);
    for (int i = 0; i < n; i++) {
        volatile float xi = x[i]; /* volatile: evaluated one at a time, not in the vector loop */
        CHECK(same_bits(e[i], vec_expf(xi)), "vec_expf(%.9g): vector and scalar code differ", (double)x[i]);
        CHECK(same_bits(t[i], vec_tanhf(xi / 10.0f)), "vec_tanhf(%.9g): vector and scalar code differ",
              (double)x[i] / 10.0);
        if (harness_case_failed) break;
    }
    free(x), free(e), free(t);
}

static void test_buffer_passes(void) {
    const size_t sizes[] = {1, 4095, 4096, 4097, 3 * 4096 + 5};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float *a = ct_malloc((n + 1) * sizeof(float), "a"), *b = ct_malloc((n + 1) * sizeof(float), "b");
        for (size_t i = 0; i <= n; i++) a[i] = (float)i * 0.5f - 3.0f, b[i] = 1.25f * (float)(i % 7);
        cpu_add_into(a, b, n);
        for (size_t i = 0; i < n; i++) CHECK(a[i] == (float)i * 0.5f - 3.0f + 1.25f * (float)(i % 7), "add_into [%zu]", i);
        CHECK(a[n] == (float)n * 0.5f - 3.0f, "add_into wrote past n = %zu", n);
        cpu_copy(a, b, n);
        CHECK(memcmp(a, b, n * sizeof(float)) == 0, "copy of %zu floats differs", n);
        CHECK(a[n] == (float)n * 0.5f - 3.0f, "copy wrote past n = %zu", n);
        cpu_zero(a, n);
        for (size_t i = 0; i < n; i++) CHECK(same_bits(a[i], 0.0f), "zero [%zu] = %g", i, (double)a[i]);
        CHECK(a[n] == (float)n * 0.5f - 3.0f, "zero wrote past n = %zu", n);
        free(a), free(b);
        if (harness_case_failed) return;
    }
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") && *getenv("CT_TEST_VERBOSE");
    RUN(test_exp_accuracy);
    RUN(test_tanh_accuracy);
    RUN(test_special_values);
    RUN(test_vector_loop_equals_scalar);
    RUN(test_buffer_passes);
    TEST_EXIT();
}
