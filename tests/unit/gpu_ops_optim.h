/* gpu_ops_optim.h — the CUDA optimizer ops (cuda_optim.cu) as bench-only ops of the table
 * (gpu_ops.h, gpu_op_table.h): no CPU reference here, since tests/unit/test_gpu_optim.c checks
 * them against the CPU optimizers over several steps (its own setup: state carried from step to
 * step). Adam d = {n}; Muon d = {rows, cols} (variant 1: Newton–Schulz in fp32); the Muon batch
 * d = {count, rows, cols}, alternately tall and wide, as fc and mlp.proj. */
#ifndef CT_TEST_GPU_OPS_OPTIM_H
#define CT_TEST_GPU_OPS_OPTIM_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

static void adam_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0];
    op_acc(r, "p", OP_F32, n, -1, 1, 0);
    op_in(r, "g", OP_F32, n, -1, 1);
    op_acc(r, "m", OP_F32, n, -1, 1, 0);
    op_acc(r, "v", OP_F32, n, 0, 1, 0);
}
static int adam_gpu(OpRun *r) {
    return cuda_adam_step(DEV("p"), NULL, DEV("g"), DEV("m"), DEV("v"), (size_t)r->d[0],
                          &(CudaAdamHyper){1e-3, 0.9, 0.95, 1e-8, 3}, 0);
}

static void muon_tensors(OpRun *r) {
    const int count = r->c->op->variant == 2 ? r->d[0] : 1, *rc = count > 1 ? r->d + 1 : r->d;
    const size_t n = (size_t)count * rc[0] * rc[1];
    op_out(r, "update", OP_F32, n, 0);
    op_in(r, "grad", OP_F32, n, -1, 1);
    op_acc(r, "momentum", OP_F32, n, -1, 1, 0);
    op_scratch(r, "scratch", OP_F32, (cuda_muon_scratch_bytes(rc[0], rc[1], count) + 3) / 4);
    op_scratch(r, "partials", OP_F64, cuda_reduce_doubles((size_t)rc[0] * rc[1]) + 1);
}
static int muon_gpu(OpRun *r) {
    if (r->c->op->variant < 2)
        return cuda_muon_update(op_blas(),
                                &(CudaMuonMatrix){DEV("update"), DEV("grad"), DEV("momentum"), r->d[0], r->d[1]}, 0.95,
                                1, 5, 0, r->c->op->variant, DEV("scratch"), DEV("partials"), 0);
    enum { MAX_BATCH = 16 };
    CudaMuonMatrix mats[MAX_BATCH];
    const int count = r->d[0] < MAX_BATCH ? r->d[0] : MAX_BATCH, rows = r->d[1], cols = r->d[2];
    const size_t n = (size_t)rows * cols;
    for (int i = 0; i < count; i++)
        mats[i] = (CudaMuonMatrix){(float *)DEV("update") + i * n, (float *)DEV("grad") + i * n,
                                   (float *)DEV("momentum") + i * n, i % 2 ? cols : rows, i % 2 ? rows : cols};
    return cuda_muon_update_batch(op_blas(), mats, count, 0.95, 1, 5, 0, 0, DEV("scratch"), DEV("partials"), 0);
}
/* Newton–Schulz, 5 iterations, per iteration 2*m*m*n (A) + 2*m^3 (A A) + 2*m*m*n (B X), m the
 * smaller side and n the larger */
static double muon_ns_flops(int rows, int cols) {
    const double m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
    return 5 * (4 * m * m * n + 2 * m * m * m);
}
static double muon_flops(const int *d) { return muon_ns_flops(d[0], d[1]); }
static double muon_batch_flops(const int *d) { return d[0] * muon_ns_flops(d[1], d[2]); }

static const OpDef op_adam = {"adam", 0, adam_tensors, NULL, NULL, adam_gpu, NULL, NULL, 0};
static const OpDef op_muon_update = {"muon_update_bf16", 0, muon_tensors, NULL, NULL, muon_gpu, NULL, muon_flops, 0};
static const OpDef op_muon_update_fp32 = {"muon_update_fp32", 1, muon_tensors, NULL, NULL, muon_gpu, NULL, muon_flops,
                                          0};
static const OpDef op_muon_update_batch = {"muon_update_batch_bf16", 2, muon_tensors, NULL, NULL, muon_gpu, NULL,
                                           muon_batch_flops, 0};

#endif /* CT_HAVE_CUDA */
#endif
