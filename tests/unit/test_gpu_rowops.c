/* test_gpu_rowops.c — the CUDA row ops (cuda_rmsnorm.cu, cuda_scaled_add.cu, cuda_residual_mix.cu,
 * cuda_relu2.cu, cuda_common.cu) against the CPU ops: RMSNorm, the fused block-input mix + norm
 * and residual + norm forwards, the residual + norm backward that recomputes its input, the
 * fused norm + mix backward, scaled add, residual mix, relu^2, bf16 conversion and the
 * fixed-order reductions. Rules in test_gpu.h.
 *
 * Bounds (relative norm error against the CPU op on the same fp32 inputs):
 *  F32_TOL 1e-6: these ops do the CPU's fp32 element operations with the same roundings; only
 *    row sums (in double on both sides, different order) may differ, in the last bit of an
 *    fp32 result at most: measured errors should be 0 or ~1e-8.
 *  GRAD_TOL 1e-5: gradients with a per-row dot product (rmsnorm backward) or per-channel sums
 *    over tokens (double on both sides): a few fp32 ulps.
 *  BF16_TOL 4e-3: outputs rounded to bf16 (8 significant bits, round to nearest even: relative
 *    error <= 2^-9 = 1.95e-3 per element, so <= 1.95e-3 norm-wise; 2x margin).
 * Shapes are deliberately ragged: rows not a multiple of 8 (rows per block), channels not a
 * multiple of 32, tokens spanning several CUDA_COLSUM_ROWS chunks with a partial last one. */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include <float.h>

#include "cpu_ops.h"

#define F32_TOL 1e-6
#define GRAD_TOL 1e-5
#define BF16_TOL 4e-3

/* not constants: odd_channels_scalar_path runs the row-op cases again on another shape */
static int N = 611, C = 200;

/* A device copy of host[0..n) one float past a 256-byte aligned start: not 16-byte aligned, so
 * the ops take their one-channel path. *base receives what dev_free needs. */
static float *dev_floats_unaligned(const float *host, size_t n, void **base) {
    float *p = dev_alloc((n + 1) * sizeof(float));
    dev_put(p + 1, host, n * sizeof(float));
    *base = p;
    return p + 1;
}

static void rmsnorm_forward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 1;
    const size_t n = (size_t)N * C;
    float *x = random_host(n, -2, 2, &rng);
    float *ref = malloc(n * sizeof(float)), *ref_r = malloc(N * sizeof(float));
    cpu_rmsnorm_forward(ref, ref_r, x, N, C, FLT_EPSILON);
    float *dx = dev_floats(x, n), *dout = dev_nan(n), *dr = dev_nan(N);
    ct_bf16 *d16 = dev_alloc(n * 2);
    dev_poison_bf16(d16, n);
    CHECK_CUDA_OK(cuda_rmsnorm_forward(dout, d16, dr, dx, N, C, FLT_EPSILON, 0));
    float *out = host_from_dev(dout, n), *r = host_from_dev(dr, N), *o16 = host_from_dev_bf16(d16, n);
    CHECK_REL("rmsnorm out", out, ref, n, F32_TOL);
    CHECK_REL("rmsnorm rstd", r, ref_r, N, F32_TOL);
    CHECK_REL("rmsnorm out bf16", o16, ref, n, BF16_TOL);
    /* in place (out == x), as the op allows */
    CHECK_CUDA_OK(cuda_rmsnorm_forward(dx, NULL, NULL, dx, N, C, FLT_EPSILON, 0));
    float *inplace = host_from_dev(dx, n);
    CHECK(memcmp(inplace, out, n * sizeof(float)) == 0, "in-place rmsnorm differs from out-of-place");
}

static void rmsnorm_backward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 2;
    const size_t n = (size_t)N * C;
    float *x = random_host(n, -2, 2, &rng), *dout = random_host(n, -1, 1, &rng);
    float *dx0 = random_host(n, -1, 1, &rng); /* accumulate into non-zero */
    float *y = malloc(n * sizeof(float)), *r = malloc(N * sizeof(float));
    cpu_rmsnorm_forward(y, r, x, N, C, FLT_EPSILON);
    float *ref = copy_host(dx0, n);
    cpu_rmsnorm_backward(ref, dout, x, r, N, C);
    float *d_x = dev_floats(x, n), *d_dout = dev_floats(dout, n), *d_r = dev_floats(r, N), *d_dx = dev_floats(dx0, n);
    CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, d_dout, d_x, d_r, N, C, 0));
    float *got = host_from_dev(d_dx, n);
    CHECK_REL("rmsnorm backward dx (+=)", got, ref, n, GRAD_TOL);
    /* determinism */
    dev_put(d_dx, dx0, n * sizeof(float));
    CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, d_dout, d_x, d_r, N, C, 0));
    float *again = host_from_dev(d_dx, n);
    CHECK(memcmp(got, again, n * sizeof(float)) == 0, "rmsnorm backward not deterministic");
}

static void mix_norm_forward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 3;
    const size_t n = (size_t)N * C;
    float *x = random_host(n, -2, 2, &rng), *skip = random_host(n, -2, 2, &rng), *x0 = random_host(n, -1, 1, &rng);
    float *skip_w = random_host(C, 0.5, 1.5, &rng), *mix = random_host(2 * C, -1, 1.5, &rng);
    for (int with_skip = 0; with_skip < 2; with_skip++) {
        /* CPU: scaled_add (if skip), residual_mix, rmsnorm */
        float *x_in = malloc(n * sizeof(float)), *xm = malloc(n * sizeof(float)), *a = malloc(n * sizeof(float));
        float *r = malloc(N * sizeof(float));
        if (with_skip) cpu_scaled_add_forward(x_in, x, skip, skip_w, N, C);
        else memcpy(x_in, x, n * sizeof(float));
        cpu_residual_mix_forward(xm, x_in, x0, mix, N, C);
        cpu_rmsnorm_forward(a, r, xm, N, C, FLT_EPSILON);
        float *d_x = dev_floats(x, n), *d_skip = dev_floats(skip, n), *d_x0 = dev_floats(x0, n);
        float *d_sw = dev_floats(skip_w, C), *d_mix = dev_floats(mix, 2 * C);
        float *d_xin = dev_nan(n), *d_xm = dev_nan(n), *d_r = dev_nan(N);
        ct_bf16 *d_a = dev_alloc(n * 2);
        dev_poison_bf16(d_a, n);
        CHECK_CUDA_OK(cuda_mix_norm_forward(with_skip ? d_xin : NULL, d_xm, d_r, d_a, d_x, with_skip ? d_skip : NULL,
                                            d_sw, d_x0, d_mix, N, C, FLT_EPSILON, 0));
        if (with_skip) {
            float *g_xin = host_from_dev(d_xin, n);
            CHECK_REL("mix_norm x_in", g_xin, x_in, n, F32_TOL);
        }
        float *g_xm = host_from_dev(d_xm, n), *g_r = host_from_dev(d_r, N), *g_a = host_from_dev_bf16(d_a, n);
        CHECK_REL(with_skip ? "mix_norm xm (skip)" : "mix_norm xm", g_xm, xm, n, F32_TOL);
        CHECK_REL("mix_norm rstd", g_r, r, N, F32_TOL);
        CHECK_REL("mix_norm a (bf16)", g_a, a, n, BF16_TOL);
    }
}

