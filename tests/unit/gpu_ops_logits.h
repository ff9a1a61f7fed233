/* gpu_ops_logits.h — the chunked CUDA logits + softcap + cross-entropy (cuda_logits.cu) as an op
 * of the table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_logits_ce_forward_backward
 * fed the same bf16-rounded x and W: per-token losses, dx and dW (accumulated into non-zero
 * buffers; the increments compared), chunk sizes that do and do not divide N; the forward-only
 * path bitwise training's losses. d = {N, C, V, chunk}.
 *
 * Bounds: LOSS_TOL 1e-5 — logits are fp32 accumulations of the same bf16 products (order
 * differs), the softmax is fp32 with double row sums on both sides. LOGITS_GRAD_TOL 5e-3 — the
 * GPU rounds dz = d loss / d logits to bf16 before the two gradient products (the precision
 * policy: products take bf16 operands); that is <= 2^-9 relative per element of dz, which
 * carries into dx and dW norm-wise (~2e-3), so 5e-3 with margin. A wrong softmax, softcap
 * derivative or target term gives errors of order 1. */
#ifndef CT_TEST_GPU_OPS_LOGITS_H
#define CT_TEST_GPU_OPS_LOGITS_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define LOSS_TOL 1e-5
#define LOGITS_GRAD_TOL 5e-3
#define LOGITS_SOFTCAP 30.0f
#define LOGITS_LOSS_WEIGHT 0.25f

static void logits_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2], chunk = r->d[3];
    op_in(r, "x", OP_BF16, (size_t)N * C, -1, 1);
    op_in(r, "W", OP_BF16, (size_t)V * C, -0.5, 0.5);
    op_ids(r, "targets", N, V, 0);
    op_out(r, "losses", OP_F32, N, LOSS_TOL);
    op_acc_delta(r, "dx", OP_F32, (size_t)N * C, -1, 1, LOGITS_GRAD_TOL);
    op_acc_delta(r, "dW", OP_F32, (size_t)V * C, -1, 1, LOGITS_GRAD_TOL);
    op_scratch(r, "z", OP_F32, cuda_logits_z_floats(chunk, V));
    op_scratch(r, "dz", OP_BF16, cuda_logits_dz_elems(chunk, V));
}
static void logits_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2];
    float *scratch = malloc((size_t)256 * V * sizeof(float));
    double mean = 0;
    const int rc = cpu_logits_ce_forward_backward(HOST("dx"), HOST("dW"), HOST("losses"), &mean, HOST("x"), HOST("W"),
                                                  op_t(r, "targets")->ids, N, C, V, LOGITS_SOFTCAP, LOGITS_LOSS_WEIGHT,
                                                  scratch, 256);
    free(scratch);
    CHECK(rc == 0, "cpu logits failed: %s", ct_error());
}
static int logits_gpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2], chunk = r->d[3];
    const CudaLogits a = {DEV("losses"), DEV("x"), DEV("W"), DEV("targets"), N, C, V, LOGITS_SOFTCAP, DEV("z"), chunk};
    return cuda_logits_ce_forward_backward(op_blas(), &a, DEV("dx"), DEV("dW"), LOGITS_LOSS_WEIGHT, DEV("dz"), 0);
}
/* forward only: the same losses bitwise (same products, same row kernel) */
static void logits_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2], chunk = r->d[3];
    float *d_loss = dev_nan(N);
    const CudaLogits a = {d_loss, DEV("x"), DEV("W"), DEV("targets"), N, C, V, LOGITS_SOFTCAP, DEV("z"), chunk};
    CHECK_CUDA_OK(cuda_logits_ce_forward(op_blas(), &a, 0));
    float *losses = host_from_dev(d_loss, N);
    CHECK(memcmp(losses, GOT("losses"), (size_t)N * sizeof(float)) == 0, "forward-only losses differ from training's");
    free(losses);
    dev_free(d_loss);
}
/* the three products: z = x W^T, dx = dz W, dW = dz^T x */
static double logits_flops(const int *d) { return 6.0 * d[0] * d[1] * d[2]; }

static const OpDef op_logits_ce = {"logits_ce", 0, logits_tensors, NULL, logits_cpu, logits_gpu, logits_extra,
                                   logits_flops, 0};

#endif /* CT_HAVE_CUDA */
#endif
