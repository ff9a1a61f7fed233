/* gpu_ops_xsa.h — the CUDA XSA, exclusive self attention (cuda_xsa.cu), as ops of the table-driven
 * test (gpu_ops.h, gpu_op_table.h), against cpu_xsa_forward/backward. d = {N tokens, heads, KV
 * heads, head_dim, extra columns of v's rows (ld_v = KV*hd + extra: v as the c_v block of the
 * backend's [q | k | v] rows), clamped}: GQA ratios 1, 2, 4 and 8, head dims not a multiple of 32
 * (idle lanes) and up to 128 (4 elements per lane, the op's largest). clamped = 1 makes one KV head of every fifth
 * token a vector of norm below 1e-12 (F.normalize's clamp: the backward's other branch); those
 * rows' dv are ~1e12 times the others', so they have rows of their own.
 * Variant 0 makes every output (fp32 and bf16; dy and dv +=, dy_bf16 written, dv_bf16 += through
 * bf16); variant 1 is the backend's call (forward: bf16 out; backward: dy_bf16 and dv_bf16).
 *
 * Bounds: XSA_FWD_TOL 1e-6 (the CPU's element operations with the same roundings, IEEE sqrt and
 * division included; the two dot products, fp32 on both sides in different orders, move by an
 * ulp: as the QK-norm's sum of squares, gpu_ops_rope.h); XSA_GRAD_TOL 1e-5 (three dot products
 * and the group's sum over heads, in head order on both sides); XSA_BF16_TOL 4e-3 (one bf16
 * rounding, <= 2^-9 per element; dv_bf16 adds to a bf16 start and rounds once more, as the CPU
 * reference in fp32 does not: still <= 2^-9 of the start plus 2^-9 of the sum). */
#ifndef CT_TEST_GPU_OPS_XSA_H
#define CT_TEST_GPU_OPS_XSA_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define XSA_FWD_TOL 1e-6
#define XSA_GRAD_TOL 1e-5
#define XSA_BF16_TOL 4e-3

static int xsa_ld(const OpRun *r) { return r->d[2] * r->d[3] + r->d[4]; }
static CudaXsaShape xsa_shape_of(const OpRun *r) {
    return (CudaXsaShape){r->d[0], r->d[1], r->d[2], r->d[3], xsa_ld(r)};
}

/* y (the attention output), v in rows of ld_v (bf16, as the backend keeps both) */
static void xsa_inputs(OpRun *r) {
    const int N = r->d[0], H = r->d[1], hd = r->d[3];
    op_in(r, "y", OP_BF16, (size_t)N * H * hd, -2, 2);
    op_in(r, "v", OP_BF16, (size_t)N * xsa_ld(r), -2, 2);
}
/* clamped rows: KV head 0 of every fifth token scaled below the clamp (bf16 keeps 1e-15 values) */
static void xsa_prepare(OpRun *r) {
    if (!r->d[5]) return;
    const int N = r->d[0], hd = r->d[3], ld = xsa_ld(r);
    float *v = HOST("v");
    for (int n = 0; n < N; n += 5)
        for (int d = 0; d < hd; d++) v[(size_t)n * ld + d] *= 1e-15f;
    host_round_bf16(v, (size_t)N * ld);
    op_reupload(r, "v");
}
/* v's value columns, packed [N, KV*hd] as the CPU op takes them */
static float *xsa_packed_v(OpRun *r) {
    const int N = r->d[0], KVD = r->d[2] * r->d[3], ld = xsa_ld(r);
    float *p = malloc((size_t)N * KVD * sizeof(float));
    for (int n = 0; n < N; n++) memcpy(p + (size_t)n * KVD, HOST("v") + (size_t)n * ld, (size_t)KVD * sizeof(float));
    return p;
}

