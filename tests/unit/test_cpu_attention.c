/* test_cpu_attention.c — reference tests of the CPU attention ops (kernels/cpu/cpu_attention.h):
 * RoPE tables, QK-norm + RoPE + gain, causal GQA attention (whole rows and within segments:
 * packed documents), and the two chained as in train_gpt.py's CausalSelfAttention.
 *
 * Method (tests/refcheck.h): forward vs a plain double reference, rel norm error <= FWD_TOL;
 * backward vs central finite differences (step FD_EPS) of the double reference of
 * L = sum(out * R), rel norm error <= BWD_TOL. The double FD is accurate to ~1e-9, so BWD_TOL
 * bounds the fp32 backward's own error (observed 6e-8..6e-7). Plus: accumulate semantics,
 * and bitwise equality of every output and gradient across OpenMP thread counts. */
#include "cpu_attention.h"
#include "harness.h"
#include "refcheck.h"

#include <float.h>
#include <omp.h>

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FD_EPS 1e-6
#define ROPE_BASE 10000.0f

/* Stop the calling case when a helper it called has failed. */
#define TRY(call)                                                                                 \
    do {                                                                                          \
        call;                                                                                     \
        if (harness_case_failed) return;                                                          \
    } while (0)


/* ---- double references ---------------------------------------------------------------------- */

typedef struct {
    int B, T, H, KV, hd;
    const double *cos_table, *sin_table; /* [T, hd/2], from the fp32 tables under test */
    const double *R;                     /* loss weights, shaped like the op's output */
    int has_gain;
    const int32_t *seg;                  /* attention's seg_start [B*T], or NULL (causal) */
} RefShape;

/* QK-norm + RoPE + gain on [B*T, H*hd]; gain may be NULL. */
static void ref_qk_norm_rope(double *out, const double *in, const double *gain, const RefShape *s) {
    int half = s->hd / 2;
    for (long n = 0; n < (long)s->B * s->T; n++) {
        const double *c = s->cos_table + (n % s->T) * half, *sn = s->sin_table + (n % s->T) * half;
        for (int h = 0; h < s->H; h++) {
            const double *x = in + (n * s->H + h) * s->hd;
            double *o = out + (n * s->H + h) * s->hd;
            double sum_sq = 0;
            for (int d = 0; d < s->hd; d++) sum_sq += x[d] * x[d];
            double r = 1.0 / sqrt(sum_sq / s->hd + FLT_EPSILON), g = gain ? gain[h] : 1.0;
            for (int i = 0; i < half; i++) {
                double u1 = x[i] * r, u2 = x[i + half] * r;
                o[i] = g * (u1 * c[i] + u2 * sn[i]);
                o[i + half] = g * (-u1 * sn[i] + u2 * c[i]);
            }
        }
    }
}

/* Causal GQA attention, straight from the definition: a block-diagonal causal mask when s->seg
 * is set (position t sees keys seg[b*T + t] .. t). */
static void ref_attention(double *y, const double *q, const double *k, const double *v,
                          const RefShape *s) {
    int group = s->H / s->KV;
    double scale = 1.0 / sqrt((double)s->hd), scores[s->T];
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int t = 0; t < s->T; t++) {
                const double *qt = q + (((size_t)b * s->T + t) * s->H + h) * s->hd;
                double max = -INFINITY, sum = 0;
                int j0 = s->seg ? s->seg[(size_t)b * s->T + t] : 0;
                for (int j = j0; j <= t; j++) {
                    const double *kj = k + (((size_t)b * s->T + j) * s->KV + h / group) * s->hd;
                    double dot = 0;
                    for (int d = 0; d < s->hd; d++) dot += qt[d] * kj[d];
                    scores[j] = dot * scale;
                    max = fmax(max, scores[j]);
                }
                for (int j = j0; j <= t; j++) sum += scores[j] = exp(scores[j] - max);
                double *yt = y + (((size_t)b * s->T + t) * s->H + h) * s->hd;
                for (int d = 0; d < s->hd; d++) yt[d] = 0;
                for (int j = j0; j <= t; j++) {
                    const double *vj = v + (((size_t)b * s->T + j) * s->KV + h / group) * s->hd;
                    for (int d = 0; d < s->hd; d++) yt[d] += scores[j] / sum * vj[d];
                }
            }
}

static double weighted_sum(const double *out, const double *R, size_t n) {
    double loss = 0;
    for (size_t i = 0; i < n; i++) loss += out[i] * R[i];
    return loss;
}

static size_t q_count(const RefShape *s) { return (size_t)s->B * s->T * s->H * s->hd; }
static size_t kv_count(const RefShape *s) { return (size_t)s->B * s->T * s->KV * s->hd; }

/* L(in, gain) for the QK-norm op; x = [in | gain]. */
static double qk_loss(const double *x, void *ctx) {
    const RefShape *s = ctx;
    double *out = ref_new_doubles(q_count(s));
    ref_qk_norm_rope(out, x, s->has_gain ? x + q_count(s) : NULL, s);
    double loss = weighted_sum(out, s->R, q_count(s));
    free(out);
    return loss;
}

