/* gpu_ops_weights.h — the CUDA passes over whole weight buffers (cuda_weights.cu: weight decay,
 * the EMA, SWA's sum) and late QAT's fake quantization (cuda_fake_quant.cu) as ops of the
 * table-driven test (gpu_ops.h, gpu_op_table.h), against cpu_weights.c and cpu_fake_quant.c.
 * Elementwise d = {n}; swa_add variant 1 is its first snapshot (a copy); fake quantization
 * d = {rows, cols, amplitude}: amplitude 0 draws weights in [-0.02, 0.02) (every row's scale
 * clamped to 1/31), 1 in [-3, 3) (scales from the row max).
 *
 * Bounds: OP_BITWISE everywhere. Each element is the CPU's fp32 operations with the same
 * roundings (IEEE division and round-half-even included), and the row max of the fake
 * quantization is exact in any order; the bf16 shadow is that fp32 result rounded once, compared
 * with the CPU's result rounded on the host. */
#ifndef CT_TEST_GPU_OPS_WEIGHTS_H
#define CT_TEST_GPU_OPS_WEIGHTS_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

#include "cpu_fake_quant.h"
#include "cpu_weights.h"

/* the record's factor 1 - lr * wd (matrix_lr 0.025, muon_wd 0.04) and EMA decay */
#define WEIGHTS_DECAY_FACTOR (1.0 - 0.025 * 0.04)
#define WEIGHTS_EMA_DECAY 0.997

static void weight_decay_tensors(OpRun *r) { op_acc(r, "p", OP_F32, (size_t)r->d[0], -1, 1, OP_BITWISE); }
static void weight_decay_cpu(OpRun *r) { cpu_weight_decay(HOST("p"), (size_t)r->d[0], WEIGHTS_DECAY_FACTOR); }
static int weight_decay_gpu(OpRun *r) { return cuda_weight_decay(DEV("p"), (size_t)r->d[0], WEIGHTS_DECAY_FACTOR, 0); }

static void ema_tensors(OpRun *r) {
    op_acc(r, "ema", OP_F32, (size_t)r->d[0], -1, 1, OP_BITWISE);
    op_in(r, "w", OP_F32, (size_t)r->d[0], -1, 1);
}
static void ema_cpu(OpRun *r) { cpu_ema_update(HOST("ema"), HOST("w"), (size_t)r->d[0], WEIGHTS_EMA_DECAY); }
static int ema_gpu(OpRun *r) { return cuda_ema_update(DEV("ema"), DEV("w"), (size_t)r->d[0], WEIGHTS_EMA_DECAY, 0); }

static void swa_tensors(OpRun *r) {
    op_acc(r, "sum", OP_F32, (size_t)r->d[0], -4, 4, OP_BITWISE);
    op_in(r, "w", OP_F32, (size_t)r->d[0], -1, 1);
}
static void swa_cpu(OpRun *r) { cpu_swa_add(HOST("sum"), HOST("w"), (size_t)r->d[0], r->c->op->variant); }
static int swa_gpu(OpRun *r) { return cuda_swa_add(DEV("sum"), DEV("w"), (size_t)r->d[0], r->c->op->variant, 0); }

static void fake_quant_tensors(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    const double a = r->d[2] ? 3.0 : 0.02;
    op_in(r, "w", OP_F32, n, -a, a);
    op_out(r, "out", OP_F32, n, OP_BITWISE);
    op_out(r, "out_bf16", OP_BF16, n, OP_BITWISE);
}
static void fake_quant_cpu(OpRun *r) {
    const size_t n = (size_t)r->d[0] * r->d[1];
    cpu_fake_quant_int6_rows(HOST("out"), HOST("w"), r->d[0], r->d[1]);
    memcpy(HOST("out_bf16"), HOST("out"), n * sizeof(float));
    host_round_bf16(HOST("out_bf16"), n);
}
static int fake_quant_gpu(OpRun *r) {
    return cuda_fake_quant_int6_rows(DEV("out"), DEV("out_bf16"), DEV("w"), r->d[0], r->d[1], 0);
}
/* the bf16 output alone is the same bytes; the result really is quantized (at most 64 levels per
 * row); no output, or the output aliasing the input, refused */
static void fake_quant_extra(OpRun *r) {
    const int rows = r->d[0], cols = r->d[1];
    const size_t n = (size_t)rows * cols;
    ct_bf16 *only16 = dev_alloc(n * 2);
    dev_poison_bf16(only16, n);
    CHECK_CUDA_OK(cuda_fake_quant_int6_rows(NULL, only16, DEV("w"), rows, cols, 0));
    float *g16 = host_from_dev_bf16(only16, n);
    CHECK(memcmp(g16, GOT("out_bf16"), n * sizeof(float)) == 0, "the bf16-only output differs");
    free(g16);
    dev_free(only16);
    const float *q = GOT("out");
    for (int row = 0; row < rows; row++) {
        float level[64];
        int levels = 0;
        for (int c = 0; c < cols && levels <= 64; c++) {
            const float v = q[(size_t)row * cols + c];
            int seen = 0;
            for (int k = 0; k < levels && !seen; k++) seen = level[k] == v;
            if (!seen && levels < 64) level[levels] = v;
            levels += !seen;
        }
        CHECK(levels <= 64, "row %d of the fake-quantized weights has more than 64 distinct values", row);
    }
    CHECK(cuda_fake_quant_int6_rows(NULL, NULL, DEV("w"), rows, cols, 0) != 0 &&
              strstr(ct_error(), "no output") != NULL,
          "no output: got '%s'", ct_error());
    ct_error_clear();
    CHECK(cuda_fake_quant_int6_rows(DEV("w"), NULL, DEV("w"), rows, cols, 0) != 0 &&
              strstr(ct_error(), "alias") != NULL,
          "in place: got '%s'", ct_error());
    ct_error_clear();
}

static const OpDef op_weight_decay = {"weight_decay", 0, weight_decay_tensors, NULL, weight_decay_cpu,
                                      weight_decay_gpu, NULL, NULL, 0};
static const OpDef op_ema_update = {"ema_update", 0, ema_tensors, NULL, ema_cpu, ema_gpu, NULL, NULL, 0};
static const OpDef op_swa_add = {"swa_add", 0, swa_tensors, NULL, swa_cpu, swa_gpu, NULL, NULL, 0};
static const OpDef op_swa_start = {"swa_start", 1, swa_tensors, NULL, swa_cpu, swa_gpu, NULL, NULL, 0};
static const OpDef op_fake_quant = {"fake_quant_int6", 0, fake_quant_tensors, NULL, fake_quant_cpu, fake_quant_gpu,
                                    fake_quant_extra, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
