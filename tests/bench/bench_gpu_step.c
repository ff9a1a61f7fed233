/* bench_gpu_step.c — full training steps of the CUDA backend (forward + backward over every
 * micro-batch of a step, then the optimizer), on random tokens, for two shapes:
 *   small:    the CPU benchmark model (4 x 256, heads 4/2, T 256, vocab 1024, 16384 tokens per
 *             step in 8 micro-batches), comparable with `make bench`'s ctrain figure;
 *   baseline: train_gpt.py's model and batch (9 x 512, heads 8/4, T 1024, vocab 1024,
 *             524288 tokens per step in 8 micro-batches of 64 sequences);
 *   wide:     12 x 768, heads 12/4, T 2048, the same batch (8 micro-batches of 32 sequences).
 * Prints ms per step (median over the timed steps, after one warm-up step), tokens/s, the
 * model FLOP rate (docs/model.md's count), MFU against the bf16 matrix-product rate measured in
 * the same run (cuBLAS, 8192^3, best of 10), the device's copy rate (cudaMemcpy, 1 GiB) and the
 * backend's memory report. With CT_PROFILE_LAST_STEP=1 the last step runs between
 * cudaProfilerStart and cudaProfilerStop, so that `ncu --profile-from-start off` profiles exactly
 * one whole step (tests/bench/step_profile.sh); the timings of such a run mean nothing.
 * Usage: bench_gpu_step [steps] [small|baseline|wide|both|all] [key=value ...]   (defaults 5, both =
 * small and baseline; key=value pairs set configuration keys in every run, e.g. cuda_graph=0 to
 * time the micro-batches launch by launch against the default CUDA graph)
 * Without a CUDA device (or a build without CUDA) it prints SKIP and exits 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CT_HAVE_CUDA
int main(void) {
    printf("SKIP bench_gpu_step: this build has no CUDA (nvcc was not found)\n");
    return 0;
}
#else

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "backend.h"
#include "backend_cuda.h"
#include "common.h"
#include "config.h"
#include "cpu_optim.h"
#include "refcheck.h"

#define BENCH_PROGRAM "bench_gpu_step"
#include "bench_gpu.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double peak_tflops; /* measured bf16 matrix-product rate, TFLOP/s */

/* The fastest of 10 runs of op(arg) on the default stream, in ms, after one that warms up. */
static double best_of_10_ms(int (*op)(void *), void *arg, const char *what) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 1e30;
    for (int r = 0; r < 11; r++) {
        cudaEventRecord(e0, 0);
        if (op(arg) != 0) die(what);
        cudaEventRecord(e1, 0);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return best;
}

typedef struct {
    cublasHandle_t h;
    int n;
    const ct_bf16 *a, *b;
    float *c;
} PeakGemm;

static int peak_gemm(void *arg) {
    const PeakGemm *g = arg;
    return cuda_gemm(g->h, 0, 1, g->n, g->n, g->n, 1.0f, g->a, CT_BF16, g->n, g->b, CT_BF16, g->n, 0.0f, g->c, CT_F32,
                     g->n);
}

/* cuBLAS bf16 x bf16 -> fp32, 8192^3 on uniform random operands, best of 10: the ceiling MFU is
 * stated against (constant operands would run ~10% faster: less switching power). */
static double measure_peak(void) {
    const int n = 8192;
    uint64_t rng = 5;
    ct_bf16 *a = drandom_bf16((size_t)n * n, -1, 1, &rng), *bm = drandom_bf16((size_t)n * n, -1, 1, &rng);
    float *c = dalloc((size_t)n * n * sizeof(float));
    void *ws = dalloc(32 << 20);
    PeakGemm g = {NULL, n, a, bm, c};
    if (cuda_blas_create(&g.h, 0, ws, 32 << 20) != 0) die("cuda_blas_create");
    const double best = best_of_10_ms(peak_gemm, &g, "gemm");
    cublasDestroy(g.h);
    cudaFree(a), cudaFree(bm), cudaFree(c), cudaFree(ws);
    return 2.0 * n * n * (double)n / (best * 1e-3) * 1e-12;
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} DeviceCopy;

