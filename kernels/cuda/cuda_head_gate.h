/* cuda_head_gate.h — the sparse attention head-output gate (cuda_head_gate.cu), the pair of
 * cpu_head_gate.c (the 1.0611 record's SparseGate, docs/model.md):
 *   g[t,h] = sigmoid(scale * sum_{k<window} w[h,k] n[t,k]),   out[t,h,:] = g[t,h] y[t,h,:].
 * Shapes: y, out, dout, dy, n [N, n_heads*hd] (whole rows; the gate reads n's first window
 * columns); g, dz [N, n_heads]; w, dw [n_heads, window]; hd <= 128.
 * Precision: y and n bf16 (the attention output after XSA, and a_in, the norm output that feeds
 * c_q/c_k/c_v); w fp32; the math fp32; g fp32 (saved for the backward); out bf16 (attn.proj's
 * input). Backward: dout fp32 (attn.proj's input gradient); dy fp32 and/or bf16, both WRITTEN
 * (as the CPU op's: g dout is the whole gradient of y; dy may equal dout); dz WRITTEN; dw +=
 * through per-chunk partials in double, added in chunk order (cuda_common.h's colsum layout);
 * cuda_head_gate_input_backward adds the input's share into an fp32 dn (+=), once the caller's
 * d a_in is made.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_HEAD_GATE_H
#define CT_CUDA_HEAD_GATE_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call's shape: N tokens of n_heads heads of head_dim; the gate reads `window` channels;
 * its logit is scaled by `scale`. */
typedef struct {
    int N;
    int n_heads, head_dim, window;
    float scale;
} CudaHeadGateShape;

/* g and out_bf16 written. One warp per (token, head). */
int cuda_head_gate_forward(float *g, ct_bf16 *out_bf16, const ct_bf16 *y, const ct_bf16 *n, const float *w,
                           const CudaHeadGateShape *shape, cudaStream_t stream);
/* Doubles of `partials` cuda_head_gate_backward needs. */
size_t cuda_head_gate_backward_partials_doubles(int N, int n_heads, int window);
/* dy = g dout (fp32, may be NULL, may equal dout), dy_bf16 = bf16(g dout) (may be NULL), dz =
 * scale g (1-g) (y . dout) written, dw += sum_t dz[t,h] n[t,k]. */
int cuda_head_gate_backward(float *dy, ct_bf16 *dy_bf16, float *dz, float *dw, const float *dout, const ct_bf16 *y,
                            const float *g, const ct_bf16 *n, const CudaHeadGateShape *shape, double *partials,
                            cudaStream_t stream);
/* dn[t,k] += sum_h dz[t,h] w[h,k] for k < window (dn rows of n_heads*head_dim), heads in order. */
int cuda_head_gate_input_backward(float *dn, const float *dz, const float *w, const CudaHeadGateShape *shape,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
