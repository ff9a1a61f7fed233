/* test_cpu_lora.c — reference tests of test-time training's CPU ops (issue 57): the low-rank
 * adapters (cpu_lora_forward / _backward / _backward_h), the low-rank head term of the logits
 * (cpu_logits_ce_lowrank_forward{,_backward}) and the input-gradient-only linear backward
 * (cpu_linear_backward with dW NULL), as tests/refcheck.h describes with test_cpu_ops.c's
 * bounds: fp32 forward vs a double reference, backward vs central finite differences of the
 * double reference's loss, the += semantics of every backward, the same bits with 1, 2 and 3
 * OpenMP threads; and the contracts' exact cases: B = 0 gives the plain logits' losses bit for
 * bit, lowrank NULL is the plain op. Odd sizes (N 7, in 13, r 3, out 5) so that no dimension
 * lines up with a vector width or tile. CT_TEST_VERBOSE=1 prints every measured error. */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_ops.h"
#include "harness.h"
#include "refcheck.h"

static int verbose;

static float *zeros(size_t n) { return ct_calloc(n, sizeof(float), "test buffer"); }

static int32_t *random_ids(int n, int vocab, uint64_t *rng) {
    int32_t *ids = ct_malloc((size_t)n * sizeof(int32_t), "test ids");
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(ref_rand01(rng) * vocab);
    return ids;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y[rows,cols] = a[rows,k] @ b[cols,k]^T in double (the layout of x W^T). */
static void ref_matmul_bt(const double *a, const double *b, double *y, int rows, int cols, int k) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) y[(size_t)i * cols + j] = dot(a + (size_t)i * k, b + (size_t)j * k, (size_t)k);
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- LoRA --------------------------------------------------------------------------------- */

typedef struct {
    int N, in, r, out;
    double s;
    const double *x, *A, *B, *R;
} LoraRef;

/* h = x A^T, delta = s * h B^T (the forward's addition to out). */
static void lora_ref(const LoraRef *p, double *h, double *delta) {
    ref_matmul_bt(p->x, p->A, h, p->N, p->r, p->in);
    ref_matmul_bt(h, p->B, delta, p->N, p->out, p->r);
    for (size_t i = 0; i < (size_t)p->N * p->out; i++) delta[i] *= p->s;
}

/* L = sum(delta * R): out's base part does not depend on x, A or B. */
static double lora_loss(const double *unused, void *ctx) {
    (void)unused;
    const LoraRef *p = ctx;
    double *h = ref_new_doubles((size_t)p->N * p->r), *delta = ref_new_doubles((size_t)p->N * p->out);
    lora_ref(p, h, delta);
    const double L = dot(delta, p->R, (size_t)p->N * p->out);
    free(h), free(delta);
    return L;
}

