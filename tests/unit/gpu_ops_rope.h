/* gpu_ops_rope.h — the fused CUDA QK-norm + RoPE + gain (cuda_rope.cu) as ops of the
 * table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_qk_norm_rope_forward/backward.
 * d = {B, T, heads, head_dim, with gain, rope_dims (0: head_dim, full RoPE)}: rope_dims below
 * head_dim is the record's partial RoPE (tables of [T, rope_dims/2]). Variant 0 makes every
 * output (fp32 and bf16, din and din_bf16); variant 1 is the backend's call (forward: bf16 only;
 * backward: din_bf16 and dgain).
 * The column-block case runs in and the input gradients as a column block of wider rows (the
 * backend's [q | k | v] layout), bitwise the whole-tensor run.
 *
 * Bounds: FWD_TOL 1e-6 (the element operations are the CPU's with the same roundings; the
 * per-head sum of squares is an fp32 dot on both sides, in a different order, which moves r by
 * an ulp at most); GRAD_TOL 1e-5 (the same for a second dot product); DGAIN_TOL 1e-5 (a sum over
 * tokens, double on both sides, of fp32 partials that may differ by an ulp); BF16_TOL 4e-3
 * (bf16 output rounding, <= 2^-9 per element). */
#ifndef CT_TEST_GPU_OPS_ROPE_H
#define CT_TEST_GPU_OPS_ROPE_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define ROPE_FWD_TOL 1e-6
#define ROPE_GRAD_TOL 1e-5
#define ROPE_DGAIN_TOL 1e-5
#define ROPE_BF16_TOL 4e-3

/* The rotated dims of the row's shape: d[5], or head_dim when 0. */
static int rope_dims_of(const OpRun *r) { return r->d[5] ? r->d[5] : r->d[3]; }

/* The call's shape for the row (whole rows: ld = heads * head_dim) with rope_dims rd. */
static CudaRopeShape rope_shape_of(OpRun *r, int rd) {
    const int H = r->d[2], hd = r->d[3];
    return (CudaRopeShape){r->d[0], r->d[1], H, hd, rd, H * hd, DEV("cos"), DEV("sin")};
}

/* in (c_q / c_k's bf16 output), the gain and cpu_rope_tables_init's tables */
static void rope_inputs(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], hd = r->d[3], rd = rope_dims_of(r);
    const size_t n = (size_t)B * T * H * hd, nt = (size_t)T * (rd / 2);
    op_in(r, "in", OP_BF16, n, -2, 2);
    if (r->d[4]) op_in(r, "gain", OP_F32, H, 0.5, 2);
    OpTensor *c = op_in(r, "cos", OP_F32, nt, 0, 0), *s = op_in(r, "sin", OP_F32, nt, 0, 0);
    cpu_rope_tables_init(c->host, s->host, T, rd, 10000.0f);
}

static void rope_fwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1] * r->d[2] * r->d[3];
    rope_inputs(r);
    if (r->c->op->variant == 0) op_out(r, "out", OP_F32, n, ROPE_FWD_TOL);
    op_out(r, "out_bf16", OP_BF16, n, ROPE_BF16_TOL);
}
static void rope_fwd_cpu(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], hd = r->d[3];
    cpu_qk_norm_rope_forward(HOST("out_bf16"), HOST("in"), HOST_OPT("gain"), HOST("cos"), HOST("sin"), B, T, H, hd,
                             rope_dims_of(r));
    if (HOST_OPT("out")) memcpy(HOST("out"), HOST("out_bf16"), (size_t)B * T * H * hd * sizeof(float));
}
static int rope_fwd_gpu(OpRun *r) {
    const CudaRopeShape shape = rope_shape_of(r, rope_dims_of(r));
    return cuda_qk_norm_rope_forward(DEV_OPT("out"), DEV("out_bf16"), DEV("in"), DEV_OPT("gain"), &shape, 0);
}
/* the bf16 copy is the fp32 result rounded once, with or without the fp32 output; rope_dims odd,
 * 0 or above head_dim refused */
