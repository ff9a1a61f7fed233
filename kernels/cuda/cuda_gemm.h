/* cuda_gemm.h — row-major matrix products on cuBLAS (cuda_gemm.cu): cuda_gemm, its strided-batched
 * form and the handle setup.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_GEMM_H
#define CT_CUDA_GEMM_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C with op(A) [M,K] and op(B) [K,N]
 * (trans_a: A is stored [K,M]; trans_b: B is stored [N,K]), cublasGemmEx with
 * CUBLAS_COMPUTE_32F. Types: A and B both CT_BF16 (fp32 accumulation; C CT_F32 or CT_BF16) or
 * both CT_F32 (true fp32, no TF32; C CT_F32). beta 0 overwrites C. The handle's stream is used
 * (cuda_blas_create sets it). Deterministic for a given GPU model, shapes and handle setup. */
int cuda_gemm(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
              int a_type, int lda, const void *B, int b_type, int ldb, float beta, void *C, int c_type, int ldc);
/* `batch` such products at once (cublasGemmStridedBatchedEx): product b reads A + b*stride_a,
 * B + b*stride_b and writes C + b*stride_c (strides in elements). For many small products of
 * one shape (Muon's Newton–Schulz), where one launch per product would cost more than the
 * arithmetic. Deterministic like cuda_gemm for a given batch count. */
int cuda_gemm_batched(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                      int a_type, int lda, long long stride_a, const void *B, int b_type, int ldb, long long stride_b,
                      float beta, void *C, int c_type, int ldc, long long stride_c, int batch);

/* A cuBLAS handle bound to `stream`, with `workspace` (device, workspace_bytes, e.g. 32 MiB) as
 * its only workspace (so cuBLAS allocates nothing later) and reduced-precision split-K
 * reductions disallowed. */
int cuda_blas_create(cublasHandle_t *out, cudaStream_t stream, void *workspace, size_t workspace_bytes);

#ifdef __cplusplus
}
#endif

#endif
