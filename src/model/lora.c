/* lora.c — test-time training's adapter layout and starting values (lora.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "lora.h"

/* The generator's streams for the adapters: far from the parameters' (0 .. num_params). */
enum { LORA_STREAM_BASE = 0x4C6F5241 };

static size_t place(LoraEntry *e, int in, int out, int rank, size_t at) {
    e->in = in, e->out = out;
    e->a = at;
    e->b = at + (size_t)rank * (size_t)in;
    return e->b + (size_t)out * (size_t)rank;
}

int lora_layout_init(LoraLayout *L, const ModelSpec *s, const BlockPlan *plan, int rank, double alpha, int k_on,
                     int o_on, int mlp_on) {
    memset(L, 0, sizeof *L);
    if (rank < 1 || rank > s->dim)
        return ct_fail("ttt_lora_rank = %d: expected in [1, model_dim = %d]", rank, s->dim);
    if (!(alpha >= 0)) return ct_fail("ttt_lora_alpha = %g: expected >= 0", alpha);
    L->rank = rank;
    L->scale = (float)(alpha / rank);
    L->num_runs = plan->num_runs;
    L->on[LORA_Q] = L->on[LORA_V] = 1;
    L->on[LORA_K] = k_on, L->on[LORA_O] = o_on, L->on[LORA_MLP] = mlp_on;
    L->runs = ct_calloc((size_t)plan->num_runs * LORA_KINDS, sizeof *L->runs, "LoRA layout");
    const int out_of[LORA_KINDS] = {s->dim, s->kv_dim, s->kv_dim, s->dim, s->dim};
    size_t at = 0;
    for (int run = 0; run < plan->num_runs; run++)
        for (int k = 0; k < LORA_KINDS; k++)
            if (L->on[k]) at = place(&L->runs[run * LORA_KINDS + k], s->dim, out_of[k], rank, at);
    L->slot_floats = place(&L->head, s->dim, s->vocab, rank, at);
    return 0;
}

void lora_layout_free(LoraLayout *L) {
    free(L->runs);
    memset(L, 0, sizeof *L);
}

const LoraEntry *lora_entry(const LoraLayout *L, int run, LoraKind kind) {
    const LoraEntry *e = &L->runs[run * LORA_KINDS + kind];
    return e->in ? e : NULL;
}

const char *lora_kind_name(LoraKind kind) {
    static const char *const names[LORA_KINDS] = {"q", "k", "v", "o", "mlp"};
    return names[kind];
}

static void init_entry(const LoraEntry *e, int rank, uint64_t seed, uint64_t stream, float *slot) {
    const double bound = 1.0 / sqrt((double)e->in);
    const size_t na = (size_t)rank * (size_t)e->in, nb = (size_t)e->out * (size_t)rank;
    for (size_t i = 0; i < na; i++) slot[e->a + i] = (float)(bound * (2.0 * model_uniform01(seed, stream, i) - 1.0));
    memset(slot + e->b, 0, nb * sizeof(float));
}

void lora_initial_slot(const LoraLayout *L, uint64_t seed, float *slot) {
    uint64_t stream = LORA_STREAM_BASE;
    for (int run = 0; run < L->num_runs; run++)
        for (int k = 0; k < LORA_KINDS; k++, stream++)
            if (L->on[k]) init_entry(&L->runs[run * LORA_KINDS + k], L->rank, seed, stream, slot);
    init_entry(&L->head, L->rank, seed, stream, slot);
}
