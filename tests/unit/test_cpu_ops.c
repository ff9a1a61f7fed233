/* test_cpu_ops.c — reference tests of the CPU math ops (kernels/cpu/cpu_ops.h), as tests/refcheck.h
 * describes: fp32 forward vs a double-precision reference, fp32 backward vs central finite
 * differences of the double reference of L = sum(out * R), the += semantics of every backward,
 * and bitwise-identical results with 1, 2 and 3 OpenMP threads.
 *
 * Error measure: relative norm error ||got - ref|| / ||ref|| over a whole buffer.
 *  FORWARD_TOL 1e-5: fp32 rounding of a handful of operations and of sums of at most ~50 terms
 *    is ~1e-7; the bound leaves 100x margin.
 *  GRADIENT_TOL 1e-4: the finite differences (double, step 1e-6) are accurate to ~1e-9 (step^2
 *    truncation plus 1e-16*|L|/step cancellation), so the error measured is the fp32 backward's
 *    own rounding (~1e-7..1e-6). A wrong or missing term shows up at 1e-2 or more.
 *  ACCUMULATE_TOL 1e-6: calling a backward twice from zero must give twice the first result;
 *    it is exactly 2x except where a gradient is summed from several partial products (K blocks
 *    of a matrix product, token chunks of the logits), hence not 0.
 * CT_TEST_VERBOSE=1 prints every measured error to stderr. */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_ops.h"
#include "harness.h"
#include "refcheck.h"

/* ---- helpers ----------------------------------------------------------------------------- */

static float *zeros(size_t n) { return ct_calloc(n, sizeof(float), "test buffer"); }

static int32_t *random_ids(int n, int vocab, uint64_t *rng) {
    int32_t *ids = ct_malloc((size_t)n * sizeof(int32_t), "test ids");
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(ref_rand01(rng) * vocab);
    return ids;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static int verbose;


static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- embedding --------------------------------------------------------------------------- */

typedef struct {
    int N, V, C;
    const int32_t *ids;
    const double *wte, *R;
} EmbeddingRef;

static void embedding_ref(const EmbeddingRef *p, double *out) {
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) out[(size_t)n * p->C + c] = p->wte[(size_t)p->ids[n] * p->C + c];
}

static double embedding_loss(const double *unused, void *ctx) {
    (void)unused;
    const EmbeddingRef *p = ctx;
    double *out = ref_new_doubles((size_t)p->N * p->C);
    embedding_ref(p, out);
    double L = dot(out, p->R, (size_t)p->N * p->C);
    free(out);
    return L;
}

static void test_embedding(void) {
    uint64_t rng = 11;
    const int N = 23, V = 11, C = 19; /* N > V: ids repeat, so the scatter must add up collisions */
    const size_t nout = (size_t)N * C, nw = (size_t)V * C;
    int32_t *ids = random_ids(N, V, &rng);
    float *wte = ref_random_floats(nw, -1, 1, &rng), *R = ref_random_floats(nout, -1, 1, &rng);
    float *out = ref_new_floats(nout), *dwte = zeros(nw);
    ref_poison(out, nout);
    CHECK(cpu_embedding_forward(out, ids, wte, N, V, C) == 0, "forward failed: %s", ct_error());

    double *wte_d = ref_doubles_of(wte, nw), *R_d = ref_doubles_of(R, nout), *ref = ref_new_doubles(nout), *num = ref_new_doubles(nw);
    EmbeddingRef p = {N, V, C, ids, wte_d, R_d};
    embedding_ref(&p, ref);
    CHECK_ERR("embedding forward", ref_rel_err(out, ref, nout), FORWARD_TOL);

    cpu_embedding_backward(dwte, R, ids, N, C);
    ref_numgrad(embedding_loss, wte_d, nw, &p, FD_STEP, num);
    CHECK_ERR("embedding dwte vs FD", ref_rel_err(dwte, num, nw), GRADIENT_TOL);

    float *once = ref_copy_floats(dwte, nw);
    cpu_embedding_backward(dwte, R, ids, N, C);
    CHECK_ERR("embedding dwte accumulates", ref_doubling_err(once, dwte, nw), ACCUMULATE_TOL);

    /* An out-of-range id is an error naming its position, and nothing is written. */
    ref_poison(out, nout);
    ids[5] = V;
    CHECK(cpu_embedding_forward(out, ids, wte, N, V, C) == -1, "id == V accepted");
    CHECK(strstr(ct_error(), "position 5"), "message does not name the position: %s", ct_error());
    CHECK(isnan(out[0]), "forward wrote output before failing");
    ids[5] = -1;
    CHECK(cpu_embedding_forward(out, ids, wte, N, V, C) == -1, "negative id accepted");
    free(ids), free(wte), free(R), free(out), free(dwte), free(once);
    free(wte_d), free(R_d), free(ref), free(num);
}

/* ---- rmsnorm ----------------------------------------------------------------------------- */

typedef struct {
    int N, C;
    double eps;
    const double *x, *R;
} RmsnormRef;

static void rmsnorm_ref(const RmsnormRef *p, double *out, double *rstd) {
    for (int n = 0; n < p->N; n++) {
        const double *x = p->x + (size_t)n * p->C;
        double ms = 0;
        for (int c = 0; c < p->C; c++) ms += x[c] * x[c];
        double r = 1.0 / sqrt(ms / p->C + p->eps);
        if (rstd) rstd[n] = r;
        for (int c = 0; c < p->C; c++) out[(size_t)n * p->C + c] = x[c] * r;
    }
}

static double rmsnorm_loss(const double *unused, void *ctx) {
    (void)unused;
    const RmsnormRef *p = ctx;
    double *out = ref_new_doubles((size_t)p->N * p->C);
    rmsnorm_ref(p, out, NULL);
    double L = dot(out, p->R, (size_t)p->N * p->C);
    free(out);
    return L;
}

