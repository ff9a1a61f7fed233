/* gpu_ops_rowops.h — the CUDA row ops (cuda_rmsnorm.cu with its fused ops, cuda_scaled_add.cu,
 * cuda_residual_mix.cu, cuda_relu2.cu, cuda_skip_gate.cu) and the conversions, in-place adds and fixed-order
 * reductions (cuda_common.cu) as ops of the table-driven test (gpu_ops.h, gpu_op_table.h):
 * RMSNorm, the fused block-input mix + norm and residual + norm forwards, the residual + norm
 * backward that recomputes its input (alone and fused with the residual's backward), the fused
 * norm + mix backward, scaled add, residual mix, relu^2, bf16 conversion, sums, column sums.
 * Row-op shapes: d = {N rows, C channels, the op's mode}; the norms that take ln_scale's factor
 * on their outputs (mix_norm, out_mix_norm, add_norm fwd and bwd) read it from d[3] (0: none,
 * k: 1/sqrt(k), block k-1's factor), checked against cpu_scale after the CPU norm; d[4] = BF16S
 * (rows named *_bf16s) runs the op on a bf16 residual stream (residual_dtype bf16, below).
 *
 * Bounds of the fp32 stream (relative norm error against the CPU op on the same fp32 inputs):
 *  F32_TOL 1e-6: these ops do the CPU's fp32 element operations with the same roundings; only
 *    row sums (in double on both sides, different order) may differ, in the last bit of an
 *    fp32 result at most: measured errors should be 0 or ~1e-8.
 *  GRAD_TOL 1e-5: gradients with a per-row dot product (rmsnorm backward) or per-channel sums
 *    over tokens (double on both sides): a few fp32 ulps.
 *  BF16_TOL 4e-3: outputs rounded to bf16 (8 significant bits, round to nearest even: relative
 *    error <= 2^-9 = 1.95e-3 per element, so <= 1.95e-3 norm-wise; 2x margin).
 *
 * The bf16 stream (d[4] = BF16S): the stream tensors (x, skip, x0, x_in, xm, x1, x_out and the
 * gradients along the stream: dx, dx_in, dx0, a scaled add's dout) are OP_BF16 and the op gets
 * CT_BF16. The reference is the same CPU ops with the rounding points of cuda_rmsnorm.h: the
 * control tensors (mix, skip_w, attn_scale/scale, mlp_scale) rounded to bf16 first
 * (row_control), each stored or recomputed stream value (x_in, xm, x1, x_out, a norm
 * backward's g) rounded once where the op stores or remakes it (row_round), bf16 inputs as
 * they are (rounded when made). Per output:
 *  - stream values whose arithmetic is the CPU's element by element, without a row sum (x_in,
 *    xm, x1, x_out, scaled add, the mix backward's dx and dx0, add_inplace): OP_EXACT against
 *    the rounded reference (the same fp32 operations, then the same rounding);
 *  - values that depend on a row sum (the norms' bf16 outputs a, m, renorm, out_bf16; a norm
 *    backward's g = dx and what is made from the rounded g: dx_in, dx0, dbranch): near_bf16
 *    within NEAR_TOL (gpu_ops.h): the rounding of the reference's fp32 value, unless a row sum
 *    rounded to fp32 one ulp apart (different order in double: about 2^-25 of rows) moved that
 *    value across a bf16 tie. NEAR_TOL 2^-19 of max(1, |ref|) covers a few fp32 ulps of the
 *    O(1) terms; a rounding point missed or added moves values by up to 2^-9 and fails it.
 *    (What is made from a rounded g could still differ where g itself sat within an fp32 ulp of
 *    a tie in such a row: about 2^-16 of its elements, never seen.)
 *  - rstd and fp32 norm outputs keep F32_TOL, fp32 parameter-gradient sums (dmix, dscale) GRAD_TOL.
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
#define NEAR_TOL 0x1p-19

static float *new_floats(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

/* ln_scale's factor of the row's shape, d[3] (1 when 0), and the CPU side of it: the norm's
 * output times the factor, as the CPU backend scales it after cpu_rmsnorm_forward. */
static float row_ln_scale(const OpRun *r) { return r->d[3] ? 1.0f / sqrtf((float)r->d[3]) : 1.0f; }
static void cpu_ln_scale(const OpRun *r, float *y, size_t n) {
    if (r->d[3]) cpu_scale(y, row_ln_scale(r), n);
}

/* ---- the residual stream's type: d[4] (BF16S: bf16; 0: fp32), the bounds above ---- */

#define BF16S 1
static int row_dtype(const OpRun *r) { return r->d[4] ? CT_BF16 : CT_F32; }
static int row_stream(const OpRun *r) { return r->d[4] ? OP_BF16 : OP_F32; }
/* a stream value as the row's stream stores it */
static void row_round(const OpRun *r, float *x, size_t n) {
    if (r->d[4]) host_round_bf16(x, n);
}
/* a control tensor as the row's stream sees it (a copy; bf16: rounded first) */
static float *row_control(OpRun *r, const char *name) {
    OpTensor *t = op_t(r, name);
    float *x = copy_host(t->host, t->n);
    row_round(r, x, t->n);
    return x;
}
/* Stream outputs (written, or accumulated from random start values): fp32 within f32_tol; bf16
 * OP_EXACT for an element-by-element value (ROW_SUM 0: the reference rounds it), near_bf16 for
 * one that depends on a row sum (ROW_SUM 1: the reference keeps its fp32 value). */
enum { ELEMENTWISE = 0, ROW_SUM = 1 };
static OpTensor *stream_bound(const OpRun *r, OpTensor *t, double f32_tol, int kind) {
    t->tol = !r->d[4] ? f32_tol : kind == ROW_SUM ? NEAR_TOL : OP_EXACT;
    t->near_bf16 = r->d[4] && kind == ROW_SUM;
    return t;
}
static OpTensor *stream_out(OpRun *r, const char *name, size_t n, double f32_tol, int kind) {
    return stream_bound(r, op_out(r, name, row_stream(r), n, 0), f32_tol, kind);
}
static OpTensor *stream_acc(OpRun *r, const char *name, size_t n, double lo, double hi, double f32_tol, int kind) {
    return stream_bound(r, op_acc(r, name, row_stream(r), n, lo, hi, 0), f32_tol, kind);
}
/* A bf16 output of a norm (or a bf16 gradient) against the fp32 reference before its rounding:
 * BF16_TOL norm-wise on the fp32 stream, near_bf16 on the bf16 one. */
static OpTensor *bf16_out(OpRun *r, const char *name, size_t n) {
    OpTensor *t = op_out(r, name, OP_BF16, n, r->d[4] ? NEAR_TOL : BF16_TOL);
    t->near_bf16 = r->d[4];
    return t;
}

