/* gpu_ops_attention.h — the tensor-core causal GQA flash attention (cuda_attention.cu) as ops of
 * the table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_attention_forward/backward:
 * output and log-sum-exp (the forward without lse: the same y), the three gradients (written
 * over NaN: dq and dk fp32, dv bf16; y and lse from the CUDA forward), the D scratch bitwise its
 * fixed-order sum, on shapes that stress the tiling (T not a multiple of the tiles, T < 16,
 * T = 1, several sequences, GQA groups of 1, 2, 4 and 8, head_dim 32, 64 and 128); v and dv as a
 * column block of wider rows (the backend's [q | k | v] layout), bitwise the whole-tensor run.
 * d = {B, T, heads, kv heads, head_dim}.
 *
 * The reference runs in fp32 on the bf16-rounded q, k, v and dy the GPU reads, so what remains
 * is the kernels' own rounding: P and dS enter their products as bf16 (relative 2^-9 each), y is
 * stored as bf16 (2^-9), and D = rowsum(dy * y) uses the bf16 y. Bounds (||gpu - ref|| / ||ref||):
 *  LSE_TOL 1e-5   lse comes from fp32 scores of the same bf16 inputs (exp2/log2 in the log2
 *                 domain vs the CPU's exp/log: a few ulps).
 *  Y_TOL 1e-2     y: P rounding averaged over the keys plus y's own rounding (~3e-3 measured).
 *  ATT_GRAD_TOL 2e-2  dq, dk, dv: P and dS rounding and D from the bf16 y (~4e-3..8e-3
 *                 measured); dv's own bf16 rounding adds <= 2^-9.
 * A wrong mask, scale, tile offset or a missing term shows up at 1e-1 or more. */
#ifndef CT_TEST_GPU_OPS_ATTENTION_H
#define CT_TEST_GPU_OPS_ATTENTION_H

#include <omp.h>

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define LSE_TOL 1e-5
#define Y_TOL 1e-2
#define ATT_GRAD_TOL 2e-2

/* The backward's scratch contract: D[b,h,t] = sum_d dy * y in its fixed order — each run of 8
 * elements an fma chain from 0, then the runs summed pairwise as a butterfly (lane l adds lane
 * l ^ o for o = runs/2 .. 1) — so the fp32 bits are known exactly. dy, y: [B*T, H*hd] values. */
static float fixed_order_row_dot(const float *dy, const float *y, int hd) {
    float acc[16];
    const int runs = hd / 8;
    for (int l = 0; l < runs; l++) {
        acc[l] = 0.0f;
        for (int e = 0; e < 8; e++) acc[l] = fmaf(dy[8 * l + e], y[8 * l + e], acc[l]);
    }
    for (int o = runs / 2; o > 0; o >>= 1) {
        float next[16];
        for (int l = 0; l < runs; l++) next[l] = acc[l] + acc[l ^ o];
        memcpy(acc, next, sizeof next);
    }
    return acc[0];
}

static void attention_inputs(OpRun *r, int with_dy) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], kv = r->d[3], hd = r->d[4];
    const size_t nq = (size_t)B * T * heads * hd, nkv = (size_t)B * T * kv * hd;
    op_in(r, "q", OP_BF16, nq, -1.5, 1.5);
    op_in(r, "k", OP_BF16, nkv, -1.5, 1.5);
    op_in(r, "v", OP_BF16, nkv, -1, 1);
    if (with_dy) op_in(r, "dy", OP_BF16, nq, -1, 1);
}
/* The CPU forward: y and the softmax stats [B,H,T,2] (max, sum) the CPU backward takes. */
static float *attention_cpu_forward(OpRun *r, float *y, float **scratch, size_t *scratch_floats) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], kv = r->d[3], hd = r->d[4];
    const int threads = omp_get_max_threads();
    size_t sf = cpu_attention_forward_scratch_floats(B, T, heads, kv, hd, threads);
    const size_t sb = cpu_attention_backward_scratch_floats(B, T, heads, kv, hd, threads);
    if (sb > sf) sf = sb;
    *scratch = malloc(sf * sizeof(float));
    *scratch_floats = sf;
    float *stats = malloc(cpu_attention_stats_floats(B, T, heads) * sizeof(float));
    cpu_attention_forward(y, stats, HOST("q"), HOST("k"), HOST("v"), NULL, B, T, heads, kv, hd, *scratch, sf);
    return stats;
}

