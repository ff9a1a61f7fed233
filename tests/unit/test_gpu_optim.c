/* test_gpu_optim.c — the CUDA optimizers (cuda_optim.cu) against kernels/cpu/cpu_optim.h: Adam over
 * several steps with a changing lr, the Muon momentum lines, Newton–Schulz + scale in fp32 and
 * in bf16 (square, tall = transposed, wide), a batch of tall and wide matrices (each member as
 * the CPU computes it alone, and independent of the other members' values), the apply step with its bf16 weight shadow, global
 * norm clipping, determinism; the 1.0611 record's Muon options (Polar Express coefficients,
 * MuonEq-R row normalisation: that kernel bitwise the CPU's). Rules in test_gpu.h.
 *
 * Bounds:
 *  EXACT_TOL 1e-6 — Adam, the momentum buffer and the apply spell out the CPU's fp32 operations
 *    with the same roundings (and IEEE sqrt/div), so they are expected to be bitwise equal;
 *    the bound allows an ulp. CT_TEST_VERBOSE=1 reports whether they were bitwise equal.
 *  NS_FP32_TOL 1e-4 — fp32 Newton–Schulz with cuBLAS vs the CPU's tiled sgemm: five rounds of
 *    three products, each ~1e-6 apart, amplified by the quintic (|p'| up to ~3.4).
 *  NS_BF16_TOL 5e-2 — bf16 Newton–Schulz (train_gpt.py's precision: every X, A and B rounded to
 *    bf16, 2^-9 relative each) vs the fp32 CPU reference; the quintic does not converge to one
 *    orthogonal matrix but to singular values in ~[0.7, 1.2], and per-element differences of a
 *    few 1e-3..1e-2 are what bf16 gives. A wrong transpose/scale/coefficient is O(1).
 *  NORM_TOL 1e-12 — global norm, double sums in different fixed orders. */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include "cpu_optim.h"

#define EXACT_TOL 1e-6
#define NS_FP32_TOL 1e-4
#define NS_BF16_TOL 5e-2
#define NORM_TOL 1e-12

static void report_bitwise(const char *what, const float *a, const float *b, size_t n) {
    if (!gpu_verbose()) return;
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    fprintf(stderr, "  %-40s %zu of %zu elements differ bitwise\n", what, diff, n);
}

static void adam_matches_cpu(void) {
    REQUIRE_GPU();
    const size_t n = 100003;
    uint64_t rng = 61;
    float *p = random_host(n, -1, 1, &rng), *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    float *d_p = dev_floats(p, n), *d_m = dev_floats(m, n), *d_v = dev_floats(v, n);
    ct_bf16 *d_p16 = dev_alloc(n * 2);
    float *d_g = dev_alloc(n * sizeof(float));
    const double lrs[] = {0.05, 0.03, 0.01};
    for (int step = 1; step <= 3; step++) {
        float *g = random_host(n, -0.1, 0.1, &rng);
        cpu_adam_step(p, g, m, v, n, lrs[step - 1], 0.9, 0.95, 1e-8, step);
        dev_put(d_g, g, n * sizeof(float));
        dev_poison_bf16(d_p16, n);
        const CudaAdamHyper hyper = {lrs[step - 1], 0.9, 0.95, 1e-8, step};
        CHECK_CUDA_OK(cuda_adam_step(d_p, d_p16, d_g, d_m, d_v, n, &hyper, 0));
        free(g);
    }
    float *g_p = host_from_dev(d_p, n), *g_m = host_from_dev(d_m, n), *g_v = host_from_dev(d_v, n);
    float *g_p16 = host_from_dev_bf16(d_p16, n);
    report_bitwise("adam p", g_p, p, n);
    report_bitwise("adam m", g_m, m, n);
    report_bitwise("adam v", g_v, v, n);
    CHECK_REL("adam p (3 steps)", g_p, p, n, EXACT_TOL);
    CHECK_REL("adam exp_avg", g_m, m, n, EXACT_TOL);
    CHECK_REL("adam exp_avg_sq", g_v, v, n, EXACT_TOL);
    CHECK_REL("adam bf16 shadow", g_p16, p, n, 4e-3);
}

