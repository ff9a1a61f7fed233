/* backend_cpu_optim.c — the CPU backend's optimizer step: optional global gradient clipping,
 * then Adam on tok_emb / lm_head / control tensors and Muon on the block matrices
 * (kernels/cpu/cpu_optim), each weight first decayed when its group has decoupled weight decay
 * (AdamW, the record's Muon), then the weight averages (EMA, SWA's sum: kernels/cpu/cpu_weights),
 * then zeroing the gradients for the next step. */
#include <stdlib.h>

#include "backend_cpu.h"
#include "common.h"
#include "cpu_ops.h"
#include "cpu_optim.h"
#include "cpu_weights.h"

void cpu_optimizer_init(CpuBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    size_t update = 0, scratch = 0;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        update += p->count;
        size_t need = cpu_muon_scratch_floats((int)p->shape[0], (int)p->shape[1]);
        if (need > scratch) scratch = need;
    }
    cb->muon_update_floats = update;
    cb->muon_updates = ct_calloc(update ? update : 1, sizeof(float), "muon updates");
    cb->muon_scratch = ct_calloc(scratch ? scratch : 1, sizeof(float), "muon scratch");
    /* one (pointer, count) per parameter, in state_dict order like torch's parameters() */
    cb->clip_grads = ct_calloc((size_t)s->num_params, sizeof(float *), "clip table");
    cb->clip_counts = ct_calloc((size_t)s->num_params, sizeof(size_t), "clip table");
    for (int i = 0; i < s->num_params; i++) {
        cb->clip_grads[i] = cb->base.state->grads + s->params[i].offset;
        cb->clip_counts[i] = s->params[i].count;
    }
}

void cpu_optimizer_free(CpuBackend *cb) {
    free(cb->muon_updates);
    free(cb->muon_scratch);
    free(cb->clip_grads);
    free(cb->clip_counts);
    free(cb->sgd_buf);
}

/* backend.h's sgd_step: torch.optim.SGD over every parameter, one flat buffer of momentum. */
int cpu_sgd_optimizer_step(Backend *b, double lr, double momentum, double clip, int restart, double *grad_norm) {
    CpuBackend *cb = (CpuBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    *grad_norm = clip > 0 ? cpu_clip_grad_norm(cb->clip_grads, cb->clip_counts, s->num_params, clip) : 0;
    if (momentum != 0 && !cb->sgd_buf) cb->sgd_buf = ct_calloc(s->total_floats, sizeof(float), "SGD momentum");
    cpu_sgd_step(st->params, cb->sgd_buf, st->grads, s->total_floats, lr, momentum, 0.0, restart);
    cpu_zero(st->grads, s->total_floats);
    return 0;
}

int cpu_optimizer_step(Backend *b, const StepHyper *h, double *grad_norm) {
    CpuBackend *cb = (CpuBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    *grad_norm = 0;
    if (h->grad_clip_norm > 0)
        *grad_norm = cpu_clip_grad_norm(cb->clip_grads, cb->clip_counts, s->num_params, h->grad_clip_norm);
    /* Muon: this rank's share of the Newton-Schulz work, then one sum combines the updates
     * (every other entry is +0, so the sum reproduces each update exactly) */
    int world = h->shard_world > 1 ? h->shard_world : 1;
    size_t at = 0;
    int matrix_index = 0;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        float *update = cb->muon_updates + at;
        if (matrix_index++ % world == h->shard_rank)
            cpu_muon_compute_update(st->grads + p->offset, st->momentum + p->offset, update, (int)p->shape[0],
                                (int)p->shape[1], h->muon_momentum, 1, h->muon_steps, h->muon_flags,
                                cb->muon_scratch);
        else { /* another rank computes this update; keep our momentum buffer in step with it */
            cpu_muon_momentum_advance(st->grads + p->offset, st->momentum + p->offset, p->count, h->muon_momentum);
            cpu_zero(update, p->count);
        }
        at += p->count;
    }
    if (world > 1 && h->combine(h->combine_ctx, cb->muon_updates, cb->muon_update_floats) != 0)
        return ct_fail_prefix("combining the Muon updates");
    st->adam_step++;
    at = 0;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        float *w = st->params + p->offset, *g = st->grads + p->offset;
        double decay_factor;
        if (backend_weight_decay_factor(p->group, h, &decay_factor)) cpu_weight_decay(w, p->count, decay_factor);
        switch (p->group) {
        case PARAM_MATRIX:
            cpu_muon_apply_update(w, cb->muon_updates + at, p->count, h->matrix_lr);
            at += p->count;
            break;
        case PARAM_TOKEN_EMBED:
        case PARAM_HEAD:
        case PARAM_SCALAR: {
            cpu_adam_step(w, g, st->exp_avg + p->offset, st->exp_avg_sq + p->offset, p->count,
                          backend_adam_lr(p->group, h), h->beta1, h->beta2, h->adam_eps, st->adam_step);
            break;
        }
        }
    }
    /* the averages see the weights after the whole step, as train_gpt.py's loop updates them
     * after every optimizer has stepped */
    if (h->ema_decay > 0) {
        if (!st->ema) return ct_fail("optimizer step: EMA asked for, but the training state has no EMA weights");
        cpu_ema_update(st->ema, st->params, s->total_floats, h->ema_decay);
    }
    if (h->swa_add) {
        if (!st->swa_sum) return ct_fail("optimizer step: SWA asked for, but the training state has no SWA sum");
        cpu_swa_add(st->swa_sum, st->params, s->total_floats, st->swa_count == 0);
        st->swa_count++;
    }
    cpu_zero(st->grads, s->total_floats);
    return 0;
}