/* L(q, k, v) for attention; x = [q | k | v]. */
static double attention_loss(const double *x, void *ctx) {
    const RefShape *s = ctx;
    double *y = ref_new_doubles(q_count(s));
    ref_attention(y, x, x + q_count(s), x + q_count(s) + kv_count(s), s);
    double loss = weighted_sum(y, s->R, q_count(s));
    free(y);
    return loss;
}

/* L(raw q, raw k, v, q_gain) through norm + RoPE + gain + attention; x = [q | k | v | gain]. */
static double block_loss(const double *x, void *ctx) {
    const RefShape *s = ctx;
    size_t nq = q_count(s), nkv = kv_count(s);
    double *q = ref_new_doubles(nq), *k = ref_new_doubles(nkv), *y = ref_new_doubles(nq);
    RefShape ks = *s;
    ks.H = s->KV;
    ref_qk_norm_rope(q, x, x + nq + 2 * nkv, s);
    ref_qk_norm_rope(k, x + nq, NULL, &ks);
    ref_attention(y, q, k, x + nq + nkv, s);
    double loss = weighted_sum(y, s->R, nq);
    free(q), free(k), free(y);
    return loss;
}

/* ---- RoPE tables ------------------------------------------------------------------------------ */

static void check_rope_tables(int T, int hd, float base) {
    int half = hd / 2;
    float *cos_t = ref_new_floats((size_t)T * half), *sin_t = ref_new_floats((size_t)T * half);
    ref_poison(cos_t, (size_t)T * half);
    ref_poison(sin_t, (size_t)T * half);
    cpu_rope_tables_init(cos_t, sin_t, T, hd, base);
    /* The tables use fp32 angles (as train_gpt.py does), so vs exact double math they may be off
     * by the angle's rounding: inv_freq carries ~(ln(base) + 3) ulp (exponent rounding
     * amplified by ln(base), powf, division), t * inv_freq one more; plus the final rounding. */
    const double u = ldexp(1.0, -24);
    double worst_ratio = 0, worst_abs = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double angle = t / pow((double)base, 2.0 * i / hd);
            double tol = angle * u * (log((double)base) + 4) + u;
            double err_c = fabs(cos_t[(size_t)t * half + i] - cos(angle));
            double err_s = fabs(sin_t[(size_t)t * half + i] - sin(angle));
            double err = fmax(err_c, err_s);
            CHECK(err <= tol, "t=%d i=%d: |table - double| = %.3g > %.3g", t, i, err, tol);
            worst_ratio = fmax(worst_ratio, err / tol);
            worst_abs = fmax(worst_abs, err);
        }
    for (int i = 0; i < half; i++) CHECK(cos_t[i] == 1.0f && sin_t[i] == 0.0f, "t=0 row not (1, 0)");
    printf("  rope T=%d hd=%d: max |table - double| = %.3g (%.2f of bound)\n", T, hd, worst_abs,
           worst_ratio);
    free(cos_t), free(sin_t);
}

static void test_rope_tables(void) {
    TRY(check_rope_tables(1024, 64, ROPE_BASE));
    TRY(check_rope_tables(13, 8, ROPE_BASE));
    TRY(check_rope_tables(300, 16, 500.0f));
}

/* ---- QK-norm + RoPE + gain ------------------------------------------------------------------- */

typedef struct {
    RefShape s;
    float *in, *gain, *cos_t, *sin_t, *R;
    double *cos_d, *sin_d, *R_d;
} QkCase;

/* Inputs uniform in [-in_scale, in_scale); a small scale makes FLT_EPSILON matter in the norm. */
static QkCase qk_case_new(int B, int T, int H, int hd, int with_gain, double in_scale,
                          uint64_t seed) {
    QkCase c = {0};
    uint64_t rng = seed;
    int half = hd / 2;
    size_t n = (size_t)B * T * H * hd;
    c.in = ref_random_floats(n, -in_scale, in_scale, &rng);
    c.gain = with_gain ? ref_random_floats((size_t)H, 0.5, 2.0, &rng) : NULL;
    c.R = ref_random_floats(n, -1, 1, &rng);
    c.cos_t = ref_new_floats((size_t)T * half);
    c.sin_t = ref_new_floats((size_t)T * half);
    cpu_rope_tables_init(c.cos_t, c.sin_t, T, hd, ROPE_BASE);
    c.cos_d = ref_doubles_of(c.cos_t, (size_t)T * half);
    c.sin_d = ref_doubles_of(c.sin_t, (size_t)T * half);
    c.R_d = ref_doubles_of(c.R, n);
    c.s = (RefShape){.B = B, .T = T, .H = H, .KV = H, .hd = hd, .cos_table = c.cos_d,
                     .sin_table = c.sin_d, .R = c.R_d, .has_gain = with_gain};
    return c;
}