static void attention_fwd_tensors(OpRun *r) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], hd = r->d[4];
    attention_inputs(r, 0);
    op_out(r, "y", OP_BF16, (size_t)B * T * heads * hd, Y_TOL);
    op_out(r, "lse", OP_F32, (size_t)B * heads * T, LSE_TOL);
}
static void attention_fwd_cpu(OpRun *r) {
    const size_t ns = (size_t)r->d[0] * r->d[2] * r->d[1];
    float *scratch;
    size_t sf;
    float *stats = attention_cpu_forward(r, HOST("y"), &scratch, &sf), *lse = HOST("lse");
    for (size_t i = 0; i < ns; i++) lse[i] = (float)((double)stats[2 * i] - log((double)stats[2 * i + 1]));
    free(stats), free(scratch);
}
static int attention_fwd_gpu(OpRun *r) {
    const int kv = r->d[3], hd = r->d[4];
    return cuda_attention_forward(DEV("y"), DEV("lse"), DEV("q"), DEV("k"), DEV("v"),
                                  &(CudaAttentionShape){r->d[0], r->d[1], r->d[2], kv, hd, kv * hd}, 0);
}
/* forward again, without lse: the same y bits */
static void attention_fwd_extra(OpRun *r) {
    const int kv = r->d[3], hd = r->d[4];
    const size_t nq = (size_t)r->d[0] * r->d[1] * r->d[2] * hd;
    ct_bf16 *y2 = dev_alloc(nq * 2);
    dev_poison_bf16(y2, nq);
    CHECK_CUDA_OK(cuda_attention_forward(y2, NULL, DEV("q"), DEV("k"), DEV("v"),
                                         &(CudaAttentionShape){r->d[0], r->d[1], r->d[2], kv, hd, kv * hd}, 0));
    float *g_y2 = host_from_dev_bf16(y2, nq);
    CHECK(memcmp(g_y2, GOT("y"), nq * sizeof(float)) == 0, "forward-only y differs");
    free(g_y2);
    dev_free(y2);
}

static void attention_bwd_tensors(OpRun *r) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], kv = r->d[3], hd = r->d[4];
    const size_t nq = (size_t)B * T * heads * hd, nkv = (size_t)B * T * kv * hd;
    attention_inputs(r, 1);
    op_in(r, "y", OP_BF16, nq, 0, 0);
    op_in(r, "lse", OP_F32, (size_t)B * heads * T, 0, 0);
    op_out(r, "dq", OP_F32, nq, ATT_GRAD_TOL);
    op_out(r, "dk", OP_F32, nkv, ATT_GRAD_TOL);
    op_out(r, "dv", OP_BF16, nkv, ATT_GRAD_TOL);
    op_scratch(r, "D", OP_F32, cuda_attention_backward_scratch_floats(B, T, heads));
}
/* y and lse: the CUDA forward's, as in training */
static void attention_bwd_prepare(OpRun *r) {
    CHECK_CUDA_OK(attention_fwd_gpu(r));
    op_take_from_device(r, "y");
    op_take_from_device(r, "lse");
}
static void attention_bwd_cpu(OpRun *r) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], kv = r->d[3], hd = r->d[4];
    float *scratch, *y = malloc((size_t)B * T * heads * hd * sizeof(float));
    size_t sf;
    float *stats = attention_cpu_forward(r, y, &scratch, &sf);
    cpu_attention_backward(HOST("dq"), HOST("dk"), HOST("dv"), HOST("dy"), HOST("q"), HOST("k"), HOST("v"), NULL, stats, B, T,
                           heads, kv, hd, scratch, sf);
    free(stats), free(scratch), free(y);
}
static int attention_bwd_gpu(OpRun *r) {
    const int kv = r->d[3], hd = r->d[4];
    const CudaAttentionBackward grads = {DEV("dq"), DEV("dk"), DEV("dv"), DEV("dy"), DEV("q"),
                                         DEV("k"),  DEV("v"),  DEV("y"),  DEV("lse"), DEV("D")};
    return cuda_attention_backward(&grads, &(CudaAttentionShape){r->d[0], r->d[1], r->d[2], kv, hd, kv * hd}, 0);
}
/* D = rowsum(dy * y), left in the scratch, bitwise its fixed-order sum */
static void attention_bwd_extra(OpRun *r) {
    const int B = r->d[0], T = r->d[1], heads = r->d[2], hd = r->d[4];
    const size_t ns = (size_t)B * heads * T;
    float *g_D = host_from_dev(DEV("D"), ns);
    const float *dy = HOST("dy"), *y = HOST("y");
    size_t bad_D = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < heads; h++)
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * heads * hd + (size_t)h * hd;
                const float want = fixed_order_row_dot(dy + row, y + row, hd);
                bad_D += memcmp(&g_D[((size_t)b * heads + h) * T + t], &want, sizeof want) != 0;
            }
    free(g_D);
    CHECK(bad_D == 0, "D = rowsum(dy * y): %zu of %zu rows differ from the fixed-order sum", bad_D, ns);
}

