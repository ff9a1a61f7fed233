/* bench_gpu_attention.c — times ctrain's tensor-core attention (cuda_attention_forward/backward)
 * on the shapes given, for tests/bench/attention_vs_sdpa.sh, which runs PyTorch's SDPA backends
 * on the same shapes in the same call and prints the ratios.
 * Usage: bench_gpu_attention [repeats] B,H,KV,T,HD[,SEG] ...   (default 20 B64,H8,KV4,T1024,HD64 etc.)
 * SEG > 0: every row cut into segments of SEG tokens (packed documents, seg_start; the last one
 * shorter), e.g. the 1.0611 record's slot 1,8,4,98304,64,2048; 0 or absent: causal whole rows.
 * FLOPs as in bench_gpu_ops: forward 4*hd*P, backward 8*hd*P, P = the visible pairs (B*H*T(T+1)/2
 * causal; the sum of S(S+1)/2 over the segments within segments)
 * (the backward's recomputation of Q K^T is not counted). Median of `repeats` runs timed with
 * CUDA events, after a warm-up; inputs are random (not zeros), rotated over 2 sets so repeats do
 * not run from L2. Lines "BENCH name value" are machine-readable. Without a device: SKIP, exit 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CT_HAVE_CUDA
int main(void) {
    printf("SKIP bench_gpu_attention: this build has no CUDA (nvcc was not found)\n");
    return 0;
}
#else

#define BENCH_PROGRAM "bench_gpu_attention"
#include "bench_gpu.h"

enum { SETS = 2 };

typedef struct {
    int B, H, KV, T, HD, SEG;
    int32_t *seg_start; /* device [B*T], NULL when SEG is 0 */
    ct_bf16 *q[SETS], *k[SETS], *v[SETS], *y[SETS], *dy[SETS];
    float *lse[SETS], *dq, *dk, *scratch;
    ct_bf16 *dv;
} Shape;

static int run(Shape *s, int set, int backward) {
    const CudaAttentionShape shape = {s->B, s->T, s->H, s->KV, s->HD, s->KV * s->HD, s->seg_start};
    if (!backward) return cuda_attention_forward(s->y[set], s->lse[set], s->q[set], s->k[set], s->v[set], &shape, 0);
    const CudaAttentionBackward grads = {s->dq, s->dk, s->dv, s->dy[set], s->q[set], s->k[set], s->v[set], s->y[set],
                                         s->lse[set], s->scratch};
    return cuda_attention_backward(&grads, &shape, 0);
}

static double median_ms(Shape *s, int backward, int repeats) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 3; i++)
        if (run(s, i % SETS, backward) != 0) die("warm-up");
    float *ms = malloc((size_t)repeats * sizeof(float));
    for (int r = 0; r < repeats; r++) {
        cudaEventRecord(e0, 0);
        if (run(s, r % SETS, backward) != 0) die(backward ? "backward" : "forward");
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms[r], e0, e1);
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_gpu_attention: %s\n", cudaGetErrorString(e));
        exit(1);
    }
    qsort(ms, (size_t)repeats, sizeof(float), cmp_float);
    const double med = ms[repeats / 2];
    free(ms);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return med;
}

