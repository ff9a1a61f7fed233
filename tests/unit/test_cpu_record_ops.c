/* test_cpu_record_ops.c — reference tests of the CPU ops the record stack adds (issue 36):
 * SmearGate, the bigram hash and its scalar-scaled branch, XSA, the sparse attention head gate
 * (issue 56), partial RoPE and its tables, ln_scale's factor, late QAT's int6 fake quantization,
 * the orthogonal initialisation, and the 1.0611 record's leaky relu^2 (mlp_negative_slope) and
 * gated U-Net skip (skip_gates), as
 * tests/refcheck.h describes (and test_cpu_ops.c's bounds): fp32 forward vs a double reference
 * or hand-computed values, backward vs central finite differences of L = sum(out * R), the +=
 * semantics of every backward, and the same bits with 1 and 3 OpenMP threads.
 * CT_TEST_VERBOSE=1 prints every measured error.
 *
 * Contents (the sections below, in order): SmearGate; bigram hash and its scaled branch; XSA;
 * partial RoPE; ln_scale; late QAT's int6 fake quantization; leaky relu^2; gated U-Net skip;
 * thread count; orthogonal initialisation; main. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_attention.h"
#include "cpu_fake_quant.h"
#include "cpu_ops.h"
#include "harness.h"
#include "model.h"
#include "refcheck.h"

static int verbose;


static float *zeros(size_t n) { return ct_calloc(n, sizeof(float), "test buffer"); }

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- SmearGate ----------------------------------------------------------------------------- */

typedef struct {
    int B, T, C;
    const double *x, *gate, *R;
} SmearRef;

static void smear_ref(const SmearRef *p, double *out) {
    for (int b = 0; b < p->B; b++)
        for (int t = 0; t < p->T; t++)
            for (int c = 0; c < p->C; c++) {
                size_t i = ((size_t)b * p->T + t) * p->C + c;
                double g = 1.0 / (1.0 + exp(-p->gate[c]));
                double prev = t == 0 ? 0.0 : p->x[i - p->C];
                out[i] = (1 - g) * p->x[i] + g * prev;
            }
}

static double smear_loss(const double *unused, void *ctx) {
    (void)unused;
    const SmearRef *p = ctx;
    size_t n = (size_t)p->B * p->T * p->C;
    double *out = ref_new_doubles(n);
    smear_ref(p, out);
    double L = dot(out, p->R, n);
    free(out);
    return L;
}

static void test_smear(void) {
    uint64_t rng = 361;
    const int B = 3, T = 5, C = 19; /* two channel blocks, the second ragged */
    const size_t n = (size_t)B * T * C;
    float *x = ref_random_floats(n, -1, 1, &rng), *gate = ref_random_floats(C, -2, 2, &rng);
    float *R = ref_random_floats(n, -1, 1, &rng), *out = ref_new_floats(n);
    float *dx = zeros(n), *dgate = zeros(C);
    ref_poison(out, n);
    cpu_smear_forward(out, x, gate, B, T, C);
    double *x_d = ref_doubles_of(x, n), *g_d = ref_doubles_of(gate, C), *R_d = ref_doubles_of(R, n);
    double *ref = ref_new_doubles(n), *num_x = ref_new_doubles(n), *num_g = ref_new_doubles(C);
    SmearRef p = {B, T, C, x_d, g_d, R_d};
    smear_ref(&p, ref);
    CHECK_ERR("smear forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    cpu_smear_backward(dx, dgate, R, x, gate, B, T, C);
    ref_numgrad(smear_loss, x_d, n, &p, FD_STEP, num_x);
    ref_numgrad(smear_loss, g_d, C, &p, FD_STEP, num_g);
    CHECK_ERR("smear dx vs FD", ref_rel_err(dx, num_x, n), GRADIENT_TOL);
    CHECK_ERR("smear dgate vs FD", ref_rel_err(dgate, num_g, C), GRADIENT_TOL);
    float *dx_once = ref_copy_floats(dx, n), *dg_once = ref_copy_floats(dgate, C);
    cpu_smear_backward(dx, dgate, R, x, gate, B, T, C);
    CHECK_ERR("smear dx accumulates", ref_doubling_err(dx_once, dx, n), ACCUMULATE_TOL);
    CHECK_ERR("smear dgate accumulates", ref_doubling_err(dg_once, dgate, C), ACCUMULATE_TOL);
    free(x), free(gate), free(R), free(out), free(dx), free(dgate), free(dx_once), free(dg_once);
    free(x_d), free(g_d), free(R_d), free(ref), free(num_x), free(num_g);
}

/* ---- bigram hash and its scaled branch ----------------------------------------------------- */

static void test_bigram_hash(void) {
    /* hand-computed: (36313 * cur) ^ (27191 * prev) mod (buckets - 1), first position -> buckets - 1 */
    const int32_t ids[] = {5, 7, 1, 0, 1023, 1023};
    int32_t got[6];
    cpu_bigram_hash(got, ids, 2, 3, 2048);
    const int32_t want[] = {2047, ((36313 * 7) ^ (27191 * 5)) % 2047, ((36313 * 1) ^ (27191 * 7)) % 2047,
                            2047, ((36313 * 1023) ^ (27191 * 0)) % 2047, ((36313 * 1023) ^ (27191 * 1023)) % 2047};
    for (int i = 0; i < 6; i++) CHECK(got[i] == want[i], "bucket %d: got %d, want %d", i, got[i], want[i]);
    /* values torch computes (the record's bigram_hash on int32 tensors): [[5,7,1],[0,1023,1023]]
     * -> 1082, 677 | 1290, 977; [[59999, 60000]] with 4096 buckets -> 2285, where 36313 * 60000
     * wraps to -2116187296 and the remainder of the negative xor takes the divisor's sign */
    CHECK(got[1] == 1082 && got[2] == 677 && got[4] == 1290 && got[5] == 977, "torch's buckets: %d %d %d %d", got[1],
          got[2], got[4], got[5]);
    const int32_t big[] = {59999, 60000};
    int32_t b2[2];
    cpu_bigram_hash(b2, big, 1, 2, 4096);
    CHECK(b2[0] == 4095 && b2[1] == 2285, "wrapped product: got %d %d, torch gives 4095 2285", b2[0], b2[1]);
    /* two buckets: everything but the first position falls in bucket 0 */
    int32_t two[3];
    cpu_bigram_hash(two, ids, 1, 3, 2);
    CHECK(two[0] == 1 && two[1] == 0 && two[2] == 0, "two buckets: %d %d %d", two[0], two[1], two[2]);
}

static void test_scalar_scaled_add(void) {
    uint64_t rng = 371;
    const size_t n = 77;
    float *x = ref_random_floats(n, -1, 1, &rng), *br = ref_random_floats(n, -1, 1, &rng);
    float *R = ref_random_floats(n, -1, 1, &rng), scale = 0.05f, out[77], dbr[77] = {0}, dscale = 0;
    cpu_add_scalar_scaled_forward(out, x, br, &scale, n);
    double err = 0, want_ds = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs(out[i] - ((double)x[i] + (double)br[i] * scale)));
        want_ds += (double)R[i] * br[i];
    }
    CHECK(err <= 1e-6, "forward error %g", err);
    cpu_add_scalar_scaled_backward(dbr, &dscale, R, br, &scale, n);
    for (size_t i = 0; i < n; i++) CHECK(dbr[i] == R[i] * scale, "dbranch[%zu]", i);
    CHECK_CLOSE(dscale, want_ds, 1e-6);
    cpu_add_scalar_scaled_backward(dbr, &dscale, R, br, &scale, n);
    CHECK_CLOSE(dscale, 2 * want_ds, 1e-6);
    free(x), free(br), free(R);
}