static void rope_fwd_extra(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], hd = r->d[3], rd = rope_dims_of(r);
    const size_t n = (size_t)B * T * H * hd;
    float *rounded = copy_host(GOT("out"), n);
    host_round_bf16(rounded, n);
    CHECK(memcmp(GOT("out_bf16"), rounded, n * sizeof(float)) == 0, "forward bf16 output is not bf16(fp32 output)");
    ct_bf16 *only16 = dev_alloc(n * 2);
    dev_poison_bf16(only16, n);
    const CudaRopeShape shape = rope_shape_of(r, rd);
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(NULL, only16, DEV("in"), DEV_OPT("gain"), &shape, 0));
    float *g16 = host_from_dev_bf16(only16, n);
    CHECK(memcmp(g16, rounded, n * sizeof(float)) == 0, "forward bf16-only output differs");
    free(rounded), free(g16);
    const int bad[3] = {rd - 1, 0, hd + 2};
    for (int k = 0; k < 3; k++) {
        const CudaRopeShape bad_shape = rope_shape_of(r, bad[k]);
        CHECK(cuda_qk_norm_rope_forward(NULL, only16, DEV("in"), DEV_OPT("gain"), &bad_shape, 0) != 0 &&
                  strstr(ct_error(), "rope_dims") != NULL,
              "rope_dims %d with head_dim %d: got '%s'", bad[k], hd, ct_error());
        ct_error_clear();
    }
    dev_free(only16);
}

static void rope_bwd_tensors(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2];
    const size_t n = (size_t)B * T * H * r->d[3];
    rope_inputs(r);
    op_in(r, "dout", OP_F32, n, -1, 1);
    if (r->c->op->variant == 0) op_acc(r, "din", OP_F32, n, -1, 1, ROPE_GRAD_TOL);
    op_out(r, "din_bf16", OP_BF16, n, ROPE_BF16_TOL);
    if (r->d[4]) op_acc(r, "dgain", OP_F32, H, -1, 1, ROPE_DGAIN_TOL);
    op_scratch(r, "scratch", OP_F32, cuda_qk_norm_rope_backward_scratch_floats(B, T, H));
    op_scratch(r, "partials", OP_F64, cuda_qk_norm_rope_backward_partials_doubles(B, T, H));
}
/* din_bf16 is the contribution alone (a backward from 0 without dgain) */
static void rope_bwd_cpu(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], hd = r->d[3], rd = rope_dims_of(r);
    float *scratch = malloc(cpu_qk_norm_rope_backward_scratch_floats(B, T, H) * sizeof(float));
    if (HOST_OPT("din"))
        cpu_qk_norm_rope_backward(HOST("din"), HOST_OPT("dgain"), HOST("dout"), HOST("in"), HOST_OPT("gain"),
                                  HOST("cos"), HOST("sin"), B, T, H, hd, rd, scratch);
    cpu_qk_norm_rope_backward(HOST("din_bf16"), HOST_OPT("din") ? NULL : HOST_OPT("dgain"), HOST("dout"), HOST("in"),
                              HOST_OPT("gain"), HOST("cos"), HOST("sin"), B, T, H, hd, rd, scratch);
    free(scratch);
}
static int rope_bwd_gpu(OpRun *r) {
    const CudaRopeShape shape = rope_shape_of(r, rope_dims_of(r));
    return cuda_qk_norm_rope_backward(DEV_OPT("din"), DEV("din_bf16"), DEV_OPT("dgain"), DEV("dout"), DEV("in"),
                                      DEV_OPT("gain"), &shape, DEV("scratch"), DEV("partials"), 0);
}
/* the gain's reduction alone (no other output): the same bits */
static void rope_bwd_extra(OpRun *r) {
    const int H = r->d[2];
    if (!r->d[4]) return;
    dev_put(DEV("dgain"), op_start(r, "dgain"), H * sizeof(float));
    const CudaRopeShape shape = rope_shape_of(r, rope_dims_of(r));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(NULL, NULL, DEV("dgain"), DEV("dout"), DEV("in"), DEV("gain"), &shape,
                                             DEV("scratch"), DEV("partials"), 0));
    float *again = host_from_dev(DEV("dgain"), H);
    CHECK(memcmp(again, GOT("dgain"), H * sizeof(float)) == 0, "dgain not deterministic");
    free(again);
}

/* in and the input gradients as a column block of wider rows (the backend's [q | k | v] rows,
 * here k's block: columns [D, D + H*hd) of rows of D + 2*H*hd): every output bitwise the whole-
 * tensor run's, and the other columns of the wide gradient buffer untouched; a row stride below
 * the heads' width refused. d = {B, T, heads, head_dim, -, D} (full RoPE). */
