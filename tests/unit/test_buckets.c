/* test_buckets.c — the orchestration of a GPU job's gradient reduction, on the CPU: the bucket
 * plan (dist_buckets.c) over the model's parameters, as the trainer makes it (trainer_bucket_plan) (coverage, contiguity, cap, reverse layer
 * order, launch order), which buckets start after which backward stage, and the claim the
 * overlap rests on: a parameter's gradient is final once the backward has reported its
 * model_grad_ready_stage (checked on the CPU backend, which runs the backward in the order the
 * CUDA backend does, by snapshotting every gradient at every reported stage). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "dist_buckets.h"
#include "harness.h"
#include "model.h"
#include "train_state.h"
#include "trainer.h"

static void make_config(Config *cfg, int layers, int tied, int dim) {
    config_init(cfg);
    char l[16], d[16];
    snprintf(l, sizeof l, "%d", layers);
    snprintf(d, sizeof d, "%d", dim);
    const char *kv[][2] = {{"vocab_size", "64"},   {"num_layers", l},          {"model_dim", d},
                           {"num_heads", "2"},     {"num_kv_heads", "1"},      {"mlp_mult", "2"},
                           {"train_seq_len", "8"}, {"train_batch_tokens", "32"}, {"grad_accum_slots", "2"},
                           {"tie_embeddings", tied ? "1" : "0"}, {"device", "cpu"}, {"threads", "1"}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (config_set(cfg, kv[i][0], kv[i][1], CT_SOURCE_COMMAND_LINE, "test") != 0) {
            ct_print_error();
            exit(1);
        }
}

/* Coverage, contiguity, cap, order, and which stage releases which bucket, for one model. */
static void check_plan(int layers, int tied, int dim, double cap_mb) {
    Config cfg;
    make_config(&cfg, layers, tied, dim);
    ModelSpec s;
    CHECK(model_spec_init(&s, &cfg) == 0, "%s", ct_error());
    int n = 0;
    for (int i = 0; i < s.num_params; i++) n += s.params[i].count > 0;
    size_t cap = (size_t)(cap_mb * 1048576.0 / sizeof(float));
    if (cap == 0) cap = 1;
    DistBucketPlan plan; /* the plan a GPU job's trainer makes */
    CHECK(trainer_bucket_plan(&s, cap_mb, &plan) == 0, "%s", ct_error());
    CHECK(plan.total_floats == s.total_floats, "plan covers %zu of %zu floats", plan.total_floats, s.total_floats);
    /* every float in exactly one bucket */
    unsigned char *owner = calloc(s.total_floats, 1);
    int segs = 0;
    for (int b = 0; b < plan.num_buckets; b++) {
        const DistBucket *k = &plan.buckets[b];
        CHECK(k->offset + k->count <= s.total_floats, "bucket %d past the end", b);
        for (size_t j = k->offset; j < k->offset + k->count; j++) {
            CHECK(!owner[j], "float %zu in two buckets", j);
            owner[j] = 1;
        }
        CHECK(k->count <= cap || k->num_segments == 1, "bucket %d: %zu floats > cap %zu with %d segments", b, k->count,
              cap, k->num_segments);
        if (b > 0) CHECK(plan.buckets[b - 1].ready_stage <= k->ready_stage, "bucket %d starts before bucket %d", b, b - 1);
        segs += k->num_segments;
        /* the bucket's stage is the latest of the parameters it holds, and no later */
        int latest = -1;
        for (int i = 0; i < s.num_params; i++) {
            const ParamInfo *p = &s.params[i];
            if (p->count && p->offset >= k->offset && p->offset < k->offset + k->count) {
                CHECK(p->offset + p->count <= k->offset + k->count, "%s split across buckets", p->name);
                int st = model_grad_ready_stage(&s, i);
                if (st > latest) latest = st;
            }
        }
        CHECK(latest == k->ready_stage, "bucket %d: ready at %d, its latest parameter at %d", b, k->ready_stage, latest);
        /* what waits for a later stage than its own is less than a quarter of the cap */
        size_t delayed = 0;
        for (int i = 0; i < s.num_params; i++) {
            const ParamInfo *p = &s.params[i];
            if (p->count && p->offset >= k->offset && p->offset < k->offset + k->count &&
                model_grad_ready_stage(&s, i) < k->ready_stage)
                delayed += p->count;
        }
        CHECK(delayed == 0 || delayed < cap / 4, "bucket %d: %zu floats wait for stage %d (cap %zu)", b, delayed,
              k->ready_stage, cap);
    }
    for (size_t j = 0; j < s.total_floats; j++) CHECK(owner[j], "float %zu in no bucket", j);
    CHECK(segs == n, "%d segments in buckets, %d parameters", segs, n);
    /* block buckets go down through the buffer: layer L-1 first */
    const ParamInfo *last_block = model_block_param(&s, layers - 1, BLK_C_Q), *first_block = model_block_param(&s, 0, BLK_C_Q);
    int b_last = -1, b_first = -1;
    for (int b = 0; b < plan.num_buckets; b++) {
        const DistBucket *k = &plan.buckets[b];
        if (last_block->offset >= k->offset && last_block->offset < k->offset + k->count) b_last = b;
        if (first_block->offset >= k->offset && first_block->offset < k->offset + k->count) b_first = b;
    }
    CHECK(b_last >= 0 && b_first >= 0 && b_last <= b_first, "block %d's bucket %d after block 0's %d", layers - 1, b_last,
          b_first);
    /* stage by stage: every bucket released exactly once, in plan order, and only once final */
    int next = 0;
    for (int st = 0; st < plan.num_stages; st++) {
        int first, count;
        dist_bucket_plan_ready(&plan, st, &first, &count);
        CHECK(count == 0 || first == next, "stage %d releases from %d, expected %d", st, first, next);
        for (int b = first; b < first + count; b++)
            CHECK(plan.buckets[b].ready_stage == st, "stage %d released bucket %d of stage %d", st, b,
                  plan.buckets[b].ready_stage);
        next += count;
    }
    CHECK(next == plan.num_buckets, "%d of %d buckets released", next, plan.num_buckets);
    int first, count;
    dist_bucket_plan_ready(&plan, plan.num_stages, &first, &count);
    CHECK(count == 0, "a stage past the end released %d buckets", count);
    free(owner);
    dist_bucket_plan_free(&plan);
    model_spec_free(&s);
    config_free(&cfg);
}

