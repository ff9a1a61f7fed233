/* cuda_residual_mix.h — the residual mix's backward (cuda_residual_mix.cu), the pair of
 * cpu_residual_mix.c; its forward is fused into cuda_mix_norm_forward (cuda_rmsnorm.h).
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_RESIDUAL_MIX_H
#define CT_CUDA_RESIDUAL_MIX_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backward of out = mix[0]*x + mix[1]*x0: dx (+= when dx_accumulate, else =) mix[0]*dout (the
 * backend writes: the block's input gradient starts here); dx0 += mix[1]*dout;
 * dmix [2,C] += (sum_n dout*x ; sum_n dout*x0). dx, dx0, dout, x, x0 of type dtype, with the
 * rounding points of cuda_rmsnorm.h (CT_BF16: mix rounded to bf16 first, dx and dx0 rounded
 * once where stored). */
typedef struct {
    void *dx;
    int dx_accumulate;
    void *dx0;  /* += */
    float *dmix; /* += */
    const void *dout, *x, *x0;
    const float *mix;
    double *partials; /* cuda_colsum_doubles(N, C, 2) */
    int N, C;
    int dtype;
} CudaResidualMixBackward;
int cuda_residual_mix_backward(const CudaResidualMixBackward *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
