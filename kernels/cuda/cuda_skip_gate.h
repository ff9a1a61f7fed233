/* cuda_skip_gate.h — the gated U-Net skip's backward (cuda_skip_gate.cu), the pair of
 * cpu_skip_gate.c; its forward is fused into cuda_mix_norm_forward (cuda_rmsnorm.h, CudaMixNorm's
 * skip_gate). C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_SKIP_GATE_H
#define CT_CUDA_SKIP_GATE_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Backward of x_in = lerp(w * skip, x, g), g = sigmoid(gate) (skip_gates_enabled), given dout =
 * dL/dx_in: dx = g * dout (WRITTEN; dx may be dout: in place), dskip = w * ((1 - g) * dout)
 * (WRITTEN), dw [C] += sum_n ((1 - g) * dout) * skip, dgate [C] += sum_n (g (1 - g) * dout) *
 * (x - w * skip) (cpu_skip_gate_backward's per-element products; partials:
 * cuda_colsum_doubles(N, C, 2), dw's chunks first, then dgate's). dx, dskip, dout, x, skip of
 * type dtype: with CT_BF16, w, the gate and g rounded to bf16 as the forward rounds them, w * skip
 * and (1 - g) * dout rounded as train_gpt.py's bf16 tensors, dx and dskip once where stored. */
typedef struct {
    void *dx;          /* written (may be dout) */
    void *dskip;       /* written */
    float *dw, *dgate; /* [C] += */
    const void *dout, *x, *skip;
    const float *w, *gate;
    double *partials; /* cuda_colsum_doubles(N, C, 2) */
    int N, C;
    int dtype;
} CudaSkipGateBackward;
int cuda_skip_gate_backward(const CudaSkipGateBackward *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
