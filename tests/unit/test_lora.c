/* test_lora.c — test-time training's adapter layout and starting values (src/model/lora.c): the
 * layout of one document's adapters worked out by hand for a small looped, GQA model (entries
 * back to back, A then B, runs in plan order, kinds in q k v o mlp order, the head last; switched
 * off kinds absent), the shapes of every kind, the starting A's bound and spread, B zero, the same
 * values for the same seed and others for another, and the refusals that name the key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "harness.h"
#include "lora.h"
#include "model.h"

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

/* 3 layers of width 16, 4 heads over 2 KV heads (kv_dim 8), vocabulary 40, blocks 1-2 looped once
 * (the looped plan runs 0,1,2,1,2: 5 runs) */
static int small_spec(ModelSpec *s) {
    Config c;
    config_init(&c);
    c.vocab_size = 40, c.num_layers = 3, c.model_dim = 16, c.num_heads = 4, c.num_kv_heads = 2;
    c.num_loops = 1, c.loop_start = 1, c.loop_end = 2;
    const int rc = model_spec_init(s, &c);
    config_free(&c);
    return rc;
}

static void layout_by_hand(void) {
    ModelSpec s;
    CHECK(small_spec(&s) == 0, "%s", ct_error());
    LoraLayout L;
    CHECK(lora_layout_init(&L, &s, &s.plan_looped, 3, 6.0, 1, 1, 1) == 0, "%s", ct_error());
    CHECK(L.num_runs == 5 && L.rank == 3 && L.scale == 2.0f, "runs %d rank %d scale %g", L.num_runs, L.rank,
          (double)L.scale);
    /* per run: q 3*16 + 16*3 = 96, k 48 + 24 = 72, v 72, o 96, mlp 96: 432; head 48 + 120 = 168 */
    CHECK(L.slot_floats == 5 * 432 + 168, "slot_floats %zu", L.slot_floats);
    const LoraEntry *k2 = lora_entry(&L, 2, LORA_K), *mlp4 = lora_entry(&L, 4, LORA_MLP);
    CHECK(k2 && k2->in == 16 && k2->out == 8 && k2->a == 2 * 432 + 96 && k2->b == k2->a + 48, "k of run 2: a %zu b %zu",
          k2 ? k2->a : 0, k2 ? k2->b : 0);
    CHECK(mlp4 && mlp4->a == 4 * 432 + 336 && mlp4->out == 16, "mlp of run 4 at %zu", mlp4 ? mlp4->a : 0);
    CHECK(L.head.a == 5 * 432 && L.head.in == 16 && L.head.out == 40 && L.head.b == L.head.a + 48, "head at %zu",
          L.head.a);
    lora_layout_free(&L);
    /* k, o and mlp off: q and v only */
    CHECK(lora_layout_init(&L, &s, &s.plan_plain, 2, 2.0, 0, 0, 0) == 0, "%s", ct_error());
    CHECK(L.num_runs == 3 && !lora_entry(&L, 0, LORA_K) && !lora_entry(&L, 1, LORA_O) && !lora_entry(&L, 2, LORA_MLP),
          "an adapter switched off is there");
    const LoraEntry *v1 = lora_entry(&L, 1, LORA_V);
    /* per run: q 2*16 + 16*2 = 64, v 32 + 16 = 48 */
    CHECK(v1 && v1->a == 112 + 64 && L.slot_floats == 3 * 112 + 32 + 80, "v of run 1 at %zu, slot %zu",
          v1 ? v1->a : 0, L.slot_floats);
    lora_layout_free(&L);
    model_spec_free(&s);
}

static void starting_values(void) {
    ModelSpec s;
    CHECK(small_spec(&s) == 0, "%s", ct_error());
    LoraLayout L;
    CHECK(lora_layout_init(&L, &s, &s.plan_looped, 4, 144.0, 1, 1, 1) == 0, "%s", ct_error());
    float *a = ct_calloc(L.slot_floats, sizeof(float), "slot"), *b = ct_calloc(L.slot_floats, sizeof(float), "slot");
    float *c = ct_calloc(L.slot_floats, sizeof(float), "slot");
    for (size_t i = 0; i < L.slot_floats; i++) a[i] = NAN; /* every element must be written */
    lora_initial_slot(&L, 1337, a);
    lora_initial_slot(&L, 1337, b);
    lora_initial_slot(&L, 1338, c);
    CHECK(memcmp(a, b, L.slot_floats * sizeof(float)) == 0, "the same seed drew other values");
    CHECK(memcmp(a, c, L.slot_floats * sizeof(float)) != 0, "another seed drew the same values");
    /* every A within nn.Linear's bound 1/sqrt(in) = 0.25, mean near 0, variance near bound^2 / 3;
     * every B zero */
    double sum = 0, sq = 0;
    size_t n = 0;
    int bad_a = 0, bad_b = 0;
    for (int e = 0; e <= L.num_runs * LORA_KINDS; e++) {
        const LoraEntry *en = e == L.num_runs * LORA_KINDS ? &L.head : lora_entry(&L, e / LORA_KINDS, e % LORA_KINDS);
        for (size_t i = 0; i < (size_t)L.rank * en->in; i++) {
            const float x = a[en->a + i];
            bad_a += !(fabsf(x) <= 0.25f);
            sum += x, sq += (double)x * x, n++;
        }
        for (size_t i = 0; i < (size_t)en->out * L.rank; i++) bad_b += a[en->b + i] != 0.0f;
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    CHECK(bad_a == 0 && bad_b == 0, "%d A elements outside the bound, %d B elements not zero", bad_a, bad_b);
    CHECK(fabs(mean) < 0.01 && fabs(var - 0.0625 / 3) < 0.002, "A's mean %g, variance %g (expected ~0, %g)", mean,
          var, 0.0625 / 3);
    /* the same kind on two runs draws different values */
    CHECK(memcmp(a + lora_entry(&L, 0, LORA_Q)->a, a + lora_entry(&L, 1, LORA_Q)->a, 64 * sizeof(float)) != 0,
          "two runs' q adapters start equal");
    free(a), free(b), free(c);
    lora_layout_free(&L);
    model_spec_free(&s);
}

static void refusals_named(void) {
    ModelSpec s;
    CHECK(small_spec(&s) == 0, "%s", ct_error());
    LoraLayout L;
    ct_error_clear();
    CHECK(lora_layout_init(&L, &s, &s.plan_plain, 0, 1.0, 1, 1, 1) != 0 && error_has("ttt_lora_rank = 0"), "%s",
          ct_error());
    ct_error_clear();
    CHECK(lora_layout_init(&L, &s, &s.plan_plain, 17, 1.0, 1, 1, 1) != 0 && error_has("model_dim = 16"), "%s",
          ct_error());
    ct_error_clear();
    CHECK(lora_layout_init(&L, &s, &s.plan_plain, 2, -1.0, 1, 1, 1) != 0 && error_has("ttt_lora_alpha = -1"), "%s",
          ct_error());
    model_spec_free(&s);
}

int main(void) {
    RUN(layout_by_hand);
    RUN(starting_values);
    RUN(refusals_named);
    TEST_EXIT();
}