static void test_lora_vs_double_and_fd(void) {
    uint64_t rng = 101;
    const int N = 7, in = 13, r = 3, out = 5;
    const float s = 1.8f;
    const size_t nx = (size_t)N * in, na = (size_t)r * in, nb = (size_t)out * r, ny = (size_t)N * out,
                 nh = (size_t)N * r;
    float *x = ref_random_floats(nx, -1, 1, &rng), *A = ref_random_floats(na, -1, 1, &rng);
    float *B = ref_random_floats(nb, -1, 1, &rng), *R = ref_random_floats(ny, -1, 1, &rng);
    float *base = ref_random_floats(ny, -1, 1, &rng), *y = ref_copy_floats(base, ny), *h = ref_new_floats(nh);
    float *dh = ref_new_floats(nh), *dx = zeros(nx), *dA = zeros(na), *dB = zeros(nb);
    ref_poison(h, nh);
    ref_poison(dh, nh);
    cpu_lora_forward(y, h, x, A, B, s, N, in, r, out);

    double *x_d = ref_doubles_of(x, nx), *A_d = ref_doubles_of(A, na), *B_d = ref_doubles_of(B, nb);
    double *R_d = ref_doubles_of(R, ny), *h_ref = ref_new_doubles(nh), *y_ref = ref_new_doubles(ny);
    LoraRef p = {N, in, r, out, s, x_d, A_d, B_d, R_d};
    lora_ref(&p, h_ref, y_ref);
    for (size_t i = 0; i < ny; i++) y_ref[i] += base[i];
    CHECK_ERR("lora h", ref_rel_err(h, h_ref, nh), FORWARD_TOL);
    CHECK_ERR("lora out += s h B^T", ref_rel_err(y, y_ref, ny), FORWARD_TOL);

    cpu_lora_backward(dx, dA, dB, dh, R, x, h, A, B, s, N, in, r, out);
    double *dh_ref = ref_new_doubles(nh), *num_x = ref_new_doubles(nx), *num_A = ref_new_doubles(na),
           *num_B = ref_new_doubles(nb);
    for (int n = 0; n < N; n++) /* dh = s * R B */
        for (int k = 0; k < r; k++) {
            double acc = 0;
            for (int o = 0; o < out; o++) acc += R_d[(size_t)n * out + o] * B_d[(size_t)o * r + k];
            dh_ref[(size_t)n * r + k] = s * acc;
        }
    CHECK_ERR("lora dh = s dout B", ref_rel_err(dh, dh_ref, nh), FORWARD_TOL);
    ref_numgrad(lora_loss, x_d, nx, &p, FD_STEP, num_x);
    ref_numgrad(lora_loss, A_d, na, &p, FD_STEP, num_A);
    ref_numgrad(lora_loss, B_d, nb, &p, FD_STEP, num_B);
    CHECK_ERR("lora dx vs FD", ref_rel_err(dx, num_x, nx), GRADIENT_TOL);
    CHECK_ERR("lora dA vs FD", ref_rel_err(dA, num_A, na), GRADIENT_TOL);
    CHECK_ERR("lora dB vs FD", ref_rel_err(dB, num_B, nb), GRADIENT_TOL);

    /* += on dx, dA, dB; dh is written, so the second call leaves the same bits in it. */
    float *dx_once = ref_copy_floats(dx, nx), *dA_once = ref_copy_floats(dA, na), *dB_once = ref_copy_floats(dB, nb);
    float *dh_once = ref_copy_floats(dh, nh);
    cpu_lora_backward(dx, dA, dB, dh, R, x, h, A, B, s, N, in, r, out);
    CHECK_ERR("lora dx accumulates", ref_doubling_err(dx_once, dx, nx), ACCUMULATE_TOL);
    CHECK_ERR("lora dA accumulates", ref_doubling_err(dA_once, dA, na), ACCUMULATE_TOL);
    CHECK_ERR("lora dB accumulates", ref_doubling_err(dB_once, dB, nb), ACCUMULATE_TOL);
    CHECK(same_bits(dh, dh_once, nh), "dh is not rewritten with the same bits");

    /* dx NULL: the adapter gradients alone, the same bits. */
    float *dA_null = zeros(na), *dB_null = zeros(nb);
    ref_poison(dh, nh);
    cpu_lora_backward(NULL, dA_null, dB_null, dh, R, x, h, A, B, s, N, in, r, out);
    CHECK(same_bits(dA_null, dA_once, na) && same_bits(dB_null, dB_once, nb), "dA or dB differ with dx == NULL");
    CHECK(same_bits(dh, dh_once, nh), "dh differs with dx == NULL");
    free(x), free(A), free(B), free(R), free(base), free(y), free(h), free(dh), free(dx), free(dA), free(dB);
    free(dx_once), free(dA_once), free(dB_once), free(dh_once), free(dA_null), free(dB_null);
    free(x_d), free(A_d), free(B_d), free(R_d), free(h_ref), free(y_ref), free(dh_ref), free(num_x), free(num_A),
        free(num_B);
}

