/* test_cpu_optim.c — checks the CPU optimizer math (kernels/cpu/cpu_optim.h) against plain
 * double-precision references of the same formulas, that results are bitwise independent of
 * the OpenMP thread count, and that the CPU backend's optimizer step decays each parameter group
 * by its own weight decay (muon_wd for the Muon matrices, adam_wd for the AdamW scalars, embed_wd
 * (default adam_wd's) for the token embeddings, none for lm_head); the 1.0611 record's Muon
 * options (Polar Express, MuonEq-R row normalisation) against double references.
 *
 * Error bounds. Newton–Schulz: the fp32 result is compared with the same iteration run in double
 * from the same fp32 input. Each step multiplies by the coefficient a = 3.44 and by polynomials in
 * X X^T, so fp32 rounding (~6e-8 per operation, summed over K ~ 300 terms in random-sign order) is
 * amplified a few times per step; the measured relative Frobenius error after 5 steps is ~1e-6
 * (2e-6 at most here), so 1e-4 leaves room for other BLAS kernels without hiding a real bug (a
 * wrong coefficient or a missed transpose gives O(1) errors). Element-wise ops (Adam, momentum):
 * a handful of fp32 roundings, bound 1e-5 relative on the update.
 *
 * Contents (sections, in order): double-precision references; Newton–Schulz; the 1.0611
 * record's Muon options (Polar Express, MuonEq-R, both through the update); Muon; Adam; SGD
 * (test-time training's; also against torch's bits); clipping (and the fixed-order sum of
 * squares); weight decay per group (embed_wd). */
#include "backend.h"
#include "common.h"
#include "cpu_optim.h"
#include "harness.h"
#include "refcheck.h"

#include <omp.h>
#include <stdint.h>

/* ---- double-precision references ---- */

/* C[M x N] = A[M x K] B[K x N] (row-major), naive but in cache-friendly i-k-j order. */
static void ref_matmul(const double *A, const double *B, double *C, int M, int K, int N) {
    for (int i = 0; i < M; i++) {
        double *c = C + (size_t)i * N;
        for (int j = 0; j < N; j++) c[j] = 0;
        for (int k = 0; k < K; k++) {
            const double a = A[(size_t)i * K + k];
            const double *b = B + (size_t)k * N;
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

static void ref_transpose(const double *A, double *T, int r, int c) {
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) T[(size_t)j * r + i] = A[(size_t)i * c + j];
}

/* The 1.0611 record's Polar Express triples (a, b, c), written out from its table in double. */
static const double polar_express[5][3] = {
    {8.156554524902461, -22.48329292557795, 15.878769915207462},
    {4.042929935166739, -2.808917465908714, 0.5000178451051316},
    {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
    {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
    {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
};

/* zeropower_via_newtonschulz5 in double; out is rows x cols. coef: NULL = the quintic
 * (3.4445, -4.7750, 2.0315) every step, else triple s at step s. */
static void ref_newton_schulz(const float *G, double *out, int rows, int cols, int steps, const double (*coef)[3]) {
    const int transposed = rows > cols;
    const int m = transposed ? cols : rows, n = transposed ? rows : cols;
    const size_t mn = (size_t)m * n;
    double *x = malloc(mn * sizeof *x), *xt = malloc(mn * sizeof *xt);
    double *bx = malloc(mn * sizeof *bx);
    double *a = malloc((size_t)m * m * sizeof *a), *aa = malloc((size_t)m * m * sizeof *aa);
    double norm = 0;
    for (size_t i = 0; i < mn; i++) norm += (double)G[i] * G[i];
    norm = sqrt(norm) + 1e-7;
    double *g = malloc(mn * sizeof *g);
    for (size_t i = 0; i < mn; i++) g[i] = G[i] / norm;
    if (transposed) ref_transpose(g, x, rows, cols);
    else memcpy(x, g, mn * sizeof *x);
    for (int s = 0; s < steps; s++) {
        ref_transpose(x, xt, m, n);
        ref_matmul(x, xt, a, m, n, m);
        ref_matmul(a, a, aa, m, m, m);
        const double ca = coef ? coef[s][0] : 3.4445, cb = coef ? coef[s][1] : -4.7750, cc = coef ? coef[s][2] : 2.0315;
        for (size_t i = 0; i < (size_t)m * m; i++) aa[i] = cb * a[i] + cc * aa[i];
        ref_matmul(aa, x, bx, m, m, n);
        for (size_t i = 0; i < mn; i++) x[i] = ca * x[i] + bx[i];
    }
    if (transposed) ref_transpose(x, out, m, n);
    else memcpy(out, x, mn * sizeof *out);
    free(x), free(xt), free(bx), free(a), free(aa), free(g);
}

static void ref_newton_schulz5(const float *G, double *out, int rows, int cols, int steps) {
    ref_newton_schulz(G, out, rows, cols, steps, NULL);
}

/* MuonEq-R in double: each row divided by max(||row||_2, 1e-7). */
static void ref_row_normalize(const float *u, double *out, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double sumsq = 0;
        for (int j = 0; j < cols; j++) sumsq += (double)u[(size_t)r * cols + j] * u[(size_t)r * cols + j];
        const double d = fmax(sqrt(sumsq), 1e-7);
        for (int j = 0; j < cols; j++) out[(size_t)r * cols + j] = u[(size_t)r * cols + j] / d;
    }
}

/* Eigenvalues of a symmetric n x n matrix (destroyed) by cyclic Jacobi rotations, into eig. */
static void ref_sym_eigenvalues(double *S, int n, double *eig) {
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) off += S[p * n + q] * S[p * n + q];
        if (off < 1e-26) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                const double apq = S[p * n + q];
                if (fabs(apq) < 1e-300) continue;
                const double theta = (S[q * n + q] - S[p * n + p]) / (2 * apq);
                const double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                const double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < n; k++) { /* columns p, q */
                    const double skp = S[k * n + p], skq = S[k * n + q];
                    S[k * n + p] = c * skp - s * skq;
                    S[k * n + q] = s * skp + c * skq;
                }
                for (int k = 0; k < n; k++) { /* rows p, q */
                    const double spk = S[p * n + k], sqk = S[q * n + k];
                    S[p * n + k] = c * spk - s * sqk;
                    S[q * n + k] = s * spk + c * sqk;
                }
            }
    }
    for (int i = 0; i < n; i++) eig[i] = S[i * n + i];
}