static void qk_case_free(QkCase *c) {
    free(c->in), free(c->gain), free(c->R), free(c->cos_t), free(c->sin_t);
    free(c->cos_d), free(c->sin_d), free(c->R_d);
}

static void check_qk_forward(int B, int T, int H, int hd, int with_gain, double in_scale) {
    QkCase c = qk_case_new(B, T, H, hd, with_gain, in_scale, 0x1234 + T);
    size_t n = q_count(&c.s);
    float *out = ref_new_floats(n);
    ref_poison(out, n);
    cpu_qk_norm_rope_forward(out, c.in, c.gain, c.cos_t, c.sin_t, B, T, H, hd, hd);
    double *in_d = ref_doubles_of(c.in, n), *gain_d = with_gain ? ref_doubles_of(c.gain, H) : NULL;
    double *ref = ref_new_doubles(n);
    ref_qk_norm_rope(ref, in_d, gain_d, &c.s);
    double err = ref_rel_err(out, ref, n);
    printf("  qk_norm_rope fwd B=%d T=%d H=%d hd=%d gain=%d |x|<%g: rel err %.2e\n", B, T, H, hd,
           with_gain, in_scale, err);
    CHECK(err <= FWD_TOL, "forward rel err %.3g > %g", err, FWD_TOL);
    free(out), free(in_d), free(gain_d), free(ref);
    qk_case_free(&c);
}

static void test_qk_norm_rope_forward(void) {
    TRY(check_qk_forward(2, 7, 4, 8, 1, 2.0));
    TRY(check_qk_forward(2, 11, 4, 16, 1, 2.0));
    TRY(check_qk_forward(2, 9, 2, 16, 0, 2.0));
    TRY(check_qk_forward(2, 6, 4, 8, 1, 1e-3)); /* mean(x^2) ~ FLT_EPSILON: eps must match */
}

/* Gradients of the op (fp32) and of the double reference by finite differences. */
static void check_qk_backward(int B, int T, int H, int hd, int with_gain, double in_scale) {
    QkCase c = qk_case_new(B, T, H, hd, with_gain, in_scale, 0x5678 + T);
    size_t n = q_count(&c.s), n_x = n + (with_gain ? H : 0);
    float *din = ref_new_floats(n_x), *dgain = with_gain ? din + n : NULL;
    float *scratch = ref_new_floats(cpu_qk_norm_rope_backward_scratch_floats(B, T, H));
    memset(din, 0, n_x * sizeof(float));
    cpu_qk_norm_rope_backward(din, dgain, c.R, c.in, c.gain, c.cos_t, c.sin_t, B, T, H, hd, hd,
                              scratch);
    double *x = ref_new_doubles(n_x), *num = ref_new_doubles(n_x);
    ref_to_double(c.in, x, n);
    if (with_gain) ref_to_double(c.gain, x + n, H);
    ref_numgrad(qk_loss, x, n_x, &c.s, FD_EPS * fmin(1.0, in_scale), num);
    double err_in = ref_rel_err(din, num, n);
    double err_gain = with_gain ? ref_rel_err(dgain, num + n, H) : 0;
    printf("  qk_norm_rope bwd B=%d T=%d H=%d hd=%d gain=%d |x|<%g: rel err din %.2e dgain %.2e\n",
           B, T, H, hd, with_gain, in_scale, err_in, err_gain);
    CHECK(err_in <= BWD_TOL, "din rel err %.3g > %g", err_in, BWD_TOL);
    CHECK(err_gain <= BWD_TOL, "dgain rel err %.3g > %g", err_gain, BWD_TOL);
    free(din), free(scratch), free(x), free(num);
    qk_case_free(&c);
}

static void test_qk_norm_rope_backward(void) {
    TRY(check_qk_backward(2, 7, 4, 8, 1, 2.0));
    TRY(check_qk_backward(2, 13, 4, 16, 1, 2.0));
    TRY(check_qk_backward(2, 5, 2, 16, 0, 2.0));
    TRY(check_qk_backward(2, 6, 4, 8, 1, 1e-3));
}

static void test_qk_norm_rope_backward_accumulates(void) {
    QkCase c = qk_case_new(2, 9, 4, 16, 1, 2.0, 0x9abc);
    size_t n = q_count(&c.s);
    float *din = calloc(n + 4, sizeof(float)), *dgain = din + n;
    float *scratch = ref_new_floats(cpu_qk_norm_rope_backward_scratch_floats(2, 9, 4));
    cpu_qk_norm_rope_backward(din, dgain, c.R, c.in, c.gain, c.cos_t, c.sin_t, 2, 9, 4, 16, 16, scratch);
    double *twice = ref_new_doubles(n + 4);
    for (size_t i = 0; i < n + 4; i++) twice[i] = 2.0 * din[i];
    cpu_qk_norm_rope_backward(din, dgain, c.R, c.in, c.gain, c.cos_t, c.sin_t, 2, 9, 4, 16, 16, scratch);
    double err = ref_rel_err(din, twice, n + 4);
    CHECK(err <= 1e-6, "second backward does not double the grads: rel err %.3g", err);
    free(din), free(scratch), free(twice);
    qk_case_free(&c);
}

