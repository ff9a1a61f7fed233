/* test_golf_gptq.c — the 1.0611 record's quantizers (src/infer/golf_gptq.h): GPTQ's output error
 * below round to nearest's at the same bits and scales on correlated inputs (a property that
 * holds only if the error feedback works), dead input columns, the same bits whatever the
 * thread count, the LQER factors reducing the error, the gates' int8 rule on a hand-computed
 * row, and everything against the independent PyTorch version tests/parity/gptq_ref.py (run
 * with /usr/bin/python3 from the repository root; skipped without it or without torch). Then the
 * gptq-brotli artifact (golf_gptq_artifact.c) of a small model with a tensor of every rule,
 * written and read back, and damaged; the Hessians file (golf_hessians.h) written and read back,
 * and wrong. tests/cli/test_golf_gptq.sh checks a trained model's artifact against PyTorch. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hdf5.h>

#include "common.h"
#include "golf_artifact.h"
#include "golf_gptq.h"
#include "golf_hessians.h"
#include "golf_quant.h"
#include "harness.h"
#include "test_spec.h"

/* ---- a problem: weights, correlated inputs and their Hessian ---- */

typedef struct {
    int rows, cols, n;
    float *w, *x, *h; /* w rows x cols, x n x cols, h cols x cols = x^T x / n */
} Problem;

static uint64_t rng_state;
static double uniform01(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng_state >> 11) + 0.5) / 9007199254740992.0;
}
static float gaussian(void) { return (float)(sqrt(-2 * log(uniform01())) * cos(6.283185307179586 * uniform01())); }

/* Inputs x = z m with m mixing each feature with its neighbours (correlated, like activations),
 * and a few features much larger than the rest (the columns GPTQ orders first). dead: that
 * column of x is 0 (an input that never fired); -1 for none. */
static Problem make_problem(int rows, int cols, int n, uint64_t seed, int dead) {
    Problem p = {rows, cols, n, malloc((size_t)rows * cols * 4), malloc((size_t)n * cols * 4),
                 malloc((size_t)cols * cols * 4)};
    rng_state = seed;
    for (size_t i = 0; i < (size_t)rows * cols; i++) p.w[i] = 0.02f * gaussian();
    float *z = malloc((size_t)n * cols * 4);
    for (size_t i = 0; i < (size_t)n * cols; i++) z[i] = gaussian();
    for (int t = 0; t < n; t++)
        for (int c = 0; c < cols; c++) {
            float v = z[(size_t)t * cols + c];
            for (int k = 1; k <= 3; k++) v += 0.6f * z[(size_t)t * cols + (c + k) % cols];
            if (c % 7 == 0) v *= 4;
            p.x[(size_t)t * cols + c] = c == dead ? 0 : v;
        }
    free(z);
    for (int i = 0; i < cols; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int t = 0; t < n; t++) s += (double)p.x[(size_t)t * cols + i] * p.x[(size_t)t * cols + j];
            p.h[(size_t)i * cols + j] = (float)(s / n);
        }
    return p;
}
static void free_problem(Problem *p) { free(p->w), free(p->x), free(p->h); }

/* sum over inputs of |(w - wq) x|^2 */
static double output_error(const Problem *p, const float *wq) {
    double total = 0;
    for (int t = 0; t < p->n; t++)
        for (int r = 0; r < p->rows; r++) {
            double y = 0;
            for (int c = 0; c < p->cols; c++)
                y += ((double)p->w[(size_t)r * p->cols + c] - wq[(size_t)r * p->cols + c]) * p->x[(size_t)t * p->cols + c];
            total += y * y;
        }
    return total;
}

static const GolfGptqSettings INT6 = {12.85f, 31, 128, 0.01f};

/* ---- cases ---- */