static float *random_matrix(size_t n, uint64_t seed, double lo, double hi) {
    float *x = malloc(n * sizeof *x);
    uint64_t state = seed;
    ref_fill(x, n, lo, hi, &state);
    return x;
}

/* Relative error of an optimizer's change p - p0 (exact in double) against the reference's
 * p_ref - p0: the change is what the optimizer computes; p itself hides its errors. */
static double change_rel_err(const float *p, const float *p0, const double *p_ref, size_t n) {
    double diff = 0, size = 0;
    for (size_t i = 0; i < n; i++) {
        const double delta = (double)p[i] - p0[i], delta_ref = p_ref[i] - p0[i];
        diff += (delta - delta_ref) * (delta - delta_ref);
        size += delta_ref * delta_ref;
    }
    return sqrt(diff / size);
}

/* ---- Newton–Schulz ---- */

static double ns5_error_vs_double(int rows, int cols, int steps, uint64_t seed) {
    const size_t n = (size_t)rows * cols;
    float *G = random_matrix(n, seed, -1, 1), *X = malloc(n * sizeof *X);
    float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
    double *ref = malloc(n * sizeof *ref);
    ref_poison(X, n);
    cpu_newton_schulz5(G, X, rows, cols, steps, scratch);
    ref_newton_schulz5(G, ref, rows, cols, steps);
    const double err = ref_rel_err(X, ref, n);
    printf("  cpu_newton_schulz5 %dx%d steps=%d: rel err vs double %.3g\n", rows, cols, steps, err);
    free(G), free(X), free(scratch), free(ref);
    return err;
}

/* 160 crosses the 128-wide symmetric tiles, so tile edges and the mirrored triangle are used. */
static void ns5_square_vs_double(void) {
    double err = ns5_error_vs_double(160, 160, 5, 1);
    CHECK(err < 1e-4, "square: rel err %.3g", err);
    err = ns5_error_vs_double(33, 33, 1, 2);
    CHECK(err < 1e-5, "one step: rel err %.3g", err);
}

/* rows > cols: the iteration runs on the transpose (m = 136 crosses a tile, n = 300 too). */
static void ns5_tall_vs_double(void) {
    double err = ns5_error_vs_double(300, 136, 5, 3);
    CHECK(err < 1e-4, "tall: rel err %.3g", err);
}

static void ns5_wide_vs_double(void) {
    double err = ns5_error_vs_double(72, 280, 5, 4);
    CHECK(err < 1e-4, "wide: rel err %.3g", err);
}

/* steps = 0 is only the normalisation, which is element-wise fp32: G / (float(||G||) + 1e-7f). */
static void ns5_zero_steps_is_normalisation(void) {
    const int rows = 37, cols = 21;
    const size_t n = (size_t)rows * cols;
    float *G = random_matrix(n, 5, -3, 3), *X = malloc(n * sizeof *X);
    float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
    cpu_newton_schulz5(G, X, rows, cols, 0, scratch);
    double sumsq = 0;
    for (size_t i = 0; i < n; i++) sumsq += (double)G[i] * G[i];
    const float divisor = (float)sqrt(sumsq) + 1e-7f;
    size_t mismatches = 0;
    for (size_t i = 0; i < n; i++) mismatches += X[i] != G[i] / divisor;
    free(G), free(X), free(scratch);
    CHECK(mismatches == 0, "%zu elements differ from G / (||G|| + eps)", mismatches);
}

/* After 5 steps every singular value s of G/||G|| in [~0.02, 1] has been mapped by the quintic
 * p(s) = a s + b s^3 + c s^5 into [0.682, 1.135] (iterating p on a fine grid of [0.05, 1] gives
 * exactly that range). A random 64 x 256 matrix has s/||G|| in about [0.06, 0.19]. The singular
 * values of X are the square roots of the eigenvalues of X X^T. */
static void ns5_singular_values_in_band(void) {
    const int rows = 64, cols = 256;
    const size_t n = (size_t)rows * cols;
    float *G = random_matrix(n, 6, -1, 1), *X = malloc(n * sizeof *X);
    float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
    cpu_newton_schulz5(G, X, rows, cols, 5, scratch);
    double *gram = calloc((size_t)rows * rows, sizeof *gram), *eig = malloc(rows * sizeof *eig);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < rows; j++)
            for (int k = 0; k < cols; k++)
                gram[i * rows + j] += (double)X[(size_t)i * cols + k] * X[(size_t)j * cols + k];
    ref_sym_eigenvalues(gram, rows, eig);
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < rows; i++) {
        const double s = sqrt(fmax(eig[i], 0));
        lo = fmin(lo, s), hi = fmax(hi, s);
    }
    printf("  singular values of NS5(64x256): [%.4f, %.4f]\n", lo, hi);
    free(G), free(X), free(scratch), free(gram), free(eig);
    CHECK(lo >= 0.68 && hi <= 1.14, "singular values in [%.4f, %.4f], expected within [0.68, 1.14]",
          lo, hi);
}