/* One shape; x_scale small makes eps matter. */
static void check_rmsnorm(int N, int C, double x_scale, uint64_t seed) {
    uint64_t rng = seed;
    const size_t n = (size_t)N * C;
    const float eps = FLT_EPSILON; /* what F.rms_norm(eps=None) uses for fp32 */
    float *x = ref_random_floats(n, -x_scale, x_scale, &rng), *R = ref_random_floats(n, -1, 1, &rng);
    float *out = ref_new_floats(n), *rstd = ref_new_floats((size_t)N), *dx = zeros(n);
    ref_poison(out, n);
    ref_poison(rstd, (size_t)N);
    cpu_rmsnorm_forward(out, rstd, x, N, C, eps);

    double *x_d = ref_doubles_of(x, n), *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n), *ref_rstd = ref_new_doubles((size_t)N);
    double *num = ref_new_doubles(n);
    RmsnormRef p = {N, C, eps, x_d, R_d};
    rmsnorm_ref(&p, ref, ref_rstd);
    char label[64];
    snprintf(label, sizeof label, "rmsnorm %dx%d forward", N, C);
    CHECK_ERR(label, ref_rel_err(out, ref, n), FORWARD_TOL);
    snprintf(label, sizeof label, "rmsnorm %dx%d rstd", N, C);
    CHECK_ERR(label, ref_rel_err(rstd, ref_rstd, (size_t)N), FORWARD_TOL);

    /* In place (out == x) gives the same bits. */
    float *inplace = ref_copy_floats(x, n);
    cpu_rmsnorm_forward(inplace, NULL, inplace, N, C, eps);
    CHECK(memcmp(inplace, out, n * sizeof(float)) == 0, "in-place forward differs");

    cpu_rmsnorm_backward(dx, R, x, rstd, N, C);
    ref_numgrad(rmsnorm_loss, x_d, n, &p, FD_STEP * x_scale, num);
    snprintf(label, sizeof label, "rmsnorm %dx%d dx vs FD", N, C);
    CHECK_ERR(label, ref_rel_err(dx, num, n), GRADIENT_TOL);

    float *once = ref_copy_floats(dx, n);
    cpu_rmsnorm_backward(dx, R, x, rstd, N, C);
    CHECK_ERR("rmsnorm dx accumulates", ref_doubling_err(once, dx, n), ACCUMULATE_TOL);
    free(x), free(R), free(out), free(rstd), free(dx), free(inplace), free(once);
    free(x_d), free(R_d), free(ref), free(ref_rstd), free(num);
}

static void test_rmsnorm(void) {
    check_rmsnorm(13, 24, 1.0, 21);
    if (harness_case_failed) return;
    check_rmsnorm(37, 8, 1.0, 22); /* head_dim-sized rows, as for the per-head q/k norm */
    if (harness_case_failed) return;
    check_rmsnorm(9, 17, 1e-3, 23); /* mean(x^2) ~ 3e-7, comparable to eps */
}

/* ---- linear ------------------------------------------------------------------------------ */

typedef struct {
    int N, in, out;
    const double *x, *W, *R;
} LinearRef;

static void linear_ref(const LinearRef *p, double *y) {
    for (int n = 0; n < p->N; n++)
        for (int o = 0; o < p->out; o++)
            y[(size_t)n * p->out + o] = dot(p->x + (size_t)n * p->in, p->W + (size_t)o * p->in, (size_t)p->in);
}

static double linear_loss(const double *unused, void *ctx) {
    (void)unused;
    const LinearRef *p = ctx;
    double *y = ref_new_doubles((size_t)p->N * p->out);
    linear_ref(p, y);
    double L = dot(y, p->R, (size_t)p->N * p->out);
    free(y);
    return L;
}

static void test_linear(void) {
    uint64_t rng = 31;
    const int N = 13, in = 17, out = 11;
    const size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -1, 1, &rng);
    float *R = ref_random_floats(ny, -1, 1, &rng), *y = ref_new_floats(ny), *dx = zeros(nx), *dW = zeros(nw);
    ref_poison(y, ny);
    cpu_linear_forward(y, x, W, N, in, out);

    double *x_d = ref_doubles_of(x, nx), *W_d = ref_doubles_of(W, nw), *R_d = ref_doubles_of(R, ny);
    double *ref = ref_new_doubles(ny), *num_x = ref_new_doubles(nx), *num_W = ref_new_doubles(nw);
    LinearRef p = {N, in, out, x_d, W_d, R_d};
    linear_ref(&p, ref);
    CHECK_ERR("linear forward", ref_rel_err(y, ref, ny), FORWARD_TOL);

    cpu_linear_backward(dx, dW, R, x, W, N, in, out);
    ref_numgrad(linear_loss, x_d, nx, &p, FD_STEP, num_x);
    ref_numgrad(linear_loss, W_d, nw, &p, FD_STEP, num_W);
    CHECK_ERR("linear dx vs FD", ref_rel_err(dx, num_x, nx), GRADIENT_TOL);
    CHECK_ERR("linear dW vs FD", ref_rel_err(dW, num_W, nw), GRADIENT_TOL);

    float *dx_once = ref_copy_floats(dx, nx), *dW_once = ref_copy_floats(dW, nw);
    cpu_linear_backward(dx, dW, R, x, W, N, in, out);
    CHECK_ERR("linear dx accumulates", ref_doubling_err(dx_once, dx, nx), ACCUMULATE_TOL);
    CHECK_ERR("linear dW accumulates", ref_doubling_err(dW_once, dW, nw), ACCUMULATE_TOL);
    free(x), free(W), free(R), free(y), free(dx), free(dW), free(dx_once), free(dW_once);
    free(x_d), free(W_d), free(R_d), free(ref), free(num_x), free(num_W);
}

/* Shapes spanning several tiles of cpu_sgemm with ragged edges, and a token count
 * beyond OpenBLAS's K block. The op is linear, so the exact gradients are products in double:
 * dx = R @ W, dW = R^T @ x. */
