/* backend_cuda_lora.c — test-time training's per-document adapters inside the CUDA backend's block
 * passes (backend_cuda_private.h; issue 57, docs/cuda.md "Test-time training"), the pair of
 * backend_cpu_lora.c: each chunk row is one document with its own adapter, every adapter's
 * products one strided-batched call over the rows (kernels/cuda/cuda_lora.h). Only while a chunk
 * with adapters runs (CudaTtt.active, set by backend_cuda_ttt.c); otherwise every call returns at
 * once, so training and evaluation run exactly as without this file. Apart from
 * backend_cuda_ttt.c, which drives the passes, so that the passes and the driver do not call each
 * other. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include "backend_cuda_private.h"

/* The adapter (run, kind) when a chunk with adapters runs and it is on, else NULL. */
static const LoraEntry *active_entry(const CudaBackend *cb, int run, LoraKind kind) {
    return cb->ttt && cb->ttt->active ? lora_entry(cb->ttt->layout, run, kind) : NULL;
}

CudaLora cuda_ttt_rows_lora(const CudaBackend *cb, const LoraEntry *e, int row0, int rows, int ld_out) {
    const CudaTtt *t = cb->ttt;
    const size_t per = t->layout->slot_floats, at = (size_t)(t->slot0 + row0) * per;
    return (CudaLora){rows, cb->T, e->in, t->layout->rank, e->out, t->layout->scale, t->w16 + at + e->a,
                      t->w16 + at + e->b, (long long)per, (long long)per, 0, ld_out, CT_BF16};
}

int cuda_lora_rows_forward(CudaBackend *cb, int run, LoraKind kind, const ct_bf16 *x, ct_bf16 *out, int ld_out) {
    const LoraEntry *e = active_entry(cb, run, kind);
    if (!e) return 0;
    const CudaLora l = cuda_ttt_rows_lora(cb, e, 0, cb->B, ld_out);
    return cuda_lora_forward(cb->blas, &l, out, cb->ttt->h, x);
}

int cuda_lora_rows_backward(CudaBackend *cb, int run, LoraKind kind, const ct_bf16 *x, const ct_bf16 *dout,
                            int ld_out, float *dx) {
    const LoraEntry *e = active_entry(cb, run, kind);
    if (!e) return 0;
    CudaTtt *t = cb->ttt;
    const int lo = t->train_lo, n = t->train_hi - t->train_lo, r = t->layout->rank;
    if (n <= 0) return 0;
    /* h again over every row rather than kept from the forward: one small product instead of a
     * buffer per adapter and run; the forward's very call (the same batch), so the same bits */
    const CudaLora all = cuda_ttt_rows_lora(cb, e, 0, cb->B, ld_out);
    RETURN_ON_FAILURE(cuda_lora_h(cb->blas, &all, t->h, x));
    /* the rows that can hold a loss: the others' dout is zero, so are all their gradients */
    const CudaLora l = cuda_ttt_rows_lora(cb, e, lo, n, ld_out);
    const size_t row = (size_t)lo * cb->T, at = (size_t)(t->slot0 + lo) * t->layout->slot_floats;
    return cuda_lora_backward(cb->blas, &l, dx + row * e->in, t->g + at + e->a, t->g + at + e->b, t->dh,
                              dout + row * (ld_out ? ld_out : e->out), x + row * e->in, t->h + row * r);
}

#endif /* CT_HAVE_CUDA */
