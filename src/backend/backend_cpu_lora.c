/* backend_cpu_lora.c — test-time training's per-document adapters inside the CPU backend's block
 * passes (backend_cpu.h; docs/model.md "Test-time training"): each row of a chunk is one document
 * with its own adapters, so every adapter runs row by row through kernels/cpu/cpu_lora.c. Only
 * while a chunk with adapters runs (cb->ttt->active); otherwise every call returns at once, so
 * training and evaluation run exactly as without this file. */
#include "backend_cpu.h"
#include "cpu_ops.h"

/* The adapter (run, kind) when a chunk with adapters runs and it is on, else NULL. */
static const LoraEntry *active_entry(const CpuBackend *cb, int run, LoraKind kind) {
    return cb->ttt && cb->ttt->active ? lora_entry(cb->ttt->layout, run, kind) : NULL;
}

static size_t slot_at(const CpuTtt *t, int row) { return (size_t)(t->slot0 + row) * t->layout->slot_floats; }

void cpu_lora_rows_forward(CpuBackend *cb, int run, LoraKind kind, const float *x, float *out, int B) {
    const LoraEntry *e = active_entry(cb, run, kind);
    if (!e) return;
    const CpuTtt *t = cb->ttt;
    const int T = cb->T, r = t->layout->rank;
    for (int b = 0; b < B; b++) {
        const float *w = t->w + slot_at(t, b);
        const size_t row = (size_t)b * T;
        cpu_lora_forward(out + row * e->out, t->h, x + row * e->in, w + e->a, w + e->b, t->layout->scale, T, e->in, r,
                         e->out);
    }
}

void cpu_lora_rows_backward(CpuBackend *cb, int run, LoraKind kind, const float *x, const float *dout, float *dx,
                            float *dh_keep, int B) {
    const LoraEntry *e = active_entry(cb, run, kind);
    if (!e) return;
    const CpuTtt *t = cb->ttt;
    const int T = cb->T, r = t->layout->rank;
    for (int b = 0; b < B; b++) {
        if (!t->row_train[b]) continue; /* no loss in this row: every gradient of it is zero */
        const size_t at = slot_at(t, b), row = (size_t)b * T;
        const float *w = t->w + at, *xb = x + row * e->in;
        float *g = t->g + at;
        /* h again rather than kept from the forward: one small product instead of a buffer per
         * adapter and run; the same call as the forward's, so the same bits */
        cpu_linear_forward(t->h, xb, w + e->a, T, e->in, r);
        cpu_lora_backward(dx ? dx + row * e->in : NULL, g + e->a, g + e->b, dh_keep + row * r, dout + row * e->out, xb,
                          t->h, w + e->a, w + e->b, t->layout->scale, T, e->in, r, e->out);
    }
}

void cpu_lora_rows_backward_input(CpuBackend *cb, int run, LoraKind kind, const float *dh_keep, float *dx, int B) {
    const LoraEntry *e = active_entry(cb, run, kind);
    if (!e) return;
    const CpuTtt *t = cb->ttt;
    const int T = cb->T, r = t->layout->rank;
    for (int b = 0; b < B; b++) {
        if (!t->row_train[b]) continue;
        const size_t row = (size_t)b * T;
        /* dx += dh A: a linear layer's input gradient with A as its [r, in] weight */
        cpu_linear_backward(dx + row * e->in, NULL, dh_keep + row * r, NULL, t->w + slot_at(t, b) + e->a, T, e->in, r);
    }
}
