/* cuda_rope.h — QK-norm + RoPE + gain (cuda_rope.cu), the pair of cpu_rope.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h.
 *
 * cpu_qk_norm_rope_forward's math, one warp per (token, head): in, out [B*T, heads*hd]; gain
 * [heads] or NULL; RoPE on the first rope_dims dims of each head (even, <= hd; hd for full RoPE,
 * the record's partial RoPE below it); cos/sin tables [T, rope_dims/2] (cpu_rope_tables_init's
 * with rope_dims as its head_dim, uploaded). hd even, <= 256.
 * Precision: in (c_q / c_k's output) is bf16, as a product's output under autocast; gain, the
 * tables, dout, dgain and the math fp32; out / din fp32 and/or bf16 (below).
 * ld: elements per token of in (and of the backward's din, din_bf16), >= heads*hd: they may be
 * column blocks of wider rows (the backend's [c_q | c_k | c_v] outputs); heads*hd when whole. */
#ifndef CT_CUDA_ROPE_H
#define CT_CUDA_ROPE_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call's shape: B sequences of T tokens, n_heads heads of head_dim, RoPE on the first
 * rope_dims dims of each head with the tables cos_table / sin_table [T, rope_dims/2]; ld the
 * elements per token of in (and of the backward's din, din_bf16). */
typedef struct {
    int B, T;
    int n_heads, head_dim, rope_dims;
    int ld;
    const float *cos_table, *sin_table;
} CudaRopeShape;

/* out (fp32) and/or out_bf16 receive the result, [B*T, heads*hd] (either may be NULL; the bf16
 * copy feeds the tensor-core attention). */
int cuda_qk_norm_rope_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *in, const float *gain,
                              const CudaRopeShape *shape, cudaStream_t stream);
/* Scratch of the backward: dgain partials [B*T, heads] floats + colsum doubles. */
size_t cuda_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads);
size_t cuda_qk_norm_rope_backward_partials_doubles(int B, int T, int n_heads);
/* din += gradient (fp32, may be NULL); din_bf16 = bf16(gradient) (may be NULL); both ld elements
 * per token, as in; dout [B*T, heads*hd]. dgain [heads] += sum over tokens of <R^T dout, u>
 * (NULL for k; needs scratch and partials then). */
int cuda_qk_norm_rope_backward(float *din, ct_bf16 *din_bf16, float *dgain, const float *dout, const ct_bf16 *in,
                               const float *gain, const CudaRopeShape *shape, float *scratch, double *partials,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