static void check_muon(int rows, int cols, int ns_fp32, uint64_t seed, int flags) {
    uint64_t rng = seed;
    const size_t n = (size_t)rows * cols;
    const double momentum = 0.95;
    float *g = random_host(n, -1, 1, &rng), *buf = random_host(n, -0.5, 0.5, &rng);
    float *p = random_host(n, -1, 1, &rng);
    float *ref_buf = copy_host(buf, n), *ref_upd = malloc(n * sizeof(float));
    float *scratch = malloc(cpu_muon_scratch_floats(rows, cols) * sizeof(float));
    cpu_muon_compute_update(g, ref_buf, ref_upd, rows, cols, momentum, 1, 5, flags, scratch);
    float *ref_p = copy_host(p, n);
    cpu_muon_apply_update(ref_p, ref_upd, n, 0.04);

    void *ws = dev_alloc(32 << 20);
    cublasHandle_t h = NULL;
    CHECK(cuda_blas_create(&h, 0, ws, 32 << 20) == 0, "cuda_blas_create: %s", ct_error());
    float *d_g = dev_floats(g, n), *d_buf = dev_floats(buf, n), *d_upd = dev_nan(n), *d_p = dev_floats(p, n);
    void *d_scr = dev_alloc(cuda_muon_scratch_bytes(rows, cols, 1));
    double *d_part = dev_alloc((cuda_reduce_doubles(n) + 1) * sizeof(double));
    ct_bf16 *d_p16 = dev_alloc(n * 2);
    dev_poison_bf16(d_p16, n);
    CHECK_CUDA_OK(cuda_muon_update(h, &(CudaMuonMatrix){d_upd, d_g, d_buf, rows, cols}, momentum, 1, 5, flags, ns_fp32,
                                   d_scr, d_part, 0));
    float *g_buf = host_from_dev(d_buf, n), *g_upd = host_from_dev(d_upd, n);
    char what[96];
    snprintf(what, sizeof what, "muon momentum buffer %dx%d", rows, cols);
    report_bitwise(what, g_buf, ref_buf, n);
    CHECK_REL(what, g_buf, ref_buf, n, EXACT_TOL);
    snprintf(what, sizeof what, "muon update %dx%d (NS %s%s%s)", rows, cols, ns_fp32 ? "fp32" : "bf16",
             flags & CT_MUON_POLAR_EXPRESS ? ", Polar Express" : "",
             flags & CT_MUON_ROW_NORMALIZE ? ", rows normalised" : "");
    CHECK_REL(what, g_upd, ref_upd, n, ns_fp32 ? NS_FP32_TOL : NS_BF16_TOL);
    /* apply, from the CPU's update so only the apply is measured */
    dev_put(d_upd, ref_upd, n * sizeof(float));
    CHECK_CUDA_OK(cuda_muon_apply(d_p, d_p16, d_upd, n, 0.04, 0));
    float *g_p = host_from_dev(d_p, n), *g_p16 = host_from_dev_bf16(d_p16, n);
    report_bitwise("muon apply", g_p, ref_p, n);
    CHECK_REL("muon apply", g_p, ref_p, n, EXACT_TOL);
    CHECK_REL("muon apply bf16 shadow", g_p16, ref_p, n, 4e-3);
    /* determinism of the whole update */
    dev_put(d_buf, buf, n * sizeof(float));
    CHECK_CUDA_OK(cuda_muon_update(h, &(CudaMuonMatrix){d_upd, d_g, d_buf, rows, cols}, momentum, 1, 5, flags, ns_fp32,
                                   d_scr, d_part, 0));
    float *again = host_from_dev(d_upd, n);
    CHECK(memcmp(again, g_upd, n * sizeof(float)) == 0, "muon update not deterministic");
    cublasDestroy(h);
    dev_free(ws);
}

static void muon_fp32_square(void) {
    REQUIRE_GPU();
    check_muon(128, 128, 1, 62, 0);
}
static void muon_fp32_tall_transposed(void) {
    REQUIRE_GPU();
    check_muon(192, 64, 1, 63, 0);
}
static void muon_fp32_wide(void) {
    REQUIRE_GPU();
    check_muon(64, 160, 1, 64, 0);
}
static void muon_bf16_square(void) {
    REQUIRE_GPU();
    check_muon(256, 256, 0, 65, 0);
}
static void muon_bf16_tall_transposed(void) {
    REQUIRE_GPU();
    check_muon(512, 128, 0, 66, 0);
}

