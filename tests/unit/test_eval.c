/* test_eval.c — sliding-window validation (eval.c's val_evaluate_sliding, eval_stride > 0)
 * against brute force written here from the record's rule (train_gpt.py's eval_val_sliding):
 * windows start at 0, stride, 2*stride, ... below total_tokens = num_seqs * seq_len; window i has
 * min(seq_len, total - start) tokens and scores its positions [s, len), s = 0 for the first
 * window and max(len - stride, 0) for the others; loss, token and byte sums in double.
 *
 * - the windows and their scored ranges, for many shapes, and one worked out by hand;
 * - the sums through a stand-in backend whose per-position losses are exact multiples of 1/8
 *   (so every summation order gives the same bits: the sums must be equal, not close) that
 *   depend on the window's first token and the target, checked against the window-by-window sum
 *   for micro-batches of 1, 3 and more windows than there are;
 * - the CPU backend on a tiny model: the batched, zero-padded evaluation equals each window
 *   evaluated alone (in its slot of a micro-batch of the same shape, everything else random),
 *   and evaluate_positions' losses add up to evaluate's loss sum over the same sequences;
 * - errors: a stride outside (0, seq_len), a backend without per-position losses, an id outside
 *   the vocabulary. */
#include "harness.h"
#include "refcheck.h"

#include "backend.h"
#include "common.h"
#include "config.h"
#include "dist.h"
#include "infer.h"
#include "train_state.h"

/* ---- the rule, as the record writes it (a list of window starts, then each window's range) ---- */

typedef struct {
    int64_t start, len, from;
} Window;

/* Every window of the record's rule; returns how many (at most cap). */
static int64_t brute_windows(int64_t total, int64_t T, int64_t stride, Window *w, int64_t cap) {
    int64_t n = 0;
    for (int64_t ws = 0; ws < total; ws += stride) {
        int64_t end = ws + T < total ? ws + T : total;
        if (end - ws < 1) continue; /* the record's filter (never true for ws < total) */
        if (n == cap) return -1;
        int64_t len = end - ws;
        int64_t s = ws == 0 ? 0 : (len - stride > 0 ? len - stride : 0);
        w[n++] = (Window){ws, len, s};
    }
    return n;
}

static void windows_match_record_rule(void) {
    static Window w[4096];
    /* worked out by hand: T = 8, stride 3, 2 sequences (total 16, not a multiple of 3) */
    const Window hand[] = {{0, 8, 0}, {3, 8, 5}, {6, 8, 5}, {9, 7, 4}, {12, 4, 1}, {15, 1, 0}};
    CHECK(val_sliding_windows(16, 3) == 6, "%lld windows for total 16, stride 3",
          (long long)val_sliding_windows(16, 3));
    for (int i = 0; i < 6; i++) {
        int64_t s, l, f;
        val_sliding_window(i, 16, 8, 3, &s, &l, &f);
        CHECK(s == hand[i].start && l == hand[i].len && f == hand[i].from,
              "window %d: %lld %lld %lld, expected %lld %lld %lld", i, (long long)s, (long long)l, (long long)f,
              (long long)hand[i].start, (long long)hand[i].len, (long long)hand[i].from);
    }
    for (int64_t T = 2; T <= 40; T += 3)
        for (int64_t stride = 1; stride < T; stride++)
            for (int64_t seqs = 1; seqs <= 5; seqs++) {
                const int64_t total = seqs * T, n = brute_windows(total, T, stride, w, 4096);
                CHECK(n > 0 && val_sliding_windows(total, stride) == n,
                      "T %lld stride %lld seqs %lld: %lld windows, brute %lld", (long long)T, (long long)stride,
                      (long long)seqs, (long long)val_sliding_windows(total, stride), (long long)n);
                for (int64_t i = 0; i < n; i++) {
                    int64_t s, l, f;
                    val_sliding_window(i, total, T, stride, &s, &l, &f);
                    CHECK(s == w[i].start && l == w[i].len && f == w[i].from,
                          "T %lld stride %lld seqs %lld window %lld: (%lld,%lld,%lld) vs (%lld,%lld,%lld)",
                          (long long)T, (long long)stride, (long long)seqs, (long long)i, (long long)s, (long long)l,
                          (long long)f, (long long)w[i].start, (long long)w[i].len, (long long)w[i].from);
                }
            }
}

/* ---- a stand-in backend: exact per-position losses from the window's first token and the target ---- */

typedef struct {
    Backend base;
    int calls;
} MockBackend;

/* A multiple of 1/8 below 16: sums of a few thousand are exact in double, in any order. */
static float mock_loss(uint32_t first_input, uint32_t target) {
    return (float)((target * 37u + first_input * 11u) % 101u) * 0.125f + 0.125f;
}

