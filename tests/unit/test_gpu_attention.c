/* test_gpu_attention.c — the tensor-core causal GQA flash attention (cuda_attention.cu) against
 * cpu_attention_forward/backward: output, log-sum-exp, the three gradients (written over NaN:
 * dq and dk fp32, dv bf16), bitwise determinism of forward and backward, and shapes that stress the
 * tiling (T not a multiple of the tiles, T < 16, T = 1, several sequences, GQA groups of 1, 2, 4
 * and 8, head_dim 32, 64 and 128); v and dv as a column block of wider rows (the backend's
 * [q | k | v] layout), bitwise the whole-tensor run. Rules in test_gpu.h.
 *
 * The reference runs in fp32 on the bf16-rounded q, k, v and dy the GPU reads, so what remains
 * is the kernels' own rounding: P and dS enter their products as bf16 (relative 2^-9 each), y is
 * stored as bf16 (2^-9), and D = rowsum(dy * y) uses the bf16 y. Bounds (||gpu - ref|| / ||ref||):
 *  LSE_TOL 1e-5   lse comes from fp32 scores of the same bf16 inputs (exp2/log2 in the log2
 *                 domain vs the CPU's exp/log: a few ulps).
 *  Y_TOL 1e-2     y: P rounding averaged over the keys plus y's own rounding (~3e-3 measured).
 *  GRAD_TOL 2e-2  dq, dk, dv: P and dS rounding and D from the bf16 y (~4e-3..8e-3 measured);
 *                 dv's own bf16 rounding adds <= 2^-9.
 * A wrong mask, scale, tile offset or a missing term shows up at 1e-1 or more. */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include <omp.h>

#include "cpu_attention.h"

#define LSE_TOL 1e-5
#define Y_TOL 1e-2
#define GRAD_TOL 2e-2

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