static void xsa_fwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1] * r->d[3];
    xsa_inputs(r);
    if (r->c->op->variant == 0) op_out(r, "out", OP_F32, n, XSA_FWD_TOL);
    op_out(r, "out_bf16", OP_BF16, n, XSA_BF16_TOL);
}
static void xsa_fwd_cpu(OpRun *r) {
    const int N = r->d[0], H = r->d[1], KV = r->d[2], hd = r->d[3];
    float *v = xsa_packed_v(r);
    cpu_xsa_forward(HOST("out_bf16"), HOST("y"), v, N, H, KV, hd);
    if (HOST_OPT("out")) memcpy(HOST("out"), HOST("out_bf16"), (size_t)N * H * hd * sizeof(float));
    free(v);
}
static int xsa_fwd_gpu(OpRun *r) {
    const CudaXsaShape shape = xsa_shape_of(r);
    return cuda_xsa_forward(DEV_OPT("out"), DEV("out_bf16"), DEV("y"), DEV("v"), &shape, 0);
}
/* the bf16 output is the fp32 one rounded once, with or without it; refused shapes */
static void xsa_fwd_extra(OpRun *r) {
    const int N = r->d[0], H = r->d[1], KV = r->d[2], hd = r->d[3], ld = xsa_ld(r);
    const size_t n = (size_t)N * H * hd;
    float *rounded = copy_host(GOT("out"), n);
    host_round_bf16(rounded, n);
    CHECK(memcmp(GOT("out_bf16"), rounded, n * sizeof(float)) == 0, "xsa bf16 output is not bf16(fp32 output)");
    ct_bf16 *only16 = dev_alloc(n * 2);
    dev_poison_bf16(only16, n);
    CHECK_CUDA_OK(cuda_xsa_forward(NULL, only16, DEV("y"), DEV("v"), &(CudaXsaShape){N, H, KV, hd, ld}, 0));
    float *g16 = host_from_dev_bf16(only16, n);
    CHECK(memcmp(g16, rounded, n * sizeof(float)) == 0, "xsa bf16-only output differs");
    free(rounded), free(g16);
    dev_free(only16);
    const struct {
        int H, KV, hd, ld;
        const char *says;
    } bad[] = {{H, KV, hd, KV * hd - 1, "row stride"}, {H, H + 1, hd, ld, "whole number of groups"},
               {H, KV, 129, 129 * KV, "head_dim 129"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(cuda_xsa_forward(NULL, DEV("out_bf16"), DEV("y"), DEV("v"),
                               &(CudaXsaShape){N, bad[k].H, bad[k].KV, bad[k].hd, bad[k].ld}, 0) != 0 &&
                  strstr(ct_error(), bad[k].says) != NULL,
              "refused shape %zu: got '%s'", k, ct_error());
        ct_error_clear();
    }
}

static void xsa_bwd_tensors(OpRun *r) {
    const int N = r->d[0], H = r->d[1], KV = r->d[2], hd = r->d[3];
    const size_t n = (size_t)N * H * hd;
    xsa_inputs(r);
    op_in(r, "dout", OP_F32, n, -1, 1);
    if (r->c->op->variant == 0) {
        op_acc(r, "dy", OP_F32, n, -1, 1, XSA_GRAD_TOL);
        op_acc(r, "dv", OP_F32, (size_t)N * KV * hd, -1, 1, XSA_GRAD_TOL);
    }
    op_out(r, "dy_bf16", OP_BF16, n, XSA_BF16_TOL);
    op_acc(r, "dv_bf16", OP_BF16, (size_t)N * xsa_ld(r), -1, 1, XSA_BF16_TOL);
}
/* dy_bf16: the contribution alone; dv_bf16: its start plus the contribution in v's columns */
static void xsa_bwd_cpu(OpRun *r) {
    const int N = r->d[0], H = r->d[1], KV = r->d[2], hd = r->d[3], KVD = KV * hd, ld = xsa_ld(r);
    float *v = xsa_packed_v(r), *dv = calloc((size_t)N * KVD, sizeof(float));
    if (HOST_OPT("dy")) cpu_xsa_backward(HOST("dy"), HOST("dv"), HOST("dout"), HOST("y"), v, N, H, KV, hd);
    cpu_xsa_backward(HOST("dy_bf16"), dv, HOST("dout"), HOST("y"), v, N, H, KV, hd);
    float *dvb = HOST("dv_bf16");
    for (int n = 0; n < N; n++)
        for (int c = 0; c < KVD; c++) dvb[(size_t)n * ld + c] += dv[(size_t)n * KVD + c];
    free(v), free(dv);
}
static int xsa_bwd_gpu(OpRun *r) {
    const CudaXsaShape shape = xsa_shape_of(r);
    return cuda_xsa_backward(DEV_OPT("dy"), DEV("dy_bf16"), DEV_OPT("dv"), DEV("dv_bf16"), DEV("dout"), DEV("y"),
                             DEV("v"), &shape, 0);
}
/* the columns of dv_bf16's rows past v's block are left as they were (the backend's dq | dk) */
static void xsa_bwd_extra(OpRun *r) {
    const int N = r->d[0], KVD = r->d[2] * r->d[3], ld = xsa_ld(r);
    const float *got = GOT("dv_bf16"), *start = op_start(r, "dv_bf16");
    for (int n = 0; n < N; n++)
        for (int c = KVD; c < ld; c++)
            CHECK(memcmp(&got[(size_t)n * ld + c], &start[(size_t)n * ld + c], sizeof(float)) == 0,
                  "dv_bf16 row %d column %d, outside v's block, was written", n, c);
}

static const OpDef op_xsa_fwd = {"xsa_fwd", 0, xsa_fwd_tensors, xsa_prepare, xsa_fwd_cpu, xsa_fwd_gpu, xsa_fwd_extra,
                                 NULL,      0};
static const OpDef op_xsa_fwd_bf16 = {"xsa_fwd_bf16", 1, xsa_fwd_tensors, xsa_prepare, xsa_fwd_cpu, xsa_fwd_gpu, NULL,
                                      NULL,           0};
static const OpDef op_xsa_bwd = {"xsa_bwd", 0, xsa_bwd_tensors, xsa_prepare, xsa_bwd_cpu, xsa_bwd_gpu, xsa_bwd_extra,
                                 NULL,      0};
static const OpDef op_xsa_bwd_bf16 = {"xsa_bwd_bf16", 1, xsa_bwd_tensors, xsa_prepare, xsa_bwd_cpu, xsa_bwd_gpu,
                                      xsa_bwd_extra,  NULL,         0};

#endif /* CT_HAVE_CUDA */
#endif