/* ---- XSA ------------------------------------------------------------------------------------ */

typedef struct {
    int N, H, KV, hd;
    const double *y, *v, *R;
} XsaRef;

static void xsa_ref(const XsaRef *p, double *out) {
    const int group = p->H / p->KV;
    for (int n = 0; n < p->N; n++)
        for (int h = 0; h < p->H; h++) {
            const double *v = p->v + ((size_t)n * p->KV + h / group) * p->hd;
            const double *y = p->y + ((size_t)n * p->H + h) * p->hd;
            double *o = out + ((size_t)n * p->H + h) * p->hd;
            double norm = 0, c = 0;
            for (int d = 0; d < p->hd; d++) norm += v[d] * v[d];
            norm = fmax(sqrt(norm), 1e-12);
            for (int d = 0; d < p->hd; d++) c += y[d] * v[d] / norm;
            for (int d = 0; d < p->hd; d++) o[d] = y[d] - c * v[d] / norm;
        }
}

static double xsa_loss(const double *unused, void *ctx) {
    (void)unused;
    const XsaRef *p = ctx;
    size_t n = (size_t)p->N * p->H * p->hd;
    double *out = ref_new_doubles(n);
    xsa_ref(p, out);
    double L = dot(out, p->R, n);
    free(out);
    return L;
}

static void test_xsa(void) {
    uint64_t rng = 381;
    const int N = 7, H = 6, KV = 2, hd = 10;
    const size_t ny = (size_t)N * H * hd, nv = (size_t)N * KV * hd;
    float *y = ref_random_floats(ny, -1, 1, &rng), *v = ref_random_floats(nv, -1, 1, &rng);
    float *R = ref_random_floats(ny, -1, 1, &rng), *out = ref_new_floats(ny), *dy = zeros(ny), *dv = zeros(nv);
    ref_poison(out, ny);
    cpu_xsa_forward(out, y, v, N, H, KV, hd);
    double *y_d = ref_doubles_of(y, ny), *v_d = ref_doubles_of(v, nv), *R_d = ref_doubles_of(R, ny);
    double *ref = ref_new_doubles(ny), *num_y = ref_new_doubles(ny), *num_v = ref_new_doubles(nv);
    XsaRef p = {N, H, KV, hd, y_d, v_d, R_d};
    xsa_ref(&p, ref);
    CHECK_ERR("xsa forward", ref_rel_err(out, ref, ny), FORWARD_TOL);
    /* the output is orthogonal to the unit value vector */
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *o = out + ((size_t)n * H + h) * hd, *vv = v + ((size_t)n * KV + h / (H / KV)) * hd;
            double c = 0, nn = 0;
            for (int d = 0; d < hd; d++) c += (double)o[d] * vv[d], nn += (double)vv[d] * vv[d];
            worst = fmax(worst, fabs(c) / sqrt(nn));
        }
    CHECK(worst <= 1e-6, "output . unit value = %g, expected 0", worst);
    cpu_xsa_backward(dy, dv, R, y, v, N, H, KV, hd);
    ref_numgrad(xsa_loss, y_d, ny, &p, FD_STEP, num_y);
    ref_numgrad(xsa_loss, v_d, nv, &p, FD_STEP, num_v);
    CHECK_ERR("xsa dy vs FD", ref_rel_err(dy, num_y, ny), GRADIENT_TOL);
    CHECK_ERR("xsa dv vs FD", ref_rel_err(dv, num_v, nv), GRADIENT_TOL);
    float *dy_once = ref_copy_floats(dy, ny), *dv_once = ref_copy_floats(dv, nv);
    cpu_xsa_backward(dy, dv, R, y, v, N, H, KV, hd);
    CHECK_ERR("xsa dy accumulates", ref_doubling_err(dy_once, dy, ny), ACCUMULATE_TOL);
    CHECK_ERR("xsa dv accumulates", ref_doubling_err(dv_once, dv, nv), ACCUMULATE_TOL);
    /* a zero value vector: F.normalize's clamp leaves y unchanged, and nothing is NaN */
    memset(v, 0, (size_t)hd * sizeof(float));
    cpu_xsa_forward(out, y, v, N, H, KV, hd);
    CHECK(memcmp(out, y, (size_t)hd * sizeof(float)) == 0, "zero value vector changed y");
    memset(dv, 0, nv * sizeof(float));
    cpu_xsa_backward(dy, dv, R, y, v, N, H, KV, hd);
    for (size_t i = 0; i < nv; i++) CHECK(isfinite(dv[i]), "dv[%zu] not finite with a zero value vector", i);
    free(y), free(v), free(R), free(out), free(dy), free(dv), free(dy_once), free(dv_once);
    free(y_d), free(v_d), free(R_d), free(ref), free(num_y), free(num_v);
}

