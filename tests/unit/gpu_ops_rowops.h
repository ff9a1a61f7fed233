/* gpu_ops_rowops.h — the CUDA row ops (cuda_rmsnorm.cu with its fused ops, cuda_scaled_add.cu,
 * cuda_residual_mix.cu, cuda_relu2.cu) and the conversions and fixed-order reductions
 * (cuda_common.cu) as ops of the table-driven test (gpu_ops.h, gpu_op_table.h):
 * RMSNorm, the fused block-input mix + norm and residual + norm forwards, the residual + norm
 * backward that recomputes its input (alone and fused with the residual's backward), the fused
 * norm + mix backward, scaled add, residual mix, relu^2, bf16 conversion, sums, column sums.
 * Row-op shapes: d = {N rows, C channels, the op's mode}; the norms that take ln_scale's factor
 * on their outputs (mix_norm, out_mix_norm, add_norm fwd and bwd) read it from d[3] (0: none,
 * k: 1/sqrt(k), block k-1's factor), checked against cpu_scale after the CPU norm.
 *
 * Bounds (relative norm error against the CPU op on the same fp32 inputs):
 *  F32_TOL 1e-6: these ops do the CPU's fp32 element operations with the same roundings; only
 *    row sums (in double on both sides, different order) may differ, in the last bit of an
 *    fp32 result at most: measured errors should be 0 or ~1e-8.
 *  GRAD_TOL 1e-5: gradients with a per-row dot product (rmsnorm backward) or per-channel sums
 *    over tokens (double on both sides): a few fp32 ulps.
 *  BF16_TOL 4e-3: outputs rounded to bf16 (8 significant bits, round to nearest even: relative
 *    error <= 2^-9 = 1.95e-3 per element, so <= 1.95e-3 norm-wise; 2x margin).
 * The table's shapes are deliberately ragged: rows not a multiple of 8 (rows per block),
 * channels not a multiple of 32, tokens spanning several CUDA_COLSUM_ROWS chunks with a partial
 * last one; C = 203 (not a multiple of 4) takes the row kernels' one-channel-at-a-time path (the
 * backend's rows always take the 4-wide one). */
#ifndef CT_TEST_GPU_OPS_ROWOPS_H
#define CT_TEST_GPU_OPS_ROWOPS_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define F32_TOL 1e-6
#define GRAD_TOL 1e-5
#define BF16_TOL 4e-3

/* A device copy of host[0..n) one float past a 256-byte aligned start: not 16-byte aligned, so
 * the ops take their one-channel path. *base receives what dev_free needs. */
static float *dev_floats_unaligned(const float *host, size_t n, void **base) {
    float *p = dev_alloc((n + 1) * sizeof(float));
    dev_put(p + 1, host, n * sizeof(float));
    *base = p;
    return p + 1;
}

static float *new_floats(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

/* ln_scale's factor of the row's shape, d[3] (1 when 0), and the CPU side of it: the norm's
 * output times the factor, as the CPU backend scales it after cpu_rmsnorm_forward. */
static float row_ln_scale(const OpRun *r) { return r->d[3] ? 1.0f / sqrtf((float)r->d[3]) : 1.0f; }
static void cpu_ln_scale(const OpRun *r, float *y, size_t n) {
    if (r->d[3]) cpu_scale(y, row_ln_scale(r), n);
}

/* ---- RMSNorm: d = {N, C} ---- */

static void rmsnorm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_out(r, "out", OP_F32, n, F32_TOL);
    op_out(r, "out_bf16", OP_BF16, n, BF16_TOL);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
}
static void rmsnorm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    cpu_rmsnorm_forward(HOST("out"), HOST("rstd"), HOST("x"), N, C, FLT_EPSILON);
    memcpy(HOST("out_bf16"), HOST("out"), (size_t)N * C * sizeof(float));
}
static int rmsnorm_fwd_gpu(OpRun *r) {
    return cuda_rmsnorm_forward(DEV("out"), DEV("out_bf16"), DEV("rstd"), DEV("x"), r->d[0], r->d[1], FLT_EPSILON,
                                CT_F32, 0);
}
/* in place (out == x), as the op allows: the out-of-place bits */
static void rmsnorm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *dx = dev_floats(HOST("x"), n);
    CHECK_CUDA_OK(cuda_rmsnorm_forward(dx, NULL, NULL, dx, N, C, FLT_EPSILON, CT_F32, 0));
    float *inplace = host_from_dev(dx, n);
    CHECK(memcmp(inplace, GOT("out"), n * sizeof(float)) == 0, "in-place rmsnorm differs from out-of-place");
    free(inplace);
    dev_free(dx);
}

static void rmsnorm_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0);
    op_acc(r, "dx", OP_F32, n, -1, 1, GRAD_TOL); /* accumulate into non-zero */
}
/* rstd: the forward's, of x */
static void rmsnorm_bwd_prepare(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    float *y = new_floats((size_t)N * C);
    cpu_rmsnorm_forward(y, HOST("rstd"), HOST("x"), N, C, FLT_EPSILON);
    op_reupload(r, "rstd");
    free(y);
}
static void rmsnorm_bwd_cpu(OpRun *r) {
    cpu_rmsnorm_backward(HOST("dx"), HOST("dout"), HOST("x"), HOST("rstd"), r->d[0], r->d[1]);
}
static int rmsnorm_bwd_gpu(OpRun *r) {
    return cuda_rmsnorm_backward(DEV("dx"), DEV("dout"), DEV("x"), DEV("rstd"), r->d[0], r->d[1], CT_F32, 0);
}

/* ---- block input: mix + norm, d = {N, C, with skip}; out_mix_norm d = {N, C, skip mode} ---- */

