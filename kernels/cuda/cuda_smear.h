/* cuda_smear.h — the record's SmearGate (cuda_smear.cu), the pair of cpu_smear.c:
 *   out[b,t,c] = (1 - g_c) x[b,t,c] + g_c x[b,t-1,c],  g_c = sigmoid(gate_c),  x[b,-1,:] = 0,
 * over B sequences of T positions, x and out [B*T, C].
 * Precision: everything is fp32 (x is rms_norm(emb), out is x0, the residual stream's start;
 * gate and dgate are fp32 parameters and gradients; dout and dx fp32 residual gradients).
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_SMEAR_H
#define CT_CUDA_SMEAR_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out written; out must not alias x (position t reads x at t-1). */
int cuda_smear_forward(float *out, const float *x, const float *gate, int B, int T, int C, cudaStream_t stream);
/* Partials of the backward's dgate reduction over tokens (cuda_colsum_doubles(B*T, C, 1)). */
size_t cuda_smear_backward_partials_doubles(int B, int T, int C);
/* dx [B*T, C] += (1 - g) dout[t] + g dout[t+1] (0 past a sequence's end); dgate [C] += g (1 - g)
 * * sum over tokens of dout (x[t-1] - x[t]) (the CUDA_COLSUM_ROWS chunks of cuda_common.h, in
 * double, in chunk order). x is the forward's input. dx must not alias dout. */
int cuda_smear_backward(float *dx, float *dgate, const float *dout, const float *x, const float *gate, int B, int T,
                        int C, double *partials, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