/* ---- sparse attention head-output gate --------------------------------------------------------- */

typedef struct {
    int N, H, hd, W;
    double scale;
    const double *y, *n, *w, *R;
} GateRef;

/* out[t,h,:] = sigmoid(scale * w[h] . n[t,:W]) y[t,h,:], n rows of H*hd */
static void gate_ref(const GateRef *p, double *out) {
    const size_t D = (size_t)p->H * p->hd;
    for (int t = 0; t < p->N; t++)
        for (int h = 0; h < p->H; h++) {
            double z = 0;
            for (int k = 0; k < p->W; k++) z += p->w[(size_t)h * p->W + k] * p->n[(size_t)t * D + k];
            const double g = 1.0 / (1.0 + exp(-p->scale * z));
            for (int d = 0; d < p->hd; d++) {
                const size_t i = (size_t)t * D + (size_t)h * p->hd + d;
                out[i] = g * p->y[i];
            }
        }
}

static double gate_loss(const double *unused, void *ctx) {
    (void)unused;
    const GateRef *p = ctx;
    const size_t n = (size_t)p->N * p->H * p->hd;
    double *out = ref_new_doubles(n);
    gate_ref(p, out);
    double L = dot(out, p->R, n);
    free(out);
    return L;
}

static void test_head_gate(void) {
    uint64_t rng = 391;
    const int N = 9, H = 4, hd = 6, W = 5; /* W < head_dim: n's channels past W get no gradient */
    const float scale = 0.5f;
    const size_t ny = (size_t)N * H * hd, nw = (size_t)H * W;
    float *y = ref_random_floats(ny, -1, 1, &rng), *n = ref_random_floats(ny, -2, 2, &rng);
    float *w = ref_random_floats(nw, -1, 1, &rng), *R = ref_random_floats(ny, -1, 1, &rng);
    float *out = ref_new_floats(ny), *g = ref_new_floats((size_t)N * H), *dz = ref_new_floats((size_t)N * H);
    float *dy = ref_new_floats(ny), *dw = zeros(nw), *dn = zeros(ny);
    ref_poison(out, ny);
    ref_poison(g, (size_t)N * H);
    cpu_head_gate_forward(out, g, y, n, w, N, H, hd, W, scale);
    double *y_d = ref_doubles_of(y, ny), *n_d = ref_doubles_of(n, ny), *w_d = ref_doubles_of(w, nw);
    double *R_d = ref_doubles_of(R, ny), *ref = ref_new_doubles(ny);
    double *num_y = ref_new_doubles(ny), *num_n = ref_new_doubles(ny), *num_w = ref_new_doubles(nw);
    GateRef p = {N, H, hd, W, scale, y_d, n_d, w_d, R_d};
    gate_ref(&p, ref);
    CHECK_ERR("head gate forward", ref_rel_err(out, ref, ny), FORWARD_TOL);
    ref_poison(dy, ny);
    ref_poison(dz, (size_t)N * H);
    cpu_head_gate_backward(dy, dz, dw, R, y, g, n, N, H, hd, W, scale);
    cpu_head_gate_input_backward(dn, dz, w, N, H, hd, W);
    ref_numgrad(gate_loss, y_d, ny, &p, FD_STEP, num_y);
    ref_numgrad(gate_loss, n_d, ny, &p, FD_STEP, num_n);
    ref_numgrad(gate_loss, w_d, nw, &p, FD_STEP, num_w);
    CHECK_ERR("head gate dy vs FD", ref_rel_err(dy, num_y, ny), GRADIENT_TOL);
    CHECK_ERR("head gate dn vs FD", ref_rel_err(dn, num_n, ny), GRADIENT_TOL);
    CHECK_ERR("head gate dw vs FD", ref_rel_err(dw, num_w, nw), GRADIENT_TOL);
    /* dw and dn accumulate; dy and dz are written (also in place, dy = dout) */
    float *dw_once = ref_copy_floats(dw, nw), *dn_once = ref_copy_floats(dn, ny), *dy_once = ref_copy_floats(dy, ny);
    float *inplace = ref_copy_floats(R, ny);
    cpu_head_gate_backward(inplace, dz, dw, inplace, y, g, n, N, H, hd, W, scale);
    cpu_head_gate_input_backward(dn, dz, w, N, H, hd, W);
    CHECK(memcmp(inplace, dy_once, ny * sizeof(float)) == 0, "in-place dy differs");
    CHECK_ERR("head gate dw accumulates", ref_doubling_err(dw_once, dw, nw), ACCUMULATE_TOL);
    CHECK_ERR("head gate dn accumulates", ref_doubling_err(dn_once, dn, ny), ACCUMULATE_TOL);
    /* the same bits with 1 and 3 threads (dw sums tokens in order) */
    float *dw1 = zeros(nw), *dw3 = zeros(nw);
    omp_set_num_threads(1);
    cpu_head_gate_backward(dy, dz, dw1, R, y, g, n, N, H, hd, W, scale);
    omp_set_num_threads(3);
    cpu_head_gate_backward(dy, dz, dw3, R, y, g, n, N, H, hd, W, scale);
    omp_set_num_threads(2);
    CHECK(memcmp(dw1, dw3, nw * sizeof(float)) == 0, "head gate dw differs between 1 and 3 threads");
    free(dw1), free(dw3);
    /* zero weights (the record's init): every gate is exactly 0.5 */
    memset(w, 0, nw * sizeof(float));
    cpu_head_gate_forward(out, g, y, n, w, N, H, hd, W, scale);
    for (size_t i = 0; i < (size_t)N * H; i++) CHECK(g[i] == 0.5f, "g[%zu] = %g with zero weights", i, (double)g[i]);
    free(y), free(n), free(w), free(R), free(out), free(g), free(dz), free(dy), free(dw), free(dn);
    free(dw_once), free(dn_once), free(dy_once), free(inplace);
    free(y_d), free(n_d), free(w_d), free(R_d), free(ref), free(num_y), free(num_n), free(num_w);
}