static void baseline_plan(void) {
    check_plan(9, 1, 512, 8.0); /* train_gpt.py's baseline, the default cap */
    if (harness_case_failed) return;
    check_plan(12, 0, 768, 4.0); /* untied head: a bucket at stage 0 */
}

static void tiny_caps(void) {
    check_plan(4, 1, 32, 4.0 / 1048576); /* a one-float cap: one bucket per parameter */
    if (harness_case_failed) return;
    check_plan(1, 0, 32, 1024); /* one block, no skips, one huge cap */
}

static void bad_segments(void) {
    DistGradSegment seg[3] = {{0, 10, 0}, {10, 5, 1}, {15, 5, 1}};
    DistBucketPlan plan;
    CHECK(dist_bucket_plan_build(&plan, seg, 3, 2, 100) == 0, "%s", ct_error());
    CHECK(plan.num_buckets == 2 && plan.buckets[1].offset == 10 && plan.buckets[1].count == 10,
          "%d buckets; the second at %zu, %zu floats", plan.num_buckets, plan.buckets[1].offset, plan.buckets[1].count);
    dist_bucket_plan_free(&plan);
    seg[1].offset = 8;
    CHECK(dist_bucket_plan_build(&plan, seg, 3, 2, 100) != 0 && strstr(ct_error(), "overlap"), "overlap: %s", ct_error());
    seg[1].offset = 10;
    seg[2].ready_stage = 2;
    CHECK(dist_bucket_plan_build(&plan, seg, 3, 2, 100) != 0 && strstr(ct_error(), "outside 0..1"), "stage: %s",
          ct_error());
    seg[2].ready_stage = 1;
    seg[0].count = 0;
    CHECK(dist_bucket_plan_build(&plan, seg, 3, 2, 100) != 0 && strstr(ct_error(), "empty"), "empty: %s", ct_error());
    seg[0].count = 10;
    CHECK(dist_bucket_plan_build(&plan, seg, 3, 2, 0) != 0 && strstr(ct_error(), "cap"), "cap: %s", ct_error());
}

/* ---- the readiness claim, on the CPU backend ---- */

typedef struct {
    const TrainState *st;
    float **snap; /* [num_stages]: the gradients when the stage was reported */
    int calls, num_stages, last_stage, out_of_order;
} Snapshots;

static int snapshot(void *ctx, int stage) {
    Snapshots *s = ctx;
    if (stage < 0 || stage >= s->num_stages || stage <= s->last_stage) s->out_of_order = 1;
    else memcpy(s->snap[stage], s->st->grads, s->st->spec.total_floats * sizeof(float));
    s->last_stage = stage;
    s->calls++;
    return 0;
}

static uint32_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*x >> 33);
}