/* v and dv as a column block of wider rows (the backend's [q | k | v] rows: v at column
 * H*hd + KV*hd of rows of H*hd + 2*KV*hd): y, lse, dq, dk and dv bitwise the whole-tensor run's,
 * the wide gradient buffer's other columns untouched; a stride cp.async cannot use is refused. */
static void attention_v_in_wider_rows_check(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], KV = r->d[3], hd = r->d[4];
    const int ld = H * hd + 2 * KV * hd, col = H * hd + KV * hd;
    const size_t rows = (size_t)B * T, nq = rows * H * hd, nkv = rows * KV * hd, wide = rows * ld;
    const size_t ns = (size_t)B * H * T;
    float *q = random_host(nq, -1.5, 1.5, &r->rng), *k = random_host(nkv, -1.5, 1.5, &r->rng);
    float *w = random_host(wide, -1, 1, &r->rng), *dy = random_host(nq, -1, 1, &r->rng);
    float *v = malloc(nkv * sizeof(float));
    for (size_t i = 0; i < rows; i++) memcpy(v + i * KV * hd, w + i * ld + col, (size_t)KV * hd * sizeof(float));
    ct_bf16 *d_q = dev_bf16(q, nq), *d_k = dev_bf16(k, nkv), *d_v = dev_bf16(v, nkv), *d_w = dev_bf16(w, wide);
    ct_bf16 *d_dy = dev_bf16(dy, nq), *d_y = dev_alloc(nq * 2), *d_y_w = dev_alloc(nq * 2);
    float *d_lse = dev_nan(ns), *d_lse_w = dev_nan(ns);
    const CudaAttentionShape whole = {B, T, H, KV, hd, KV * hd}, in_rows = {B, T, H, KV, hd, ld};
    CHECK_CUDA_OK(cuda_attention_forward(d_y, d_lse, d_q, d_k, d_v, &whole, 0));
    CHECK_CUDA_OK(cuda_attention_forward(d_y_w, d_lse_w, d_q, d_k, d_w + col, &in_rows, 0));
    float *y = host_from_dev_bf16(d_y, nq), *y_w = host_from_dev_bf16(d_y_w, nq);
    float *lse = host_from_dev(d_lse, ns), *lse_w = host_from_dev(d_lse_w, ns);
    CHECK(memcmp(y, y_w, nq * sizeof(float)) == 0 && memcmp(lse, lse_w, ns * sizeof(float)) == 0,
          "forward with v in wider rows differs from the whole tensor's");
    float *d_dq = dev_nan(nq), *d_dk = dev_nan(nkv), *d_dq_w = dev_nan(nq), *d_dk_w = dev_nan(nkv);
    ct_bf16 *d_dv = dev_alloc(nkv * 2), *d_dv_w = dev_alloc(wide * 2);
    dev_poison_bf16(d_dv_w, wide);
    float *d_scr = dev_nan(cuda_attention_backward_scratch_floats(B, T, H));
    const CudaAttentionBackward grads = {d_dq, d_dk, d_dv, d_dy, d_q, d_k, d_v, d_y, d_lse, d_scr};
    const CudaAttentionBackward grads_w = {d_dq_w, d_dk_w, d_dv_w + col, d_dy, d_q, d_k, d_w + col, d_y, d_lse, d_scr};
    CHECK_CUDA_OK(cuda_attention_backward(&grads, &whole, 0));
    CHECK_CUDA_OK(cuda_attention_backward(&grads_w, &in_rows, 0));
    float *dq = host_from_dev(d_dq, nq), *dq_w = host_from_dev(d_dq_w, nq);
    float *dk = host_from_dev(d_dk, nkv), *dk_w = host_from_dev(d_dk_w, nkv);
    float *dv = host_from_dev_bf16(d_dv, nkv), *dv_w = host_from_dev_bf16(d_dv_w, wide);
    CHECK(memcmp(dq, dq_w, nq * sizeof(float)) == 0 && memcmp(dk, dk_w, nkv * sizeof(float)) == 0,
          "dq or dk with v in wider rows differs from the whole tensor's");
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < ld; c++) {
            const float g = dv_w[i * ld + (size_t)c];
            if (c >= col && c < col + KV * hd)
                CHECK(memcmp(&g, &dv[i * KV * hd + (size_t)(c - col)], sizeof g) == 0,
                      "dv at row %zu column %d differs from the whole tensor's", i, c);
            else
                CHECK(isnan(g), "row %zu column %d, outside dv's block, was written", i, c);
        }
    CHECK(cuda_attention_forward(d_y_w, NULL, d_q, d_k, d_w + col, &(CudaAttentionShape){B, T, H, KV, hd, KV * hd + 4},
                                 0) != 0 &&
              strstr(ct_error(), "row stride 132 must be a multiple of 8") != NULL,
          "a stride of 132: got '%s'", ct_error());
    ct_error_clear();
    dev_free(d_q), dev_free(d_k), dev_free(d_v), dev_free(d_w), dev_free(d_dy), dev_free(d_y), dev_free(d_y_w);
    dev_free(d_lse), dev_free(d_lse_w), dev_free(d_dq), dev_free(d_dk), dev_free(d_dq_w), dev_free(d_dk_w);
    dev_free(d_dv), dev_free(d_dv_w), dev_free(d_scr);
    free(q), free(k), free(w), free(dy), free(v), free(y), free(y_w), free(lse), free(lse_w);
    free(dq), free(dq_w), free(dk), free(dk_w), free(dv), free(dv_w);
}

