/* cuda_smear_bos.h — the 1.0611 record's SmearGate with the BOS mask (cuda_smear_bos.cu), the
 * pair of cpu_smear_bos.c (contract in cpu_ops.h):
 *   s_t = sigmoid(sum_{k<W} w[k] e_t[k]),  g_t = lambda s_t,  m_t = [t % T != 0 and ids[t] != bos_id],
 *   out_t = e_t + m_t g_t e_{t-1},
 * over B sequences of T positions; e, out [B*T, C] fp32 (the embedding, before the x0 norm), ids
 * the device token ids [B*T], w [W] and lambda [1] fp32 parameters.
 * Precision: the logit summed in double in channel order, its sigmoid 1 / (1 + e) with e the
 * correctly rounded exp (the CPU's glibc expf); the element operations the CPU's fp32 ones.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_SMEAR_BOS_H
#define CT_CUDA_SMEAR_BOS_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out written; out must not alias e (position t reads e at t-1). window in [1, C]. */
int cuda_smear_bos_forward(float *out, const float *e, const int32_t *ids, const float *w, const float *lambda, int B,
                           int T, int C, int window, int64_t bos_id, cudaStream_t stream);
/* Scratch of the backward, in doubles: two per token (the gate's two parameter-gradient terms)
 * and the per-chunk partials of the sums over tokens (CUDA_COLSUM_ROWS chunks, window + 1 sums). */
size_t cuda_smear_bos_backward_scratch_doubles(int B, int T, int window);
/* de [B*T, C] += d/de (de must not alias dout); dw [window], dlambda [1] += their sums over tokens:
 * each chunk of CUDA_COLSUM_ROWS tokens summed in token order in double, the chunks added in
 * chunk order (no atomics: the same bits every run). e is the forward's input. */
int cuda_smear_bos_backward(float *de, float *dw, float *dlambda, const float *dout, const float *e,
                            const int32_t *ids, const float *w, const float *lambda, int B, int T, int C, int window,
                            int64_t bos_id, double *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