static void gptq_beats_round_nearest(void) {
    /* int6 and int7 (the embedding's), one block and several, with the record's clip sigmas */
    const struct { int clip_range, block; float sigmas; } runs[] = {{31, 128, 12.85f}, {31, 32, 11.5f}, {63, 32, 14.0f}};
    Problem p = make_problem(40, 96, 400, 7, -1);
    int8_t *q = malloc(40 * 96), *q_rtn = malloc(40 * 96);
    uint16_t scale[40];
    float *wq = malloc(40 * 96 * 4);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const GolfGptqSettings gs = {runs[i].sigmas, runs[i].clip_range, runs[i].block, 0.01f};
        CHECK(golf_gptq_quantize(q, scale, p.w, p.h, p.rows, p.cols, &gs, "w") == 0, "gptq: %s", ct_error());
        golf_dequantize_rows(wq, q, scale, p.rows, p.cols);
        const double e_gptq = output_error(&p, wq);
        golf_round_nearest(q_rtn, p.w, scale, p.rows, p.cols, gs.clip_range);
        golf_dequantize_rows(wq, q_rtn, scale, p.rows, p.cols);
        const double e_rtn = output_error(&p, wq);
        printf("  int%d, blocks of %d: output error GPTQ %.6g, round to nearest %.6g (ratio %.3f)\n",
               runs[i].clip_range == 31 ? 6 : 7, runs[i].block, e_gptq, e_rtn, e_gptq / e_rtn);
        CHECK(e_gptq < e_rtn, "GPTQ's output error %.9g is not below round to nearest's %.9g", e_gptq, e_rtn);
        int differ = 0;
        for (int k = 0; k < 40 * 96; k++) differ += q[k] != q_rtn[k];
        CHECK(differ > 0, "GPTQ gave round to nearest's levels everywhere (no error feedback?)");
    }
    free(q), free(q_rtn), free(wq);
    free_problem(&p);
}

static void gptq_dead_column(void) {
    Problem p = make_problem(16, 40, 200, 11, 5);
    int8_t q[16 * 40];
    uint16_t scale[16];
    CHECK(p.h[5 * 40 + 5] == 0, "the test's dead column has a Hessian diagonal of %g", p.h[5 * 40 + 5]);
    CHECK(golf_gptq_quantize(q, scale, p.w, p.h, p.rows, p.cols, &INT6, "w") == 0, "gptq: %s", ct_error());
    for (int r = 0; r < 16; r++) CHECK(q[r * 40 + 5] == 0, "row %d: the dead column's level is %d, expected 0", r, q[r * 40 + 5]);
    free_problem(&p);
}

static void gptq_refuses_bad_hessian(void) {
    Problem p = make_problem(8, 16, 50, 3, -1);
    int8_t q[8 * 16];
    uint16_t scale[8];
    p.h[3 * 16 + 4] = NAN;
    CHECK(golf_gptq_quantize(q, scale, p.w, p.h, 8, 16, &INT6, "blocks.0.mlp.fc.weight") != 0, "a NaN Hessian was taken");
    CHECK(strstr(ct_error(), "blocks.0.mlp.fc.weight") && strstr(ct_error(), "not finite"), "message: %s", ct_error());
    p.h[3 * 16 + 4] = p.h[4 * 16 + 3];
    for (int c = 0; c < 16; c++) p.h[2 * 16 + c] = p.h[c * 16 + 2] = c == 2 ? 1e-3f : 50.0f; /* not positive definite */
    CHECK(golf_gptq_quantize(q, scale, p.w, p.h, 8, 16, &INT6, "blocks.0.mlp.fc.weight") != 0, "an indefinite Hessian was taken");
    CHECK(strstr(ct_error(), "blocks.0.mlp.fc.weight") && strstr(ct_error(), "positive definite"), "message: %s",
          ct_error());
    free_problem(&p);
}

static void gptq_same_bits_any_threads(void) {
    Problem p = make_problem(300, 260, 300, 5, -1);
    int8_t *q1 = malloc(300 * 260), *q2 = malloc(300 * 260);
    uint16_t s1[300], s2[300];
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK(golf_gptq_quantize(q1, s1, p.w, p.h, p.rows, p.cols, &INT6, "w") == 0, "gptq: %s", ct_error());
    omp_set_num_threads(threads > 1 ? threads : 2);
    CHECK(golf_gptq_quantize(q2, s2, p.w, p.h, p.rows, p.cols, &INT6, "w") == 0, "gptq: %s", ct_error());
    omp_set_num_threads(threads);
    CHECK(!memcmp(q1, q2, 300 * 260) && !memcmp(s1, s2, sizeof s1), "1 and %d threads gave different levels",
          threads > 1 ? threads : 2);
    free(q1), free(q2);
    free_problem(&p);
}