static void mix_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], with_skip = r->d[2];
    const size_t n = (size_t)N * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    if (with_skip) op_in(r, "skip", OP_F32, n, -2, 2);
    op_in(r, "x0", OP_F32, n, -1, 1);
    op_in(r, "skip_w", OP_F32, C, 0.5, 1.5);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    if (with_skip) op_out(r, "x_in", OP_F32, n, F32_TOL);
    op_out(r, "xm", OP_F32, n, F32_TOL);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    op_out(r, "a", OP_BF16, n, BF16_TOL);
}
/* CPU: scaled_add (if skip), residual_mix, rmsnorm */
static void mix_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *x_in = new_floats(n);
    if (r->d[2]) cpu_scaled_add_forward(x_in, HOST("x"), HOST("skip"), HOST("skip_w"), N, C);
    else memcpy(x_in, HOST("x"), n * sizeof(float));
    if (r->d[2]) memcpy(HOST("x_in"), x_in, n * sizeof(float));
    cpu_residual_mix_forward(HOST("xm"), x_in, HOST("x0"), HOST("mix"), N, C);
    cpu_rmsnorm_forward(HOST("a"), HOST("rstd"), HOST("xm"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("a"), n);
    free(x_in);
}
static int mix_norm_fwd_gpu(OpRun *r) {
    const CudaMixNorm a = {DEV_OPT("x_in"), DEV("xm"), DEV("rstd"), DEV("a"), DEV("x"), DEV_OPT("skip"),
                           DEV("skip_w"), DEV("x0"), DEV("mix"), r->d[0], r->d[1], FLT_EPSILON, row_ln_scale(r),
                           CT_F32};
    return cuda_mix_norm_forward(&a, 0);
}

/* The block before's output made in the block input's pass: xm is read as the block's xm and
 * overwritten with the next mix (one xm buffer, in place). Skip modes: 0 none, 1 another
 * tensor, 2 the output being made (the first decoder block's case). */
static void out_mix_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    op_acc(r, "xm", OP_F32, n, -2, 2, F32_TOL);
    op_in(r, "ao", OP_BF16, n, -2, 2);
    op_in(r, "mo", OP_BF16, n, -2, 2);
    op_in(r, "attn_scale", OP_F32, C, -1, 1);
    op_in(r, "mlp_scale", OP_F32, C, -1, 1);
    if (mode == 1) op_in(r, "skip", OP_F32, n, -2, 2);
    op_in(r, "x0", OP_F32, n, -1, 1);
    if (mode) op_in(r, "skip_w", OP_F32, C, 0.5, 1.5);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    op_out(r, "x_out", OP_F32, n, F32_TOL);
    if (mode) op_out(r, "x_in", OP_F32, n, F32_TOL);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    op_out(r, "a", OP_BF16, n, BF16_TOL);
}
static void out_mix_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    float *mid = new_floats(n), *x_in = new_floats(n);
    cpu_scaled_add_forward(mid, op_start(r, "xm"), HOST("ao"), HOST("attn_scale"), N, C);
    cpu_scaled_add_forward(HOST("x_out"), mid, HOST("mo"), HOST("mlp_scale"), N, C);
    if (mode)
        cpu_scaled_add_forward(x_in, HOST("x_out"), mode == 1 ? HOST("skip") : HOST("x_out"), HOST("skip_w"), N, C);
    else memcpy(x_in, HOST("x_out"), n * sizeof(float));
    if (mode) memcpy(HOST("x_in"), x_in, n * sizeof(float));
    cpu_residual_mix_forward(HOST("xm"), x_in, HOST("x0"), HOST("mix"), N, C);
    cpu_rmsnorm_forward(HOST("a"), HOST("rstd"), HOST("xm"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("a"), n);
    free(mid), free(x_in);
}
static int out_mix_norm_fwd_gpu(OpRun *r) {
    const int mode = r->d[2];
    const CudaBlockOutput prev = {DEV("x_out"), DEV("xm"), DEV("ao"), DEV("mo"), DEV("attn_scale"), DEV("mlp_scale")};
    const float *skip = mode == 0 ? NULL : mode == 1 ? DEV("skip") : DEV("x_out");
    const CudaMixNorm a = {DEV_OPT("x_in"), DEV("xm"), DEV("rstd"), DEV("a"), NULL, skip, DEV_OPT("skip_w"),
                           DEV("x0"), DEV("mix"), r->d[0], r->d[1], FLT_EPSILON, row_ln_scale(r), CT_F32};
    return cuda_out_mix_norm_forward(&prev, &a, 0);
}
/* bitwise cuda_scaled_add_forward then cuda_mix_norm_forward; a block output without mo refused */
static void out_mix_norm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    float *d_xm = dev_floats(op_start(r, "xm"), n), *d_out = dev_nan(n), *d_xin = dev_nan(n), *d_r = dev_nan(N);
    ct_bf16 *d_a = dev_alloc(n * 2);
    const float *sk = mode == 0 ? NULL : mode == 1 ? DEV("skip") : d_out;
    CHECK_CUDA_OK(
        cuda_scaled_add_forward(d_out, d_xm, DEV("ao"), DEV("attn_scale"), DEV("mo"), DEV("mlp_scale"), N, C, CT_F32,
                                0));
    const CudaMixNorm two = {mode ? d_xin : NULL, d_xm, d_r, d_a, d_out, sk, DEV_OPT("skip_w"), DEV("x0"), DEV("mix"),
                             N, C, FLT_EPSILON, row_ln_scale(r), CT_F32};
    CHECK_CUDA_OK(cuda_mix_norm_forward(&two, 0));
    float *t[4] = {host_from_dev(d_out, n), host_from_dev(d_xm, n), host_from_dev(d_r, N), host_from_dev_bf16(d_a, n)};
    const char *names[4] = {"x_out", "xm", "rstd", "a"};
    const size_t counts[4] = {n, n, (size_t)N, n};
    for (int k = 0; k < 4; k++) {
        const int same = memcmp(t[k], GOT(names[k]), counts[k] * sizeof(float)) == 0;
        free(t[k]);
        CHECK(same, "%s differs from the two ops' (skip mode %d)", names[k], mode);
    }
    if (mode) {
        float *tx = host_from_dev(d_xin, n);
        const int same = memcmp(tx, GOT("x_in"), n * sizeof(float)) == 0;
        free(tx);
        CHECK(same, "x_in differs from the two ops' (skip mode %d)", mode);
    }
    dev_free(d_xm), dev_free(d_out), dev_free(d_xin), dev_free(d_r), dev_free(d_a);
    const CudaBlockOutput half = {DEV("x0"), DEV("x0"), DEV("ao"), NULL, DEV("attn_scale"), DEV("mlp_scale")};
    const CudaMixNorm some = {NULL, DEV("x0"), DEV("rstd"), NULL, NULL, NULL, NULL, DEV("x0"), DEV("mix"), N, C,
                              FLT_EPSILON, 1.0f, CT_F32};
    CHECK(cuda_out_mix_norm_forward(&half, &some, 0) != 0 &&
              strstr(ct_error(), "needs x_out, xm, ao, mo") != NULL,
          "a block output without mo: got '%s'", ct_error());
    ct_error_clear();
}

