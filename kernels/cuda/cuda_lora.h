/* cuda_lora.h — test-time training's low-rank adapters (LoRA) for many documents at once
 * (cuda_lora.cu), the pair of cpu_lora.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h.
 *
 * A batch of `docs` documents, one row-block of T tokens each (document b's rows are
 * b*T .. b*T+T-1 of x, out, h), each with its own adapter A_b [r,in] and B_b [out,r] at a fixed
 * stride in one buffer. Per document, as cpu_lora_forward / cpu_lora_backward:
 *   forward   h_b = x_b A_b^T (written);  out_b += s * h_b B_b^T
 *   backward  dh_b = s * dout_b B_b (written);  dB_b += s * dout_b^T h_b;
 *             dA_b += dh_b^T x_b;  dx_b += dh_b A_b (dx optional)
 * Every product is one cuda_gemm_batched over the documents (one launch for all of them).
 * Precision: the backend's linear layers' rule (cuda_linear.h): bf16 operands, fp32
 * accumulation (CUBLAS_COMPUTE_32F). So x, A, B, dout are bf16 (A, B the caller's bf16 shadows
 * of its fp32 adapters); h and dh, which only feed products, are bf16 (the fp32 accumulator
 * rounded once, as cuda_linear_forward with CT_BF16); out, dx, dA, dB are fp32 and accumulated.
 * A document's result does not depend on the other documents' values; it may depend on `docs`
 * (cuBLAS may pick another kernel for another batch count). Documents to leave out of a
 * backward (not trained) are left out by the caller, who passes a contiguous range. */
#ifndef CT_CUDA_LORA_H
#define CT_CUDA_LORA_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int docs, T;             /* documents, tokens (rows) per document */
    int in, r, out_features; /* A_b [r,in], B_b [out_features,r] */
    float s;                 /* the adapter's scale */
    const ct_bf16 *A, *B;    /* document b's adapter at A + b*a_stride, B + b*b_stride (elements) */
    long long a_stride, b_stride;
    int ld_x;   /* elements between rows of x (and dx): >= in; 0 = in */
    int ld_out; /* elements between rows of out (and dout): >= out_features; 0 = out_features (an
                   adapter on one part of a fused [q | k | v] row: out points at its columns) */
    /* the forward's out: CT_F32 (0, the default) or CT_BF16, a bf16 projection output the
     * backend keeps (its fused [q | k | v] rows, attn.proj's and mlp.proj's): out = bf16(out +
     * s * h B^T), the sum formed in fp32 by the product (beta 1) and rounded once */
    int out_type;
} CudaLora;

/* h [docs*T, r] (bf16, written) = x A^T; out [docs*T, ld_out] (fp32, or bf16 with out_type
 * CT_BF16) += s * h B^T. */
int cuda_lora_forward(cublasHandle_t handle, const CudaLora *l, void *out, ct_bf16 *h, const ct_bf16 *x);
/* The forward's first product alone, h = x A^T (the same call, so the same bits): a backward
 * that did not keep h makes it again. B, b_stride, out_features and s are not read. */
int cuda_lora_h(cublasHandle_t handle, const CudaLora *l, ct_bf16 *h, const ct_bf16 *x);
/* Given dout = dL/d(out) (bf16) and the forward's x and h: dh [docs*T, r] (bf16, written, the
 * caller's scratch) = s * dout B; dB (fp32, at the stride of B) += s * dout^T h; then
 * cuda_lora_backward_h. */
int cuda_lora_backward(cublasHandle_t handle, const CudaLora *l, float *dx, float *dA, float *dB, ct_bf16 *dh,
                       const ct_bf16 *dout, const ct_bf16 *x, const ct_bf16 *h);
/* The part through h = x A^T given dh = dL/dh (bf16 [docs*T, r]): dA (fp32, at the stride of
 * A) += dh^T x; dx (fp32 [docs*T, ld_x]) += dh A (dx NULL: not wanted). B, b_stride,
 * out_features and s are not read (the head adapter's dh comes from the logits op). */
int cuda_lora_backward_h(cublasHandle_t handle, const CudaLora *l, float *dx, float *dA, const ct_bf16 *dh,
                         const ct_bf16 *x);

#ifdef __cplusplus
}
#endif

#endif
