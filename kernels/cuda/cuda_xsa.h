/* cuda_xsa.h — exclusive self attention, XSA (cuda_xsa.cu), the pair of cpu_xsa.c: each query
 * head's attention output loses its component along its own position's value vector (of the
 * head's KV group, g = h / (n_heads / n_kv_heads)):
 *   out = y - (y . vn) vn,   vn = v / max(||v||, 1e-12)   per token and query head.
 * Shapes: y, out, dout, dy [N, n_heads*hd] (whole rows); v [N, ld_v] whose first n_kv_heads*hd
 * columns are the values (the backend's [c_q | c_k | c_v] rows: ld_v = their width; n_kv_heads*hd
 * when whole), dv_bf16 the same layout as v; dv [N, n_kv_heads*hd] whole. hd <= 128 (the
 * attention kernels' largest).
 * Precision: y and v bf16 (the attention's output and c_v's product output); the math fp32;
 * out fp32 and/or bf16 (attn.proj's input); dout fp32 (attn.proj's input gradient); dy fp32
 * (+=) and/or bf16 (written: the attention backward's input); dv fp32 (+=) and/or bf16 (the
 * attention backward's dv, read, the contribution added in fp32, rounded once more: +=
 * through bf16, c_v's product is its only consumer).
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_XSA_H
#define CT_CUDA_XSA_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call's shape: N tokens, n_heads query heads sharing n_kv_heads value heads of head_dim;
 * ld_v the elements per token of v's (and dv's) rows. */
typedef struct {
    int N;
    int n_heads, n_kv_heads, head_dim;
    int ld_v;
} CudaXsaShape;

/* out and/or out_bf16 written (either may be NULL). */
int cuda_xsa_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *y, const ct_bf16 *v, const CudaXsaShape *shape,
                     cudaStream_t stream);
/* With P = I - vn vn^T: dy += P dout (fp32, may be NULL), dy_bf16 = bf16(P dout) (may be NULL);
 * dvn = -sum over the group's heads of ((y.vn) dout + (dout.vn) y), and dv's contribution
 * (dvn - (dvn.vn) vn) / ||v|| (dvn / 1e-12 where the norm was clamped) is added to dv (fp32, may
 * be NULL) and to dv_bf16 (bf16(dv_bf16 + contribution), may be NULL). No reduction crosses
 * tokens: one warp owns a (token, KV head) and its group's query heads, in head order. */
int cuda_xsa_backward(float *dy, ct_bf16 *dy_bf16, float *dv, ct_bf16 *dv_bf16, const float *dout, const ct_bf16 *y,
                      const ct_bf16 *v, const CudaXsaShape *shape, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
