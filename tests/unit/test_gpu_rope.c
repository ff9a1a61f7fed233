/* test_gpu_rope.c — the fused CUDA QK-norm + RoPE + gain (cuda_rope.cu) against
 * cpu_qk_norm_rope_forward/backward, with and without gain, for head_dim 64, 32 and a
 * non-power-of-two 24, tokens spanning several sequences; in and the input gradients as a column
 * block of wider rows (the backend's [q | k | v] layout), bitwise the whole-tensor run. Rules in
 * test_gpu.h.
 *
 * Bounds: FWD_TOL 1e-6 (the element operations are the CPU's with the same roundings; the
 * per-head sum of squares is an fp32 dot on both sides, in a different order, which moves r by
 * an ulp at most); GRAD_TOL 1e-5 (the same for a second dot product); DGAIN_TOL 1e-5 (a sum over
 * tokens, double on both sides, of fp32 partials that may differ by an ulp); BF16_TOL 4e-3
 * (bf16 output rounding, <= 2^-9 per element). */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include "cpu_attention.h"

#define FWD_TOL 1e-6
#define GRAD_TOL 1e-5
#define DGAIN_TOL 1e-5
#define BF16_TOL 4e-3

static void check_shape(int B, int T, int H, int hd, int with_gain, uint64_t seed) {
    uint64_t rng = seed;
    const size_t n = (size_t)B * T * H * hd, nt = (size_t)T * (hd / 2);
    float *cos_t = malloc(nt * sizeof(float)), *sin_t = malloc(nt * sizeof(float));
    cpu_rope_tables_init(cos_t, sin_t, T, hd, 10000.0f);
    float *in = random_host(n, -2, 2, &rng), *dout = random_host(n, -1, 1, &rng);
    host_round_bf16(in, n); /* the kernels read c_q / c_k's bf16 output */
    float *gain = with_gain ? random_host(H, 0.5, 2, &rng) : NULL;
    float *din0 = random_host(n, -1, 1, &rng), *dgain0 = random_host(H, -1, 1, &rng);
    float *ref = malloc(n * sizeof(float));
    cpu_qk_norm_rope_forward(ref, in, gain, cos_t, sin_t, B, T, H, hd);
    float *r_din = copy_host(din0, n), *r_dgain = copy_host(dgain0, H), *r_c = calloc(n, sizeof(float));
    float *scratch = malloc(cpu_qk_norm_rope_backward_scratch_floats(B, T, H) * sizeof(float));
    cpu_qk_norm_rope_backward(r_din, with_gain ? r_dgain : NULL, dout, in, gain, cos_t, sin_t, B, T, H, hd, scratch);
    cpu_qk_norm_rope_backward(r_c, NULL, dout, in, gain, cos_t, sin_t, B, T, H, hd, scratch);

    float *d_cos = dev_floats(cos_t, nt), *d_sin = dev_floats(sin_t, nt);
    ct_bf16 *d_in = dev_bf16(in, n);
    float *d_gain = gain ? dev_floats(gain, H) : NULL, *d_out = dev_nan(n), *d_dout = dev_floats(dout, n);
    float *d_din = dev_floats(din0, n), *d_dgain = dev_floats(dgain0, H);
    float *d_scr = dev_alloc(cuda_qk_norm_rope_backward_scratch_floats(B, T, H) * sizeof(float));
    double *d_part = dev_alloc(cuda_qk_norm_rope_backward_partials_doubles(B, T, H) * sizeof(double));
    ct_bf16 *d_din16 = dev_alloc(n * 2);
    dev_poison_bf16(d_din16, n);
    ct_bf16 *d_out16 = dev_alloc(n * 2), *d_only16 = dev_alloc(n * 2);
    dev_poison_bf16(d_out16, n);
    dev_poison_bf16(d_only16, n);
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(d_out, d_out16, d_in, d_gain, d_cos, d_sin, B, T, H, hd, H * hd, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(NULL, d_only16, d_in, d_gain, d_cos, d_sin, B, T, H, hd, H * hd, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(d_din, d_din16, gain ? d_dgain : NULL, d_dout, d_in, d_gain, d_cos, d_sin,
                                             B, T, H, hd, H * hd, d_scr, d_part, 0));
    float *out = host_from_dev(d_out, n), *din = host_from_dev(d_din, n), *dgain = host_from_dev(d_dgain, H);
    float *din16 = host_from_dev_bf16(d_din16, n);
    char what[96];
    snprintf(what, sizeof what, "forward hd %d gain %d", hd, with_gain);
    CHECK_REL(what, out, ref, n, FWD_TOL);
    /* the bf16 copy is the fp32 result rounded once, with or without the fp32 output */
    float *out16 = host_from_dev_bf16(d_out16, n), *only16 = host_from_dev_bf16(d_only16, n), *rounded = copy_host(out, n);
    host_round_bf16(rounded, n);
    CHECK(memcmp(out16, rounded, n * sizeof(float)) == 0, "forward bf16 output is not bf16(fp32 output)");
    CHECK(memcmp(only16, rounded, n * sizeof(float)) == 0, "forward bf16-only output differs");
    free(out16), free(only16), free(rounded);
    dev_free(d_out16), dev_free(d_only16);
    snprintf(what, sizeof what, "backward din (+=) hd %d gain %d", hd, with_gain);
    CHECK_REL(what, din, r_din, n, GRAD_TOL);
    snprintf(what, sizeof what, "backward din bf16 hd %d gain %d", hd, with_gain);
    CHECK_REL(what, din16, r_c, n, BF16_TOL);
    if (with_gain) {
        snprintf(what, sizeof what, "backward dgain (+=) hd %d", hd);
        CHECK_REL(what, dgain, r_dgain, H, DGAIN_TOL);
        /* determinism of the gain reduction */
        dev_put(d_dgain, dgain0, H * sizeof(float));
        CHECK_CUDA_OK(cuda_qk_norm_rope_backward(NULL, NULL, d_dgain, d_dout, d_in, d_gain, d_cos, d_sin, B, T, H, hd,
                                                 H * hd, d_scr, d_part, 0));
        float *again = host_from_dev(d_dgain, H);
        CHECK(memcmp(again, dgain, H * sizeof(float)) == 0, "dgain not deterministic");
    } else {
        CHECK(memcmp(dgain, dgain0, H * sizeof(float)) == 0, "dgain touched without a gain");
    }
}

static void head_dim_64_with_gain(void) {
    REQUIRE_GPU();
    check_shape(3, 150, 4, 64, 1, 21);
    if (harness_case_failed) return;
    check_shape(2, 33, 2, 64, 0, 22);
}

static void head_dim_32(void) {
    REQUIRE_GPU();
    check_shape(2, 70, 8, 32, 1, 23);
}

static void head_dim_24_uneven_lanes(void) {
    REQUIRE_GPU();
    check_shape(1, 45, 3, 24, 1, 24);
}

static void head_dim_128_two_pairs_per_lane(void) {
    REQUIRE_GPU();
    check_shape(1, 20, 2, 128, 1, 25);
}

/* in and the input gradients as a column block of wider rows (the backend's [q | k | v] rows,
 * here k's block: columns [D, D + H*hd) of rows of D + 2*H*hd): every output bitwise the whole-
 * tensor run's, and the other columns of the wide gradient buffer untouched. */
static void column_block_of_wider_rows(void) {
    REQUIRE_GPU();
    const int B = 2, T = 37, H = 2, hd = 64, D = 256, ld = D + 2 * H * hd;
    const size_t rows = (size_t)B * T, n = rows * H * hd, wide = rows * ld, nt = (size_t)T * (hd / 2);
    uint64_t rng = 26;
    float *cos_t = malloc(nt * sizeof(float)), *sin_t = malloc(nt * sizeof(float));
    cpu_rope_tables_init(cos_t, sin_t, T, hd, 10000.0f);
    float *w = random_host(wide, -2, 2, &rng), *dout = random_host(n, -1, 1, &rng), *gain = random_host(H, 0.5, 2, &rng);
    float *in = malloc(n * sizeof(float));
    for (size_t r = 0; r < rows; r++) memcpy(in + r * H * hd, w + r * ld + D, (size_t)H * hd * sizeof(float));
    float *d_cos = dev_floats(cos_t, nt), *d_sin = dev_floats(sin_t, nt), *d_gain = dev_floats(gain, H);
    float *d_dout = dev_floats(dout, n), *d_out = dev_nan(n), *d_out_w = dev_nan(n);
    ct_bf16 *d_in = dev_bf16(in, n), *d_wide = dev_bf16(w, wide), *d_din16 = dev_alloc(n * 2),
            *d_din16_w = dev_alloc(wide * 2);
    float *d_din = dev_floats(in, n), *d_din_w = dev_floats(w, wide); /* din += : the same start values */
    dev_poison_bf16(d_din16, n);
    dev_poison_bf16(d_din16_w, wide);
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(d_out, NULL, d_in, d_gain, d_cos, d_sin, B, T, H, hd, H * hd, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(d_out_w, NULL, d_wide + D, d_gain, d_cos, d_sin, B, T, H, hd, ld, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(d_din, d_din16, NULL, d_dout, d_in, d_gain, d_cos, d_sin, B, T, H, hd,
                                             H * hd, NULL, NULL, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(d_din_w + D, d_din16_w + D, NULL, d_dout, d_wide + D, d_gain, d_cos, d_sin,
                                             B, T, H, hd, ld, NULL, NULL, 0));
    float *out = host_from_dev(d_out, n), *out_w = host_from_dev(d_out_w, n);
    CHECK(memcmp(out, out_w, n * sizeof(float)) == 0, "forward from a column block differs from the whole tensor's");
    float *din = host_from_dev(d_din, n), *din_w = host_from_dev(d_din_w, wide);
    float *g16 = host_from_dev_bf16(d_din16, n), *g16_w = host_from_dev_bf16(d_din16_w, wide);
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) {
            const size_t i = r * ld + (size_t)c;
            if (c >= D && c < D + H * hd) {
                const size_t j = r * H * hd + (size_t)(c - D);
                CHECK(memcmp(&din_w[i], &din[j], sizeof(float)) == 0 && memcmp(&g16_w[i], &g16[j], sizeof(float)) == 0,
                      "gradient at row %zu column %d differs from the whole tensor's", r, c);
            } else {
                CHECK(memcmp(&din_w[i], &w[i], sizeof(float)) == 0 && isnan(g16_w[i]),
                      "row %zu column %d, outside the block, was written", r, c);
            }
        }
    CHECK(cuda_qk_norm_rope_forward(d_out_w, NULL, d_wide + D, d_gain, d_cos, d_sin, B, T, H, hd, H * hd - 2, 0) != 0 &&
              strstr(ct_error(), "row stride of 126 elements") != NULL,
          "a row stride below the heads' width: got '%s'", ct_error());
    ct_error_clear();
    free(cos_t), free(sin_t), free(w), free(dout), free(gain), free(in);
    free(out), free(out_w), free(din), free(din_w), free(g16), free(g16_w);
}

int main(void) {
    RUN(head_dim_64_with_gain);
    RUN(head_dim_32);
    RUN(head_dim_24_uneven_lanes);
    RUN(head_dim_128_two_pairs_per_lane);
    RUN(column_block_of_wider_rows);
    TEST_EXIT();
}

#endif
