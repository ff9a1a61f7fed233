/* backend_cpu_ttt.c — test-time training on the CPU backend (backend.h's ttt_* hooks; issue 57,
 * docs/model.md "Test-time training"). A chunk is a batch of documents' windows, one row each, run
 * at T = the longest window (the buffers are sized for ttt_eval_seq_len): the forward adds every
 * row's own adapters (backend_cpu_lora.c), the head's adapter joins the logits before the softcap
 * (cpu_logits_ce_lowrank_*), and only the scored positions' logits are made. Training rows then
 * take the gradient of their scored positions' mean loss back to their adapters only: the base
 * matrices' weight gradients are not made (cpu_block_linear_g; the head's: NULL dW; with
 * CT_TTT_BASE_GRADS=1 they are, into the scratch, for timing) and the other base gradients go to
 * a scratch copy, so the state's gradients are left as they were. Then AdamW or SGD per slot. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cpu.h"
#include "common.h"
#include "cpu_ops.h"
#include "cpu_optim.h"
#include "cpu_weights.h"

void cpu_ttt_free(CpuBackend *cb) {
    CpuTtt *t = cb->ttt;
    if (!t) return;
    free(t->w), free(t->g), free(t->m), free(t->v), free(t->steps);
    free(t->h), free(t->dh), free(t->dh_o), free(t->head_h), free(t->head_dh), free(t->junk_grads);
    free(t);
    cb->ttt = NULL;
}

int cpu_ttt_open(Backend *b, const LoraLayout *layout, int slots) {
    CpuBackend *cb = (CpuBackend *)b;
    if (slots < 1 || slots > cb->B)
        return ct_fail("test-time training: %d document slots asked for, but the backend was made for %d rows", slots,
                       cb->B);
    int base_grads;
    if (backend_ttt_base_grads(&base_grads) != 0) return ct_fail_prefix("test-time training");
    cpu_ttt_free(cb);
    CpuTtt *t = ct_calloc(1, sizeof *t, "TTT adapters");
    t->base_grads = base_grads;
    const size_t n = (size_t)slots * layout->slot_floats, rows = (size_t)cb->B * cb->T * layout->rank;
    t->layout = layout;
    t->slots = slots;
    t->w = ct_calloc(n, sizeof(float), "TTT adapters");
    t->g = ct_calloc(n, sizeof(float), "TTT adapter gradients");
    t->m = ct_calloc(n, sizeof(float), "TTT adapter moments");
    t->v = ct_calloc(n, sizeof(float), "TTT adapter moments");
    t->steps = ct_calloc((size_t)slots, sizeof(int64_t), "TTT adapter steps");
    t->h = ct_calloc((size_t)cb->T * layout->rank, sizeof(float), "TTT adapter scratch");
    t->dh = ct_calloc(rows, sizeof(float), "TTT adapter scratch");
    t->dh_o = ct_calloc(rows, sizeof(float), "TTT adapter scratch");
    t->head_h = ct_calloc(rows, sizeof(float), "TTT head adapter scratch");
    t->head_dh = ct_calloc(rows, sizeof(float), "TTT head adapter scratch");
    t->junk_grads = ct_calloc(b->state->spec.total_floats, sizeof(float), "TTT base gradient scratch");
    cb->ttt = t;
    return 0;
}

int cpu_ttt_reset(Backend *b, const float *initial, int slot0, int n) {
    CpuTtt *t = ((CpuBackend *)b)->ttt;
    if (!t) return ct_fail("test-time training: ttt_reset before ttt_open");
    if (slot0 < 0 || n < 0 || slot0 + n > t->slots)
        return ct_fail("test-time training: slots [%d, %d) outside the %d opened", slot0, slot0 + n, t->slots);
    const size_t per = t->layout->slot_floats;
    for (int i = slot0; i < slot0 + n; i++) {
        memcpy(t->w + (size_t)i * per, initial, per * sizeof(float));
        memset(t->g + (size_t)i * per, 0, per * sizeof(float));
        memset(t->m + (size_t)i * per, 0, per * sizeof(float));
        memset(t->v + (size_t)i * per, 0, per * sizeof(float));
        t->steps[i] = 0;
    }
    return 0;
}

int cpu_ttt_slot_to_host(Backend *b, int slot, float *out) {
    CpuTtt *t = ((CpuBackend *)b)->ttt;
    if (!t || slot < 0 || slot >= t->slots) return ct_fail("test-time training: no adapter slot %d", slot);
    memcpy(out, t->w + (size_t)slot * t->layout->slot_floats, t->layout->slot_floats * sizeof(float));
    return 0;
}

/* The head on every row's scored positions: losses written there (scoring, losses not NULL);
 * for training rows (train_now) dL/d(xf) into cb->dD1 and the head adapter's gradients. */