/* ---- attention residual + MLP norm: add_norm, d = {N, C} ---- */

static void add_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "xm", OP_F32, n, -2, 2);
    op_in(r, "branch", OP_BF16, n, -2, 2); /* a product's bf16 output */
    op_in(r, "scale", OP_F32, C, -1, 1);
    op_out(r, "x1", OP_F32, n, F32_TOL);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    op_out(r, "m", OP_BF16, n, BF16_TOL);
}
static void add_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    cpu_scaled_add_forward(HOST("x1"), HOST("xm"), HOST("branch"), HOST("scale"), N, C);
    cpu_rmsnorm_forward(HOST("m"), HOST("rstd"), HOST("x1"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("m"), (size_t)N * C);
}
static int add_norm_fwd_gpu(OpRun *r) {
    return cuda_add_norm_forward(DEV("x1"), DEV("rstd"), DEV("m"), DEV("xm"), DEV("branch"), DEV("scale"), r->d[0],
                                 r->d[1], FLT_EPSILON, row_ln_scale(r), CT_F32, 0);
}
/* without x1 (the backend's call): the same rstd and m bits */
static void add_norm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *d_r2 = dev_nan(N);
    ct_bf16 *d_m2 = dev_alloc(n * 2);
    dev_poison_bf16(d_m2, n);
    CHECK_CUDA_OK(cuda_add_norm_forward(NULL, d_r2, d_m2, DEV("xm"), DEV("branch"), DEV("scale"), N, C, FLT_EPSILON,
                                        row_ln_scale(r), CT_F32, 0));
    float *g_r2 = host_from_dev(d_r2, N), *g_m2 = host_from_dev_bf16(d_m2, n);
    CHECK(memcmp(g_r2, GOT("rstd"), N * sizeof(float)) == 0, "add_norm rstd differs without x1");
    CHECK(memcmp(g_m2, GOT("m"), n * sizeof(float)) == 0, "add_norm m differs without x1");
    free(g_r2), free(g_m2);
    dev_free(d_r2), dev_free(d_m2);
}

/* The MLP norm's backward with its input x1 = xm + scale * branch and xm = mix(x_in, x0)
 * recomputed, and xm's own norm recomputed beside it (renorm); variant 1 fused with x1's
 * residual backward (dbranch, dscale). d = {N, C}. The CUDA op reads rstd and renorm_rstd from
 * the CUDA forwards, as the backend runs them; the CPU reference makes its own (so a fault in
 * the forwards' rstd shows here too). */
static void add_norm_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x_in", OP_F32, n, -2, 2);
    op_in(r, "x0", OP_F32, n, -1, 1);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    op_in(r, "branch", OP_BF16, n, -2, 2);
    op_in(r, "scale", OP_F32, C, -1, 1);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0);        /* made on the device by `prepare` */
    op_in(r, "renorm_rstd", OP_F32, N, 0, 0); /* the same */
    op_acc(r, "dx", OP_F32, n, -1, 1, GRAD_TOL);
    op_out(r, "renorm", OP_BF16, n, BF16_TOL);
    if (r->c->op->variant) {
        op_out(r, "dbranch", OP_BF16, n, BF16_TOL);
        op_acc(r, "dscale", OP_F32, C, -1, 1, GRAD_TOL);
        op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 1));
    }
}
/* the forwards as the backend runs them: xm and its norm, then x1 and its norm; into xm, x1 */
static int add_norm_forwards(OpRun *r, float *xm, float *x1, float *rstd, float *renorm_rstd, ct_bf16 *a) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    ct_bf16 *m = dev_alloc(n * 2);
    const CudaMixNorm input = {NULL, xm, renorm_rstd, a, DEV("x_in"), NULL, NULL, DEV("x0"), DEV("mix"), N, C,
                               FLT_EPSILON, row_ln_scale(r), CT_F32};
    int rc = cuda_mix_norm_forward(&input, 0);
    if (rc == 0)
        rc = cuda_add_norm_forward(x1, rstd, m, xm, DEV("branch"), DEV("scale"), N, C, FLT_EPSILON, row_ln_scale(r),
                                   CT_F32, 0);
    if (rc == 0 && !dev_sync_ok()) rc = -1;
    dev_free(m);
    return rc;
}
static void add_norm_bwd_prepare(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    float *xm = dev_alloc(n * sizeof(float));
    ct_bf16 *a = dev_alloc(n * 2);
    CHECK_CUDA_OK(add_norm_forwards(r, xm, NULL, DEV("rstd"), DEV("renorm_rstd"), a));
    dev_free(xm), dev_free(a);
}
/* CPU: xm and its norm (the renorm), x1 and its rstd; dx += rmsnorm backward on x1; then x1's
 * residual backward on the updated dx */
static void add_norm_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *xm = new_floats(n), *x1 = new_floats(n), *y = new_floats(n), *rstd = new_floats(N);
    cpu_residual_mix_forward(xm, HOST("x_in"), HOST("x0"), HOST("mix"), N, C);
    cpu_rmsnorm_forward(HOST("renorm"), rstd, xm, N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("renorm"), n);
    cpu_scaled_add_forward(x1, xm, HOST("branch"), HOST("scale"), N, C);
    cpu_rmsnorm_forward(y, rstd, x1, N, C, FLT_EPSILON);
    cpu_rmsnorm_backward(HOST("dx"), HOST("dout"), x1, rstd, N, C);
    if (r->c->op->variant)
        cpu_scaled_add_backward(NULL, HOST("dbranch"), HOST("dscale"), HOST("dx"), HOST("branch"), HOST("scale"), N, C);
    free(xm), free(x1), free(y), free(rstd);
}
static int add_norm_bwd_gpu(OpRun *r) {
    return cuda_add_norm_backward(&(CudaAddNormBackward){.dx = DEV("dx"), .dout = DEV("dout"), .rstd = DEV("rstd"),
                                                         .x_in = DEV("x_in"), .x0 = DEV("x0"), .mix = DEV("mix"),
                                                         .branch = DEV("branch"), .scale = DEV("scale"),
                                                         .renorm = DEV("renorm"), .renorm_rstd = DEV("renorm_rstd"),
                                                         .renorm_scale = row_ln_scale(r), .dbranch = DEV_OPT("dbranch"),
                                                         .dscale = DEV_OPT("dscale"), .partials = DEV_OPT("partials"),
                                                         .N = r->d[0], .C = r->d[1]},
                                  0);
}
/* Variant 0: renorm bitwise the forward's norm of xm; dx bitwise cuda_rmsnorm_backward on a
 * stored x1 and the same without renorm; renorm without its rstd and dbranch without dscale
 * refused. Variant 1: bitwise cuda_add_norm_backward then cuda_scaled_add_backward (the fused
 * kernel where the shared memory allows, the two-kernel path beyond it). */
