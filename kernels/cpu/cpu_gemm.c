/* cpu_gemm.c — cpu_sgemm: the matrix product every CPU op uses, cblas_sgemm over a grid of output
 * tiles chosen from the shapes alone, so that the result bits do not depend on the OpenMP
 * thread count.
 *
 * Why not plain cblas_sgemm: OpenBLAS (0.3.21, measured) gives different bits with 1, 2 or 3
 * threads for the same call, because the thread split of M/N moves where its micro-kernel's edge
 * tiles fall, and its one-thread and threaded drivers block K differently. Here the split is
 * ours and depends on the shapes only; inside our parallel region OpenBLAS runs each tile on one
 * thread (the OpenMP build checks omp_in_parallel). */
#include <cblas.h>
#include <stddef.h>

#include "cpu_blas.h"
#include "cpu_ops.h"

/* Tiles are GEMM_TILE_N columns wide (the model's activations are 128 to 1024 features wide: one
 * or two columns of tiles, so each row block of A is packed once or twice) and GEMM_TILE_M rows
 * high, halved down to GEMM_MIN_TILE_M while the grid has fewer than GEMM_MIN_TILES tiles so
 * that the small weight-gradient products still occupy several threads. Measured on the
 * benchmark model (2 cores): these train about 10% faster than the former fixed 128x128 tiles,
 * which packed every row block of A once per 128 columns. Changing any of these changes result
 * bits (like any change of summation order), never their independence from the thread count. */
enum { GEMM_TILE_M = 128, GEMM_TILE_N = 512, GEMM_MIN_TILE_M = 32, GEMM_MIN_TILES = 8 };

void cpu_blas_prepare(void) {
    /* The OpenMP build already runs single-threaded inside our parallel loops (and its
     * openblas_set_num_threads would change OpenMP's own thread count). The pthreads build does
     * not know about our loops: every tile would start its thread pool on top of ours, measured
     * 9x slower on 2 cores. Results are the same bits either way: each tile is computed by the
     * same single-threaded kernel. */
    if (openblas_get_parallel() == 1) openblas_set_num_threads(1);
}

void cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int tiles_n = (N + GEMM_TILE_N - 1) / GEMM_TILE_N;
    int tile_m = GEMM_TILE_M;
    while (tile_m > GEMM_MIN_TILE_M && ((M + tile_m - 1) / tile_m) * tiles_n < GEMM_MIN_TILES) tile_m /= 2;
    const int tiles_m = (M + tile_m - 1) / tile_m;
    const int tiles = tiles_m * tiles_n;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tiles; t++) {
        const int i0 = (t / tiles_n) * tile_m;
        const int j0 = (t % tiles_n) * GEMM_TILE_N;
        const int m = M - i0 < tile_m ? M - i0 : tile_m;
        const int n = N - j0 < GEMM_TILE_N ? N - j0 : GEMM_TILE_N;
        /* Rows i0.. of op(A) and columns j0.. of op(B), whichever way each is stored. */
        const float *a = trans_a ? A + i0 : A + (size_t)i0 * lda;
        const float *b = trans_b ? B + (size_t)j0 * ldb : B + j0;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    m, n, K, alpha, a, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
    }
}

/* Symmetric results (Newton-Schulz's X X^T and A A): square tiles, so that "the tiles on and
 * below the diagonal" is well defined; only those are computed (half the work) and the strict
 * upper triangle is copied from the lower one, which leaves C exactly symmetric. */
enum { GEMM_SYMMETRIC_TILE = 128 };

void cpu_sgemm_symmetric(int trans_b, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc) {
    if (M <= 0) return;
    const int tiles_side = (M + GEMM_SYMMETRIC_TILE - 1) / GEMM_SYMMETRIC_TILE;
    const int tiles = tiles_side * tiles_side;
    #pragma omp parallel for schedule(dynamic, 1)
    for (int t = 0; t < tiles; t++) {
        const int ti = t / tiles_side, tj = t % tiles_side;
        if (tj > ti) continue;
        const int i0 = ti * GEMM_SYMMETRIC_TILE, j0 = tj * GEMM_SYMMETRIC_TILE;
        const int m = M - i0 < GEMM_SYMMETRIC_TILE ? M - i0 : GEMM_SYMMETRIC_TILE;
        const int n = M - j0 < GEMM_SYMMETRIC_TILE ? M - j0 : GEMM_SYMMETRIC_TILE;
        const float *b = trans_b ? B + (size_t)j0 * ldb : B + j0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, K, alpha,
                    A + (size_t)i0 * lda, lda, b, ldb, beta, C + (size_t)i0 * ldc + j0, ldc);
    }
    #pragma omp parallel for schedule(dynamic, 16)
    for (int i = 0; i < M; i++)
        for (int j = i + 1; j < M; j++) C[(size_t)i * ldc + j] = C[(size_t)j * ldc + i];
}