/* The block before's output made in the block input's pass (cuda_out_mix_norm_forward) against
 * cuda_scaled_add_forward then cuda_mix_norm_forward, bitwise: in place on one xm buffer, with
 * no skip, with another tensor as the skip, and with the output being made as the skip (the
 * first decoder block's case). */
static void out_mix_norm_forward_bitwise(void) {
    REQUIRE_GPU();
    uint64_t rng = 6;
    const size_t n = (size_t)N * C;
    float *xm = random_host(n, -2, 2, &rng), *ao = random_host(n, -2, 2, &rng), *mo = random_host(n, -2, 2, &rng);
    float *s1 = random_host(C, -1, 1, &rng), *s2 = random_host(C, -1, 1, &rng), *skip = random_host(n, -2, 2, &rng);
    float *x0 = random_host(n, -1, 1, &rng), *skip_w = random_host(C, 0.5, 1.5, &rng), *mix = random_host(2 * C, -1, 1.5, &rng);
    ct_bf16 *d_ao = dev_bf16(ao, n), *d_mo = dev_bf16(mo, n);
    float *d_s1 = dev_floats(s1, C), *d_s2 = dev_floats(s2, C), *d_skip = dev_floats(skip, n), *d_x0 = dev_floats(x0, n);
    float *d_sw = dev_floats(skip_w, C), *d_mix = dev_floats(mix, 2 * C);
    for (int mode = 0; mode < 3; mode++) { /* 0: no skip, 1: another skip, 2: the output itself as the skip */
        /* two ops */
        float *d_xm = dev_floats(xm, n), *d_out = dev_nan(n), *d_xin = dev_nan(n), *d_r = dev_nan(N);
        ct_bf16 *d_a = dev_alloc(n * 2);
        const float *sk = mode == 0 ? NULL : mode == 1 ? d_skip : d_out;
        CHECK_CUDA_OK(cuda_scaled_add_forward(d_out, d_xm, d_ao, d_s1, d_mo, d_s2, N, C, 0));
        CHECK_CUDA_OK(cuda_mix_norm_forward(mode ? d_xin : NULL, d_xm, d_r, d_a, d_out, sk, mode ? d_sw : NULL, d_x0,
                                            d_mix, N, C, FLT_EPSILON, 0));
        /* one pass, xm in place */
        float *f_xm = dev_floats(xm, n), *f_out = dev_nan(n), *f_xin = dev_nan(n), *f_r = dev_nan(N);
        ct_bf16 *f_a = dev_alloc(n * 2);
        const CudaBlockOutput prev = {f_out, f_xm, d_ao, d_mo, d_s1, d_s2};
        const float *fsk = mode == 0 ? NULL : mode == 1 ? d_skip : f_out;
        CHECK_CUDA_OK(cuda_out_mix_norm_forward(&prev, mode ? f_xin : NULL, f_xm, f_r, f_a, fsk, mode ? d_sw : NULL,
                                                d_x0, d_mix, N, C, FLT_EPSILON, 0));
        float *t[4] = {host_from_dev(d_out, n), host_from_dev(d_xm, n), host_from_dev(d_r, N),
                       host_from_dev_bf16(d_a, n)};
        float *f[4] = {host_from_dev(f_out, n), host_from_dev(f_xm, n), host_from_dev(f_r, N),
                       host_from_dev_bf16(f_a, n)};
        const char *names[4] = {"x_out", "xm", "rstd", "a (bf16)"};
        const size_t counts[4] = {n, n, (size_t)N, n};
        for (int k = 0; k < 4; k++) {
            CHECK(memcmp(t[k], f[k], counts[k] * sizeof(float)) == 0, "%s differs from the two ops' (skip mode %d)",
                  names[k], mode);
            free(t[k]), free(f[k]);
        }
        if (mode) {
            float *tx = host_from_dev(d_xin, n), *fx = host_from_dev(f_xin, n);
            CHECK(memcmp(tx, fx, n * sizeof(float)) == 0, "x_in differs from the two ops' (skip mode %d)", mode);
            free(tx), free(fx);
        }
        dev_free(d_xm), dev_free(d_out), dev_free(d_xin), dev_free(d_r), dev_free(d_a);
        dev_free(f_xm), dev_free(f_out), dev_free(f_xin), dev_free(f_r), dev_free(f_a);
    }
    const CudaBlockOutput half = {d_skip, d_x0, d_ao, NULL, d_s1, d_s2};
    CHECK(cuda_out_mix_norm_forward(&half, NULL, d_skip, d_skip, NULL, NULL, NULL, d_x0, d_mix, N, C, FLT_EPSILON, 0) !=
                  0 &&
              strstr(ct_error(), "needs x_out, xm, ao, mo") != NULL,
          "a block output without mo: got '%s'", ct_error());
    ct_error_clear();
    dev_free(d_ao), dev_free(d_mo), dev_free(d_s1), dev_free(d_s2), dev_free(d_skip), dev_free(d_x0), dev_free(d_sw),
        dev_free(d_mix);
    free(xm), free(ao), free(mo), free(s1), free(s2), free(skip), free(x0), free(skip_w), free(mix);
}

