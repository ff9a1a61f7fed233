/* cuda_lora.cu — test-time training's LoRA pair for a batch of documents (see cuda_lora.h; the
 * pair of cpu_lora.c): every product is one strided-batched cuBLAS GEMM (cuda_gemm_batched),
 * document b's operands at fixed strides, so a batch of 64 small products is one launch rather
 * than 64. No kernels of its own: the arithmetic is cuBLAS's, bf16 operands, fp32 accumulation. */
#include "cuda_common.cuh"
#include "cuda_gemm.h"
#include "cuda_lora.h"

/* The shape checks every entry point makes; 0 if the products can be issued. */
static int check_lora(const CudaLora *l, const char *what) {
    if (l->docs < 0 || l->T < 0 || l->in < 1 || l->r < 1 || l->out_features < 1)
        return ct_fail("%s: docs %d, T %d must be >= 0 and in %d, r %d, out_features %d >= 1", what, l->docs, l->T,
                       l->in, l->r, l->out_features);
    if ((l->ld_x && l->ld_x < l->in) || (l->ld_out && l->ld_out < l->out_features))
        return ct_fail("%s: ld_x %d must be 0 or >= in %d and ld_out %d 0 or >= out_features %d", what, l->ld_x, l->in,
                       l->ld_out, l->out_features);
    return 0;
}
static int ld_x(const CudaLora *l) { return l->ld_x ? l->ld_x : l->in; }
static int ld_out(const CudaLora *l) { return l->ld_out ? l->ld_out : l->out_features; }

extern "C" int cuda_lora_h(cublasHandle_t handle, const CudaLora *l, ct_bf16 *h, const ct_bf16 *x) {
    if (check_lora(l, "cuda_lora_h") != 0) return -1;
    if (l->docs == 0 || l->T == 0) return 0;
    const int T = l->T, in = l->in, r = l->r, lx = ld_x(l);
    /* h_b [T,r] = x_b [T,in] A_b^T, rounded to bf16 once (it only feeds products) */
    if (cuda_gemm_batched(handle, 0, 1, T, r, in, 1.0f, x, CT_BF16, lx, (long long)T * lx, l->A, CT_BF16, in,
                          l->a_stride, 0.0f, h, CT_BF16, r, (long long)T * r, l->docs) != 0)
        return ct_fail_prefix("lora forward (h = x A^T)");
    return 0;
}

extern "C" int cuda_lora_forward(cublasHandle_t handle, const CudaLora *l, void *out, ct_bf16 *h, const ct_bf16 *x) {
    if (check_lora(l, "cuda_lora_forward") != 0) return -1;
    if (l->out_type != CT_F32 && l->out_type != CT_BF16)
        return ct_fail("cuda_lora_forward: out_type %d must be CT_F32 or CT_BF16", l->out_type);
    if (l->docs == 0 || l->T == 0) return 0;
    const int T = l->T, r = l->r, of = l->out_features, lo = ld_out(l);
    if (cuda_lora_h(handle, l, h, x) != 0) return -1;
    /* out_b [T,out] += s * h_b B_b^T (s as the product's alpha, as cpu_lora_forward; a bf16 out
     * is read, added to in the fp32 accumulator and rounded once) */
    if (cuda_gemm_batched(handle, 0, 1, T, of, r, l->s, h, CT_BF16, r, (long long)T * r, l->B, CT_BF16, r,
                          l->b_stride, 1.0f, out, l->out_type, lo, (long long)T * lo, l->docs) != 0)
        return ct_fail_prefix("lora forward (out += s h B^T)");
    return 0;
}

extern "C" int cuda_lora_backward_h(cublasHandle_t handle, const CudaLora *l, float *dx, float *dA, const ct_bf16 *dh,
                                    const ct_bf16 *x) {
    if (check_lora(l, "cuda_lora_backward_h") != 0) return -1;
    if (l->docs == 0 || l->T == 0) return 0;
    const int T = l->T, in = l->in, r = l->r, lx = ld_x(l);
    /* dA_b [r,in] += dh_b^T x_b: the sum over the document's tokens is cuBLAS's K loop */
    if (cuda_gemm_batched(handle, 1, 0, r, in, T, 1.0f, dh, CT_BF16, r, (long long)T * r, x, CT_BF16, lx,
                          (long long)T * lx, 1.0f, dA, CT_F32, in, l->a_stride, l->docs) != 0)
        return ct_fail_prefix("lora backward (dA += dh^T x)");
    /* dx_b [T,in] += dh_b A_b */
    if (dx && cuda_gemm_batched(handle, 0, 0, T, in, r, 1.0f, dh, CT_BF16, r, (long long)T * r, l->A, CT_BF16, in,
                                l->a_stride, 1.0f, dx, CT_F32, lx, (long long)T * lx, l->docs) != 0)
        return ct_fail_prefix("lora backward (dx += dh A)");
    return 0;
}

extern "C" int cuda_lora_backward(cublasHandle_t handle, const CudaLora *l, float *dx, float *dA, float *dB,
                                  ct_bf16 *dh, const ct_bf16 *dout, const ct_bf16 *x, const ct_bf16 *h) {
    if (check_lora(l, "cuda_lora_backward") != 0) return -1;
    if (l->docs == 0 || l->T == 0) return 0;
    const int T = l->T, r = l->r, of = l->out_features, lo = ld_out(l);
    /* dh_b [T,r] = s * dout_b B_b, rounded to bf16 once (it feeds dA's and dx's products) */
    if (cuda_gemm_batched(handle, 0, 0, T, r, of, l->s, dout, CT_BF16, lo, (long long)T * lo, l->B, CT_BF16, r,
                          l->b_stride, 0.0f, dh, CT_BF16, r, (long long)T * r, l->docs) != 0)
        return ct_fail_prefix("lora backward (dh = s dout B)");
    /* dB_b [out,r] += s * dout_b^T h_b */
    if (cuda_gemm_batched(handle, 1, 0, of, r, T, l->s, dout, CT_BF16, lo, (long long)T * lo, h, CT_BF16, r,
                          (long long)T * r, 1.0f, dB, CT_F32, r, l->b_stride, l->docs) != 0)
        return ct_fail_prefix("lora backward (dB += s dout^T h)");
    return cuda_lora_backward_h(handle, l, dx, dA, dh, x);
}
