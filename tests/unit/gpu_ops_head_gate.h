/* gpu_ops_head_gate.h — the CUDA sparse attention head-output gate (cuda_head_gate.cu) as ops of
 * the table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_head_gate_forward/backward/
 * input_backward. d = {N tokens, heads, head_dim, window, 4 * scale}: tokens over several
 * CUDA_COLSUM_ROWS chunks with a partial last one (dw's partials), head dims not a multiple of 32
 * (idle lanes) and up to 128 (4 elements per lane), a window of every channel.
 * Variant 0 makes every output (dy fp32 and bf16); variant 1 is the backend's call without XSA
 * (dy_bf16 only; with XSA it writes dy in place over dout, checked by head_gate_bwd's extra).
 *
 * Bounds: GATE_TOL 1e-6 for g and dy (the CPU's fp32 element operations in its order, the logit
 * summed over the window in channel order on both sides; sigmoid's e as glibc's expf on the CPU,
 * the correctly rounded exp on the GPU: at most an ulp apart) and for dn (the sum over heads in
 * head order on both sides); GATE_GRAD_TOL 1e-5 for dz (y . dout: fp32 on both sides, in
 * different orders, as XSA's dot products) and dw (a sum over tokens in double on both sides, in
 * different orders, of those dz); GATE_BF16_TOL 4e-3 (one bf16 rounding, <= 2^-9 per element). */
#ifndef CT_TEST_GPU_OPS_HEAD_GATE_H
#define CT_TEST_GPU_OPS_HEAD_GATE_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define GATE_TOL 1e-6
#define GATE_GRAD_TOL 1e-5
#define GATE_BF16_TOL 4e-3

static CudaHeadGateShape gate_shape_of(const OpRun *r) {
    return (CudaHeadGateShape){r->d[0], r->d[1], r->d[2], r->d[3], 0.25f * (float)r->d[4]};
}
static size_t gate_elems(const OpRun *r) { return (size_t)r->d[0] * r->d[1] * r->d[2]; }

/* y (the attention output after XSA) and n (a_in) bf16, as the backend keeps them */
static void gate_inputs(OpRun *r) {
    op_in(r, "y", OP_BF16, gate_elems(r), -2, 2);
    op_in(r, "n", OP_BF16, gate_elems(r), -2, 2);
    op_in(r, "w", OP_F32, (size_t)r->d[1] * r->d[3], -1, 1);
}

static void gate_fwd_tensors(OpRun *r) {
    gate_inputs(r);
    op_out(r, "g", OP_F32, (size_t)r->d[0] * r->d[1], GATE_TOL);
    op_out(r, "out_bf16", OP_BF16, gate_elems(r), GATE_BF16_TOL);
}
static void gate_fwd_cpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    cpu_head_gate_forward(HOST("out_bf16"), HOST("g"), HOST("y"), HOST("n"), HOST("w"), s.N, s.n_heads, s.head_dim,
                          s.window, s.scale);
}
static int gate_fwd_gpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    return cuda_head_gate_forward(DEV("g"), DEV("out_bf16"), DEV("y"), DEV("n"), DEV("w"), &s, 0);
}
/* refused shapes */
static void gate_fwd_extra(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    const CudaHeadGateShape bad[] = {{s.N, s.n_heads, 129, s.window, s.scale},
                                     {s.N, s.n_heads, s.head_dim, 0, s.scale},
                                     {s.N, s.n_heads, s.head_dim, s.n_heads * s.head_dim + 1, s.scale}};
    const char *says[] = {"head_dim 129", "window of 0", "window of"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(cuda_head_gate_forward(DEV("g"), DEV("out_bf16"), DEV("y"), DEV("n"), DEV("w"), &bad[k], 0) != 0 &&
                  strstr(ct_error(), says[k]) != NULL,
              "refused shape %zu: got '%s'", k, ct_error());
        ct_error_clear();
    }
}

