/* gpu_ops_lanes.h — the CUDA end of a parallel block (cuda_lane_mix.cu, parallel residual lanes)
 * as ops of the table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_lane_mix.c; and the
 * final lane mean (cuda_lane_mean_*), against the CPU backend's copy + add + scale by 0.5 (and
 * its backward's scale by 0.5 into both lanes): the same element operations, so every stream
 * value is exact.
 * Shapes d = {N, C, in place, cancelling, BF16S} (the row ops' RAGGED and ODD, gpu_ops_rowops.h's
 * bounds and stream types): in place writes out0 over l0 and out1 over l1 (forward) or dl0 over
 * d0 and dl1 over d1 (backward). cancelling (backward): row n + N/2 repeats row n with d0, d1
 * negated, so every scale's and lambda's sum cancels but for the last row (N odd): the lambdas'
 * sums are 4e3 to 1e5 times smaller than the sums of their terms' magnitudes (RAGGED, measured),
 * as the lambdas' gradients are in training (test_gpu_step.c, the bf16_stream_lanes cases), and
 * those sums are bounded by CANCEL_TOL: both sides add the same double products, in different
 * orders, so they differ by at most ~n 2^-53 of the magnitudes (5e-8 of the result here; measured
 * 0). A kernel that rounded each chunk's partial to fp32 measured 1e-6 there and fails (4e-8 in
 * the other rows, within GRAD_TOL): the rows show the kernel loses nothing in these sums.
 * ao and mo are bf16 inputs, the CPU reading the same values.
 * fp32 stream: the CPU op's element operations in its order, so the lanes and dl0, dl1 are
 * within F32_TOL (measured 0); dao, dmo are the bf16 rounding of its fp32 values (BF16_TOL); the
 * scales' and lambdas' sums are double on both sides in different orders (GRAD_TOL). bf16 stream:
 * the reference follows cuda_lane_mix.h's rounding points (the scales and lambdas rounded first,
 * each product and sum rounded), so the lanes and dl0, dl1 are OP_EXACT and dao, dmo near_bf16. */
#ifndef CT_TEST_GPU_OPS_LANES_H
#define CT_TEST_GPU_OPS_LANES_H

#include "gpu_ops_rowops.h"

#ifdef CT_HAVE_CUDA

#define CANCEL_TOL 1e-7 /* the cancelling rows' sums (above) */

/* x rounded as the row's stream rounds a value (bf16 stream: to bf16; fp32: unchanged) */
static float lane_round(const OpRun *r, float x) {
    if (r->d[4]) host_round_bf16(&x, 1);
    return x;
}