/* ---- causal GQA attention -------------------------------------------------------------------- */

typedef struct {
    RefShape s;
    float *q, *k, *v, *R;
    double *R_d;
} AttnCase;

static AttnCase attn_case_new(int B, int T, int H, int KV, int hd, uint64_t seed) {
    AttnCase c = {0};
    uint64_t rng = seed;
    c.s = (RefShape){.B = B, .T = T, .H = H, .KV = KV, .hd = hd};
    c.q = ref_random_floats(q_count(&c.s), -2, 2, &rng);
    c.k = ref_random_floats(kv_count(&c.s), -2, 2, &rng);
    c.v = ref_random_floats(kv_count(&c.s), -1, 1, &rng);
    c.R = ref_random_floats(q_count(&c.s), -1, 1, &rng);
    c.R_d = ref_doubles_of(c.R, q_count(&c.s));
    c.s.R = c.R_d;
    return c;
}

static void attn_case_free(AttnCase *c) { free(c->q), free(c->k), free(c->v), free(c->R), free(c->R_d); }

/* Forward into y (poisoned first); stats may be NULL. */
static void run_attention_forward(float *y, float *stats, const AttnCase *c) {
    const RefShape *s = &c->s;
    size_t n_scratch = cpu_attention_forward_scratch_floats(s->B, s->T, s->H, s->KV, s->hd,
                                                           omp_get_max_threads());
    float *scratch = ref_new_floats(n_scratch);
    ref_poison(y, q_count(s));
    if (stats) ref_poison(stats, cpu_attention_stats_floats(s->B, s->T, s->H));
    cpu_attention_forward(y, stats, c->q, c->k, c->v, s->seg, s->B, s->T, s->H, s->KV, s->hd, scratch,
                          n_scratch);
    free(scratch);
}

static void run_attention_backward(float *dq, float *dk, float *dv, const float *dy,
                                   const float *stats, const AttnCase *c) {
    const RefShape *s = &c->s;
    size_t n_scratch = cpu_attention_backward_scratch_floats(s->B, s->T, s->H, s->KV, s->hd,
                                                            omp_get_max_threads());
    float *scratch = ref_new_floats(n_scratch);
    ref_poison(scratch, n_scratch);
    cpu_attention_backward(dq, dk, dv, dy, c->q, c->k, c->v, s->seg, stats, s->B, s->T, s->H, s->KV,
                           s->hd, scratch, n_scratch);
    free(scratch);
}

static void check_attention_forward(int B, int T, int H, int KV, int hd) {
    AttnCase c = attn_case_new(B, T, H, KV, hd, 0x2468 + T * 7 + KV);
    size_t nq = q_count(&c.s), nkv = kv_count(&c.s);
    float *y = ref_new_floats(nq), *y_no_stats = ref_new_floats(nq);
    float *stats = ref_new_floats(cpu_attention_stats_floats(B, T, H));
    run_attention_forward(y, stats, &c);
    run_attention_forward(y_no_stats, NULL, &c);
    double *q = ref_doubles_of(c.q, nq), *k = ref_doubles_of(c.k, nkv), *v = ref_doubles_of(c.v, nkv);
    double *ref = ref_new_doubles(nq);
    ref_attention(ref, q, k, v, &c.s);
    double err = ref_rel_err(y, ref, nq);
    printf("  attention fwd B=%d T=%d H=%d KV=%d hd=%d: rel err %.2e\n", B, T, H, KV, hd, err);
    CHECK(err <= FWD_TOL, "forward rel err %.3g > %g", err, FWD_TOL);
    CHECK(memcmp(y, y_no_stats, nq * sizeof(float)) == 0,
          "forward-only (stats=NULL) output differs from the training forward");
    for (size_t i = 0; i < cpu_attention_stats_floats(B, T, H); i++)
        CHECK(isfinite(stats[i]), "stats[%zu] not written", i);
    free(y), free(y_no_stats), free(stats), free(q), free(k), free(v), free(ref);
    attn_case_free(&c);
}

static void test_attention_forward(void) {
    TRY(check_attention_forward(2, 5, 4, 2, 8));
    TRY(check_attention_forward(2, 9, 4, 1, 16));
    TRY(check_attention_forward(2, 13, 4, 4, 8));
    TRY(check_attention_forward(2, 11, 4, 2, 16));
    /* More than one row block (CPU_ATTENTION_ROW_BLOCK = 64), last block partial. */
    TRY(check_attention_forward(2, 150, 4, 2, 16));
}

