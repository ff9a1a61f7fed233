/* cuda_bigram.h — the record's bigram hash embedding (cuda_bigram.cu), the pair of cpu_bigram.c:
 * the bucket of each position's (previous, current) token pair, and the learned scalar scale of
 * the branch added to the token embedding. The table lookup and the projection are the ordinary
 * embedding and linear ops.
 * Precision: ids and buckets int32 (the hash is exact integer arithmetic: the same buckets as
 * the CPU); x, out, dout and dbranch fp32 (the embedding stream); the branch fp32 (the table
 * rows, without a projection) or bf16 (the projection's output, a matrix product's), dbranch_bf16
 * bf16 (its only consumer is the projection's backward product); scale and dscale fp32.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_BIGRAM_H
#define CT_CUDA_BIGRAM_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* buckets[b,t] = (36313 ids[b,t] XOR 27191 ids[b,t-1]) mod (num_buckets - 1), in torch's int32
 * arithmetic (products wrap, the remainder is made non-negative); num_buckets - 1 at the first
 * position of each of the B sequences of T. ids, buckets [B*T]; num_buckets >= 2. */
int cuda_bigram_hash(int32_t *buckets, const int32_t *ids, int B, int T, int num_buckets, cudaStream_t stream);

/* out[i] = x[i] + branch[i] * scale[0] over n elements (out may equal x). Exactly one of branch
 * (fp32) and branch_bf16 is given. */
int cuda_add_scalar_scaled_forward(float *out, const float *x, const float *branch, const ct_bf16 *branch_bf16,
                                   const float *scale, size_t n, cudaStream_t stream);
/* Partials of the backward's dscale reduction (cuda_reduce_doubles(n): the fixed-shape sums of
 * cuda_common.h). */
size_t cuda_add_scalar_scaled_backward_partials_doubles(size_t n);
/* dbranch[i] += dout[i] * scale[0] (may be NULL); dbranch_bf16[i] = bf16(dout[i] * scale[0])
 * (WRITTEN, may be NULL); dscale[0] += sum_i dout[i] * branch[i] (double; per-block partials of
 * a grid that depends on n only, then added in block order). Exactly one of branch and
 * branch_bf16 is given. */
int cuda_add_scalar_scaled_backward(float *dbranch, ct_bf16 *dbranch_bf16, float *dscale, const float *dout,
                                    const float *branch, const ct_bf16 *branch_bf16, const float *scale, size_t n,
                                    double *partials, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
