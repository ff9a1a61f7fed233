/* test_cpu_weights.c — checks the weight passes of the record's optimizer additions
 * (kernels/cpu/cpu_weights.h: weight decay, EMA, SWA's sum; kernels/cpu/cpu_fake_quant.h: late
 * QAT's int6 fake quantization) against double-precision references of their formulas, and that
 * their bits do not depend on the OpenMP thread count.
 *
 * Bounds: a product or sum of two fp32 numbers computed in double is exact, so the decay and
 * the SWA sum must equal the double result rounded once (the correctly rounded fp32 operation).
 * The EMA step rounds twice (ema*d, then the fused multiply-add), so one step is within 1 ulp of
 * the double formula, and 300 steps stay within 1e-6 relative of the double recurrence (each
 * step's error is damped by d < 1). The fake quantization is checked by its defining properties
 * (every output on the row's grid k*s with k in [-32, 31], the nearest grid point, ties to even,
 * the row maximum on +-31*s, the 1/31 floor of the scale) and against a double reference. */
#include "cpu_fake_quant.h"
#include "cpu_weights.h"
#include "harness.h"
#include "refcheck.h"

#include <omp.h>
#include <stdint.h>

/* The spacing of floats at x (one unit in the last place). */
static double ulps_of(float x) { return fabs((double)nextafterf(fabsf(x), INFINITY) - (double)fabsf(x)); }

static void weight_decay_is_correctly_rounded(void) {
    uint64_t rng = 11;
    const size_t n = 100003;
    float *p = ref_random_floats(n, -2, 2, &rng), *orig = ref_new_floats(n);
    memcpy(orig, p, n * sizeof *p);
    const double factor = 1.0 - 0.04 * 0.75 * 0.02; /* 1 - lr * wd */
    cpu_weight_decay(p, n, factor);
    for (size_t i = 0; i < n; i++) {
        const float want = (float)((double)orig[i] * (double)(float)factor);
        CHECK(memcmp(&p[i], &want, sizeof want) == 0, "p[%zu] = %.9g, expected %.9g", i, p[i], want);
    }
    cpu_weight_decay(p, 0, factor); /* nothing to do is allowed */
    free(p), free(orig);
}

static void ema_steps_vs_double(void) {
    uint64_t rng = 12;
    const size_t n = 4099;
    const double d = 0.997;
    float *ema = ref_random_floats(n, -1, 1, &rng), *w = ref_new_floats(n);
    double *ref = ref_doubles_of(ema, n);
    for (int step = 0; step < 300; step++) {
        ref_fill(w, n, -1, 1, &rng);
        if (step == 0) { /* one step: within 1 ulp of the exact formula */
            float *before = ref_new_floats(n);
            memcpy(before, ema, n * sizeof *ema);
            cpu_ema_update(ema, w, n, d);
            for (size_t i = 0; i < n; i++) {
                /* two roundings: of ema*d (half an ulp of it) and of the fused result */
                const double scaled = (double)(float)d * before[i];
                const double exact = scaled + (double)(float)(1.0 - d) * w[i];
                const double bound = 0.5 * ulps_of((float)scaled) + 0.5 * ulps_of((float)exact);
                CHECK(fabs(ema[i] - exact) <= bound, "step 1, element %zu: %.9g vs %.17g", i, ema[i], exact);
            }
            free(before);
        } else {
            cpu_ema_update(ema, w, n, d);
        }
        /* torch's formula with its fp32 coefficients (d + (1 - d) is not exactly 1 in fp32) */
        for (size_t i = 0; i < n; i++) ref[i] = (double)(float)d * ref[i] + (double)(float)(1.0 - d) * w[i];
    }
    const double err = ref_rel_err(ema, ref, n);
    CHECK(err <= 1e-6, "after 300 steps: relative error %.3e", err);
    free(ema), free(w), free(ref);
}