/* ---- partial RoPE -------------------------------------------------------------------------- */

typedef struct {
    int B, T, H, hd, rd;
    const double *x, *gain, *R;
    const float *cos_t, *sin_t;
} RopeRef;

static void rope_ref(const RopeRef *p, double *out) {
    const int half = p->rd / 2;
    for (int n = 0; n < p->B * p->T; n++)
        for (int h = 0; h < p->H; h++) {
            const double *x = p->x + ((size_t)n * p->H + h) * p->hd;
            double *o = out + ((size_t)n * p->H + h) * p->hd;
            double ms = 0;
            for (int d = 0; d < p->hd; d++) ms += x[d] * x[d];
            double r = 1.0 / sqrt(ms / p->hd + FLT_EPSILON);
            const float *c = p->cos_t + (size_t)(n % p->T) * half, *s = p->sin_t + (size_t)(n % p->T) * half;
            for (int i = 0; i < half; i++) {
                double u1 = x[i] * r, u2 = x[i + half] * r;
                o[i] = (u1 * c[i] + u2 * s[i]) * p->gain[h];
                o[i + half] = (u2 * c[i] - u1 * s[i]) * p->gain[h];
            }
            for (int d = p->rd; d < p->hd; d++) o[d] = x[d] * r * p->gain[h];
        }
}

static double rope_loss(const double *unused, void *ctx) {
    (void)unused;
    const RopeRef *p = ctx;
    size_t n = (size_t)p->B * p->T * p->H * p->hd;
    double *out = ref_new_doubles(n);
    rope_ref(p, out);
    double L = dot(out, p->R, n);
    free(out);
    return L;
}

/* The largest absolute error of RoPE tables [T, rd/2] against cos/sin(t * base^(-2i/rd)) in double. */
static double table_err(const float *cos_t, const float *sin_t, int T, int rd, double base) {
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < rd / 2; i++) {
            const double angle = t * pow(base, -2.0 * i / rd);
            worst = fmax(worst, fabs(cos_t[(size_t)t * (rd / 2) + i] - cos(angle)));
            worst = fmax(worst, fabs(sin_t[(size_t)t * (rd / 2) + i] - sin(angle)));
        }
    return worst;
}

