/* bench_gpu_kernels.c — times the CUDA ops (kernels/cuda/cuda_ops.h) on the baseline model's shapes
 * (dim 512, 8 heads / 4 kv heads of 64, MLP 1024, T 1024, vocab 1024) for a micro-batch of
 * 8 sequences (8192 tokens), and prints per-op time with the achieved FLOP rate (matrix and
 * attention ops) or memory bandwidth (element-wise and row ops).
 * Usage: bench_gpu_kernels [repeats] [sequences]   (defaults 20, 8)
 * Without a CUDA device (or a build without CUDA) it prints SKIP and exits 0.
 *
 * Counting: FLOPs are 2 per multiply-add of the products a perfect kernel needs (attention:
 * forward 4*hd*P, backward 8*hd*P with P = B*H*T(T+1)/2 visible pairs, as bench_cpu_attention;
 * the recomputation of Q K^T in both backward kernels is not counted). Bytes are the minimum
 * traffic: every input read once, every output written once. Times are the median of
 * `repeats` runs measured with CUDA events. Lines "BENCH name value" are machine-readable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef CT_HAVE_CUDA
int main(void) {
    printf("SKIP bench_gpu_kernels: this build has no CUDA (nvcc was not found)\n");
    return 0;
}
#else

#include <float.h>
#include <string.h>

#include "cpu_attention.h"
#define BENCH_PROGRAM "bench_gpu_kernels"
#include "bench_gpu.h"

static int repeats = 20;
static cudaEvent_t ev0, ev1;

typedef int (*OpFn)(void *ctx);

/* Median milliseconds of fn over `repeats` timed runs after one warm-up. */
static double time_op(OpFn fn, void *ctx, const char *name) {
    if (fn(ctx) != 0) die(name);
    float *ms = malloc((size_t)repeats * sizeof(float));
    for (int r = 0; r < repeats; r++) {
        cudaEventRecord(ev0, 0);
        if (fn(ctx) != 0) die(name);
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms[r], ev0, ev1);
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "bench_gpu_kernels: %s: %s\n", name, cudaGetErrorString(e));
        exit(1);
    }
    qsort(ms, (size_t)repeats, sizeof(float), cmp_float);
    double med = ms[repeats / 2];
    free(ms);
    return med;
}

static void line(const char *name, double ms, double flops, double bytes) {
    printf("  %-34s %9.3f ms", name, ms);
    if (flops > 0) printf("  %8.2f TFLOP/s", flops / ms * 1e-9);
    if (bytes > 0) printf("  %8.1f GB/s", bytes / ms * 1e-6);
    printf("\n");
    printf("BENCH gpu_%s_ms %.4f\n", name, ms);
    if (flops > 0) printf("BENCH gpu_%s_tflops %.3f\n", name, flops / ms * 1e-9);
    if (bytes > 0) printf("BENCH gpu_%s_gbps %.1f\n", name, bytes / ms * 1e-6);
}

/* ---- shapes and buffers ---- */
enum { T = 1024, D = 512, H = 8, KVH = 4, HD = 64, HID = 1024, V = 1024 };
static int B, N;
static cublasHandle_t blas;
static float *x, *y, *dy, *dx, *rstd, *dq, *dk, *lse, *attn_scr, *cos_t, *sin_t, *gain, *dgain;
static float *rope_scr, *u, *losses, *z, *grad_w, *p, *g, *m, *vv, *upd, *mom, *scale, *dscale, *mix;
static ct_bf16 *xb, *wb, *hb, *h2b, *wv_b, *dz, *ub, *uhb, *qb, *kb, *vb, *yb, *dyb, *dvb, *dbr;
static int32_t *targets;
static double *partials, *red;
static void *muon_scr;
/* a Newton–Schulz batch of MUON_BATCH 1024 x 512 matrices (the baseline's fc and proj shapes) */
enum { MUON_BATCH = 9 };
static CudaMuonMatrix muon_mats[MUON_BATCH];