/* The backward of case c (seg_start c->s.seg, or NULL) against finite differences. */
static void check_backward_of(AttnCase *c) {
    const RefShape *s = &c->s;
    size_t nq = q_count(s), nkv = kv_count(s), n_x = nq + 2 * nkv;
    float *y = ref_new_floats(nq), *stats = ref_new_floats(cpu_attention_stats_floats(s->B, s->T, s->H));
    float *grads = calloc(n_x, sizeof(float));
    run_attention_forward(y, stats, c);
    run_attention_backward(grads, grads + nq, grads + nq + nkv, c->R, stats, c);
    double *x = ref_new_doubles(n_x), *num = ref_new_doubles(n_x);
    ref_to_double(c->q, x, nq);
    ref_to_double(c->k, x + nq, nkv);
    ref_to_double(c->v, x + nq + nkv, nkv);
    ref_numgrad(attention_loss, x, n_x, &c->s, FD_EPS, num);
    double err_q = ref_rel_err(grads, num, nq);
    double err_k = ref_rel_err(grads + nq, num + nq, nkv);
    double err_v = ref_rel_err(grads + nq + nkv, num + nq + nkv, nkv);
    printf("  %sattention bwd B=%d T=%d H=%d KV=%d hd=%d: rel err dq %.2e dk %.2e dv %.2e\n",
           s->seg ? "segmented " : "", s->B, s->T, s->H, s->KV, s->hd, err_q, err_k, err_v);
    CHECK(err_q <= BWD_TOL, "dq rel err %.3g > %g", err_q, BWD_TOL);
    CHECK(err_k <= BWD_TOL, "dk rel err %.3g > %g", err_k, BWD_TOL);
    CHECK(err_v <= BWD_TOL, "dv rel err %.3g > %g", err_v, BWD_TOL);
    free(y), free(stats), free(grads), free(x), free(num);
}

static void check_attention_backward(int B, int T, int H, int KV, int hd) {
    AttnCase c = attn_case_new(B, T, H, KV, hd, 0x1357 + T * 7 + KV);
    check_backward_of(&c);
    attn_case_free(&c);
}

static void test_attention_backward(void) {
    TRY(check_attention_backward(2, 5, 4, 2, 8));
    TRY(check_attention_backward(2, 13, 4, 1, 8));
    TRY(check_attention_backward(2, 9, 4, 4, 16));
    TRY(check_attention_backward(2, 7, 4, 2, 16));
    /* Several row blocks: dK/dV rows collect contributions from more than one block. */
    TRY(check_attention_backward(1, 67, 2, 1, 4));
    TRY(check_attention_backward(1, 67, 2, 2, 4));
}

static void check_attention_accumulates(int KV) {
    AttnCase c = attn_case_new(2, 11, 4, KV, 8, 0xfeed + KV);
    size_t nq = q_count(&c.s), nkv = kv_count(&c.s), n_x = nq + 2 * nkv;
    float *y = ref_new_floats(nq), *stats = ref_new_floats(cpu_attention_stats_floats(2, 11, 4));
    float *grads = calloc(n_x, sizeof(float));
    run_attention_forward(y, stats, &c);
    run_attention_backward(grads, grads + nq, grads + nq + nkv, c.R, stats, &c);
    double *twice = ref_new_doubles(n_x);
    for (size_t i = 0; i < n_x; i++) twice[i] = 2.0 * grads[i];
    run_attention_backward(grads, grads + nq, grads + nq + nkv, c.R, stats, &c);
    double err = ref_rel_err(grads, twice, n_x);
    CHECK(err <= 1e-6, "KV=%d: second backward does not double the grads: rel err %.3g", KV, err);
    free(y), free(stats), free(grads), free(twice);
    attn_case_free(&c);
}

static void test_attention_backward_accumulates(void) {
    TRY(check_attention_accumulates(1));
    TRY(check_attention_accumulates(2));
    TRY(check_attention_accumulates(4));
}

/* ---- the ops chained as in CausalSelfAttention (between the linears) ------------------------- */

/* Everything one fp32 pass of the chain produces, for the composite and thread-count tests. */
typedef struct {
    float *q_rot, *k_rot, *y, *stats;
    float *grads; /* [dq | dk | dv | dgain] w.r.t. raw q, raw k, v, q_gain */
    size_t n_grads;
} ChainResult;

/* raw q, k, v, gain, R; forward and backward of norm/RoPE/gain + attention. Scratch is sized
 * for scratch_threads threads (less than the current count exercises the capped path). */