static int head_pass(CpuBackend *cb, const TttChunk *c, float *losses, int train_now) {
    const ModelSpec *s = &cb->base.state->spec;
    CpuTtt *t = cb->ttt;
    const int T = cb->T, D = s->dim, V = s->vocab, r = t->layout->rank;
    const float *W = cpu_output_matrix(cb);
    const LoraEntry *e = &t->layout->head;
    if (train_now) cpu_zero(cb->dD1, (size_t)c->rows * T * D);
    for (int i = 0; i < c->rows; i++) {
        const int from = c->from[i], len = c->len[i];
        const int train = train_now && c->train[i];
        if (len == 0 || (!losses && !train)) continue;
        const size_t at = (size_t)i * T + from;
        const float *x = cb->xf + at * D;
        const int32_t *tg = cb->targets + at;
        float *row_losses = losses ? losses + (size_t)i * c->ctx + from : cb->losses + at;
        double sum;
        if (!c->adapt) {
            if (cpu_logits_ce_forward(row_losses, &sum, x, W, tg, len, D, V, s->softcap, cb->logits_scratch,
                                      CPU_LOGITS_CHUNK) != 0)
                return -1;
            continue;
        }
        const float *w = t->w + (size_t)(c->slot0 + i) * t->layout->slot_floats;
        float *g = t->g + (size_t)(c->slot0 + i) * t->layout->slot_floats;
        float *h = t->head_h + at * r, *dh = t->head_dh + at * r;
        cpu_linear_forward(h, x, w + e->a, len, D, r); /* h = x A^T */
        CpuLogitsLowRank lr = {h, w + e->b, t->layout->scale, r, dh, g + e->b};
        if (!train) {
            if (cpu_logits_ce_lowrank_forward(row_losses, &sum, x, W, &lr, tg, len, D, V, s->softcap,
                                              cb->logits_scratch, CPU_LOGITS_CHUNK) != 0)
                return -1;
            continue;
        }
        cpu_zero(dh, (size_t)len * r);
        if (cpu_logits_ce_lowrank_forward_backward(cb->dD1 + at * D, NULL, &lr, row_losses, &sum, x, W, tg, len, D, V,
                                                   s->softcap, 1.0f, cb->logits_scratch, CPU_LOGITS_CHUNK) != 0)
            return -1;
        cpu_lora_backward_h(cb->dD1 + at * D, g + e->a, dh, x, w + e->a, len, D, r);
    }
    return 0;
}

/* The training rows' gradients back through the blocks to their adapters, with the base
 * gradients sent to the scratch copy; then one optimizer step per training slot. */
static int adapt_rows(CpuBackend *cb, const TttChunk *c, const TttOptimizer *o) {
    TrainState *st = cb->base.state;
    CpuTtt *t = cb->ttt;
    float *grads = st->grads, *dx = cb->dx, *dx_alt = cb->dx_alt;
    st->grads = t->junk_grads; /* never read: only the adapters learn */
    t->row_train = c->train;
    const int rc = cpu_backward_blocks(cb, c->rows, &dx, &dx_alt);
    t->row_train = NULL;
    st->grads = grads;
    if (rc != 0) return -1;
    const size_t per = t->layout->slot_floats;
    for (int i = 0; i < c->rows; i++) {
        if (!c->train[i]) continue;
        const int slot = c->slot0 + i;
        float *w = t->w + (size_t)slot * per, *g = t->g + (size_t)slot * per;
        const int64_t step = ++t->steps[slot];
        if (o->adam) {
            if (o->weight_decay > 0) cpu_weight_decay(w, per, 1.0 - o->lr * o->weight_decay);
            cpu_adam_step(w, g, t->m + (size_t)slot * per, t->v + (size_t)slot * per, per, o->lr, o->beta1, o->beta2,
                          o->eps, step);
        } else {
            cpu_sgd_step(w, t->m + (size_t)slot * per, g, per, o->lr, o->beta1, o->weight_decay, step == 1);
        }
        cpu_zero(g, per);
    }
    return 0;
}

static int run_chunk(CpuBackend *cb, const TttChunk *c, const TttOptimizer *o, float *losses) {
    const int T = cb->T;
    for (int i = 0; i < c->rows; i++)
        for (int j = 0; j < T; j++) {
            cb->ids[(size_t)i * T + j] = (int32_t)c->inputs[(size_t)i * T + j];
            cb->targets[(size_t)i * T + j] = (int32_t)c->targets[(size_t)i * T + j];
        }
    int trains = 0;
    for (int i = 0; i < c->rows && c->adapt; i++) trains |= c->train[i];
    const int steps = trains ? o->grad_steps : 0;
    /* step 0 trains on the scoring forward; later steps forward again with the new adapters */
    for (int step = 0; step == 0 || step < steps; step++) {
        if (cpu_forward_blocks(cb, c->rows) != 0) return -1;
        if (head_pass(cb, c, step == 0 ? losses : NULL, step < steps) != 0) return -1;
        if (step < steps && adapt_rows(cb, c, o) != 0) return -1;
    }
    return 0;
}

int cpu_ttt_chunk(Backend *b, const TttChunk *c, const TttOptimizer *o, float *losses) {
    CpuBackend *cb = (CpuBackend *)b;
    if (backend_check_ttt_chunk(c, cb->ttt ? cb->ttt->slots : 0, cb->T, cb->base.state->spec.vocab) != 0)
        return ct_fail_prefix("test-time training");
    /* the chunk's window length is the pass's T: rows of ctx tokens, buffers of capacity cb->T */
    const int capacity = cb->T;
    cb->T = c->ctx;
    cb->ttt->slot0 = c->slot0;
    cb->ttt->active = c->adapt;
    const int rc = run_chunk(cb, c, o, losses);
    cb->ttt->active = 0;
    cb->T = capacity;
    return rc;
}