static void check_attention(int B, int T, int H, int KV, int hd, uint64_t seed) {
    uint64_t rng = seed;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, ns = (size_t)B * H * T;
    float *q = random_host(nq, -1.5, 1.5, &rng), *k = random_host(nkv, -1.5, 1.5, &rng);
    float *v = random_host(nkv, -1, 1, &rng), *dy = random_host(nq, -1, 1, &rng);
    host_round_bf16(q, nq);
    host_round_bf16(k, nkv);
    host_round_bf16(v, nkv);
    host_round_bf16(dy, nq);

    /* CPU reference */
    const int threads = omp_get_max_threads();
    size_t sf = cpu_attention_forward_scratch_floats(B, T, H, KV, hd, threads);
    size_t sb = cpu_attention_backward_scratch_floats(B, T, H, KV, hd, threads);
    if (sb > sf) sf = sb;
    float *scratch = malloc(sf * sizeof(float));
    float *y = malloc(nq * sizeof(float)), *stats = malloc(cpu_attention_stats_floats(B, T, H) * sizeof(float));
    cpu_attention_forward(y, stats, q, k, v, B, T, H, KV, hd, scratch, sf);
    float *lse = malloc(ns * sizeof(float));
    for (size_t i = 0; i < ns; i++) lse[i] = (float)((double)stats[2 * i] - log((double)stats[2 * i + 1]));
    float *r_dq = calloc(nq, sizeof(float)), *r_dk = calloc(nkv, sizeof(float)), *r_dv = calloc(nkv, sizeof(float));
    cpu_attention_backward(r_dq, r_dk, r_dv, dy, q, k, v, stats, B, T, H, KV, hd, scratch, sf);

    /* GPU */
    ct_bf16 *d_q = dev_bf16(q, nq), *d_k = dev_bf16(k, nkv), *d_v = dev_bf16(v, nkv), *d_dy = dev_bf16(dy, nq);
    float *d_lse = dev_nan(ns);
    ct_bf16 *d_y = dev_alloc(nq * 2);
    dev_poison_bf16(d_y, nq);
    CHECK_CUDA_OK(cuda_attention_forward(d_y, d_lse, d_q, d_k, d_v, KV * hd, B, T, H, KV, hd, 0));
    float *g_y = host_from_dev_bf16(d_y, nq), *g_lse = host_from_dev(d_lse, ns);
    char what[128];
    snprintf(what, sizeof what, "y (B%d T%d H%d KV%d hd%d)", B, T, H, KV, hd);
    CHECK_REL(what, g_y, y, nq, Y_TOL);
    CHECK_REL("lse", g_lse, lse, ns, LSE_TOL);
    /* forward again, without lse: the same y bits */
    ct_bf16 *d_y2 = dev_alloc(nq * 2);
    dev_poison_bf16(d_y2, nq);
    CHECK_CUDA_OK(cuda_attention_forward(d_y2, NULL, d_q, d_k, d_v, KV * hd, B, T, H, KV, hd, 0));
    float *g_y2 = host_from_dev_bf16(d_y2, nq);
    CHECK(memcmp(g_y2, g_y, nq * sizeof(float)) == 0, "forward-only y differs");

    float *d_dq = dev_nan(nq), *d_dk = dev_nan(nkv);
    ct_bf16 *d_dv = dev_alloc(nkv * 2);
    dev_poison_bf16(d_dv, nkv);
    float *d_scr = dev_nan(cuda_attention_backward_scratch_floats(B, T, H));
    CHECK_CUDA_OK(
        cuda_attention_backward(d_dq, d_dk, d_dv, d_dy, d_q, d_k, d_v, KV * hd, d_y, d_lse, B, T, H, KV, hd, d_scr, 0));
    float *g_dq = host_from_dev(d_dq, nq), *g_dk = host_from_dev(d_dk, nkv), *g_dv = host_from_dev_bf16(d_dv, nkv);
    CHECK_REL("dq (=)", g_dq, r_dq, nq, GRAD_TOL);
    CHECK_REL("dk (=)", g_dk, r_dk, nkv, GRAD_TOL);
    CHECK_REL("dv (= bf16)", g_dv, r_dv, nkv, GRAD_TOL);
    float *g_D = host_from_dev(d_scr, ns);
    size_t bad_D = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const size_t row = ((size_t)b * T + t) * H * hd + (size_t)h * hd;
                const float want = fixed_order_row_dot(dy + row, g_y + row, hd);
                bad_D += memcmp(&g_D[((size_t)b * H + h) * T + t], &want, sizeof want) != 0;
            }
    CHECK(bad_D == 0, "D = rowsum(dy * y): %zu of %zu rows differ from the fixed-order sum", bad_D, ns);
    free(g_D);

    /* determinism: run the backward again over poisoned buffers */
    dev_put(d_dq, r_dq, nq * sizeof(float));
    dev_put(d_dk, r_dk, nkv * sizeof(float));
    dev_poison_bf16(d_dv, nkv);
    CHECK_CUDA_OK(
        cuda_attention_backward(d_dq, d_dk, d_dv, d_dy, d_q, d_k, d_v, KV * hd, d_y, d_lse, B, T, H, KV, hd, d_scr, 0));
    float *a_dq = host_from_dev(d_dq, nq), *a_dk = host_from_dev(d_dk, nkv), *a_dv = host_from_dev_bf16(d_dv, nkv);
    CHECK(memcmp(a_dq, g_dq, nq * sizeof(float)) == 0, "dq not deterministic");
    CHECK(memcmp(a_dk, g_dk, nkv * sizeof(float)) == 0, "dk not deterministic");
    CHECK(memcmp(a_dv, g_dv, nkv * sizeof(float)) == 0, "dv not deterministic");

    dev_free(d_q), dev_free(d_k), dev_free(d_v), dev_free(d_dy), dev_free(d_y), dev_free(d_lse);
    dev_free(d_y2), dev_free(d_dq), dev_free(d_dk), dev_free(d_dv), dev_free(d_scr);
    free(q), free(k), free(v), free(dy), free(scratch), free(y), free(stats);
    free(lse), free(r_dq), free(r_dk), free(r_dv), free(g_y), free(g_lse), free(g_y2), free(g_dq), free(g_dk);
    free(g_dv), free(a_dq), free(a_dk), free(a_dv);
}

