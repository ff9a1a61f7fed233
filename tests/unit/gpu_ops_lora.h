/* gpu_ops_lora.h — test-time training's CUDA ops as ops of the table-driven test (gpu_ops.h,
 * gpu_op_table.h): the batched LoRA pair (cuda_lora.cu) against cpu_lora_forward/backward run
 * document by document, the logits' low-rank head term (cuda_logits.cu) against
 * cpu_logits_ce_lowrank_forward_backward, and cuda_sgd_step (cuda_optim.cu) against
 * cpu_sgd_step, all fed the same bf16-rounded operands.
 *   LoRA d = {docs, T, in, r, out_features, flags}: flags LORA_PADDED: x/dx rows of in + 3 and
 *     out/dout rows of out + 5 elements (ld_x, ld_out), adapters at strides of their size + 7
 *     (the gaps must keep their start values: the reference keeps them); LORA_NO_DX: dx NULL;
 *     LORA_BF16_OUT: the forward's out bf16 (out_type CT_BF16, as the backend's q/k/v, o and mlp
 *     outputs), compared whole (start values and increment) within LORA_BF16_TOL.
 *   logits d = {N, C, V, chunk, r, flags}: flags LOGITS_NO_DW: dW NULL.
 *   SGD d = {n, mode}: mode 0 momentum 0.9 (a later step), 1 the first step with wd 0.01,
 *     2 wd 0.5 without momentum (buf NULL), 3 plain (no momentum, no decay); the bf16 shadow
 *     p_bf16 in every mode but 3 (NULL there).
 *
 * Bounds. The GPU rounds what only feeds products to bf16 (h, dh: cuda_lora.h; dz:
 * gpu_ops_logits.h), the CPU keeps fp32. Outputs one such rounding away from the CPU op:
 * LORA_BF16_TOL 5e-3 (<= 2^-9 relative per element, norm-wise ~2e-3, as LOGITS_GRAD_TOL). The
 * rounded tensors themselves (h, dh) are compared near_bf16 within LORA_ACC_TOL 1e-5 (the
 * accumulation order only), and the products after them are checked again in `extra` against the
 * GPU's own bf16 h / dh within LORA_ACC_TOL (fp32 sums of the same bf16 operands in another
 * order, as gpu_ops_gemm.h's ACC_TOL): so a wrong operand, stride or scale fails by O(1) and a
 * precision slip by >> 1e-5. dB (operands the same bf16 values on both sides) LORA_ACC_TOL.
 * SGD: OP_BITWISE, p_bf16 against host_bf16_value of the CPU's new p. */
#ifndef CT_TEST_GPU_OPS_LORA_H
#define CT_TEST_GPU_OPS_LORA_H

#include "cpu_optim.h"
#include "gpu_ops.h"
#include "gpu_ops_logits.h"

#ifdef CT_HAVE_CUDA

#define LORA_ACC_TOL 1e-5
#define LORA_BF16_TOL 5e-3
#define LORA_SCALE 1.8f /* the record's alpha / rank, 144 / 80 */
enum { LORA_PADDED = 1, LORA_NO_DX = 2, LORA_BF16_OUT = 4, LOGITS_NO_DW = 1 };

/* ---- LoRA ---- */

typedef struct {
    int docs, T, in, r, of, lx, lo;
    long long as, bs; /* adapter strides */
} LoraShape;
static LoraShape lora_shape(const OpRun *r) {
    const int pad = r->d[5] & LORA_PADDED;
    LoraShape s = {r->d[0], r->d[1], r->d[2], r->d[3], r->d[4], 0, 0, 0, 0};
    s.lx = s.in + (pad ? 3 : 0), s.lo = s.of + (pad ? 5 : 0);
    s.as = (long long)s.r * s.in + (pad ? 7 : 0), s.bs = (long long)s.of * s.r + (pad ? 7 : 0);
    return s;
}
static CudaLora lora_args(OpRun *r, const LoraShape *s) {
    return (CudaLora){s->docs, s->T, s->in, s->r, s->of, LORA_SCALE, DEV("A"), DEV("B"), s->as, s->bs, s->lx, s->lo,
                      r->d[5] & LORA_BF16_OUT ? CT_BF16 : CT_F32};
}
/* rows x cols of a matrix with leading dimension ld into a dense one, and back */
static void lora_pack(float *dense, const float *src, int rows, int cols, int ld) {
    for (int i = 0; i < rows; i++) memcpy(dense + (size_t)i * cols, src + (size_t)i * ld, (size_t)cols * sizeof(float));
}
static void lora_unpack(float *dst, const float *dense, int rows, int cols, int ld) {
    for (int i = 0; i < rows; i++) memcpy(dst + (size_t)i * ld, dense + (size_t)i * cols, (size_t)cols * sizeof(float));
}