static ChainResult run_chain(const AttnCase *c, const float *gain, const float *cos_t,
                             const float *sin_t, int scratch_threads) {
    const RefShape *s = &c->s;
    size_t nq = q_count(s), nkv = kv_count(s);
    ChainResult r;
    r.n_grads = nq + 2 * nkv + s->H;
    r.q_rot = ref_new_floats(nq), r.k_rot = ref_new_floats(nkv), r.y = ref_new_floats(nq);
    r.stats = ref_new_floats(cpu_attention_stats_floats(s->B, s->T, s->H));
    r.grads = calloc(r.n_grads, sizeof(float));
    float *dq = r.grads, *dk = dq + nq, *dv = dk + nkv, *dgain = dv + nkv;
    float *dq_rot = calloc(nq, sizeof(float)), *dk_rot = calloc(nkv, sizeof(float));
    size_t n_fwd = cpu_attention_forward_scratch_floats(s->B, s->T, s->H, s->KV, s->hd, scratch_threads);
    size_t n_bwd = cpu_attention_backward_scratch_floats(s->B, s->T, s->H, s->KV, s->hd, scratch_threads);
    size_t n_qk = cpu_qk_norm_rope_backward_scratch_floats(s->B, s->T, s->H);
    float *scratch = ref_new_floats(n_bwd > n_fwd ? (n_bwd > n_qk ? n_bwd : n_qk) : n_fwd);
    ref_poison(r.q_rot, nq), ref_poison(r.k_rot, nkv), ref_poison(r.y, nq);

    cpu_qk_norm_rope_forward(r.q_rot, c->q, gain, cos_t, sin_t, s->B, s->T, s->H, s->hd, s->hd);
    cpu_qk_norm_rope_forward(r.k_rot, c->k, NULL, cos_t, sin_t, s->B, s->T, s->KV, s->hd, s->hd);
    cpu_attention_forward(r.y, r.stats, r.q_rot, r.k_rot, c->v, s->seg, s->B, s->T, s->H, s->KV, s->hd,
                          scratch, n_fwd);
    cpu_attention_backward(dq_rot, dk_rot, dv, c->R, r.q_rot, r.k_rot, c->v, s->seg, r.stats, s->B, s->T,
                           s->H, s->KV, s->hd, scratch, n_bwd);
    cpu_qk_norm_rope_backward(dq, dgain, dq_rot, c->q, gain, cos_t, sin_t, s->B, s->T, s->H,
                              s->hd, s->hd, scratch);
    cpu_qk_norm_rope_backward(dk, NULL, dk_rot, c->k, NULL, cos_t, sin_t, s->B, s->T, s->KV,
                              s->hd, s->hd, NULL);
    free(dq_rot), free(dk_rot), free(scratch);
    return r;
}

static void chain_free(ChainResult *r) { free(r->q_rot), free(r->k_rot), free(r->y), free(r->stats), free(r->grads); }

static void test_attention_chain_matches_reference(void) {
    const int B = 2, T = 7, H = 4, KV = 2, hd = 8, half = hd / 2;
    AttnCase c = attn_case_new(B, T, H, KV, hd, 0xc0ffee);
    uint64_t rng = 99;
    float *gain = ref_random_floats(H, 0.5, 2.0, &rng);
    float *cos_t = ref_new_floats(T * half), *sin_t = ref_new_floats(T * half);
    cpu_rope_tables_init(cos_t, sin_t, T, hd, ROPE_BASE);
    ChainResult r = run_chain(&c, gain, cos_t, sin_t, omp_get_max_threads());

    size_t nq = q_count(&c.s), nkv = kv_count(&c.s);
    double *cos_d = ref_doubles_of(cos_t, T * half), *sin_d = ref_doubles_of(sin_t, T * half);
    c.s.cos_table = cos_d, c.s.sin_table = sin_d, c.s.has_gain = 1;
    double *x = ref_new_doubles(r.n_grads), *num = ref_new_doubles(r.n_grads), *y_ref = ref_new_doubles(nq);
    ref_to_double(c.q, x, nq);
    ref_to_double(c.k, x + nq, nkv);
    ref_to_double(c.v, x + nq + nkv, nkv);
    ref_to_double(gain, x + nq + 2 * nkv, H);
    /* The chain's double forward, for the forward check (block_loss only returns the loss). */
    double *q_d = ref_new_doubles(nq), *k_d = ref_new_doubles(nkv);
    RefShape ks = c.s;
    ks.H = KV;
    ref_qk_norm_rope(q_d, x, x + nq + 2 * nkv, &c.s);
    ref_qk_norm_rope(k_d, x + nq, NULL, &ks);
    ref_attention(y_ref, q_d, k_d, x + nq + nkv, &c.s);
    double err_y = ref_rel_err(r.y, y_ref, nq);
    ref_numgrad(block_loss, x, r.n_grads, &c.s, FD_EPS, num);
    double err_g = ref_rel_err(r.grads, num, r.n_grads);
    double err_gain = ref_rel_err(r.grads + nq + 2 * nkv, num + nq + 2 * nkv, H);
    printf("  chain B=%d T=%d H=%d KV=%d hd=%d: rel err y %.2e, all grads %.2e, dq_gain %.2e\n",
           B, T, H, KV, hd, err_y, err_g, err_gain);
    CHECK(err_y <= FWD_TOL, "chain forward rel err %.3g > %g", err_y, FWD_TOL);
    CHECK(err_g <= BWD_TOL, "chain grads rel err %.3g > %g", err_g, BWD_TOL);
    CHECK(err_gain <= BWD_TOL, "chain dq_gain rel err %.3g > %g", err_gain, BWD_TOL);
    free(gain), free(cos_t), free(sin_t), free(cos_d), free(sin_d), free(x), free(num);
    free(y_ref), free(q_d), free(k_d);
    chain_free(&r);
    attn_case_free(&c);
}

