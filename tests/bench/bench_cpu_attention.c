/* bench_cpu_attention.c — times the CPU attention ops (kernels/cpu/cpu_attention.h) on one
 * baseline-sized shape and prints ms per call and GFLOP/s.
 * Usage: bench_cpu_attention [repeats]   (threads: OMP_NUM_THREADS)
 *
 * FLOPs counted (attention), per visible (query t, key s <= t) pair, P = B*H*T(T+1)/2 pairs:
 *   forward:  S = Q K^T (2*hd) + Y = P V (2*hd)                        = 4*hd*P
 *   backward: dP = dY V^T, dV += P^T dY, dQ += dS K, dK += dS^T Q      = 8*hd*P
 * i.e. only the causal products a perfect kernel would need. Work actually executed is more:
 * the masked part of each 64-row block (~ +25% at T=256), the backward's recomputation of
 * Q K^T (+2*hd*P), and the softmax's exp/scaling (not counted). */
#include "cpu_attention.h"
#include "refcheck.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static float *random_floats(size_t n, uint64_t *rng) {
    float *x = malloc(n * sizeof(float));
    if (!x) {
        fprintf(stderr, "bench_cpu_attention: out of memory\n");
        exit(1);
    }
    ref_fill(x, n, -1, 1, rng);
    return x;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and minimum of the timings (ms); sorts them. On a shared machine the minimum is the
 * better estimate of what the code can do, the median of what it did. */
typedef struct {
    double median, min;
} Timing;

static Timing summarize(double *ms, int n) {
    qsort(ms, (size_t)n, sizeof(double), compare_doubles);
    return (Timing){ms[n / 2], ms[0]};
}

static void print_line(const char *what, Timing t, double flops) {
    printf("  %-28s median %8.3f ms", what, t.median);
    if (flops > 0) printf(" %7.2f GFLOP/s", flops / t.median * 1e-6);
    printf("   min %8.3f ms", t.min);
    if (flops > 0) printf(" %7.2f GFLOP/s", flops / t.min * 1e-6);
    printf("\n");
}

int main(int argc, char **argv) {
    const int B = 4, T = 256, H = 4, KV = 2, hd = 64;
    int repeats = argc > 1 ? atoi(argv[1]) : 20;
    if (repeats < 1) repeats = 1;
    const int threads = omp_get_max_threads();
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;

    uint64_t rng = 42;
    float *q_raw = random_floats(nq, &rng), *k_raw = random_floats(nkv, &rng);
    float *v = random_floats(nkv, &rng), *dy = random_floats(nq, &rng);
    float *gain = random_floats(H, &rng);
    float *q = malloc(nq * sizeof(float)), *k = malloc(nkv * sizeof(float));
    float *y = malloc(nq * sizeof(float));
    float *dq = calloc(nq, sizeof(float)), *dk = calloc(nkv, sizeof(float));
    float *dv = calloc(nkv, sizeof(float)), *dq_raw = calloc(nq, sizeof(float));
    float *dgain = calloc(H, sizeof(float));
    float *cos_t = malloc((size_t)T * hd / 2 * sizeof(float));
    float *sin_t = malloc((size_t)T * hd / 2 * sizeof(float));
    float *stats = malloc(cpu_attention_stats_floats(B, T, H) * sizeof(float));
    size_t n_fwd = cpu_attention_forward_scratch_floats(B, T, H, KV, hd, threads);
    size_t n_bwd = cpu_attention_backward_scratch_floats(B, T, H, KV, hd, threads);
    size_t n_qk = cpu_qk_norm_rope_backward_scratch_floats(B, T, H);
    size_t n_scratch = n_bwd > n_fwd ? n_bwd : n_fwd;
    if (n_qk > n_scratch) n_scratch = n_qk;
    float *scratch = malloc(n_scratch * sizeof(float));
    if (!q || !k || !y || !dq || !dk || !dv || !dq_raw || !dgain || !cos_t || !sin_t || !stats ||
        !scratch) {
        fprintf(stderr, "bench_cpu_attention: out of memory\n");
        return 1;
    }
    cpu_rope_tables_init(cos_t, sin_t, T, hd, 10000.0f);

    double *t_qk_fwd = malloc(repeats * sizeof(double)), *t_qk_bwd = malloc(repeats * sizeof(double));
    double *t_fwd = malloc(repeats * sizeof(double)), *t_bwd = malloc(repeats * sizeof(double));
    for (int r = -2; r < repeats; r++) { /* two untimed warm-up rounds */
        double t0 = now_ms();
        cpu_qk_norm_rope_forward(q, q_raw, gain, cos_t, sin_t, B, T, H, hd, hd);
        cpu_qk_norm_rope_forward(k, k_raw, NULL, cos_t, sin_t, B, T, KV, hd, hd);
        double t1 = now_ms();
        cpu_attention_forward(y, stats, q, k, v, NULL, B, T, H, KV, hd, scratch, n_fwd);
        double t2 = now_ms();
        cpu_attention_backward(dq, dk, dv, dy, q, k, v, NULL, stats, B, T, H, KV, hd, scratch, n_bwd);
        double t3 = now_ms();
        cpu_qk_norm_rope_backward(dq_raw, dgain, dq, q_raw, gain, cos_t, sin_t, B, T, H, hd, hd, scratch);
        double t4 = now_ms();
        if (r < 0) continue;
        t_qk_fwd[r] = t1 - t0, t_fwd[r] = t2 - t1, t_bwd[r] = t3 - t2, t_qk_bwd[r] = t4 - t3;
    }

    double pairs = (double)B * H * T * (T + 1) / 2.0;
    double fwd_flops = 4.0 * hd * pairs, bwd_flops = 8.0 * hd * pairs;
    double *t_both = malloc(repeats * sizeof(double));
    for (int r = 0; r < repeats; r++) t_both[r] = t_fwd[r] + t_bwd[r];
    printf("cpu attention  B=%d T=%d H=%d KV=%d hd=%d threads=%d repeats=%d\n", B, T, H, KV, hd,
           threads, repeats);
    print_line("attention forward", summarize(t_fwd, repeats), fwd_flops);
    print_line("attention backward", summarize(t_bwd, repeats), bwd_flops);
    print_line("attention forward+backward", summarize(t_both, repeats), fwd_flops + bwd_flops);
    print_line("qk_norm_rope forward (q+k)", summarize(t_qk_fwd, repeats), 0);
    print_line("qk_norm_rope backward (q)", summarize(t_qk_bwd, repeats), 0);

    free(q_raw), free(k_raw), free(v), free(dy), free(gain), free(q), free(k), free(y), free(dq);
    free(dk), free(dv), free(dq_raw), free(dgain), free(cos_t), free(sin_t), free(stats);
    free(scratch), free(t_qk_fwd), free(t_qk_bwd), free(t_fwd), free(t_bwd), free(t_both);
    return 0;
}
