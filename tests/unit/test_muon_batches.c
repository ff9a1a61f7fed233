/* test_muon_batches.c — the plan that batches Muon's Newton–Schulz on a device backend
 * (src/backend/muon_batches.c), on the CPU: every matrix in exactly one batch, a batch's
 * members of one shape up to transposition, in parameter order, at most MUON_BATCH_MAX of them,
 * a group's batches of near-equal sizes; the baseline's exact plan; the owner rank of each batch
 * (all batches on rank 0 alone, round robin on W ranks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "harness.h"
#include "model.h"
#include "muon_batches.h"

static int make_spec(ModelSpec *s, int layers, int dim, int heads, int kv_heads, int mlp_mult, int tied) {
    Config cfg;
    config_init(&cfg);
    char l[16], d[16], h[16], kv[16], mm[16];
    snprintf(l, sizeof l, "%d", layers);
    snprintf(d, sizeof d, "%d", dim);
    snprintf(h, sizeof h, "%d", heads);
    snprintf(kv, sizeof kv, "%d", kv_heads);
    snprintf(mm, sizeof mm, "%d", mlp_mult);
    const char *keys[][2] = {{"vocab_size", "1024"}, {"num_layers", l},    {"model_dim", d},
                             {"num_heads", h},       {"num_kv_heads", kv}, {"mlp_mult", mm},
                             {"tie_embeddings", tied ? "1" : "0"}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (config_set(&cfg, keys[i][0], keys[i][1], CT_SOURCE_COMMAND_LINE, "test") != 0) return -1;
    int rc = model_spec_init(s, &cfg);
    config_free(&cfg);
    return rc;
}

static int side_min(const ParamInfo *p) { return (int)(p->shape[0] < p->shape[1] ? p->shape[0] : p->shape[1]); }
static int side_max(const ParamInfo *p) { return (int)(p->shape[0] < p->shape[1] ? p->shape[1] : p->shape[0]); }

/* The plan's invariants for one model. */
static void check_invariants(int layers, int dim, int heads, int kv_heads, int mlp_mult, int tied) {
    ModelSpec s;
    CHECK(make_spec(&s, layers, dim, heads, kv_heads, mlp_mult, tied) == 0, "%s", ct_error());
    MuonBatchPlan plan;
    muon_batch_plan(&s, &plan);
    int matrices = 0;
    for (int i = 0; i < s.num_params; i++) matrices += s.params[i].group == PARAM_MATRIX;
    CHECK(plan.num_matrices == matrices, "%d matrices planned, the model has %d", plan.num_matrices, matrices);
    int *seen = calloc((size_t)s.num_params, sizeof(int));
    int next = 0;
    for (int j = 0; j < plan.num_batches; j++) {
        const MuonBatch *b = &plan.batches[j];
        CHECK(b->first == next, "batch %d starts at %d, expected %d (batches follow each other)", j, b->first, next);
        CHECK(b->count >= 1 && b->count <= MUON_BATCH_MAX, "batch %d has %d matrices", j, b->count);
        next += b->count;
        for (int k = 0; k < b->count; k++) {
            const int i = plan.params[b->first + k];
            CHECK(i >= 0 && i < s.num_params && s.params[i].group == PARAM_MATRIX, "batch %d holds parameter %d", j, i);
            CHECK(!seen[i]++, "parameter %s in two batches", s.params[i].name);
            CHECK(side_min(&s.params[i]) == b->m && side_max(&s.params[i]) == b->n, "%s (%lld x %lld) in a %d x %d batch",
                  s.params[i].name, (long long)s.params[i].shape[0], (long long)s.params[i].shape[1], b->m, b->n);
            if (k > 0) CHECK(i > plan.params[b->first + k - 1], "batch %d: members out of parameter order", j);
        }
    }
    CHECK(next == plan.num_matrices, "batches cover %d of %d matrices", next, plan.num_matrices);
    /* a group (one shape) is cut into runs whose sizes differ by at most one, and is cut only
     * when it has more than MUON_BATCH_MAX matrices */
    for (int j = 0; j < plan.num_batches; j++) {
        int group = 0, runs = 0, lo = MUON_BATCH_MAX, hi = 0;
        for (int k = 0; k < plan.num_batches; k++) {
            const MuonBatch *b = &plan.batches[k];
            if (b->m != plan.batches[j].m || b->n != plan.batches[j].n) continue;
            group += b->count, runs++;
            lo = b->count < lo ? b->count : lo;
            hi = b->count > hi ? b->count : hi;
        }
        CHECK(hi - lo <= 1, "%d x %d: batch sizes %d..%d", plan.batches[j].m, plan.batches[j].n, lo, hi);
        CHECK(runs == (group + MUON_BATCH_MAX - 1) / MUON_BATCH_MAX, "%d x %d: %d matrices in %d batches",
              plan.batches[j].m, plan.batches[j].n, group, runs);
    }
    free(seen);
    muon_batch_plan_free(&plan);
    CHECK(plan.num_batches == 0 && plan.params == NULL, "the freed plan is not empty");
}

static void invariants_over_models(void) {
    check_invariants(9, 512, 8, 4, 2, 1);
    check_invariants(12, 768, 12, 4, 4, 0);
    check_invariants(1, 64, 2, 2, 1, 1);   /* square MLP: c_q, proj, fc, mlp.proj all 64 x 64 */
    check_invariants(20, 128, 4, 1, 3, 0); /* 40 matrices of one shape in a group */
}

/* The baseline (9 x 512, heads 8/4, MLP 1024): three shapes of 18 matrices, 2 batches of 9
 * each; on 8 ranks, ranks 0..5 compute one batch each, 6 and 7 none. */
static void baseline_plan(void) {
    ModelSpec s;
    CHECK(make_spec(&s, 9, 512, 8, 4, 2, 1) == 0, "%s", ct_error());
    MuonBatchPlan plan;
    muon_batch_plan(&s, &plan);
    CHECK(plan.num_matrices == 54 && plan.num_batches == 6, "%d matrices in %d batches, expected 54 in 6",
          plan.num_matrices, plan.num_batches);
    const int shape[3][2] = {{512, 512}, {256, 512}, {512, 1024}};
    for (int j = 0; j < 6; j++) {
        const MuonBatch *b = &plan.batches[j];
        CHECK(b->count == 9 && b->m == shape[j / 2][0] && b->n == shape[j / 2][1], "batch %d: %d of %d x %d", j, b->count,
              b->m, b->n);
    }
    /* the first batch: c_q and proj of layers 0..3, then c_q of layer 4 */
    for (int k = 0; k < 9; k++)
        CHECK(&s.params[plan.params[k]] == model_block_param(&s, k / 2, k % 2 ? BLK_PROJ : BLK_C_Q),
              "batch 0 member %d is %s", k, s.params[plan.params[k]].name);
    int load[8] = {0};
    for (int j = 0; j < 6; j++) {
        CHECK(muon_batch_owner(j, 1) == 0 && muon_batch_owner(j, 0) == 0, "one rank must own every batch");
        load[muon_batch_owner(j, 8)]++;
    }
    for (int r = 0; r < 8; r++) CHECK(load[r] == (r < 6), "rank %d of 8 owns %d batches", r, load[r]);
    muon_batch_plan_free(&plan);
}

int main(void) {
    RUN(invariants_over_models);
    RUN(baseline_plan);
    TEST_EXIT();
}