/* ---- determinism across thread counts -------------------------------------------------------- */

static int chains_equal(const ChainResult *a, const ChainResult *b, const RefShape *s) {
    size_t nq = q_count(s), nkv = kv_count(s);
    return memcmp(a->q_rot, b->q_rot, nq * sizeof(float)) == 0 &&
           memcmp(a->k_rot, b->k_rot, nkv * sizeof(float)) == 0 &&
           memcmp(a->y, b->y, nq * sizeof(float)) == 0 &&
           memcmp(a->stats, b->stats, cpu_attention_stats_floats(s->B, s->T, s->H) * sizeof(float)) == 0 &&
           memcmp(a->grads, b->grads, a->n_grads * sizeof(float)) == 0;
}

static void check_thread_invariance(int KV) {
    const int B = 2, T = 150, H = 4, hd = 16, half = hd / 2;
    AttnCase c = attn_case_new(B, T, H, KV, hd, 0xdead + KV);
    uint64_t rng = 7;
    float *gain = ref_random_floats(H, 0.5, 2.0, &rng);
    float *cos_t = ref_new_floats(T * half), *sin_t = ref_new_floats(T * half);
    cpu_rope_tables_init(cos_t, sin_t, T, hd, ROPE_BASE);
    int saved_threads = omp_get_max_threads();

    omp_set_num_threads(1);
    ChainResult one = run_chain(&c, gain, cos_t, sin_t, 1);
    omp_set_num_threads(2);
    ChainResult two = run_chain(&c, gain, cos_t, sin_t, 2);
    omp_set_num_threads(3);
    ChainResult three = run_chain(&c, gain, cos_t, sin_t, 3);
    ChainResult capped = run_chain(&c, gain, cos_t, sin_t, 1); /* 3 threads, room for 1 */
    omp_set_num_threads(saved_threads);

    int same_two = chains_equal(&one, &two, &c.s), same_three = chains_equal(&one, &three, &c.s);
    int same_capped = chains_equal(&one, &capped, &c.s);
    chain_free(&one), chain_free(&two), chain_free(&three), chain_free(&capped);
    free(gain), free(cos_t), free(sin_t);
    attn_case_free(&c);
    CHECK(same_two, "KV=%d: 1 thread vs 2 threads differ", KV);
    CHECK(same_three, "KV=%d: 1 thread vs 3 threads differ", KV);
    CHECK(same_capped, "KV=%d: 1 thread vs 3 threads with scratch for 1 differ", KV);
}

static void test_thread_count_invariance(void) {
    TRY(check_thread_invariance(1));
    TRY(check_thread_invariance(2));
    TRY(check_thread_invariance(4));
}

/* ---- attention within segments (packed documents) ---------------------------------------------- */

/* seg_start [B*T] from each row's segment lengths (lens[b], n_lens[b] of them, summing to T). */
static int32_t *seg_from_lengths(int B, int T, const int *const *lens, const int *n_lens) {
    int32_t *seg = malloc((size_t)B * T * sizeof(int32_t));
    if (!seg) abort();
    for (int b = 0; b < B; b++) {
        int t = 0;
        for (int i = 0; i < n_lens[b]; i++)
            for (int j = 0; j < lens[b][i]; j++, t++) seg[(size_t)b * T + t] = t - j;
        if (t != T) abort(); /* a mistake in the test's table */
    }
    return seg;
}

/* T >= 194. Row 0: segments of 1, 63, 64, 65 and one long one (the rest); row 1: many short ones
 * (lengths 1, 2, 3, 5, 8 repeated), so query blocks straddle several segment starts. */
static int32_t *seg_test_rows(int T) {
    int row0[5] = {1, 63, 64, 65, T - 193}, row1[256], n1 = 0, left = T;
    const int cycle[5] = {1, 2, 3, 5, 8};
    for (int i = 0; left > 0; i++) {
        int len = cycle[i % 5] < left ? cycle[i % 5] : left;
        row1[n1++] = len;
        left -= len;
    }
    const int *lens[2] = {row0, row1}, n_lens[2] = {5, n1};
    return seg_from_lengths(2, T, lens, n_lens);
}