/* The part through h alone, from a given dh: dA += dh^T x and dx += dh A in double. */
static void test_lora_backward_h_vs_double(void) {
    uint64_t rng = 102;
    const int N = 7, in = 13, r = 3;
    const size_t nx = (size_t)N * in, na = (size_t)r * in, nh = (size_t)N * r;
    float *x = ref_random_floats(nx, -1, 1, &rng), *A = ref_random_floats(na, -1, 1, &rng);
    float *dh = ref_random_floats(nh, -1, 1, &rng);
    float *dx = ref_random_floats(nx, -1, 1, &rng), *dA = ref_random_floats(na, -1, 1, &rng); /* += onto these */
    double *dx_ref = ref_doubles_of(dx, nx), *dA_ref = ref_doubles_of(dA, na);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < r; k++)
            for (int i = 0; i < in; i++) {
                const double g = dh[(size_t)n * r + k];
                dx_ref[(size_t)n * in + i] += g * A[(size_t)k * in + i];
                dA_ref[(size_t)k * in + i] += g * x[(size_t)n * in + i];
            }
    float *dA_alone = ref_copy_floats(dA, na);
    cpu_lora_backward_h(dx, dA, dh, x, A, N, in, r);
    CHECK_ERR("lora_backward_h dx", ref_rel_err(dx, dx_ref, nx), FORWARD_TOL);
    CHECK_ERR("lora_backward_h dA", ref_rel_err(dA, dA_ref, na), FORWARD_TOL);
    cpu_lora_backward_h(NULL, dA_alone, dh, x, A, N, in, r);
    CHECK(same_bits(dA_alone, dA, na), "dA differs with dx == NULL");
    free(x), free(A), free(dh), free(dx), free(dA), free(dx_ref), free(dA_ref), free(dA_alone);
}

/* ---- linear backward without dW ----------------------------------------------------------- */

/* dW NULL skips only the weight product: dx is the same bits as with it. */
static void test_linear_backward_without_dW(void) {
    uint64_t rng = 103;
    const int N = 37, in = 13, out = 5;
    const size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -1, 1, &rng);
    float *R = ref_random_floats(ny, -1, 1, &rng), *start = ref_random_floats(nx, -1, 1, &rng);
    float *dx = ref_copy_floats(start, nx), *dx_no_dW = ref_copy_floats(start, nx), *dW = zeros(nw);
    cpu_linear_backward(dx, dW, R, x, W, N, in, out);
    cpu_linear_backward(dx_no_dW, NULL, R, x, W, N, in, out);
    int dW_written = 0;
    for (size_t i = 0; i < nw; i++) dW_written |= dW[i] != 0.0f;
    CHECK(dW_written, "the reference call left dW zero");
    CHECK(same_bits(dx, dx_no_dW, nx), "dx differs with dW == NULL");
    free(x), free(W), free(R), free(start), free(dx), free(dx_no_dW), free(dW);
}

/* ---- logits with the low-rank head term --------------------------------------------------- */

typedef struct {
    int N, C, V, r;
    double softcap, loss_weight, s;
    const int32_t *targets;
    const double *x, *W, *h, *B;
} LowRankLogitsRef;

/* Per-token losses in double; returns loss_weight * mean. */
static double lowrank_logits_ref(const LowRankLogitsRef *p, double *losses) {
    double *z = ref_new_doubles((size_t)p->V), total = 0;
    for (int n = 0; n < p->N; n++) {
        double max_z = -INFINITY, sum = 0;
        for (int v = 0; v < p->V; v++) {
            const double raw = dot(p->x + (size_t)n * p->C, p->W + (size_t)v * p->C, (size_t)p->C) +
                               p->s * dot(p->h + (size_t)n * p->r, p->B + (size_t)v * p->r, (size_t)p->r);
            z[v] = p->softcap * tanh(raw / p->softcap);
            max_z = fmax(max_z, z[v]);
        }
        for (int v = 0; v < p->V; v++) sum += exp(z[v] - max_z);
        const double loss = max_z + log(sum) - z[p->targets[n]];
        if (losses) losses[n] = loss;
        total += loss;
    }
    free(z);
    return p->loss_weight * total / p->N;
}