/* Device stream tensors outside the declared ones (the `extra` checks): n elements of the row's
 * stream type, from host values, NaN, or one element past a 256-byte aligned start (not 16-byte
 * aligned, so the ops take their one-channel path; *base receives what dev_free needs); and
 * their host values. */
static size_t stream_bytes(const OpRun *r) { return op_type_bytes(row_stream(r)); }
static void dev_put_stream(const OpRun *r, void *dev, const float *host, size_t n) {
    if (r->d[4]) dev_put_bf16(dev, host, n);
    else dev_put(dev, host, n * sizeof(float));
}
static void *dev_stream(const OpRun *r, const float *host, size_t n) {
    void *p = dev_alloc(n * stream_bytes(r));
    dev_put_stream(r, p, host, n);
    return p;
}
static void *dev_stream_nan(const OpRun *r, size_t n) {
    void *p = dev_alloc(n * stream_bytes(r));
    if (r->d[4]) dev_poison_bf16(p, n);
    else dev_poison(p, n);
    return p;
}
static void *dev_stream_unaligned(const OpRun *r, const float *host, size_t n, void **base) {
    char *p = dev_alloc((n + 1) * stream_bytes(r));
    dev_put_stream(r, p + stream_bytes(r), host, n);
    *base = p;
    return p + stream_bytes(r);
}
static float *host_from_dev_stream(const OpRun *r, const void *dev, size_t n) {
    return r->d[4] ? host_from_dev_bf16(dev, n) : host_from_dev(dev, n);
}
/* CHECK that a device stream tensor holds an output's bits after the first run */
static void check_same_stream(OpRun *r, const void *dev, const char *name, const char *what) {
    OpTensor *t = op_t(r, name);
    float *h = host_from_dev_stream(r, dev, t->n);
    const int same = memcmp(h, t->got, t->n * sizeof(float)) == 0;
    free(h);
    CHECK(same, "%s: %s differs (%s stream)", what, name, r->d[4] ? "bf16" : "fp32");
}

/* ---- RMSNorm: d = {N, C, 0, 0, BF16S}; the bf16 stream's x (the final norm reads the stream's
 * last output) and dx ---- */

static void rmsnorm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", row_stream(r), n, -2, 2);
    op_out(r, "out", OP_F32, n, F32_TOL);
    bf16_out(r, "out_bf16", n);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
}
static void rmsnorm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    cpu_rmsnorm_forward(HOST("out"), HOST("rstd"), HOST("x"), N, C, FLT_EPSILON);
    memcpy(HOST("out_bf16"), HOST("out"), (size_t)N * C * sizeof(float));
}
static int rmsnorm_fwd_gpu(OpRun *r) {
    return cuda_rmsnorm_forward(DEV("out"), DEV("out_bf16"), DEV("rstd"), DEV("x"), r->d[0], r->d[1], FLT_EPSILON,
                                row_dtype(r), 0);
}
/* in place (out == x, fp32 only), as the op allows: the out-of-place bits */
static void rmsnorm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    if (r->d[4]) return;
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
    op_in(r, "x", row_stream(r), n, -2, 2);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0);
    stream_acc(r, "dx", n, -1, 1, GRAD_TOL, ROW_SUM); /* accumulate into non-zero */
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
    return cuda_rmsnorm_backward(DEV("dx"), DEV("dout"), DEV("x"), DEV("rstd"), r->d[0], r->d[1], row_dtype(r), 0);
}

/* ---- block input: mix + norm, d = {N, C, with skip, ln_scale, BF16S, gated}; out_mix_norm d =
 * {N, C, skip mode, ln_scale, BF16S, gated} (gated: the skip gate's lerp, skip_gates_enabled) ---- */

/* The gated skip (skip_gates_enabled; d[5] = 1 on a row with a skip): x_in = lerp(w * skip, x,
 * sigmoid(gate)). fp32: cpu_skip_gate_forward itself. bf16 stream: its steps with the forward's
 * rounding points (cuda_rmsnorm.cu's skip_gate_value): w and the gate rounded first (row_control),
 * w * skip and sigmoid rounded as bf16 tensors, the lerp (cpu_lerp) rounded by the caller. */
static float host_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
static void gated_skip_ref(OpRun *r, float *x_in, const float *x, const float *skip, const float *w, int N, int C) {
    float *gate = row_control(r, "skip_gate");
    if (!r->d[4]) {
        cpu_skip_gate_forward(x_in, x, skip, w, gate, N, C);
    } else {
        for (int c = 0; c < C; c++) gate[c] = host_sigmoid(gate[c]);
        host_round_bf16(gate, (size_t)C);
        for (size_t i = 0; i < (size_t)N * C; i++) {
            float start = w[i % C] * skip[i];
            host_round_bf16(&start, 1);
            x_in[i] = cpu_lerp(start, x[i], gate[i % C]);
        }
    }
    free(gate);
}

static void mix_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], with_skip = r->d[2];
    const size_t n = (size_t)N * C;
    op_in(r, "x", row_stream(r), n, -2, 2);
    if (with_skip) op_in(r, "skip", row_stream(r), n, -2, 2);
    op_in(r, "x0", row_stream(r), n, -1, 1);
    op_in(r, "skip_w", OP_F32, C, 0.5, 1.5);
    if (with_skip && r->d[5]) op_in(r, "skip_gate", OP_F32, C, -3, 3);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    if (with_skip) stream_out(r, "x_in", n, F32_TOL, ELEMENTWISE);
    stream_out(r, "xm", n, F32_TOL, ELEMENTWISE);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    bf16_out(r, "a", n);
}
/* CPU: scaled_add (if skip), residual_mix, rmsnorm; each stream value rounded as stored */
static void mix_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *x_in = new_floats(n), *skip_w = row_control(r, "skip_w"), *mix = row_control(r, "mix");
    if (r->d[2] && r->d[5]) gated_skip_ref(r, x_in, HOST("x"), HOST("skip"), skip_w, N, C);
    else if (r->d[2]) cpu_scaled_add_forward(x_in, HOST("x"), HOST("skip"), skip_w, N, C);
    else memcpy(x_in, HOST("x"), n * sizeof(float));
    row_round(r, x_in, n);
    if (r->d[2]) memcpy(HOST("x_in"), x_in, n * sizeof(float));
    cpu_residual_mix_forward(HOST("xm"), x_in, HOST("x0"), mix, N, C);
    row_round(r, HOST("xm"), n);
    cpu_rmsnorm_forward(HOST("a"), HOST("rstd"), HOST("xm"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("a"), n);
    free(x_in), free(skip_w), free(mix);
}
static int mix_norm_fwd_gpu(OpRun *r) {
    const CudaMixNorm a = {DEV_OPT("x_in"), DEV("xm"),   DEV("rstd"),         DEV("a"),        DEV("x"),
                           DEV_OPT("skip"), DEV("skip_w"), DEV_OPT("skip_gate"), DEV("x0"),       DEV("mix"),
                           r->d[0],         r->d[1],       FLT_EPSILON,          row_ln_scale(r), row_dtype(r)};
    return cuda_mix_norm_forward(&a, 0);
}

