/* gpu_ops_smear.h — the CUDA SmearGates (cuda_smear.cu; cuda_smear_bos.cu, below) as ops of the table-driven test (gpu_ops.h,
 * gpu_op_table.h), against cpu_smear_forward/backward. d = {B sequences, T positions, C channels}:
 * tokens over several CUDA_COLSUM_ROWS chunks whose edges fall inside sequences, C % 4 != 0 (the
 * one-channel path), T = 1 (every position first and last of its sequence).
 *
 * Bounds: SMEAR_TOL 1e-6 for out and dx: the CPU's fp32 element operations with the same
 * roundings; the gate sigmoid(z) = 1 / (1 + e) has e as glibc's expf on the CPU and the correctly
 * rounded exp (double, rounded once) on the GPU, which differ by at most an ulp of e, so outputs
 * may differ in their last bit (measured: 0 in the host emulator, whose exp is glibc's).
 * SMEAR_DGATE_TOL 1e-5: a sum over tokens in double on both sides, in different orders, times
 * g (1 - g) in double (the same as the CPU's GRAD_TOL rows, gpu_ops_rowops.h). */
#ifndef CT_TEST_GPU_OPS_SMEAR_H
#define CT_TEST_GPU_OPS_SMEAR_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define SMEAR_TOL 1e-6
#define SMEAR_DGATE_TOL 1e-5

static void smear_fwd_tensors(OpRun *r) {
    const int B = r->d[0], T = r->d[1], C = r->d[2];
    const size_t n = (size_t)B * T * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_in(r, "gate", OP_F32, C, -3, 3); /* g from 0.05 to 0.95 */
    op_out(r, "out", OP_F32, n, SMEAR_TOL);
}
static void smear_fwd_cpu(OpRun *r) {
    cpu_smear_forward(HOST("out"), HOST("x"), HOST("gate"), r->d[0], r->d[1], r->d[2]);
}
static int smear_fwd_gpu(OpRun *r) {
    return cuda_smear_forward(DEV("out"), DEV("x"), DEV("gate"), r->d[0], r->d[1], r->d[2], 0);
}
/* out aliasing x refused (position t reads x at t - 1) */
static void smear_fwd_extra(OpRun *r) {
    CHECK(cuda_smear_forward(DEV("x"), DEV("x"), DEV("gate"), r->d[0], r->d[1], r->d[2], 0) != 0 &&
              strstr(ct_error(), "must not alias") != NULL,
          "smear_forward in place: got '%s'", ct_error());
    ct_error_clear();
}

static void smear_bwd_tensors(OpRun *r) {
    const int B = r->d[0], T = r->d[1], C = r->d[2];
    const size_t n = (size_t)B * T * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_in(r, "gate", OP_F32, C, -3, 3);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_acc(r, "dx", OP_F32, n, -1, 1, SMEAR_TOL);
    op_acc(r, "dgate", OP_F32, C, -1, 1, SMEAR_DGATE_TOL);
    op_scratch(r, "partials", OP_F64, cuda_smear_backward_partials_doubles(B, T, C));
}
static void smear_bwd_cpu(OpRun *r) {
    cpu_smear_backward(HOST("dx"), HOST("dgate"), HOST("dout"), HOST("x"), HOST("gate"), r->d[0], r->d[1], r->d[2]);
}
static int smear_bwd_gpu(OpRun *r) {
    return cuda_smear_backward(DEV("dx"), DEV("dgate"), DEV("dout"), DEV("x"), DEV("gate"), r->d[0], r->d[1], r->d[2],
                               DEV("partials"), 0);
}

/* ---- the 1.0611 record's SmearGate with the BOS mask (cuda_smear_bos.cu vs cpu_smear_bos.c) ----
 * d = {B sequences, T positions, C channels, window}; ids in [0, 4) with bos_id 0, so about a
 * quarter of the tokens are BOS (runs of them too), tokens over several CUDA_COLSUM_ROWS chunks
 * whose edges fall inside sequences, T = 1, a window of every channel. Bounds: out and de
 * SMEAR_TOL (the CPU's fp32 element operations, the gate as the SmearGate's above; de's gate term
 * dz = lambda s (1 - s) p with p = e_{t-1} . dout_t summed in double in another order on each
 * side, so dz may differ in its last bit); dw and dlambda SMEAR_DGATE_TOL (sums over tokens in
 * double in different orders). */
enum { SMEAR_BOS_VOCAB = 4, SMEAR_BOS_ID = 0 };