/* FLOPs as bench_cpu_attention counts them: forward 4*hd*P, backward 8*hd*P with P =
 * B*H*T(T+1)/2 visible pairs (the recomputation of Q K^T in both backward kernels not counted) */
static double attention_pairs(const int *d) { return (double)d[0] * d[2] * d[1] * (d[1] + 1) / 2.0; }
static double attention_fwd_flops(const int *d) { return 4.0 * d[4] * attention_pairs(d); }
static double attention_bwd_flops(const int *d) { return 8.0 * d[4] * attention_pairs(d); }

static const OpDef op_attention_fwd = {"attention_fwd", 0, attention_fwd_tensors, NULL, attention_fwd_cpu,
                                       attention_fwd_gpu, attention_fwd_extra, attention_fwd_flops, 0};
static const OpDef op_attention_bwd = {"attention_bwd",
                                       0,
                                       attention_bwd_tensors,
                                       attention_bwd_prepare,
                                       attention_bwd_cpu,
                                       attention_bwd_gpu,
                                       attention_bwd_extra,
                                       attention_bwd_flops,
                                       0};
static const OpDef op_attention_v_wide = {"attention", 0, NULL, NULL, NULL, NULL, attention_v_in_wider_rows_check, NULL,
                                          0};

#endif /* CT_HAVE_CUDA */
#endif