/* The block before's output made in the block input's pass: xm is read as the block's xm and
 * overwritten with the next mix (one xm buffer, in place). Skip modes: 0 none, 1 another
 * tensor, 2 the output being made (the first decoder block's case). */
static void out_mix_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    stream_acc(r, "xm", n, -2, 2, F32_TOL, ELEMENTWISE);
    op_in(r, "ao", OP_BF16, n, -2, 2);
    op_in(r, "mo", OP_BF16, n, -2, 2);
    op_in(r, "attn_scale", OP_F32, C, -1, 1);
    op_in(r, "mlp_scale", OP_F32, C, -1, 1);
    if (mode == 1) op_in(r, "skip", row_stream(r), n, -2, 2);
    op_in(r, "x0", row_stream(r), n, -1, 1);
    if (mode) op_in(r, "skip_w", OP_F32, C, 0.5, 1.5);
    if (mode && r->d[5]) op_in(r, "skip_gate", OP_F32, C, -3, 3);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    stream_out(r, "x_out", n, F32_TOL, ELEMENTWISE);
    if (mode) stream_out(r, "x_in", n, F32_TOL, ELEMENTWISE);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    bf16_out(r, "a", n);
}
/* CPU: x1 = xm + attn_scale * ao and x_out = x1 + mlp_scale * mo (each rounded as stored), then
 * as mix_norm_fwd_cpu */
static void out_mix_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    float *mid = new_floats(n), *x_in = new_floats(n), *attn_scale = row_control(r, "attn_scale"),
          *mlp_scale = row_control(r, "mlp_scale"), *mix = row_control(r, "mix");
    float *skip_w = mode ? row_control(r, "skip_w") : NULL;
    cpu_scaled_add_forward(mid, op_start(r, "xm"), HOST("ao"), attn_scale, N, C);
    row_round(r, mid, n);
    cpu_scaled_add_forward(HOST("x_out"), mid, HOST("mo"), mlp_scale, N, C);
    row_round(r, HOST("x_out"), n);
    if (mode && r->d[5]) gated_skip_ref(r, x_in, HOST("x_out"), mode == 1 ? HOST("skip") : HOST("x_out"), skip_w, N, C);
    else if (mode) cpu_scaled_add_forward(x_in, HOST("x_out"), mode == 1 ? HOST("skip") : HOST("x_out"), skip_w, N, C);
    else memcpy(x_in, HOST("x_out"), n * sizeof(float));
    row_round(r, x_in, n);
    if (mode) memcpy(HOST("x_in"), x_in, n * sizeof(float));
    cpu_residual_mix_forward(HOST("xm"), x_in, HOST("x0"), mix, N, C);
    row_round(r, HOST("xm"), n);
    cpu_rmsnorm_forward(HOST("a"), HOST("rstd"), HOST("xm"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("a"), n);
    free(mid), free(x_in), free(attn_scale), free(mlp_scale), free(mix), free(skip_w);
}
static int out_mix_norm_fwd_gpu(OpRun *r) {
    const int mode = r->d[2];
    const CudaBlockOutput prev = {DEV("x_out"), DEV("xm"), DEV("ao"), DEV("mo"), DEV("attn_scale"), DEV("mlp_scale")};
    const void *skip = mode == 0 ? NULL : mode == 1 ? DEV("skip") : DEV("x_out");
    const CudaMixNorm a = {DEV_OPT("x_in"),      DEV("xm"), DEV("rstd"), DEV("a"),    NULL,
                           skip,                 DEV_OPT("skip_w"), DEV_OPT("skip_gate"), DEV("x0"),
                           DEV("mix"),           r->d[0],   r->d[1],     FLT_EPSILON, row_ln_scale(r),
                           row_dtype(r)};
    return cuda_out_mix_norm_forward(&prev, &a, 0);
}
/* bitwise cuda_scaled_add_forward then cuda_mix_norm_forward (on the row's stream); a block
 * output without mo refused */
static void out_mix_norm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1], mode = r->d[2];
    const size_t n = (size_t)N * C;
    void *d_xm = dev_stream(r, op_start(r, "xm"), n), *d_out = dev_stream_nan(r, n), *d_xin = dev_stream_nan(r, n);
    float *d_r = dev_nan(N);
    ct_bf16 *d_a = dev_alloc(n * sizeof(ct_bf16));
    const void *sk = mode == 0 ? NULL : mode == 1 ? DEV("skip") : d_out;
    CHECK_CUDA_OK(cuda_scaled_add_forward(d_out, d_xm, DEV("ao"), DEV("attn_scale"), DEV("mo"), DEV("mlp_scale"), N,
                                          C, row_dtype(r), 0));
    const CudaMixNorm two = {mode ? d_xin : NULL, d_xm, d_r, d_a, d_out, sk, DEV_OPT("skip_w"), DEV_OPT("skip_gate"),
                             DEV("x0"), DEV("mix"), N, C, FLT_EPSILON, row_ln_scale(r), row_dtype(r)};
    CHECK_CUDA_OK(cuda_mix_norm_forward(&two, 0));
    check_same_stream(r, d_out, "x_out", "out_mix_norm vs the two ops");
    check_same_stream(r, d_xm, "xm", "out_mix_norm vs the two ops");
    if (mode) check_same_stream(r, d_xin, "x_in", "out_mix_norm vs the two ops");
    float *t_r = host_from_dev(d_r, N), *t_a = host_from_dev_bf16(d_a, n);
    CHECK(memcmp(t_r, GOT("rstd"), N * sizeof(float)) == 0, "rstd differs from the two ops' (skip mode %d)", mode);
    CHECK(memcmp(t_a, GOT("a"), n * sizeof(float)) == 0, "a differs from the two ops' (skip mode %d)", mode);
    free(t_r), free(t_a);
    dev_free(d_xm), dev_free(d_out), dev_free(d_xin), dev_free(d_r), dev_free(d_a);
    const CudaBlockOutput half = {DEV("x0"), DEV("x0"), DEV("ao"), NULL, DEV("attn_scale"), DEV("mlp_scale")};
    const CudaMixNorm some = {NULL, DEV("x0"), DEV("rstd"), NULL, NULL, NULL, NULL, NULL, DEV("x0"), DEV("mix"), N, C,
                              FLT_EPSILON, 1.0f, row_dtype(r)};
    CHECK(cuda_out_mix_norm_forward(&half, &some, 0) != 0 &&
              strstr(ct_error(), "needs x_out, xm, ao, mo") != NULL,
          "a block output without mo: got '%s'", ct_error());
    ct_error_clear();
}