static void lora_fwd_tensors(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const size_t rows = (size_t)s.docs * s.T;
    op_in(r, "x", OP_BF16, rows * s.lx, -1, 1);
    op_in(r, "A", OP_BF16, (size_t)(s.docs * s.as), -0.2, 0.2);
    op_in(r, "B", OP_BF16, (size_t)(s.docs * s.bs), -0.2, 0.2);
    op_out(r, "h", OP_BF16, rows * s.r, LORA_ACC_TOL)->near_bf16 = 1;
    if (r->d[5] & LORA_BF16_OUT) /* the backend's bf16 projection outputs: bf16(out + s h B^T) */
        op_acc(r, "out", OP_BF16, rows * s.lo, -1, 1, LORA_BF16_TOL);
    else
        op_acc_delta(r, "out", OP_F32, rows * s.lo, -1, 1, LORA_BF16_TOL);
}
static void lora_fwd_cpu(OpRun *r) {
    const LoraShape s = lora_shape(r);
    float *x = malloc((size_t)s.T * s.in * sizeof(float)), *out = malloc((size_t)s.T * s.of * sizeof(float));
    for (int b = 0; b < s.docs; b++) {
        const size_t row0 = (size_t)b * s.T;
        lora_pack(x, HOST("x") + row0 * s.lx, s.T, s.in, s.lx);
        lora_pack(out, HOST("out") + row0 * s.lo, s.T, s.of, s.lo);
        cpu_lora_forward(out, HOST("h") + row0 * s.r, x, HOST("A") + b * s.as, HOST("B") + b * s.bs, LORA_SCALE, s.T,
                         s.in, s.r, s.of);
        lora_unpack(HOST("out") + row0 * s.lo, out, s.T, s.of, s.lo);
    }
    free(x);
    free(out);
}
static int lora_fwd_gpu(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const CudaLora l = lora_args(r, &s);
    return cuda_lora_forward(op_blas(), &l, DEV("out"), DEV("h"), DEV("x"));
}
/* out's increment against s * h B^T from the GPU's own bf16 h: the second product exactly */
static void lora_fwd_extra(OpRun *r) {
    const LoraShape s = lora_shape(r);
    if (r->d[5] & LORA_BF16_OUT) return; /* out rounded to bf16: the comparison above is the one */
    const size_t n = (size_t)s.docs * s.T * s.lo;
    float *want = calloc(n, sizeof(float)), *got = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) got[i] = GOT("out")[i] - op_start(r, "out")[i];
    for (int b = 0; b < s.docs; b++) {
        const size_t row0 = (size_t)b * s.T;
        cpu_sgemm(0, 1, s.T, s.of, s.r, LORA_SCALE, GOT("h") + row0 * s.r, s.r, HOST("B") + b * s.bs, s.r, 0.0f,
                  want + row0 * s.lo, s.lo);
    }
    CHECK_REL("out vs the GPU's own bf16 h", got, want, n, LORA_ACC_TOL);
    free(want);
    free(got);
}

