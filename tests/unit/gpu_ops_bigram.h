/* gpu_ops_bigram.h — the record's bigram hash embedding's CUDA ops (cuda_bigram.cu) as ops of the
 * table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_bigram_hash and
 * cpu_add_scalar_scaled_forward/backward (the table lookup and the projection are the embedding
 * and linear rows).
 *  - bigram_hash: d = {B, T, num_buckets, ids in [0, this)}. The buckets are integers: BITWISE
 *    the CPU's. Ids up to 2^31 make 36313 * id and 27191 * id wrap in int32 and the XOR negative
 *    (the remainder's sign fix); 2 buckets give a modulus of 1.
 *  - add_scalar_scaled: d = {N, C, branch bf16 (1) or fp32 (0)}. out, dbranch and dbranch_bf16
 *    are the CPU's fp32 operations with the same roundings (the bf16 reference rounded the same
 *    way): EXACT. dscale is one sum over every element, double on both sides in different
 *    orders: SCALED_DSCALE_TOL 1e-5, as the other sums over tokens (gpu_ops_rowops.h). */
#ifndef CT_TEST_GPU_OPS_BIGRAM_H
#define CT_TEST_GPU_OPS_BIGRAM_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#define SCALED_DSCALE_TOL 1e-5

static void bigram_hash_tensors(OpRun *r) {
    const size_t N = (size_t)r->d[0] * r->d[1];
    op_ids(r, "ids", N, r->d[3], 0);
    op_out(r, "buckets", OP_I32, N, OP_BITWISE);
}
static void bigram_hash_cpu(OpRun *r) {
    cpu_bigram_hash((int32_t *)HOST("buckets"), op_t(r, "ids")->ids, r->d[0], r->d[1], r->d[2]);
}
static int bigram_hash_gpu(OpRun *r) {
    return cuda_bigram_hash(DEV("buckets"), DEV("ids"), r->d[0], r->d[1], r->d[2], 0);
}
/* every bucket in [0, num_buckets - 1), the first positions' num_buckets - 1; 1 bucket refused */
static void bigram_hash_extra(OpRun *r) {
    const int B = r->d[0], T = r->d[1], nb = r->d[2];
    const int32_t *got = (const int32_t *)GOT("buckets");
    for (int n = 0; n < B * T; n++) {
        const int ok = n % T == 0 ? got[n] == nb - 1 : got[n] >= 0 && got[n] < nb - 1;
        CHECK(ok, "token %d: bucket %d of %d", n, got[n], nb);
    }
    CHECK(cuda_bigram_hash(DEV("buckets"), DEV("ids"), B, T, 1, 0) != 0 && strstr(ct_error(), "at least 2") != NULL,
          "one bucket: got '%s'", ct_error());
    ct_error_clear();
}

/* ---- out = x + branch * scale[0] ---- */

static void scaled_branch(OpRun *r, size_t n) {
    op_in(r, "branch", r->d[2] ? OP_BF16 : OP_F32, n, -2, 2);
    op_in(r, "scale", OP_F32, 1, -1, 1);
}
static const float *branch_f32(OpRun *r) { return r->d[2] ? NULL : DEV("branch"); }
static const ct_bf16 *branch_b16(OpRun *r) { return r->d[2] ? DEV("branch") : NULL; }