/* ---- attention residual + MLP norm: add_norm, d = {N, C, 0, ln_scale, BF16S} ---- */

static void add_norm_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "xm", row_stream(r), n, -2, 2);
    op_in(r, "branch", OP_BF16, n, -2, 2); /* a product's bf16 output */
    op_in(r, "scale", OP_F32, C, -1, 1);
    stream_out(r, "x1", n, F32_TOL, ELEMENTWISE);
    op_out(r, "rstd", OP_F32, N, F32_TOL);
    bf16_out(r, "m", n);
}
static void add_norm_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    float *scale = row_control(r, "scale");
    cpu_scaled_add_forward(HOST("x1"), HOST("xm"), HOST("branch"), scale, N, C);
    row_round(r, HOST("x1"), (size_t)N * C);
    cpu_rmsnorm_forward(HOST("m"), HOST("rstd"), HOST("x1"), N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("m"), (size_t)N * C);
    free(scale);
}
static int add_norm_fwd_gpu(OpRun *r) {
    return cuda_add_norm_forward(DEV("x1"), DEV("rstd"), DEV("m"), DEV("xm"), DEV("branch"), DEV("scale"), r->d[0],
                                 r->d[1], FLT_EPSILON, row_ln_scale(r), row_dtype(r), 0);
}
/* without x1 (the backend's call): the same rstd and m bits */
static void add_norm_fwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *d_r2 = dev_nan(N);
    ct_bf16 *d_m2 = dev_alloc(n * sizeof(ct_bf16));
    dev_poison_bf16(d_m2, n);
    CHECK_CUDA_OK(cuda_add_norm_forward(NULL, d_r2, d_m2, DEV("xm"), DEV("branch"), DEV("scale"), N, C, FLT_EPSILON,
                                        row_ln_scale(r), row_dtype(r), 0));
    float *g_r2 = host_from_dev(d_r2, N), *g_m2 = host_from_dev_bf16(d_m2, n);
    CHECK(memcmp(g_r2, GOT("rstd"), N * sizeof(float)) == 0, "add_norm rstd differs without x1");
    CHECK(memcmp(g_m2, GOT("m"), n * sizeof(float)) == 0, "add_norm m differs without x1");
    free(g_r2), free(g_m2);
    dev_free(d_r2), dev_free(d_m2);
}

/* The MLP norm's backward with its input x1 = xm + scale * branch and xm = mix(x_in, x0)
 * recomputed, and xm's own norm recomputed beside it (renorm); variant 1 fused with x1's
 * residual backward (dbranch, dscale). d = {N, C, 0, ln_scale, BF16S}. The CUDA op reads rstd
 * and renorm_rstd from the CUDA forwards, as the backend runs them; the CPU reference makes its
 * own (so a fault in the forwards' rstd shows here too). */
static void add_norm_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x_in", row_stream(r), n, -2, 2);
    op_in(r, "x0", row_stream(r), n, -1, 1);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    op_in(r, "branch", OP_BF16, n, -2, 2);
    op_in(r, "scale", OP_F32, C, -1, 1);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0);        /* made on the device by `prepare` */
    op_in(r, "renorm_rstd", OP_F32, N, 0, 0); /* the same */
    stream_acc(r, "dx", n, -1, 1, GRAD_TOL, ROW_SUM);
    bf16_out(r, "renorm", n);
    if (r->c->op->variant) {
        bf16_out(r, "dbranch", n);
        op_acc(r, "dscale", OP_F32, C, -1, 1, GRAD_TOL);
        op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 1));
    }
}
/* the forwards as the backend runs them: xm and its norm, then x1 and its norm; into xm, x1
 * (stream tensors of the row's type) */
static int add_norm_forwards(OpRun *r, void *xm, void *x1, float *rstd, float *renorm_rstd, ct_bf16 *a) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    ct_bf16 *m = dev_alloc(n * sizeof(ct_bf16));
    const CudaMixNorm input = {NULL, xm, renorm_rstd, a, DEV("x_in"), NULL, NULL, NULL, DEV("x0"), DEV("mix"), N, C,
                               FLT_EPSILON, row_ln_scale(r), row_dtype(r)};
    int rc = cuda_mix_norm_forward(&input, 0);
    if (rc == 0)
        rc = cuda_add_norm_forward(x1, rstd, m, xm, DEV("branch"), DEV("scale"), N, C, FLT_EPSILON, row_ln_scale(r),
                                   row_dtype(r), 0);
    if (rc == 0 && !dev_sync_ok()) rc = -1;
    dev_free(m);
    return rc;
}
static void add_norm_bwd_prepare(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    void *xm = dev_alloc(n * stream_bytes(r));
    ct_bf16 *a = dev_alloc(n * sizeof(ct_bf16));
    CHECK_CUDA_OK(add_norm_forwards(r, xm, NULL, DEV("rstd"), DEV("renorm_rstd"), a));
    dev_free(xm), dev_free(a);
}
/* CPU: xm and its norm (the renorm), x1 and its rstd; dx += rmsnorm backward on x1 (g, kept in
 * fp32 for near_bf16); then x1's residual backward on the updated dx, rounded as stored */