static void test_linear_tiled_shapes(void) {
    uint64_t rng = 32;
    const int N = 700, in = 45, out = 260;
    const size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -1, 1, &rng);
    float *R = ref_random_floats(ny, -1, 1, &rng), *y = ref_new_floats(ny), *dx = zeros(nx), *dW = zeros(nw);
    ref_poison(y, ny);
    cpu_linear_forward(y, x, W, N, in, out);
    cpu_linear_backward(dx, dW, R, x, W, N, in, out);

    double *x_d = ref_doubles_of(x, nx), *W_d = ref_doubles_of(W, nw), *R_d = ref_doubles_of(R, ny);
    double *ref = ref_new_doubles(ny), *ref_dx = ref_new_doubles(nx), *ref_dW = ref_new_doubles(nw);
    LinearRef p = {N, in, out, x_d, W_d, R_d};
    linear_ref(&p, ref);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < out; o++) {
            const double r = R_d[(size_t)n * out + o];
            for (int i = 0; i < in; i++) {
                ref_dx[(size_t)n * in + i] += r * W_d[(size_t)o * in + i];
                ref_dW[(size_t)o * in + i] += r * x_d[(size_t)n * in + i];
            }
        }
    CHECK_ERR("linear 700x45->260 forward", ref_rel_err(y, ref, ny), FORWARD_TOL);
    CHECK_ERR("linear 700x45->260 dx exact", ref_rel_err(dx, ref_dx, nx), GRADIENT_TOL);
    CHECK_ERR("linear 700x45->260 dW exact", ref_rel_err(dW, ref_dW, nw), GRADIENT_TOL);
    free(x), free(W), free(R), free(y), free(dx), free(dW);
    free(x_d), free(W_d), free(R_d), free(ref), free(ref_dx), free(ref_dW);
}

/* cpu_sgemm directly: every transpose combination, beta 0 (over NaN-poisoned C) and beta 1, on
 * shapes that give several ragged tiles in both directions (N > the 512-column tile) and that
 * take the tile-height halving for small M; then the same products with 1, 2 and 3 threads
 * must give the same bits. */
static void sgemm_ref(int ta, int tb, int M, int N, int K, const float *A, const float *B, double beta,
                      const float *C0, double *out) {
    const int lda = ta ? M : K, ldb = tb ? K : N;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                       (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            out[(size_t)i * N + j] = acc + (beta != 0 ? beta * C0[(size_t)i * N + j] : 0);
        }
}

static void test_sgemm_tiles(void) {
    uint64_t rng = 33;
    const int shapes[][3] = {{300, 1100, 70}, {70, 45, 600}, {1, 513, 9}};
    const int saved_threads = omp_get_max_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
        float *A = ref_random_floats(na, -1, 1, &rng), *B = ref_random_floats(nb, -1, 1, &rng);
        float *C0 = ref_random_floats(nc, -1, 1, &rng), *C = ref_new_floats(nc), *first = ref_new_floats(nc);
        double *ref = ref_new_doubles(nc);
        for (int combo = 0; combo < 8; combo++) {
            const int ta = combo & 1, tb = (combo >> 1) & 1, beta = combo >> 2;
            const int lda = ta ? M : K, ldb = tb ? K : N;
            char label[80];
            snprintf(label, sizeof label, "sgemm %dx%dx%d ta%d tb%d beta%d", M, N, K, ta, tb, beta);
            sgemm_ref(ta, tb, M, N, K, A, B, beta, C0, ref);
            for (int t = 1; t <= 3; t++) {
                omp_set_num_threads(t);
                if (beta) memcpy(C, C0, nc * sizeof(float));
                else ref_poison(C, nc);
                cpu_sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, (float)beta, C, N);
                if (t == 1) {
                    CHECK_ERR(label, ref_rel_err(C, ref, nc), FORWARD_TOL);
                    memcpy(first, C, nc * sizeof(float));
                } else {
                    CHECK(memcmp(first, C, nc * sizeof(float)) == 0, "%s: 1 and %d threads differ", label, t);
                }
            }
        }
        free(A), free(B), free(C0), free(C), free(first), free(ref);
    }
    omp_set_num_threads(saved_threads);
}

/* ---- relu^2 ------------------------------------------------------------------------------ */

typedef struct {
    size_t n;
    const double *u, *R;
} Relu2Ref;

static double relu2_loss(const double *unused, void *ctx) {
    (void)unused;
    const Relu2Ref *p = ctx;
    double L = 0;
    for (size_t i = 0; i < p->n; i++) L += (p->u[i] > 0 ? p->u[i] * p->u[i] : 0) * p->R[i];
    return L;
}

