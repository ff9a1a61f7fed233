/* backend_cuda_ttt.c — test-time training on the CUDA backend (backend.h's ttt_* hooks and
 * sgd_step; issue 57, docs/model.md "Test-time training"), the pair of backend_cpu_ttt.c and
 * backend_cpu_lora.c with the same semantics. A chunk is a batch of documents' windows, one row
 * each, run at T = the window (the buffers are sized for the backend's T), launch by launch (the
 * CUDA graph is the training micro-batch's only): the block passes add every row's own adapters
 * (cuda_lora_rows_*, strided-batched over the rows: kernels/cuda/cuda_lora.h), the head's adapter
 * joins the logits before the softcap (cuda_logits_ce_lowrank_*), only the scored positions'
 * logits are made. Training rows then take the gradient of their scored positions' mean loss
 * back to their adapters only: no base weight gradient is made (the matrices' products skipped,
 * the backward stopped at x0, the head's dW NULL: backend_cuda_blocks.c's matrix_grad; with
 * CT_TTT_BASE_GRADS=1 the blocks' are made, as before, for timing) and the per-channel ones go
 * to a scratch buffer in d_grads' place for the chunk's backward, so the state's are left as
 * they were. Then AdamW or SGD per slot.
 * Rounding (docs/cuda.md, "Test-time training"): the adapters are fp32 with a bf16 shadow (the
 * products' operand, as every weight); h = x A^T and dh are bf16; an adapter's share is added
 * to the bf16 projection output it joins in the product's fp32 accumulator and rounded once. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <stdlib.h>
#include <string.h>

#include "common.h"

#include "backend_cuda_private.h"

static int dev_alloc(void *p, size_t bytes, const char *what) {
    return cuda_check(cudaMalloc((void **)p, bytes ? bytes : 1), what);
}

/* The adapters and their scratch (ttt_open's); the global step's momentum stays. */
static void free_adapters(CudaBackend *cb) {
    CudaTtt *t = cb->ttt;
    if (!t) return;
    cudaFree(t->w), cudaFree(t->g), cudaFree(t->m), cudaFree(t->v), cudaFree(t->w16);
    cudaFree(t->h), cudaFree(t->dh), cudaFree(t->head_h), cudaFree(t->head_dh), cudaFree(t->junk_grads);
    free(t->steps);
    free(t);
    cb->ttt = NULL;
}

void cuda_ttt_free(CudaBackend *cb) {
    free_adapters(cb);
    if (cb->d_sgd_buf) cudaFree(cb->d_sgd_buf);
    cb->d_sgd_buf = NULL;
}

int cuda_ttt_open(Backend *b, const LoraLayout *layout, int slots) {
    CudaBackend *cb = (CudaBackend *)b;
    if (slots < 1 || slots > cb->B)
        return ct_fail("test-time training: %d document slots asked for, but the backend was made for %d rows", slots,
                       cb->B);
    if (cb->h_seg)
        return ct_fail("test-time training: the backend packs documents (doc_packing = 1); a chunk's rows are one "
                       "document each");
    int base_grads;
    if (backend_ttt_base_grads(&base_grads) != 0) return ct_fail_prefix("test-time training");
    free_adapters(cb);
    CudaTtt *t = ct_calloc(1, sizeof *t, "TTT adapters");
    cb->ttt = t;
    t->base_grads = base_grads;
    t->layout = layout;
    t->slots = slots;
    const size_t n = (size_t)slots * layout->slot_floats, rows = (size_t)cb->B * cb->T * layout->rank;
    t->steps = ct_calloc((size_t)slots, sizeof(int64_t), "TTT adapter steps");
    const char *what = "test-time training: allocating the adapters on the device (cudaMalloc)";
    if (dev_alloc(&t->w, n * sizeof(float), what) != 0 || dev_alloc(&t->g, n * sizeof(float), what) != 0 ||
        dev_alloc(&t->m, n * sizeof(float), what) != 0 || dev_alloc(&t->v, n * sizeof(float), what) != 0 ||
        dev_alloc(&t->w16, n * sizeof(ct_bf16), what) != 0 || dev_alloc(&t->h, rows * sizeof(ct_bf16), what) != 0 ||
        dev_alloc(&t->dh, rows * sizeof(ct_bf16), what) != 0 ||
        dev_alloc(&t->head_h, rows * sizeof(ct_bf16), what) != 0 ||
        dev_alloc(&t->head_dh, rows * sizeof(float), what) != 0 ||
        dev_alloc(&t->junk_grads, b->state->spec.total_floats * sizeof(float), what) != 0) {
        free_adapters(cb);
        return -1;
    }
    /* never read, but zeroed once: what a chunk leaves out stays 0 (test_gpu_step's
     * ttt_skip_base_grads_bitwise sees which gradients were made) */
    return zero_on_stream(cb, t->junk_grads, b->state->spec.total_floats * sizeof(float),
                          "test-time training: zeroing the base gradients' scratch");
}