static void add_norm_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *xm = new_floats(n), *x1 = new_floats(n), *y = new_floats(n), *rstd = new_floats(N);
    float *mix = row_control(r, "mix"), *scale = row_control(r, "scale");
    cpu_residual_mix_forward(xm, HOST("x_in"), HOST("x0"), mix, N, C);
    row_round(r, xm, n);
    cpu_rmsnorm_forward(HOST("renorm"), rstd, xm, N, C, FLT_EPSILON);
    cpu_ln_scale(r, HOST("renorm"), n);
    cpu_scaled_add_forward(x1, xm, HOST("branch"), scale, N, C);
    row_round(r, x1, n);
    cpu_rmsnorm_forward(y, rstd, x1, N, C, FLT_EPSILON);
    cpu_rmsnorm_backward(HOST("dx"), HOST("dout"), x1, rstd, N, C);
    if (r->c->op->variant) {
        float *g = copy_host(HOST("dx"), n);
        row_round(r, g, n);
        cpu_scaled_add_backward(NULL, HOST("dbranch"), HOST("dscale"), g, HOST("branch"), scale, N, C);
        free(g);
    }
    free(xm), free(x1), free(y), free(rstd), free(mix), free(scale);
}
static int add_norm_bwd_gpu(OpRun *r) {
    return cuda_add_norm_backward(&(CudaAddNormBackward){.dx = DEV("dx"), .dout = DEV("dout"), .rstd = DEV("rstd"),
                                                         .x_in = DEV("x_in"), .x0 = DEV("x0"), .mix = DEV("mix"),
                                                         .branch = DEV("branch"), .scale = DEV("scale"),
                                                         .renorm = DEV("renorm"), .renorm_rstd = DEV("renorm_rstd"),
                                                         .renorm_scale = row_ln_scale(r), .dbranch = DEV_OPT("dbranch"),
                                                         .dscale = DEV_OPT("dscale"), .partials = DEV_OPT("partials"),
                                                         .N = r->d[0], .C = r->d[1], .dtype = row_dtype(r)},
                                  0);
}
/* Variant 0: renorm bitwise the forward's norm of xm; dx bitwise cuda_rmsnorm_backward on a
 * stored x1 and the same without renorm; renorm without its rstd and dbranch without dscale
 * refused. Variant 1: bitwise cuda_add_norm_backward then cuda_scaled_add_backward (the fused
 * kernel where the shared memory allows, the two-kernel path beyond it). On the row's stream. */
static void add_norm_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    void *d_dx = DEV("dx");
    float *start = op_start(r, "dx");
    /* the norm's backward alone; the cases below add to it */
    const CudaAddNormBackward plain_args = {.dx = d_dx, .dout = DEV("dout"), .rstd = DEV("rstd"), .x_in = DEV("x_in"),
                                            .x0 = DEV("x0"), .mix = DEV("mix"), .branch = DEV("branch"),
                                            .scale = DEV("scale"), .renorm_scale = 1.0f, .N = N, .C = C,
                                            .dtype = row_dtype(r)};
    if (r->c->op->variant == 0) {
        void *xm = dev_alloc(n * stream_bytes(r)), *x1 = dev_alloc(n * stream_bytes(r));
        float *rs = dev_nan(N), *rm = dev_nan(N);
        ct_bf16 *a = dev_alloc(n * sizeof(ct_bf16));
        CHECK_CUDA_OK(add_norm_forwards(r, xm, x1, rs, rm, a));
        float *fa = host_from_dev_bf16(a, n);
        CHECK(memcmp(fa, GOT("renorm"), n * sizeof(float)) == 0, "recomputed norm of xm differs from the forward's");
        dev_put_stream(r, d_dx, start, n);
        CHECK_CUDA_OK(cuda_rmsnorm_backward(d_dx, DEV("dout"), x1, DEV("rstd"), N, C, row_dtype(r), 0));
        check_same_stream(r, d_dx, "dx", "add_norm backward vs rmsnorm backward on x1");
        dev_put_stream(r, d_dx, start, n);
        CHECK_CUDA_OK(cuda_add_norm_backward(&plain_args, 0));
        check_same_stream(r, d_dx, "dx", "add_norm backward without the renorm output");
        CudaAddNormBackward bad = plain_args;
        bad.renorm = DEV("renorm");
        CHECK(cuda_add_norm_backward(&bad, 0) != 0, "renorm without its rstd accepted");
        bad = plain_args;
        bad.dbranch = DEV("renorm");
        CHECK(cuda_add_norm_backward(&bad, 0) != 0, "dbranch without dscale accepted");
        ct_error_clear();
        free(fa);
        dev_free(xm), dev_free(x1), dev_free(rs), dev_free(rm), dev_free(a);
        return;
    }
    dev_put_stream(r, d_dx, start, n);
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
                                            .partials = DEV("partials"), .N = N, .C = C, .dtype = row_dtype(r)};
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

/* ---- the block input's fused backward: norm_mix, d = {N, C, 0, 0, BF16S} ----
 * The attention norm's backward on the recomputed xm, then the residual mix's: the fused kernel
 * where the shared memory allows (C = 200), the two-kernel path beyond it (C = 16000: 2 MB of
 * accumulators) and the one-channel path (C = 203). */
static void norm_mix_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x_in", row_stream(r), n, -2, 2);
    op_in(r, "x0", row_stream(r), n, -1, 1);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1.5);
    op_in(r, "dout", OP_F32, n, -1, 1);
    op_in(r, "rstd", OP_F32, N, 0, 0); /* made on the device by `prepare` */
    op_acc_role(r, "dx", OP_CLOBBER, row_stream(r), n, -1, 1, 0); /* the residual's gradient; undefined afterwards */
    stream_out(r, "dx_in", n, GRAD_TOL, ROW_SUM);
    stream_acc(r, "dx0", n, -1, 1, GRAD_TOL, ROW_SUM);
    op_acc(r, "dmix", OP_F32, 2 * (size_t)C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 2));
}
static int norm_mix_forward(OpRun *r, void *xm) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    ct_bf16 *a = dev_alloc(n * sizeof(ct_bf16));
    const CudaMixNorm input = {NULL, xm, DEV("rstd"), a, DEV("x_in"), NULL, NULL, NULL, DEV("x0"), DEV("mix"), r->d[0],
                               r->d[1], FLT_EPSILON, 1.0f, row_dtype(r)};
    int rc = cuda_mix_norm_forward(&input, 0);
    if (rc == 0 && !dev_sync_ok()) rc = -1;
    dev_free(a);
    return rc;
}
/* rstd: the CUDA forward's for the CUDA op; the CPU reference makes its own */
static void norm_mix_bwd_prepare(OpRun *r) {
    void *xm = dev_alloc((size_t)r->d[0] * r->d[1] * stream_bytes(r));
    CHECK_CUDA_OK(norm_mix_forward(r, xm));
    dev_free(xm);
}
/* CPU: xm, its rstd; g = dx + norm backward, rounded as stored; mix backward on g (dx_in
 * written; dx_in and dx0 kept in fp32 for near_bf16) */