static void test_relu2(void) {
    uint64_t rng = 41;
    const int N = 9, C = 23;
    const size_t n = (size_t)N * C;
    float *u = ref_random_floats(n, -1, 1, &rng), *R = ref_random_floats(n, -1, 1, &rng);
    /* Keep inputs off the kink so the finite differences never straddle it. */
    for (size_t i = 0; i < n; i++)
        if (fabsf(u[i]) < 0.01f) u[i] = u[i] < 0 ? -0.02f : 0.02f;
    float *h = ref_new_floats(n), *du = zeros(n);
    ref_poison(h, n);
    cpu_relu2_forward(h, u, N, C, 0.0f);

    double *u_d = ref_doubles_of(u, n), *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n), *num = ref_new_doubles(n);
    for (size_t i = 0; i < n; i++) ref[i] = u_d[i] > 0 ? u_d[i] * u_d[i] : 0;
    CHECK_ERR("relu2 forward", ref_rel_err(h, ref, n), FORWARD_TOL);
    float *inplace = ref_copy_floats(u, n);
    cpu_relu2_forward(inplace, inplace, N, C, 0.0f);
    CHECK(memcmp(inplace, h, n * sizeof(float)) == 0, "in-place forward differs");

    cpu_relu2_backward(du, R, u, N, C, 0.0f);
    Relu2Ref p = {n, u_d, R_d};
    ref_numgrad(relu2_loss, u_d, n, &p, FD_STEP, num);
    CHECK_ERR("relu2 du vs FD", ref_rel_err(du, num, n), GRADIENT_TOL);

    float *once = ref_copy_floats(du, n);
    cpu_relu2_backward(du, R, u, N, C, 0.0f);
    CHECK_ERR("relu2 du accumulates", ref_doubling_err(once, du, n), ACCUMULATE_TOL);
    free(u), free(R), free(h), free(du), free(inplace), free(once);
    free(u_d), free(R_d), free(ref), free(num);

    /* Special inputs: the vectorized select must keep relu's semantics exactly. relu(NaN) = 0
     * (a NaN is not > 0), -0 and -Inf give +0, and a NaN or Inf gradient arriving where u <= 0
     * leaves du untouched. */
    const float su[6] = {NAN, -0.0f, -INFINITY, INFINITY, 3.0f, -2.0f};
    const float sdh[6] = {1.0f, NAN, INFINITY, 1.0f, 0.5f, NAN};
    float sh[6], sdu[6] = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, -0.0f};
    cpu_relu2_forward(sh, su, 1, 6, 0.0f);
    cpu_relu2_backward(sdu, sdh, su, 1, 6, 0.0f);
    /* du starts at -0: adding the +0 of an inactive unit gives +0, as `du += 0` always did */
    const float want_h[6] = {0.0f, 0.0f, 0.0f, INFINITY, 9.0f, 0.0f}, want_du[6] = {0, 0, 0, INFINITY, 3.0f, 0};
    CHECK(memcmp(sh, want_h, sizeof sh) == 0, "relu2 forward of NaN/-0/-Inf/Inf/3/-2 = %g %g %g %g %g %g", (double)sh[0],
          (double)sh[1], (double)sh[2], (double)sh[3], (double)sh[4], (double)sh[5]);
    CHECK(memcmp(sdu, want_du, sizeof sdu) == 0, "relu2 backward of special values = %g %g %g %g %g %g", (double)sdu[0],
          (double)sdu[1], (double)sdu[2], (double)sdu[3], (double)sdu[4], (double)sdu[5]);
}

/* ---- residual mix ------------------------------------------------------------------------ */

typedef struct {
    int N, C;
    const double *x, *x0, *mix, *R;
} ResidualMixRef;

static void residual_mix_ref(const ResidualMixRef *p, double *out) {
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            size_t i = (size_t)n * p->C + c;
            out[i] = p->mix[c] * p->x[i] + p->mix[p->C + c] * p->x0[i];
        }
}

static double residual_mix_loss(const double *unused, void *ctx) {
    (void)unused;
    const ResidualMixRef *p = ctx;
    double *out = ref_new_doubles((size_t)p->N * p->C);
    residual_mix_ref(p, out);
    double L = dot(out, p->R, (size_t)p->N * p->C);
    free(out);
    return L;
}

static void test_residual_mix(void) {
    uint64_t rng = 51;
    const int N = 11, C = 19; /* two channel blocks, the second ragged */
    const size_t n = (size_t)N * C, nm = 2 * (size_t)C;
    float *x = ref_random_floats(n, -1, 1, &rng), *x0 = ref_random_floats(n, -1, 1, &rng);
    float *mix = ref_random_floats(nm, 0.2, 1.5, &rng), *R = ref_random_floats(n, -1, 1, &rng);
    float *out = ref_new_floats(n), *dx = zeros(n), *dx0 = zeros(n), *dmix = zeros(nm);
    ref_poison(out, n);
    cpu_residual_mix_forward(out, x, x0, mix, N, C);

    double *x_d = ref_doubles_of(x, n), *x0_d = ref_doubles_of(x0, n), *mix_d = ref_doubles_of(mix, nm);
    double *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n);
    double *num_x = ref_new_doubles(n), *num_x0 = ref_new_doubles(n), *num_mix = ref_new_doubles(nm);
    ResidualMixRef p = {N, C, x_d, x0_d, mix_d, R_d};
    residual_mix_ref(&p, ref);
    CHECK_ERR("residual_mix forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    float *inplace = ref_copy_floats(x, n);
    cpu_residual_mix_forward(inplace, inplace, x0, mix, N, C);
    CHECK(memcmp(inplace, out, n * sizeof(float)) == 0, "in-place forward differs");

    cpu_residual_mix_backward(dx, dx0, dmix, R, x, x0, mix, N, C);
    ref_numgrad(residual_mix_loss, x_d, n, &p, FD_STEP, num_x);
    ref_numgrad(residual_mix_loss, x0_d, n, &p, FD_STEP, num_x0);
    ref_numgrad(residual_mix_loss, mix_d, nm, &p, FD_STEP, num_mix);
    CHECK_ERR("residual_mix dx vs FD", ref_rel_err(dx, num_x, n), GRADIENT_TOL);
    CHECK_ERR("residual_mix dx0 vs FD", ref_rel_err(dx0, num_x0, n), GRADIENT_TOL);
    CHECK_ERR("residual_mix dmix vs FD", ref_rel_err(dmix, num_mix, nm), GRADIENT_TOL);

    float *dx_once = ref_copy_floats(dx, n), *dx0_once = ref_copy_floats(dx0, n), *dmix_once = ref_copy_floats(dmix, nm);
    cpu_residual_mix_backward(dx, dx0, dmix, R, x, x0, mix, N, C);
    CHECK_ERR("residual_mix dx accumulates", ref_doubling_err(dx_once, dx, n), ACCUMULATE_TOL);
    CHECK_ERR("residual_mix dx0 accumulates", ref_doubling_err(dx0_once, dx0, n), ACCUMULATE_TOL);
    CHECK_ERR("residual_mix dmix accumulates", ref_doubling_err(dmix_once, dmix, nm), ACCUMULATE_TOL);
    free(x), free(x0), free(mix), free(R), free(out), free(dx), free(dx0), free(dmix), free(inplace);
    free(dx_once), free(dx0_once), free(dmix_once);
    free(x_d), free(x0_d), free(mix_d), free(R_d), free(ref), free(num_x), free(num_x0), free(num_mix);
}

/* ---- scaled residual add ----------------------------------------------------------------- */