static void test_partial_rope(void) {
    uint64_t rng = 391;
    const int B = 2, T = 6, H = 3, hd = 16, rd = 6;
    const size_t n = (size_t)B * T * H * hd;
    float cos_t[6 * 3], sin_t[6 * 3];
    cpu_rope_tables_init(cos_t, sin_t, T, rd, 10000.0f);
    float *x = ref_random_floats(n, -1, 1, &rng), *gain = ref_random_floats(H, 0.5, 2, &rng);
    float *R = ref_random_floats(n, -1, 1, &rng), *out = ref_new_floats(n), *dx = zeros(n), dgain[3] = {0};
    float *scratch = ref_new_floats(cpu_qk_norm_rope_backward_scratch_floats(B, T, H));
    ref_poison(out, n);
    cpu_qk_norm_rope_forward(out, x, gain, cos_t, sin_t, B, T, H, hd, rd);
    double *x_d = ref_doubles_of(x, n), *g_d = ref_doubles_of(gain, H), *R_d = ref_doubles_of(R, n);
    double *ref = ref_new_doubles(n), *num_x = ref_new_doubles(n), *num_g = ref_new_doubles(H);
    RopeRef p = {B, T, H, hd, rd, x_d, g_d, R_d, cos_t, sin_t};
    rope_ref(&p, ref);
    CHECK_ERR("partial rope forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    cpu_qk_norm_rope_backward(dx, dgain, R, x, gain, cos_t, sin_t, B, T, H, hd, rd, scratch);
    ref_numgrad(rope_loss, x_d, n, &p, FD_STEP, num_x);
    ref_numgrad(rope_loss, g_d, H, &p, FD_STEP, num_g);
    CHECK_ERR("partial rope dx vs FD", ref_rel_err(dx, num_x, n), GRADIENT_TOL);
    CHECK_ERR("partial rope dgain vs FD", ref_rel_err(dgain, num_g, H), GRADIENT_TOL);
    /* the tables are Rotary's: cos/sin(t * base^(-2i/rd)) for the rd/2 frequencies, written
     * again here in double (the reference above reads the tables it is given, so it cannot see
     * a wrong frequency). Measured: 2.9e-8 (rd 6) and 4.8e-8 (rd 16), fp32 inv_freq and angles at
     * t <= 5; the bound is 10 times that */
    CHECK_ERR("partial rope tables (rd 6)", table_err(cos_t, sin_t, T, rd, 10000.0), 5e-7);
    /* rope_dims = head_dim is the full RoPE: with tables of head_dim/2 frequencies, the double
     * reference rotates every dimension */
    float cos_f[6 * 8], sin_f[6 * 8], *full = ref_new_floats(n);
    cpu_rope_tables_init(cos_f, sin_f, T, hd, 10000.0f);
    CHECK_ERR("full rope tables (rd = hd 16)", table_err(cos_f, sin_f, T, hd, 10000.0), 5e-7);
    ref_poison(full, n);
    cpu_qk_norm_rope_forward(full, x, gain, cos_f, sin_f, B, T, H, hd, hd);
    RopeRef pf = {B, T, H, hd, hd, x_d, g_d, R_d, cos_f, sin_f};
    rope_ref(&pf, ref);
    CHECK_ERR("full rope forward", ref_rel_err(full, ref, n), FORWARD_TOL);
    free(x), free(gain), free(R), free(out), free(dx), free(scratch), free(full);
    free(x_d), free(g_d), free(R_d), free(ref), free(num_x), free(num_g);
}

/* ---- ln_scale (model.h's model_ln_scale; the backends multiply by it with cpu_scale) -------- */

/* The record's ln_scale: block l's RMSNorm outputs (attention's and the MLP's input) times
 * 1/sqrt(l+1); without it, 1 (x * 1 = x: the same bits as no scaling). */
static void test_ln_scale(void) {
    for (int on = 0; on <= 1; on++) {
        Config cfg;
        config_init(&cfg);
        CHECK(config_set(&cfg, "num_layers", "6", CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
        CHECK(config_set(&cfg, "ln_scale", on ? "1" : "0", CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
        ModelSpec s;
        CHECK(model_spec_init(&s, &cfg) == 0, "%s", ct_error());
        for (int l = 0; l < 6; l++) {
            const double want = on ? 1.0 / sqrt(l + 1.0) : 1.0; /* 1, 0.7071, 0.5774, 0.5, 0.4472, 0.4082 */
            const float got = model_ln_scale(&s, l);
            /* fp32 of the value, within the rounding of 1/sqrtf: 2^-23 relative */
            CHECK(fabs(got - want) <= 0x1p-23 * want, "ln_scale=%d, block %d: factor %.9g, expected 1/sqrt(%d) = %.9g",
                  on, l, (double)got, l + 1, want);
        }
        model_spec_free(&s);
        config_free(&cfg);
    }
    /* the op that applies it: x[i] * s, one fp32 product each */
    float x[5] = {1.5f, -2.25f, 0.1f, 3e-8f, -7.0f}, want[5];
    const float f = (float)(1.0 / sqrt(3.0));
    for (int i = 0; i < 5; i++) want[i] = x[i] * f;
    cpu_scale(x, f, 5);
    CHECK(memcmp(x, want, sizeof x) == 0, "cpu_scale is not x * s");
}

/* ---- late QAT's int6 fake quantization (cpu_fake_quant.c) ---------------------------------- */

/* Per row: s = max(rowmax|w| / 31, 1/31), w_q = clamp(round_half_even(w / s), -32, 31) * s, the
 * record's CastedLinear. Hand-computed rows whose maxima are well above 1 (31 and 62: s = 1 and
 * 2, where a wrong divisor or clamp changes the values) and one below (0.4: s at its floor 1/31). */
static void test_fake_quant_int6(void) {
    const float w[3][8] = {{31, 2.5f, 3.5f, -0.5f, -2.5f, 0.49f, -31, 1.5f},
                           {62, 5, 7, -3, 1, 0, -62, 0.999f},
                           {0.4f, -0.25f, 0.1f, 0, 0.3f, -0.05f, 0.2f, -0.4f}};
    const float q[3][8] = {{31, 2, 4, 0, -2, 0, -31, 2},        /* halves to even */
                           {31, 2, 4, -2, 0, 0, -31, 0},        /* w / 2 */
                           {12, -8, 3, 0, 9, -2, 6, -12}};      /* w * 31: 12.4, -7.75, 3.1, 9.3, -1.55, 6.2 */
    const float scale[3] = {1, 2, (float)(1.0 / 31.0)};
    float out[3][8];
    ref_poison(&out[0][0], 24);
    cpu_fake_quant_int6_rows(&out[0][0], &w[0][0], 3, 8);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 8; c++) {
            const double want = (double)q[r][c] * scale[r];
            /* out = w + (w_q - w) in fp32 (the straight-through form): w_q within an fp32 rounding */
            CHECK(fabs(out[r][c] - want) <= 1e-7 * fmax(1.0, fabs(want)), "row %d col %d: w %g -> %.9g, expected %g * %g",
                  r, c, (double)w[r][c], (double)out[r][c], (double)q[r][c], (double)scale[r]);
        }
}

/* ---- leaky relu^2 (mlp_negative_slope) ------------------------------------------------------ */

typedef struct {
    size_t n;
    double slope;
    const double *u, *R;
} LeakyRef;

static double leaky_value(double u, double s) { return u > 0 ? u * u : (s * u) * (s * u); }

static double leaky_loss(const double *unused, void *ctx) {
    (void)unused;
    const LeakyRef *p = ctx;
    double L = 0;
    for (size_t i = 0; i < p->n; i++) L += leaky_value(p->u[i], p->slope) * p->R[i];
    return L;
}

static void test_leaky_relu2(void) {
    uint64_t rng = 421;
    const int N = 7, C = 29;
    const size_t n = (size_t)N * C;
    const float slopes[] = {0.5f, 0.3f, 0.99f};
    float *u = ref_random_floats(n, -1, 1, &rng), *R = ref_random_floats(n, -1, 1, &rng);
    for (size_t i = 0; i < n; i++) /* off the kink, so the finite differences never straddle it */
        if (fabsf(u[i]) < 0.01f) u[i] = u[i] < 0 ? -0.02f : 0.02f;
    double *u_d = ref_doubles_of(u, n), *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n), *num = ref_new_doubles(n);
    for (size_t k = 0; k < sizeof slopes / sizeof slopes[0]; k++) {
        const float sl = slopes[k];
        float *h = ref_new_floats(n), *du = zeros(n);
        ref_poison(h, n);
        cpu_relu2_forward(h, u, N, C, sl);
        for (size_t i = 0; i < n; i++) ref[i] = leaky_value(u_d[i], sl);
        CHECK_ERR("leaky relu2 forward", ref_rel_err(h, ref, n), FORWARD_TOL);
        float *inplace = ref_copy_floats(u, n);
        cpu_relu2_forward(inplace, inplace, N, C, sl);
        CHECK(memcmp(inplace, h, n * sizeof(float)) == 0, "slope %g: in-place forward differs", (double)sl);
        cpu_relu2_backward(du, R, u, N, C, sl);
        LeakyRef p = {n, sl, u_d, R_d};
        ref_numgrad(leaky_loss, u_d, n, &p, FD_STEP, num);
        CHECK_ERR("leaky relu2 du vs FD", ref_rel_err(du, num, n), GRADIENT_TOL);
        float *once = ref_copy_floats(du, n);
        cpu_relu2_backward(du, R, u, N, C, sl);
        CHECK_ERR("leaky relu2 du accumulates", ref_doubling_err(once, du, n), ACCUMULATE_TOL);
        free(h), free(du), free(inplace), free(once);
    }
    /* slope 0.5, hand-computed: (-2 * 0.5)^2 = 1, d/du at -2: 2 * 0.25 * -2 * dh = -dh; u > 0 as relu^2 */
    const float su[3] = {-2.0f, 3.0f, -0.5f}, sdh[3] = {1.5f, 0.5f, 2.0f};
    float sh[3], sdu[3] = {0};
    cpu_relu2_forward(sh, su, 1, 3, 0.5f);
    cpu_relu2_backward(sdu, sdh, su, 1, 3, 0.5f);
    CHECK(sh[0] == 1.0f && sh[1] == 9.0f && sh[2] == 0.0625f, "leaky forward %g %g %g", (double)sh[0], (double)sh[1],
          (double)sh[2]);
    CHECK(sdu[0] == -1.5f && sdu[1] == 3.0f && sdu[2] == -0.5f, "leaky backward %g %g %g", (double)sdu[0],
          (double)sdu[1], (double)sdu[2]);
    free(u), free(R), free(u_d), free(R_d), free(ref), free(num);
}

/* ---- gated U-Net skip (skip_gates) ----------------------------------------------------------- */

typedef struct {
    int N, C;
    const double *x, *skip, *w, *gate, *R;
} SkipGateRef;

static void skip_gate_ref(const SkipGateRef *p, double *out) {
    for (int n = 0; n < p->N; n++)
        for (int c = 0; c < p->C; c++) {
            const size_t i = (size_t)n * p->C + c;
            const double s = 1.0 / (1.0 + exp(-p->gate[c]));
            out[i] = s * p->x[i] + (1 - s) * p->w[c] * p->skip[i];
        }
}

static double skip_gate_loss(const double *unused, void *ctx) {
    (void)unused;
    const SkipGateRef *p = ctx;
    const size_t n = (size_t)p->N * p->C;
    double *out = ref_new_doubles(n);
    skip_gate_ref(p, out);
    const double L = dot(out, p->R, n);
    free(out);
    return L;
}

static void test_skip_gate(void) {
    uint64_t rng = 431;
    const int N = 11, C = 21; /* two channel blocks, the second ragged */
    const size_t n = (size_t)N * C;
    float *x = ref_random_floats(n, -1, 1, &rng), *skip = ref_random_floats(n, -1, 1, &rng);
    float *w = ref_random_floats(C, 0.5, 1.5, &rng), *gate = ref_random_floats(C, -3, 3, &rng);
    float *R = ref_random_floats(n, -1, 1, &rng), *out = ref_new_floats(n);
    gate[0] = 0.0f; /* the init: sigmoid = 0.5, lerp's second branch */
    ref_poison(out, n);
    cpu_skip_gate_forward(out, x, skip, w, gate, N, C);
    double *x_d = ref_doubles_of(x, n), *s_d = ref_doubles_of(skip, n), *w_d = ref_doubles_of(w, C);
    double *g_d = ref_doubles_of(gate, C), *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n);
    SkipGateRef p = {N, C, x_d, s_d, w_d, g_d, R_d};
    skip_gate_ref(&p, ref);
    CHECK_ERR("skip gate forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    float *inplace = ref_copy_floats(x, n);
    cpu_skip_gate_forward(inplace, inplace, skip, w, gate, N, C);
    CHECK(memcmp(inplace, out, n * sizeof(float)) == 0, "in-place forward differs");

    float *dx = zeros(n), *dskip = zeros(n), *dw = zeros(C), *dgate = zeros(C);
    cpu_skip_gate_backward(dx, dskip, dw, dgate, R, x, skip, w, gate, N, C);
    double *num = ref_new_doubles(n);
    ref_numgrad(skip_gate_loss, x_d, n, &p, FD_STEP, num);
    CHECK_ERR("skip gate dx vs FD", ref_rel_err(dx, num, n), GRADIENT_TOL);
    ref_numgrad(skip_gate_loss, s_d, n, &p, FD_STEP, num);
    CHECK_ERR("skip gate dskip vs FD", ref_rel_err(dskip, num, n), GRADIENT_TOL);
    ref_numgrad(skip_gate_loss, w_d, C, &p, FD_STEP, num);
    CHECK_ERR("skip gate dw vs FD", ref_rel_err(dw, num, C), GRADIENT_TOL);
    ref_numgrad(skip_gate_loss, g_d, C, &p, FD_STEP, num);
    CHECK_ERR("skip gate dgate vs FD", ref_rel_err(dgate, num, C), GRADIENT_TOL);

    float *once[4] = {ref_copy_floats(dx, n), ref_copy_floats(dskip, n), ref_copy_floats(dw, C),
                      ref_copy_floats(dgate, C)};
    cpu_skip_gate_backward(dx, dskip, dw, dgate, R, x, skip, w, gate, N, C);
    CHECK_ERR("skip gate dx accumulates", ref_doubling_err(once[0], dx, n), ACCUMULATE_TOL);
    CHECK_ERR("skip gate dskip accumulates", ref_doubling_err(once[1], dskip, n), ACCUMULATE_TOL);
    CHECK_ERR("skip gate dw accumulates", ref_doubling_err(once[2], dw, C), ACCUMULATE_TOL);
    CHECK_ERR("skip gate dgate accumulates", ref_doubling_err(once[3], dgate, C), ACCUMULATE_TOL);

    /* torch.lerp's two branches and their exact ends: weight 0 gives start, 1 gives end */
    CHECK(cpu_lerp(3.0f, 7.0f, 0.0f) == 3.0f && cpu_lerp(3.0f, 7.0f, 1.0f) == 7.0f && cpu_lerp(3.0f, 7.0f, 0.5f) == 5.0f &&
              cpu_lerp(3.0f, 7.0f, 0.25f) == 4.0f,
          "lerp ends/branches: %g %g %g %g", (double)cpu_lerp(3.0f, 7.0f, 0.0f), (double)cpu_lerp(3.0f, 7.0f, 1.0f),
          (double)cpu_lerp(3.0f, 7.0f, 0.5f), (double)cpu_lerp(3.0f, 7.0f, 0.25f));

    /* the same bits with 1 and 3 threads */
    float *res[2][4];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k ? 3 : 1);
        res[k][0] = zeros(n), res[k][1] = zeros(n), res[k][2] = zeros(C), res[k][3] = zeros(C);
        cpu_skip_gate_backward(res[k][0], res[k][1], res[k][2], res[k][3], R, x, skip, w, gate, N, C);
    }
    omp_set_num_threads(2);
    for (int j = 0; j < 4; j++)
        CHECK(memcmp(res[0][j], res[1][j], (j < 2 ? n : (size_t)C) * sizeof(float)) == 0,
              "skip gate backward output %d differs between 1 and 3 threads", j);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(res[k][j]);
    for (int j = 0; j < 4; j++) free(once[j]);
    free(x), free(skip), free(w), free(gate), free(R), free(out), free(inplace);
    free(dx), free(dskip), free(dw), free(dgate);
    free(x_d), free(s_d), free(w_d), free(g_d), free(R_d), free(ref), free(num);
}

/* ---- thread count ---------------------------------------------------------------------------- */

static void test_thread_count_gives_same_bits(void) {
    uint64_t rng = 401;
    const int B = 4, T = 33, C = 40, H = 4, KV = 2, hd = 10;
    const size_t n = (size_t)B * T * C;
    float *x = ref_random_floats(n, -1, 1, &rng), *gate = ref_random_floats(C, -2, 2, &rng);
    float *R = ref_random_floats(n, -1, 1, &rng), *v = ref_random_floats((size_t)B * T * KV * hd, -1, 1, &rng);
    float *res[2][4];
    const int threads[2] = {1, 3};
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        res[k][0] = zeros(n), res[k][1] = zeros(C), res[k][2] = zeros(n), res[k][3] = zeros((size_t)B * T * KV * hd);
        cpu_smear_backward(res[k][0], res[k][1], R, x, gate, B, T, C);
        cpu_xsa_backward(res[k][2], res[k][3], R, x, v, B * T, H, KV, hd); /* x read as [BT, H*hd] */
    }
    omp_set_num_threads(2);
    CHECK(memcmp(res[0][0], res[1][0], n * sizeof(float)) == 0, "smear dx differs between 1 and 3 threads");
    CHECK(memcmp(res[0][1], res[1][1], C * sizeof(float)) == 0, "smear dgate differs between 1 and 3 threads");
    CHECK(memcmp(res[0][2], res[1][2], n * sizeof(float)) == 0, "xsa dy differs between 1 and 3 threads");
    CHECK(memcmp(res[0][3], res[1][3], (size_t)B * T * KV * hd * sizeof(float)) == 0,
          "xsa dv differs between 1 and 3 threads");
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(res[k][j]);
    free(x), free(gate), free(R), free(v);
}