static void swa_start_copies_then_sums(void) {
    uint64_t rng = 13;
    const size_t n = 5000;
    float *w1 = ref_random_floats(n, -1, 1, &rng), *w2 = ref_random_floats(n, -1, 1, &rng);
    float *sum = ref_new_floats(n);
    ref_poison(sum, n); /* the start must not read the sum */
    w1[7] = -0.0f;
    cpu_swa_add(sum, w1, n, 1);
    CHECK(memcmp(sum, w1, n * sizeof *w1) == 0, "the first snapshot is not an exact copy");
    CHECK(signbit(sum[7]), "the copy lost -0.0 (a sum started from zero would)");
    cpu_swa_add(sum, w2, n, 0);
    for (size_t i = 0; i < n; i++) {
        const float want = (float)((double)w1[i] + (double)w2[i]);
        CHECK(memcmp(&sum[i], &want, sizeof want) == 0, "sum[%zu] = %.9g, expected %.9g", i, sum[i], want);
    }
    free(w1), free(w2), free(sum);
}

/* Rows of different kinds: random with a large range, all below 1 (the 1/31 floor), exact ties
 * on the grid, zeros, one huge value (the others round to 0). */
static void fill_quant_rows(float *w, int rows, int cols, uint64_t *rng) {
    for (int r = 0; r < rows; r++) {
        float *row = w + (size_t)r * cols;
        switch (r % 5) {
        case 0: ref_fill(row, (size_t)cols, -3, 3, rng); break;
        case 1: ref_fill(row, (size_t)cols, -0.5, 0.5, rng); break;
        case 2: /* max 31 -> s = 1: w = k/2 for k in [-30, 30], ties to both sides at odd k */
            for (int c = 0; c < cols; c++) row[c] = (float)((c % 61) - 30) / 2.0f;
            row[0] = 31.0f;
            break;
        case 3: for (int c = 0; c < cols; c++) row[c] = 0.0f; break;
        default:
            ref_fill(row, (size_t)cols, -0.01, 0.01, rng);
            row[cols / 2] = -100.0f;
            break;
        }
    }
}

static void fake_quant_on_the_grid(void) {
    uint64_t rng = 14;
    const int rows = 25, cols = 301;
    const size_t n = (size_t)rows * cols;
    float *w = ref_new_floats(n), *q = ref_new_floats(n);
    fill_quant_rows(w, rows, cols, &rng);
    ref_poison(q, n);
    cpu_fake_quant_int6_rows(q, w, rows, cols);
    for (int r = 0; r < rows; r++) {
        const float *wr = w + (size_t)r * cols, *qr = q + (size_t)r * cols;
        double row_max = 0;
        for (int c = 0; c < cols; c++) row_max = fmax(row_max, fabs(wr[c]));
        const double s = fmax(row_max / 31.0, 1.0 / 31.0); /* the scale, in double */
        for (int c = 0; c < cols; c++) {
            const double k = qr[c] / s;
            const double k_int = nearbyint(k);
            CHECK(isfinite(qr[c]), "row %d col %d not written", r, c);
            CHECK(fabs(k - k_int) <= 1e-5 && k_int >= -32 && k_int <= 31, "row %d col %d: %.9g is not k*s (k = %.7g, s %.9g)",
                  r, c, qr[c], k, s);
            /* the nearest grid point, ties to the even one */
            const double x = wr[c] / s, dist = fabs(x - k_int);
            CHECK(dist <= 0.5 + 1e-5, "row %d col %d: w/s = %.7g rounded to %g", r, c, x, k_int);
            if (fabs(dist - 0.5) < 1e-6) CHECK(fmod(k_int, 2) == 0, "row %d col %d: tie %.7g went to odd %g", r, c, x, k_int);
            CHECK(fabs(qr[c] - wr[c]) <= 0.5 * s * (1 + 1e-5), "row %d col %d: error %.3g above half a step", r, c,
                  fabs(qr[c] - wr[c]));
        }
        if (r % 5 == 2) /* -14.5 -> -14, -13.5 -> -14, -12.5 -> -12, 0.5 -> 0 */
            CHECK(qr[0] == 31.0f && qr[1] == -14.0f && qr[3] == -14.0f && qr[5] == -12.0f && qr[31] == 0.0f,
                  "the tie row: %g %g %g %g %g", qr[0], qr[1], qr[3], qr[5], qr[31]);
        if (r % 5 == 3) for (int c = 0; c < cols; c++) CHECK(qr[c] == 0.0f, "a zero row quantized to %g", qr[c]);
        if (r % 5 == 1) /* below 1: the scale is the 1/31 floor */
            for (int c = 0; c < cols; c++) CHECK(fabs(qr[c] * 31.0 - nearbyint(qr[c] * 31.0)) <= 1e-5, "row %d: %g", r, qr[c]);
        if (r % 5 == 4) CHECK(qr[cols / 2] == -100.0f, "the row maximum -100 came out as %.9g", qr[cols / 2]);
    }
    free(w), free(q);
}