typedef struct {
    int N, C;
    const double *x, *branch, *scale, *R;
} ScaledAddRef;

static void scaled_add_ref(const ScaledAddRef *p, double *out) {
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            size_t i = (size_t)n * p->C + c;
            out[i] = p->x[i] + p->scale[c] * p->branch[i];
        }
}

static double scaled_add_loss(const double *unused, void *ctx) {
    (void)unused;
    const ScaledAddRef *p = ctx;
    double *out = ref_new_doubles((size_t)p->N * p->C);
    scaled_add_ref(p, out);
    double L = dot(out, p->R, (size_t)p->N * p->C);
    free(out);
    return L;
}

static void test_scaled_add(void) {
    uint64_t rng = 61;
    const int N = 15, C = 21;
    const size_t n = (size_t)N * C;
    float *x = ref_random_floats(n, -1, 1, &rng), *branch = ref_random_floats(n, -1, 1, &rng);
    float *scale = ref_random_floats((size_t)C, 0.2, 1.5, &rng), *R = ref_random_floats(n, -1, 1, &rng);
    float *out = ref_new_floats(n), *dx = zeros(n), *dbranch = zeros(n), *dscale = zeros((size_t)C);
    ref_poison(out, n);
    cpu_scaled_add_forward(out, x, branch, scale, N, C);

    double *x_d = ref_doubles_of(x, n), *b_d = ref_doubles_of(branch, n), *s_d = ref_doubles_of(scale, (size_t)C);
    double *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n);
    double *num_x = ref_new_doubles(n), *num_b = ref_new_doubles(n), *num_s = ref_new_doubles((size_t)C);
    ScaledAddRef p = {N, C, x_d, b_d, s_d, R_d};
    scaled_add_ref(&p, ref);
    CHECK_ERR("scaled_add forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    float *inplace = ref_copy_floats(x, n);
    cpu_scaled_add_forward(inplace, inplace, branch, scale, N, C);
    CHECK(memcmp(inplace, out, n * sizeof(float)) == 0, "in-place forward differs");

    cpu_scaled_add_backward(dx, dbranch, dscale, R, branch, scale, N, C);
    ref_numgrad(scaled_add_loss, x_d, n, &p, FD_STEP, num_x);
    ref_numgrad(scaled_add_loss, b_d, n, &p, FD_STEP, num_b);
    ref_numgrad(scaled_add_loss, s_d, (size_t)C, &p, FD_STEP, num_s);
    CHECK_ERR("scaled_add dx vs FD", ref_rel_err(dx, num_x, n), GRADIENT_TOL);
    CHECK_ERR("scaled_add dbranch vs FD", ref_rel_err(dbranch, num_b, n), GRADIENT_TOL);
    CHECK_ERR("scaled_add dscale vs FD", ref_rel_err(dscale, num_s, (size_t)C), GRADIENT_TOL);

    float *dx_once = ref_copy_floats(dx, n), *db_once = ref_copy_floats(dbranch, n), *ds_once = ref_copy_floats(dscale, (size_t)C);
    cpu_scaled_add_backward(dx, dbranch, dscale, R, branch, scale, N, C);
    CHECK_ERR("scaled_add dx accumulates", ref_doubling_err(dx_once, dx, n), ACCUMULATE_TOL);
    CHECK_ERR("scaled_add dbranch accumulates", ref_doubling_err(db_once, dbranch, n), ACCUMULATE_TOL);
    CHECK_ERR("scaled_add dscale accumulates", ref_doubling_err(ds_once, dscale, (size_t)C), ACCUMULATE_TOL);

    /* dx == NULL skips only dx: the other gradients are the same bits. */
    float *db_null = zeros(n), *ds_null = zeros((size_t)C);
    cpu_scaled_add_backward(NULL, db_null, ds_null, R, branch, scale, N, C);
    CHECK(memcmp(db_null, db_once, n * sizeof(float)) == 0, "dbranch differs with dx == NULL");
    CHECK(memcmp(ds_null, ds_once, (size_t)C * sizeof(float)) == 0, "dscale differs with dx == NULL");
    free(x), free(branch), free(scale), free(R), free(out), free(dx), free(dbranch), free(dscale);
    free(inplace), free(dx_once), free(db_once), free(ds_once), free(db_null), free(ds_null);
    free(x_d), free(b_d), free(s_d), free(R_d), free(ref), free(num_x), free(num_b), free(num_s);
}

/* ---- logits + softcap + cross-entropy ---------------------------------------------------- */

typedef struct {
    int N, C, V;
    double softcap, loss_weight;
    const int32_t *targets;
    const double *x, *W;
} LogitsRef;

/* Per-token losses in double; returns loss_weight * mean. */
static double logits_ref(const LogitsRef *p, double *losses) {
    double *s = ref_new_doubles((size_t)p->V), total = 0;
    for (int n = 0; n < p->N; n++) {
        double max_s = -INFINITY, sum = 0;
        for (int v = 0; v < p->V; v++) {
            double z = dot(p->x + (size_t)n * p->C, p->W + (size_t)v * p->C, (size_t)p->C);
            s[v] = p->softcap * tanh(z / p->softcap);
            max_s = fmax(max_s, s[v]);
        }
        for (int v = 0; v < p->V; v++) sum += exp(s[v] - max_s);
        double loss = max_s + log(sum) - s[p->targets[n]];
        if (losses) losses[n] = loss;
        total += loss;
    }
    free(s);
    return p->loss_weight * total / p->N;
}

static double logits_loss(const double *unused, void *ctx) {
    (void)unused;
    return logits_ref(ctx, NULL);
}