/* Same bits with 1, 2 and 3 threads (3 oversubscribes this 2-core machine on purpose), for odd
 * sizes (where OpenBLAS's own threaded driver would block K differently) and for in-place use. */
static void ns5_bitwise_across_thread_counts(void) {
    static const int shapes[][2] = {{129, 257}, {385, 130}, {300, 300}};
    const int saved_threads = omp_get_max_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t n = (size_t)rows * cols;
        float *G = random_matrix(n, 7 + s, -1, 1);
        float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
        float *results[3];
        for (int t = 0; t < 3; t++) {
            omp_set_num_threads(t + 1);
            results[t] = malloc(n * sizeof **results);
            cpu_newton_schulz5(G, results[t], rows, cols, 5, scratch);
        }
        omp_set_num_threads(2);
        cpu_newton_schulz5(G, G, rows, cols, 5, scratch); /* in place */
        omp_set_num_threads(saved_threads);
        const int same12 = !memcmp(results[0], results[1], n * sizeof(float));
        const int same13 = !memcmp(results[0], results[2], n * sizeof(float));
        const int same_in_place = !memcmp(results[0], G, n * sizeof(float));
        for (int t = 0; t < 3; t++) free(results[t]);
        free(G), free(scratch);
        CHECK(same12 && same13, "%dx%d: bits depend on the thread count (1 vs 2: %s, 1 vs 3: %s)",
              rows, cols, same12 ? "same" : "differ", same13 ? "same" : "differ");
        CHECK(same_in_place, "%dx%d: in-place result differs", rows, cols);
    }
}

/* ---- the 1.0611 record's Muon options (issue 56) ---- */

/* Polar Express (muon_polar_express): the per-iteration triples against the same iteration in
 * double with the record's coefficients (the fp32 ones are those rounded once, 6e-8 relative,
 * far below the bound); tall and wide, and fewer steps using the first triples. A wrong or
 * shifted triple, or the quintic's coefficients, give O(1) errors (checked: the quintic's result
 * is far from the reference). steps above 5 run the 5 triples only (the record's slice). */
static void ns_polar_express_vs_double(void) {
    static const int shapes[][3] = {{160, 96, 5}, {72, 280, 5}, {300, 136, 5}, {64, 64, 3}, {48, 80, 1}};
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const int rows = shapes[k][0], cols = shapes[k][1], steps = shapes[k][2];
        const size_t n = (size_t)rows * cols;
        float *G = random_matrix(n, 50 + k, -1, 1), *X = malloc(n * sizeof *X), *Q = malloc(n * sizeof *Q);
        float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
        double *ref = malloc(n * sizeof *ref);
        ref_poison(X, n);
        cpu_newton_schulz(G, X, rows, cols, steps, 1, scratch);
        cpu_newton_schulz5(G, Q, rows, cols, steps, scratch);
        ref_newton_schulz(G, ref, rows, cols, steps, polar_express);
        const double err = ref_rel_err(X, ref, n), quintic = ref_rel_err(Q, ref, n);
        printf("  polar express %dx%d steps=%d: rel err vs double %.3g (the quintic's: %.3g)\n", rows, cols, steps,
               err, quintic);
        CHECK(err < 1e-4, "%dx%d steps %d: rel err %.3g", rows, cols, steps, err);
        CHECK(quintic > 1e-2, "%dx%d steps %d: the quintic gives the same (%.3g): coefficients not used?", rows, cols,
              steps, quintic);
        if (steps == 5) { /* 7 asked: the record's slice runs the same 5 */
            cpu_newton_schulz(G, Q, rows, cols, 7, 1, scratch);
            CHECK(!memcmp(Q, X, n * sizeof *X), "%dx%d: 7 steps with Polar Express differ from 5", rows, cols);
        }
        free(G), free(X), free(Q), free(scratch), free(ref);
    }
    /* polar_express 0 is cpu_newton_schulz5, bit for bit (the default path untouched) */
    const int rows = 129, cols = 257;
    const size_t n = (size_t)rows * cols;
    float *G = random_matrix(n, 60, -1, 1), *A = malloc(n * sizeof *A), *B = malloc(n * sizeof *B);
    float *scratch = malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof *scratch);
    cpu_newton_schulz(G, A, rows, cols, 5, 0, scratch);
    cpu_newton_schulz5(G, B, rows, cols, 5, scratch);
    CHECK(!memcmp(A, B, n * sizeof *A), "polar_express 0 differs from the quintic");
    free(G), free(A), free(B), free(scratch);
}

/* MuonEq-R (muon_row_normalize): rows of the [out, in] matrix (norm over the in-features, the
 * record's dim=-1) against double; a zero row stays zero (divided by the 1e-7 floor), a row of
 * tiny values is divided by the floor, not by its norm; bitwise across thread counts. */