static int mock_positions(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs, float *losses) {
    ((MockBackend *)b)->calls++;
    if (num_seqs < 1 || num_seqs > b->micro_batch_seqs) return ct_fail("mock: %d sequences", num_seqs);
    for (int i = 0; i < num_seqs; i++)
        for (int j = 0; j < b->seq_len; j++)
            losses[i * b->seq_len + j] = mock_loss(inputs[i * b->seq_len], targets[i * b->seq_len + j]);
    return 0;
}

/* Validation data of num_seqs sequences of T: random ids below vocab, tokenizer tables with
 * varied bytes, leading spaces and boundaries. */
static void make_val(ValData *v, int64_t num_seqs, int64_t T, int vocab, uint64_t seed) {
    memset(v, 0, sizeof *v);
    uint64_t rng = seed;
    const int64_t n = num_seqs * T + 1;
    v->num_seqs = num_seqs;
    v->tokens = malloc((size_t)n * sizeof(uint32_t));
    for (int64_t i = 0; i < n; i++) v->tokens[i] = (uint32_t)(ref_rand01(&rng) * vocab) % (uint32_t)vocab;
    v->base_bytes = malloc((size_t)vocab * sizeof(int16_t));
    v->has_leading_space = malloc((size_t)vocab);
    v->is_boundary_token = malloc((size_t)vocab);
    for (int t = 0; t < vocab; t++) {
        v->base_bytes[t] = (int16_t)(t % 4);
        v->has_leading_space[t] = (uint8_t)(t % 3 == 0);
        v->is_boundary_token[t] = (uint8_t)(t % 5 == 0);
    }
}

/* The brute-force sums: every window alone, its scored positions one by one. loss(window, j)
 * gives position j's loss of the window starting at `start`. */
static void brute_sums(const ValData *v, int64_t T, int64_t stride, float (*loss)(void *, const Window *, int64_t),
                       void *ctx, double *val_loss, double *val_bpb) {
    const int64_t total = v->num_seqs * T;
    Window *w = malloc((size_t)(total + 1) * sizeof *w);
    const int64_t n = brute_windows(total, T, stride, w, total + 1);
    double sum = 0, tokens = 0, bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        double window_sum = 0;
        for (int64_t j = w[i].from; j < w[i].len; j++) {
            const uint32_t prev = v->tokens[w[i].start + j], tgt = v->tokens[w[i].start + j + 1];
            window_sum += loss(ctx, &w[i], j);
            tokens += 1;
            bytes += v->base_bytes[tgt] + (v->has_leading_space[tgt] && !v->is_boundary_token[prev]);
        }
        sum += window_sum;
    }
    free(w);
    *val_loss = sum / tokens;
    *val_bpb = (*val_loss / log(2.0)) * (tokens / bytes);
}

static float mock_brute_loss(void *ctx, const Window *w, int64_t j) {
    const ValData *v = ctx;
    return mock_loss(v->tokens[w->start], v->tokens[w->start + j + 1]);
}

static DistInfo one_rank(void) {
    DistInfo d;
    memset(&d, 0, sizeof d);
    d.world_size = 1;
    return d;
}

static void sliding_sums_match_brute_force(void) {
    const DistInfo d = one_rank();
    const struct {
        int T, seqs, stride, batch;
    } cases[] = {
        {32, 5, 8, 3},  /* stride = T/4 */
        {32, 5, 7, 3},  /* total 160 not a multiple of the stride: a last window of 6 tokens */
        {32, 5, 31, 1}, /* one window per call */
        {32, 5, 1, 64}, /* every token a window; a micro-batch larger than the windows */
        {16, 1, 5, 2},  /* one sequence: windows shorter than T from the second on */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ValData v;
        make_val(&v, cases[c].seqs, cases[c].T, 200, 11 + c);
        MockBackend m;
        memset(&m, 0, sizeof m);
        m.base.name = "mock";
        m.base.seq_len = cases[c].T;
        m.base.micro_batch_seqs = cases[c].batch;
        m.base.evaluate_positions = mock_positions;
        double vl, vb, bl, bb;
        const int rc = val_evaluate_sliding(&m.base, &v, &d, cases[c].T, cases[c].stride, &vl, &vb);
        brute_sums(&v, cases[c].T, cases[c].stride, mock_brute_loss, &v, &bl, &bb);
        const int64_t windows = val_sliding_windows((int64_t)cases[c].seqs * cases[c].T, cases[c].stride);
        val_free(&v);
        CHECK(rc == 0, "case %zu: %s", c, ct_error());
        CHECK(m.calls == (int)((windows + cases[c].batch - 1) / cases[c].batch), "case %zu: %d calls for %lld windows",
              c, m.calls, (long long)windows);
        CHECK(vl == bl && vb == bb, "case %zu (T %d stride %d): val_loss %.17g val_bpb %.17g, brute force %.17g %.17g",
              c, cases[c].T, cases[c].stride, vl, vb, bl, bb);
    }
}