static void ready_stages_hold(int layers, int tied, int gate) {
    Config cfg;
    make_config(&cfg, layers, tied, 16);
    if (gate) /* the sparse attention gate (its weights follow every block's), after XSA */
        CHECK(config_set(&cfg, "sparse_attn_gate_enabled", "1", CT_SOURCE_COMMAND_LINE, "test") == 0 &&
                  config_set(&cfg, "gate_window", "5", CT_SOURCE_COMMAND_LINE, "test") == 0 &&
                  config_set(&cfg, "xsa_last_n", "2", CT_SOURCE_COMMAND_LINE, "test") == 0,
              "%s", ct_error());
    if (gate == 2) /* the 1.0611 SmearGate: its two parameters' gradients come with tok_emb's */
        CHECK(config_set(&cfg, "smear_gate_enabled", "1", CT_SOURCE_COMMAND_LINE, "test") == 0 &&
                  config_set(&cfg, "gate_window", "5", CT_SOURCE_COMMAND_LINE, "test") == 0,
              "%s", ct_error());
    TrainState st;
    CHECK(train_state_init(&st, &cfg) == 0, "%s", ct_error());
    /* every weight nonzero, so that no gradient is zero by construction (the zero-initialised
     * projections would otherwise cut the attention's gradients) */
    uint64_t x = 12345;
    for (size_t j = 0; j < st.spec.total_floats; j++) st.params[j] = ((float)(lcg(&x) % 2001) - 1000.0f) / 4000.0f;
    Backend *b;
    CHECK(backend_create(&b, &cfg, &st) == 0, "%s", ct_error());
    const int S = model_grad_num_stages(&st.spec), N = b->micro_batch_seqs * b->seq_len;
    uint32_t *tok = malloc(sizeof *tok * (size_t)(N + 1));
    if (gate == 2) { /* its forward refuses to run without the data's BOS; token 3 is BOS here */
        for (int i = 0; i <= N; i++) tok[i] = lcg(&x) % 64;
        double unused;
        CHECK(b->bos_id == -1 && b->forward_backward(b, tok, 0.5f, &unused) != 0 && strstr(ct_error(), "bos_id"),
              "a SmearGate forward without a bos_id ran (bos_id %lld): %s", (long long)b->bos_id, ct_error());
        memset(st.grads, 0, st.spec.total_floats * sizeof(float));
        b->bos_id = 3;
    }
    Snapshots snaps = {.st = &st, .num_stages = S, .last_stage = -1};
    snaps.snap = calloc((size_t)S, sizeof *snaps.snap);
    for (int s = 0; s < S; s++) snaps.snap[s] = calloc(st.spec.total_floats, sizeof(float));
    double loss;
    /* two micro-batches, the hook on the second as in a step: gradients accumulate */
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i <= N; i++) tok[i] = lcg(&x) % 64;
        if (m == 1) {
            b->grad_ready = snapshot;
            b->grad_ready_ctx = &snaps;
        }
        CHECK(b->forward_backward(b, tok, 0.5f, &loss) == 0, "%s", ct_error());
    }
    b->grad_ready = NULL;
    CHECK(snaps.calls == S && !snaps.out_of_order, "%d stage reports for %d stages (out of order: %d)", snaps.calls, S,
          snaps.out_of_order);
    for (int i = 0; i < st.spec.num_params; i++) {
        const ParamInfo *p = &st.spec.params[i];
        if (!p->count) continue;
        const int r = model_grad_ready_stage(&st.spec, i);
        const float *fin = st.grads + p->offset;
        /* final at its stage ... */
        CHECK(memcmp(snaps.snap[r] + p->offset, fin, p->count * sizeof(float)) == 0,
              "%s: gradient changed after its stage %d", p->name, r);
        /* ... and not at the stage before (the stage is not merely late) */
        if (r > 0)
            CHECK(memcmp(snaps.snap[r - 1] + p->offset, fin, p->count * sizeof(float)) != 0,
                  "%s: already final at stage %d, its stage is %d", p->name, r - 1, r);
    }
    for (int s = 0; s < S; s++) free(snaps.snap[s]);
    free(snaps.snap);
    free(tok);
    b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
}

static void cpu_backward_stages_tied(void) { ready_stages_hold(4, 1, 0); }
static void cpu_backward_stages_untied_odd(void) { ready_stages_hold(5, 0, 0); }
static void cpu_backward_stages_attn_gate(void) { ready_stages_hold(4, 1, 1); }
static void cpu_backward_stages_smear_bos(void) { ready_stages_hold(4, 0, 2); }

int main(void) {
    RUN(baseline_plan);
    RUN(tiny_caps);
    RUN(bad_segments);
    RUN(cpu_backward_stages_tied);
    RUN(cpu_backward_stages_untied_odd);
    RUN(cpu_backward_stages_attn_gate);
    RUN(cpu_backward_stages_smear_bos);
    TEST_EXIT();
}