static void add_norm_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *d_dx = DEV("dx"), *start = op_start(r, "dx");
    /* the norm's backward alone; the cases below add to it */
    const CudaAddNormBackward plain_args = {.dx = d_dx, .dout = DEV("dout"), .rstd = DEV("rstd"), .x_in = DEV("x_in"),
                                            .x0 = DEV("x0"), .mix = DEV("mix"), .branch = DEV("branch"),
                                            .scale = DEV("scale"), .renorm_scale = 1.0f, .N = N, .C = C};
    if (r->c->op->variant == 0) {
        float *xm = dev_alloc(n * sizeof(float)), *x1 = dev_alloc(n * sizeof(float)), *rs = dev_nan(N),
              *rm = dev_nan(N);
        ct_bf16 *a = dev_alloc(n * 2);
        CHECK_CUDA_OK(add_norm_forwards(r, xm, x1, rs, rm, a));
        float *fa = host_from_dev_bf16(a, n);
        CHECK(memcmp(fa, GOT("renorm"), n * sizeof(float)) == 0, "recomputed norm of xm differs from the forward's");
        dev_put(d_dx, start, n * sizeof(float));
        CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, DEV("dout"), x1, DEV("rstd"), N, C, CT_F32, 0));
        float *stored = host_from_dev(d_dx, n);
        CHECK(memcmp(stored, GOT("dx"), n * sizeof(float)) == 0,
              "add_norm backward differs from rmsnorm backward on x1");
        dev_put(d_dx, start, n * sizeof(float));
        CHECK_CUDA_OK(cuda_add_norm_backward(&plain_args, 0));
        float *plain = host_from_dev(d_dx, n);
        CHECK(memcmp(plain, GOT("dx"), n * sizeof(float)) == 0, "add_norm backward dx depends on the renorm output");
        CudaAddNormBackward bad = plain_args;
        bad.renorm = DEV("renorm");
        CHECK(cuda_add_norm_backward(&bad, 0) != 0, "renorm without its rstd accepted");
        bad = plain_args;
        bad.dbranch = DEV("renorm");
        CHECK(cuda_add_norm_backward(&bad, 0) != 0, "dbranch without dscale accepted");
        ct_error_clear();
        free(fa), free(stored), free(plain);
        dev_free(xm), dev_free(x1), dev_free(rs), dev_free(rm), dev_free(a);
        return;
    }
    dev_put(d_dx, start, n * sizeof(float));
    dev_put(DEV("dscale"), op_start(r, "dscale"), (size_t)C * sizeof(float));
    dev_poison_bf16(DEV("renorm"), n);
    dev_poison_bf16(DEV("dbranch"), n);
    CudaAddNormBackward renormed = plain_args;
    renormed.renorm = DEV("renorm");
    renormed.renorm_rstd = DEV("renorm_rstd");
    renormed.renorm_scale = row_ln_scale(r);
    CHECK_CUDA_OK(cuda_add_norm_backward(&renormed, 0));
    const CudaScaledAddBackward residual = {.dbranch_bf16 = DEV("dbranch"), .dscale = DEV("dscale"), .dout = d_dx,
                                            .branch_bf16 = DEV("branch"), .scale = DEV("scale"),
                                            .partials = DEV("partials"), .N = N, .C = C};
    CHECK_CUDA_OK(cuda_scaled_add_backward(&residual, 0));
    const char *names[4] = {"dx", "renorm", "dbranch", "dscale"};
    for (int k = 0; k < 4; k++) {
        OpTensor *t = op_t(r, names[k]);
        float *two = op_download(t);
        const int same = memcmp(two, t->got, t->n * sizeof(float)) == 0;
        free(two);
        CHECK(same, "fused %s differs from the two ops' (C = %d)", names[k], C);
    }
}

/* ---- the block input's fused backward: norm_mix, d = {N, C} ----
 * The attention norm's backward on the recomputed xm, then the residual mix's: the fused kernel
 * where the shared memory allows (C = 200), the two-kernel path beyond it (C = 16000: 2 MB of
 * accumulators) and the one-channel path (C = 203). */