/* ---- the CPU backend on a tiny model ---- */

static int make_cpu(Config *cfg, TrainState *st, Backend **b, int T, int batch_seqs) {
    config_init(cfg);
    char t[16], tokens[32];
    snprintf(t, sizeof t, "%d", T);
    snprintf(tokens, sizeof tokens, "%d", T * batch_seqs);
    const char *kv[][2] = {
        {"vocab_size", "64"},  {"num_layers", "2"},      {"model_dim", "32"},       {"num_heads", "2"},
        {"num_kv_heads", "1"}, {"train_seq_len", t},     {"grad_accum_slots", "1"}, {"train_batch_tokens", tokens},
        {"threads", "1"},      {"train_files", "unused"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (config_set(cfg, kv[i][0], kv[i][1], CT_SOURCE_COMMAND_LINE, "test") != 0) return -1;
    if (train_state_init(st, cfg) != 0) return -1;
    /* the zero-initialised projections get values, so that every position's loss differs */
    uint64_t rng = 3;
    for (int i = 0; i < st->spec.num_params; i++)
        if (strstr(st->spec.params[i].name, "proj.weight"))
            ref_fill(st->params + st->spec.params[i].offset, st->spec.params[i].count, -0.1, 0.1, &rng);
    return backend_cpu_create(b, cfg, st);
}

typedef struct {
    Backend *b;
    const ValData *v;
    int64_t stride, windows; /* the sliding evaluation's stride and number of windows */
    uint32_t *inputs, *targets; /* one micro-batch: micro_batch_seqs x seq_len */
    float *losses;              /* the current window's micro-batch, evaluated for it */
    int64_t start;
    uint64_t rng;
} AloneCtx;

/* Position j of the window w, evaluated with nothing else of the evaluation's micro-batch: in a
 * micro-batch of the same shape (as many sequences, the window in the same slot: window i is slot
 * i mod B of the micro-batch of windows B floor(i / B) onwards), but every other sequence random
 * tokens and the tokens after the window random (not the zeros the evaluation pads with). The
 * same shape, because a product's rounding of a row may depend on the product's shape: with
 * OpenBLAS 0.3.21's SkylakeX and Cooperlake kernels a window evaluated as one sequence (16 rows)
 * and in its micro-batch of three (48) differ by 1.5e-9 relative in this test's val_loss, with
 * its Haswell kernels they did not; ctrain promises the same bits for the same shapes only
 * (kernels/cpu/cpu_gemm.c). */
static float alone_loss(void *ctx, const Window *w, int64_t j) {
    AloneCtx *a = ctx;
    const int T = a->b->seq_len, B = a->b->micro_batch_seqs;
    const int64_t i = w->start / a->stride, first = i - i % B;
    const int slot = (int)(i % B);
    if (a->start != w->start) {
        const int n = (int)(a->windows - first < B ? a->windows - first : B);
        for (int q = 0; q < n; q++)
            for (int k = 0; k < T; k++) {
                const size_t at = (size_t)q * T + (size_t)k;
                const int own = q == slot && k < w->len;
                a->inputs[at] = own ? a->v->tokens[w->start + k] : (uint32_t)(ref_rand01(&a->rng) * 64) % 64;
                a->targets[at] = own ? a->v->tokens[w->start + k + 1] : (uint32_t)(ref_rand01(&a->rng) * 64) % 64;
            }
        if (a->b->evaluate_positions(a->b, a->inputs, a->targets, n, a->losses) != 0) return NAN;
        a->start = w->start;
    }
    return a->losses[(size_t)slot * T + (size_t)j];
}

static void cpu_sliding_matches_windows_alone(void) {
    Config cfg;
    TrainState st;
    Backend *b = NULL;
    CHECK(make_cpu(&cfg, &st, &b, 16, 3) == 0, "cpu backend: %s", ct_error());
    const DistInfo d = one_rank();
    const int strides[] = {4, 5, 15}; /* T/4; 5 (total 64 not a multiple); T-1 */
    const size_t cap = (size_t)b->micro_batch_seqs * (size_t)b->seq_len;
    uint32_t *inputs = malloc(cap * sizeof *inputs), *targets = malloc(cap * sizeof *targets);
    float *losses = malloc(cap * sizeof *losses);
    for (int k = 0; k < 3; k++) {
        ValData v;
        make_val(&v, 4, 16, 64, 21 + (uint64_t)k);
        const int64_t windows = val_sliding_windows(v.num_seqs * b->seq_len, strides[k]);
        AloneCtx a = {b, &v, strides[k], windows, inputs, targets, losses, -1, 99};
        double vl, vb, bl, bb;
        const int rc = val_evaluate_sliding(b, &v, &d, 16, strides[k], &vl, &vb);
        brute_sums(&v, 16, strides[k], alone_loss, &a, &bl, &bb);
        val_free(&v);
        CHECK(rc == 0, "stride %d: %s", strides[k], ct_error());
        /* bitwise equal: a position's loss depends on its window's tokens alone, not on the other
         * sequences of its micro-batch nor on the tokens after it */
        CHECK(vl == bl && vb == bb, "stride %d: val_loss %.17g val_bpb %.17g, windows alone %.17g %.17g", strides[k],
              vl, vb, bl, bb);
        CHECK(isfinite(vl) && vl > 3.0 && vl < 5.0, "stride %d: val_loss %g, expected near ln(64)", strides[k], vl);
    }
    free(inputs);
    free(targets);
    free(losses);
    b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
}

/* evaluate_positions on the non-overlapping sequences: its losses add up to evaluate's sum. */
static void cpu_positions_add_up_to_evaluate(void) {
    Config cfg;
    TrainState st;
    Backend *b = NULL;
    CHECK(make_cpu(&cfg, &st, &b, 16, 3) == 0, "cpu backend: %s", ct_error());
    enum { SEQS = 5, T = 16 };
    ValData v;
    make_val(&v, SEQS, T, 64, 5);
    float losses[SEQS * T];
    double sum = 0, per_position = 0;
    int rc = b->evaluate(b, v.tokens, SEQS, &sum);
    if (rc == 0) rc = b->evaluate_positions(b, v.tokens, v.tokens + 1, SEQS, losses);
    for (int i = 0; i < SEQS * T; i++) per_position += losses[i];
    val_free(&v);
    b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
    CHECK(rc == 0, "%s", ct_error());
    CHECK(fabs(per_position - sum) <= 1e-12 * fabs(sum), "per-position sum %.17g, evaluate %.17g", per_position, sum);
}

static void sliding_errors(void) {
    const DistInfo d = one_rank();
    ValData v;
    make_val(&v, 2, 8, 200, 1);
    MockBackend m;
    memset(&m, 0, sizeof m);
    m.base.name = "mock";
    m.base.seq_len = 8;
    m.base.micro_batch_seqs = 2;
    double vl, vb;
    int rc0 = val_evaluate_sliding(&m.base, &v, &d, 8, 0, &vl, &vb);
    char e0[512];
    snprintf(e0, sizeof e0, "%s", ct_error());
    int rc8 = val_evaluate_sliding(&m.base, &v, &d, 8, 8, &vl, &vb);
    char e8[512];
    snprintf(e8, sizeof e8, "%s", ct_error());
    int rc_none = val_evaluate_sliding(&m.base, &v, &d, 8, 2, &vl, &vb);
    char e_none[512];
    snprintf(e_none, sizeof e_none, "%s", ct_error());
    val_free(&v);
    CHECK(rc0 != 0 && strstr(e0, "eval_stride = 0: expected 0 < eval_stride < train_seq_len = 8"), "stride 0: %s", e0);
    CHECK(rc8 != 0 && strstr(e8, "eval_stride = 8: expected 0 < eval_stride < train_seq_len = 8"), "stride 8: %s", e8);
    CHECK(rc_none != 0 && strstr(e_none, "the mock backend gives no per-position losses"), "no hook: %s", e_none);

    Config cfg;
    TrainState st;
    Backend *b = NULL;
    CHECK(make_cpu(&cfg, &st, &b, 16, 3) == 0, "cpu backend: %s", ct_error());
    uint32_t in[16] = {0}, tg[16] = {0};
    float losses[16];
    tg[7] = 64;
    const int rc = b->evaluate_positions(b, in, tg, 1, losses);
    b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
    CHECK(rc != 0 && strstr(ct_error(), "token id 64 at position 7 of the micro-batch is >= vocab_size 64"),
          "target 64: %s", ct_error());
}

int main(void) {
    RUN(windows_match_record_rule);
    RUN(sliding_sums_match_brute_force);
    RUN(cpu_sliding_matches_windows_alone);
    RUN(cpu_positions_add_up_to_evaluate);
    RUN(sliding_errors);
    TEST_EXIT();
}