static void add_norm_forward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 4;
    const size_t n = (size_t)N * C;
    float *xm = random_host(n, -2, 2, &rng), *br = random_host(n, -2, 2, &rng), *sc = random_host(C, -1, 1, &rng);
    host_round_bf16(br, n); /* the branch is a product's bf16 output */
    float *x1 = malloc(n * sizeof(float)), *m = malloc(n * sizeof(float)), *r = malloc(N * sizeof(float));
    cpu_scaled_add_forward(x1, xm, br, sc, N, C);
    cpu_rmsnorm_forward(m, r, x1, N, C, FLT_EPSILON);
    float *d_xm = dev_floats(xm, n), *d_sc = dev_floats(sc, C);
    ct_bf16 *d_br = dev_bf16(br, n);
    float *d_x1 = dev_nan(n), *d_r = dev_nan(N);
    ct_bf16 *d_m = dev_alloc(n * 2);
    dev_poison_bf16(d_m, n);
    CHECK_CUDA_OK(cuda_add_norm_forward(d_x1, d_r, d_m, d_xm, d_br, d_sc, N, C, FLT_EPSILON, 0));
    float *g_x1 = host_from_dev(d_x1, n), *g_r = host_from_dev(d_r, N), *g_m = host_from_dev_bf16(d_m, n);
    CHECK_REL("add_norm x1", g_x1, x1, n, F32_TOL);
    CHECK_REL("add_norm rstd", g_r, r, N, F32_TOL);
    CHECK_REL("add_norm m (bf16)", g_m, m, n, BF16_TOL);
    /* without x1 (the backend's call): the same rstd and m bits */
    float *d_r2 = dev_nan(N);
    ct_bf16 *d_m2 = dev_alloc(n * 2);
    dev_poison_bf16(d_m2, n);
    CHECK_CUDA_OK(cuda_add_norm_forward(NULL, d_r2, d_m2, d_xm, d_br, d_sc, N, C, FLT_EPSILON, 0));
    float *g_r2 = host_from_dev(d_r2, N), *g_m2 = host_from_dev_bf16(d_m2, n);
    CHECK(memcmp(g_r2, g_r, N * sizeof(float)) == 0, "add_norm rstd differs without x1");
    CHECK(memcmp(g_m2, g_m, n * sizeof(float)) == 0, "add_norm m differs without x1");
    dev_free(d_m2);
}

/* The MLP norm's backward with its input x1 = xm + scale * branch and xm = mix(x_in, x0)
 * recomputed, and xm's own norm recomputed beside it: against the CPU ops on x1, and bitwise
 * against the backward on a stored x1 and the forward that made xm's norm. */
static void add_norm_backward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 14;
    const size_t n = (size_t)N * C;
    float *x_in = random_host(n, -2, 2, &rng), *x0 = random_host(n, -1, 1, &rng), *mix = random_host(2 * C, -1, 1.5, &rng);
    float *br = random_host(n, -2, 2, &rng), *sc = random_host(C, -1, 1, &rng);
    float *dout = random_host(n, -1, 1, &rng), *dx0 = random_host(n, -1, 1, &rng);
    host_round_bf16(br, n);
    float *xm = malloc(n * sizeof(float)), *x1 = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *r = malloc(N * sizeof(float));
    cpu_residual_mix_forward(xm, x_in, x0, mix, N, C);
    cpu_scaled_add_forward(x1, xm, br, sc, N, C);
    cpu_rmsnorm_forward(y, r, x1, N, C, FLT_EPSILON);
    float *ref = copy_host(dx0, n);
    cpu_rmsnorm_backward(ref, dout, x1, r, N, C);
    float *d_xin = dev_floats(x_in, n), *d_x0 = dev_floats(x0, n), *d_mix = dev_floats(mix, 2 * C);
    float *d_sc = dev_floats(sc, C), *d_dout = dev_floats(dout, n), *d_dx = dev_floats(dx0, n);
    float *d_xm = dev_nan(n), *d_x1 = dev_nan(n), *d_r = dev_nan(N), *d_rm = dev_nan(N);
    ct_bf16 *d_br = dev_bf16(br, n), *d_m = dev_alloc(n * 2), *d_a = dev_alloc(n * 2), *d_ren = dev_alloc(n * 2);
    /* the forwards as the backend runs them: xm and its norm, then x1 and its norm */
    CHECK_CUDA_OK(cuda_mix_norm_forward(NULL, d_xm, d_rm, d_a, d_xin, NULL, NULL, d_x0, d_mix, N, C, FLT_EPSILON, 0));
    CHECK_CUDA_OK(cuda_add_norm_forward(d_x1, d_r, d_m, d_xm, d_br, d_sc, N, C, FLT_EPSILON, 0));
    dev_poison_bf16(d_ren, n);
    CHECK_CUDA_OK(
        cuda_add_norm_backward(d_dx, d_ren, NULL, NULL, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, d_rm, N, C, NULL, 0));
    float *got = host_from_dev(d_dx, n);
    CHECK_REL("add_norm backward dx (+=)", got, ref, n, GRAD_TOL);
    float *ren = host_from_dev_bf16(d_ren, n), *a = host_from_dev_bf16(d_a, n);
    CHECK(memcmp(ren, a, n * sizeof(float)) == 0, "recomputed norm of xm differs from the forward's");
    /* bitwise the backward on the stored x1 */
    dev_put(d_dx, dx0, n * sizeof(float));
    CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, d_dout, d_x1, d_r, N, C, 0));
    float *stored = host_from_dev(d_dx, n);
    CHECK(memcmp(stored, got, n * sizeof(float)) == 0, "add_norm backward differs from rmsnorm backward on x1");
    /* without the renorm output: same dx */
    dev_put(d_dx, dx0, n * sizeof(float));
    CHECK_CUDA_OK(
        cuda_add_norm_backward(d_dx, NULL, NULL, NULL, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, NULL, N, C, NULL, 0));
    float *plain = host_from_dev(d_dx, n);
    CHECK(memcmp(plain, got, n * sizeof(float)) == 0, "add_norm backward dx depends on the renorm output");
    CHECK(cuda_add_norm_backward(d_dx, d_ren, NULL, NULL, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, NULL, N, C, NULL,
                                 0) != 0,
          "renorm without its rstd accepted");
    CHECK(cuda_add_norm_backward(d_dx, NULL, d_m, NULL, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, NULL, N, C, NULL,
                                 0) != 0,
          "dbranch without dscale accepted");
    dev_free(d_br);
    dev_free(d_m);
    dev_free(d_a);
    dev_free(d_ren);
}

/* The block input's fused backward (attention norm of the recomputed xm, then the residual mix)
 * against the CPU ops, and bitwise against the two CUDA ops on a stored xm: the fused kernel
 * where the shared memory allows (C = 200), the two-kernel path beyond it (C = 16000: 2 MB of
 * accumulators) and the one-channel path (odd_channels_scalar_path, C = 203). */