/* The 1.0611 record's options (CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE) through the whole
 * update, against the CPU's: tall in fp32, wide in bf16 (bounds as the quintic's). */
static void muon_options_fp32_tall(void) {
    REQUIRE_GPU();
    check_muon(192, 64, 1, 70, CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE);
}
static void muon_options_bf16_wide(void) {
    REQUIRE_GPU();
    check_muon(96, 256, 0, 71, CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE);
}

/* MuonEq-R's kernel alone: bitwise cpu_muon_row_normalize (the same double lanes, order and
 * roundings), on a shape whose rows are not a multiple of the 8 lanes nor of a warp's 4 rows,
 * with a zero row, a row below the 1e-7 floor and a huge one; a row longer than the kernel
 * takes is refused. */
static void muon_row_normalize_bitwise(void) {
    REQUIRE_GPU();
    const int rows = 45, cols = 141;
    const size_t n = (size_t)rows * cols;
    uint64_t rng = 72;
    float *u = random_host(n, -3, 3, &rng);
    for (int j = 0; j < cols; j++) {
        u[2 * cols + j] = 0.0f;
        u[7 * cols + j] = 1e-10f * (float)(j % 5);
        u[44 * cols + j] = 3e4f;
    }
    float *ref = copy_host(u, n);
    cpu_muon_row_normalize(ref, rows, cols);
    float *d_u = dev_floats(u, n);
    CHECK_CUDA_OK(cuda_muon_row_normalize(d_u, rows, cols, 0));
    float *got = host_from_dev(d_u, n);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
    CHECK(diff == 0, "row normalize: %zu of %zu elements differ from the CPU's bits", diff, n);
    CHECK(cuda_muon_row_normalize(d_u, 2, 16385, 0) != 0 && strstr(ct_error(), "2 x 16385"), "long rows: got '%s'",
          ct_error());
    ct_error_clear();
    free(u), free(ref), free(got);
    dev_free(d_u);
}

/* A batch of three matrices of one shape up to transposition (wide, tall, wide): each update as
 * the CPU computes it alone; the same bits on a second run; a member's update does not change
 * when another member's gradient does (only the batch count could change a member's bits); a
 * matrix of another shape in the batch is refused. */
