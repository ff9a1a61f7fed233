/* cuda_logits.h — tied logits + softcap + cross-entropy, chunked (cuda_logits.cu), the pair
 * of cpu_logits.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h.
 *
 * For chunks of `chunk` tokens: z = x @ W^T (bf16 x [N,C] and W [V,C], fp32 z [chunk,V] in
 * z_scratch), s = softcap*tanh(z/softcap), loss[n] = logsumexp(s) - s[target] (fp32 softmax with
 * max subtraction, row sums in double), as cpu_logits_ce_forward(_backward). Training also forms
 * dz = grad_scale * (softmax - onehot) * (1 - tanh^2), grad_scale = (float)(loss_weight / N),
 * as bf16 in dz_scratch [chunk,V], then dx [N,C] += dz @ W and dW [V,C] += dz^T @ x (fp32).
 * targets [N] device int32, checked on the host. losses [N] (fp32, written). The caller sums
 * the losses with cuda_sum.
 *
 * Test-time training's head adapter (the _lowrank forms, the pair of cpu_logits_ce_lowrank_*):
 * z += s * h B^T before the softcap (one more bf16 GEMM with beta 1 into the chunk's z), and in
 * training dh += s * dz B, dB += s * dz^T h from the same bf16 dz; dW may be NULL there (not
 * computed). lowrank NULL: exactly the plain functions. */
#ifndef CT_CUDA_LOGITS_H
#define CT_CUDA_LOGITS_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t cuda_logits_z_floats(int chunk, int V);     /* z_scratch */
size_t cuda_logits_dz_elems(int chunk, int V);     /* dz_scratch (bf16 elements) */
/* One call's tensors and shape (training adds its own below). */
typedef struct {
    float *losses;          /* [N], written */
    const ct_bf16 *x, *W;   /* [N,C] the final norm's output, [V,C] the output layer */
    const int32_t *targets; /* [N] */
    int N, C, V;
    float softcap;
    float *z_scratch; /* cuda_logits_z_floats(chunk, V) */
    int chunk;        /* tokens per chunk */
} CudaLogits;
/* Training: also dx += dz @ W, dW += dz^T @ x, dz through dz_scratch (cuda_logits_dz_elems). */
int cuda_logits_ce_forward_backward(cublasHandle_t handle, const CudaLogits *a, float *dx, float *dW, float loss_weight,
                                    ct_bf16 *dz_scratch, cudaStream_t stream);
int cuda_logits_ce_forward(cublasHandle_t handle, const CudaLogits *a, cudaStream_t stream);

/* The head adapter: h [N,r] = the adapter's x A^T (bf16, as cuda_lora_forward writes it), B [V,r]
 * (bf16 shadow); dh [N,r] and dB [V,r] fp32, accumulated, each skipped when NULL (dh then goes
 * to cuda_lora_backward_h through cuda_f32_to_bf16). */
typedef struct {
    const ct_bf16 *h, *B;
    float s;
    int r;
    float *dh, *dB; /* training only */
} CudaLogitsLowRank;
int cuda_logits_ce_lowrank_forward(cublasHandle_t handle, const CudaLogits *a, const CudaLogitsLowRank *lowrank,
                                   cudaStream_t stream);
/* dx is required; dW may be NULL (skipped). */
int cuda_logits_ce_lowrank_forward_backward(cublasHandle_t handle, const CudaLogits *a,
                                            const CudaLogitsLowRank *lowrank, float *dx, float *dW, float loss_weight,
                                            ct_bf16 *dz_scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