static void lqer_reduces_error(void) {
    Problem p = make_problem(48, 64, 100, 13, -1);
    int8_t q[48 * 64], qa[48 * 4], qb[4 * 64];
    uint16_t scale[48], sa, sb[4];
    float wq[48 * 64], e[48 * 64], a[48 * 4], b[4 * 64];
    CHECK(golf_gptq_quantize(q, scale, p.w, p.h, 48, 64, &INT6, "w") == 0, "gptq: %s", ct_error());
    golf_dequantize_rows(wq, q, scale, 48, 64);
    for (int i = 0; i < 48 * 64; i++) e[i] = p.w[i] - wq[i];
    CHECK(golf_lqer_factors(a, b, e, 48, 64, 4) == 4, "lqer: %s", ct_error());
    golf_lqer_pack_asym(qa, &sa, qb, sb, a, 48 * 4, b, 4 * 64, 64);
    double e2 = 0, left = 0, left_packed = 0;
    for (int i = 0; i < 48; i++)
        for (int c = 0; c < 64; c++) {
            double ab = 0, abq = 0;
            for (int j = 0; j < 4; j++) {
                ab += (double)a[i * 4 + j] * b[j * 64 + c];
                abq += (double)qa[i * 4 + j] * golf_half_to_float(sa) * qb[j * 64 + c] * golf_half_to_float(sb[j]);
            }
            const double v = e[i * 64 + c];
            e2 += v * v, left += (v - ab) * (v - ab), left_packed += (v - abq) * (v - abq);
        }
    printf("  |E|^2 %.6g, after the rank-4 correction %.6g, with its int2/int4 factors %.6g\n", e2, left, left_packed);
    CHECK(left < e2 && left_packed < e2, "the correction does not reduce the error: %g, %g vs %g", left, left_packed, e2);
    for (int i = 0; i < 48 * 4; i++) CHECK(qa[i] >= -2 && qa[i] <= 1, "qa[%d] = %d outside [-2, 1]", i, qa[i]);
    for (int i = 0; i < 4 * 64; i++) CHECK(qb[i] >= -8 && qb[i] <= 7, "qb[%d] = %d outside [-8, 7]", i, qb[i]);
    free_problem(&p);
}

static void gate_int8_rows_by_hand(void) {
    /* row 0: amax 1.27 -> scale float16(0.01) = 1311 * 2^-17 = 0.010002136; levels 126.97,
     * -63.486, 31.743, 0 round to 127, -63, 32, 0. Row 1: zeros -> float16(1e-10 / 127) = 0 ->
     * levels 0. */
    const float w[8] = {1.27f, -0.635f, 0.3175f, 0, 0, 0, 0, 0};
    int8_t q[8];
    uint16_t s[2];
    golf_int8_rows_absmax(q, s, w, 2, 4);
    const int8_t want[8] = {127, -63, 32, 0, 0, 0, 0, 0};
    CHECK(s[0] == golf_half_from_float(0.01f) && s[1] == 0, "scales %04x %04x", s[0], s[1]);
    for (int i = 0; i < 8; i++) CHECK(q[i] == want[i], "q[%d] = %d, expected %d", i, q[i], want[i]);
}

/* ---- against tests/parity/gptq_ref.py ---- */

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f) ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}
static int read_file(const char *path, void *data, size_t bytes) {
    FILE *f = fopen(path, "rb");
    int ok = f && fread(data, 1, bytes, f) == bytes;
    if (f) fclose(f);
    return ok ? 0 : -1;
}

/* Elements of two int8 arrays that differ, and whether every difference is one level. */
static int count_differ(const int8_t *a, const int8_t *b, size_t n, int *worst) {
    int d = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            d++;
            if (abs(a[i] - b[i]) > *worst) *worst = abs(a[i] - b[i]);
        }
    return d;
}

