/* cuda_gemm.cu — row-major matrix products on cuBLAS (cublasGemmEx and its strided-batched form,
 * CUBLAS_COMPUTE_32F) and the cuBLAS handle setup (see cuda_gemm.h); the pair of cpu_gemm.c. The
 * bias-free linear layer built on them is cuda_linear.cu.
 *
 * Row-major to column-major: a row-major C[M,N] is the column-major C^T [N,M], and
 * C^T = op(B)^T op(A)^T, so the row-major product is one column-major GEMM with the operands
 * swapped: m = N, n = M, first operand B (transposed iff trans_b), second A (iff trans_a), the
 * leading dimensions unchanged. */
#include <stdio.h>

#include "cuda_common.cuh"
#include "cuda_gemm.h"

static cudaDataType_t data_type(int t) { return t == CT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* The checks both entry points make; 0 if the product can be issued. */
static int check_gemm(int M, int N, int K, int a_type, int b_type, int c_type) {
    if (a_type != b_type || (a_type == CT_F32 && c_type != CT_F32))
        return ct_fail("cuda_gemm: unsupported type combination A %d, B %d, C %d", a_type, b_type, c_type);
    if (K <= 0) {
        /* an empty sum: C = beta * C, which cuBLAS does not promise for k = 0 */
        return ct_fail("cuda_gemm: K must be positive (M %d, N %d, K %d)", M, N, K);
    }
    return 0;
}

static int gemm_failed(cublasStatus_t st, const char *call, int M, int N, int K, int trans_a, int trans_b, int a_type,
                       int b_type, int c_type, int batch) {
    char what[192];
    snprintf(what, sizeof what, "%s (M %d, N %d, K %d, trans %d/%d, types %d/%d/%d, batch %d)", call, M, N, K, trans_a,
             trans_b, a_type, b_type, c_type, batch);
    return cuda_check_cublas(st, what);
}

extern "C" int cuda_gemm(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const void *A, int a_type, int lda, const void *B, int b_type, int ldb, float beta, void *C,
                         int c_type, int ldc) {
    if (M <= 0 || N <= 0) return 0;
    if (check_gemm(M, N, K, a_type, b_type, c_type) != 0) return -1;
    cublasStatus_t st = cublasGemmEx(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     N, M, K, &alpha, B, data_type(b_type), ldb, A, data_type(a_type), lda, &beta, C,
                                     data_type(c_type), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return gemm_failed(st, "cublasGemmEx", M, N, K, trans_a, trans_b, a_type, b_type, c_type, 1);
    return 0;
}

extern "C" int cuda_gemm_batched(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha,
                                 const void *A, int a_type, int lda, long long stride_a, const void *B, int b_type,
                                 int ldb, long long stride_b, float beta, void *C, int c_type, int ldc,
                                 long long stride_c, int batch) {
    if (M <= 0 || N <= 0 || batch <= 0) return 0;
    if (check_gemm(M, N, K, a_type, b_type, c_type) != 0) return -1;
    /* the row-major to column-major swap of cuda_gemm, batch by batch */
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
        data_type(b_type), ldb, stride_b, A, data_type(a_type), lda, stride_a, &beta, C, data_type(c_type), ldc,
        stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return gemm_failed(st, "cublasGemmStridedBatchedEx", M, N, K, trans_a, trans_b, a_type, b_type, c_type, batch);
    return 0;
}

extern "C" int cuda_blas_create(cublasHandle_t *out, cudaStream_t stream, void *workspace, size_t workspace_bytes) {
    cublasHandle_t h = NULL;
    if (cuda_check_cublas(cublasCreate(&h), "cublasCreate") != 0) return -1;
    /* cublasSetStream resets the workspace to cuBLAS's own pool, so it comes first. */
    if (cuda_check_cublas(cublasSetStream(h, stream), "cublasSetStream") != 0 ||
        (workspace && cuda_check_cublas(cublasSetWorkspace(h, workspace, workspace_bytes), "cublasSetWorkspace") != 0) ||
        cuda_check_cublas(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                               CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                          "cublasSetMathMode") != 0 ||
        cuda_check_cublas(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode") != 0 ||
        cuda_check_cublas(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode") != 0) {
        cublasDestroy(h);
        return -1;
    }
    *out = h;
    return 0;
}
