/* bench_cpu_muon.c — times cpu_newton_schulz5 (5 steps, the Muon default) on 512x512 and 1024x512
 * and prints ms per call and GFLOP/s, next to the same iteration written with whole-matrix
 * cblas_sgemm calls (OpenBLAS's own threading: faster or slower, but its bits change with the
 * thread count, which is why cpu_newton_schulz5 does not do that).
 * Usage: bench_cpu_muon [repeats]   (threads: OMP_NUM_THREADS)
 *
 * FLOPs counted per Newton–Schulz step, with m = min(rows, cols), n = max(rows, cols):
 *   A = X X^T      [m,n] x [n,m]   2*m*m*n
 *   A A            [m,m] x [m,m]   2*m*m*m
 *   B X            [m,m] x [m,n]   2*m*m*n
 * i.e. 4*m*m*n + 2*m^3 per step, the products as dense GEMMs (512x512: 0.805 GFLOP per step).
 * cpu_newton_schulz5 computes the two symmetric products (X X^T, A A) only on and below the diagonal
 * and mirrors them, so it executes about (3*m*m*n + m^3) of these; the GFLOP/s printed are
 * "dense-GEMM-equivalent" so that both variants are measured against the same work. The
 * element-wise work (normalisation, copies, transposes: O(m*n) per step) is not counted. */
#include "cpu_optim.h"
#include "refcheck.h"

#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void *checked_malloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_cpu_muon: out of memory\n");
        exit(1);
    }
    return p;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_ms(double *ms, int n) {
    qsort(ms, (size_t)n, sizeof(double), compare_doubles);
    return ms[n / 2];
}

/* The plain version for comparison: whole-matrix cblas_sgemm, OpenBLAS threads them itself.
 * Wide matrices only (rows <= cols), which is all the comparison needs. */
static void newton_schulz5_plain_blas(const float *G, float *X, int m, int n, int steps,
                                      float *scratch) {
    const size_t mn = (size_t)m * n, mm = (size_t)m * m;
    float *x_next = scratch, *gram = scratch + mn, *poly = gram + mm;
    double sumsq = 0;
    for (size_t i = 0; i < mn; i++) sumsq += (double)G[i] * G[i];
    const float divisor = (float)sqrt(sumsq) + NS5_EPS;
    for (size_t i = 0; i < mn; i++) X[i] = G[i] / divisor;
    for (int s = 0; s < steps; s++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, n, 1.0f, X, n, X, n, 0.0f, gram,
                    m);
        memcpy(poly, gram, mm * sizeof *poly);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, NS5_C, gram, m, gram, m,
                    NS5_B, poly, m);
        memcpy(x_next, X, mn * sizeof *x_next);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f, poly, m, X, n, NS5_A,
                    x_next, n);
        memcpy(X, x_next, mn * sizeof *X);
    }
}

static void bench_shape(int rows, int cols, int repeats) {
    const int steps = 5;
    const size_t n = (size_t)rows * cols;
    const double m = rows < cols ? rows : cols, k = rows < cols ? cols : rows;
    const double flops = steps * (4.0 * m * m * k + 2.0 * m * m * m);
    uint64_t rng = 1234;
    float *G = checked_malloc(n * sizeof(float)), *X = checked_malloc(n * sizeof(float));
    float *buf = checked_malloc(n * sizeof(float)), *p = checked_malloc(n * sizeof(float));
    ref_fill(G, n, -1, 1, &rng);
    ref_fill(buf, n, -0.1, 0.1, &rng);
    ref_fill(p, n, -0.1, 0.1, &rng);
    float *scratch = checked_malloc(cpu_newton_schulz5_scratch_floats(rows, cols) * sizeof(float));
    double *t_ns = checked_malloc(repeats * sizeof(double));
    double *t_plain = checked_malloc(repeats * sizeof(double));
    double *t_muon = checked_malloc(repeats * sizeof(double));
    for (int r = -2; r < repeats; r++) { /* two untimed warm-up rounds */
        double t0 = now_ms();
        cpu_newton_schulz5(G, X, rows, cols, steps, scratch);
        double t1 = now_ms();
        if (rows <= cols) newton_schulz5_plain_blas(G, X, rows, cols, steps, scratch);
        double t2 = now_ms();
        cpu_muon_compute_update(G, buf, X, rows, cols, 0.95, 1, steps, 0, scratch);
        cpu_muon_apply_update(p, X, n, 0.04);
        double t3 = now_ms();
        if (r < 0) continue;
        t_ns[r] = t1 - t0, t_plain[r] = t2 - t1, t_muon[r] = t3 - t2;
    }
    const double ns = median_ms(t_ns, repeats), plain = median_ms(t_plain, repeats);
    const double muon = median_ms(t_muon, repeats);
    printf("  %4dx%-4d cpu_newton_schulz5         %8.3f ms  %7.2f GFLOP/s\n", rows, cols, ns,
           flops / ns * 1e-6);
    if (rows <= cols)
        printf("  %4dx%-4d plain cblas_sgemm NS5  %8.3f ms  %7.2f GFLOP/s  (not deterministic)\n",
               rows, cols, plain, flops / plain * 1e-6);
    printf("  %4dx%-4d muon compute+apply     %8.3f ms\n", rows, cols, muon);
    free(G), free(X), free(buf), free(p), free(scratch), free(t_ns), free(t_plain), free(t_muon);
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 10;
    if (repeats < 1) repeats = 1;
    printf("cpu cpu_newton_schulz5 steps=5 threads=%d repeats=%d (median)\n", omp_get_max_threads(),
           repeats);
    bench_shape(512, 512, repeats);
    bench_shape(1024, 512, repeats);
    bench_shape(512, 1024, repeats);
    return 0;
}