static int op_linear_fwd(void *c) { (void)c; return cuda_linear_forward(blas, u, CT_F32, xb, wb, N, D, HID); }
static int op_linear_fwd_bf16(void *c) { (void)c; return cuda_linear_forward(blas, uhb, CT_BF16, xb, wb, N, D, HID); }
static int op_linear_bwd(void *c) {
    (void)c;
    return cuda_linear_backward(blas, dx, CT_F32, 0, grad_w, ub, xb, wb, N, D, HID);
}
static int op_rmsnorm_fwd(void *c) { (void)c; return cuda_rmsnorm_forward(y, NULL, rstd, x, N, D, FLT_EPSILON, 0); }
static int op_rmsnorm_bwd(void *c) { (void)c; return cuda_rmsnorm_backward(dx, dy, x, rstd, N, D, 0); }
static int op_scaled_add_bwd(void *c) {
    (void)c;
    return cuda_scaled_add_backward(NULL, NULL, xb, dscale, dy, NULL, yb, scale, N, D, partials, 0);
}
/* the MLP norm's backward (x1 recomputed, renorm written), then x1's residual backward: two
 * kernels, and the fused one that does both in one pass */
static int op_add_norm_bwd(void *c) {
    (void)c;
    return cuda_add_norm_backward(dx, xb, NULL, NULL, dy, x, y, mix, yb, scale, rstd, rstd, N, D, NULL, 0);
}
static int op_add_norm_scale_bwd(void *c) {
    (void)c;
    return cuda_add_norm_backward(dx, xb, dbr, dscale, dy, x, y, mix, yb, scale, rstd, rstd, N, D, partials, 0);
}
static int op_relu2_fwd(void *c) { (void)c; return cuda_relu2_forward(hb, uhb, (size_t)N * HID, 0); }
static int op_relu2_bwd(void *c) { (void)c; return cuda_relu2_backward(ub, NULL, hb, uhb, (size_t)N * HID, 0); }
/* the backward as the backend runs it: h = relu(u)^2 remade in the same pass (replaces a
 * relu2_fwd + relu2_bwd pair) */
static int op_relu2_bwd_h(void *c) { (void)c; return cuda_relu2_backward(ub, h2b, hb, uhb, (size_t)N * HID, 0); }
static int op_rope_fwd(void *c) {
    (void)c;
    return cuda_qk_norm_rope_forward(NULL, qb, yb, gain, cos_t, sin_t, B, T, H, HD, H * HD, 0);
}
static int op_rope_bwd(void *c) {
    (void)c;
    return cuda_qk_norm_rope_backward(NULL, xb, dgain, dq, yb, gain, cos_t, sin_t, B, T, H, HD, H * HD, rope_scr, partials,
                                      0);
}
static int op_attn_fwd(void *c) { (void)c; return cuda_attention_forward(yb, lse, qb, kb, vb, KVH * HD, B, T, H, KVH, HD, 0); }
static int op_attn_bwd(void *c) {
    (void)c;
    return cuda_attention_backward(dq, dk, dvb, dyb, qb, kb, vb, KVH * HD, yb, lse, B, T, H, KVH, HD, attn_scr, 0);
}
static int op_logits(void *c) {
    (void)c;
    return cuda_logits_ce_forward_backward(blas, dx, grad_w, losses, xb, wv_b, targets, N, D, V, 30.0f, 1.0f, z, dz,
                                           N < 16384 ? N : 16384, 0);
}
static int op_adam(void *c) {
    (void)c;
    return cuda_adam_step(p, NULL, g, m, vv, (size_t)V * D, 1e-3, 0.9, 0.95, 1e-8, 3, 0);
}
static int op_muon_square(void *c) {
    (void)c;
    return cuda_muon_update(blas, upd, g, mom, D, D, 0.95, 1, 5, 0, muon_scr, red, 0);
}
static int op_muon_tall(void *c) {
    (void)c;
    return cuda_muon_update(blas, upd, g, mom, HID, D, 0.95, 1, 5, 0, muon_scr, red, 0);
}
static int op_muon_tall_fp32(void *c) {
    (void)c;
    return cuda_muon_update(blas, upd, g, mom, HID, D, 0.95, 1, 5, 1, muon_scr, red, 0);
}
static int op_muon_batch(void *c) {
    (void)c;
    return cuda_muon_update_batch(blas, muon_mats, MUON_BATCH, 0.95, 1, 5, 0, muon_scr, red, 0);
}