static void add_scalar_scaled_fwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    op_in(r, "x", OP_F32, n, -2, 2);
    scaled_branch(r, n);
    op_out(r, "out", OP_F32, n, OP_EXACT);
}
static void add_scalar_scaled_fwd_cpu(OpRun *r) {
    cpu_add_scalar_scaled_forward(HOST("out"), HOST("x"), HOST("branch"), HOST("scale"), (size_t)r->d[0] * r->d[1]);
}
static int add_scalar_scaled_fwd_gpu(OpRun *r) {
    return cuda_add_scalar_scaled_forward(DEV("out"), DEV("x"), branch_f32(r), branch_b16(r), DEV("scale"),
                                          (size_t)r->d[0] * r->d[1], 0);
}
/* in place (out == x, the backend's emb += ...): the out-of-place bits; both branches refused */
static void add_scalar_scaled_fwd_extra(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    float *d_x = dev_floats(HOST("x"), n);
    CHECK_CUDA_OK(cuda_add_scalar_scaled_forward(d_x, d_x, branch_f32(r), branch_b16(r), DEV("scale"), n, 0));
    float *inplace = host_from_dev(d_x, n);
    CHECK(memcmp(inplace, GOT("out"), n * sizeof(float)) == 0, "in-place add differs from out-of-place");
    free(inplace);
    dev_free(d_x);
    CHECK(cuda_add_scalar_scaled_forward(DEV("out"), DEV("x"), DEV("x"), (const ct_bf16 *)DEV("x"), DEV("scale"), n,
                                         0) != 0 &&
              strstr(ct_error(), "exactly one") != NULL,
          "both branches: got '%s'", ct_error());
    ct_error_clear();
}

static void add_scalar_scaled_bwd_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    op_in(r, "dout", OP_F32, n, -1, 1);
    scaled_branch(r, n);
    op_acc(r, "dbranch", OP_F32, n, -1, 1, OP_EXACT);
    op_out(r, "dbranch_bf16", OP_BF16, n, OP_EXACT);
    op_acc(r, "dscale", OP_F32, 1, -1, 1, SCALED_DSCALE_TOL);
    op_scratch(r, "partials", OP_F64, cuda_add_scalar_scaled_backward_partials_doubles(n));
}
/* dbranch_bf16: the contribution alone (a backward from 0), rounded as the GPU rounds it */
static void add_scalar_scaled_bwd_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    float unused = 0;
    cpu_add_scalar_scaled_backward(HOST("dbranch"), HOST("dscale"), HOST("dout"), HOST("branch"), HOST("scale"), n);
    cpu_add_scalar_scaled_backward(HOST("dbranch_bf16"), &unused, HOST("dout"), HOST("branch"), HOST("scale"), n);
    host_round_bf16(HOST("dbranch_bf16"), n);
}
static int add_scalar_scaled_bwd_gpu(OpRun *r) {
    return cuda_add_scalar_scaled_backward(DEV("dbranch"), DEV("dbranch_bf16"), DEV("dscale"), DEV("dout"),
                                           branch_f32(r), branch_b16(r), DEV("scale"), (size_t)r->d[0] * r->d[1],
                                           DEV("partials"), 0);
}
/* dscale alone (no element-wise output): the same bits */
static void add_scalar_scaled_bwd_extra(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    dev_put(DEV("dscale"), op_start(r, "dscale"), sizeof(float));
    CHECK_CUDA_OK(cuda_add_scalar_scaled_backward(NULL, NULL, DEV("dscale"), DEV("dout"), branch_f32(r), branch_b16(r),
                                                  DEV("scale"), n, DEV("partials"), 0));
    float again = 0;
    dev_get(&again, DEV("dscale"), sizeof(float));
    CHECK(memcmp(&again, GOT("dscale"), sizeof(float)) == 0, "dscale alone differs from dscale with dbranch");
}

static const OpDef op_bigram_hash = {"bigram_hash", 0, bigram_hash_tensors, NULL, bigram_hash_cpu, bigram_hash_gpu,
                                     bigram_hash_extra, NULL, 0};
static const OpDef op_add_scalar_scaled_fwd = {"add_scalar_scaled_fwd",    0,
                                               add_scalar_scaled_fwd_tensors, NULL,
                                               add_scalar_scaled_fwd_cpu,  add_scalar_scaled_fwd_gpu,
                                               add_scalar_scaled_fwd_extra, NULL,
                                               0};
static const OpDef op_add_scalar_scaled_bwd = {"add_scalar_scaled_bwd",    0,
                                               add_scalar_scaled_bwd_tensors, NULL,
                                               add_scalar_scaled_bwd_cpu,  add_scalar_scaled_bwd_gpu,
                                               add_scalar_scaled_bwd_extra, NULL,
                                               0};

#endif /* CT_HAVE_CUDA */
#endif