int cuda_ttt_reset(Backend *b, const float *initial, int slot0, int n) {
    CudaBackend *cb = (CudaBackend *)b;
    CudaTtt *t = cb->ttt;
    if (!t) return ct_fail("test-time training: ttt_reset before ttt_open");
    if (slot0 < 0 || n < 0 || slot0 + n > t->slots)
        return ct_fail("test-time training: slots [%d, %d) outside the %d opened", slot0, slot0 + n, t->slots);
    const size_t per = t->layout->slot_floats, bytes = per * sizeof(float);
    for (int i = slot0; i < slot0 + n; i++) {
        const size_t at = (size_t)i * per;
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(t->w + at, initial, bytes, cudaMemcpyHostToDevice, cb->stream),
                                     "test-time training: adapter upload"));
        RETURN_ON_FAILURE(cuda_f32_to_bf16(t->w16 + at, t->w + at, per, cb->stream));
        t->steps[i] = 0;
    }
    const size_t at = (size_t)slot0 * per, all = (size_t)n * bytes;
    RETURN_ON_FAILURE(zero_on_stream(cb, t->g + at, all, "test-time training: zeroing adapter gradients"));
    RETURN_ON_FAILURE(zero_on_stream(cb, t->m + at, all, "test-time training: zeroing adapter moments"));
    RETURN_ON_FAILURE(zero_on_stream(cb, t->v + at, all, "test-time training: zeroing adapter moments"));
    return sync_stream(cb, "test-time training: ttt_reset"); /* `initial` is the caller's again */
}

int cuda_ttt_slot_to_host(Backend *b, int slot, float *out) {
    CudaBackend *cb = (CudaBackend *)b;
    CudaTtt *t = cb->ttt;
    if (!t || slot < 0 || slot >= t->slots) return ct_fail("test-time training: no adapter slot %d", slot);
    const size_t per = t->layout->slot_floats;
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(out, t->w + (size_t)slot * per, per * sizeof(float),
                                                 cudaMemcpyDeviceToHost, cb->stream),
                                 "test-time training: adapter download"));
    return sync_stream(cb, "test-time training: adapter download");
}

/* ---- a chunk ---- */

/* The head on every row's scored positions: losses written there (scoring: losses not NULL);
 * for training rows (train_now) dL/d(xf) into dxf and the head adapter's gradients. */