static void gqa_hd64_ragged_T(void) {
    REQUIRE_GPU();
    check_attention(2, 200, 4, 2, 64, 31);
}

static void gqa4_hd64_two_tiles(void) {
    REQUIRE_GPU();
    check_attention(1, 128, 8, 2, 64, 32);
}

static void mha_hd64_short(void) {
    REQUIRE_GPU();
    check_attention(3, 37, 2, 2, 64, 33);
}

static void hd32_gqa(void) {
    REQUIRE_GPU();
    check_attention(2, 130, 4, 2, 32, 34);
}

static void single_token(void) {
    REQUIRE_GPU();
    check_attention(4, 1, 2, 1, 64, 35);
}

static void baseline_head_shape(void) {
    REQUIRE_GPU();
    check_attention(1, 1024, 8, 4, 64, 36);
}

static void gqa8_hd64_odd_T(void) {
    REQUIRE_GPU();
    check_attention(1, 301, 8, 1, 64, 37);
}

static void hd128_mha_ragged(void) {
    REQUIRE_GPU();
    check_attention(2, 77, 2, 2, 128, 38);
}

static void hd128_gqa4_long(void) {
    REQUIRE_GPU();
    check_attention(1, 515, 8, 2, 128, 39);
}

static void hd32_tiny_T(void) {
    REQUIRE_GPU();
    check_attention(3, 5, 4, 1, 32, 40);
}

/* v and dv as a column block of wider rows (the backend's [q | k | v] rows: v at column
 * H*hd + KV*hd of rows of H*hd + 2*KV*hd): y, lse, dq, dk and dv bitwise the whole-tensor run's,
 * the wide gradient buffer's other columns untouched; a stride cp.async cannot use is refused. */