static double lowrank_logits_loss(const double *unused, void *ctx) {
    (void)unused;
    return lowrank_logits_ref(ctx, NULL);
}

static void check_lowrank_logits(int N, int C, int V, int r, float softcap, double w_scale, int chunk, uint64_t seed) {
    uint64_t rng = seed;
    const float loss_weight = 0.5f, s = 1.8f;
    const size_t nx = (size_t)N * C, nw = (size_t)V * C, nh = (size_t)N * r, nb = (size_t)V * r;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -w_scale, w_scale, &rng);
    float *h = ref_random_floats(nh, -1, 1, &rng), *B = ref_random_floats(nb, -w_scale, w_scale, &rng);
    float *losses = ref_new_floats((size_t)N), *scratch = ref_new_floats((size_t)chunk * V);
    float *dx = zeros(nx), *dW = zeros(nw), *dh = zeros(nh), *dB = zeros(nb);
    ref_poison(losses, (size_t)N);
    ref_poison(scratch, (size_t)chunk * V);
    CpuLogitsLowRank lowrank = {h, B, s, r, dh, dB};
    double mean = NAN;
    CHECK(cpu_logits_ce_lowrank_forward_backward(dx, dW, &lowrank, losses, &mean, x, W, targets, N, C, V, softcap,
                                                 loss_weight, scratch, chunk) == 0,
          "forward_backward failed: %s", ct_error());

    double *x_d = ref_doubles_of(x, nx), *W_d = ref_doubles_of(W, nw), *h_d = ref_doubles_of(h, nh);
    double *B_d = ref_doubles_of(B, nb), *ref = ref_new_doubles((size_t)N);
    LowRankLogitsRef p = {N, C, V, r, softcap, loss_weight, s, targets, x_d, W_d, h_d, B_d};
    const double ref_weighted_mean = lowrank_logits_ref(&p, ref);
    char label[80];
    snprintf(label, sizeof label, "lowrank cap %g per-token loss", (double)softcap);
    CHECK_ERR(label, ref_rel_err(losses, ref, (size_t)N), FORWARD_TOL);
    snprintf(label, sizeof label, "lowrank cap %g mean loss", (double)softcap);
    CHECK_ERR(label, fabs(mean * loss_weight - ref_weighted_mean) / fabs(ref_weighted_mean), FORWARD_TOL);

    double *num_x = ref_new_doubles(nx), *num_W = ref_new_doubles(nw), *num_h = ref_new_doubles(nh),
           *num_B = ref_new_doubles(nb);
    ref_numgrad(lowrank_logits_loss, x_d, nx, &p, FD_STEP, num_x);
    ref_numgrad(lowrank_logits_loss, W_d, nw, &p, FD_STEP, num_W);
    ref_numgrad(lowrank_logits_loss, h_d, nh, &p, FD_STEP, num_h);
    ref_numgrad(lowrank_logits_loss, B_d, nb, &p, FD_STEP, num_B);
    const float *got[4] = {dx, dW, dh, dB};
    const double *num[4] = {num_x, num_W, num_h, num_B};
    const size_t counts[4] = {nx, nw, nh, nb};
    const char *names[4] = {"dx", "dW", "dh", "dB"};
    for (int k = 0; k < 4; k++) {
        snprintf(label, sizeof label, "lowrank cap %g %s vs FD", (double)softcap, names[k]);
        CHECK_ERR(label, ref_rel_err(got[k], num[k], counts[k]), GRADIENT_TOL);
    }

    /* += semantics of all four gradients. */
    float *once[4];
    for (int k = 0; k < 4; k++) once[k] = ref_copy_floats(got[k], counts[k]);
    CHECK(cpu_logits_ce_lowrank_forward_backward(dx, dW, &lowrank, losses, &mean, x, W, targets, N, C, V, softcap,
                                                 loss_weight, scratch, chunk) == 0,
          "second call failed: %s", ct_error());
    for (int k = 0; k < 4; k++) {
        snprintf(label, sizeof label, "lowrank %s accumulates", names[k]);
        CHECK_ERR(label, ref_doubling_err(once[k], got[k], counts[k]), ACCUMULATE_TOL);
    }

    /* dW NULL: dx, dh, dB and the losses are the same bits. */
    float *dx2 = zeros(nx), *dh2 = zeros(nh), *dB2 = zeros(nb), *losses2 = ref_new_floats((size_t)N);
    CpuLogitsLowRank lowrank2 = {h, B, s, r, dh2, dB2};
    double mean2 = NAN;
    CHECK(cpu_logits_ce_lowrank_forward_backward(dx2, NULL, &lowrank2, losses2, &mean2, x, W, targets, N, C, V,
                                                 softcap, loss_weight, scratch, chunk) == 0,
          "dW NULL failed: %s", ct_error());
    CHECK(same_bits(dx2, once[0], nx) && same_bits(dh2, once[2], nh) && same_bits(dB2, once[3], nb),
          "dx, dh or dB differ with dW == NULL");
    CHECK(same_bits(losses2, losses, (size_t)N) && mean2 == mean, "losses differ with dW == NULL");

    /* Forward only: the same losses and sum, with or without the per-token buffer. */
    double sum = NAN, sum_no_losses = NAN;
    ref_poison(losses2, (size_t)N);
    CHECK(cpu_logits_ce_lowrank_forward(losses2, &sum, x, W, &lowrank, targets, N, C, V, softcap, scratch, chunk) == 0,
          "forward failed: %s", ct_error());
    CHECK(cpu_logits_ce_lowrank_forward(NULL, &sum_no_losses, x, W, &lowrank, targets, N, C, V, softcap, scratch,
                                        chunk) == 0,
          "forward without losses failed: %s", ct_error());
    CHECK(same_bits(losses2, losses, (size_t)N), "forward-only losses differ");
    CHECK(sum / N == mean && sum_no_losses == sum, "loss sums differ: %.17g %.17g %.17g", sum / N, mean,
          sum_no_losses);
    for (int k = 0; k < 4; k++) free(once[k]);
    free(targets), free(x), free(W), free(h), free(B), free(losses), free(scratch), free(dx), free(dW), free(dh),
        free(dB);
    free(dx2), free(dh2), free(dB2), free(losses2);
    free(x_d), free(W_d), free(h_d), free(B_d), free(ref), free(num_x), free(num_W), free(num_h), free(num_B);
}

