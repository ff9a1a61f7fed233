/* cuda_weights.h — element-wise passes over whole weight buffers around the optimizer step
 * (cuda_weights.cu), the pair of cpu_weights.c: decoupled weight decay, the EMA of the weights
 * and SWA's running sum (the record stack's optimizer additions, docs/model.md "Weight decay"
 * and "Weight averaging"). The reference semantics are cpu_weights.h's; each element is
 * computed with the CPU's fp32 operations and roundings, so the results are bitwise the CPU's.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_WEIGHTS_H
#define CT_CUDA_WEIGHTS_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* p[i] *= (float)factor over n elements (cpu_weight_decay; factor = 1 - lr*wd from the host). */
int cuda_weight_decay(float *p, size_t n, double factor, cudaStream_t stream);

/* ema[i] = fmaf(w[i], (float)(1 - decay), ema[i] * (float)decay) (cpu_ema_update). */
int cuda_ema_update(float *ema, const float *w, size_t n, double decay, cudaStream_t stream);

/* sum[i] += w[i], or sum[i] = w[i] when start (cpu_swa_add: the first snapshot is a copy). */
int cuda_swa_add(float *sum, const float *w, size_t n, int start, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