static void norm_mix_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x_in", OP_F32, n, -2, 2);
    op_in(r, "x0", OP_F32, n, -1, 1);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0); /* made on the device by `prepare` */
    op_clobber(r, "dx", n, -1, 1); /* the residual's gradient; undefined afterwards */
    op_out(r, "dx_in", OP_F32, n, GRAD_TOL);
    op_acc(r, "dx0", OP_F32, n, -1, 1, GRAD_TOL);
    op_acc(r, "dmix", OP_F32, 2 * (size_t)C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 2));
}
static int norm_mix_forward(OpRun *r, float *xm) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    ct_bf16 *a = dev_alloc(n * 2);
    const CudaMixNorm input = {NULL, xm, DEV("rstd"), a, DEV("x_in"), NULL, NULL, DEV("x0"), DEV("mix"), r->d[0],
                               r->d[1], FLT_EPSILON, 1.0f, CT_F32};
    int rc = cuda_mix_norm_forward(&input, 0);
    if (rc == 0 && !dev_sync_ok()) rc = -1;
    dev_free(a);
    return rc;
}
/* rstd: the CUDA forward's for the CUDA op; the CPU reference makes its own */
static void norm_mix_bwd_prepare(OpRun *r) {
    float *xm = dev_alloc((size_t)r->d[0] * r->d[1] * sizeof(float));
    CHECK_CUDA_OK(norm_mix_forward(r, xm));
    dev_free(xm);
}
/* CPU: xm, its rstd; g = dx + norm backward; mix backward on g (dx_in written) */
static void norm_mix_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *xm = new_floats(n), *y = new_floats(n), *rstd = new_floats(N), *g = copy_host(op_start(r, "dx"), n);
    cpu_residual_mix_forward(xm, HOST("x_in"), HOST("x0"), HOST("mix"), N, C);
    cpu_rmsnorm_forward(y, rstd, xm, N, C, FLT_EPSILON);
    cpu_rmsnorm_backward(g, HOST("dout"), xm, rstd, N, C);
    cpu_residual_mix_backward(HOST("dx_in"), HOST("dx0"), HOST("dmix"), g, HOST("x_in"), HOST("x0"), HOST("mix"), N, C);
    free(xm), free(y), free(rstd), free(g);
}
static int norm_mix_bwd_gpu(OpRun *r) {
    const CudaNormMixBackward a = {.dx_in = DEV("dx_in"), .dx0 = DEV("dx0"), .dmix = DEV("dmix"), .dx = DEV("dx"),
                                   .dout = DEV("dout"), .rstd = DEV("rstd"), .x_in = DEV("x_in"), .x0 = DEV("x0"),
                                   .mix = DEV("mix"), .partials = DEV("partials"), .N = r->d[0], .C = r->d[1]};
    return cuda_norm_mix_backward(&a, 0);
}
/* the two ops on the stored xm: the same bits */
static void norm_mix_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *xm = dev_alloc(n * sizeof(float)), *din2 = dev_nan(n);
    CHECK_CUDA_OK(norm_mix_forward(r, xm));
    dev_put(DEV("dx"), op_start(r, "dx"), n * sizeof(float));
    dev_put(DEV("dx0"), op_start(r, "dx0"), n * sizeof(float));
    dev_put(DEV("dmix"), op_start(r, "dmix"), 2 * (size_t)C * sizeof(float));
    CHECK_CUDA_OK(cuda_rmsnorm_backward(DEV("dx"), DEV("dout"), xm, DEV("rstd"), N, C, CT_F32, 0));
    const CudaResidualMixBackward mix_backward = {din2, 0, DEV("dx0"), DEV("dmix"), DEV("dx"), DEV("x_in"), DEV("x0"),
                                                  DEV("mix"), DEV("partials"), N, C, CT_F32};
    CHECK_CUDA_OK(cuda_residual_mix_backward(&mix_backward, 0));
    float *t_din = host_from_dev(din2, n), *t_dx0 = host_from_dev(DEV("dx0"), n),
          *t_dmix = host_from_dev(DEV("dmix"), 2 * (size_t)C);
    CHECK(memcmp(GOT("dx_in"), t_din, n * sizeof(float)) == 0, "norm_mix dx_in differs from the two ops' (C = %d)", C);
    CHECK(memcmp(GOT("dx0"), t_dx0, n * sizeof(float)) == 0, "norm_mix dx0 differs from the two ops' (C = %d)", C);
    CHECK(memcmp(GOT("dmix"), t_dmix, 2 * (size_t)C * sizeof(float)) == 0,
          "norm_mix dmix differs from the two ops' (C = %d)", C);
    free(t_din), free(t_dx0), free(t_dmix);
    dev_free(xm), dev_free(din2);
}

/* ---- scaled add: d = {N, C}; forward variant 1 with an inner branch; backward variant 0 with
 * an fp32 branch and every output, variant 1 the backend's (bf16 branch, bf16 dbranch) ---- */

static void scaled_add_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_in(r, "branch", OP_BF16, n, -2, 2);
    op_in(r, "scale", OP_F32, C, -1, 1);
    if (r->c->op->variant) {
        op_in(r, "inner", OP_BF16, n, -2, 2);
        op_in(r, "inner_scale", OP_F32, C, -1, 1);
    }
    op_out(r, "out", OP_F32, n, F32_TOL);
}
/* with an inner branch: (x + sc2 * br2) + sc * br, as two CPU scaled adds */
static void scaled_add_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    if (!r->c->op->variant) {
        cpu_scaled_add_forward(HOST("out"), HOST("x"), HOST("branch"), HOST("scale"), N, C);
        return;
    }
    float *mid = new_floats((size_t)N * C);
    cpu_scaled_add_forward(mid, HOST("x"), HOST("inner"), HOST("inner_scale"), N, C);
    cpu_scaled_add_forward(HOST("out"), mid, HOST("branch"), HOST("scale"), N, C);
    free(mid);
}
static int scaled_add_fwd_gpu(OpRun *r) {
    return cuda_scaled_add_forward(DEV("out"), DEV("x"), DEV_OPT("inner"), DEV_OPT("inner_scale"), DEV("branch"),
                                   DEV("scale"), r->d[0], r->d[1], CT_F32, 0);
}
/* bitwise two launches (the block output from xm without a stored x1); an inner branch
 * without its scale refused */
static void scaled_add_fwd_inner_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *d_mid = dev_nan(n), *d_two = dev_nan(n);
    CHECK_CUDA_OK(
        cuda_scaled_add_forward(d_mid, DEV("x"), NULL, NULL, DEV("inner"), DEV("inner_scale"), N, C, CT_F32, 0));
    CHECK_CUDA_OK(cuda_scaled_add_forward(d_two, d_mid, NULL, NULL, DEV("branch"), DEV("scale"), N, C, CT_F32, 0));
    float *two = host_from_dev(d_two, n);
    CHECK(memcmp(GOT("out"), two, n * sizeof(float)) == 0, "scaled_add with an inner branch differs from two adds");
    CHECK(cuda_scaled_add_forward(DEV("out"), DEV("x"), DEV("inner"), NULL, DEV("branch"), DEV("scale"), N, C, CT_F32,
                                  0) != 0,
          "inner branch without its scale accepted");
    ct_error_clear();
    free(two);
    dev_free(d_mid), dev_free(d_two);
}

