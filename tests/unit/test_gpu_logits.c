/* test_gpu_logits.c — the chunked CUDA logits + softcap + cross-entropy (cuda_logits.cu) against
 * cpu_logits_ce_forward_backward / cpu_logits_ce_forward fed the same bf16-rounded x and W: per-token
 * losses, dx and dW (accumulated into non-zero buffers), chunk sizes that do and do not divide
 * N, the forward-only path, determinism. Rules in test_gpu.h.
 *
 * Bounds: LOSS_TOL 1e-5 — logits are fp32 accumulations of the same bf16 products (order
 * differs), the softmax is fp32 with double row sums on both sides. GRAD_TOL 5e-3 — the GPU
 * rounds dz = d loss / d logits to bf16 before the two gradient products (the precision policy:
 * products take bf16 operands); that is <= 2^-9 relative per element of dz, which carries into
 * dx and dW norm-wise (~2e-3), so 5e-3 with margin. A wrong softmax, softcap derivative or
 * target term gives errors of order 1. */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include "cpu_ops.h"

#define LOSS_TOL 1e-5
#define GRAD_TOL 5e-3

static void check_logits(int N, int C, int V, int chunk, uint64_t seed) {
    uint64_t rng = seed;
    const float softcap = 30.0f, loss_weight = 0.25f;
    float *x = random_host((size_t)N * C, -1, 1, &rng), *W = random_host((size_t)V * C, -0.5, 0.5, &rng);
    host_round_bf16(x, (size_t)N * C);
    host_round_bf16(W, (size_t)V * C);
    int32_t *targets = malloc((size_t)N * sizeof(int32_t));
    for (int i = 0; i < N; i++) targets[i] = (int32_t)(ref_rand01(&rng) * V) % V;
    float *dx0 = random_host((size_t)N * C, -1, 1, &rng), *dW0 = random_host((size_t)V * C, -1, 1, &rng);

    float *r_loss = malloc((size_t)N * sizeof(float));
    float *r_dx = calloc((size_t)N * C, sizeof(float)), *r_dW = calloc((size_t)V * C, sizeof(float));
    float *scratch = malloc((size_t)256 * V * sizeof(float));
    double mean = 0;
    CHECK(cpu_logits_ce_forward_backward(r_dx, r_dW, r_loss, &mean, x, W, targets, N, C, V, softcap, loss_weight, scratch,
                                     256) == 0,
          "cpu logits failed: %s", ct_error());

    void *ws = dev_alloc(32 << 20);
    cublasHandle_t h = NULL;
    CHECK(cuda_blas_create(&h, 0, ws, 32 << 20) == 0, "cuda_blas_create: %s", ct_error());
    ct_bf16 *d_x = dev_bf16(x, (size_t)N * C), *d_W = dev_bf16(W, (size_t)V * C);
    int32_t *d_t = dev_upload(targets, (size_t)N * sizeof(int32_t));
    float *d_loss = dev_nan(N), *d_dx = dev_floats(dx0, (size_t)N * C), *d_dW = dev_floats(dW0, (size_t)V * C);
    float *d_z = dev_nan(cuda_logits_z_floats(chunk, V));
    ct_bf16 *d_dz = dev_alloc(cuda_logits_dz_elems(chunk, V) * 2);
    dev_poison_bf16(d_dz, cuda_logits_dz_elems(chunk, V));
    CHECK_CUDA_OK(cuda_logits_ce_forward_backward(h, d_dx, d_dW, d_loss, d_x, d_W, d_t, N, C, V, softcap, loss_weight,
                                                  d_z, d_dz, chunk, 0));
    float *g_loss = host_from_dev(d_loss, N), *g_dx = host_from_dev(d_dx, (size_t)N * C);
    float *g_dW = host_from_dev(d_dW, (size_t)V * C);
    for (size_t i = 0; i < (size_t)N * C; i++) g_dx[i] -= dx0[i];
    for (size_t i = 0; i < (size_t)V * C; i++) g_dW[i] -= dW0[i];
    char what[96];
    snprintf(what, sizeof what, "losses (N %d V %d chunk %d)", N, V, chunk);
    CHECK_REL(what, g_loss, r_loss, N, LOSS_TOL);
    CHECK_REL("dx (+=)", g_dx, r_dx, (size_t)N * C, GRAD_TOL);
    CHECK_REL("dW (+=)", g_dW, r_dW, (size_t)V * C, GRAD_TOL);

    /* forward only: same losses bitwise (same products, same row kernel) */
    float *d_loss2 = dev_nan(N);
    CHECK_CUDA_OK(cuda_logits_ce_forward(h, d_loss2, d_x, d_W, d_t, N, C, V, softcap, d_z, chunk, 0));
    float *g_loss2 = host_from_dev(d_loss2, N);
    CHECK(memcmp(g_loss2, g_loss, (size_t)N * sizeof(float)) == 0, "forward-only losses differ from training's");

    /* determinism of the gradients */
    dev_put(d_dx, dx0, (size_t)N * C * sizeof(float));
    dev_put(d_dW, dW0, (size_t)V * C * sizeof(float));
    CHECK_CUDA_OK(cuda_logits_ce_forward_backward(h, d_dx, d_dW, d_loss, d_x, d_W, d_t, N, C, V, softcap, loss_weight,
                                                  d_z, d_dz, chunk, 0));
    float *a_dx = host_from_dev(d_dx, (size_t)N * C), *a_dW = host_from_dev(d_dW, (size_t)V * C);
    for (size_t i = 0; i < (size_t)N * C; i++) a_dx[i] -= dx0[i];
    for (size_t i = 0; i < (size_t)V * C; i++) a_dW[i] -= dW0[i];
    CHECK(memcmp(a_dx, g_dx, (size_t)N * C * sizeof(float)) == 0, "dx not deterministic");
    CHECK(memcmp(a_dW, g_dW, (size_t)V * C * sizeof(float)) == 0, "dW not deterministic");
    cublasDestroy(h);
    dev_free(ws);
}

static void chunks_dividing_N(void) {
    REQUIRE_GPU();
    check_logits(512, 64, 1024, 128, 51);
}

static void ragged_chunk_and_vocab(void) {
    REQUIRE_GPU();
    check_logits(301, 96, 517, 100, 52);
}

static void one_chunk_bigger_than_N(void) {
    REQUIRE_GPU();
    check_logits(77, 32, 300, 4096, 53);
}

int main(void) {
    RUN(chunks_dividing_N);
    RUN(ragged_chunk_and_vocab);
    RUN(one_chunk_bigger_than_N);
    TEST_EXIT();
}

#endif