static void v_in_wider_rows(void) {
    REQUIRE_GPU();
    const int B = 2, T = 70, H = 4, KV = 2, hd = 64, ld = H * hd + 2 * KV * hd, col = H * hd + KV * hd;
    const size_t rows = (size_t)B * T, nq = rows * H * hd, nkv = rows * KV * hd, wide = rows * ld;
    const size_t ns = (size_t)B * H * T;
    uint64_t rng = 41;
    float *q = random_host(nq, -1.5, 1.5, &rng), *k = random_host(nkv, -1.5, 1.5, &rng);
    float *w = random_host(wide, -1, 1, &rng), *dy = random_host(nq, -1, 1, &rng);
    float *v = malloc(nkv * sizeof(float));
    for (size_t r = 0; r < rows; r++) memcpy(v + r * KV * hd, w + r * ld + col, (size_t)KV * hd * sizeof(float));
    ct_bf16 *d_q = dev_bf16(q, nq), *d_k = dev_bf16(k, nkv), *d_v = dev_bf16(v, nkv), *d_w = dev_bf16(w, wide);
    ct_bf16 *d_dy = dev_bf16(dy, nq), *d_y = dev_alloc(nq * 2), *d_y_w = dev_alloc(nq * 2);
    float *d_lse = dev_nan(ns), *d_lse_w = dev_nan(ns);
    CHECK_CUDA_OK(cuda_attention_forward(d_y, d_lse, d_q, d_k, d_v, KV * hd, B, T, H, KV, hd, 0));
    CHECK_CUDA_OK(cuda_attention_forward(d_y_w, d_lse_w, d_q, d_k, d_w + col, ld, B, T, H, KV, hd, 0));
    float *y = host_from_dev_bf16(d_y, nq), *y_w = host_from_dev_bf16(d_y_w, nq);
    float *lse = host_from_dev(d_lse, ns), *lse_w = host_from_dev(d_lse_w, ns);
    CHECK(memcmp(y, y_w, nq * sizeof(float)) == 0 && memcmp(lse, lse_w, ns * sizeof(float)) == 0,
          "forward with v in wider rows differs from the whole tensor's");
    float *d_dq = dev_nan(nq), *d_dk = dev_nan(nkv), *d_dq_w = dev_nan(nq), *d_dk_w = dev_nan(nkv);
    ct_bf16 *d_dv = dev_alloc(nkv * 2), *d_dv_w = dev_alloc(wide * 2);
    dev_poison_bf16(d_dv_w, wide);
    float *d_scr = dev_nan(cuda_attention_backward_scratch_floats(B, T, H));
    CHECK_CUDA_OK(
        cuda_attention_backward(d_dq, d_dk, d_dv, d_dy, d_q, d_k, d_v, KV * hd, d_y, d_lse, B, T, H, KV, hd, d_scr, 0));
    CHECK_CUDA_OK(cuda_attention_backward(d_dq_w, d_dk_w, d_dv_w + col, d_dy, d_q, d_k, d_w + col, ld, d_y, d_lse, B, T,
                                          H, KV, hd, d_scr, 0));
    float *dq = host_from_dev(d_dq, nq), *dq_w = host_from_dev(d_dq_w, nq);
    float *dk = host_from_dev(d_dk, nkv), *dk_w = host_from_dev(d_dk_w, nkv);
    float *dv = host_from_dev_bf16(d_dv, nkv), *dv_w = host_from_dev_bf16(d_dv_w, wide);
    CHECK(memcmp(dq, dq_w, nq * sizeof(float)) == 0 && memcmp(dk, dk_w, nkv * sizeof(float)) == 0,
          "dq or dk with v in wider rows differs from the whole tensor's");
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) {
            const float g = dv_w[r * ld + (size_t)c];
            if (c >= col && c < col + KV * hd)
                CHECK(memcmp(&g, &dv[r * KV * hd + (size_t)(c - col)], sizeof g) == 0,
                      "dv at row %zu column %d differs from the whole tensor's", r, c);
            else
                CHECK(isnan(g), "row %zu column %d, outside dv's block, was written", r, c);
        }
    CHECK(cuda_attention_forward(d_y_w, NULL, d_q, d_k, d_w + col, KV * hd + 4, B, T, H, KV, hd, 0) != 0 &&
              strstr(ct_error(), "row stride 132 must be a multiple of 8") != NULL,
          "a stride of 132: got '%s'", ct_error());
    ct_error_clear();
    dev_free(d_q), dev_free(d_k), dev_free(d_v), dev_free(d_w), dev_free(d_dy), dev_free(d_y), dev_free(d_y_w);
    dev_free(d_lse), dev_free(d_lse_w), dev_free(d_dq), dev_free(d_dk), dev_free(d_dq_w), dev_free(d_dk_w);
    dev_free(d_dv), dev_free(d_dv_w), dev_free(d_scr);
    free(q), free(k), free(w), free(dy), free(v), free(y), free(y_w), free(lse), free(lse_w);
    free(dq), free(dq_w), free(dk), free(dk_w), free(dv), free(dv_w);
}

int main(void) {
    RUN(v_in_wider_rows);
    RUN(gqa_hd64_ragged_T);
    RUN(gqa4_hd64_two_tiles);
    RUN(mha_hd64_short);
    RUN(hd32_gqa);
    RUN(single_token);
    RUN(baseline_head_shape);
    RUN(gqa8_hd64_odd_T);
    RUN(hd128_mha_ragged);
    RUN(hd128_gqa4_long);
    RUN(hd32_tiny_T);
    TEST_EXIT();
}

#endif