/* backward: dx and dscale accumulate into non-zero buffers, dbranch is written */
static void scaled_add_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    const int backend = r->c->op->variant;
    op_in(r, "dout", OP_F32, n, -1, 1);
    if (backend) op_in(r, "branch", OP_BF16, n, -2, 2);
    else op_in_bf16_values(r, "branch", n, -2, 2); /* a product's bf16 output, read in fp32 */
    op_in(r, "scale", OP_F32, C, -1, 1);
    if (!backend) {
        op_acc(r, "dx", OP_F32, n, -1, 1, F32_TOL);
        op_out(r, "dbranch", OP_F32, n, F32_TOL);
    }
    op_out(r, "dbranch_bf16", OP_BF16, n, BF16_TOL);
    op_acc(r, "dscale", OP_F32, C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 1));
}
/* the bf16 output is the contribution, as the fp32 one */
static void scaled_add_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    cpu_scaled_add_backward(HOST_OPT("dx"), HOST_OPT("dbranch") ? HOST("dbranch") : HOST("dbranch_bf16"),
                            HOST("dscale"), HOST("dout"), HOST("branch"), HOST("scale"), N, C);
    if (HOST_OPT("dbranch")) memcpy(HOST("dbranch_bf16"), HOST("dbranch"), (size_t)N * C * sizeof(float));
}
static int scaled_add_bwd_gpu(OpRun *r) {
    const int backend = r->c->op->variant;
    const CudaScaledAddBackward a = {DEV_OPT("dx"), DEV_OPT("dbranch"), DEV("dbranch_bf16"), DEV("dscale"), DEV("dout"),
                                     backend ? NULL : DEV("branch"), backend ? DEV("branch") : NULL, DEV("scale"),
                                     DEV("partials"), r->d[0], r->d[1], CT_F32};
    return cuda_scaled_add_backward(&a, 0);
}
/* dscale alone (no other output) and from the bf16 branch holding the same values: the same
 * bits; the one-channel path (dout not 16-byte aligned) the 4-wide path's bits; both branches
 * refused */
static void scaled_add_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *ds0 = op_start(r, "dscale");
    dev_put(DEV("dscale"), ds0, C * sizeof(float));
    const CudaScaledAddBackward dscale_only = {.dscale = DEV("dscale"), .dout = DEV("dout"), .branch = DEV("branch"),
                                               .scale = DEV("scale"), .partials = DEV("partials"), .N = N, .C = C};
    CHECK_CUDA_OK(cuda_scaled_add_backward(&dscale_only, 0));
    float *again = host_from_dev(DEV("dscale"), C);
    CHECK(memcmp(again, GOT("dscale"), C * sizeof(float)) == 0,
          "dscale not deterministic (or depends on the other outputs)");
    free(again);
    ct_bf16 *br16 = dev_bf16(HOST("branch"), n);
    dev_put(DEV("dscale"), ds0, C * sizeof(float));
    CudaScaledAddBackward from_bf16 = dscale_only;
    from_bf16.branch = NULL;
    from_bf16.branch_bf16 = br16;
    CHECK_CUDA_OK(cuda_scaled_add_backward(&from_bf16, 0));
    float *from16 = host_from_dev(DEV("dscale"), C);
    CHECK(memcmp(from16, GOT("dscale"), C * sizeof(float)) == 0,
          "dscale from the bf16 branch differs from the fp32 branch's");
    free(from16);
    if (C % 4 == 0) {
        void *base;
        float *dout1 = dev_floats_unaligned(HOST("dout"), n, &base);
        op_reset(r);
        const CudaScaledAddBackward one_wide = {DEV("dx"), DEV("dbranch"), DEV("dbranch_bf16"), DEV("dscale"), dout1,
                                                DEV("branch"), NULL, DEV("scale"), DEV("partials"), N, C, CT_F32};
        CHECK_CUDA_OK(cuda_scaled_add_backward(&one_wide, 0));
        const char *names[4] = {"dx", "dbranch", "dscale", "dbranch_bf16"};
        for (int k = 0; k < 4; k++) {
            OpTensor *t = op_t(r, names[k]);
            float *one = op_download(t);
            const int same = memcmp(one, t->got, t->n * sizeof(float)) == 0;
            free(one);
            CHECK(same, "scaled_add backward: the one-channel path's %s differs from the 4-wide one's", names[k]);
        }
        dev_free(base);
    }
    CudaScaledAddBackward both = dscale_only;
    both.branch_bf16 = br16;
    CHECK(cuda_scaled_add_backward(&both, 0) != 0, "two branches accepted");
    ct_error_clear();
    dev_free(br16);
}

/* ---- residual mix backward: d = {N, C, dx_accumulate} ----
 * dx_accumulate 0: dx written (=) over NaN, mix[0]*dout alone: the CPU's product bit for bit. */
static void residual_mix_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", OP_F32, n, -2, 2);
    op_in(r, "x0", OP_F32, n, -2, 2);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1);
    op_in(r, "dout", OP_F32, n, -1, 1);
    if (r->d[2]) op_acc(r, "dx", OP_F32, n, -1, 1, F32_TOL);
    else op_out(r, "dx", OP_F32, n, OP_EXACT);
    op_acc(r, "dx0", OP_F32, n, -1, 1, F32_TOL);
    op_acc(r, "dmix", OP_F32, 2 * (size_t)C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 2));
}
static void residual_mix_bwd_cpu(OpRun *r) {
    cpu_residual_mix_backward(HOST("dx"), HOST("dx0"), HOST("dmix"), HOST("dout"), HOST("x"), HOST("x0"), HOST("mix"),
                              r->d[0], r->d[1]);
}
static int residual_mix_bwd_gpu(OpRun *r) {
    const CudaResidualMixBackward a = {DEV("dx"), r->d[2], DEV("dx0"), DEV("dmix"), DEV("dout"), DEV("x"), DEV("x0"),
                                       DEV("mix"), DEV("partials"), r->d[0], r->d[1], CT_F32};
    return cuda_residual_mix_backward(&a, 0);
}
/* the one-channel path (dout not 16-byte aligned) gives the 4-wide path's bits, dmix included:
 * same rows per thread, same order of the sums */
static void residual_mix_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    if (C % 4 != 0) return;
    void *base;
    float *dout1 = dev_floats_unaligned(HOST("dout"), n, &base);
    op_reset(r);
    const CudaResidualMixBackward one_wide = {DEV("dx"), r->d[2], DEV("dx0"), DEV("dmix"), dout1, DEV("x"), DEV("x0"),
                                              DEV("mix"), DEV("partials"), N, C, CT_F32};
    CHECK_CUDA_OK(cuda_residual_mix_backward(&one_wide, 0));
    const char *names[3] = {"dx", "dx0", "dmix"};
    for (int k = 0; k < 3; k++) {
        OpTensor *t = op_t(r, names[k]);
        float *one = op_download(t);
        const int same = memcmp(one, t->got, t->n * sizeof(float)) == 0;
        free(one);
        CHECK(same, "residual_mix backward: the one-channel path's %s differs from the 4-wide one's", names[k]);
    }
    dev_free(base);
}