static void test_logits_lowrank_vs_double_and_fd(void) {
    /* softcap 1.5 with logits ~1: tanh far from linear. Chunks 4+4+1. */
    check_lowrank_logits(9, 12, 37, 3, 1.5f, 1.0, 4, 111);
    if (harness_case_failed) return;
    /* The model's softcap 30 with logits up to ~20; one chunk exactly N. */
    check_lowrank_logits(7, 13, 50, 5, 30.0f, 8.0, 7, 112);
}

/* Runs the plain op and the low-rank one (lowrank may be NULL) from the same zeroed gradients
 * and requires the same bits in the losses, the mean, dx and dW, and in the forward-only sum. */
static void compare_with_plain(const CpuLogitsLowRank *lowrank, const char *what) {
    uint64_t rng = 113;
    const int N = 37, C = 16, V = 29, chunk = 10;
    const size_t nx = (size_t)N * C, nw = (size_t)V * C;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats(nw, -2, 2, &rng);
    float *scratch = ref_new_floats((size_t)chunk * V);
    float *losses[2], *dx[2], *dW[2], *val_losses[2];
    double mean[2], sum[2];
    for (int k = 0; k < 2; k++) {
        losses[k] = ref_new_floats((size_t)N), val_losses[k] = ref_new_floats((size_t)N);
        dx[k] = zeros(nx), dW[k] = zeros(nw);
    }
    int rc = cpu_logits_ce_forward_backward(dx[0], dW[0], losses[0], &mean[0], x, W, targets, N, C, V, 30.0f, 0.5f,
                                            scratch, chunk);
    rc |= cpu_logits_ce_lowrank_forward_backward(dx[1], dW[1], lowrank, losses[1], &mean[1], x, W, targets, N, C, V,
                                                 30.0f, 0.5f, scratch, chunk);
    rc |= cpu_logits_ce_forward(val_losses[0], &sum[0], x, W, targets, N, C, V, 30.0f, scratch, chunk);
    rc |= cpu_logits_ce_lowrank_forward(val_losses[1], &sum[1], x, W, lowrank, targets, N, C, V, 30.0f, scratch, chunk);
    const int same = !rc && same_bits(losses[0], losses[1], (size_t)N) && mean[0] == mean[1] &&
                     same_bits(dx[0], dx[1], nx) && same_bits(dW[0], dW[1], nw) &&
                     same_bits(val_losses[0], val_losses[1], (size_t)N) && sum[0] == sum[1];
    for (int k = 0; k < 2; k++) free(losses[k]), free(val_losses[k]), free(dx[k]), free(dW[k]);
    free(targets), free(x), free(W), free(scratch);
    CHECK(!rc, "%s: a call failed: %s", what, ct_error());
    CHECK(same, "%s: losses, mean, dx, dW or the forward's sum differ from the plain op's", what);
}