static void smear_bos_inputs(OpRun *r) {
    const size_t N = (size_t)r->d[0] * r->d[1], n = N * r->d[2];
    op_in(r, "e", OP_F32, n, -2, 2);
    op_ids(r, "ids", N, SMEAR_BOS_VOCAB, 0);
    op_in(r, "w", OP_F32, (size_t)r->d[3], -1, 1);
    op_in(r, "lambda", OP_F32, 1, 0.25, 1.5);
}
static void smear_bos_fwd_tensors(OpRun *r) {
    smear_bos_inputs(r);
    op_out(r, "out", OP_F32, (size_t)r->d[0] * r->d[1] * r->d[2], SMEAR_TOL);
}
static void smear_bos_fwd_cpu(OpRun *r) {
    cpu_smear_bos_forward(HOST("out"), HOST("e"), op_t(r, "ids")->ids, HOST("w"), HOST("lambda"), r->d[0], r->d[1],
                          r->d[2], r->d[3], SMEAR_BOS_ID);
}
static int smear_bos_fwd_gpu(OpRun *r) {
    return cuda_smear_bos_forward(DEV("out"), DEV("e"), DEV("ids"), DEV("w"), DEV("lambda"), r->d[0], r->d[1], r->d[2],
                                  r->d[3], SMEAR_BOS_ID, 0);
}
/* out aliasing e and a window wider than the rows refused */
static void smear_bos_fwd_extra(OpRun *r) {
    CHECK(cuda_smear_bos_forward(DEV("e"), DEV("e"), DEV("ids"), DEV("w"), DEV("lambda"), r->d[0], r->d[1], r->d[2],
                                 r->d[3], SMEAR_BOS_ID, 0) != 0 &&
              strstr(ct_error(), "must not alias") != NULL,
          "smear_bos_forward in place: got '%s'", ct_error());
    ct_error_clear();
    CHECK(cuda_smear_bos_forward(DEV("out"), DEV("e"), DEV("ids"), DEV("w"), DEV("lambda"), r->d[0], r->d[1], r->d[2],
                                 r->d[2] + 1, SMEAR_BOS_ID, 0) != 0 &&
              strstr(ct_error(), "window") != NULL,
          "smear_bos_forward with window > C: got '%s'", ct_error());
    ct_error_clear();
}

static void smear_bos_bwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1] * r->d[2];
    smear_bos_inputs(r);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_acc(r, "de", OP_F32, n, -1, 1, SMEAR_TOL);
    op_acc(r, "dw", OP_F32, (size_t)r->d[3], -1, 1, SMEAR_DGATE_TOL);
    op_acc(r, "dlambda", OP_F32, 1, -1, 1, SMEAR_DGATE_TOL);
    op_scratch(r, "scratch", OP_F64, cuda_smear_bos_backward_scratch_doubles(r->d[0], r->d[1], r->d[3]));
}
static void smear_bos_bwd_cpu(OpRun *r) {
    cpu_smear_bos_backward(HOST("de"), HOST("dw"), HOST("dlambda"), HOST("dout"), HOST("e"), op_t(r, "ids")->ids,
                           HOST("w"), HOST("lambda"), r->d[0], r->d[1], r->d[2], r->d[3], SMEAR_BOS_ID);
}
static int smear_bos_bwd_gpu(OpRun *r) {
    return cuda_smear_bos_backward(DEV("de"), DEV("dw"), DEV("dlambda"), DEV("dout"), DEV("e"), DEV("ids"), DEV("w"),
                                   DEV("lambda"), r->d[0], r->d[1], r->d[2], r->d[3], SMEAR_BOS_ID, DEV("scratch"),
                                   0);
}

static const OpDef op_smear_bos_fwd = {"smear_bos_fwd", 0, smear_bos_fwd_tensors, NULL, smear_bos_fwd_cpu,
                                       smear_bos_fwd_gpu, smear_bos_fwd_extra, NULL, 0};
static const OpDef op_smear_bos_bwd = {"smear_bos_bwd", 0, smear_bos_bwd_tensors, NULL, smear_bos_bwd_cpu,
                                       smear_bos_bwd_gpu, NULL, NULL, 0};

static const OpDef op_smear_fwd = {"smear_fwd", 0, smear_fwd_tensors, NULL, smear_fwd_cpu, smear_fwd_gpu,
                                   smear_fwd_extra, NULL, 0};
static const OpDef op_smear_bwd = {"smear_bwd", 0, smear_bwd_tensors, NULL, smear_bwd_cpu, smear_bwd_gpu, NULL, NULL,
                                   0};

#endif /* CT_HAVE_CUDA */
#endif