static void rope_column_block_check(OpRun *r) {
    const int B = r->d[0], T = r->d[1], H = r->d[2], hd = r->d[3], D = r->d[5], ld = D + 2 * H * hd;
    const size_t rows = (size_t)B * T, n = rows * H * hd, wide = rows * ld, nt = (size_t)T * (hd / 2);
    float *cos_t = malloc(nt * sizeof(float)), *sin_t = malloc(nt * sizeof(float));
    cpu_rope_tables_init(cos_t, sin_t, T, hd, 10000.0f);
    float *w = random_host(wide, -2, 2, &r->rng), *dout = random_host(n, -1, 1, &r->rng);
    float *gain = random_host(H, 0.5, 2, &r->rng);
    float *in = malloc(n * sizeof(float));
    for (size_t k = 0; k < rows; k++) memcpy(in + k * H * hd, w + k * ld + D, (size_t)H * hd * sizeof(float));
    float *d_cos = dev_floats(cos_t, nt), *d_sin = dev_floats(sin_t, nt), *d_gain = dev_floats(gain, H);
    float *d_dout = dev_floats(dout, n), *d_out = dev_nan(n), *d_out_w = dev_nan(n);
    ct_bf16 *d_in = dev_bf16(in, n), *d_wide = dev_bf16(w, wide), *d_din16 = dev_alloc(n * 2),
            *d_din16_w = dev_alloc(wide * 2);
    float *d_din = dev_floats(in, n), *d_din_w = dev_floats(w, wide); /* din += : the same start values */
    dev_poison_bf16(d_din16, n);
    dev_poison_bf16(d_din16_w, wide);
    const CudaRopeShape whole = {B, T, H, hd, hd, H * hd, d_cos, d_sin}, in_rows = {B, T, H, hd, hd, ld, d_cos, d_sin};
    const CudaRopeShape too_narrow = {B, T, H, hd, hd, H * hd - 2, d_cos, d_sin};
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(d_out, NULL, d_in, d_gain, &whole, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_forward(d_out_w, NULL, d_wide + D, d_gain, &in_rows, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(d_din, d_din16, NULL, d_dout, d_in, d_gain, &whole, NULL, NULL, 0));
    CHECK_CUDA_OK(cuda_qk_norm_rope_backward(d_din_w + D, d_din16_w + D, NULL, d_dout, d_wide + D, d_gain, &in_rows,
                                             NULL, NULL, 0));
    float *out = host_from_dev(d_out, n), *out_w = host_from_dev(d_out_w, n);
    CHECK(memcmp(out, out_w, n * sizeof(float)) == 0, "forward from a column block differs from the whole tensor's");
    float *din = host_from_dev(d_din, n), *din_w = host_from_dev(d_din_w, wide);
    float *g16 = host_from_dev_bf16(d_din16, n), *g16_w = host_from_dev_bf16(d_din16_w, wide);
    for (size_t k = 0; k < rows; k++)
        for (int c = 0; c < ld; c++) {
            const size_t i = k * ld + (size_t)c;
            if (c >= D && c < D + H * hd) {
                const size_t j = k * H * hd + (size_t)(c - D);
                CHECK(memcmp(&din_w[i], &din[j], sizeof(float)) == 0 && memcmp(&g16_w[i], &g16[j], sizeof(float)) == 0,
                      "gradient at row %zu column %d differs from the whole tensor's", k, c);
            } else {
                CHECK(memcmp(&din_w[i], &w[i], sizeof(float)) == 0 && isnan(g16_w[i]),
                      "row %zu column %d, outside the block, was written", k, c);
            }
        }
    CHECK(cuda_qk_norm_rope_forward(d_out_w, NULL, d_wide + D, d_gain, &too_narrow, 0) != 0 &&
              strstr(ct_error(), "row stride of 126 elements") != NULL,
          "a row stride below the heads' width: got '%s'", ct_error());
    ct_error_clear();
    free(cos_t), free(sin_t), free(w), free(dout), free(gain), free(in);
    free(out), free(out_w), free(din), free(din_w), free(g16), free(g16_w);
    dev_free(d_cos), dev_free(d_sin), dev_free(d_gain), dev_free(d_dout), dev_free(d_out), dev_free(d_out_w);
    dev_free(d_in), dev_free(d_wide), dev_free(d_din16), dev_free(d_din16_w), dev_free(d_din), dev_free(d_din_w);
}

static const OpDef op_rope_fwd = {"rope_fwd", 0, rope_fwd_tensors, NULL, rope_fwd_cpu, rope_fwd_gpu, rope_fwd_extra,
                                  NULL,       0};
static const OpDef op_rope_fwd_bf16 = {"rope_fwd_bf16", 1, rope_fwd_tensors, NULL, rope_fwd_cpu, rope_fwd_gpu, NULL,
                                       NULL, 0};
static const OpDef op_rope_bwd = {"rope_bwd", 0, rope_bwd_tensors, NULL, rope_bwd_cpu, rope_bwd_gpu, rope_bwd_extra,
                                  NULL,       0};
static const OpDef op_rope_bwd_bf16 = {"rope_bwd_bf16", 1, rope_bwd_tensors, NULL, rope_bwd_cpu, rope_bwd_gpu, NULL,
                                       NULL, 0};
static const OpDef op_rope_column_block = {"rope", 0, NULL, NULL, NULL, NULL, rope_column_block_check, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