static void muon_row_normalize_vs_double(void) {
    const int rows = 300, cols = 137; /* 137: a tail beyond the eight lanes */
    const size_t n = (size_t)rows * cols;
    float *u = random_matrix(n, 70, -2, 2);
    for (int j = 0; j < cols; j++) u[5 * cols + j] = 0.0f;                            /* zero row */
    for (int j = 0; j < cols; j++) u[9 * cols + j] = (j % 2 ? 1e-10f : -2e-10f);      /* below the floor */
    for (int j = 0; j < cols; j++) u[11 * cols + j] = (float)(j + 1) * 1000.0f;      /* large */
    double *ref = malloc(n * sizeof *ref);
    ref_row_normalize(u, ref, rows, cols);
    float *x1 = ref_copy_floats(u, n), *x2 = ref_copy_floats(u, n);
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu_muon_row_normalize(x1, rows, cols);
    omp_set_num_threads(3);
    cpu_muon_row_normalize(x2, rows, cols);
    omp_set_num_threads(saved_threads);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(x1[i] - ref[i]) / fmax(fabs(ref[i]), 1e-30);
        if (ref[i] != 0) worst = fmax(worst, e);
    }
    printf("  row normalize %dx%d: max elementwise rel err vs double %.3g\n", rows, cols, worst);
    /* norm rounded to fp32 once and one fp32 division: 2 ulp */
    CHECK(worst <= 0x1p-22, "rel err %.3g", worst);
    int zero_ok = 1;
    for (int j = 0; j < cols; j++) zero_ok &= x1[5 * cols + j] == 0.0f;
    CHECK(zero_ok, "the zero row did not stay zero");
    CHECK(x1[9 * cols] == -2e-10f / 1e-7f && x1[9 * cols + 1] == 1e-10f / 1e-7f,
          "a row below the floor: %g %g, expected the 1e-7 divisor", x1[9 * cols], x1[9 * cols + 1]);
    CHECK(!memcmp(x1, x2, n * sizeof *x1), "bits depend on the thread count");
    free(u), free(ref), free(x1), free(x2);
}

/* The whole update with both options (CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE) on a tall
 * matrix: momentum, nesterov, row normalisation, Polar Express, the aspect scale, against double
 * from the fp32 nesterov update (as muon_steps_vs_double). */
static void muon_options_vs_double(void) {
    const int rows = 200, cols = 96;
    const size_t n = (size_t)rows * cols;
    const double momentum = 0.97;
    float *g = random_matrix(n, 80, -1, 1), *buf = random_matrix(n, 81, -1, 1), *update = malloc(n * sizeof *update);
    float *scratch = malloc(cpu_muon_scratch_floats(rows, cols) * sizeof *scratch);
    float *u = malloc(n * sizeof *u);
    double *un = malloc(n * sizeof *un), *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < n; i++) {
        const float b = buf[i] * (float)momentum + g[i];
        u[i] = fmaf(b, (float)momentum, g[i]);
    }
    ref_row_normalize(u, un, rows, cols);
    float *un_f = malloc(n * sizeof *un_f);
    for (size_t i = 0; i < n; i++) un_f[i] = (float)un[i];
    ref_newton_schulz(un_f, ref, rows, cols, 5, polar_express);
    for (size_t i = 0; i < n; i++) ref[i] *= sqrt((double)rows / cols);
    cpu_muon_compute_update(g, buf, update, rows, cols, momentum, 1, 5, CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE,
                            scratch);
    const double err = ref_rel_err(update, ref, n);
    printf("  muon polar express + row normalize 200x96: rel err vs double %.3g\n", err);
    CHECK(err < 1e-4, "rel err %.3g", err);
    free(g), free(buf), free(update), free(scratch), free(u), free(un), free(ref), free(un_f);
}

/* ---- Muon ---- */

/* Two Muon steps on a tall matrix (so the sqrt(rows/cols) scale is not 1) against double. */
static void muon_steps_vs_double(void) {
    const int rows = 200, cols = 96, steps = 5;
    const size_t n = (size_t)rows * cols;
    const double momentum = 0.9, lr = 0.04;
    float *p = random_matrix(n, 11, -0.1, 0.1), *buf = calloc(n, sizeof *buf);
    float *update = malloc(n * sizeof *update);
    float *scratch = malloc(cpu_muon_scratch_floats(rows, cols) * sizeof *scratch);
    double *p_ref = malloc(n * sizeof *p_ref), *buf_ref = calloc(n, sizeof *buf_ref);
    double *o_ref = malloc(n * sizeof *o_ref);
    float *u_f = malloc(n * sizeof *u_f);
    ref_to_double(p, p_ref, n);
    double update_err = 0, buf_err = 0, p_err = 0;
    for (int step = 0; step < 2; step++) {
        float *g = random_matrix(n, 20 + step, -1, 1);
        cpu_muon_compute_update(g, buf, update, rows, cols, momentum, 1, steps, 0, scratch);
        cpu_muon_apply_update(p, update, n, lr);

        /* Reference: momentum in double; NS in double from the fp32-rounded nesterov update, so
         * the comparison measures our NS, not the (ill-conditioned) rounding of its input. */
        for (size_t i = 0; i < n; i++) {
            buf_ref[i] = momentum * buf_ref[i] + g[i];
            u_f[i] = (float)(g[i] + momentum * buf_ref[i]);
        }
        ref_newton_schulz5(u_f, o_ref, rows, cols, steps);
        const double scale = sqrt((double)rows / cols);
        for (size_t i = 0; i < n; i++) {
            o_ref[i] *= scale;
            p_ref[i] -= lr * o_ref[i];
        }
        update_err = fmax(update_err, ref_rel_err(update, o_ref, n));
        buf_err = fmax(buf_err, ref_rel_err(buf, buf_ref, n));
        p_err = fmax(p_err, ref_rel_err(p, p_ref, n));
        free(g);
    }
    printf("  muon 200x96: rel err update %.3g, momentum buffer %.3g, param %.3g\n", update_err,
           buf_err, p_err);
    free(p), free(buf), free(update), free(scratch);
    free(p_ref), free(buf_ref), free(o_ref), free(u_f);
    CHECK(update_err < 1e-4, "update rel err %.3g", update_err);
    CHECK(buf_err < 1e-6, "momentum buffer rel err %.3g", buf_err);
    CHECK(p_err < 1e-6, "param rel err %.3g", p_err);
}

