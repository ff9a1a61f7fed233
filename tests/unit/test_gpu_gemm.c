/* test_gpu_gemm.c — the cuBLAS matrix products (cuda_gemm.cu): the linear layer forward and
 * backward with bf16 operands against the CPU linear ops fed the SAME bf16-rounded values (so
 * only the fp32 accumulation order differs), the general cuda_gemm in every transpose
 * combination in fp32 and with bf16 results, += semantics and determinism. Rules in test_gpu.h.
 *
 * Bounds: ACC_TOL 1e-5 — fp32 accumulation of at most ~200 products in different orders
 * (cuBLAS tiles vs OpenBLAS): ~sqrt(K) ulps ~ 1e-6. BF16_OUT_TOL 4e-3 for bf16 results
 * (<= 2^-9 per element). Inputs not rounded to bf16 would differ by ~2^-9 per operand (the
 * 1e-2-class bound of matmul-heavy outputs in the full-step test). */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include "cpu_ops.h"

#define ACC_TOL 1e-5
#define BF16_OUT_TOL 4e-3

static cublasHandle_t make_handle(void *workspace, size_t bytes) {
    cublasHandle_t h = NULL;
    if (cuda_blas_create(&h, 0, workspace, bytes) != 0) {
        fprintf(stderr, "%s\n", ct_error());
        exit(1);
    }
    return h;
}

static void linear_forward_backward_match_cpu(void) {
    REQUIRE_GPU();
    const int N = 301, IN = 96, OUT = 200;
    uint64_t rng = 41;
    float *x = random_host((size_t)N * IN, -1, 1, &rng), *W = random_host((size_t)OUT * IN, -0.1, 0.1, &rng);
    float *dout = random_host((size_t)N * OUT, -1, 1, &rng);
    float *dx0 = random_host((size_t)N * IN, -1, 1, &rng), *dW0 = random_host((size_t)OUT * IN, -1, 1, &rng);
    host_round_bf16(x, (size_t)N * IN);
    host_round_bf16(W, (size_t)OUT * IN);
    host_round_bf16(dout, (size_t)N * OUT);
    float *ref = malloc((size_t)N * OUT * sizeof(float));
    cpu_linear_forward(ref, x, W, N, IN, OUT);
    float *r_dx = calloc((size_t)N * IN, sizeof(float)), *r_dW = calloc((size_t)OUT * IN, sizeof(float));
    cpu_linear_backward(r_dx, r_dW, dout, x, W, N, IN, OUT);

    void *ws = dev_alloc(32 << 20);
    cublasHandle_t h = make_handle(ws, 32 << 20);
    ct_bf16 *d_x = dev_bf16(x, (size_t)N * IN), *d_W = dev_bf16(W, (size_t)OUT * IN);
    ct_bf16 *d_dout = dev_bf16(dout, (size_t)N * OUT);
    float *d_out = dev_nan((size_t)N * OUT), *d_dx = dev_nan((size_t)N * IN), *d_dW = dev_floats(dW0, (size_t)OUT * IN);
    CHECK_CUDA_OK(cuda_linear_forward(h, d_out, CT_F32, d_x, d_W, N, IN, OUT));
    float *out = host_from_dev(d_out, (size_t)N * OUT);
    CHECK_REL("linear forward", out, ref, (size_t)N * OUT, ACC_TOL);
    /* dx overwritten (dx_accumulate = 0, over NaN), dW accumulated into dW0 */
    CHECK_CUDA_OK(cuda_linear_backward(h, d_dx, CT_F32, 0, d_dW, d_dout, d_x, d_W, N, IN, OUT));
    float *g_dx = host_from_dev(d_dx, (size_t)N * IN), *g_dW = host_from_dev(d_dW, (size_t)OUT * IN);
    for (size_t i = 0; i < (size_t)OUT * IN; i++) g_dW[i] -= dW0[i];
    CHECK_REL("linear backward dx (=)", g_dx, r_dx, (size_t)N * IN, ACC_TOL);
    CHECK_REL("linear backward dW (+=)", g_dW, r_dW, (size_t)OUT * IN, ACC_TOL);
    /* dx accumulate: start from dx0 */
    dev_put(d_dx, dx0, (size_t)N * IN * sizeof(float));
    CHECK_CUDA_OK(cuda_linear_backward(h, d_dx, CT_F32, 1, NULL, d_dout, d_x, d_W, N, IN, OUT));
    float *g_dx2 = host_from_dev(d_dx, (size_t)N * IN);
    for (size_t i = 0; i < (size_t)N * IN; i++) g_dx2[i] -= dx0[i];
    CHECK_REL("linear backward dx (+=)", g_dx2, r_dx, (size_t)N * IN, ACC_TOL);
    /* determinism */
    float *d_out2 = dev_nan((size_t)N * OUT);
    CHECK_CUDA_OK(cuda_linear_forward(h, d_out2, CT_F32, d_x, d_W, N, IN, OUT));
    float *out2 = host_from_dev(d_out2, (size_t)N * OUT);
    CHECK(memcmp(out, out2, (size_t)N * OUT * sizeof(float)) == 0, "linear forward not deterministic");
    /* bf16 outputs (what the backend uses for products' operands): the same sums rounded once */
    ct_bf16 *b_out = dev_alloc((size_t)N * OUT * 2), *b_dx = dev_alloc((size_t)N * IN * 2);
    dev_poison_bf16(b_out, (size_t)N * OUT);
    dev_poison_bf16(b_dx, (size_t)N * IN);
    CHECK_CUDA_OK(cuda_linear_forward(h, b_out, CT_BF16, d_x, d_W, N, IN, OUT));
    CHECK_CUDA_OK(cuda_linear_backward(h, b_dx, CT_BF16, 0, NULL, d_dout, d_x, d_W, N, IN, OUT));
    float *o16 = host_from_dev_bf16(b_out, (size_t)N * OUT), *dx16 = host_from_dev_bf16(b_dx, (size_t)N * IN);
    CHECK_REL("linear forward bf16 out", o16, ref, (size_t)N * OUT, BF16_OUT_TOL);
    CHECK_REL("linear backward dx bf16 (=)", dx16, r_dx, (size_t)N * IN, BF16_OUT_TOL);
    /* a bf16 gradient cannot be accumulated into: refused with a message */
    CHECK(cuda_linear_backward(h, b_dx, CT_BF16, 1, NULL, d_dout, d_x, d_W, N, IN, OUT) != 0 &&
              strstr(ct_error(), "bf16") != NULL,
          "bf16 accumulation accepted");
    dev_free(b_out), dev_free(b_dx);
    free(o16), free(dx16);
    cublasDestroy(h);
    dev_free(ws);
}

