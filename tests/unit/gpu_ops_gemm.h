/* gpu_ops_gemm.h — the cuBLAS matrix products (cuda_gemm.cu) as ops of the table-driven test
 * (gpu_ops.h, gpu_op_table.h): the linear layer forward and backward with bf16 operands against
 * the CPU linear ops fed the SAME bf16-rounded values (so only the fp32 accumulation order
 * differs), fp32 and bf16 outputs, dx written or accumulated; the general cuda_gemm in every
 * transpose combination in fp32 (alpha 0.5, beta 1: +=) and with bf16 operands and result.
 * Linear d = {N, in_features, out_features}; gemm d = {M, N, K, trans_a, trans_b}.
 *
 * Bounds: ACC_TOL 1e-5 — fp32 accumulation of at most ~200 products in different orders
 * (cuBLAS tiles vs OpenBLAS): ~sqrt(K) ulps ~ 1e-6. BF16_OUT_TOL 4e-3 for bf16 results
 * (<= 2^-9 per element). Inputs not rounded to bf16 would differ by ~2^-9 per operand (the
 * 1e-2-class bound of matmul-heavy outputs in the full-step test). */
#ifndef CT_TEST_GPU_OPS_GEMM_H
#define CT_TEST_GPU_OPS_GEMM_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define ACC_TOL 1e-5
#define BF16_OUT_TOL 4e-3

/* ---- linear: variants 0 fp32 out / dx written and dW +=, 1 bf16 out / dx +=, 2 dx bf16 ---- */

static void linear_fwd_tensors(OpRun *r) {
    const int N = r->d[0], IN = r->d[1], OUT = r->d[2];
    op_in(r, "x", OP_BF16, (size_t)N * IN, -1, 1);
    op_in(r, "W", OP_BF16, (size_t)OUT * IN, -0.1, 0.1);
    if (r->c->op->variant) op_out(r, "out", OP_BF16, (size_t)N * OUT, BF16_OUT_TOL);
    else op_out(r, "out", OP_F32, (size_t)N * OUT, ACC_TOL);
}
static void linear_fwd_cpu(OpRun *r) {
    cpu_linear_forward(HOST("out"), HOST("x"), HOST("W"), r->d[0], r->d[1], r->d[2]);
}
static int linear_fwd_gpu(OpRun *r) {
    return cuda_linear_forward(op_blas(), DEV("out"), r->c->op->variant ? CT_BF16 : CT_F32, DEV("x"), DEV("W"), r->d[0],
                               r->d[1], r->d[2]);
}

static void linear_bwd_tensors(OpRun *r) {
    const int N = r->d[0], IN = r->d[1], OUT = r->d[2], variant = r->c->op->variant;
    op_in(r, "dout", OP_BF16, (size_t)N * OUT, -1, 1);
    op_in(r, "x", OP_BF16, (size_t)N * IN, -1, 1);
    op_in(r, "W", OP_BF16, (size_t)OUT * IN, -0.1, 0.1);
    if (variant == 0) op_out(r, "dx", OP_F32, (size_t)N * IN, ACC_TOL);
    if (variant == 1) op_acc_delta(r, "dx", OP_F32, (size_t)N * IN, -1, 1, ACC_TOL);
    if (variant == 2) op_out(r, "dx", OP_BF16, (size_t)N * IN, BF16_OUT_TOL);
    if (variant == 0) op_acc_delta(r, "dW", OP_F32, (size_t)OUT * IN, -1, 1, ACC_TOL);
}
static void linear_bwd_cpu(OpRun *r) {
    const int N = r->d[0], IN = r->d[1], OUT = r->d[2];
    float *dW = HOST_OPT("dW") ? HOST("dW") : calloc((size_t)OUT * IN, sizeof(float));
    cpu_linear_backward(HOST("dx"), dW, HOST("dout"), HOST("x"), HOST("W"), N, IN, OUT);
    if (!HOST_OPT("dW")) free(dW);
}
static int linear_bwd_gpu(OpRun *r) {
    const int variant = r->c->op->variant;
    return cuda_linear_backward(op_blas(), DEV("dx"), variant == 2 ? CT_BF16 : CT_F32, variant == 1, DEV_OPT("dW"),
                                DEV("dout"), DEV("x"), DEV("W"), r->d[0], r->d[1], r->d[2]);
}
/* a bf16 gradient cannot be accumulated into: refused with a message */
static void linear_bwd_bf16_extra(OpRun *r) {
    CHECK(cuda_linear_backward(op_blas(), DEV("dx"), CT_BF16, 1, NULL, DEV("dout"), DEV("x"), DEV("W"), r->d[0],
                               r->d[1], r->d[2]) != 0 &&
              strstr(ct_error(), "bf16") != NULL,
          "bf16 accumulation accepted");
    ct_error_clear();
}