static void norm_mix_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *xm = new_floats(n), *y = new_floats(n), *rstd = new_floats(N), *g = copy_host(op_start(r, "dx"), n);
    float *mix = row_control(r, "mix");
    cpu_residual_mix_forward(xm, HOST("x_in"), HOST("x0"), mix, N, C);
    row_round(r, xm, n);
    cpu_rmsnorm_forward(y, rstd, xm, N, C, FLT_EPSILON);
    cpu_rmsnorm_backward(g, HOST("dout"), xm, rstd, N, C);
    row_round(r, g, n);
    cpu_residual_mix_backward(HOST("dx_in"), HOST("dx0"), HOST("dmix"), g, HOST("x_in"), HOST("x0"), mix, N, C);
    free(xm), free(y), free(rstd), free(g), free(mix);
}
static int norm_mix_bwd_gpu(OpRun *r) {
    const CudaNormMixBackward a = {.dx_in = DEV("dx_in"), .dx0 = DEV("dx0"), .dmix = DEV("dmix"), .dx = DEV("dx"),
                                   .dout = DEV("dout"), .rstd = DEV("rstd"), .x_in = DEV("x_in"), .x0 = DEV("x0"),
                                   .mix = DEV("mix"), .partials = DEV("partials"), .N = r->d[0], .C = r->d[1],
                                   .dtype = row_dtype(r)};
    return cuda_norm_mix_backward(&a, 0);
}
/* the two ops on the stored xm: the same bits (on the row's stream: g stored rounded in dx) */
static void norm_mix_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    void *xm = dev_alloc(n * stream_bytes(r)), *din2 = dev_stream_nan(r, n);
    CHECK_CUDA_OK(norm_mix_forward(r, xm));
    dev_put_stream(r, DEV("dx"), op_start(r, "dx"), n);
    dev_put_stream(r, DEV("dx0"), op_start(r, "dx0"), n);
    dev_put(DEV("dmix"), op_start(r, "dmix"), 2 * (size_t)C * sizeof(float));
    CHECK_CUDA_OK(cuda_rmsnorm_backward(DEV("dx"), DEV("dout"), xm, DEV("rstd"), N, C, row_dtype(r), 0));
    const CudaResidualMixBackward mix_backward = {din2,       0,  DEV("dx0"), DEV("dmix"), DEV("dx"), DEV("x_in"),
                                                  DEV("x0"),  DEV("mix"), DEV("partials"), N, C, row_dtype(r)};
    CHECK_CUDA_OK(cuda_residual_mix_backward(&mix_backward, 0));
    char what[64];
    snprintf(what, sizeof what, "norm_mix vs the two ops (C = %d)", C);
    check_same_stream(r, din2, "dx_in", what);
    check_same_stream(r, DEV("dx0"), "dx0", what);
    float *t_dmix = host_from_dev(DEV("dmix"), 2 * (size_t)C);
    CHECK(memcmp(GOT("dmix"), t_dmix, 2 * (size_t)C * sizeof(float)) == 0, "%s: dmix differs", what);
    free(t_dmix);
    dev_free(xm), dev_free(din2);
}

/* ---- scaled add: d = {N, C, 0, 0, BF16S}; forward variant 1 with an inner branch; backward
 * variant 0 with an fp32 branch and every output (fp32 stream only: a bf16 stream's fp32 branch
 * is not a case the backend has), variant 1 the backend's (bf16 branch, bf16 dbranch; with dx
 * too on the bf16 stream) ---- */

static void scaled_add_fwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", row_stream(r), n, -2, 2);
    op_in(r, "branch", OP_BF16, n, -2, 2);
    op_in(r, "scale", OP_F32, C, -1, 1);
    if (r->c->op->variant) {
        op_in(r, "inner", OP_BF16, n, -2, 2);
        op_in(r, "inner_scale", OP_F32, C, -1, 1);
    }
    stream_out(r, "out", n, F32_TOL, ELEMENTWISE);
}
/* with an inner branch: (x + sc2 * br2) + sc * br, as two CPU scaled adds (the inner sum x1
 * rounded as stored) */
static void scaled_add_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *scale = row_control(r, "scale");
    if (!r->c->op->variant) {
        cpu_scaled_add_forward(HOST("out"), HOST("x"), HOST("branch"), scale, N, C);
    } else {
        float *mid = new_floats(n), *inner_scale = row_control(r, "inner_scale");
        cpu_scaled_add_forward(mid, HOST("x"), HOST("inner"), inner_scale, N, C);
        row_round(r, mid, n);
        cpu_scaled_add_forward(HOST("out"), mid, HOST("branch"), scale, N, C);
        free(mid), free(inner_scale);
    }
    row_round(r, HOST("out"), n);
    free(scale);
}
static int scaled_add_fwd_gpu(OpRun *r) {
    return cuda_scaled_add_forward(DEV("out"), DEV("x"), DEV_OPT("inner"), DEV_OPT("inner_scale"), DEV("branch"),
                                   DEV("scale"), r->d[0], r->d[1], row_dtype(r), 0);
}
/* bitwise two launches (the block output from xm without a stored x1); an inner branch
 * without its scale refused */
static void scaled_add_fwd_inner_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    void *d_mid = dev_stream_nan(r, n), *d_two = dev_stream_nan(r, n);
    CHECK_CUDA_OK(cuda_scaled_add_forward(d_mid, DEV("x"), NULL, NULL, DEV("inner"), DEV("inner_scale"), N, C,
                                          row_dtype(r), 0));
    CHECK_CUDA_OK(
        cuda_scaled_add_forward(d_two, d_mid, NULL, NULL, DEV("branch"), DEV("scale"), N, C, row_dtype(r), 0));
    check_same_stream(r, d_two, "out", "scaled_add with an inner branch vs two adds");
    CHECK(cuda_scaled_add_forward(DEV("out"), DEV("x"), DEV("inner"), NULL, DEV("branch"), DEV("scale"), N, C,
                                  row_dtype(r), 0) != 0,
          "inner branch without its scale accepted");
    ct_error_clear();
    dev_free(d_mid), dev_free(d_two);
}