/* ---- relu^2 on bf16: d = {n elements, offset, in place} ----
 * The CPU op on the same (bf16-valued) inputs, rounded once to bf16, must be matched exactly
 * (one fp32 product each, then the rounding). Lengths cover the 8-wide vector path with and
 * without a tail, offset 1 starts every buffer one element (2 bytes) past a 16-byte boundary
 * (the one-by-one path); the backend runs the backward in place (du = dh), with h remade in the
 * same pass (variant 1, bitwise the forward's h). */
static void relu2_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    const int is_forward = r->c->op->variant < 0;
    op_in(r, "u", OP_BF16, n, -2, 2);
    if (!is_forward) op_in(r, "dh", OP_BF16, n, -1, 1);
    if (!is_forward) op_out(r, "du", OP_BF16, n, OP_EXACT);
    if (r->c->op->variant) op_out(r, "h", OP_BF16, n, OP_EXACT);
    for (int i = 0; i < r->n_t; i++) r->t[i].offset = r->d[1];
}
static void relu2_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    if (op_find(r, "du")) {
        cpu_relu2_backward(HOST("du"), HOST("dh"), HOST("u"), 1, (int)n);
        host_round_bf16(HOST("du"), n);
    }
    if (op_find(r, "h")) {
        cpu_relu2_forward(HOST("h"), HOST("u"), 1, (int)n);
        host_round_bf16(HOST("h"), n);
    }
}
static int relu2_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    if (r->c->op->variant < 0) return cuda_relu2_forward(DEV("h"), DEV("u"), n, 0);
    if (!r->d[2]) return cuda_relu2_backward(DEV("du"), DEV_OPT("h"), DEV("dh"), DEV("u"), n, 0);
    /* in place: du holds dh */
    if (!dev_sync_ok() || cudaMemcpy(DEV("du"), DEV("dh"), n * 2, cudaMemcpyDeviceToDevice) != cudaSuccess) return -1;
    return cuda_relu2_backward(DEV("du"), DEV_OPT("h"), DEV("du"), DEV("u"), n, 0);
}
/* h remade by the backward: bitwise the forward's, du bitwise the plain backward's; h aliasing
 * du refused */
static void relu2_bwd_h_extra(OpRun *r) {
    const size_t n = (size_t)r->d[0], off = (size_t)r->d[1];
    ct_bf16 *b_h = dev_alloc((n + off) * 2), *b_du = dev_alloc((n + off) * 2);
    ct_bf16 *h = b_h + off, *du = b_du + off;
    dev_poison_bf16(h, n);
    dev_poison_bf16(du, n);
    CHECK_CUDA_OK(cuda_relu2_forward(h, DEV("u"), n, 0));
    CHECK_CUDA_OK(cuda_relu2_backward(du, NULL, DEV("dh"), DEV("u"), n, 0));
    float *g_h = host_from_dev_bf16(h, n), *g_du = host_from_dev_bf16(du, n);
    CHECK(memcmp(g_h, GOT("h"), n * sizeof(float)) == 0 && memcmp(g_du, GOT("du"), n * sizeof(float)) == 0,
          "relu2 backward with h (n %zu, offset %zu): h or du differs from the forward's / the plain backward's", n,
          off);
    CHECK(cuda_relu2_backward(DEV("du"), DEV("du"), DEV("du"), DEV("u"), n, 0) != 0,
          "relu2 backward: h aliasing du accepted");
    ct_error_clear();
    free(g_h), free(g_du);
    dev_free(b_h), dev_free(b_du);
}

/* ---- bf16 conversions: d = {n}; round to nearest even, with a few exact ties and specials ---- */

static const uint32_t conversion_specials[] = {0x3f808000u, 0x3f818000u, 0xbf808000u,
                                               0x7f7fffffu, 0x00000001u, 0x80000000u};
static void conversion_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    const int to_bf16 = r->c->op->variant == 0;
    OpTensor *x = op_in(r, "x", OP_F32, n, -3, 3);
    for (size_t i = 0; i < sizeof conversion_specials / sizeof conversion_specials[0] && i < n; i++)
        memcpy(&x->host[i], &conversion_specials[i], 4);
    if (to_bf16) op_out(r, "out", OP_BF16, n, OP_BITWISE);
    else {
        x->type = OP_BF16; /* its host values become the bf16 ones */
        host_round_bf16(x->host, n);
        op_out(r, "out", OP_F32, n, OP_EXACT);
    }
}
static void conversion_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    memcpy(HOST("out"), HOST("x"), n * sizeof(float));
    host_round_bf16(HOST("out"), n);
}
static int conversion_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    return r->c->op->variant == 0 ? cuda_f32_to_bf16(DEV("out"), DEV("x"), n, 0)
                                  : cuda_bf16_to_f32(DEV("out"), DEV("x"), n, 0);
}

/* ---- fixed-order reductions: sums d = {n}; column sums d = {rows, cols} ---- */

static void sums_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    op_in(r, "x", OP_F32, n, -1, 2);
    op_out(r, "sum", OP_F64, 1, 1e-12)->per_element = 1; /* 1e-12 * max(1, |sum|) */
    op_out(r, "sumsq", OP_F64, 1, 1e-12);                /* 1e-12 * sumsq */
    op_scratch(r, "partials", OP_F64, cuda_reduce_doubles(n));
}
static void sums_cpu(OpRun *r) {
    const float *x = HOST("x");
    double sum = 0, sumsq = 0;
    for (int i = 0; i < r->d[0]; i++) {
        sum += x[i];
        sumsq += (double)x[i] * x[i];
    }
    op_t(r, "sum")->host64[0] = sum;
    op_t(r, "sumsq")->host64[0] = sumsq;
}
static int sums_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    if (cuda_sum(DEV("sum"), DEV("x"), n, DEV("partials"), 0) != 0) return -1;
    return cuda_sumsq(DEV("sumsq"), DEV("x"), n, DEV("partials"), 0);
}