/* B all zero: the losses (and, since dz is then the same too, dx and dW) are the plain op's bits;
 * dh gets s * dz B = 0 and dB the real gradient s * dz^T h. */
static void test_logits_lowrank_zero_B_is_plain(void) {
    uint64_t rng = 114;
    const int N = 37, r = 3, V = 29;
    float *h = ref_random_floats((size_t)N * r, -1, 1, &rng), *B = zeros((size_t)V * r);
    float *dh = zeros((size_t)N * r), *dB = zeros((size_t)V * r);
    CpuLogitsLowRank lowrank = {h, B, 1.8f, r, dh, dB};
    compare_with_plain(&lowrank, "B = 0");
    int dh_zero = 1, dB_nonzero = 0;
    for (size_t i = 0; i < (size_t)N * r; i++) dh_zero &= dh[i] == 0.0f;
    for (size_t i = 0; i < (size_t)V * r; i++) dB_nonzero |= dB[i] != 0.0f;
    free(h), free(B), free(dh), free(dB);
    CHECK(dh_zero, "dh is not zero with B = 0");
    CHECK(dB_nonzero, "dB is all zero with B = 0 (its gradient is s * dz^T h)");
}

static void test_logits_lowrank_null_is_plain(void) { compare_with_plain(NULL, "lowrank NULL"); }

static void test_logits_lowrank_rejects_bad_arguments(void) {
    uint64_t rng = 115;
    const int N = 6, C = 8, V = 11, r = 2;
    int32_t *targets = random_ids(N, V, &rng);
    float *x = ref_random_floats((size_t)N * C, -1, 1, &rng), *W = ref_random_floats((size_t)V * C, -1, 1, &rng);
    float *h = ref_random_floats((size_t)N * r, -1, 1, &rng), *B = ref_random_floats((size_t)V * r, -1, 1, &rng);
    float *scratch = ref_new_floats((size_t)N * V), *losses = ref_new_floats((size_t)N), *dx = zeros((size_t)N * C);
    double mean, sum;
    CpuLogitsLowRank rank0 = {h, B, 1.0f, 0, NULL, NULL}, no_h = {NULL, B, 1.0f, r, NULL, NULL};
    const int rc0 = cpu_logits_ce_lowrank_forward(NULL, &sum, x, W, &rank0, targets, N, C, V, 30.0f, scratch, N);
    const int names_rank = rc0 == -1 && strstr(ct_error(), "rank 0") != NULL;
    const int rc1 = cpu_logits_ce_lowrank_forward_backward(dx, NULL, &no_h, losses, &mean, x, W, targets, N, C, V,
                                                           30.0f, 1.0f, scratch, N);
    int dx_untouched = 1;
    for (size_t i = 0; i < (size_t)N * C; i++) dx_untouched &= dx[i] == 0.0f;
    free(targets), free(x), free(W), free(h), free(B), free(scratch), free(losses), free(dx);
    CHECK(rc0 == -1, "rank 0 accepted");
    CHECK(names_rank, "message does not name the rank: %s", ct_error());
    CHECK(rc1 == -1, "a low-rank term without h accepted");
    CHECK(dx_untouched, "dx written before failing");
}