static int head_pass(CudaBackend *cb, const TttChunk *c, float *losses, int train_now) {
    const ModelSpec *s = &cb->base.state->spec;
    CudaTtt *t = cb->ttt;
    const int T = cb->T, D = cb->dim, V = cb->vocab, r = t->layout->rank;
    const size_t per = t->layout->slot_floats;
    const LoraEntry *e = &t->layout->head;
    const ct_bf16 *W = cb->w16[s->tied ? s->tok_emb : s->lm_head];
    cudaStream_t st = cb->stream;
    if (train_now) {
        RETURN_ON_FAILURE(zero_on_stream(cb, cb->dxf, (size_t)cb->num_tokens * D * sizeof(float), "cuda: zeroing dxf"));
        RETURN_ON_FAILURE(zero_on_stream(cb, t->head_dh, (size_t)cb->num_tokens * r * sizeof(float),
                                         "cuda: zeroing the head adapter's dh"));
    }
    if (c->adapt) { /* every row's h = xf A^T, one batched product */
        const CudaLora all = cuda_ttt_rows_lora(cb, e, 0, c->rows, 0);
        RETURN_ON_FAILURE(cuda_lora_h(cb->blas, &all, t->head_h, cb->xf16));
    }
    for (int i = 0; i < c->rows; i++) {
        const int from = c->from[i], len = c->len[i], train = train_now && c->train[i];
        if (len == 0 || (!losses && !train)) continue;
        const size_t at = (size_t)i * T + from;
        const CudaLogits a = {cb->losses + at, cb->xf16 + at * D, W, cb->d_tok + cb->num_tokens + at, len, D, V,
                              s->softcap, cb->z, cb->logits_chunk};
        if (!c->adapt) {
            RETURN_ON_FAILURE(cuda_logits_ce_forward(cb->blas, &a, st));
            continue;
        }
        const size_t slot = (size_t)(c->slot0 + i) * per;
        const CudaLogitsLowRank lr = {t->head_h + at * r, t->w16 + slot + e->b, t->layout->scale, r,
                                      t->head_dh + at * r, t->g + slot + e->b};
        if (!train) {
            RETURN_ON_FAILURE(cuda_logits_ce_lowrank_forward(cb->blas, &a, &lr, st));
            continue;
        }
        RETURN_ON_FAILURE(
            cuda_logits_ce_lowrank_forward_backward(cb->blas, &a, &lr, cb->dxf + at * D, NULL, 1.0f, cb->dz, st));
        /* through h = xf A^T: dA += dh^T xf, dxf += dh A, from dh rounded to bf16 (cuda_logits.h) */
        RETURN_ON_FAILURE(cuda_f32_to_bf16(t->dh, t->head_dh + at * r, (size_t)len * r, st));
        const CudaLora one = {1, len, D, r, V, t->layout->scale, t->w16 + slot + e->a, t->w16 + slot + e->b,
                              (long long)per, (long long)per, 0, 0, CT_F32};
        RETURN_ON_FAILURE(cuda_lora_backward_h(cb->blas, &one, cb->dxf + at * D, t->g + slot + e->a, t->dh,
                                               cb->xf16 + at * D));
    }
    if (!losses) return 0;
    for (int i = 0; i < c->rows; i++)
        if (c->len[i] > 0)
            RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(losses + (size_t)i * c->ctx + c->from[i],
                                                         cb->losses + (size_t)i * T + c->from[i],
                                                         (size_t)c->len[i] * sizeof(float), cudaMemcpyDeviceToHost, st),
                                         "test-time training: loss download"));
    return sync_stream(cb, "test-time training: scoring");
}

/* The training rows' gradients back through the blocks to their adapters, the base's
 * per-channel gradients (and with CT_TTT_BASE_GRADS=1 the matrices') sent to the scratch buffer
 * (and no gradient-ready reports: nothing of the base is final); then one optimizer step per
 * training slot. */
static int adapt_rows(CudaBackend *cb, const TttChunk *c, const TttOptimizer *o) {
    CudaTtt *t = cb->ttt;
    float *grads = cb->d_grads;
    int (*ready)(void *, int) = cb->base.grad_ready;
    cb->d_grads = t->junk_grads;
    cb->base.grad_ready = NULL;
    const int rc = cuda_backward_blocks(cb);
    cb->d_grads = grads;
    cb->base.grad_ready = ready;
    if (rc != 0) return -1;
    const size_t per = t->layout->slot_floats;
    for (int i = 0; i < c->rows; i++) {
        if (!c->train[i]) continue;
        const int slot = c->slot0 + i;
        const size_t at = (size_t)slot * per;
        float *w = t->w + at, *g = t->g + at, *m = t->m + at;
        const int64_t step = ++t->steps[slot];
        if (o->adam) {
            if (o->weight_decay > 0) RETURN_ON_FAILURE(cuda_weight_decay(w, per, 1.0 - o->lr * o->weight_decay, cb->stream));
            const CudaAdamHyper h = {o->lr, o->beta1, o->beta2, o->eps, step};
            RETURN_ON_FAILURE(cuda_adam_step(w, t->w16 + at, g, m, t->v + at, per, &h, cb->stream));
        } else {
            RETURN_ON_FAILURE(
                cuda_sgd_step(w, t->w16 + at, m, g, per, o->lr, o->beta1, o->weight_decay, step == 1, cb->stream));
        }
        RETURN_ON_FAILURE(zero_on_stream(cb, g, per * sizeof(float), "test-time training: zeroing adapter gradients"));
    }
    return 0;
}