/* Without nesterov the update is NS(buf), and the apply step is p - lr*update exactly as fmaf. */
static void muon_plain_momentum_and_apply(void) {
    const int rows = 40, cols = 64;
    const size_t n = (size_t)rows * cols;
    float *g = random_matrix(n, 30, -1, 1), *buf = random_matrix(n, 31, -1, 1);
    float *update = malloc(n * sizeof *update), *expected = malloc(n * sizeof *expected);
    float *scratch = malloc(cpu_muon_scratch_floats(rows, cols) * sizeof *scratch);
    for (size_t i = 0; i < n; i++) expected[i] = buf[i] * 0.95f + g[i];
    cpu_muon_compute_update(g, buf, update, rows, cols, 0.95, 0, 3, 0, scratch);
    const int buf_same = !memcmp(buf, expected, n * sizeof(float));
    cpu_newton_schulz5(expected, expected, rows, cols, 3, scratch);
    const int update_same = !memcmp(update, expected, n * sizeof(float)); /* wide: scale is 1 */
    float p[3] = {1.0f, -2.0f, 0.5f}, o[3] = {0.25f, 1.0f, -3.0f};
    cpu_muon_apply_update(p, o, 3, 0.5);
    free(g), free(buf), free(update), free(expected), free(scratch);
    CHECK(buf_same, "momentum buffer is not buf*mu + g");
    CHECK(update_same, "non-nesterov update is not NS(buf)");
    CHECK(p[0] == 0.875f && p[1] == -2.5f && p[2] == 2.0f, "apply gave %g %g %g", p[0], p[1], p[2]);
}

/* ---- Adam ---- */

/* Five steps with a changing lr against torch's formula in double. Gradients span 1e-4..1 in
 * magnitude so both the eps-dominated and the sqrt(v)-dominated regimes are exercised. */
static void adam_five_steps_vs_double(void) {
    const size_t n = 5003;
    const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
    float *p = random_matrix(n, 40, -1, 1), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
    double *p_ref = malloc(n * sizeof *p_ref), *m_ref = calloc(n, sizeof *m_ref);
    double *v_ref = calloc(n, sizeof *v_ref);
    float *p0 = malloc(n * sizeof *p0);
    memcpy(p0, p, n * sizeof *p0);
    ref_to_double(p, p_ref, n);
    for (int t = 1; t <= 5; t++) {
        float *g = random_matrix(n, 50 + t, -1, 1);
        uint64_t state = 60 + t;
        for (size_t i = 0; i < n; i++) g[i] *= (float)pow(10, -4 * ref_rand01(&state));
        const double lr = 0.01 * t;
        cpu_adam_step(p, g, m, v, n, lr, beta1, beta2, eps, t);
        const double bc1 = 1 - pow(beta1, t), bc2 = 1 - pow(beta2, t);
        for (size_t i = 0; i < n; i++) {
            m_ref[i] = beta1 * m_ref[i] + (1 - beta1) * g[i];
            v_ref[i] = beta2 * v_ref[i] + (1 - beta2) * (double)g[i] * g[i];
            p_ref[i] -= lr / bc1 * m_ref[i] / (sqrt(v_ref[i]) / sqrt(bc2) + eps);
        }
        free(g);
    }
    const double m_err = ref_rel_err(m, m_ref, n), v_err = ref_rel_err(v, v_ref, n);
    const double delta_err = change_rel_err(p, p0, p_ref, n), p_err = ref_rel_err(p, p_ref, n);
    printf("  adam 5 steps: rel err m %.3g, v %.3g, param change %.3g, param %.3g\n", m_err, v_err,
           delta_err, p_err);
    free(p), free(m), free(v), free(p_ref), free(m_ref), free(v_ref), free(p0);
    CHECK(m_err < 1e-6 && v_err < 1e-6, "moment rel errs %.3g %.3g", m_err, v_err);
    CHECK(delta_err < 1e-5, "param change rel err %.3g", delta_err);
    CHECK(p_err < 1e-6, "param rel err %.3g", p_err);
}

/* First step by hand: m = 0.1 g, v = 0.05 g^2, bc1 = 0.1, bc2 = 0.05, so the step is
 * lr * g / (|g| + eps) = lr * sign(g) for |g| >> eps. */
static void adam_first_step_is_sign_step(void) {
    float p[3] = {1.0f, 1.0f, 1.0f}, g[3] = {2.0f, -0.5f, 0.0f}, m[3] = {0}, v[3] = {0};
    cpu_adam_step(p, g, m, v, 3, 0.001, 0.9, 0.95, 1e-8, 1);
    CHECK_CLOSE(p[0], 0.999, 1e-6);
    CHECK_CLOSE(p[1], 1.001, 1e-6);
    CHECK(p[2] == 1.0f, "zero gradient moved the parameter to %.9g", p[2]);
}