/* ---- bitwise identical results with 1, 2 and 3 threads ------------------------------------ */

typedef struct {
    int N, in, r, out, V, chunk;
    int32_t *targets;
    const float *x, *A, *B, *W, *h, *start; /* inputs; start: the gradients' nonzero start */
    float *y, *hh, *dx, *dA, *dB, *dh, *dW, *losses, *scratch;
} ThreadCtx;

enum { MAX_OUTPUTS = 6 };

/* Runs `run` with 1, 2 and 3 threads and requires identical bits in every output. */
static void check_thread_invariance(const char *name, void (*run)(ThreadCtx *), ThreadCtx *k, float *const *outputs,
                                    const size_t *counts, int n_outputs) {
    float *first[MAX_OUTPUTS] = {0};
    int differs = -1, threads = 0;
    for (int t = 1; t <= 3 && differs < 0; t++) {
        omp_set_num_threads(t);
        run(k);
        for (int o = 0; o < n_outputs; o++) {
            if (t == 1) first[o] = ref_copy_floats(outputs[o], counts[o]);
            else if (!same_bits(first[o], outputs[o], counts[o])) differs = o, threads = t;
        }
    }
    for (int o = 0; o < n_outputs; o++) free(first[o]);
    CHECK(differs < 0, "%s: output %d differs between 1 and %d threads", name, differs, threads);
}

static void run_lora(ThreadCtx *k) {
    const size_t ny = (size_t)k->N * k->out, nx = (size_t)k->N * k->in;
    memcpy(k->y, k->start, ny * sizeof(float));
    memcpy(k->dx, k->start, nx * sizeof(float));
    memset(k->dA, 0, (size_t)k->r * k->in * sizeof(float));
    memset(k->dB, 0, (size_t)k->out * k->r * sizeof(float));
    cpu_lora_forward(k->y, k->hh, k->x, k->A, k->B, 1.8f, k->N, k->in, k->r, k->out);
    cpu_lora_backward(k->dx, k->dA, k->dB, k->dh, k->start, k->x, k->hh, k->A, k->B, 1.8f, k->N, k->in, k->r, k->out);
}

static void run_lowrank_logits(ThreadCtx *k) {
    const int N = k->N, C = k->in, V = k->V, r = k->r;
    memcpy(k->dx, k->start, (size_t)N * C * sizeof(float));
    memcpy(k->dh, k->start, (size_t)N * r * sizeof(float));
    memset(k->dW, 0, (size_t)V * C * sizeof(float));
    memset(k->dB, 0, (size_t)V * r * sizeof(float));
    CpuLogitsLowRank lowrank = {k->h, k->B, 1.8f, r, k->dh, k->dB};
    double mean, sum;
    if (cpu_logits_ce_lowrank_forward_backward(k->dx, k->dW, &lowrank, k->losses, &mean, k->x, k->W, k->targets, N, C,
                                               V, 30.0f, 0.25f, k->scratch, k->chunk) ||
        cpu_logits_ce_lowrank_forward(NULL, &sum, k->x, k->W, &lowrank, k->targets, N, C, V, 30.0f, k->scratch,
                                      k->chunk))
        abort();
    memcpy(k->y, &mean, sizeof mean); /* the double sums compared bit for bit as 2 x 2 floats */
    memcpy(k->y + 2, &sum, sizeof sum);
}