static void norm_mix_backward_case(int rows, int width, uint64_t seed) {
    uint64_t rng = seed;
    const size_t n = (size_t)rows * width;
    float *x_in = random_host(n, -2, 2, &rng), *x0 = random_host(n, -1, 1, &rng);
    float *mix = random_host(2 * (size_t)width, -1, 1.5, &rng);
    float *dout = random_host(n, -1, 1, &rng), *dres = random_host(n, -1, 1, &rng);
    float *dx0_init = random_host(n, -1, 1, &rng), *dmix_init = random_host(2 * (size_t)width, -1, 1, &rng);
    /* CPU: xm, its rstd; g = dres + norm backward; mix backward on g (dx_in written) */
    float *xm = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *r = malloc(rows * sizeof(float));
    cpu_residual_mix_forward(xm, x_in, x0, mix, rows, width);
    cpu_rmsnorm_forward(y, r, xm, rows, width, FLT_EPSILON);
    float *g = copy_host(dres, n), *r_din = calloc(n, sizeof(float)), *r_dx0 = copy_host(dx0_init, n);
    float *r_dmix = copy_host(dmix_init, 2 * (size_t)width);
    cpu_rmsnorm_backward(g, dout, xm, r, rows, width);
    cpu_residual_mix_backward(r_din, r_dx0, r_dmix, g, x_in, x0, mix, rows, width);
    float *d_xin = dev_floats(x_in, n), *d_x0 = dev_floats(x0, n), *d_mix = dev_floats(mix, 2 * (size_t)width);
    float *d_dout = dev_floats(dout, n), *d_dx = dev_floats(dres, n), *d_dx0 = dev_floats(dx0_init, n);
    float *d_dmix = dev_floats(dmix_init, 2 * (size_t)width), *d_din = dev_nan(n), *d_xm = dev_nan(n);
    float *d_r = dev_nan(rows);
    ct_bf16 *d_a = dev_alloc(n * 2);
    double *partials = dev_alloc(cuda_colsum_doubles(rows, width, 2) * sizeof(double));
    CHECK_CUDA_OK(cuda_mix_norm_forward(NULL, d_xm, d_r, d_a, d_xin, NULL, NULL, d_x0, d_mix, rows, width, FLT_EPSILON, 0));
    CHECK_CUDA_OK(cuda_norm_mix_backward(d_din, d_dx0, d_dmix, d_dx, d_dout, d_xin, d_x0, d_mix, d_r, rows, width,
                                         partials, 0));
    float *f_din = host_from_dev(d_din, n), *f_dx0 = host_from_dev(d_dx0, n);
    float *f_dmix = host_from_dev(d_dmix, 2 * (size_t)width);
    CHECK_REL("norm_mix backward dx_in (=)", f_din, r_din, n, GRAD_TOL);
    CHECK_REL("norm_mix backward dx0 (+=)", f_dx0, r_dx0, n, GRAD_TOL);
    CHECK_REL("norm_mix backward dmix (+=)", f_dmix, r_dmix, 2 * (size_t)width, GRAD_TOL);
    /* the two ops on the stored xm: the same bits */
    dev_put(d_dx, dres, n * sizeof(float));
    dev_put(d_dx0, dx0_init, n * sizeof(float));
    dev_put(d_dmix, dmix_init, 2 * (size_t)width * sizeof(float));
    float *d_din2 = dev_nan(n);
    CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, d_dout, d_xm, d_r, rows, width, 0));
    CHECK_CUDA_OK(cuda_residual_mix_backward(d_din2, 0, d_dx0, d_dmix, d_dx, d_xin, d_x0, d_mix, rows, width,
                                             partials, 0));
    float *t_din = host_from_dev(d_din2, n), *t_dx0 = host_from_dev(d_dx0, n);
    float *t_dmix = host_from_dev(d_dmix, 2 * (size_t)width);
    CHECK(memcmp(f_din, t_din, n * sizeof(float)) == 0, "norm_mix dx_in differs from the two ops' (C = %d)", width);
    CHECK(memcmp(f_dx0, t_dx0, n * sizeof(float)) == 0, "norm_mix dx0 differs from the two ops' (C = %d)", width);
    CHECK(memcmp(f_dmix, t_dmix, 2 * (size_t)width * sizeof(float)) == 0,
          "norm_mix dmix differs from the two ops' (C = %d)", width);
    free(x_in), free(x0), free(mix), free(dout), free(dres), free(dx0_init), free(dmix_init), free(xm), free(y), free(r);
    free(g), free(r_din), free(r_dx0), free(r_dmix), free(f_din), free(f_dx0), free(f_dmix), free(t_din), free(t_dx0),
        free(t_dmix);
    dev_free(d_xin), dev_free(d_x0), dev_free(d_mix), dev_free(d_dout), dev_free(d_dx), dev_free(d_dx0),
        dev_free(d_dmix), dev_free(d_din), dev_free(d_xm), dev_free(d_r), dev_free(d_a), dev_free(partials),
        dev_free(d_din2);
}

static void norm_mix_backward_matches_cpu(void) {
    REQUIRE_GPU();
    norm_mix_backward_case(N, C, 15);
}

static void norm_mix_backward_without_shared_memory(void) {
    REQUIRE_GPU();
    norm_mix_backward_case(300, 16000, 16); /* 8 x 2 x 16000 doubles: beyond any GPU's 227 KiB */
}

/* The MLP norm's backward fused with its residual's (x1 = xm + scale * branch): against the CPU
 * ops, and bitwise against cuda_add_norm_backward followed by cuda_scaled_add_backward (dx,
 * the renorm, dbranch, dscale): the fused kernel where the shared memory allows, the two-kernel
 * path beyond it, the one-channel path at an odd width. */