static void check_logits_ce(int N, int C, int V, float softcap, double w_scale, int chunk, uint64_t seed) {
    uint64_t rng = seed;
    const float loss_weight = 0.5f;
    const size_t nx = (size_t)N * C, nw = (size_t)V * C;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -w_scale, w_scale, &rng);
    float *losses = ref_new_floats((size_t)N), *dx = zeros(nx), *dW = zeros(nw), *scratch = ref_new_floats((size_t)chunk * V);
    ref_poison(losses, (size_t)N);
    ref_poison(scratch, (size_t)chunk * V);
    double mean = NAN;
    CHECK(cpu_logits_ce_forward_backward(dx, dW, losses, &mean, x, W, targets, N, C, V, softcap, loss_weight, scratch,
                                     chunk) == 0, "forward_backward failed: %s", ct_error());

    double *x_d = ref_doubles_of(x, nx), *W_d = ref_doubles_of(W, nw), *ref = ref_new_doubles((size_t)N);
    double *num_x = ref_new_doubles(nx), *num_W = ref_new_doubles(nw);
    LogitsRef p = {N, C, V, softcap, loss_weight, targets, x_d, W_d};
    double ref_weighted_mean = logits_ref(&p, ref);
    char label[64];
    snprintf(label, sizeof label, "logits cap %g per-token loss", (double)softcap);
    CHECK_ERR(label, ref_rel_err(losses, ref, (size_t)N), FORWARD_TOL);
    snprintf(label, sizeof label, "logits cap %g mean loss", (double)softcap);
    CHECK_ERR(label, fabs(mean * loss_weight - ref_weighted_mean) / fabs(ref_weighted_mean), FORWARD_TOL);

    ref_numgrad(logits_loss, x_d, nx, &p, FD_STEP, num_x);
    ref_numgrad(logits_loss, W_d, nw, &p, FD_STEP, num_W);
    snprintf(label, sizeof label, "logits cap %g dx vs FD", (double)softcap);
    CHECK_ERR(label, ref_rel_err(dx, num_x, nx), GRADIENT_TOL);
    snprintf(label, sizeof label, "logits cap %g dW vs FD", (double)softcap);
    CHECK_ERR(label, ref_rel_err(dW, num_W, nw), GRADIENT_TOL);

    float *dx_once = ref_copy_floats(dx, nx), *dW_once = ref_copy_floats(dW, nw);
    CHECK(cpu_logits_ce_forward_backward(dx, dW, losses, &mean, x, W, targets, N, C, V, softcap, loss_weight, scratch,
                                     chunk) == 0, "second call failed: %s", ct_error());
    CHECK_ERR("logits dx accumulates", ref_doubling_err(dx_once, dx, nx), ACCUMULATE_TOL);
    CHECK_ERR("logits dW accumulates", ref_doubling_err(dW_once, dW, nw), ACCUMULATE_TOL);

    /* Validation variant: the same losses and sum, with or without the per-token buffer. */
    float *val_losses = ref_new_floats((size_t)N);
    ref_poison(val_losses, (size_t)N);
    double sum = NAN, sum_no_losses = NAN;
    CHECK(cpu_logits_ce_forward(val_losses, &sum, x, W, targets, N, C, V, softcap, scratch, chunk) == 0,
          "forward failed: %s", ct_error());
    CHECK(cpu_logits_ce_forward(NULL, &sum_no_losses, x, W, targets, N, C, V, softcap, scratch, chunk) == 0,
          "forward without losses failed: %s", ct_error());
    CHECK(memcmp(val_losses, losses, (size_t)N * sizeof(float)) == 0, "forward-only losses differ");
    CHECK(sum / N == mean && sum_no_losses == sum, "loss sums differ: %.17g %.17g %.17g", sum / N, mean,
          sum_no_losses);
    free(targets), free(x), free(W), free(losses), free(dx), free(dW), free(scratch), free(dx_once), free(dW_once);
    free(val_losses), free(x_d), free(W_d), free(ref), free(num_x), free(num_W);
}

static void test_logits_ce(void) {
    /* softcap 1.5 with logits ~1: tanh far from linear. Chunks 4+4+1. */
    check_logits_ce(9, 12, 37, 1.5f, 1.0, 4, 71);
    if (harness_case_failed) return;
    /* The model's softcap 30 with logits up to ~20; one chunk exactly N. */
    check_logits_ce(7, 8, 50, 30.0f, 8.0, 7, 72);
    if (harness_case_failed) return;
    /* Chunk larger than N. */
    check_logits_ce(6, 10, 11, 4.0f, 2.0, 64, 73);
}

/* The chunk size changes only rounding, never the result. */
static void test_logits_ce_chunk_sizes(void) {
    uint64_t rng = 74;
    const int N = 37, C = 16, V = 29;
    const size_t nx = (size_t)N * C, nw = (size_t)V * C;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -2, 2, &rng);
    float *scratch = ref_new_floats((size_t)N * V), *losses = ref_new_floats((size_t)N);
    float *dx_all = zeros(nx), *dW_all = zeros(nw);
    double mean_all;
    CHECK(cpu_logits_ce_forward_backward(dx_all, dW_all, losses, &mean_all, x, W, targets, N, C, V, 30.0f, 1.0f,
                                     scratch, N) == 0, "%s", ct_error());
    double *dx_ref = ref_doubles_of(dx_all, nx), *dW_ref = ref_doubles_of(dW_all, nw);
    const int chunks[] = {1, 5, 36};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        float *dx = zeros(nx), *dW = zeros(nw);
        double mean;
        CHECK(cpu_logits_ce_forward_backward(dx, dW, losses, &mean, x, W, targets, N, C, V, 30.0f, 1.0f, scratch,
                                         chunks[k]) == 0, "%s", ct_error());
        CHECK_CLOSE(mean, mean_all, 1e-6);
        CHECK_ERR("logits dx across chunk sizes", ref_rel_err(dx, dx_ref, nx), ACCUMULATE_TOL);
        CHECK_ERR("logits dW across chunk sizes", ref_rel_err(dW, dW_ref, nw), ACCUMULATE_TOL);
        free(dx), free(dW);
    }
    free(targets), free(x), free(W), free(scratch), free(losses), free(dx_all), free(dW_all), free(dx_ref), free(dW_ref);
}