/* ---- SGD ---- */

/* Three steps (first, then two with momentum) with a changing lr and coupled weight decay
 * against torch.optim.SGD's formula in double. n crosses the threading threshold. */
static void sgd_steps_vs_double(void) {
    const size_t n = 40009;
    const double momentum = 0.9, wd = 0.05;
    float *p = random_matrix(n, 90, -1, 1), *buf = malloc(n * sizeof *buf), *p0 = malloc(n * sizeof *p0);
    double *p_ref = malloc(n * sizeof *p_ref), *buf_ref = malloc(n * sizeof *buf_ref);
    ref_poison(buf, n); /* the first step must write buf without reading it */
    memcpy(p0, p, n * sizeof *p0);
    ref_to_double(p, p_ref, n);
    for (int t = 0; t < 3; t++) {
        float *g = random_matrix(n, 91 + t, -1, 1);
        const double lr = 0.1 / (t + 1);
        cpu_sgd_step(p, buf, g, n, lr, momentum, wd, t == 0);
        for (size_t i = 0; i < n; i++) {
            const double d = g[i] + wd * p_ref[i];
            buf_ref[i] = t == 0 ? d : momentum * buf_ref[i] + d;
            p_ref[i] -= lr * buf_ref[i];
        }
        free(g);
    }
    const double buf_err = ref_rel_err(buf, buf_ref, n), delta_err = change_rel_err(p, p0, p_ref, n);
    printf("  sgd 3 steps: rel err buf %.3g, param change %.3g\n", buf_err, delta_err);
    free(p), free(buf), free(p0), free(p_ref), free(buf_ref);
    CHECK(buf_err < 1e-6, "momentum buffer rel err %.3g", buf_err);
    CHECK(delta_err < 1e-5, "param change rel err %.3g", delta_err);
}

/* Values exact in fp32, by hand: the first step copies d into buf; later steps mix; momentum 0
 * runs without a buffer (NULL) and ignores `first`; wd 0 leaves the gradient alone. */
static void sgd_by_hand(void) {
    float p[2] = {1.0f, -2.0f}, buf[2] = {NAN, NAN};
    const float g[2] = {0.5f, 0.25f};
    cpu_sgd_step(p, buf, g, 2, 0.5, 0.5, 0.25, 1); /* d = g + p/4 = {0.75, -0.25} */
    CHECK(buf[0] == 0.75f && buf[1] == -0.25f, "first step buf %g %g", buf[0], buf[1]);
    CHECK(p[0] == 0.625f && p[1] == -1.875f, "first step p %g %g", p[0], p[1]);
    /* d = g + p/4 = {0.65625, -0.21875}; buf = buf/2 + d = {1.03125, -0.34375}; p -= buf/2 */
    cpu_sgd_step(p, buf, g, 2, 0.5, 0.5, 0.25, 0);
    CHECK(buf[0] == 1.03125f && buf[1] == -0.34375f, "second step buf %g %g", buf[0], buf[1]);
    CHECK(p[0] == 0.109375f && p[1] == -1.703125f, "second step p %g %g", p[0], p[1]);
    float q[2] = {1.0f, -2.0f};
    cpu_sgd_step(q, NULL, g, 2, 0.5, 0.0, 0.0, 0); /* plain p -= lr * g */
    CHECK(q[0] == 0.75f && q[1] == -2.125f, "momentum 0 p %g %g", q[0], q[1]);
    cpu_sgd_step(q, NULL, g, 2, 0.5, 0.0, 0.5, 1); /* d = g + q/2 = {0.875, -0.8125} */
    CHECK(q[0] == 0.3125f && q[1] == -1.71875f, "momentum 0 with wd p %g %g", q[0], q[1]);
}

static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* torch 1.13's bits (Debian 12's CPU build, SGD(lr 0.1, momentum 0.9, weight_decay 0.01), a
 * second step at lr 0.05) for four elements picked where computing either add_ with alpha
 * unfused (two roundings) gives another p: this fails unless both are fused like torch's. Over
 * 100003 random elements and 3 steps cpu_sgd_step matched torch bit for bit in p and buf,
 * single-tensor and foreach, with and without momentum and decay; unfused, 6% of p differ. */
static void sgd_matches_torch_bits(void) {
    static const uint32_t p0[4] = {0xbf9d7267, 0x3eda26a5, 0x3f34ee0e, 0xbf6a0897};
    static const uint32_t g1[4] = {0x3f2fea0f, 0x3b8d948b, 0x3f055948, 0x3eb4558e};
    static const uint32_t g2[4] = {0xbe30ad75, 0x3efbf413, 0xbf6ee118, 0xbf540e6d};
    static const uint32_t torch_p[4] = {0xbfa8c8fc, 0x3ecccead, 0x3f2d3137, 0xbf6c0b52};
    static const uint32_t torch_buf[4] = {0x3ed7fed5, 0x3f010add, 0xbee72034, 0xbf0770c0};
    float p[4], a[4], b[4], buf[4];
    for (int i = 0; i < 4; i++) p[i] = float_of_bits(p0[i]), a[i] = float_of_bits(g1[i]), b[i] = float_of_bits(g2[i]);
    cpu_sgd_step(p, buf, a, 4, 0.1, 0.9, 0.01, 1);
    cpu_sgd_step(p, buf, b, 4, 0.05, 0.9, 0.01, 0);
    for (int i = 0; i < 4; i++) {
        CHECK(p[i] == float_of_bits(torch_p[i]), "p[%d] = %.9g, torch %.9g", i, p[i], float_of_bits(torch_p[i]));
        CHECK(buf[i] == float_of_bits(torch_buf[i]), "buf[%d] = %.9g, torch %.9g", i, buf[i],
              float_of_bits(torch_buf[i]));
    }
}