int main(int argc, char **argv) {
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        printf("SKIP bench_gpu_kernels: no CUDA device\n");
        return 0;
    }
    if (argc > 1) repeats = atoi(argv[1]) > 0 ? atoi(argv[1]) : 20;
    B = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 8;
    N = B * T;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("== CUDA op micro-benchmarks on %s (sm_%d%d), B=%d x T=%d = %d tokens, dim %d, heads %d/%d x %d, "
           "mlp %d, vocab %d, median of %d\n",
           prop.name, prop.major, prop.minor, B, T, N, D, H, KVH, HD, HID, V, repeats);
    cudaEventCreate(&ev0);
    cudaEventCreate(&ev1);
    void *ws = dalloc(32 << 20);
    if (cuda_blas_create(&blas, 0, ws, 32 << 20) != 0) die("cuda_blas_create");

    uint64_t rng = 7;
    const size_t ND = (size_t)N * D, NKV = (size_t)N * KVH * HD, NH = (size_t)N * HID;
    x = drandom(ND, -1, 1, &rng), y = drandom(ND, -1, 1, &rng), dy = drandom(ND, -1, 1, &rng);
    dx = drandom(ND, -1, 1, &rng), rstd = drandom(N, 0.5, 1, &rng);
    dq = drandom(ND, -1, 1, &rng), dk = drandom(NKV, -1, 1, &rng), dvb = drandom_bf16(NKV, -1, 1, &rng);
    lse = dalloc((size_t)N * H * sizeof(float));
    attn_scr = dalloc(cuda_attention_backward_scratch_floats(B, T, H) * sizeof(float));
    {
        float *c = malloc((size_t)T * HD / 2 * sizeof(float)), *s = malloc((size_t)T * HD / 2 * sizeof(float));
        cpu_rope_tables_init(c, s, T, HD, 10000.0f);
        cos_t = dalloc((size_t)T * HD / 2 * sizeof(float));
        sin_t = dalloc((size_t)T * HD / 2 * sizeof(float));
        cudaMemcpy(cos_t, c, (size_t)T * HD / 2 * sizeof(float), cudaMemcpyHostToDevice);
        cudaMemcpy(sin_t, s, (size_t)T * HD / 2 * sizeof(float), cudaMemcpyHostToDevice);
        free(c), free(s);
    }
    gain = drandom(H, 1, 2, &rng), dgain = drandom(H, 0, 1, &rng);
    rope_scr = dalloc(cuda_qk_norm_rope_backward_scratch_floats(B, T, H) * sizeof(float));
    size_t np = cuda_colsum_doubles(N, D, 2), np2 = cuda_qk_norm_rope_backward_partials_doubles(B, T, H);
    partials = dalloc((np > np2 ? np : np2) * sizeof(double));
    u = drandom(NH, -1, 1, &rng), uhb = drandom_bf16(NH, -1, 1, &rng);
    scale = drandom(D, 0.5, 1.5, &rng), dscale = drandom(D, 0, 1, &rng), mix = drandom(2 * D, 0.5, 1.5, &rng);
    dbr = dalloc(ND * 2);
    xb = drandom_bf16(ND, -1, 1, &rng), wb = drandom_bf16((size_t)HID * D, -1, 1, &rng);
    hb = drandom_bf16(NH, -1, 1, &rng), h2b = dalloc(NH * 2);
    ub = drandom_bf16(NH, -1, 1, &rng), wv_b = drandom_bf16((size_t)V * D, -1, 1, &rng);
    qb = drandom_bf16(ND, -1, 1, &rng), kb = drandom_bf16(NKV, -1, 1, &rng), vb = drandom_bf16(NKV, -1, 1, &rng);
    dyb = drandom_bf16(ND, -1, 1, &rng), yb = drandom_bf16(ND, -1, 1, &rng);
    grad_w = drandom((size_t)(HID > V ? HID : V) * D, -1, 1, &rng);
    const int chunk = N < 16384 ? N : 16384;
    z = dalloc(cuda_logits_z_floats(chunk, V) * sizeof(float));
    dz = dalloc(cuda_logits_dz_elems(chunk, V) * 2);
    losses = dalloc((size_t)N * sizeof(float));
    {
        int32_t *t = malloc((size_t)N * sizeof(int32_t));
        for (int i = 0; i < N; i++) t[i] = (int32_t)(ref_rand01(&rng) * V) % V;
        targets = dalloc((size_t)N * sizeof(int32_t));
        cudaMemcpy(targets, t, (size_t)N * sizeof(int32_t), cudaMemcpyHostToDevice);
        free(t);
    }
    p = drandom((size_t)HID * D, -1, 1, &rng), g = drandom((size_t)HID * D, -1, 1, &rng);
    m = drandom((size_t)HID * D, -1, 1, &rng), vv = drandom((size_t)HID * D, 0, 1, &rng);
    upd = dalloc((size_t)HID * D * sizeof(float)), mom = drandom((size_t)HID * D, -1, 1, &rng);
    muon_scr = dalloc(cuda_muon_scratch_bytes(HID, D, MUON_BATCH));
    for (int i = 0; i < MUON_BATCH; i++) { /* alternately tall and wide, as fc and mlp.proj */
        const size_t n = (size_t)HID * D;
        muon_mats[i] = (CudaMuonMatrix){dalloc(n * sizeof(float)), drandom(n, -1, 1, &rng), drandom(n, -1, 1, &rng),
                                        i % 2 ? D : HID, i % 2 ? HID : D};
    }
    red = dalloc((cuda_reduce_doubles((size_t)HID * D) + 1) * sizeof(double));

    const double pairs = (double)B * H * T * (T + 1) / 2.0;
    line("linear_fwd_8kx512x1024", time_op(op_linear_fwd, NULL, "linear fwd"), 2.0 * N * D * HID, 0);
    line("linear_fwd_bf16out_8kx512x1024", time_op(op_linear_fwd_bf16, NULL, "linear fwd bf16"), 2.0 * N * D * HID, 0);
    line("linear_bwd_8kx512x1024", time_op(op_linear_bwd, NULL, "linear bwd"), 4.0 * N * D * HID, 0);
    line("attention_fwd", time_op(op_attn_fwd, NULL, "attention fwd"), 4.0 * HD * pairs, 0);
    line("attention_bwd", time_op(op_attn_bwd, NULL, "attention bwd"), 8.0 * HD * pairs, 0);
    line("logits_ce_fwd_bwd", time_op(op_logits, NULL, "logits"), 6.0 * N * D * V, 0);
    line("rmsnorm_fwd", time_op(op_rmsnorm_fwd, NULL, "rmsnorm fwd"), 0, 8.0 * ND + 4.0 * N);
    line("rmsnorm_bwd", time_op(op_rmsnorm_bwd, NULL, "rmsnorm bwd"), 0, 16.0 * ND + 4.0 * N);
    line("scaled_add_bwd", time_op(op_scaled_add_bwd, NULL, "scaled_add bwd"), 0, 8.0 * ND);
    /* add_norm_bwd: dout, x_in, x0 (fp32), branch (bf16), dx read and written, renorm (bf16); the
     * fused op also writes dbranch (bf16): compare its time with add_norm_bwd + scaled_add_bwd */
    line("add_norm_bwd", time_op(op_add_norm_bwd, NULL, "add_norm bwd"), 0, 24.0 * ND + 8.0 * N);
    line("add_norm_scale_bwd", time_op(op_add_norm_scale_bwd, NULL, "add_norm+scale bwd"), 0, 26.0 * ND + 8.0 * N);
    line("relu2_fwd_bf16", time_op(op_relu2_fwd, NULL, "relu2 fwd"), 0, 4.0 * NH);
    line("relu2_bwd_bf16", time_op(op_relu2_bwd, NULL, "relu2 bwd"), 0, 6.0 * NH);
    line("relu2_bwd_remake_h_bf16", time_op(op_relu2_bwd_h, NULL, "relu2 bwd + h"), 0, 8.0 * NH);
    line("qk_norm_rope_fwd_bf16", time_op(op_rope_fwd, NULL, "rope fwd"), 0, 4.0 * ND);
    line("qk_norm_rope_bwd", time_op(op_rope_bwd, NULL, "rope bwd"), 0, 8.0 * ND);
    line("adam_1024x512", time_op(op_adam, NULL, "adam"), 0, 28.0 * V * D);
    {
        /* NS5 flops: per iteration 2*m*m*n (A) + 2*m^3 (A A) + 2*m*m*n (B X), m = min, n = max */
        const double ms = (double)D, ns = (double)D, mt = (double)D, nt = (double)HID;
        line("muon_update_512x512_bf16", time_op(op_muon_square, NULL, "muon"), 5 * (4 * ms * ms * ns + 2 * ms * ms * ms), 0);
        line("muon_update_1024x512_bf16", time_op(op_muon_tall, NULL, "muon"), 5 * (4 * mt * mt * nt + 2 * mt * mt * mt), 0);
        line("muon_update_1024x512_fp32", time_op(op_muon_tall_fp32, NULL, "muon"),
             5 * (4 * mt * mt * nt + 2 * mt * mt * mt), 0);
        /* compare its time per matrix with muon_update_1024x512_bf16's */
        line("muon_update_batch_9x1024x512_bf16", time_op(op_muon_batch, NULL, "muon batch"),
             MUON_BATCH * 5 * (4 * mt * mt * nt + 2 * mt * mt * mt), 0);
    }
    cublasDestroy(blas);
    return 0;
}

#endif
