/* bench_sgemm.c — the CPU's measured matrix-product ceiling: OpenBLAS sgemm with its own
 * threading on large square matrices, and ctrain's deterministic tiled cpu_sgemm on the same
 * sizes. The model benchmark reports achieved GFLOP/s against the first figure. */
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>
#include <omp.h>

#include "common.h"
#include "cpu_ops.h"

static double gflops_of(int n, double ms) { return 2.0 * n * n * (double)n / (ms * 1e6); }

int main(void) {
    const int sizes[] = {1024, 2048};
    printf("sgemm ceiling (%d threads)\n", omp_get_max_threads());
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        float *a = ct_malloc((size_t)n * n * sizeof(float), "a"), *b = ct_malloc((size_t)n * n * sizeof(float), "b"),
              *c = ct_malloc((size_t)n * n * sizeof(float), "c");
        for (size_t i = 0; i < (size_t)n * n; i++) {
            a[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            b[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        }
        double best_blas = 1e30, best_tiled = 1e30;
        for (int rep = 0; rep < 5; rep++) {
            double t = ct_now_ms();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            t = ct_now_ms() - t;
            if (t < best_blas) best_blas = t;
            t = ct_now_ms();
            cpu_sgemm(0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            t = ct_now_ms() - t;
            if (t < best_tiled) best_tiled = t;
        }
        printf("  n=%d  openblas sgemm %.1f GFLOP/s   ctrain cpu_sgemm (deterministic tiles) %.1f GFLOP/s\n", n,
               gflops_of(n, best_blas), gflops_of(n, best_tiled));
        printf("BENCH sgemm_ceiling_n%d_gflops %.2f\n", n, gflops_of(n, best_blas));
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