static void add_norm_scale_backward_case(int rows, int width, uint64_t seed) {
    uint64_t rng = seed;
    const size_t n = (size_t)rows * width, w = (size_t)width;
    float *x_in = random_host(n, -2, 2, &rng), *x0 = random_host(n, -1, 1, &rng), *mix = random_host(2 * w, -1, 1.5, &rng);
    float *br = random_host(n, -2, 2, &rng), *sc = random_host(w, -1, 1, &rng);
    float *dout = random_host(n, -1, 1, &rng), *dres = random_host(n, -1, 1, &rng), *ds0 = random_host(w, -1, 1, &rng);
    host_round_bf16(br, n);
    /* CPU: x1 and its norm; dx = dres + norm backward; the residual's backward on dx */
    float *xm = malloc(n * sizeof(float)), *x1 = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *r = malloc((size_t)rows * sizeof(float));
    cpu_residual_mix_forward(xm, x_in, x0, mix, rows, width);
    cpu_scaled_add_forward(x1, xm, br, sc, rows, width);
    cpu_rmsnorm_forward(y, r, x1, rows, width, FLT_EPSILON);
    float *r_dx = copy_host(dres, n), *r_db = calloc(n, sizeof(float)), *r_ds = copy_host(ds0, w);
    cpu_rmsnorm_backward(r_dx, dout, x1, r, rows, width);
    cpu_scaled_add_backward(NULL, r_db, r_ds, r_dx, br, sc, rows, width);
    float *d_xin = dev_floats(x_in, n), *d_x0 = dev_floats(x0, n), *d_mix = dev_floats(mix, 2 * w);
    float *d_sc = dev_floats(sc, w), *d_dout = dev_floats(dout, n), *d_dx = dev_floats(dres, n), *d_ds = dev_floats(ds0, w);
    float *d_xm = dev_nan(n), *d_r = dev_nan(rows), *d_rm = dev_nan(rows);
    ct_bf16 *d_br = dev_bf16(br, n), *d_a = dev_alloc(n * 2), *d_m = dev_alloc(n * 2), *d_ren = dev_alloc(n * 2);
    ct_bf16 *d_db = dev_alloc(n * 2);
    double *partials = dev_alloc(cuda_colsum_doubles(rows, width, 1) * sizeof(double));
    CHECK_CUDA_OK(cuda_mix_norm_forward(NULL, d_xm, d_rm, d_a, d_xin, NULL, NULL, d_x0, d_mix, rows, width, FLT_EPSILON, 0));
    CHECK_CUDA_OK(cuda_add_norm_forward(NULL, d_r, d_m, d_xm, d_br, d_sc, rows, width, FLT_EPSILON, 0));
    dev_poison_bf16(d_ren, n);
    dev_poison_bf16(d_db, n);
    CHECK_CUDA_OK(cuda_add_norm_backward(d_dx, d_ren, d_db, d_ds, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, d_rm, rows,
                                         width, partials, 0));
    float *f_dx = host_from_dev(d_dx, n), *f_ds = host_from_dev(d_ds, w);
    float *f_db = host_from_dev_bf16(d_db, n), *f_ren = host_from_dev_bf16(d_ren, n);
    CHECK_REL("add_norm+scale backward dx (+=)", f_dx, r_dx, n, GRAD_TOL);
    CHECK_REL("add_norm+scale backward dbranch (bf16)", f_db, r_db, n, BF16_TOL);
    CHECK_REL("add_norm+scale backward dscale (+=)", f_ds, r_ds, w, GRAD_TOL);
    /* the two ops: the same bits */
    dev_put(d_dx, dres, n * sizeof(float));
    dev_put(d_ds, ds0, w * sizeof(float));
    dev_poison_bf16(d_ren, n);
    dev_poison_bf16(d_db, n);
    CHECK_CUDA_OK(cuda_add_norm_backward(d_dx, d_ren, NULL, NULL, d_dout, d_xin, d_x0, d_mix, d_br, d_sc, d_r, d_rm, rows,
                                         width, NULL, 0));
    CHECK_CUDA_OK(cuda_scaled_add_backward(NULL, NULL, d_db, d_ds, d_dx, NULL, d_br, d_sc, rows, width, partials, 0));
    float *t_dx = host_from_dev(d_dx, n), *t_ds = host_from_dev(d_ds, w);
    float *t_db = host_from_dev_bf16(d_db, n), *t_ren = host_from_dev_bf16(d_ren, n);
    CHECK(memcmp(f_dx, t_dx, n * sizeof(float)) == 0, "fused dx differs from the two ops' (C = %d)", width);
    CHECK(memcmp(f_ren, t_ren, n * sizeof(float)) == 0, "fused renorm differs from the two ops' (C = %d)", width);
    CHECK(memcmp(f_db, t_db, n * sizeof(float)) == 0, "fused dbranch differs from the two ops' (C = %d)", width);
    CHECK(memcmp(f_ds, t_ds, w * sizeof(float)) == 0, "fused dscale differs from the two ops' (C = %d)", width);
    free(x_in), free(x0), free(mix), free(br), free(sc), free(dout), free(dres), free(ds0), free(xm), free(x1), free(y);
    free(r), free(r_dx), free(r_db), free(r_ds), free(f_dx), free(f_ds), free(f_db), free(f_ren), free(t_dx), free(t_ds),
        free(t_db), free(t_ren);
    dev_free(d_xin), dev_free(d_x0), dev_free(d_mix), dev_free(d_sc), dev_free(d_dout), dev_free(d_dx), dev_free(d_ds),
        dev_free(d_xm), dev_free(d_r), dev_free(d_rm), dev_free(d_br), dev_free(d_a), dev_free(d_m), dev_free(d_ren),
        dev_free(d_db), dev_free(partials);
}

static void add_norm_scale_backward_fused(void) {
    REQUIRE_GPU();
    add_norm_scale_backward_case(N, C, 17);
    if (harness_case_failed) return;
    add_norm_scale_backward_case(70, 203, 18); /* one channel per lane */
}

static void add_norm_scale_backward_without_shared_memory(void) {
    REQUIRE_GPU();
    add_norm_scale_backward_case(300, 8000, 19); /* 8 x 8064 doubles: beyond any GPU's 227 KiB */
}

