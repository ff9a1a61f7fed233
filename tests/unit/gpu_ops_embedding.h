/* gpu_ops_embedding.h — the CUDA token embedding (cuda_embedding.cu) as ops of the table-driven
 * test (gpu_ops.h, gpu_op_table.h): the gather is a copy (bitwise equal), and the scatter-add
 * backward adds each id's tokens in token order in fp32 exactly as cpu_embedding_backward does,
 * so it must be BITWISE equal to the CPU result (no tolerance), including repeated ids and
 * accumulation into a non-zero gradient. The host-side index (counting sort) is checked without
 * a GPU. d = {N tokens, V vocabulary, C channels, skewed ids}. */
#ifndef CT_TEST_GPU_OPS_EMBEDDING_H
#define CT_TEST_GPU_OPS_EMBEDDING_H

#include "gpu_ops.h"

#ifdef CT_HAVE_CUDA

/* Runs on the host only: no GPU needed. */
static void embedding_index_check(OpRun *r) {
    const int N = r->d[0], V = r->d[1];
    OpTensor *t = op_ids(r, "ids", N, V, 1);
    const int32_t *ids = t->ids;
    int32_t *rows = malloc(V * sizeof(int32_t)), *starts = malloc((V + 1) * sizeof(int32_t));
    int32_t *pos = malloc(N * sizeof(int32_t));
    int *seen = calloc(V, sizeof(int));
    int num_rows = -1;
    cuda_embedding_index(ids, N, V, rows, starts, pos, &num_rows);
    int distinct = 0;
    for (int i = 0; i < N; i++) distinct += !seen[ids[i]]++;
    CHECK(num_rows == distinct, "num_rows %d, expected %d distinct ids", num_rows, distinct);
    CHECK(starts[0] == 0 && starts[num_rows] == N, "starts[0] %d, starts[end] %d", starts[0], starts[num_rows]);
    for (int k = 0; k < num_rows; k++) {
        CHECK(k == 0 || rows[k] > rows[k - 1], "rows not increasing at %d", k);
        CHECK(starts[k + 1] - starts[k] == seen[rows[k]], "row %d: %d positions, expected %d", rows[k],
              starts[k + 1] - starts[k], seen[rows[k]]);
        for (int i = starts[k]; i < starts[k + 1]; i++) {
            CHECK(ids[pos[i]] == rows[k], "position %d has id %d, listed under %d", pos[i], ids[pos[i]], rows[k]);
            CHECK(i == starts[k] || pos[i] > pos[i - 1], "positions of id %d not in token order", rows[k]);
        }
    }
    free(rows), free(starts), free(pos), free(seen);
}

static void embedding_fwd_tensors(OpRun *r) {
    const int N = r->d[0], V = r->d[1], C = r->d[2];
    op_ids(r, "ids", N, V, r->d[3]);
    op_in(r, "wte", OP_F32, (size_t)V * C, -1, 1);
    op_out(r, "out", OP_F32, (size_t)N * C, OP_BITWISE);
}
static void embedding_fwd_cpu(OpRun *r) {
    CHECK(cpu_embedding_forward(HOST("out"), op_t(r, "ids")->ids, HOST("wte"), r->d[0], r->d[1], r->d[2]) == 0,
          "cpu_embedding_forward failed");
}
static int embedding_fwd_gpu(OpRun *r) {
    return cuda_embedding_forward(DEV("out"), DEV("ids"), DEV("wte"), r->d[0], r->d[2], 0);
}

/* the index (rows, starts, positions) made on the host, as the backend makes it */
static void embedding_bwd_tensors(OpRun *r) {
    const int N = r->d[0], V = r->d[1], C = r->d[2];
    op_ids(r, "ids", N, V, r->d[3]);
    op_in(r, "dout", OP_F32, (size_t)N * C, -1, 1);
    op_acc(r, "dwte", OP_F32, (size_t)V * C, -1, 1, OP_BITWISE);
    op_ids(r, "rows", V, 0, 0);
    op_ids(r, "starts", (size_t)V + 1, 0, 0);
    op_ids(r, "positions", N, 0, 0);
}
static void embedding_bwd_prepare(OpRun *r) {
    cuda_embedding_index(op_t(r, "ids")->ids, r->d[0], r->d[1], op_t(r, "rows")->ids, op_t(r, "starts")->ids,
                         op_t(r, "positions")->ids, &r->aux);
    op_reupload(r, "rows");
    op_reupload(r, "starts");
    op_reupload(r, "positions");
}
static void embedding_bwd_cpu(OpRun *r) {
    cpu_embedding_backward(HOST("dwte"), HOST("dout"), op_t(r, "ids")->ids, r->d[0], r->d[2]);
}
static int embedding_bwd_gpu(OpRun *r) {
    return cuda_embedding_backward(DEV("dwte"), DEV("dout"), DEV("rows"), DEV("starts"), DEV("positions"), r->aux,
                                   r->d[2], 0);
}

static const OpDef op_embedding_index = {"embedding_index", 0, NULL, NULL, NULL, NULL, embedding_index_check, NULL, 1};
static const OpDef op_embedding_fwd = {"embedding_fwd", 0, embedding_fwd_tensors, NULL, embedding_fwd_cpu,
                                       embedding_fwd_gpu, NULL, NULL, 0};
static const OpDef op_embedding_bwd = {"embedding_bwd", 0, embedding_bwd_tensors, embedding_bwd_prepare,
                                       embedding_bwd_cpu, embedding_bwd_gpu, NULL, NULL, 0};

#endif /* CT_HAVE_CUDA */
#endif
