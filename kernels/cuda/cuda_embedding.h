/* cuda_embedding.h — token embedding gather and its atomic-free scatter-add backward
 * (cuda_embedding.cu), the pair of cpu_embedding.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_EMBEDDING_H
#define CT_CUDA_EMBEDDING_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out [N,C] = wte[ids[n], :]; ids [N] int32 (device), already checked to be in [0, V). */
int cuda_embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C, cudaStream_t stream);

/* Host: the segmented-reduction index of one micro-batch, a counting sort of the token ids:
 * rows[0..*num_rows) the distinct ids in increasing order, positions[starts[r] .. starts[r+1]) the
 * token positions holding rows[r], in increasing order. ids [N] host, in [0, V). starts needs
 * V + 1 entries (it is used as the counting array), rows V, positions N. */
void cuda_embedding_index(const int32_t *ids, int N, int V, int32_t *rows, int32_t *starts, int32_t *positions,
                          int *num_rows);
/* dwte [V,C] += scatter of dout [N,C] by the index above (device copies of rows, starts,
 * positions): one block owns a (row, channel range) of dwte and adds that row's tokens in token
 * order, in fp32 — no atomics, and bitwise cpu_embedding_backward's order. */
int cuda_embedding_backward(float *dwte, const float *dout, const int32_t *rows, const int32_t *starts,
                            const int32_t *positions, int num_rows, int C, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