/* ---- orthogonal initialisation (model.c) ----------------------------------------------------- */

static void test_orthogonal_init(void) {
    Config cfg;
    config_init(&cfg);
    const char *kv[][2] = {{"num_layers", "2"},  {"model_dim", "64"},   {"num_heads", "4"},       {"num_kv_heads", "1"},
                           {"mlp_mult", "6"},    {"ortho_init", "1"},   {"bigram_vocab_size", "16"},
                           {"bigram_dim", "64"}, {"vocab_size", "128"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        CHECK(config_set(&cfg, kv[i][0], kv[i][1], CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
    ModelSpec s;
    CHECK(model_spec_init(&s, &cfg) == 0, "%s", ct_error());
    float *w = ct_calloc(s.total_floats, sizeof(float), "weights");
    model_init_weights(&s, 1337, w);
    /* c_q [64,64] and mlp.fc [384,64] (two pieces of rows): orthonormal columns (W^T W = I); c_k [16,64] has a side
     * below 64 and keeps the uniform init; the zero-initialised ones stay zero */
    const char *ortho[] = {"blocks.0.attn.c_q.weight", "blocks.1.mlp.fc.weight"};
    for (int k = 0; k < 2; k++) {
        const ParamInfo *p = model_find_param(&s, ortho[k]);
        const float *m = w + p->offset;
        const int64_t rows = p->shape[0], cols = p->shape[1];
        double worst = 0;
        for (int64_t a = 0; a < cols; a++)
            for (int64_t b = 0; b < cols; b++) {
                double d = 0;
                for (int64_t r = 0; r < rows; r++) d += (double)m[r * cols + a] * m[r * cols + b];
                worst = fmax(worst, fabs(d - (a == b ? 1.0 : 0.0)));
            }
        CHECK(worst <= 1e-5, "%s: |W^T W - I| = %g", ortho[k], worst);
    }
    const ParamInfo *ck = model_find_param(&s, "blocks.0.attn.c_k.weight");
    double bound = 1.0 / sqrt(64.0), mx = 0;
    for (size_t i = 0; i < ck->count; i++) mx = fmax(mx, fabs(w[ck->offset + i]));
    CHECK(mx <= bound && mx > 0.5 * bound, "c_k keeps the uniform init: max |w| %g, bound %g", mx, bound);
    const char *zero[] = {"blocks.0.attn.proj.weight", "blocks.1.mlp.proj.weight", "bigram.embed.weight"};
    for (int k = 0; k < 3; k++) {
        const ParamInfo *p = model_find_param(&s, zero[k]);
        CHECK(p != NULL, "no %s", zero[k]);
        for (size_t i = 0; i < p->count; i++) CHECK(w[p->offset + i] == 0.0f, "%s[%zu] not zero", zero[k], i);
    }
    CHECK(model_find_param(&s, "bigram.proj.weight") == NULL, "bigram_dim == model_dim has no projection");
    CHECK(w[model_find_param(&s, "bigram.scale")->offset] == 0.05f, "bigram.scale init");
    /* the same seed gives the same bits, with any thread count (every rank must draw the same) */
    float *again = ct_calloc(s.total_floats, sizeof(float), "weights");
    omp_set_num_threads(1);
    model_init_weights(&s, 1337, again);
    omp_set_num_threads(2);
    CHECK(memcmp(w, again, s.total_floats * sizeof(float)) == 0, "init differs between 1 and 2 threads");
    free(w), free(again);
    model_spec_free(&s);
    config_free(&cfg);
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") != NULL;
    RUN(test_smear);
    RUN(test_bigram_hash);
    RUN(test_scalar_scaled_add);
    RUN(test_xsa);
    RUN(test_head_gate);
    RUN(test_partial_rope);
    RUN(test_ln_scale);
    RUN(test_fake_quant_int6);
    RUN(test_thread_count_gives_same_bits);
    RUN(test_orthogonal_init);
    RUN(test_leaky_relu2);
    RUN(test_skip_gate);
    TEST_EXIT();
}