static void fake_quant_vs_double(void) {
    uint64_t rng = 15;
    const int rows = 64, cols = 96;
    const size_t n = (size_t)rows * cols;
    float *w = ref_random_floats(n, -0.2, 0.2, &rng), *q = ref_new_floats(n);
    for (int r = 0; r < rows; r++) w[(size_t)r * cols] *= (float)(1 + r); /* row scales from 0.2 to 13 */
    double *ref = ref_new_doubles(n);
    for (int r = 0; r < rows; r++) {
        double row_max = 0;
        for (int c = 0; c < cols; c++) row_max = fmax(row_max, fabs(w[(size_t)r * cols + c]));
        const double s = fmax(row_max / 31.0, 1.0 / 31.0);
        for (int c = 0; c < cols; c++) {
            const double k = fmin(31, fmax(-32, nearbyint(w[(size_t)r * cols + c] / s)));
            ref[(size_t)r * cols + c] = k * s;
        }
    }
    cpu_fake_quant_int6_rows(q, w, rows, cols);
    const double err = ref_rel_err(q, ref, n);
    CHECK(err <= 1e-6, "relative error %.3e against the double formula", err);
    free(w), free(q), free(ref);
}

/* Same bits with 1, 2 and 3 threads, sizes above the threading threshold. */
static void bitwise_across_thread_counts(void) {
    uint64_t rng = 16;
    const int rows = 300, cols = 257;
    const size_t n = (size_t)rows * cols;
    float *w = ref_random_floats(n, -1, 1, &rng), *base = ref_random_floats(n, -1, 1, &rng);
    float *out[3];
    const int saved_threads = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        out[t] = ref_new_floats(4 * n);
        float *decayed = out[t], *ema = out[t] + n, *sum = out[t] + 2 * n, *quant = out[t] + 3 * n;
        memcpy(decayed, base, n * sizeof *base);
        cpu_weight_decay(decayed, n, 1.0 - 0.04 * 0.02);
        memcpy(ema, base, n * sizeof *base);
        cpu_ema_update(ema, w, n, 0.997);
        cpu_swa_add(sum, base, n, 1);
        cpu_swa_add(sum, w, n, 0);
        cpu_fake_quant_int6_rows(quant, w, rows, cols);
    }
    omp_set_num_threads(saved_threads);
    int same = memcmp(out[0], out[1], 4 * n * sizeof(float)) == 0 && memcmp(out[0], out[2], 4 * n * sizeof(float)) == 0;
    for (int t = 0; t < 3; t++) free(out[t]);
    free(w), free(base);
    CHECK(same, "1, 2 and 3 threads give different bits");
}

int main(void) {
    RUN(weight_decay_is_correctly_rounded);
    RUN(ema_steps_vs_double);
    RUN(swa_start_copies_then_sums);
    RUN(fake_quant_on_the_grid);
    RUN(fake_quant_vs_double);
    RUN(bitwise_across_thread_counts);
    TEST_EXIT();
}