/* ---- forward ---- */
static void lane_mix_fwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    op_in(r, "l0", row_stream(r), n, -2, 2);
    op_in(r, "l1", row_stream(r), n, -2, 2);
    op_in(r, "ao", OP_BF16, n, -1, 1);
    op_in(r, "mo", OP_BF16, n, -1, 1);
    op_in(r, "attn_scale", OP_F32, r->d[1], 0.5, 1.5);
    op_in(r, "mlp_scale", OP_F32, r->d[1], 0.5, 1.5);
    op_in(r, "resid", OP_F32, 2, 0.9, 1.3);
    op_in(r, "post", OP_F32, 4, 0.5, 1.5);
    stream_out(r, "out0", n, F32_TOL, ELEMENTWISE);
    stream_out(r, "out1", n, F32_TOL, ELEMENTWISE);
}
static void lane_mix_fwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    float *sa = row_control(r, "attn_scale"), *sm = row_control(r, "mlp_scale");
    float *rs = row_control(r, "resid"), *p = row_control(r, "post");
    const float *l0 = HOST("l0"), *l1 = HOST("l1"), *ao = HOST("ao"), *mo = HOST("mo");
    float *o0 = HOST("out0"), *o1 = HOST("out1");
    if (!r->d[4]) {
        cpu_lane_mix_forward(o0, o1, l0, l1, ao, mo, sa, sm, rs, p, N, C);
    } else {
        for (size_t i = 0; i < (size_t)N * C; i++) {
            const int c = (int)(i % (size_t)C);
            const float a = lane_round(r, sa[c] * ao[i]), m = lane_round(r, sm[c] * mo[i]);
            o0[i] = lane_round(r, lane_round(r, lane_round(r, rs[0] * l0[i]) + lane_round(r, p[0] * a)) +
                                      lane_round(r, p[2] * m));
            o1[i] = lane_round(r, lane_round(r, lane_round(r, rs[1] * l1[i]) + lane_round(r, p[1] * a)) +
                                      lane_round(r, p[3] * m));
        }
    }
    free(sa), free(sm), free(rs), free(p);
}
static int lane_mix_fwd_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const void *l0 = DEV("l0"), *l1 = DEV("l1");
    if (r->d[2]) { /* in place: the outputs hold the lanes */
        if (!dev_sync_ok() ||
            cudaMemcpy(DEV("out0"), DEV("l0"), n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess ||
            cudaMemcpy(DEV("out1"), DEV("l1"), n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess)
            return -1;
        l0 = DEV("out0"), l1 = DEV("out1");
    }
    const CudaLaneMixForward a = {DEV("out0"), DEV("out1"), l0, l1, DEV("ao"), DEV("mo"), DEV("attn_scale"),
                                  DEV("mlp_scale"), DEV("resid"), DEV("post"), r->d[0], r->d[1], row_dtype(r)};
    return cuda_lane_mix_forward(&a, 0);
}

/* ---- backward ---- */
static void lane_mix_bwd_tensors(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    op_in(r, "d0", row_stream(r), n, -1, 1);
    op_in(r, "d1", row_stream(r), n, -1, 1);
    op_in(r, "l0", row_stream(r), n, -2, 2);
    op_in(r, "l1", row_stream(r), n, -2, 2);
    op_in(r, "ao", OP_BF16, n, -1, 1);
    op_in(r, "mo", OP_BF16, n, -1, 1);
    op_in(r, "attn_scale", OP_F32, C, 0.5, 1.5);
    op_in(r, "mlp_scale", OP_F32, C, 0.5, 1.5);
    op_in(r, "resid", OP_F32, 2, 0.9, 1.3);
    op_in(r, "post", OP_F32, 4, 0.5, 1.5);
    stream_out(r, "dl0", n, F32_TOL, ELEMENTWISE);
    stream_out(r, "dl1", n, F32_TOL, ELEMENTWISE);
    bf16_out(r, "dao", n);
    bf16_out(r, "dmo", n);
    const double sum_tol = r->d[3] ? CANCEL_TOL : GRAD_TOL;
    op_acc(r, "dattn_scale", OP_F32, C, -1, 1, sum_tol);
    op_acc(r, "dmlp_scale", OP_F32, C, -1, 1, sum_tol);
    op_acc(r, "dresid", OP_F32, 2, -1, 1, sum_tol);
    op_acc(r, "dpost", OP_F32, 4, -1, 1, sum_tol);
    op_scratch(r, "partials", OP_F64, cuda_colsum_doubles(N, C, 8));
}
/* the cancelling shape's inputs: rows N/2.. repeat rows 0.. with d0, d1 negated */
static void lane_mix_bwd_prepare(OpRun *r) {
    if (!r->d[3]) return;
    const size_t half = (size_t)(r->d[0] / 2) * r->d[1];
    static const char *const same[] = {"l0", "l1", "ao", "mo"}, *const negated[] = {"d0", "d1"};
    for (int k = 0; k < 4; k++) {
        float *x = HOST(same[k]);
        for (size_t i = 0; i < half; i++) x[half + i] = x[i];
        op_reupload(r, same[k]);
    }
    for (int k = 0; k < 2; k++) {
        float *x = HOST(negated[k]);
        for (size_t i = 0; i < half; i++) x[half + i] = -x[i];
        op_reupload(r, negated[k]);
    }
}
static void lane_mix_bwd_cpu(OpRun *r) {
    const int N = r->d[0], C = r->d[1];
    const size_t n = (size_t)N * C;
    float *sa = row_control(r, "attn_scale"), *sm = row_control(r, "mlp_scale");
    float *rs = row_control(r, "resid"), *p = row_control(r, "post");
    const float *d0 = HOST("d0"), *d1 = HOST("d1"), *l0 = HOST("l0"), *l1 = HOST("l1"), *ao = HOST("ao"),
                *mo = HOST("mo");
    float *dl0 = HOST("dl0"), *dl1 = HOST("dl1"), *dao = HOST("dao"), *dmo = HOST("dmo");
    memset(dl0, 0, n * sizeof(float)), memset(dl1, 0, n * sizeof(float));
    memset(dao, 0, n * sizeof(float)), memset(dmo, 0, n * sizeof(float));
    if (!r->d[4]) {
        cpu_lane_mix_backward(dl0, dl1, dao, dmo, HOST("dattn_scale"), HOST("dmlp_scale"), HOST("dresid"),
                              HOST("dpost"), d0, d1, l0, l1, ao, mo, sa, sm, rs, p, N, C);
    } else {
        double lam[6] = {0};
        double *das = calloc((size_t)C, sizeof(double)), *dms = calloc((size_t)C, sizeof(double));
        for (size_t i = 0; i < n; i++) {
            const int c = (int)(i % (size_t)C);
            const float a = lane_round(r, sa[c] * ao[i]), m = lane_round(r, sm[c] * mo[i]);
            const float da = lane_round(r, lane_round(r, p[0] * d0[i]) + lane_round(r, p[1] * d1[i]));
            const float dm = lane_round(r, lane_round(r, p[2] * d0[i]) + lane_round(r, p[3] * d1[i]));
            dl0[i] = lane_round(r, rs[0] * d0[i]);
            dl1[i] = lane_round(r, rs[1] * d1[i]);
            dao[i] = sa[c] * da; /* before its bf16 rounding (near_bf16) */
            dmo[i] = sm[c] * dm;
            das[c] += (double)da * ao[i];
            dms[c] += (double)dm * mo[i];
            lam[0] += (double)d0[i] * l0[i], lam[1] += (double)d1[i] * l1[i];
            lam[2] += (double)d0[i] * a, lam[3] += (double)d1[i] * a;
            lam[4] += (double)d0[i] * m, lam[5] += (double)d1[i] * m;
        }
        for (int c = 0; c < C; c++) HOST("dattn_scale")[c] += (float)das[c], HOST("dmlp_scale")[c] += (float)dms[c];
        for (int j = 0; j < 2; j++) HOST("dresid")[j] += (float)lam[j];
        for (int j = 0; j < 4; j++) HOST("dpost")[j] += (float)lam[2 + j];
        free(das), free(dms);
    }
    free(sa), free(sm), free(rs), free(p);
}
static CudaLaneMixBackward lane_mix_bwd_args(OpRun *r, const void *d0, const void *d1) {
    const CudaLaneMixBackward a = {DEV("dl0"),        DEV("dl1"),       DEV("dao"),   DEV("dmo"),      DEV("dattn_scale"),
                                   DEV("dmlp_scale"), DEV("dresid"),    DEV("dpost"), d0,              d1,
                                   DEV("l0"),         DEV("l1"),        DEV("ao"),    DEV("mo"),       DEV("attn_scale"),
                                   DEV("mlp_scale"),  DEV("resid"),     DEV("post"),  DEV("partials"), r->d[0],
                                   r->d[1],           row_dtype(r)};
    return a;
}
static int lane_mix_bwd_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const void *d0 = DEV("d0"), *d1 = DEV("d1");
    if (r->d[2]) { /* in place: dl0, dl1 hold d0, d1 */
        if (!dev_sync_ok() ||
            cudaMemcpy(DEV("dl0"), DEV("d0"), n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess ||
            cudaMemcpy(DEV("dl1"), DEV("d1"), n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess)
            return -1;
        d0 = DEV("dl0"), d1 = DEV("dl1");
    }
    const CudaLaneMixBackward a = lane_mix_bwd_args(r, d0, d1);
    return cuda_lane_mix_backward(&a, 0);
}
/* crossed lanes (dl0 over d1) and one buffer for both branch gradients refused */
static void lane_mix_bwd_extra(OpRun *r) {
    CudaLaneMixBackward a = lane_mix_bwd_args(r, DEV("dl1"), DEV("d1"));
    CHECK(cuda_lane_mix_backward(&a, 0) != 0 && strstr(ct_error(), "must not alias") != NULL,
          "lane_mix backward: dl1 over d0 accepted (%s)", ct_error());
    ct_error_clear();
    a = lane_mix_bwd_args(r, DEV("d0"), DEV("d1"));
    a.dmo_bf16 = a.dao_bf16;
    CHECK(cuda_lane_mix_backward(&a, 0) != 0 && strstr(ct_error(), "must not alias") != NULL,
          "lane_mix backward: dao_bf16 = dmo_bf16 accepted (%s)", ct_error());
    ct_error_clear();
}

static const OpDef op_lane_mix_fwd = {"lane_mix_fwd", 0, lane_mix_fwd_tensors, NULL, lane_mix_fwd_cpu,
                                      lane_mix_fwd_gpu, NULL, NULL, 0};
static const OpDef op_lane_mix_bwd = {"lane_mix_bwd", 0, lane_mix_bwd_tensors, lane_mix_bwd_prepare, lane_mix_bwd_cpu,
                                      lane_mix_bwd_gpu, lane_mix_bwd_extra, NULL, 0};

/* ---- the final lane mean: out = 0.5 * (l0 + l1); d0 = d1 = 0.5 * dout ----
 * d = {N, C, in place, -, BF16S}; in place: out over l0 (forward), d0 over dout (backward) */
static void lane_mean_fwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    op_in(r, "l0", row_stream(r), n, -2, 2);
    op_in(r, "l1", row_stream(r), n, -2, 2);
    stream_out(r, "out", n, OP_EXACT, ELEMENTWISE);
}
static void lane_mean_fwd_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    float *out = HOST("out");
    cpu_copy(out, HOST("l0"), n);
    cpu_add_into(out, HOST("l1"), n);
    row_round(r, out, n); /* the bf16 stream keeps the sum, then halves it (exact) */
    cpu_scale(out, 0.5f, n);
}
static int lane_mean_fwd_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const void *l0 = DEV("l0");
    if (r->d[2]) {
        if (!dev_sync_ok() || cudaMemcpy(DEV("out"), l0, n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess)
            return -1;
        l0 = DEV("out");
    }
    return cuda_lane_mean_forward(DEV("out"), l0, DEV("l1"), n, row_dtype(r), 0);
}
static void lane_mean_bwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    op_in(r, "dout", row_stream(r), n, -1, 1);
    stream_out(r, "d0", n, OP_EXACT, ELEMENTWISE);
    stream_out(r, "d1", n, OP_EXACT, ELEMENTWISE);
}
static void lane_mean_bwd_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    cpu_copy(HOST("d0"), HOST("dout"), n);
    cpu_scale(HOST("d0"), 0.5f, n);
    cpu_copy(HOST("d1"), HOST("d0"), n);
}
static int lane_mean_bwd_gpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const void *dout = DEV("dout");
    if (r->d[2]) {
        if (!dev_sync_ok() || cudaMemcpy(DEV("d0"), dout, n * stream_bytes(r), cudaMemcpyDeviceToDevice) != cudaSuccess)
            return -1;
        dout = DEV("d0");
    }
    return cuda_lane_mean_backward(DEV("d0"), DEV("d1"), dout, n, row_dtype(r), 0);
}
/* d1 over d0 or over dout refused */
static void lane_mean_bwd_extra(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    CHECK(cuda_lane_mean_backward(DEV("d0"), DEV("dout"), DEV("dout"), n, row_dtype(r), 0) != 0 &&
              strstr(ct_error(), "d1 must differ") != NULL,
          "lane_mean backward: d1 = dout accepted (%s)", ct_error());
    ct_error_clear();
    CHECK(cuda_lane_mean_backward(DEV("d0"), DEV("d0"), DEV("dout"), n, row_dtype(r), 0) != 0 &&
              strstr(ct_error(), "d1 must differ") != NULL,
          "lane_mean backward: d1 = d0 accepted (%s)", ct_error());
    ct_error_clear();
}

static const OpDef op_lane_mean_fwd = {"lane_mean_fwd", 0, lane_mean_fwd_tensors, NULL, lane_mean_fwd_cpu,
                                       lane_mean_fwd_gpu, NULL, NULL, 0};
static const OpDef op_lane_mean_bwd = {"lane_mean_bwd", 0, lane_mean_bwd_tensors, NULL, lane_mean_bwd_cpu,
                                       lane_mean_bwd_gpu, lane_mean_bwd_extra, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