/* backward: dx and dscale accumulate into non-zero buffers, dbranch is written */
static void scaled_add_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    const int backend = r->c->op->variant;
    op_in(r, "dout", row_stream(r), n, -1, 1);
    if (backend) op_in(r, "branch", OP_BF16, n, -2, 2);
    else op_in_bf16_values(r, "branch", n, -2, 2); /* a product's bf16 output, read in fp32 */
    op_in(r, "scale", OP_F32, C, -1, 1);
    if (!backend || r->d[4]) stream_acc(r, "dx", n, -1, 1, F32_TOL, ELEMENTWISE);
    if (!backend) op_out(r, "dbranch", OP_F32, n, F32_TOL);
    bf16_out(r, "dbranch_bf16", n);
    op_acc(r, "dscale", OP_F32, C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 1));
}
/* the bf16 output is the contribution, as the fp32 one; dx += dout rounded as stored */
static void scaled_add_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    float *scale = row_control(r, "scale");
    cpu_scaled_add_backward(HOST_OPT("dx"), HOST_OPT("dbranch") ? HOST("dbranch") : HOST("dbranch_bf16"),
                            HOST("dscale"), HOST("dout"), HOST("branch"), scale, N, C);
    if (HOST_OPT("dbranch")) memcpy(HOST("dbranch_bf16"), HOST("dbranch"), (size_t)N * C * sizeof(float));
    if (HOST_OPT("dx")) row_round(r, HOST("dx"), (size_t)N * C);
    free(scale);
}
static int scaled_add_bwd_gpu(OpRun *r) {
    const int backend = r->c->op->variant;
    const CudaScaledAddBackward a = {DEV_OPT("dx"),    DEV_OPT("dbranch"), DEV("dbranch_bf16"), DEV("dscale"),
                                     DEV("dout"),      backend ? NULL : DEV("branch"),
                                     backend ? DEV("branch") : NULL,        DEV("scale"),
                                     DEV("partials"),  r->d[0],
                                     r->d[1],          row_dtype(r)};
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
                                               .scale = DEV("scale"), .partials = DEV("partials"), .N = N, .C = C,
                                               .dtype = row_dtype(r)};
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
        void *dout1 = dev_stream_unaligned(r, HOST("dout"), n, &base);
        op_reset(r);
        const CudaScaledAddBackward one_wide = {DEV("dx"),    DEV("dbranch"), DEV("dbranch_bf16"),
                                                DEV("dscale"), dout1,         DEV("branch"),
                                                NULL,          DEV("scale"),  DEV("partials"),
                                                N,             C,             row_dtype(r)};
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

/* ---- residual mix backward: d = {N, C, dx_accumulate, 0, BF16S} ----
 * dx_accumulate 0: dx written (=) over NaN, mix[0]*dout alone: the CPU's product bit for bit. */
static void residual_mix_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", row_stream(r), n, -2, 2);
    op_in(r, "x0", row_stream(r), n, -2, 2);
    op_in(r, "mix", OP_F32, 2 * (size_t)C, -1, 1);
    op_in(r, "dout", row_stream(r), n, -1, 1);
    if (r->d[2]) stream_acc(r, "dx", n, -1, 1, F32_TOL, ELEMENTWISE);
    else stream_out(r, "dx", n, OP_EXACT, ELEMENTWISE);
    stream_acc(r, "dx0", n, -1, 1, F32_TOL, ELEMENTWISE);
    op_acc(r, "dmix", OP_F32, 2 * (size_t)C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 2));
}
static void residual_mix_bwd_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    float *mix = row_control(r, "mix");
    cpu_residual_mix_backward(HOST("dx"), HOST("dx0"), HOST("dmix"), HOST("dout"), HOST("x"), HOST("x0"), mix,
                              r->d[0], r->d[1]);
    row_round(r, HOST("dx"), n);
    row_round(r, HOST("dx0"), n);
    free(mix);
}
static int residual_mix_bwd_gpu(OpRun *r) {
    const CudaResidualMixBackward a = {DEV("dx"),   r->d[2],         DEV("dx0"), DEV("dmix"), DEV("dout"),
                                       DEV("x"),    DEV("x0"),       DEV("mix"), DEV("partials"),
                                       r->d[0],     r->d[1],         row_dtype(r)};
    return cuda_residual_mix_backward(&a, 0);
}
/* the one-channel path (dout not 16-byte aligned) gives the 4-wide path's bits, dmix included:
 * same rows per thread, same order of the sums */
static void residual_mix_bwd_extra(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    if (C % 4 != 0) return;
    void *base;
    void *dout1 = dev_stream_unaligned(r, HOST("dout"), n, &base);
    op_reset(r);
    const CudaResidualMixBackward one_wide = {DEV("dx"), r->d[2],   DEV("dx0"), DEV("dmix"), dout1,
                                              DEV("x"),  DEV("x0"), DEV("mix"), DEV("partials"),
                                              N,         C,         row_dtype(r)};
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

/* ---- y += x along the stream (cuda_add_inplace): d = {n, 0, 0, 0, BF16S}: the CPU's one fp32
 * add per element, rounded as stored: EXACT; and an fp32 buffer rounded to bf16 values in place
 * (cuda_round_bf16_inplace, the stream's fp32 ends): d = {n}, with the ties and specials of the
 * conversions (below), bitwise ---- */

static void add_inplace_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    op_in(r, "x", row_stream(r), n, -2, 2);
    stream_acc(r, "y", n, -2, 2, OP_EXACT, ELEMENTWISE);
}
static void add_inplace_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    cpu_add_into(HOST("y"), HOST("x"), n);
    row_round(r, HOST("y"), n);
}
static int add_inplace_gpu(OpRun *r) { return cuda_add_inplace(DEV("y"), DEV("x"), (size_t)r->d[0], row_dtype(r), 0); }

/* ---- gated skip backward (cuda_skip_gate.cu): d = {N, C, in place (dx = dout), -, BF16S} ----
 * fp32: cpu_skip_gate_backward on zeroed dx and dskip (the op writes them). bf16 stream: its
 * steps with cuda_skip_gate.h's rounding points (w, gate, sigmoid, (1 - g) * dout, w * skip
 * rounded; dx, dskip rounded as stored), so dx and dskip are OP_EXACT; dw and dgate GRAD_TOL. */