static void scaled_add_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 5;
    const size_t n = (size_t)N * C;
    float *x = random_host(n, -2, 2, &rng), *br = random_host(n, -2, 2, &rng), *sc = random_host(C, -1, 1, &rng);
    float *dout = random_host(n, -1, 1, &rng), *dx0 = random_host(n, -1, 1, &rng), *db0 = random_host(n, -1, 1, &rng);
    float *ds0 = random_host(C, -1, 1, &rng);
    host_round_bf16(br, n); /* the forward's and the bf16 backward's branch is a product's bf16 output */
    /* forward */
    float *ref = malloc(n * sizeof(float));
    cpu_scaled_add_forward(ref, x, br, sc, N, C);
    float *d_x = dev_floats(x, n), *d_br = dev_floats(br, n), *d_sc = dev_floats(sc, C), *d_out = dev_nan(n);
    ct_bf16 *d_br16 = dev_bf16(br, n);
    CHECK_CUDA_OK(cuda_scaled_add_forward(d_out, d_x, NULL, NULL, d_br16, d_sc, N, C, 0));
    float *out = host_from_dev(d_out, n);
    CHECK_REL("scaled_add forward", out, ref, n, F32_TOL);
    /* with an inner branch: (x + sc2 * br2) + sc * br, as two CPU scaled adds and bitwise as two
     * launches (the block output from xm without a stored x1) */
    {
        float *br2 = random_host(n, -2, 2, &rng), *sc2 = random_host(C, -1, 1, &rng);
        host_round_bf16(br2, n);
        float *mid = malloc(n * sizeof(float)), *ref2 = malloc(n * sizeof(float));
        cpu_scaled_add_forward(mid, x, br2, sc2, N, C);
        cpu_scaled_add_forward(ref2, mid, br, sc, N, C);
        ct_bf16 *d_br2 = dev_bf16(br2, n);
        float *d_sc2 = dev_floats(sc2, C), *d_mid = dev_nan(n), *d_two = dev_nan(n);
        CHECK_CUDA_OK(cuda_scaled_add_forward(d_out, d_x, d_br2, d_sc2, d_br16, d_sc, N, C, 0));
        CHECK_CUDA_OK(cuda_scaled_add_forward(d_mid, d_x, NULL, NULL, d_br2, d_sc2, N, C, 0));
        CHECK_CUDA_OK(cuda_scaled_add_forward(d_two, d_mid, NULL, NULL, d_br16, d_sc, N, C, 0));
        float *one = host_from_dev(d_out, n), *two = host_from_dev(d_two, n);
        CHECK_REL("scaled_add forward, inner branch", one, ref2, n, F32_TOL);
        CHECK(memcmp(one, two, n * sizeof(float)) == 0, "scaled_add with an inner branch differs from two adds");
        CHECK(cuda_scaled_add_forward(d_out, d_x, d_br2, NULL, d_br16, d_sc, N, C, 0) != 0,
              "inner branch without its scale accepted");
        dev_free(d_br2);
        free(br2), free(sc2), free(mid), free(ref2), free(one), free(two);
    }
    /* backward: dx and dscale accumulate into non-zero buffers, dbranch is written over one */
    float *r_dx = copy_host(dx0, n), *r_db = calloc(n, sizeof(float)), *r_ds = copy_host(ds0, C);
    cpu_scaled_add_backward(r_dx, r_db, r_ds, dout, br, sc, N, C);
    float *r_db16 = calloc(n, sizeof(float)), *r_ds16 = calloc(C, sizeof(float));
    cpu_scaled_add_backward(NULL, r_db16, r_ds16, dout, br, sc, N, C); /* the bf16 output is the contribution */
    float *d_dout = dev_floats(dout, n), *d_dx = dev_floats(dx0, n), *d_db = dev_floats(db0, n);
    float *d_ds = dev_floats(ds0, C);
    ct_bf16 *d_db16 = dev_alloc(n * 2);
    dev_poison_bf16(d_db16, n);
    double *partials = dev_alloc(cuda_colsum_doubles(N, C, 1) * sizeof(double));
    CHECK_CUDA_OK(cuda_scaled_add_backward(d_dx, d_db, d_db16, d_ds, d_dout, d_br, NULL, d_sc, N, C, partials, 0));
    float *g_dx = host_from_dev(d_dx, n), *g_db = host_from_dev(d_db, n), *g_ds = host_from_dev(d_ds, C);
    float *g_db16 = host_from_dev_bf16(d_db16, n);
    CHECK_REL("scaled_add backward dx (+=)", g_dx, r_dx, n, F32_TOL);
    CHECK_REL("scaled_add backward dbranch (=)", g_db, r_db, n, F32_TOL);
    CHECK_REL("scaled_add backward dscale (+=)", g_ds, r_ds, C, GRAD_TOL);
    CHECK_REL("scaled_add backward dbranch bf16", g_db16, r_db16, n, BF16_TOL);
    /* determinism of the parameter gradient */
    dev_put(d_ds, ds0, C * sizeof(float));
    CHECK_CUDA_OK(cuda_scaled_add_backward(NULL, NULL, NULL, d_ds, d_dout, d_br, NULL, d_sc, N, C, partials, 0));
    float *again = host_from_dev(d_ds, C);
    CHECK(memcmp(again, g_ds, C * sizeof(float)) == 0, "dscale not deterministic (or depends on the other outputs)");
    /* the bf16 branch (holding the same values) gives the same dscale bits */
    dev_put(d_ds, ds0, C * sizeof(float));
    CHECK_CUDA_OK(cuda_scaled_add_backward(NULL, NULL, NULL, d_ds, d_dout, NULL, d_br16, d_sc, N, C, partials, 0));
    float *from16 = host_from_dev(d_ds, C);
    CHECK(memcmp(from16, g_ds, C * sizeof(float)) == 0, "dscale from the bf16 branch differs from the fp32 branch's");
    /* the one-channel path (dout not 16-byte aligned): the 4-wide path's bits, dscale included */
    if (C % 4 == 0) {
        void *base;
        float *d_dout1 = dev_floats_unaligned(dout, n, &base);
        dev_put(d_dx, dx0, n * sizeof(float));
        dev_put(d_ds, ds0, C * sizeof(float));
        dev_poison_bf16(d_db16, n);
        CHECK_CUDA_OK(cuda_scaled_add_backward(d_dx, d_db, d_db16, d_ds, d_dout1, d_br, NULL, d_sc, N, C, partials, 0));
        float *s_dx = host_from_dev(d_dx, n), *s_db = host_from_dev(d_db, n), *s_ds = host_from_dev(d_ds, C);
        float *s_db16 = host_from_dev_bf16(d_db16, n);
        CHECK(memcmp(s_dx, g_dx, n * sizeof(float)) == 0 && memcmp(s_db, g_db, n * sizeof(float)) == 0 &&
                  memcmp(s_ds, g_ds, C * sizeof(float)) == 0 && memcmp(s_db16, g_db16, n * sizeof(float)) == 0,
              "scaled_add backward: the one-channel path differs from the 4-wide one");
        free(s_dx), free(s_db), free(s_ds), free(s_db16);
        dev_free(base);
    }
    /* both branches: refused */
    CHECK(cuda_scaled_add_backward(NULL, NULL, NULL, d_ds, d_dout, d_br, d_br16, d_sc, N, C, partials, 0) != 0,
          "two branches accepted");
    dev_free(d_br16);
    free(from16);
}