/* Element-wise, so 1, 2 and 3 threads must give the same bits (n above the threshold). */
static void sgd_bitwise_across_thread_counts(void) {
    const size_t n = 100003;
    float *p0 = random_matrix(n, 95, -1, 1), *g = random_matrix(n, 96, -1, 1), *buf0 = random_matrix(n, 97, -1, 1);
    float *out[3][2];
    const int saved_threads = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(t + 1);
        out[t][0] = malloc(n * sizeof(float)), out[t][1] = malloc(n * sizeof(float));
        memcpy(out[t][0], p0, n * sizeof(float));
        memcpy(out[t][1], buf0, n * sizeof(float));
        cpu_sgd_step(out[t][0], out[t][1], g, n, 0.03, 0.9, 0.01, 0);
    }
    omp_set_num_threads(saved_threads);
    int same = 1;
    for (int t = 1; t < 3; t++)
        for (int k = 0; k < 2; k++) same &= !memcmp(out[0][k], out[t][k], n * sizeof(float));
    int moved = memcmp(out[0][0], p0, n * sizeof(float)) != 0;
    for (int t = 0; t < 3; t++) free(out[t][0]), free(out[t][1]);
    free(p0), free(g), free(buf0);
    CHECK(moved, "the step left p unchanged");
    CHECK(same, "p or buf differ between 1, 2 and 3 threads");
}

/* ---- clipping ---- */

static void clip_grad_norm_matches_torch_formula(void) {
    const size_t counts[3] = {1000, 40000, 3};
    float *grads[3];
    long double sumsq = 0;
    for (int t = 0; t < 3; t++) {
        grads[t] = random_matrix(counts[t], 70 + t, -1, 1);
        for (size_t i = 0; i < counts[t]; i++) sumsq += (long double)grads[t][i] * grads[t][i];
    }
    const double exact = sqrtl(sumsq);
    const double norm = cpu_grad_global_norm((const float *const *)grads, counts, 3);
    CHECK(fabs(norm - exact) <= 1e-13 * exact, "norm %.17g, exact %.17g", norm, exact);

    /* max_norm above the norm: coefficient 1, gradients untouched. */
    float *copy = malloc(counts[1] * sizeof *copy);
    memcpy(copy, grads[1], counts[1] * sizeof *copy);
    double returned = cpu_clip_grad_norm(grads, counts, 3, 2 * exact);
    CHECK(returned == norm, "returned %.17g, expected %.17g", returned, norm);
    CHECK(!memcmp(copy, grads[1], counts[1] * sizeof *copy), "gradients changed without clipping");

    /* max_norm = 1: every gradient scaled by the fp32 coefficient, new norm ~1. */
    const float coef = cpu_clip_grad_coef(norm, 1.0);
    CHECK_CLOSE(coef, 1.0 / (norm + 1e-6), 1e-6);
    cpu_clip_grad_norm(grads, counts, 3, 1.0);
    size_t mismatches = 0;
    for (size_t i = 0; i < counts[1]; i++) mismatches += grads[1][i] != copy[i] * coef;
    CHECK(mismatches == 0, "%zu gradients are not g * coef", mismatches);
    const double after = cpu_grad_global_norm((const float *const *)grads, counts, 3);
    CHECK_CLOSE(after, 1.0, 1e-5);

    /* torch's edge cases: a zero norm clamps to 1; a NaN norm propagates. */
    CHECK(cpu_clip_grad_coef(0.0, 1.0) == 1.0f, "zero norm gave coef %g", cpu_clip_grad_coef(0.0, 1.0));
    CHECK(isnan(cpu_clip_grad_coef(NAN, 1.0)), "NaN norm did not give a NaN coefficient");
    free(copy);
    for (int t = 0; t < 3; t++) free(grads[t]);
}

/* The sum of squares must not depend on the thread count, and is accurate to double rounding. */
static void sumsq_bitwise_across_thread_counts(void) {
    const size_t n = 3000007;
    float *x = random_matrix(n, 80, -2, 2);
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = cpu_sumsq_fixed_order(x, n);
    omp_set_num_threads(2);
    const double two = cpu_sumsq_fixed_order(x, n);
    omp_set_num_threads(3);
    const double three = cpu_sumsq_fixed_order(x, n);
    omp_set_num_threads(saved_threads);
    long double exact = 0;
    for (size_t i = 0; i < n; i++) exact += (long double)x[i] * x[i];
    free(x);
    CHECK(memcmp(&one, &two, sizeof one) == 0 && memcmp(&one, &three, sizeof one) == 0,
          "1/2/3 threads: %.17g %.17g %.17g", one, two, three);
    CHECK(fabs(one - (double)exact) <= 1e-13 * (double)exact, "%.17g vs %.17Lg", one, exact);
    CHECK(cpu_sumsq_fixed_order(NULL, 0) == 0.0, "empty sum is not 0");
}

/* ---- weight decay per group (the CPU backend's step) ---- */