static void matches_pytorch(void) {
    if (access("tests/parity/gptq_ref.py", R_OK) != 0) SKIP("run from the repository root (tests/parity/gptq_ref.py)");
    if (system("/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null") != 0) SKIP("/usr/bin/python3 without torch");
    enum { ROWS = 96, COLS = 320, RANK = 4, GROUP = 64 };
    Problem p = make_problem(ROWS, COLS, 640, 21, 9);
    const GolfGptqSettings gs = {13.0f, 31, 128, 0.01f};
    CHECK(write_file(test_path("w.f32"), p.w, sizeof(float) * ROWS * COLS) == 0 &&
              write_file(test_path("h.f32"), p.h, sizeof(float) * COLS * COLS) == 0,
          "writing the inputs in %s", test_tmpdir());
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/parity/gptq_ref.py %.1000s %d %d %.9g %d %d %.9g %d %d", test_tmpdir(),
             ROWS, COLS, gs.clip_sigmas, gs.clip_range, gs.block_size, gs.damp, RANK, GROUP);
    CHECK(system(cmd) == 0, "%.300s failed", cmd);
    int8_t *q = malloc(ROWS * COLS), *ref_q = malloc(ROWS * COLS), qa[ROWS * RANK], ref_qa[ROWS * RANK],
           qb[RANK * COLS], ref_qb[RANK * COLS];
    uint16_t scale[ROWS], ref_scale[ROWS], sa, ref_sa, sb[RANK * COLS / GROUP], ref_sb[RANK * COLS / GROUP];
    CHECK(read_file(test_path("ref_q.i8"), ref_q, ROWS * COLS) == 0 &&
              read_file(test_path("ref_scale.f16"), ref_scale, sizeof ref_scale) == 0 &&
              read_file(test_path("ref_qa.i8"), ref_qa, sizeof ref_qa) == 0 &&
              read_file(test_path("ref_sa.f16"), &ref_sa, 2) == 0 && read_file(test_path("ref_qb.i8"), ref_qb, sizeof ref_qb) == 0 &&
              read_file(test_path("ref_sb.f16"), ref_sb, sizeof ref_sb) == 0,
          "reading the reference's outputs in %s", test_tmpdir());
    CHECK(golf_gptq_quantize(q, scale, p.w, p.h, ROWS, COLS, &gs, "w") == 0, "gptq: %s", ct_error());
    CHECK(!memcmp(scale, ref_scale, sizeof scale), "the row scales differ from the reference's");
    /* float32 sums in another order (LAPACK's factorizations, the block products) can put a
     * value on the other side of a rounding boundary; the error feedback then carries that one
     * level to later columns of the row, so a few neighbours may move too. Bound: 0.2% of the
     * levels, each by one level. */
    int worst, differ = count_differ(q, ref_q, (size_t)ROWS * COLS, &worst);
    printf("  GPTQ levels differing from PyTorch's: %d of %d (largest difference %d)\n", differ, ROWS * COLS, worst);
    CHECK(differ <= ROWS * COLS / 500 && worst <= 1, "%d levels differ (bound %d), largest by %d", differ,
          ROWS * COLS / 500, worst);
    /* LQER from the reference's own levels, so that its inputs are the same */
    float *e = malloc(sizeof(float) * ROWS * COLS), a[ROWS * RANK], b[RANK * COLS];
    golf_dequantize_rows(e, ref_q, ref_scale, ROWS, COLS);
    for (int i = 0; i < ROWS * COLS; i++) e[i] = p.w[i] - e[i];
    CHECK(golf_lqer_factors(a, b, e, ROWS, COLS, RANK) == RANK, "lqer: %s", ct_error());
    golf_lqer_pack_asym(qa, &sa, qb, sb, a, ROWS * RANK, b, RANK * COLS, GROUP);
    /* another SVD algorithm (PyTorch's gesdd, LAPACK's gesvd here) agrees to about 1e-6 relative:
     * the same boundary argument, 1% of the factor levels */
    int worst_a, worst_b;
    const int da = count_differ(qa, ref_qa, sizeof qa, &worst_a), db = count_differ(qb, ref_qb, sizeof qb, &worst_b);
    int dsb = 0;
    for (int g = 0; g < RANK * COLS / GROUP; g++) dsb += sb[g] != ref_sb[g];
    printf("  LQER levels differing: a %d of %d, b %d of %d; scales differing: a %d, b %d of %d\n", da,
           ROWS * RANK, db, RANK * COLS, sa != ref_sa, dsb, RANK * COLS / GROUP);
    CHECK(da <= ROWS * RANK / 100 + 1 && db <= RANK * COLS / 100 + 1 && worst_a <= 1 && worst_b <= 1,
          "LQER levels differ: a %d (by %d), b %d (by %d)", da, worst_a, db, worst_b);
    CHECK(sa == ref_sa && dsb == 0, "LQER scales differ: a %04x vs %04x, %d of b's", sa, ref_sa, dsb);
    free(q), free(ref_q), free(e);
    free_problem(&p);
}

