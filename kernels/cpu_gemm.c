/* cpu_gemm.c — cpu_sgemm: the matrix product every CPU op uses, cblas_sgemm over a fixed grid
 * of output tiles so that the result bits do not depend on the OpenMP thread count.
 *
 * Why not plain cblas_sgemm: OpenBLAS (0.3.21, measured) gives different bits with 1, 2 or 3
 * threads for the same call, because the thread split of M/N moves where its micro-kernel's edge
 * tiles fall, and its one-thread and threaded drivers block K differently. Here the split is
 * ours and depends on the shapes only; inside our parallel region OpenBLAS runs each tile on one
 * thread (it checks omp_in_parallel). Measured on 2 cores: ~90-110% of OpenBLAS's own threading. */
#include <cblas.h>
#include <stddef.h>

#include "cpu_ops.h"

/* 128x128 keeps packing overhead near 1% of the flops and still gives 16 tiles to a 512x512
 * weight gradient. Changing these changes result bits (like any change of summation order). */
enum { GEMM_TILE_M = 128, GEMM_TILE_N = 128 };

void cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int tiles_m = (M + GEMM_TILE_M - 1) / GEMM_TILE_M;
    const int tiles_n = (N + GEMM_TILE_N - 1) / GEMM_TILE_N;
    const int tiles = tiles_m * tiles_n;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tiles; t++) {
        const int i0 = (t / tiles_n) * GEMM_TILE_M;
        const int j0 = (t % tiles_n) * GEMM_TILE_N;
        const int m = M - i0 < GEMM_TILE_M ? M - i0 : GEMM_TILE_M;
        const int n = N - j0 < GEMM_TILE_N ? N - j0 : GEMM_TILE_N;
        /* Rows i0.. of op(A) and columns j0.. of op(B), whichever way each is stored. */
        const float *a = trans_a ? A + i0 : A + (size_t)i0 * lda;
        const float *b = trans_b ? B + (size_t)j0 * ldb : B + j0;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    m, n, K, alpha, a, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
    }
}
