/* backend_cuda_optim.c — the CUDA backend's optimizer: the gradients handed to the host for a
 * host-side reduction (Backend.grad_buffer) and the step itself, Adam on the embeddings and
 * control tensors and Muon on the matrices in batches of one shape (muon_batches.h), sharded
 * across ranks when the step combines updates on the device; each weight decayed before its
 * update when its group has weight decay, the weight averages (EMA, SWA's sum) after the step,
 * all in the CPU backend's order (backend_cpu_optim.c). */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include "common.h"

#include "backend_cuda_private.h"

float *cuda_grad_buffer(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    if (!cb->grads_on_host) {
        if (cuda_check(cudaMemcpyAsync(b->state->grads, cb->d_grads, b->state->spec.total_floats * sizeof(float),
                                       cudaMemcpyDeviceToHost, cb->stream),
                       "cuda: gradient download") != 0 ||
            sync_stream(cb, "cuda: gradient download") != 0)
            return NULL;
        cb->grads_on_host = 1;
    }
    return b->state->grads;
}

/* The flat range that holds every Muon matrix (the blocks' parameters), for the one sum that
 * combines sharded updates; the control tensors inside it are zeroed before that sum. */
static void matrix_range(const ModelSpec *s, size_t *begin, size_t *end) {
    *begin = (size_t)-1;
    *end = 0;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        if (p->offset < *begin) *begin = p->offset;
        if (p->offset + p->count > *end) *end = p->offset + p->count;
    }
}

/* Muon on batch j of the plan: the updates (in the gradients' place) on the rank that owns the
 * batch, the momentum alone (and +0 updates) on the others. */
static int muon_batch_step(CudaBackend *cb, int j, const StepHyper *h, int world) {
    const ModelSpec *s = &cb->base.state->spec;
    const MuonBatch *k = &cb->muon_plan.batches[j];
    const int *members = cb->muon_plan.params + k->first;
    if (muon_batch_owner(j, world) != h->shard_rank % world) {
        for (int i = 0; i < k->count; i++) {
            const ParamInfo *p = &s->params[members[i]];
            if (cuda_muon_momentum_advance(cb->d_grads + p->offset, cb->d_momentum + p->offset, p->count,
                                           h->muon_momentum, cb->stream) != 0)
                return ct_fail_prefix("optimizer step, %s", p->name);
        }
        return 0;
    }
    CudaMuonMatrix mats[MUON_BATCH_MAX];
    for (int i = 0; i < k->count; i++) {
        const ParamInfo *p = &s->params[members[i]];
        float *g = cb->d_grads + p->offset;
        mats[i] = (CudaMuonMatrix){g, g, cb->d_momentum + p->offset, (int)p->shape[0], (int)p->shape[1]};
    }
    if (cuda_muon_update_batch(cb->blas, mats, k->count, h->muon_momentum, 1, h->muon_steps, h->muon_flags, cb->ns_fp32,
                               cb->muon_scratch, cb->red_partials, cb->stream) != 0)
        return ct_fail_prefix("optimizer step, Muon batch %d (%s and %d more)", j, s->params[members[0]].name,
                              k->count - 1);
    return 0;
}

/* Every rank gets every Muon update: either each batch's owner sends its updates to the others
 * (share_device: exact by construction, no arithmetic) or one sum across ranks over the
 * matrices' flat range, where the other ranks hold +0 (combine_device; the control tensors
 * inside that range are spent and zeroed first). Both give every rank the owner's bits. */
static int combine_muon_updates(CudaBackend *cb, const StepHyper *h, int world) {
    const ModelSpec *s = &cb->base.state->spec;
    const MuonBatchPlan *plan = &cb->muon_plan;
    if (h->share_device) {
        int n = 0;
        for (int j = 0; j < plan->num_batches; j++)
            for (int i = 0; i < plan->batches[j].count; i++) {
                const ParamInfo *p = &s->params[plan->params[plan->batches[j].first + i]];
                cb->share_bufs[n] = cb->d_grads + p->offset;
                cb->share_counts[n] = p->count;
                cb->share_roots[n++] = muon_batch_owner(j, world);
            }
        if (n > 0 && h->share_device(h->combine_ctx, cb->share_bufs, cb->share_counts, cb->share_roots, n,
                                     cb->stream) != 0)
            return ct_fail_prefix("sharing the Muon updates");
        return 0;
    }
    size_t begin, end;
    matrix_range(s, &begin, &end);
    for (int i = 0; i < s->num_params; i++) { /* the control tensors there are spent: +0 in the sum */
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX && p->offset >= begin && p->offset < end)
            RETURN_ON_FAILURE(zero_on_stream(cb, cb->d_grads + p->offset, p->count * sizeof(float),
                                             "cuda: zeroing spent gradients"));
    }
    if (end > begin && h->combine_device(h->combine_ctx, cb->d_grads + begin, end - begin, cb->stream) != 0)
        return ct_fail_prefix("combining the Muon updates");
    return 0;
}