static void lora_bwd_tensors(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const size_t rows = (size_t)s.docs * s.T;
    op_in(r, "dout", OP_BF16, rows * s.lo, -1, 1);
    op_in(r, "x", OP_BF16, rows * s.lx, -1, 1);
    op_in(r, "h", OP_BF16, rows * s.r, -1, 1);
    op_in(r, "A", OP_BF16, (size_t)(s.docs * s.as), -0.2, 0.2);
    op_in(r, "B", OP_BF16, (size_t)(s.docs * s.bs), -0.2, 0.2);
    op_out(r, "dh", OP_BF16, rows * s.r, LORA_ACC_TOL)->near_bf16 = 1;
    op_acc_delta(r, "dB", OP_F32, (size_t)(s.docs * s.bs), -1, 1, LORA_ACC_TOL);
    op_acc_delta(r, "dA", OP_F32, (size_t)(s.docs * s.as), -1, 1, LORA_BF16_TOL);
    if (!(r->d[5] & LORA_NO_DX)) op_acc_delta(r, "dx", OP_F32, rows * s.lx, -1, 1, LORA_BF16_TOL);
}
static void lora_bwd_cpu(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const int want_dx = !(r->d[5] & LORA_NO_DX);
    float *x = malloc((size_t)s.T * s.in * sizeof(float)), *dx = malloc((size_t)s.T * s.in * sizeof(float)),
          *dout = malloc((size_t)s.T * s.of * sizeof(float));
    for (int b = 0; b < s.docs; b++) {
        const size_t row0 = (size_t)b * s.T;
        lora_pack(x, HOST("x") + row0 * s.lx, s.T, s.in, s.lx);
        lora_pack(dout, HOST("dout") + row0 * s.lo, s.T, s.of, s.lo);
        if (want_dx) lora_pack(dx, HOST("dx") + row0 * s.lx, s.T, s.in, s.lx);
        cpu_lora_backward(want_dx ? dx : NULL, HOST("dA") + b * s.as, HOST("dB") + b * s.bs, HOST("dh") + row0 * s.r,
                          dout, x, HOST("h") + row0 * s.r, HOST("A") + b * s.as, HOST("B") + b * s.bs, LORA_SCALE,
                          s.T, s.in, s.r, s.of);
        if (want_dx) lora_unpack(HOST("dx") + row0 * s.lx, dx, s.T, s.in, s.lx);
    }
    free(x);
    free(dx);
    free(dout);
}
static int lora_bwd_gpu(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const CudaLora l = lora_args(r, &s);
    return cuda_lora_backward(op_blas(), &l, DEV_OPT("dx"), DEV("dA"), DEV("dB"), DEV("dh"), DEV("dout"), DEV("x"),
                              DEV("h"));
}
/* dA and dx from the GPU's own bf16 dh (cpu_lora_backward_h on it): the products after the
 * rounding exactly; and a shape the op must refuse */
static void lora_bwd_extra(OpRun *r) {
    const LoraShape s = lora_shape(r);
    const int want_dx = !(r->d[5] & LORA_NO_DX);
    const size_t na = (size_t)(s.docs * s.as), nx = (size_t)s.docs * s.T * s.lx;
    float *dA_want = calloc(na, sizeof(float)), *dA_got = malloc(na * sizeof(float));
    float *dx_want = calloc(nx, sizeof(float)), *dx_got = malloc(nx * sizeof(float));
    float *x = malloc((size_t)s.T * s.in * sizeof(float)), *dx = calloc((size_t)s.T * s.in, sizeof(float));
    for (int b = 0; b < s.docs; b++) {
        const size_t row0 = (size_t)b * s.T;
        lora_pack(x, HOST("x") + row0 * s.lx, s.T, s.in, s.lx);
        memset(dx, 0, (size_t)s.T * s.in * sizeof(float));
        cpu_lora_backward_h(dx, dA_want + b * s.as, GOT("dh") + row0 * s.r, x, HOST("A") + b * s.as, s.T, s.in, s.r);
        lora_unpack(dx_want + row0 * s.lx, dx, s.T, s.in, s.lx);
    }
    for (size_t i = 0; i < na; i++) dA_got[i] = GOT("dA")[i] - op_start(r, "dA")[i];
    CHECK_REL("dA vs the GPU's own bf16 dh", dA_got, dA_want, na, LORA_ACC_TOL);
    if (want_dx) {
        for (size_t i = 0; i < nx; i++) dx_got[i] = GOT("dx")[i] - op_start(r, "dx")[i];
        CHECK_REL("dx vs the GPU's own bf16 dh", dx_got, dx_want, nx, LORA_ACC_TOL);
    }
    CudaLora bad = lora_args(r, &s);
    bad.ld_x = s.in - 1;
    CHECK(cuda_lora_backward(op_blas(), &bad, NULL, DEV("dA"), DEV("dB"), DEV("dh"), DEV("dout"), DEV("x"),
                             DEV("h")) != 0 &&
              strstr(ct_error(), "ld_x") != NULL,
          "ld_x < in accepted");
    ct_error_clear();
    free(dA_want), free(dA_got), free(dx_want), free(dx_got), free(x), free(dx);
}
/* forward: h = x A^T and out += s h B^T; backward: dh, dB, dA, dx */
static double lora_fwd_flops(const int *d) { return 2.0 * d[0] * d[1] * d[3] * ((double)d[2] + d[4]); }
static double lora_bwd_flops(const int *d) { return 4.0 * d[0] * d[1] * d[3] * ((double)d[2] + d[4]); }