static void colsum_tensors(OpRun *r) {
    const int rows = r->d[0], cols = r->d[1];
    op_in(r, "a", OP_F32, (size_t)rows * cols, -1, 2);
    op_acc(r, "g", OP_F32, cols, -1, 1, 1e-6)->per_element = 1;
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(rows, cols, 1));
}
/* g[c] += (float)(the column's sum in double) */
static void colsum_cpu(OpRun *r) {
    const int rows = r->d[0], cols = r->d[1];
    const float *a = HOST("a");
    float *g = HOST("g");
    double *sum = calloc(cols, sizeof(double));
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) sum[c] += a[(size_t)i * cols + c];
    for (int c = 0; c < cols; c++) g[c] = g[c] + (float)sum[c];
    free(sum);
}
static int colsum_gpu(OpRun *r) {
    return cuda_colsum(DEV("g"), DEV("a"), NULL, r->d[0], r->d[1], DEV("partials"), 0);
}

/* ---- x *= s in place (ln_scale's factor on a norm's output gradient): d = {n}; the CPU's one
 * fp32 product per element, so EXACT ---- */

static void scale_inplace_tensors(OpRun *r) { op_acc(r, "x", OP_F32, (size_t)r->d[0], -2, 2, OP_EXACT); }
static void scale_inplace_cpu(OpRun *r) { cpu_scale(HOST("x"), 1.0f / sqrtf(3.0f), (size_t)r->d[0]); }
static int scale_inplace_gpu(OpRun *r) { return cuda_scale_inplace(DEV("x"), 1.0f / sqrtf(3.0f), (size_t)r->d[0], 0); }

/* ---- the ops ---- */

static const OpDef op_rmsnorm_fwd = {"rmsnorm_fwd", 0, rmsnorm_fwd_tensors, NULL, rmsnorm_fwd_cpu, rmsnorm_fwd_gpu,
                                     rmsnorm_fwd_extra, NULL, 0};
static const OpDef op_rmsnorm_bwd = {"rmsnorm_bwd", 0, rmsnorm_bwd_tensors, rmsnorm_bwd_prepare, rmsnorm_bwd_cpu,
                                     rmsnorm_bwd_gpu, NULL, NULL, 0};
static const OpDef op_mix_norm_fwd = {"mix_norm_fwd", 0, mix_norm_fwd_tensors, NULL, mix_norm_fwd_cpu, mix_norm_fwd_gpu,
                                      NULL, NULL, 0};
static const OpDef op_out_mix_norm_fwd = {"out_mix_norm_fwd", 0, out_mix_norm_fwd_tensors, NULL, out_mix_norm_fwd_cpu,
                                          out_mix_norm_fwd_gpu, out_mix_norm_fwd_extra, NULL, 0};
static const OpDef op_add_norm_fwd = {"add_norm_fwd", 0, add_norm_fwd_tensors, NULL, add_norm_fwd_cpu, add_norm_fwd_gpu,
                                      add_norm_fwd_extra, NULL, 0};
static const OpDef op_add_norm_bwd = {"add_norm_bwd", 0, add_norm_bwd_tensors, add_norm_bwd_prepare, add_norm_bwd_cpu,
                                      add_norm_bwd_gpu, add_norm_bwd_extra, NULL, 0};
static const OpDef op_add_norm_scale_bwd = {"add_norm_scale_bwd", 1, add_norm_bwd_tensors, add_norm_bwd_prepare,
                                            add_norm_bwd_cpu, add_norm_bwd_gpu, add_norm_bwd_extra, NULL, 0};
static const OpDef op_norm_mix_bwd = {"norm_mix_bwd", 0, norm_mix_bwd_tensors, norm_mix_bwd_prepare, norm_mix_bwd_cpu,
                                      norm_mix_bwd_gpu, norm_mix_bwd_extra, NULL, 0};
static const OpDef op_scaled_add_fwd = {"scaled_add_fwd", 0, scaled_add_fwd_tensors, NULL, scaled_add_fwd_cpu,
                                        scaled_add_fwd_gpu, NULL, NULL, 0};
static const OpDef op_scaled_add_fwd_inner = {"scaled_add_fwd_inner",
                                              1,
                                              scaled_add_fwd_tensors,
                                              NULL,
                                              scaled_add_fwd_cpu,
                                              scaled_add_fwd_gpu,
                                              scaled_add_fwd_inner_extra,
                                              NULL,
                                              0};
static const OpDef op_scaled_add_bwd = {"scaled_add_bwd", 0, scaled_add_bwd_tensors, NULL, scaled_add_bwd_cpu,
                                        scaled_add_bwd_gpu, scaled_add_bwd_extra, NULL, 0};
static const OpDef op_scaled_add_bwd_bf16 = {"scaled_add_bwd_bf16", 1, scaled_add_bwd_tensors, NULL, scaled_add_bwd_cpu,
                                             scaled_add_bwd_gpu, NULL, NULL, 0};
static const OpDef op_residual_mix_bwd = {"residual_mix_bwd", 0, residual_mix_bwd_tensors, NULL, residual_mix_bwd_cpu,
                                          residual_mix_bwd_gpu, residual_mix_bwd_extra, NULL, 0};
static const OpDef op_relu2_fwd = {"relu2_fwd", -1, relu2_tensors, NULL, relu2_cpu, relu2_gpu, NULL, NULL, 0};
static const OpDef op_relu2_bwd = {"relu2_bwd", 0, relu2_tensors, NULL, relu2_cpu, relu2_gpu, NULL, NULL, 0};
static const OpDef op_relu2_bwd_h = {"relu2_bwd_h", 1, relu2_tensors, NULL, relu2_cpu, relu2_gpu, relu2_bwd_h_extra,
                                     NULL, 0};
static const OpDef op_f32_to_bf16 = {"f32_to_bf16", 0, conversion_tensors, NULL, conversion_cpu, conversion_gpu, NULL,
                                     NULL, 0};
static const OpDef op_bf16_to_f32 = {"bf16_to_f32", 1, conversion_tensors, NULL, conversion_cpu, conversion_gpu, NULL,
                                     NULL, 0};
static const OpDef op_scale_inplace = {"scale_inplace", 0, scale_inplace_tensors, NULL, scale_inplace_cpu,
                                       scale_inplace_gpu, NULL, NULL, 0};
static const OpDef op_sum_sumsq = {"sum_sumsq", 0, sums_tensors, NULL, sums_cpu, sums_gpu, NULL, NULL, 0};
static const OpDef op_colsum = {"colsum", 0, colsum_tensors, NULL, colsum_cpu, colsum_gpu, NULL, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
