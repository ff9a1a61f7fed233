/* cuda_attention.h — causal GQA flash attention on tensor cores, optionally within segments
 * (packed documents), the pair of cpu_attention.c: cuda_attention_fwd.cu, cuda_attention_bwd.cu
 * and their shared cuda_attention_common.cuh.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h.
 *
 * y[b,t,h,:] = sum_{s<=t} softmax_s(q[b,t,h,:].k[b,s,g,:] / sqrt(hd)) v[b,s,g,:], g = h/(H/KV),
 * q, y [B*T, H*hd]; k, v [B*T, KV*hd] (token-major, heads contiguous: what c_q/c_k/c_v give).
 * bf16 q, k, v, y and dy (products on tensor cores, fp32 accumulation); softmax, lse and the
 * gradients fp32. P and dS are rounded to bf16 where they enter a product (as in FlashAttention).
 * Tiles of 64 rows in shared memory, online softmax; no T x T matrix exists. Saved for the
 * backward: lse [B,H,T] (natural log-sum-exp of the scaled scores per query row).
 * v (and the backward's dv) may be a column block of wider rows (the backend's [c_q | c_k | c_v]
 * output): ld_v elements per token, a multiple of 8 and >= KV*hd, v 16-byte aligned; KV*hd when
 * whole. */
#ifndef CT_CUDA_ATTENTION_H
#define CT_CUDA_ATTENTION_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

int cuda_attention_supported(int head_dim); /* 1 for head_dim 32, 64 and 128 */
/* One call's shape: B sequences of T tokens, n_heads query heads sharing n_kv_heads key/value
 * heads of head_dim; ld_v the elements per token of v's rows (and dv's): KV*hd when whole.
 * seg_start: NULL for causal attention over each whole row, or a device int32 [B*T] with, for
 * token n = b*T + t, the first position (0 .. t) of t's segment within row b: t then attends to
 * keys seg_start[n] .. t only (cpu_attention.h's meaning; segments contiguous: seg_start[n] is t
 * or seg_start[n-1]). Key tiles wholly before a query tile's first segment, and query tiles wholly
 * after a key tile's last segment, are skipped, so a row of short segments costs what its
 * segments cost. Masked keys contribute exactly zero. */
typedef struct {
    int B, T;
    int n_heads, n_kv_heads, head_dim;
    int ld_v;
    const int32_t *seg_start;
} CudaAttentionShape;

/* y (bf16) written; lse (may be NULL for forward only) written. */
int cuda_attention_forward(ct_bf16 *y, float *lse, const ct_bf16 *q, const ct_bf16 *k, const ct_bf16 *v,
                           const CudaAttentionShape *shape, cudaStream_t stream);
/* Scratch of the backward: D = rowsum(dy * y) [B,H,T] floats. */
size_t cuda_attention_backward_scratch_floats(int B, int T, int n_heads);
/* The backward's tensors. Its outputs, all WRITTEN (each is this op's alone in the backend; dv
 * only feeds the c_v product): dq = dL/dq, dk = dL/dk (fp32) and dv = bf16(dL/dv) (ld_v
 * elements per token, as v). Its inputs: dy (bf16), the forward's q, k, v, its output y (for
 * D) and its lse. */
typedef struct {
    float *dq, *dk;
    ct_bf16 *dv;
    const ct_bf16 *dy;
    const ct_bf16 *q, *k, *v, *y;
    const float *lse;
    float *scratch; /* cuda_attention_backward_scratch_floats(B, T, n_heads) */
} CudaAttentionBackward;
/* P is recomputed from q, k and lse. Deterministic without atomics: one kernel owns query rows
 * (dq: loops over key tiles), one owns key rows (dk, dv: loops over the group's query heads in
 * head order and their query tiles: the GQA reduction). */
int cuda_attention_backward(const CudaAttentionBackward *t, const CudaAttentionShape *shape, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