static void test_thread_count_gives_same_bits(void) {
    const int saved_threads = omp_get_max_threads();
    uint64_t rng = 121;
    /* LoRA: N odd and > 128 (several sgemm tiles), the adapter products' token sums over 700
     * rows (beyond OpenBLAS's K block). */
    {
        ThreadCtx k = {.N = 701, .in = 200, .r = 24, .out = 260};
        const size_t nx = (size_t)k.N * k.in, ny = (size_t)k.N * k.out, nh = (size_t)k.N * k.r;
        float *x = ref_random_floats(nx, -1, 1, &rng), *A = ref_random_floats((size_t)k.r * k.in, -1, 1, &rng);
        float *B = ref_random_floats((size_t)k.out * k.r, -1, 1, &rng), *start = ref_random_floats(nx > ny ? nx : ny, -1, 1, &rng);
        k.x = x, k.A = A, k.B = B, k.start = start;
        k.y = ref_new_floats(ny), k.hh = ref_new_floats(nh), k.dx = ref_new_floats(nx), k.dh = ref_new_floats(nh);
        k.dA = ref_new_floats((size_t)k.r * k.in), k.dB = ref_new_floats((size_t)k.out * k.r);
        float *outputs[] = {k.y, k.hh, k.dx, k.dA, k.dB, k.dh};
        const size_t counts[] = {ny, nh, nx, (size_t)k.r * k.in, (size_t)k.out * k.r, nh};
        check_thread_invariance("lora", run_lora, &k, outputs, counts, 6);
        free(x), free(A), free(B), free(start), free(k.y), free(k.hh), free(k.dx), free(k.dh), free(k.dA), free(k.dB);
    }
    if (harness_case_failed) goto done;
    /* Logits: chunks of 128 + 128 + 44 tokens; V = 200 spans two sgemm tiles. */
    {
        ThreadCtx k = {.N = 300, .in = 64, .r = 8, .V = 200, .chunk = 128};
        const size_t nx = (size_t)k.N * k.in, nh = (size_t)k.N * k.r;
        k.targets = random_ids(k.N, k.V, &rng);
        float *x = ref_random_floats(nx, -1, 1, &rng), *W = ref_random_floats((size_t)k.V * k.in, -1, 1, &rng);
        float *h = ref_random_floats(nh, -1, 1, &rng), *B = ref_random_floats((size_t)k.V * k.r, -1, 1, &rng);
        float *start = ref_random_floats(nx, -1, 1, &rng);
        k.x = x, k.W = W, k.h = h, k.B = B, k.start = start;
        k.dx = ref_new_floats(nx), k.dh = ref_new_floats(nh), k.dW = ref_new_floats((size_t)k.V * k.in);
        k.dB = ref_new_floats((size_t)k.V * k.r), k.losses = ref_new_floats((size_t)k.N), k.y = ref_new_floats(4);
        k.scratch = ref_new_floats((size_t)k.chunk * k.V);
        float *outputs[] = {k.losses, k.y, k.dx, k.dW, k.dh, k.dB};
        const size_t counts[] = {(size_t)k.N, 4, nx, (size_t)k.V * k.in, nh, (size_t)k.V * k.r};
        check_thread_invariance("logits lowrank", run_lowrank_logits, &k, outputs, counts, 6);
        free(k.targets), free(x), free(W), free(h), free(B), free(start), free(k.dx), free(k.dh), free(k.dW),
            free(k.dB), free(k.losses), free(k.y), free(k.scratch);
    }
done:
    omp_set_num_threads(saved_threads);
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") && *getenv("CT_TEST_VERBOSE");
    RUN(test_lora_vs_double_and_fd);
    RUN(test_lora_backward_h_vs_double);
    RUN(test_linear_backward_without_dW);
    RUN(test_logits_lowrank_vs_double_and_fd);
    RUN(test_logits_lowrank_zero_B_is_plain);
    RUN(test_logits_lowrank_null_is_plain);
    RUN(test_logits_lowrank_rejects_bad_arguments);
    RUN(test_thread_count_gives_same_bits);
    TEST_EXIT();
}