/* Decoupled weight decay of parameter p before its update, when its group has one
 * (backend_weight_decay_factor, the CPU backend's rule). */
static int decay(CudaBackend *cb, const ParamInfo *p, const StepHyper *h) {
    double factor;
    if (!backend_weight_decay_factor(p->group, h, &factor)) return 0;
    return cuda_weight_decay(cb->d_params + p->offset, p->count, factor, cb->stream);
}

/* The weight averages after the whole step (the CPU backend's order): the EMA, SWA's sum. */
static int average_weights(CudaBackend *cb, const StepHyper *h) {
    TrainState *st = cb->base.state;
    const size_t n = st->spec.total_floats;
    if (h->ema_decay > 0) {
        if (!cb->d_ema) return ct_fail("optimizer step: EMA asked for, but the training state has no EMA weights");
        RETURN_ON_FAILURE(cuda_ema_update(cb->d_ema, cb->d_params, n, h->ema_decay, cb->stream));
    }
    if (h->swa_add) {
        if (!cb->d_swa_sum) return ct_fail("optimizer step: SWA asked for, but the training state has no SWA sum");
        RETURN_ON_FAILURE(cuda_swa_add(cb->d_swa_sum, cb->d_params, n, st->swa_count == 0, cb->stream));
        st->swa_count++;
    }
    return 0;
}

/* Adam on the embeddings and control tensors, then Muon: each matrix's update is written in
 * its gradient's place (the gradient is not needed after the momentum step), batch by batch
 * (muon_batches.h). With combine_device, batch j's updates are computed only on rank
 * j % shard_world (the others advance its momentum and leave +0 there) and
 * combine_muon_updates gives every rank every update, bitwise what it would have computed
 * itself: the batches, and so the products, are the same on any number of ranks. */
int cuda_optimizer_step(Backend *b, const StepHyper *h, double *grad_norm) {
    CudaBackend *cb = (CudaBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    cudaStream_t stream = cb->stream;
    *grad_norm = 0;
    if (cb->grads_on_host) {
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_grads, st->grads, s->total_floats * sizeof(float),
                                                     cudaMemcpyHostToDevice, stream),
                                     "cuda: gradient upload"));
        cb->grads_on_host = 0;
    }
    if (h->grad_clip_norm > 0) {
        RETURN_ON_FAILURE(cuda_clip_grad_norm(cb->d_grads, s->total_floats, h->grad_clip_norm, cb->d_scalars + 1,
                                              cb->red_partials, stream));
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->h_scalars + 1, cb->d_scalars + 1, sizeof(double),
                                                     cudaMemcpyDeviceToHost, stream),
                                     "cuda: gradient norm download"));
    }
    st->adam_step++;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group == PARAM_MATRIX) continue;
        const CudaAdamHyper adam = {backend_adam_lr(p->group, h), h->beta1, h->beta2, h->adam_eps, st->adam_step};
        if (decay(cb, p, h) != 0 ||
            cuda_adam_step(cb->d_params + p->offset, cb->w16[i], cb->d_grads + p->offset, cb->d_exp_avg + p->offset,
                           cb->d_exp_avg_sq + p->offset, p->count, &adam, stream) != 0)
            return ct_fail_prefix("optimizer step, %s", p->name);
    }
    const int sharded = h->combine_device != NULL;
    const int world = sharded && h->shard_world > 1 ? h->shard_world : 1;
    for (int j = 0; j < cb->muon_plan.num_batches; j++) RETURN_ON_FAILURE(muon_batch_step(cb, j, h, world));
    if (sharded) RETURN_ON_FAILURE(combine_muon_updates(cb, h, world));
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        if (decay(cb, p, h) != 0 ||
            cuda_muon_apply(cb->d_params + p->offset, cb->w16[i], cb->d_grads + p->offset, p->count, h->matrix_lr,
                            stream) != 0)
            return ct_fail_prefix("optimizer step, %s", p->name);
    }
    cb->shadows_quantized = 0; /* the updates wrote bf16(w) into the shadows */
    RETURN_ON_FAILURE(average_weights(cb, h));
    RETURN_ON_FAILURE(zero_on_stream(cb, cb->d_grads, s->total_floats * sizeof(float), "cuda: zeroing the gradients"));
    RETURN_ON_FAILURE(sync_stream(cb, "cuda optimizer_step"));
    if (h->grad_clip_norm > 0) *grad_norm = cb->h_scalars[1];
    return 0;
}

#endif /* CT_HAVE_CUDA */