static void gate_bwd_tensors(OpRun *r) {
    const size_t n = gate_elems(r), nh = (size_t)r->d[0] * r->d[1];
    gate_inputs(r);
    op_in(r, "g", OP_F32, nh, 0.05, 0.95);
    op_in(r, "dout", OP_F32, n, -1, 1);
    if (r->c->op->variant == 0) op_out(r, "dy", OP_F32, n, GATE_TOL);
    op_out(r, "dy_bf16", OP_BF16, n, GATE_BF16_TOL);
    op_out(r, "dz", OP_F32, nh, GATE_GRAD_TOL);
    op_acc(r, "dw", OP_F32, (size_t)r->d[1] * r->d[3], -1, 1, GATE_GRAD_TOL);
    op_scratch(r, "partials", OP_F64, cuda_head_gate_backward_partials_doubles(r->d[0], r->d[1], r->d[3]));
}
static void gate_bwd_cpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    cpu_head_gate_backward(HOST("dy_bf16"), HOST("dz"), HOST("dw"), HOST("dout"), HOST("y"), HOST("g"), HOST("n"),
                           s.N, s.n_heads, s.head_dim, s.window, s.scale);
    if (HOST_OPT("dy")) memcpy(HOST("dy"), HOST("dy_bf16"), gate_elems(r) * sizeof(float));
}
static int gate_bwd_gpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    return cuda_head_gate_backward(DEV_OPT("dy"), DEV("dy_bf16"), DEV("dz"), DEV("dw"), DEV("dout"), DEV("y"),
                                   DEV("g"), DEV("n"), &s, DEV("partials"), 0);
}
/* in place over dout (the backend's call with XSA after it): the same dy and dz bits */
static void gate_bwd_extra(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    const size_t n = gate_elems(r), nh = (size_t)s.N * s.n_heads;
    float *buf = dev_alloc(n * sizeof(float)), *dz = dev_alloc(nh * sizeof(float));
    float *dw = dev_alloc((size_t)s.n_heads * s.window * sizeof(float));
    dev_put(buf, HOST("dout"), n * sizeof(float));
    CHECK_CUDA_OK(cuda_head_gate_backward(buf, NULL, dz, dw, buf, DEV("y"), DEV("g"), DEV("n"), &s, DEV("partials"), 0));
    float *got = host_from_dev(buf, n), *got_dz = host_from_dev(dz, nh);
    CHECK(memcmp(got, GOT("dy"), n * sizeof(float)) == 0, "head gate dy in place differs");
    CHECK(memcmp(got_dz, GOT("dz"), nh * sizeof(float)) == 0, "head gate dz (dy in place) differs");
    free(got), free(got_dz);
    dev_free(buf), dev_free(dz), dev_free(dw);
}

/* dn += dz w, into rows of heads * head_dim (only the first window columns change) */
static void gate_dn_tensors(OpRun *r) {
    op_in(r, "dz", OP_F32, (size_t)r->d[0] * r->d[1], -1, 1);
    op_in(r, "w", OP_F32, (size_t)r->d[1] * r->d[3], -1, 1);
    op_acc(r, "dn", OP_F32, gate_elems(r), -1, 1, GATE_TOL);
}
static void gate_dn_cpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    cpu_head_gate_input_backward(HOST("dn"), HOST("dz"), HOST("w"), s.N, s.n_heads, s.head_dim, s.window);
}
static int gate_dn_gpu(OpRun *r) {
    const CudaHeadGateShape s = gate_shape_of(r);
    return cuda_head_gate_input_backward(DEV("dn"), DEV("dz"), DEV("w"), &s, 0);
}
static void gate_dn_extra(OpRun *r) {
    const int N = r->d[0], D = r->d[1] * r->d[2], W = r->d[3];
    const float *got = GOT("dn"), *start = op_start(r, "dn");
    for (int t = 0; t < N; t++)
        for (int c = W; c < D; c++)
            CHECK(memcmp(&got[(size_t)t * D + c], &start[(size_t)t * D + c], sizeof(float)) == 0,
                  "dn row %d column %d, past the window, was written", t, c);
}

static const OpDef op_head_gate_fwd = {"head_gate_fwd", 0,    gate_fwd_tensors, NULL, gate_fwd_cpu, gate_fwd_gpu,
                                       gate_fwd_extra,  NULL, 0};
static const OpDef op_head_gate_bwd = {"head_gate_bwd", 0,    gate_bwd_tensors, NULL, gate_bwd_cpu, gate_bwd_gpu,
                                       gate_bwd_extra,  NULL, 0};
static const OpDef op_head_gate_bwd_bf16 = {"head_gate_bwd_bf16", 1,    gate_bwd_tensors, NULL, gate_bwd_cpu,
                                            gate_bwd_gpu,         NULL, NULL,             0};
static const OpDef op_head_gate_dn = {"head_gate_dn", 0,    gate_dn_tensors, NULL, gate_dn_cpu, gate_dn_gpu,
                                      gate_dn_extra,  NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