static void bench_shape(Shape *s, int repeats, uint64_t *rng) {
    const size_t nq = (size_t)s->B * s->T * s->H * s->HD, nkv = (size_t)s->B * s->T * s->KV * s->HD;
    double pairs = (double)s->B * s->H * s->T * (s->T + 1) / 2.0;
    if (s->SEG > 0) {
        const size_t n = (size_t)s->B * s->T;
        int32_t *h = malloc(n * sizeof(int32_t));
        pairs = 0;
        for (size_t i = 0; i < n; i++) {
            const int t = (int)(i % (size_t)s->T);
            h[i] = t - t % s->SEG;
            pairs += (double)s->H * (t - h[i] + 1);
        }
        s->seg_start = dalloc(n * sizeof(int32_t));
        cudaMemcpy(s->seg_start, h, n * sizeof(int32_t), cudaMemcpyHostToDevice);
        free(h);
    }
    for (int i = 0; i < SETS; i++) {
        s->q[i] = drandom_bf16(nq, -1.5, 1.5, rng);
        s->k[i] = drandom_bf16(nkv, -1.5, 1.5, rng);
        s->v[i] = drandom_bf16(nkv, -1, 1, rng);
        s->dy[i] = drandom_bf16(nq, -1, 1, rng);
        s->y[i] = dalloc(nq * 2);
        s->lse[i] = dalloc((size_t)s->B * s->H * s->T * sizeof(float));
        if (run(s, i, 0) != 0) die("forward"); /* y and lse the backward reads */
    }
    s->dq = dalloc(nq * sizeof(float));
    s->dk = dalloc(nkv * sizeof(float));
    s->dv = dalloc(nkv * sizeof(ct_bf16));
    cudaMemset(s->dq, 0, nq * sizeof(float));
    cudaMemset(s->dk, 0, nkv * sizeof(float));
    cudaMemset(s->dv, 0, nkv * sizeof(ct_bf16));
    s->scratch = dalloc(cuda_attention_backward_scratch_floats(s->B, s->T, s->H) * sizeof(float));
    const double fwd = median_ms(s, 0, repeats), bwd = median_ms(s, 1, repeats);
    char name[96];
    int at = snprintf(name, sizeof name, "B%d_H%d_KV%d_T%d_D%d", s->B, s->H, s->KV, s->T, s->HD);
    if (s->SEG > 0) snprintf(name + at, sizeof name - (size_t)at, "_S%d", s->SEG);
    printf("  ctrain %-26s fwd %8.3f ms %7.1f TFLOP/s   bwd %8.3f ms %7.1f TFLOP/s\n", name, fwd,
           4.0 * s->HD * pairs / fwd * 1e-9, bwd, 8.0 * s->HD * pairs / bwd * 1e-9);
    printf("BENCH attn_ctrain_%s_fwd_ms %.4f\nBENCH attn_ctrain_%s_bwd_ms %.4f\n", name, fwd, name, bwd);
    for (int i = 0; i < SETS; i++) {
        cudaFree(s->q[i]), cudaFree(s->k[i]), cudaFree(s->v[i]), cudaFree(s->dy[i]), cudaFree(s->y[i]);
        cudaFree(s->lse[i]);
    }
    cudaFree(s->dq), cudaFree(s->dk), cudaFree(s->dv), cudaFree(s->scratch), cudaFree(s->seg_start);
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP bench_gpu_attention: no CUDA device\n");
        return 0;
    }
    int repeats = 20, first = 1;
    if (argc > 1 && strchr(argv[1], ',') == NULL) {
        repeats = atoi(argv[1]) > 0 ? atoi(argv[1]) : 20;
        first = 2;
    }
    static const char *defaults[] = {"64,8,4,1024,64", "16,12,4,2048,64", "16,8,4,2048,128"};
    const int n_shapes = argc > first ? argc - first : 3;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("== ctrain attention on %s (sm_%d%d), causal, median of %d\n", prop.name, prop.major, prop.minor, repeats);
    uint64_t rng = 11;
    for (int i = 0; i < n_shapes; i++) {
        const char *spec = argc > first ? argv[first + i] : defaults[i];
        Shape s = {0};
        const int n_read = sscanf(spec, "%d,%d,%d,%d,%d,%d", &s.B, &s.H, &s.KV, &s.T, &s.HD, &s.SEG);
        if (n_read < 5 || s.B <= 0 || s.H <= 0 || s.KV <= 0 || s.T <= 0 || s.SEG < 0 ||
            !cuda_attention_supported(s.HD) || s.H % s.KV != 0) {
            fprintf(stderr, "bench_gpu_attention: shape '%s': expected B,H,KV,T,HD[,SEG] with H a multiple of KV, HD "
                            "32, 64 or 128 and SEG >= 0\n", spec);
            return 2;
        }
        bench_shape(&s, repeats, &rng);
    }
    return 0;
}

#endif