static void gemm_transposes_fp32_and_bf16_out(void) {
    REQUIRE_GPU();
    const int M = 70, Nn = 45, K = 130;
    uint64_t rng = 42;
    void *ws = dev_alloc(32 << 20);
    cublasHandle_t h = make_handle(ws, 32 << 20);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = random_host((size_t)M * K, -1, 1, &rng), *Bm = random_host((size_t)K * Nn, -1, 1, &rng);
            float *C0 = random_host((size_t)M * Nn, -1, 1, &rng);
            const int lda = ta ? M : K, ldb = tb ? K : Nn;
            float *ref = copy_host(C0, (size_t)M * Nn);
            cpu_sgemm(ta, tb, M, Nn, K, 0.5f, A, lda, Bm, ldb, 1.0f, ref, Nn);
            float *d_A = dev_floats(A, (size_t)M * K), *d_B = dev_floats(Bm, (size_t)K * Nn);
            float *d_C = dev_floats(C0, (size_t)M * Nn);
            CHECK_CUDA_OK(cuda_gemm(h, ta, tb, M, Nn, K, 0.5f, d_A, CT_F32, lda, d_B, CT_F32, ldb, 1.0f, d_C, CT_F32, Nn));
            float *got = host_from_dev(d_C, (size_t)M * Nn);
            char what[64];
            snprintf(what, sizeof what, "fp32 gemm trans %d/%d", ta, tb);
            CHECK_REL(what, got, ref, (size_t)M * Nn, ACC_TOL);
            /* bf16 operands and bf16 result, beta 0 */
            host_round_bf16(A, (size_t)M * K);
            host_round_bf16(Bm, (size_t)K * Nn);
            float *ref16 = malloc((size_t)M * Nn * sizeof(float));
            cpu_sgemm(ta, tb, M, Nn, K, 1.0f, A, lda, Bm, ldb, 0.0f, ref16, Nn);
            ct_bf16 *b_A = dev_bf16(A, (size_t)M * K), *b_B = dev_bf16(Bm, (size_t)K * Nn);
            ct_bf16 *b_C = dev_alloc((size_t)M * Nn * 2);
            dev_poison_bf16(b_C, (size_t)M * Nn);
            CHECK_CUDA_OK(cuda_gemm(h, ta, tb, M, Nn, K, 1.0f, b_A, CT_BF16, lda, b_B, CT_BF16, ldb, 0.0f, b_C, CT_BF16, Nn));
            float *got16 = host_from_dev_bf16(b_C, (size_t)M * Nn);
            snprintf(what, sizeof what, "bf16 gemm -> bf16 trans %d/%d", ta, tb);
            CHECK_REL(what, got16, ref16, (size_t)M * Nn, BF16_OUT_TOL);
            dev_free(d_A), dev_free(d_B), dev_free(d_C), dev_free(b_A), dev_free(b_B), dev_free(b_C);
            free(A), free(Bm), free(C0), free(ref), free(ref16), free(got), free(got16);
        }
    CHECK(cuda_gemm(h, 0, 0, 2, 2, 2, 1.0f, ws, CT_F32, 2, ws, CT_BF16, 2, 0.0f, ws, CT_F32, 2) != 0,
          "mixed operand types must be refused");
    cublasDestroy(h);
    dev_free(ws);
}

int main(void) {
    RUN(linear_forward_backward_match_cpu);
    RUN(gemm_transposes_fp32_and_bf16_out);
    TEST_EXIT();
}

#endif