static int device_copy(void *arg) {
    const DeviceCopy *c = arg;
    const cudaError_t e = cudaMemcpyAsync(c->dst, c->src, c->bytes, cudaMemcpyDeviceToDevice, 0);
    return e == cudaSuccess ? 0 : ct_fail("%zu bytes: %s", c->bytes, cudaGetErrorString(e));
}

/* Device-to-device cudaMemcpy of 1 GiB, best of 10, in TB/s of bytes read plus written: the
 * memory rate the per-op floors of step_profile.sh are stated against. */
static double measure_copy_rate(void) {
    DeviceCopy c = {dalloc((size_t)1 << 30), NULL, (size_t)1 << 30};
    void *src = dalloc(c.bytes);
    cudaMemset(src, 1, c.bytes);
    c.src = src;
    const double best = best_of_10_ms(device_copy, &c, "cudaMemcpyAsync");
    cudaFree(src), cudaFree(c.dst);
    return 2.0 * (double)c.bytes / (best * 1e-3) * 1e-12;
}

static char **overrides; /* key=value from the command line, set in every run */
static int n_overrides;

static void run(const char *label, const char *const kv[][2], size_t n_kv, int steps) {
    Config cfg;
    config_init(&cfg);
    for (size_t i = 0; i < n_kv; i++)
        if (config_set(&cfg, kv[i][0], kv[i][1], 2, "bench") != 0) {
            ct_print_error();
            exit(1);
        }
    config_set(&cfg, "train_files", "unused", 2, "bench");
    if (config_apply_args(&cfg, n_overrides, overrides) != 0) {
        fprintf(stderr, "bench_gpu_step: %s\n", ct_error());
        exit(2);
    }
    TrainState st;
    Backend *b = NULL;
    if (train_state_init(&st, &cfg) != 0 || backend_cuda_create(&b, &cfg, &st) != 0) {
        fprintf(stderr, "bench_gpu_step (%s): %s\n", label, ct_error());
        exit(1);
    }
    char desc[512];
    backend_cuda_describe(b, desc, sizeof desc);
    const int accum = (int)cfg.grad_accum_slots;
    const size_t span = (size_t)b->micro_batch_seqs * b->seq_len + 1;
    uint32_t *tok = malloc(span * sizeof(uint32_t));
    uint64_t rng = 99;
    double *ms = malloc((size_t)steps * sizeof(double)), loss = 0;
    const char *profile_env = getenv("CT_PROFILE_LAST_STEP");
    const int profile = profile_env && !strcmp(profile_env, "1");
    for (int s = 0; s <= steps; s++) {
        if (profile && s == steps && (cudaDeviceSynchronize() != cudaSuccess || cudaProfilerStart() != cudaSuccess))
            die("cudaProfilerStart");
        const double t0 = ct_now_ms();
        for (int m = 0; m < accum; m++) {
            for (size_t i = 0; i < span; i++) tok[i] = (uint32_t)(ref_rand01(&rng) * cfg.vocab_size) % (uint32_t)cfg.vocab_size;
            if (b->forward_backward(b, tok, 1.0f / accum, &loss) != 0) {
                fprintf(stderr, "bench_gpu_step (%s): %s\n", label, ct_error());
                exit(1);
            }
        }
        StepHyper h = {.token_lr = cfg.tied_embed_lr, .head_lr = cfg.head_lr, .matrix_lr = cfg.matrix_lr,
                       .scalar_lr = cfg.scalar_lr, .muon_momentum = cfg.muon_momentum,
                       .muon_steps = (int)cfg.muon_backend_steps, .beta1 = cfg.beta1, .beta2 = cfg.beta2,
                       .adam_eps = cfg.adam_eps, .grad_clip_norm = 0};
        double gn;
        if (b->optimizer_step(b, &h, &gn) != 0) {
            fprintf(stderr, "bench_gpu_step (%s): %s\n", label, ct_error());
            exit(1);
        }
        if (s > 0) ms[s - 1] = ct_now_ms() - t0; /* step 0 warms up */
    }
    if (profile && (cudaDeviceSynchronize() != cudaSuccess || cudaProfilerStop() != cudaSuccess)) die("cudaProfilerStop");
    qsort(ms, (size_t)steps, sizeof(double), cmp_double);
    const double med = ms[steps / 2];
    const double tokens = (double)cfg.train_batch_tokens;
    const double flops = model_train_flops_per_token(&st.spec, (int)cfg.train_seq_len);
    printf("== %s: %s\n", label, desc);
    const double tflops = tokens / (med / 1000.0) * flops * 1e-12;
    printf("  %.1f ms/step  %.0f tokens/s  %.1f model TFLOP/s  MFU %.1f%% of %.0f  (last loss %.4f, %d timed steps)\n",
           med, tokens / (med / 1000.0), tflops, 100.0 * tflops / peak_tflops, peak_tflops, loss, steps);
    printf("BENCH gpu_%s_step_ms %.2f\n", label, med);
    printf("BENCH gpu_%s_tokens_per_s %.0f\n", label, tokens / (med / 1000.0));
    printf("BENCH gpu_%s_model_tflops %.2f\n", label, tflops);
    printf("BENCH gpu_%s_mfu %.4f\n", label, tflops / peak_tflops);
    printf("BENCH gpu_%s_tokens_per_step %.0f\n", label, tokens);
    printf("BENCH gpu_%s_flops_per_token %.0f\n", label, flops);
    printf("BENCH gpu_%s_attention_flops_per_token %.0f\n", label,
           model_attention_flops_per_token(&st.spec, (int)cfg.train_seq_len));
    long long captures, launches;
    backend_cuda_graph_counts(b, &captures, &launches);
    printf("  CUDA graph (cuda_graph = %lld): %lld captures, %lld of %d micro-batches launched as the graph\n",
           (long long)cfg.cuda_graph, captures, launches, (steps + 1) * accum);
    b->destroy(b);
    train_state_free(&st);
    config_free(&cfg);
    free(tok);
    free(ms);
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP bench_gpu_step: no CUDA device\n");
        return 0;
    }
    int steps = argc > 1 && atoi(argv[1]) > 0 ? atoi(argv[1]) : 5;
    const char *which = argc > 2 ? argv[2] : "both";
    overrides = argv + 3;
    n_overrides = argc > 3 ? argc - 3 : 0;
    static const char *const small[][2] = {{"vocab_size", "1024"},       {"num_layers", "4"},
                                           {"model_dim", "256"},         {"num_heads", "4"},
                                           {"num_kv_heads", "2"},        {"train_seq_len", "256"},
                                           {"train_batch_tokens", "16384"}, {"grad_accum_slots", "8"}};
    static const char *const baseline[][2] = {{"vocab_size", "1024"}, {"train_batch_tokens", "524288"},
                                              {"grad_accum_slots", "8"}};
    static const char *const wide[][2] = {{"vocab_size", "1024"},          {"num_layers", "12"},
                                          {"model_dim", "768"},           {"num_heads", "12"},
                                          {"num_kv_heads", "4"},          {"train_seq_len", "2048"},
                                          {"train_batch_tokens", "524288"}, {"grad_accum_slots", "8"}};
    const int all = !strcmp(which, "all"), both = !strcmp(which, "both");
    peak_tflops = measure_peak();
    printf("bf16 matrix-product rate (cuBLAS 8192^3, best of 10): %.0f TFLOP/s\n", peak_tflops);
    printf("BENCH gpu_peak_bf16_tflops %.1f\n", peak_tflops);
    const double copy_tbps = measure_copy_rate();
    printf("device copy rate (cudaMemcpy 1 GiB, read + write, best of 10): %.2f TB/s\n", copy_tbps);
    printf("BENCH gpu_copy_tbps %.3f\n", copy_tbps);
    if (!strcmp(which, "small") || both || all) run("small", small, sizeof small / sizeof small[0], steps);
    if (!strcmp(which, "baseline") || both || all)
        run("baseline", baseline, sizeof baseline / sizeof baseline[0], steps);
    if (!strcmp(which, "wide") || all) run("wide", wide, sizeof wide / sizeof wide[0], steps);
    return 0;
}

#endif