/* ---- the gptq-brotli artifact and the Hessians file ---- */

/* A model with a tensor of each rule: GPTQ'd matrices (the embedding at embed_bits; c_k sharing
 * c_q's input), one without a Hessian (rounded), an attention gate (int8 rows), a small vector
 * and the parallel lanes' rank-3 lambdas (float16). */
enum { NP = 9 };
static ParamInfo gparams[NP];
static ModelSpec gspec;
static float *gweights;

static void make_gptq_spec(int fc_cols) {
    const TestTensor t[NP] = {{"tok_emb.weight", 2, {300, 256}},
                              {"blocks.0.attn.c_q.weight", 2, {288, 256}},
                              {"blocks.0.attn.c_k.weight", 2, {288, 256}},
                              {"blocks.0.attn.attn_gate_w", 2, {4, 12}},
                              {"blocks.0.attn_scale", 1, {256}},
                              {"blocks.0.mlp.fc.weight", 2, {512, fc_cols}},
                              {"blocks.0.mlp.proj.weight", 2, {256, 512}},
                              {"bigram.embed.weight", 2, {300, 256}},
                              {"parallel_post_lambdas", 3, {3, 2, 2}}};
    test_spec_from_table(&gspec, gparams, t, NP);
    const size_t offset = gspec.total_floats;
    free(gweights);
    gweights = malloc(offset * sizeof(float));
    rng_state = 99;
    for (size_t i = 0; i < offset; i++) gweights[i] = 0.05f * gaussian();
}

/* Hessians of correlated inputs for every wanted parameter except the bigram table's. */
static void make_gptq_hessians(GolfHessians *h) {
    golf_hessians_alloc(&gspec, h);
    free(h->h[7]);
    h->h[7] = NULL;
    for (int i = 0; i < NP; i++) {
        int shares;
        if (!h->h[i] || (golf_hessian_wanted(&gspec, i, &shares) && shares >= 0)) continue;
        Problem p = make_problem(1, (int)gparams[i].shape[1], 300, 1000 + (uint64_t)i, -1);
        memcpy(h->h[i], p.h, (size_t)p.cols * p.cols * sizeof(float));
        free_problem(&p);
    }
    h->batches = 2, h->tokens = 600;
}

static GolfGptqOptions gptq_options(const GolfHessians *h) {
    return (GolfGptqOptions){6, 7, 12.85f, 11.5f, 13.0f, 14.0f, 1, 1, 4, 3, 4, 1, 64, (const float *const *)h->h};
}