static const OpDef op_lora_fwd = {"lora_fwd", 0, lora_fwd_tensors, NULL, lora_fwd_cpu, lora_fwd_gpu, lora_fwd_extra,
                                  lora_fwd_flops, 0};
static const OpDef op_lora_bwd = {"lora_bwd", 0, lora_bwd_tensors, NULL, lora_bwd_cpu, lora_bwd_gpu, lora_bwd_extra,
                                  lora_bwd_flops, 0};

/* ---- the logits' low-rank head term ---- */

static void logits_lowrank_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2], chunk = r->d[3], rk = r->d[4];
    op_in(r, "x", OP_BF16, (size_t)N * C, -1, 1);
    op_in(r, "W", OP_BF16, (size_t)V * C, -0.5, 0.5);
    op_in(r, "h", OP_BF16, (size_t)N * rk, -1, 1);
    op_in(r, "B", OP_BF16, (size_t)V * rk, -0.5, 0.5);
    op_ids(r, "targets", N, V, 0);
    op_out(r, "losses", OP_F32, N, LOSS_TOL);
    op_acc_delta(r, "dx", OP_F32, (size_t)N * C, -1, 1, LOGITS_GRAD_TOL);
    if (!(r->d[5] & LOGITS_NO_DW)) op_acc_delta(r, "dW", OP_F32, (size_t)V * C, -1, 1, LOGITS_GRAD_TOL);
    op_acc_delta(r, "dh", OP_F32, (size_t)N * rk, -1, 1, LOGITS_GRAD_TOL);
    op_acc_delta(r, "dB", OP_F32, (size_t)V * rk, -1, 1, LOGITS_GRAD_TOL);
    op_scratch(r, "z", OP_F32, cuda_logits_z_floats(chunk, V));
    op_scratch(r, "dz", OP_BF16, cuda_logits_dz_elems(chunk, V));
}
static void logits_lowrank_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1], V = r->d[2];
    const CpuLogitsLowRank lr = {HOST("h"), HOST("B"), LORA_SCALE, r->d[4], HOST("dh"), HOST("dB")};
    float *scratch = malloc((size_t)256 * V * sizeof(float));
    double mean = 0;
    const int rc = cpu_logits_ce_lowrank_forward_backward(HOST("dx"), HOST_OPT("dW"), &lr, HOST("losses"), &mean,
                                                          HOST("x"), HOST("W"), op_t(r, "targets")->ids, N, C, V,
                                                          LOGITS_SOFTCAP, LOGITS_LOSS_WEIGHT, scratch, 256);
    free(scratch);
    CHECK(rc == 0, "cpu logits failed: %s", ct_error());
}
static CudaLogits logits_lowrank_args(OpRun *r, float *losses) {
    return (CudaLogits){losses, DEV("x"), DEV("W"), DEV("targets"), r->d[0], r->d[1], r->d[2], LOGITS_SOFTCAP,
                        DEV("z"), r->d[3]};
}
static int logits_lowrank_gpu(OpRun *r) {
    const CudaLogits a = logits_lowrank_args(r, DEV("losses"));
    const CudaLogitsLowRank lr = {DEV("h"), DEV("B"), LORA_SCALE, r->d[4], DEV("dh"), DEV("dB")};
    return cuda_logits_ce_lowrank_forward_backward(op_blas(), &a, &lr, DEV("dx"), DEV_OPT("dW"), LOGITS_LOSS_WEIGHT,
                                                   DEV("dz"), 0);
}
/* The forward only gives training's losses bitwise; with B all zero the losses are bitwise the
 * plain op's (z + s*h*0 leaves every z as it was); an adapter without B is refused. */