static int run_chunk(CudaBackend *cb, const TttChunk *c, const TttOptimizer *o, float *losses) {
    CudaTtt *t = cb->ttt;
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0)); /* the weights, never late QAT's */
    RETURN_ON_FAILURE(cuda_load_rows(cb, c->inputs, c->targets, c->rows));
    t->train_lo = c->rows, t->train_hi = 0;
    for (int i = 0; i < c->rows && c->adapt; i++)
        if (c->train[i]) {
            if (i < t->train_lo) t->train_lo = i;
            t->train_hi = i + 1;
        }
    const int steps = t->train_hi > 0 ? o->grad_steps : 0;
    /* step 0 trains on the scoring forward; later steps forward again with the new adapters */
    for (int step = 0; step == 0 || step < steps; step++) {
        RETURN_ON_FAILURE(cuda_forward_blocks(cb, c->rows));
        RETURN_ON_FAILURE(head_pass(cb, c, step == 0 ? losses : NULL, step < steps));
        if (step < steps) RETURN_ON_FAILURE(adapt_rows(cb, c, o));
    }
    return sync_stream(cb, "test-time training: chunk");
}

int cuda_ttt_chunk(Backend *b, const TttChunk *c, const TttOptimizer *o, float *losses) {
    CudaBackend *cb = (CudaBackend *)b;
    if (backend_check_ttt_chunk(c, cb->ttt ? cb->ttt->slots : 0, cb->T, cb->vocab) != 0)
        return ct_fail_prefix("test-time training");
    /* the chunk is the pass's shape: rows of ctx tokens, in buffers of capacity B * T */
    const int B = cb->B, T = cb->T, N = cb->num_tokens;
    cb->B = c->rows, cb->T = c->ctx, cb->num_tokens = c->rows * c->ctx;
    cb->ttt->slot0 = c->slot0;
    cb->ttt->active = c->adapt;
    const int rc = run_chunk(cb, c, o, losses);
    cb->ttt->active = 0;
    cb->B = B, cb->T = T, cb->num_tokens = N;
    return rc;
}

/* ---- the global step ---- */

/* backend.h's sgd_step: torch.optim.SGD over every parameter (cuda_sgd_step, the CPU's fp32
 * operations), one flat momentum buffer, each parameter's bf16 shadow rewritten as it goes. */
int cuda_sgd_optimizer_step(Backend *b, double lr, double momentum, double clip, int restart, double *grad_norm) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    cudaStream_t st = cb->stream;
    *grad_norm = 0;
    if (cb->grads_on_host) { /* handed out (grad_buffer) and reduced on the host */
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_grads, b->state->grads, s->total_floats * sizeof(float),
                                                     cudaMemcpyHostToDevice, st),
                                     "cuda: gradient upload"));
        cb->grads_on_host = 0;
    }
    if (clip > 0) {
        RETURN_ON_FAILURE(cuda_clip_grad_norm(cb->d_grads, s->total_floats, clip, cb->d_scalars + 1, cb->red_partials, st));
        RETURN_ON_FAILURE(cuda_check(
            cudaMemcpyAsync(cb->h_scalars + 1, cb->d_scalars + 1, sizeof(double), cudaMemcpyDeviceToHost, st),
            "cuda: gradient norm download"));
    }
    if (momentum != 0 && !cb->d_sgd_buf) {
        RETURN_ON_FAILURE(dev_alloc(&cb->d_sgd_buf, s->total_floats * sizeof(float),
                                    "sgd_step: allocating the momentum (cudaMalloc)"));
        RETURN_ON_FAILURE(zero_on_stream(cb, cb->d_sgd_buf, s->total_floats * sizeof(float), "sgd_step: momentum"));
    }
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0)); /* the shadows below are bf16(w) */
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (cuda_sgd_step(cb->d_params + p->offset, cb->w16[i], momentum != 0 ? cb->d_sgd_buf + p->offset : NULL,
                          cb->d_grads + p->offset, p->count, lr, momentum, 0.0, restart, st) != 0)
            return ct_fail_prefix("sgd_step, %s", p->name);
    }
    RETURN_ON_FAILURE(zero_on_stream(cb, cb->d_grads, s->total_floats * sizeof(float), "cuda: zeroing the gradients"));
    RETURN_ON_FAILURE(sync_stream(cb, "cuda sgd_step"));
    if (clip > 0) *grad_norm = cb->h_scalars[1];
    return 0;
}

#endif /* CT_HAVE_CUDA */