static void test_logits_ce_rejects_bad_arguments(void) {
    uint64_t rng = 75;
    const int N = 6, C = 8, V = 11;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats((size_t)N * C, -1, 1, &rng), *W = ref_random_floats((size_t)V * C, -1, 1, &rng);
    float *scratch = ref_new_floats((size_t)N * V), *losses = ref_new_floats((size_t)N);
    float *dx = zeros((size_t)N * C), *dW = zeros((size_t)V * C);
    double mean, sum;
    targets[3] = V;
    CHECK(cpu_logits_ce_forward_backward(dx, dW, losses, &mean, x, W, targets, N, C, V, 30.0f, 1.0f, scratch, N) == -1,
          "target == V accepted");
    CHECK(strstr(ct_error(), "position 3"), "message does not name the position: %s", ct_error());
    for (size_t i = 0; i < (size_t)N * C; i++) CHECK(dx[i] == 0.0f, "dx written before failing");
    CHECK(cpu_logits_ce_forward(NULL, &sum, x, W, targets, N, C, V, 30.0f, scratch, N) == -1, "forward took target V");
    targets[3] = -1;
    CHECK(cpu_logits_ce_forward(NULL, &sum, x, W, targets, N, C, V, 30.0f, scratch, N) == -1, "negative target");
    targets[3] = 0;
    CHECK(cpu_logits_ce_forward(NULL, &sum, x, W, targets, N, C, V, 0.0f, scratch, N) == -1, "softcap 0 accepted");
    CHECK(cpu_logits_ce_forward(NULL, &sum, x, W, targets, N, C, V, 30.0f, scratch, 0) == -1, "chunk 0 accepted");
    CHECK(cpu_logits_ce_forward_backward(dx, dW, NULL, &mean, x, W, targets, N, C, V, 30.0f, 1.0f, scratch, N) == -1,
          "training without a losses buffer accepted");
    free(targets), free(x), free(W), free(scratch), free(losses), free(dx), free(dW);
}

/* ---- bitwise identical results with 1, 2 and 3 threads ----------------------------------- */

/* An op's whole forward + backward at one set of shapes large enough to split across threads.
 * run() resets its outputs to the same starting values every time. */
typedef struct {
    const char *name;
    void (*run)(void *ctx);
    void *ctx;
    float *outputs[4];
    size_t counts[4];
} ThreadCase;

typedef struct {
    int N, C, V, in, out, chunk;
    int32_t *ids;
    float *a, *b, *c, *params, *R;             /* inputs */
    float *y, *y2, *g1, *g2, *g3, *dparams;    /* outputs and gradients */
    double loss;
} BigCtx;

static void run_embedding(void *p) {
    BigCtx *k = p;
    memset(k->dparams, 0, (size_t)k->V * k->C * sizeof(float));
    if (cpu_embedding_forward(k->y, k->ids, k->params, k->N, k->V, k->C)) abort();
    cpu_embedding_backward(k->dparams, k->R, k->ids, k->N, k->C);
}

static void run_rmsnorm(void *p) {
    BigCtx *k = p;
    memcpy(k->g1, k->c, (size_t)k->N * k->C * sizeof(float)); /* nonzero start: += must add */
    cpu_rmsnorm_forward(k->y, k->y2, k->a, k->N, k->C, FLT_EPSILON);
    cpu_rmsnorm_backward(k->g1, k->R, k->a, k->y2, k->N, k->C);
}

static void run_linear(void *p) {
    BigCtx *k = p;
    memcpy(k->g1, k->c, (size_t)k->N * k->in * sizeof(float));
    memset(k->dparams, 0, (size_t)k->out * k->in * sizeof(float));
    cpu_linear_forward(k->y, k->a, k->params, k->N, k->in, k->out);
    cpu_linear_backward(k->g1, k->dparams, k->R, k->a, k->params, k->N, k->in, k->out);
}

static void run_relu2(void *p) {
    BigCtx *k = p;
    memcpy(k->g1, k->c, (size_t)k->N * k->C * sizeof(float));
    cpu_relu2_forward(k->y, k->a, k->N, k->C, 0.0f);
    cpu_relu2_backward(k->g1, k->R, k->a, k->N, k->C, 0.0f);
}

static void run_residual_mix(void *p) {
    BigCtx *k = p;
    const size_t n = (size_t)k->N * k->C;
    memcpy(k->g1, k->c, n * sizeof(float));
    memcpy(k->g2, k->c, n * sizeof(float));
    memcpy(k->dparams, k->c, 2 * (size_t)k->C * sizeof(float));
    cpu_residual_mix_forward(k->y, k->a, k->b, k->params, k->N, k->C);
    cpu_residual_mix_backward(k->g1, k->g2, k->dparams, k->R, k->a, k->b, k->params, k->N, k->C);
}

static void run_scaled_add(void *p) {
    BigCtx *k = p;
    const size_t n = (size_t)k->N * k->C;
    memcpy(k->g1, k->c, n * sizeof(float));
    memcpy(k->g2, k->c, n * sizeof(float));
    memcpy(k->dparams, k->c, (size_t)k->C * sizeof(float));
    cpu_scaled_add_forward(k->y, k->a, k->b, k->params, k->N, k->C);
    cpu_scaled_add_backward(k->g1, k->g2, k->dparams, k->R, k->b, k->params, k->N, k->C);
}