static void logits_lowrank_extra(OpRun *r) {
    const int N = r->d[0], V = r->d[2], rk = r->d[4];
    float *d_loss = dev_nan(N), *d_plain = dev_nan(N);
    const CudaLogits a = logits_lowrank_args(r, d_loss), plain = logits_lowrank_args(r, d_plain);
    CudaLogitsLowRank lr = {DEV("h"), DEV("B"), LORA_SCALE, rk, NULL, NULL};
    CHECK_CUDA_OK(cuda_logits_ce_lowrank_forward(op_blas(), &a, &lr, 0));
    float *losses = host_from_dev(d_loss, N);
    CHECK(memcmp(losses, GOT("losses"), (size_t)N * sizeof(float)) == 0, "forward-only losses differ from training's");
    float *zeros = calloc((size_t)V * rk, sizeof(float));
    ct_bf16 *d_zero_B = dev_alloc((size_t)V * rk * sizeof(ct_bf16));
    dev_put_bf16(d_zero_B, zeros, (size_t)V * rk);
    lr.B = d_zero_B;
    CHECK_CUDA_OK(cuda_logits_ce_lowrank_forward(op_blas(), &a, &lr, 0));
    CHECK_CUDA_OK(cuda_logits_ce_forward(op_blas(), &plain, 0));
    float *with_zero = host_from_dev(d_loss, N), *without = host_from_dev(d_plain, N);
    CHECK(memcmp(with_zero, without, (size_t)N * sizeof(float)) == 0, "B = 0 changes the losses");
    lr.B = NULL;
    CHECK(cuda_logits_ce_lowrank_forward(op_blas(), &a, &lr, 0) != 0 && strstr(ct_error(), "low-rank") != NULL,
          "a low-rank head without B accepted");
    ct_error_clear();
    free(losses), free(zeros), free(with_zero), free(without);
    dev_free(d_zero_B), dev_free(d_loss), dev_free(d_plain);
}
/* logits_flops's three products, and the adapter's three: z += s h B^T, dh, dB */
static double logits_lowrank_flops(const int *d) { return 6.0 * d[0] * d[2] * ((double)d[1] + d[4]); }

static const OpDef op_logits_lowrank = {"logits_lowrank", 0, logits_lowrank_tensors, NULL, logits_lowrank_cpu,
                                        logits_lowrank_gpu, logits_lowrank_extra, logits_lowrank_flops, 0};

/* ---- SGD ---- */

typedef struct {
    double lr, momentum, wd;
    int first;
} SgdMode;
static SgdMode sgd_mode(const OpRun *r) {
    static const SgdMode modes[] = {{1.37e-2, 0.9, 0, 0}, {1e-3, 0.9, 0.01, 1}, {0.3, 0, 0.5, 0}, {0.77, 0, 0, 0}};
    return modes[r->d[1]];
}
static void sgd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    op_acc(r, "p", OP_F32, n, -1, 1, OP_BITWISE);
    op_in(r, "g", OP_F32, n, -1, 1);
    if (sgd_mode(r).momentum != 0) op_acc(r, "buf", OP_F32, n, -1, 1, OP_BITWISE);
    if (r->d[1] != 3) op_out(r, "p_bf16", OP_BF16, n, OP_BITWISE);
}
static void sgd_cpu(OpRun *r) {
    const SgdMode m = sgd_mode(r);
    cpu_sgd_step(HOST("p"), HOST_OPT("buf"), HOST("g"), (size_t)r->d[0], m.lr, m.momentum, m.wd, m.first);
    float *shadow = HOST_OPT("p_bf16");
    for (size_t i = 0; shadow && i < (size_t)r->d[0]; i++) shadow[i] = host_bf16_value(HOST("p")[i]);
}
static int sgd_gpu(OpRun *r) {
    const SgdMode m = sgd_mode(r);
    return cuda_sgd_step(DEV("p"), DEV_OPT("p_bf16"), DEV_OPT("buf"), DEV("g"), (size_t)r->d[0], m.lr, m.momentum,
                         m.wd, m.first, 0);
}

static const OpDef op_sgd_step = {"sgd_step", 0, sgd_tensors, NULL, sgd_cpu, sgd_gpu, NULL, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