static void test_segmented_attention_forward(void) {
    /* GQA 4/2 and plain 4/4; T = 300 gives a long last segment of 107 in row 0. */
    for (int KV = 2; KV <= 4; KV += 2) {
        const int B = 2, T = 300, H = 4, hd = 16;
        AttnCase c = attn_case_new(B, T, H, KV, hd, 0x5e9 + KV);
        int32_t *seg = seg_test_rows(T);
        c.s.seg = seg;
        size_t nq = q_count(&c.s), nkv = kv_count(&c.s);
        float *y = ref_new_floats(nq), *y_no_stats = ref_new_floats(nq);
        float *stats = ref_new_floats(cpu_attention_stats_floats(B, T, H));
        run_attention_forward(y, stats, &c);
        run_attention_forward(y_no_stats, NULL, &c);
        double *q = ref_doubles_of(c.q, nq), *k = ref_doubles_of(c.k, nkv), *v = ref_doubles_of(c.v, nkv);
        double *ref = ref_new_doubles(nq), *ref_causal = ref_new_doubles(nq);
        ref_attention(ref, q, k, v, &c.s);
        RefShape causal = c.s;
        causal.seg = NULL;
        ref_attention(ref_causal, q, k, v, &causal);
        double err = ref_rel_err(y, ref, nq), err_causal = ref_rel_err(y, ref_causal, nq);
        printf("  segmented attention fwd B=%d T=%d H=%d KV=%d hd=%d: rel err %.2e (vs causal %.2e)\n", B, T,
               H, KV, hd, err, err_causal);
        CHECK(err <= FWD_TOL, "KV=%d: segmented forward rel err %.3g > %g", KV, err, FWD_TOL);
        /* the mask must matter: the whole-row causal answer is far from it */
        CHECK(err_causal > 1e-2, "KV=%d: segmented forward equals the causal one (rel diff %.3g)", KV,
              err_causal);
        CHECK(memcmp(y, y_no_stats, nq * sizeof(float)) == 0, "KV=%d: stats=NULL changes y", KV);
        free(y), free(y_no_stats), free(stats), free(q), free(k), free(v), free(ref), free(ref_causal);
        free(seg);
        attn_case_free(&c);
        if (harness_case_failed) return;
    }
}

static void check_segmented_backward(int KV) {
    AttnCase c = attn_case_new(2, 200, 2, KV, 4, 0xb5e9 + KV);
    int32_t *seg = seg_test_rows(200);
    c.s.seg = seg;
    check_backward_of(&c);
    free(seg);
    attn_case_free(&c);
}

static void test_segmented_attention_backward(void) {
    TRY(check_segmented_backward(1));
    TRY(check_segmented_backward(2));
}

/* seg_start all zero is one segment per row: the same bits as NULL, forward and backward, and
 * the same bits whatever the thread count with real segments. */
static void check_segment_bitwise(int KV) {
    const int B = 2, T = 200, H = 4, hd = 16, half = hd / 2;
    AttnCase c = attn_case_new(B, T, H, KV, hd, 0xabc + KV);
    uint64_t rng = 11;
    float *gain = ref_random_floats(H, 0.5, 2.0, &rng);
    float *cos_t = ref_new_floats(T * half), *sin_t = ref_new_floats(T * half);
    cpu_rope_tables_init(cos_t, sin_t, T, hd, ROPE_BASE);
    int32_t *zeros = calloc((size_t)B * T, sizeof(int32_t)), *seg = seg_test_rows(T);
    int saved_threads = omp_get_max_threads();

    ChainResult plain = run_chain(&c, gain, cos_t, sin_t, saved_threads);
    c.s.seg = zeros;
    ChainResult zero = run_chain(&c, gain, cos_t, sin_t, saved_threads);
    c.s.seg = seg;
    omp_set_num_threads(1);
    ChainResult one = run_chain(&c, gain, cos_t, sin_t, 1);
    omp_set_num_threads(3);
    ChainResult three = run_chain(&c, gain, cos_t, sin_t, 3);
    omp_set_num_threads(saved_threads);

    int same_zero = chains_equal(&plain, &zero, &c.s), same_threads = chains_equal(&one, &three, &c.s);
    int differs = !chains_equal(&plain, &one, &c.s);
    chain_free(&plain), chain_free(&zero), chain_free(&one), chain_free(&three);
    free(gain), free(cos_t), free(sin_t), free(zeros), free(seg);
    attn_case_free(&c);
    CHECK(same_zero, "KV=%d: seg_start all zero differs from NULL", KV);
    CHECK(same_threads, "KV=%d: segmented, 1 thread vs 3 threads differ", KV);
    CHECK(differs, "KV=%d: segments change nothing", KV);
}

static void test_segment_zero_equals_null(void) {
    TRY(check_segment_bitwise(1));
    TRY(check_segment_bitwise(2));
}

int main(void) {
    RUN(test_rope_tables);
    RUN(test_qk_norm_rope_forward);
    RUN(test_qk_norm_rope_backward);
    RUN(test_qk_norm_rope_backward_accumulates);
    RUN(test_attention_forward);
    RUN(test_attention_backward);
    RUN(test_attention_backward_accumulates);
    RUN(test_attention_chain_matches_reference);
    RUN(test_thread_count_invariance);
    RUN(test_segmented_attention_forward);
    RUN(test_segmented_attention_backward);
    RUN(test_segment_zero_equals_null);
    TEST_EXIT();
}