static void gptq_artifact_round_trip(void) {
    if (golf_format_available(GOLF_GPTQ_BROTLI) != 0) SKIP("built without libbrotli");
    make_gptq_spec(256);
    GolfHessians h;
    make_gptq_hessians(&h);
    CHECK(h.h[2] == h.h[1], "c_k does not share c_q's Hessian");
    const GolfGptqOptions o = gptq_options(&h);
    const char *path = test_path("a.br"), *again = test_path("b.br");
    GolfStats g;
    CHECK(golf_write(&gspec, gweights, GOLF_GPTQ_BROTLI, &o, path, &g) == 0, "%s", ct_error());
    CHECK(g.num_tensors == NP && g.num_gptq == 6 && g.num_lqer == 3 && g.num_int8 == 1,
          "counts: %lld tensors, %lld GPTQ, %lld LQER, %lld int8", (long long)g.num_tensors, (long long)g.num_gptq,
          (long long)g.num_lqer, (long long)g.num_int8);
    float *back = malloc(gspec.total_floats * sizeof(float));
    CHECK(golf_read(&gspec, GOLF_GPTQ_BROTLI, path, back) == 0, "%s", ct_error());
    /* the gate: int8 rows; the vector: float16 */
    int8_t *q = malloc(512 * 256);
    uint16_t s[512];
    const ParamInfo *gate = &gparams[3], *vec = &gparams[4], *lanes = &gparams[8];
    golf_int8_rows_absmax(q, s, gweights + gate->offset, 4, 12);
    for (int i = 0; i < 48; i++)
        CHECK(back[gate->offset + i] == (float)q[i] * golf_half_to_float(s[i / 12]), "gate[%d]", i);
    for (int i = 0; i < 256; i++)
        CHECK(back[vec->offset + i] == golf_half_to_float(golf_half_from_float(gweights[vec->offset + i])), "vector[%d]", i);
    for (int i = 0; i < 12; i++)
        CHECK(back[lanes->offset + i] == golf_half_to_float(golf_half_from_float(gweights[lanes->offset + i])),
              "lambdas[%d]", i);
    /* every matrix: GPTQ's (or rounding's) levels exactly where it has no LQER; with LQER, closer to
     * the weights than those levels alone */
    int with_lqer = 0;
    for (int i = 0; i < NP; i++) {
        const ParamInfo *p = &gparams[i];
        if (p->ndim != 2 || p->count <= 65536) continue;
        const int rows = (int)p->shape[0], cols = (int)p->shape[1], bits = i == 0 ? 7 : 6;
        const float sig = i == 0 ? 14.0f : strstr(p->name, ".mlp.") ? 11.5f : strstr(p->name, ".attn.") ? 13.0f : 12.85f;
        const GolfGptqSettings gs = {sig, (1 << (bits - 1)) - 1, 128, 0.01f};
        if (h.h[i]) CHECK(golf_gptq_quantize(q, s, gweights + p->offset, h.h[i], rows, cols, &gs, p->name) == 0, "%s", ct_error());
        else golf_gptq_row_scales(s, gweights + p->offset, rows, cols, sig, gs.clip_range),
             golf_round_nearest(q, gweights + p->offset, s, rows, cols, gs.clip_range);
        double plain = 0, got = 0;
        int exact = 1;
        for (size_t k = 0; k < p->count; k++) {
            const float d = (float)q[k] * golf_half_to_float(s[k / (size_t)cols]), w = gweights[p->offset + k];
            exact = exact && back[p->offset + k] == d;
            plain += ((double)w - d) * ((double)w - d);
            got += ((double)w - back[p->offset + k]) * ((double)w - back[p->offset + k]);
        }
        if (exact) continue;
        with_lqer++;
        CHECK(got < plain, "%s: with its LQER correction |W - W'|^2 = %g, not below the levels' %g", p->name, got, plain);
    }
    CHECK(with_lqer == 3, "%d matrices read back with a correction, expected 3", with_lqer);
    /* the same weights and Hessians give the same bytes */
    CHECK(golf_write(&gspec, gweights, GOLF_GPTQ_BROTLI, &o, again, &g) == 0, "%s", ct_error());
    size_t la = 0, lb = 0;
    unsigned char *a = NULL, *b = NULL;
    FILE *fa = fopen(path, "rb"), *fb = fopen(again, "rb");
    if (fa && fb) {
        fseek(fa, 0, SEEK_END), fseek(fb, 0, SEEK_END);
        la = (size_t)ftell(fa), lb = (size_t)ftell(fb);
        rewind(fa), rewind(fb);
        a = malloc(la), b = malloc(lb);
        if (fread(a, 1, la, fa) != la || fread(b, 1, lb, fb) != lb) la = 0;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    CHECK(la > 0 && la == lb && !memcmp(a, b, la), "two artifacts of the same weights differ");
    free(a), free(b), free(q), free(back);
    golf_hessians_free(&h);
}

/* golf_read of path fails naming it and `want`; the weights are untouched. */
static int gptq_read_fails(const ModelSpec *spec, const char *path, const char *want) {
    float *back = malloc(spec->total_floats * sizeof(float));
    for (size_t i = 0; i < spec->total_floats; i++) back[i] = 7.0f;
    int failed = golf_read(spec, GOLF_GPTQ_BROTLI, path, back) != 0 && strstr(ct_error(), path) && strstr(ct_error(), want);
    for (size_t i = 0; i < spec->total_floats; i++) failed = failed && back[i] == 7.0f;
    free(back);
    return failed;
}

static void gptq_damaged_artifacts(void) {
    if (golf_format_available(GOLF_GPTQ_BROTLI) != 0) SKIP("built without libbrotli");
    make_gptq_spec(256);
    GolfHessians h;
    make_gptq_hessians(&h);
    const GolfGptqOptions o = gptq_options(&h);
    const char *good = test_path("good.br"), *bad = test_path("bad.br");
    GolfStats g;
    CHECK(golf_write(&gspec, gweights, GOLF_GPTQ_BROTLI, &o, good, &g) == 0, "%s", ct_error());
    FILE *f = fopen(good, "rb");
    unsigned char *b = malloc((size_t)g.file_bytes);
    CHECK(f && fread(b, 1, (size_t)g.file_bytes, f) == (size_t)g.file_bytes, "reading %s", good);
    if (f) fclose(f);
    const size_t len = (size_t)g.file_bytes;
    CHECK(write_file(bad, b, len / 2) == 0 && gptq_read_fails(&gspec, bad, "truncated"), "truncated: %s", ct_error());
    CHECK(write_file(bad, "hello", 5) == 0 && gptq_read_fails(&gspec, bad, "not a brotli stream"), "5 bytes: %s",
          ct_error());
    /* a flipped bit anywhere: the stream, the header or the tensors' checksum catches it */
    int caught = 0, tried = 0;
    for (size_t at = 1; at < len; at += len / 23 + 1, tried++) {
        b[at] ^= 0x10;
        caught += write_file(bad, b, len) == 0 && gptq_read_fails(&gspec, bad, bad);
        b[at] ^= 0x10;
    }
    CHECK(caught == tried, "%d of %d flipped bits read back without an error", tried - caught, tried);
    unsigned char *longer = malloc(len + 5);
    memcpy(longer, b, len);
    memcpy(longer + len, "extra", 5);
    CHECK(write_file(bad, longer, len + 5) == 0 && gptq_read_fails(&gspec, bad, "after its brotli stream"),
          "trailing bytes: %s", ct_error());
    free(longer);
    /* another model's: the same names, mlp.fc of another width */
    make_gptq_spec(320);
    CHECK(gptq_read_fails(&gspec, good, "not the gptq artifact of this model"), "other model: %s", ct_error());
    free(b);
    golf_hessians_free(&h);
}

static void hessians_file_round_trip(void) {
    make_gptq_spec(256);
    GolfHessians h, back;
    make_gptq_hessians(&h);
    const char *path = test_path("h.h5");
    h.step = 12;
    CHECK(golf_hessians_write(&gspec, &h, path) == 0, "%s", ct_error());
    CHECK(golf_hessians_read(&gspec, path, &back) == 0, "%s", ct_error());
    CHECK(back.batches == 2 && back.tokens == 600 && back.step == 12, "counts %lld %lld %lld", (long long)back.batches,
          (long long)back.tokens, (long long)back.step);
    for (int i = 0; i < NP; i++) {
        CHECK(!h.h[i] == !back.h[i], "%s: present %d, read back %d", gparams[i].name, !!h.h[i], !!back.h[i]);
        if (h.h[i] && back.h[i])
            CHECK(!memcmp(h.h[i], back.h[i], (size_t)(gparams[i].shape[1] * gparams[i].shape[1]) * sizeof(float)),
                  "%s differs", gparams[i].name);
    }
    golf_hessians_free(&back);
    /* another model's (mlp.fc of another width): an error naming the file and the dataset */
    make_gptq_spec(320);
    CHECK(golf_hessians_read(&gspec, path, &back) != 0 && strstr(ct_error(), path) &&
              strstr(ct_error(), "/hessians/blocks.0.mlp.fc.weight has shape [256, 256]"),
          "another model: %s", ct_error());
    /* not a Hessians file; no file */
    const char *other = test_path("other.h5");
    hid_t file = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(file);
    CHECK(golf_hessians_read(&gspec, other, &back) != 0 && strstr(ct_error(), "is not a Hessians file"), "empty: %s",
          ct_error());
    CHECK(golf_hessians_read(&gspec, test_path("missing.h5"), &back) != 0 && strstr(ct_error(), "missing.h5"),
          "missing: %s", ct_error());
    CHECK(golf_write(&gspec, gweights, GOLF_GPTQ_BROTLI, NULL, test_path("x.br"), &(GolfStats){0}) != 0 &&
              strstr(ct_error(), "needs the Hessians"),
          "no Hessians: %s", ct_error());
    golf_hessians_free(&h);
}

int main(void) {
    RUN(gptq_beats_round_nearest);
    RUN(gptq_dead_column);
    RUN(gptq_refuses_bad_hessian);
    RUN(gptq_same_bits_any_threads);
    RUN(lqer_reduces_error);
    RUN(gate_int8_rows_by_hand);
    RUN(matches_pytorch);
    RUN(gptq_artifact_round_trip);
    RUN(gptq_damaged_artifacts);
    RUN(hessians_file_round_trip);
    TEST_EXIT();
}