static void residual_mix_backward_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 6;
    const size_t n = (size_t)N * C;
    float *x = random_host(n, -2, 2, &rng), *x0 = random_host(n, -2, 2, &rng), *mix = random_host(2 * C, -1, 1, &rng);
    float *dout = random_host(n, -1, 1, &rng), *dx_init = random_host(n, -1, 1, &rng);
    float *dx0_init = random_host(n, -1, 1, &rng), *dmix_init = random_host(2 * C, -1, 1, &rng);
    float *r_dx = copy_host(dx_init, n), *r_dx0 = copy_host(dx0_init, n), *r_dmix = copy_host(dmix_init, 2 * C);
    cpu_residual_mix_backward(r_dx, r_dx0, r_dmix, dout, x, x0, mix, N, C);
    float *d_x = dev_floats(x, n), *d_x0 = dev_floats(x0, n), *d_mix = dev_floats(mix, 2 * C);
    float *d_dout = dev_floats(dout, n), *d_dx = dev_floats(dx_init, n), *d_dx0 = dev_floats(dx0_init, n);
    float *d_dmix = dev_floats(dmix_init, 2 * C);
    double *partials = dev_alloc(cuda_colsum_doubles(N, C, 2) * sizeof(double));
    CHECK_CUDA_OK(cuda_residual_mix_backward(d_dx, 1, d_dx0, d_dmix, d_dout, d_x, d_x0, d_mix, N, C, partials, 0));
    float *g_dx = host_from_dev(d_dx, n), *g_dx0 = host_from_dev(d_dx0, n), *g_dmix = host_from_dev(d_dmix, 2 * C);
    CHECK_REL("residual_mix backward dx (+=)", g_dx, r_dx, n, F32_TOL);
    CHECK_REL("residual_mix backward dx0 (+=)", g_dx0, r_dx0, n, F32_TOL);
    CHECK_REL("residual_mix backward dmix (+=)", g_dmix, r_dmix, 2 * C, GRAD_TOL);
    dev_put(d_dmix, dmix_init, 2 * C * sizeof(float));
    CHECK_CUDA_OK(cuda_residual_mix_backward(d_dx, 1, d_dx0, d_dmix, d_dout, d_x, d_x0, d_mix, N, C, partials, 0));
    float *again = host_from_dev(d_dmix, 2 * C);
    CHECK(memcmp(again, g_dmix, 2 * C * sizeof(float)) == 0, "dmix not deterministic");
    /* dx written (=) over NaN: mix[0]*dout alone, the CPU's product bit for bit */
    float *r_w = calloc(n, sizeof(float)), *r_w0 = calloc(n, sizeof(float)), *r_wm = calloc(2 * C, sizeof(float));
    cpu_residual_mix_backward(r_w, r_w0, r_wm, dout, x, x0, mix, N, C);
    float *d_w = dev_nan(n);
    CHECK_CUDA_OK(cuda_residual_mix_backward(d_w, 0, d_dx0, d_dmix, d_dout, d_x, d_x0, d_mix, N, C, partials, 0));
    float *g_w = host_from_dev(d_w, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += g_w[i] != r_w[i];
    CHECK(bad == 0, "residual_mix backward dx (=): %zu of %zu elements differ from mix[0]*dout", bad, n);
    free(r_w), free(r_w0), free(r_wm), free(g_w);
    dev_free(d_w);
    /* the one-channel path (dout not 16-byte aligned) gives the 4-wide path's bits, dmix included:
     * same rows per thread, same order of the sums */
    if (C % 4 == 0) {
        void *base;
        float *d_dout1 = dev_floats_unaligned(dout, n, &base);
        dev_put(d_dx, dx_init, n * sizeof(float));
        dev_put(d_dx0, dx0_init, n * sizeof(float));
        dev_put(d_dmix, dmix_init, 2 * C * sizeof(float));
        CHECK_CUDA_OK(cuda_residual_mix_backward(d_dx, 1, d_dx0, d_dmix, d_dout1, d_x, d_x0, d_mix, N, C, partials, 0));
        float *s_dx = host_from_dev(d_dx, n), *s_dx0 = host_from_dev(d_dx0, n), *s_dmix = host_from_dev(d_dmix, 2 * C);
        CHECK(memcmp(s_dx, g_dx, n * sizeof(float)) == 0 && memcmp(s_dx0, g_dx0, n * sizeof(float)) == 0 &&
                  memcmp(s_dmix, g_dmix, 2 * C * sizeof(float)) == 0,
              "residual_mix backward: the one-channel path differs from the 4-wide one");
        free(s_dx), free(s_dx0), free(s_dmix);
        dev_free(base);
    }
}

/* relu^2 on bf16 u and dh: the CPU op on the same (bf16-valued) inputs, rounded once to bf16,
 * must be matched bit for bit (one fp32 product each, then the rounding). Lengths cover the
 * 8-wide vector path with and without a tail, a misaligned start (the one-by-one path) and the
 * in-place backward the backend uses, with and without h remade in the same pass (bitwise the
 * forward's h). */
static void relu2_bf16_matches_cpu(void) {
    REQUIRE_GPU();
    uint64_t rng = 7;
    const size_t lengths[] = {(size_t)N * C, (size_t)N * C - 3, 5};
    for (size_t li = 0; li < 3; li++)
        for (int offset = 0; offset < 2; offset++) {
            const size_t n = lengths[li];
            float *u = random_host(n, -2, 2, &rng), *dh = random_host(n, -1, 1, &rng);
            host_round_bf16(u, n);
            host_round_bf16(dh, n);
            float *h = malloc(n * sizeof(float)), *du = calloc(n, sizeof(float));
            cpu_relu2_forward(h, u, 1, (int)n);
            cpu_relu2_backward(du, dh, u, 1, (int)n);
            /* offset 1: every buffer starts one element (2 bytes) past a 16-byte boundary */
            ct_bf16 *b_u = dev_alloc((n + 1) * 2), *b_h = dev_alloc((n + 1) * 2), *b_dh = dev_alloc((n + 1) * 2);
            ct_bf16 *b_h2 = dev_alloc((n + 1) * 2), *b_dh2 = dev_alloc((n + 1) * 2);
            ct_bf16 *u16 = b_u + offset, *h16 = b_h + offset, *dh16 = b_dh + offset;
            ct_bf16 *h2_16 = b_h2 + offset, *dh2_16 = b_dh2 + offset;
            uint16_t *host16 = malloc(n * 2);
            for (size_t i = 0; i < n; i++) host16[i] = host_f32_to_bf16(u[i]);
            dev_put(u16, host16, n * 2);
            for (size_t i = 0; i < n; i++) host16[i] = host_f32_to_bf16(dh[i]);
            dev_put(dh16, host16, n * 2);
            dev_put(dh2_16, host16, n * 2);
            dev_poison_bf16(h16, n);
            dev_poison_bf16(h2_16, n);
            CHECK_CUDA_OK(cuda_relu2_forward(h16, u16, n, 0));
            CHECK_CUDA_OK(cuda_relu2_backward(dh16, NULL, dh16, u16, n, 0));    /* in place */
            CHECK_CUDA_OK(cuda_relu2_backward(dh2_16, h2_16, dh2_16, u16, n, 0)); /* and h remade */
            uint16_t *g_h = malloc(n * 2), *g_du = malloc(n * 2), *g_h2 = malloc(n * 2), *g_du2 = malloc(n * 2);
            dev_get(g_h, h16, n * 2);
            dev_get(g_du, dh16, n * 2);
            dev_get(g_h2, h2_16, n * 2);
            dev_get(g_du2, dh2_16, n * 2);
            size_t bad_h = 0, bad_du = 0;
            for (size_t i = 0; i < n; i++) {
                bad_h += host_bf16_to_f32(g_h[i]) != host_bf16_to_f32(host_f32_to_bf16(h[i]));
                bad_du += host_bf16_to_f32(g_du[i]) != host_bf16_to_f32(host_f32_to_bf16(du[i]));
            }
            CHECK(bad_h == 0, "relu2 forward (n %zu, offset %d): %zu elements differ from bf16(cpu)", n, offset, bad_h);
            CHECK(bad_du == 0, "relu2 backward (n %zu, offset %d): %zu elements differ from bf16(cpu)", n, offset,
                  bad_du);
            CHECK(memcmp(g_h2, g_h, n * 2) == 0 && memcmp(g_du2, g_du, n * 2) == 0,
                  "relu2 backward with h (n %zu, offset %d): h or du differs from the forward's / the plain backward's",
                  n, offset);
            /* h must be a buffer of its own */
            CHECK(cuda_relu2_backward(dh2_16, dh2_16, dh2_16, u16, n, 0) != 0, "relu2 backward: h aliasing du accepted");
            dev_free(b_u), dev_free(b_h), dev_free(b_dh), dev_free(b_h2), dev_free(b_dh2);
            free(u), free(dh), free(h), free(du), free(host16), free(g_h), free(g_du), free(g_h2), free(g_du2);
        }
}