static void skip_gate_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "x", row_stream(r), n, -2, 2);
    op_in(r, "skip", row_stream(r), n, -2, 2);
    op_in(r, "dout", row_stream(r), n, -1, 1);
    op_in(r, "w", OP_F32, C, 0.5, 1.5);
    op_in(r, "gate", OP_F32, C, -3, 3);
    stream_out(r, "dx", n, F32_TOL, ELEMENTWISE);
    stream_out(r, "dskip", n, F32_TOL, ELEMENTWISE);
    op_acc(r, "dw", OP_F32, C, -1, 1, GRAD_TOL);
    op_acc(r, "dgate", OP_F32, C, -1, 1, GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 2));
}
static void skip_gate_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *w = row_control(r, "w"), *g = row_control(r, "gate");
    float *dx = HOST("dx"), *dskip = HOST("dskip"), *dw = HOST("dw"), *dgate = HOST("dgate");
    const float *x = HOST("x"), *skip = HOST("skip"), *d = HOST("dout");
    memset(dx, 0, n * sizeof(float));
    memset(dskip, 0, n * sizeof(float));
    if (!r->d[4]) {
        cpu_skip_gate_backward(dx, dskip, dw, dgate, d, x, skip, w, g, N, C);
    } else {
        for (int c = 0; c < C; c++) g[c] = host_sigmoid(g[c]);
        host_round_bf16(g, (size_t)C);
        for (int c = 0; c < C; c++) {
            const float om = 1.0f - g[c], sg = g[c] * om;
            double sum_w = 0, sum_g = 0;
            for (int k = 0; k < N; k++) {
                const size_t i = (size_t)k * C + c;
                float t = om * d[i], start = w[c] * skip[i];
                host_round_bf16(&t, 1);
                host_round_bf16(&start, 1);
                dx[i] = g[c] * d[i];
                dskip[i] = w[c] * t;
                sum_w += (double)t * skip[i];
                sum_g += (double)(sg * d[i]) * (double)(x[i] - start);
            }
            dw[c] += (float)sum_w;
            dgate[c] += (float)sum_g;
        }
        row_round(r, dx, n);
        row_round(r, dskip, n);
    }
    free(w), free(g);
}
static int skip_gate_bwd_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const void *dout = DEV("dout");
    if (r->d[2]) { /* in place: dx holds dout */
        if (!dev_sync_ok() || cudaMemcpy(DEV("dx"), DEV("dout"), n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess)
            return -1;
        dout = DEV("dx");
    }
    const CudaSkipGateBackward a = {DEV("dx"), DEV("dskip"), DEV("dw"),   DEV("dgate"),    dout,    DEV("x"),
                                    DEV("skip"), DEV("w"),   DEV("gate"), DEV("partials"), r->d[0], r->d[1],
                                    row_dtype(r)};
    return cuda_skip_gate_backward(&a, 0);
}
/* dskip aliasing dout refused */
static void skip_gate_bwd_extra(OpRun *r) {
    const CudaSkipGateBackward a = {DEV("dx"), DEV("dout"), DEV("dw"),   DEV("dgate"),    DEV("dout"), DEV("x"),
                                    DEV("skip"), DEV("w"),  DEV("gate"), DEV("partials"), r->d[0],     r->d[1],
                                    row_dtype(r)};
    CHECK(cuda_skip_gate_backward(&a, 0) != 0 && strstr(ct_error(), "must not alias") != NULL,
          "skip_gate backward: dskip aliasing dout accepted (%s)", ct_error());
    ct_error_clear();
}

/* ---- relu^2 on bf16: d = {n elements, offset, in place, slope in thousandths} ----
 * (d[3] > 0: leaky relu^2, mlp_negative_slope = d[3] / 1000; 0: relu^2, its own kernels.)
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
static float relu2_slope(const OpRun *r) { return (float)r->d[3] / 1000.0f; }
static void relu2_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    if (op_find(r, "du")) {
        cpu_relu2_backward(HOST("du"), HOST("dh"), HOST("u"), 1, (int)n, relu2_slope(r));
        host_round_bf16(HOST("du"), n);
    }
    if (op_find(r, "h")) {
        cpu_relu2_forward(HOST("h"), HOST("u"), 1, (int)n, relu2_slope(r));
        host_round_bf16(HOST("h"), n);
    }
}
static int relu2_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    const float s = relu2_slope(r);
    if (r->c->op->variant < 0) return cuda_relu2_forward(DEV("h"), DEV("u"), n, s, 0);
    if (!r->d[2]) return cuda_relu2_backward(DEV("du"), DEV_OPT("h"), DEV("dh"), DEV("u"), n, s, 0);
    /* in place: du holds dh */
    if (!dev_sync_ok() || cudaMemcpy(DEV("du"), DEV("dh"), n * 2, cudaMemcpyDeviceToDevice) != cudaSuccess) return -1;
    return cuda_relu2_backward(DEV("du"), DEV_OPT("h"), DEV("du"), DEV("u"), n, s, 0);
}
/* h remade by the backward: bitwise the forward's, du bitwise the plain backward's; h aliasing
 * du refused */
static void relu2_bwd_h_extra(OpRun *r) {
    const size_t n = (size_t)r->d[0], off = (size_t)r->d[1];
    ct_bf16 *b_h = dev_alloc((n + off) * 2), *b_du = dev_alloc((n + off) * 2);
    ct_bf16 *h = b_h + off, *du = b_du + off;
    dev_poison_bf16(h, n);
    dev_poison_bf16(du, n);
    CHECK_CUDA_OK(cuda_relu2_forward(h, DEV("u"), n, relu2_slope(r), 0));
    CHECK_CUDA_OK(cuda_relu2_backward(du, NULL, DEV("dh"), DEV("u"), n, relu2_slope(r), 0));
    float *g_h = host_from_dev_bf16(h, n), *g_du = host_from_dev_bf16(du, n);
    CHECK(memcmp(g_h, GOT("h"), n * sizeof(float)) == 0 && memcmp(g_du, GOT("du"), n * sizeof(float)) == 0,
          "relu2 backward with h (n %zu, offset %zu): h or du differs from the forward's / the plain backward's", n,
          off);
    CHECK(cuda_relu2_backward(DEV("du"), DEV("du"), DEV("du"), DEV("u"), n, relu2_slope(r), 0) != 0,
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

/* cuda_round_bf16_inplace: d = {n} */
static void round_bf16_inplace_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    OpTensor *x = op_acc(r, "x", OP_F32, n, -3, 3, OP_BITWISE);
    for (size_t i = 0; i < sizeof conversion_specials / sizeof conversion_specials[0] && i < n; i++)
        memcpy(&x->start[i], &conversion_specials[i], 4);
}
static void round_bf16_inplace_cpu(OpRun *r) { host_round_bf16(HOST("x"), (size_t)r->d[0]); }
static int round_bf16_inplace_gpu(OpRun *r) { return cuda_round_bf16_inplace(DEV("x"), (size_t)r->d[0], 0); }

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
static const OpDef op_skip_gate_bwd = {"skip_gate_bwd", 0, skip_gate_bwd_tensors, NULL, skip_gate_bwd_cpu,
                                       skip_gate_bwd_gpu, skip_gate_bwd_extra, NULL, 0};
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
static const OpDef op_add_inplace = {"add_inplace", 0, add_inplace_tensors, NULL, add_inplace_cpu, add_inplace_gpu,
                                     NULL, NULL, 0};
static const OpDef op_round_bf16_inplace = {"round_bf16_inplace", 0, round_bf16_inplace_tensors, NULL,
                                            round_bf16_inplace_cpu, round_bf16_inplace_gpu, NULL, NULL, 0};
static const OpDef op_sum_sumsq = {"sum_sumsq", 0, sums_tensors, NULL, sums_cpu, sums_gpu, NULL, NULL, 0};
static const OpDef op_colsum = {"colsum", 0, colsum_tensors, NULL, colsum_cpu, colsum_gpu, NULL, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