/* ---- gemm: variant 0 fp32 (C = 0.5 op(A) op(B) + C), 1 bf16 operands and result (beta 0) ---- */

static void gemm_tensors(OpRun *r) {
    const int M = r->d[0], N = r->d[1], K = r->d[2];
    const int type = r->c->op->variant ? OP_BF16 : OP_F32;
    op_in(r, "A", type, (size_t)M * K, -1, 1);
    op_in(r, "B", type, (size_t)K * N, -1, 1);
    if (r->c->op->variant) op_out(r, "C", OP_BF16, (size_t)M * N, BF16_OUT_TOL);
    else op_acc(r, "C", OP_F32, (size_t)M * N, -1, 1, ACC_TOL);
}
static void gemm_cpu(OpRun *r) {
    const int M = r->d[0], N = r->d[1], K = r->d[2], ta = r->d[3], tb = r->d[4], bf16 = r->c->op->variant;
    cpu_sgemm(ta, tb, M, N, K, bf16 ? 1.0f : 0.5f, HOST("A"), ta ? M : K, HOST("B"), tb ? K : N, bf16 ? 0.0f : 1.0f,
              HOST("C"), N);
}
static int gemm_gpu(OpRun *r) {
    const int M = r->d[0], N = r->d[1], K = r->d[2], ta = r->d[3], tb = r->d[4], bf16 = r->c->op->variant;
    const int type = bf16 ? CT_BF16 : CT_F32;
    return cuda_gemm(op_blas(), ta, tb, M, N, K, bf16 ? 1.0f : 0.5f, DEV("A"), type, ta ? M : K, DEV("B"), type,
                     tb ? K : N, bf16 ? 0.0f : 1.0f, DEV("C"), type, N);
}
static void gemm_mixed_types_extra(OpRun *r) {
    void *p = DEV("A");
    CHECK(cuda_gemm(op_blas(), 0, 0, 2, 2, 2, 1.0f, p, CT_F32, 2, p, CT_BF16, 2, 0.0f, DEV("C"), CT_F32, 2) != 0,
          "mixed operand types must be refused");
    ct_error_clear();
}

static double linear_fwd_flops(const int *d) { return 2.0 * d[0] * d[1] * d[2]; }
static double linear_bwd_flops(const int *d) { return 4.0 * d[0] * d[1] * d[2]; }
static double gemm_flops(const int *d) { return 2.0 * d[0] * d[1] * d[2]; }

static const OpDef op_linear_fwd = {"linear_fwd", 0, linear_fwd_tensors, NULL, linear_fwd_cpu, linear_fwd_gpu, NULL,
                                    linear_fwd_flops, 0};
static const OpDef op_linear_fwd_bf16 = {"linear_fwd_bf16out", 1, linear_fwd_tensors, NULL, linear_fwd_cpu,
                                         linear_fwd_gpu, NULL, linear_fwd_flops, 0};
static const OpDef op_linear_bwd = {"linear_bwd", 0, linear_bwd_tensors, NULL, linear_bwd_cpu, linear_bwd_gpu, NULL,
                                    linear_bwd_flops, 0};
static const OpDef op_linear_bwd_dx_acc = {"linear_bwd_dxacc", 1, linear_bwd_tensors, NULL, linear_bwd_cpu,
                                           linear_bwd_gpu, NULL, linear_fwd_flops, 0};
static const OpDef op_linear_bwd_dx_bf16 = {"linear_bwd_bf16dx", 2, linear_bwd_tensors, NULL, linear_bwd_cpu,
                                            linear_bwd_gpu, linear_bwd_bf16_extra, linear_fwd_flops, 0};
static const OpDef op_gemm_f32 = {"gemm_f32", 0, gemm_tensors, NULL, gemm_cpu, gemm_gpu, gemm_mixed_types_extra,
                                  gemm_flops, 0};
static const OpDef op_gemm_bf16 = {"gemm_bf16", 1, gemm_tensors, NULL, gemm_cpu, gemm_gpu, NULL, gemm_flops, 0};

#endif /* CT_HAVE_CUDA */
#endif