static void bf16_conversion_rounds_to_nearest_even(void) {
    REQUIRE_GPU();
    uint64_t rng = 8;
    const size_t n = 100003;
    float *x = random_host(n, -3, 3, &rng);
    /* a few exact ties and specials */
    const uint32_t ties[] = {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7fffffu, 0x00000001u, 0x80000000u};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) memcpy(&x[i], &ties[i], 4);
    float *d_x = dev_floats(x, n);
    ct_bf16 *d_h = dev_alloc(n * 2);
    CHECK_CUDA_OK(cuda_f32_to_bf16(d_h, d_x, n, 0));
    uint16_t *h = malloc(n * 2);
    dev_get(h, d_h, n * 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != host_f32_to_bf16(x[i]);
    CHECK(bad == 0, "%zu of %zu bf16 conversions differ from round-to-nearest-even", bad, n);
    float *back = dev_nan(n);
    CHECK_CUDA_OK(cuda_bf16_to_f32(back, d_h, n, 0));
    float *g = host_from_dev(back, n);
    for (size_t i = 0; i < n; i++) CHECK(g[i] == host_bf16_to_f32(h[i]) || (isnan(g[i]) && isnan(host_bf16_to_f32(h[i]))), "bf16 -> f32 at %zu", i);
}

static void reductions_match_double(void) {
    REQUIRE_GPU();
    uint64_t rng = 9;
    const size_t sizes[] = {1, 1000, 4097, 5000000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        float *x = random_host(n, -1, 2, &rng);
        double sum = 0, sumsq = 0;
        for (size_t i = 0; i < n; i++) {
            sum += x[i];
            sumsq += (double)x[i] * x[i];
        }
        float *d_x = dev_floats(x, n);
        double *partials = dev_alloc(cuda_reduce_doubles(n) * sizeof(double)), *d_out = dev_alloc(2 * sizeof(double));
        CHECK_CUDA_OK(cuda_sum(d_out, d_x, n, partials, 0));
        CHECK_CUDA_OK(cuda_sumsq(d_out + 1, d_x, n, partials, 0));
        double got[2];
        dev_get(got, d_out, sizeof got);
        CHECK(fabs(got[0] - sum) <= 1e-12 * fmax(1.0, fabs(sum)), "sum of %zu: %.17g vs %.17g", n, got[0], sum);
        CHECK(fabs(got[1] - sumsq) <= 1e-12 * sumsq, "sumsq of %zu: %.17g vs %.17g", n, got[1], sumsq);
        /* colsum over a [n/C, C] view */
        if (n >= 1000) {
            const int rows = (int)(n / 97), cols = 97;
            float *g0 = random_host(cols, -1, 1, &rng);
            double *ref = calloc(cols, sizeof(double));
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) ref[c] += x[(size_t)r * cols + c];
            float *d_g = dev_floats(g0, cols);
            double *cp = dev_alloc(cuda_colsum_doubles(rows, cols, 1) * sizeof(double));
            CHECK_CUDA_OK(cuda_colsum(d_g, d_x, NULL, rows, cols, cp, 0));
            float *g = host_from_dev(d_g, cols);
            for (int c = 0; c < cols; c++) {
                const float want = g0[c] + (float)ref[c];
                CHECK(fabsf(g[c] - want) <= 1e-6f * fmaxf(1.0f, fabsf(want)), "colsum[%d] %.9g vs %.9g", c, g[c], want);
            }
            dev_free(cp);
            dev_free(d_g);
        }
        dev_free(partials);
        dev_free(d_out);
        dev_free(d_x);
        free(x);
    }
}

/* C % 4 != 0: the row kernels' one-channel-at-a-time path (the backend's rows always take the
 * 4-wide one), and fewer rows than a block holds. */
static void odd_channels_scalar_path(void) {
    REQUIRE_GPU();
    N = 37, C = 203;
    rmsnorm_forward_matches_cpu();
    rmsnorm_backward_matches_cpu();
    mix_norm_forward_matches_cpu();
    add_norm_forward_matches_cpu();
    add_norm_backward_matches_cpu();
    norm_mix_backward_matches_cpu();
    scaled_add_matches_cpu();
    N = 611, C = 200;
}

int main(void) {
    RUN(rmsnorm_forward_matches_cpu);
    RUN(rmsnorm_backward_matches_cpu);
    RUN(mix_norm_forward_matches_cpu);
    RUN(out_mix_norm_forward_bitwise);
    RUN(add_norm_forward_matches_cpu);
    RUN(add_norm_backward_matches_cpu);
    RUN(norm_mix_backward_matches_cpu);
    RUN(norm_mix_backward_without_shared_memory);
    RUN(add_norm_scale_backward_fused);
    RUN(add_norm_scale_backward_without_shared_memory);
    RUN(scaled_add_matches_cpu);
    RUN(residual_mix_backward_matches_cpu);
    RUN(relu2_bf16_matches_cpu);
    RUN(odd_channels_scalar_path);
    RUN(bf16_conversion_rounds_to_nearest_even);
    RUN(reductions_match_double);
    TEST_EXIT();
}

#endif