static void run_logits(void *p) {
    BigCtx *k = p;
    memcpy(k->g1, k->c, (size_t)k->N * k->C * sizeof(float));
    memset(k->dparams, 0, (size_t)k->V * k->C * sizeof(float));
    if (cpu_logits_ce_forward_backward(k->g1, k->dparams, k->y, &k->loss, k->a, k->params, k->ids, k->N, k->C, k->V,
                                   30.0f, 0.25f, k->g3, k->chunk))
        abort();
    k->y2[0] = (float)k->loss; /* so the mean is compared too (as float; bits of the double below) */
    double sum;
    if (cpu_logits_ce_forward(NULL, &sum, k->a, k->params, k->ids, k->N, k->C, k->V, 30.0f, k->g3, k->chunk)) abort();
    memcpy(k->y2 + 1, &sum, sizeof sum);
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* Random inputs and room for every output of any op above at these shapes (unused ones 0). */
static void big_init(BigCtx *k, int N, int C, int V, int in, int out, uint64_t *rng) {
    memset(k, 0, sizeof *k);
    k->N = N, k->C = C, k->V = V, k->in = in, k->out = out;
    const size_t act = (size_t)N * max_size((size_t)in, (size_t)C);
    const size_t out_act = (size_t)N * max_size((size_t)out, (size_t)C);
    const size_t par = max_size((size_t)V, 2) * max_size((size_t)in, (size_t)C) + (size_t)out * in;
    k->ids = random_ids(N, V > 0 ? V : 1, rng);
    k->a = ref_random_floats(act, -1, 1, rng), k->b = ref_random_floats(act, -1, 1, rng);
    k->c = ref_random_floats(act, -1, 1, rng), k->params = ref_random_floats(par, -1, 1, rng);
    k->R = ref_random_floats(out_act, -1, 1, rng);
    k->y = ref_new_floats(out_act), k->y2 = ref_new_floats(out_act), k->g1 = ref_new_floats(act), k->g2 = ref_new_floats(act);
    k->g3 = ref_new_floats((size_t)N * max_size((size_t)V, 1)), k->dparams = ref_new_floats(par);
}

static void free_big(BigCtx *k) {
    free(k->ids), free(k->a), free(k->b), free(k->c), free(k->params), free(k->R);
    free(k->y), free(k->y2), free(k->g1), free(k->g2), free(k->g3), free(k->dparams);
}

/* Runs the case with 1 thread, then 2 and 3, and requires identical bits in every output. */
static void check_thread_invariance(ThreadCase *tc) {
    const int thread_counts[] = {1, 2, 3};
    float *first[4] = {0};
    int failed = 0;
    for (size_t t = 0; t < 3 && !failed; t++) {
        omp_set_num_threads(thread_counts[t]);
        tc->run(tc->ctx);
        for (int o = 0; o < 4 && tc->outputs[o]; o++) {
            if (t == 0) {
                first[o] = ref_copy_floats(tc->outputs[o], tc->counts[o]);
                if (!all_finite(first[o], tc->counts[o])) failed = 100 + o;
            } else if (memcmp(first[o], tc->outputs[o], tc->counts[o] * sizeof(float)) != 0) {
                failed = thread_counts[t] * 10 + o;
            }
        }
    }
    for (int o = 0; o < 4; o++) free(first[o]);
    CHECK(failed < 100, "%s: output %d is not finite", tc->name, failed - 100);
    CHECK(!failed, "%s: output %d differs between 1 and %d threads", tc->name, failed % 10, failed / 10);
}

static void test_thread_count_gives_same_bits(void) {
    const int saved_threads = omp_get_max_threads();
    uint64_t rng = 81;
    BigCtx k;
    ThreadCase tc;

    /* Shapes: N odd and > 128 (several sgemm tiles and OpenMP chunks), C = 72 (4.5 channel
     * blocks, the last ragged). */
    big_init(&k, 1001, 72, 50, 0, 0, &rng);
    tc = (ThreadCase){"embedding", run_embedding, &k, {k.y, k.dparams}, {(size_t)k.N * k.C, (size_t)k.V * k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    big_init(&k, 517, 72, 0, 0, 0, &rng);
    tc = (ThreadCase){"rmsnorm", run_rmsnorm, &k, {k.y, k.y2, k.g1}, {(size_t)k.N * k.C, (size_t)k.N, (size_t)k.N * k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    /* dW sums over 700 tokens: beyond OpenBLAS's K block. */
    big_init(&k, 700, 0, 0, 200, 260, &rng);
    tc = (ThreadCase){"linear", run_linear, &k, {k.y, k.g1, k.dparams},
                      {(size_t)k.N * k.out, (size_t)k.N * k.in, (size_t)k.out * k.in}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    big_init(&k, 517, 72, 0, 0, 0, &rng);
    tc = (ThreadCase){"relu2", run_relu2, &k, {k.y, k.g1}, {(size_t)k.N * k.C, (size_t)k.N * k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    big_init(&k, 1001, 72, 0, 0, 0, &rng);
    tc = (ThreadCase){"residual_mix", run_residual_mix, &k, {k.y, k.g1, k.g2, k.dparams},
                      {(size_t)k.N * k.C, (size_t)k.N * k.C, (size_t)k.N * k.C, 2 * (size_t)k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    big_init(&k, 1001, 72, 0, 0, 0, &rng);
    tc = (ThreadCase){"scaled_add", run_scaled_add, &k, {k.y, k.g1, k.g2, k.dparams},
                      {(size_t)k.N * k.C, (size_t)k.N * k.C, (size_t)k.N * k.C, (size_t)k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
    if (harness_case_failed) goto done;

    /* Chunks of 128 + 128 + 44 tokens; V = 200 spans two sgemm tiles. */
    big_init(&k, 300, 64, 200, 0, 0, &rng);
    k.chunk = 128;
    tc = (ThreadCase){"logits_ce", run_logits, &k, {k.y, k.y2, k.g1, k.dparams},
                      {(size_t)k.N, 3, (size_t)k.N * k.C, (size_t)k.V * k.C}};
    check_thread_invariance(&tc);
    free_big(&k);
done:
    omp_set_num_threads(saved_threads);
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") && *getenv("CT_TEST_VERBOSE");
    RUN(test_embedding);
    RUN(test_rmsnorm);
    RUN(test_linear);
    RUN(test_linear_tiled_shapes);
    RUN(test_sgemm_tiles);
    RUN(test_relu2);
    RUN(test_residual_mix);
    RUN(test_scaled_add);
    RUN(test_logits_ce);
    RUN(test_logits_ce_chunk_sizes);
    RUN(test_logits_ce_rejects_bad_arguments);
    RUN(test_thread_count_gives_same_bits);
    TEST_EXIT();
}