static void check_muon_batch(int ns_fp32, uint64_t seed) {
    enum { COUNT = 3 };
    const int shapes[COUNT][2] = {{96, 160}, {160, 96}, {96, 160}};
    const size_t n = 96 * 160;
    const double momentum = 0.95;
    uint64_t rng = seed;
    float *g[COUNT], *buf[COUNT], *ref_upd[COUNT], *ref_buf[COUNT];
    float *scratch = malloc(cpu_muon_scratch_floats(160, 160) * sizeof(float));
    void *ws = dev_alloc(32 << 20);
    cublasHandle_t h = NULL;
    CHECK(cuda_blas_create(&h, 0, ws, 32 << 20) == 0, "cuda_blas_create: %s", ct_error());
    CudaMuonMatrix mats[COUNT];
    for (int k = 0; k < COUNT; k++) {
        g[k] = random_host(n, -1, 1, &rng);
        buf[k] = random_host(n, -0.5, 0.5, &rng);
        ref_buf[k] = copy_host(buf[k], n);
        ref_upd[k] = malloc(n * sizeof(float));
        cpu_muon_compute_update(g[k], ref_buf[k], ref_upd[k], shapes[k][0], shapes[k][1], momentum, 1, 5, 0, scratch);
        mats[k] = (CudaMuonMatrix){dev_nan(n), dev_floats(g[k], n), dev_floats(buf[k], n), shapes[k][0], shapes[k][1]};
    }
    void *d_scr = dev_alloc(cuda_muon_scratch_bytes(160, 96, COUNT));
    double *d_part = dev_alloc((cuda_reduce_doubles(n) + 1) * sizeof(double));
    CHECK_CUDA_OK(cuda_muon_update_batch(h, mats, COUNT, momentum, 1, 5, 0, ns_fp32, d_scr, d_part, 0));
    float *first[COUNT];
    for (int k = 0; k < COUNT; k++) {
        char what[96];
        float *got_buf = host_from_dev(mats[k].momentum_buf, n);
        first[k] = host_from_dev(mats[k].update, n);
        snprintf(what, sizeof what, "batch member %d (%dx%d): momentum buffer", k, shapes[k][0], shapes[k][1]);
        CHECK_REL(what, got_buf, ref_buf[k], n, EXACT_TOL);
        snprintf(what, sizeof what, "batch member %d (%dx%d): update (NS %s)", k, shapes[k][0], shapes[k][1],
                 ns_fp32 ? "fp32" : "bf16");
        CHECK_REL(what, first[k], ref_upd[k], n, ns_fp32 ? NS_FP32_TOL : NS_BF16_TOL);
        dev_put(mats[k].momentum_buf, buf[k], n * sizeof(float));
        free(got_buf);
    }
    /* again, with member 1's gradient changed */
    for (size_t i = 0; i < n; i++) g[1][i] = -0.5f * g[1][i];
    dev_put((float *)mats[1].grad, g[1], n * sizeof(float));
    CHECK_CUDA_OK(cuda_muon_update_batch(h, mats, COUNT, momentum, 1, 5, 0, ns_fp32, d_scr, d_part, 0));
    for (int k = 0; k < COUNT; k += 2) {
        float *again = host_from_dev(mats[k].update, n);
        CHECK(memcmp(again, first[k], n * sizeof(float)) == 0,
              "batch member %d's update changed when member 1's gradient did (or the batch is not deterministic)", k);
        free(again);
    }
    /* a 96 x 128 matrix in a batch of 96 x 160 ones */
    CudaMuonMatrix odd[2] = {mats[0], mats[1]};
    odd[1].cols = 128;
    CHECK(cuda_muon_update_batch(h, odd, 2, momentum, 1, 5, 0, ns_fp32, d_scr, d_part, 0) != 0 &&
              strstr(ct_error(), "160 x 128 matrix in a batch of 96 x 160") != NULL,
          "mixed shapes: got '%s'", ct_error());
    ct_error_clear();
    for (int k = 0; k < COUNT; k++) {
        free(g[k]), free(buf[k]), free(ref_upd[k]), free(ref_buf[k]), free(first[k]);
        dev_free(mats[k].update), dev_free((void *)mats[k].grad), dev_free(mats[k].momentum_buf);
    }
    free(scratch);
    dev_free(d_scr), dev_free(d_part);
    cublasDestroy(h);
    dev_free(ws);
}

static void muon_batch_fp32(void) {
    REQUIRE_GPU();
    check_muon_batch(1, 68);
}
static void muon_batch_bf16(void) {
    REQUIRE_GPU();
    check_muon_batch(0, 69);
}

static void clip_matches_cpu(void) {
    REQUIRE_GPU();
    const size_t n = 3000017;
    uint64_t rng = 67;
    float *g = random_host(n, -0.01, 0.01, &rng);
    float *ref = copy_host(g, n);
    float *ptr[1] = {ref};
    size_t cnt[1] = {n};
    const double ref_norm = cpu_clip_grad_norm(ptr, cnt, 1, 1.0); /* norm ~ 10 > 1: clips */
    float *d_g = dev_floats(g, n);
    double *d_part = dev_alloc((cuda_reduce_doubles(n) + 1) * sizeof(double)), *d_norm = dev_alloc(sizeof(double));
    CHECK_CUDA_OK(cuda_clip_grad_norm(d_g, n, 1.0, d_norm, d_part, 0));
    double norm = 0;
    dev_get(&norm, d_norm, sizeof norm);
    if (gpu_verbose()) fprintf(stderr, "  clip norm %.17g vs %.17g\n", norm, ref_norm);
    CHECK(fabs(norm - ref_norm) <= NORM_TOL * ref_norm, "norm %.17g vs %.17g", norm, ref_norm);
    float *got = host_from_dev(d_g, n);
    CHECK_REL("clipped gradients", got, ref, n, EXACT_TOL);
}

int main(void) {
    RUN(adam_matches_cpu);
    RUN(muon_fp32_square);
    RUN(muon_fp32_tall_transposed);
    RUN(muon_fp32_wide);
    RUN(muon_bf16_square);
    RUN(muon_bf16_tall_transposed);
    RUN(muon_options_fp32_tall);
    RUN(muon_options_bf16_wide);
    RUN(muon_row_normalize_bitwise);
    RUN(muon_batch_fp32);
    RUN(muon_batch_bf16);
    RUN(clip_matches_cpu);
    TEST_EXIT();
}

#endif