/* Decoupled weight decay per group, through the CPU backend's optimizer step. With every gradient
 * zero, Adam's and Muon's updates are zero, so the step only decays: each weight becomes
 * w * (1 - lr * wd) with its own group's lr and wd (train_gpt.py: Muon's p *= 1 - lr * muon_wd;
 * AdamW's for tok_emb and the scalars with adam_wd; plain Adam, no decay, for lm_head). muon_wd
 * and adam_wd differ, so a step that gave one group the other's decay fails (the parity runs
 * check the same against PyTorch, tests/cli/test_parity.sh). */
static void decays_each_group(const char *embed_wd, double token_wd) {
    Config cfg;
    config_init(&cfg);
    const char *kv[][2] = {{"vocab_size", "64"},     {"num_layers", "2"},      {"model_dim", "32"},
                           {"num_heads", "2"},       {"num_kv_heads", "1"},    {"tie_embeddings", "0"},
                           {"train_seq_len", "8"},   {"grad_accum_slots", "1"}, {"train_batch_tokens", "16"},
                           {"threads", "1"},         {"train_files", "unused"}, {"muon_wd", "0.3"},
                           {"adam_wd", "0.07"},      {"matrix_lr", "0.05"},    {"embed_lr", "0.6"},
                           {"scalar_lr", "0.04"},    {"head_lr", "0.008"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(config_set(&cfg, kv[i][0], kv[i][1], CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
    if (embed_wd) CHECK(config_set(&cfg, "embed_wd", embed_wd, CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
    TrainState st;
    Backend *b = NULL;
    CHECK(train_state_init(&st, &cfg) == 0, "%s", ct_error());
    const ModelSpec *s = &st.spec;
    uint64_t rng = 17;
    ref_fill(st.params, s->total_floats, -1, 1, &rng); /* no zero weights (the projections start at 0) */
    memset(st.grads, 0, s->total_floats * sizeof(float));
    float *before = ref_copy_floats(st.params, s->total_floats);
    CHECK(backend_cpu_create(&b, &cfg, &st) == 0, "%s", ct_error());
    const StepHyper h = step_hyper_from_config(&cfg, 0, 1.0);
    double grad_norm;
    CHECK(b->optimizer_step(b, &h, &grad_norm) == 0, "%s", ct_error());
    /* the factors from the configured values, written out: 0.985, 0.958, 0.9972, 1 */
    const double want[] = {[PARAM_MATRIX] = 1 - 0.05 * 0.3, [PARAM_TOKEN_EMBED] = 1 - 0.6 * token_wd,
                           [PARAM_SCALAR] = 1 - 0.04 * 0.07, [PARAM_HEAD] = 1};
    int seen[4] = {0};
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        seen[p->group]++;
        double worst = 0, ratio = 0;
        for (size_t k = 0; k < p->count; k++) {
            const double w0 = before[p->offset + k], w1 = st.params[p->offset + k];
            const double err = fabs(w1 - w0 * want[p->group]) / fabs(w0);
            if (err >= worst) worst = err, ratio = w1 / w0;
        }
        /* one fp32 rounding of the product: 2^-24 relative; a neighbouring group's factor is 1e-3 away */
        CHECK(worst <= 0x1p-23, "%s (group %d): weights scaled by %.7f, expected %.7f (1 - lr * its group's wd)",
              p->name, (int)p->group, ratio, want[p->group]);
    }
    CHECK(seen[PARAM_MATRIX] && seen[PARAM_TOKEN_EMBED] && seen[PARAM_SCALAR] && seen[PARAM_HEAD],
          "the model lacks a group: %d matrices, %d embeddings, %d scalars, %d heads", seen[PARAM_MATRIX],
          seen[PARAM_TOKEN_EMBED], seen[PARAM_SCALAR], seen[PARAM_HEAD]);
    free(before);
    if (b) b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
}

static void step_decays_each_group_by_its_own_wd(void) { decays_each_group(NULL, 0.07); }

/* embed_wd >= 0 gives the token-embedding group its own decay (the record's EMBED_WD), the
 * scalar group keeping adam_wd; -1 (written out) is adam_wd's, as without the key. */
static void embed_wd_decays_the_token_group(void) {
    decays_each_group("0.11", 0.11);
    decays_each_group("0", 0.0);
    decays_each_group("-1", 0.07);
}

int main(void) {
    RUN(ns5_square_vs_double);
    RUN(ns5_tall_vs_double);
    RUN(ns5_wide_vs_double);
    RUN(ns5_zero_steps_is_normalisation);
    RUN(ns5_singular_values_in_band);
    RUN(ns5_bitwise_across_thread_counts);
    RUN(ns_polar_express_vs_double);
    RUN(muon_row_normalize_vs_double);
    RUN(muon_options_vs_double);
    RUN(muon_steps_vs_double);
    RUN(muon_plain_momentum_and_apply);
    RUN(adam_five_steps_vs_double);
    RUN(adam_first_step_is_sign_step);
    RUN(sgd_steps_vs_double);
    RUN(sgd_by_hand);
    RUN(sgd_matches_torch_bits);
    RUN(sgd_bitwise_across_thread_counts);
    RUN(clip_grad_norm_matches_torch_formula);
    RUN(sumsq_bitwise_across_thread_counts);
    RUN(step_decays_each_group_by_its_own_wd);
    RUN(embed_wd_decays_the_token_group);
    TEST_EXIT();
}
