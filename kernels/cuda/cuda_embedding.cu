/* cuda_embedding.cu — token embedding gather and its deterministic scatter-add backward (see
 * cuda_embedding.h; the pair of cpu_embedding.c). The backward never uses atomics: the token
 * positions of a micro-batch are grouped by id once on the host (a counting sort, O(N + V)), and
 * each thread owns one (id, channel) of the gradient and adds that id's tokens in token order — the
 * CPU op's order, so the results are bitwise equal to cpu_embedding_backward's. */
#include <string.h>

#include "cuda_common.cuh"
#include "cuda_embedding.h"

enum { EMB_THREADS = 128 };

static __global__ void embedding_forward_kernel(float *out, const int32_t *ids, const float *wte, int C) {
    const int n = blockIdx.x;
    const float *src = wte + (size_t)ids[n] * C;
    float *dst = out + (size_t)n * C;
    for (int c = threadIdx.x; c < C; c += EMB_THREADS) dst[c] = src[c];
}

extern "C" int cuda_embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C,
                                      cudaStream_t stream) {
    if (N <= 0) return 0;
    embedding_forward_kernel<<<N, EMB_THREADS, 0, stream>>>(out, ids, wte, C);
    CT_LAUNCHED("embedding_forward", stream);
    return 0;
}

extern "C" void cuda_embedding_index(const int32_t *ids, int N, int V, int32_t *rows, int32_t *starts,
                                     int32_t *positions, int *num_rows) {
    /* counts in starts[1..V], then prefix sums: starts[v] = first slot of id v */
    memset(starts, 0, (size_t)(V + 1) * sizeof *starts);
    for (int n = 0; n < N; n++) starts[ids[n] + 1]++;
    for (int v = 0; v < V; v++) starts[v + 1] += starts[v];
    /* positions in increasing order within each id: fill with a moving cursor per id, kept in
     * rows[] temporarily (rows has V entries) */
    for (int v = 0; v < V; v++) rows[v] = starts[v];
    for (int n = 0; n < N; n++) positions[rows[ids[n]]++] = n;
    /* compact: keep only ids that occur; starts becomes [num_rows + 1] over the compacted list */
    int u = 0;
    for (int v = 0; v < V; v++) {
        const int32_t begin = starts[v], end = starts[v + 1];
        if (end > begin) {
            rows[u] = v;
            starts[u] = begin; /* u <= v, so starts[v..] is not overwritten before it is read */
            u++;
        }
    }
    starts[u] = N;
    *num_rows = u;
}

static __global__ void embedding_backward_kernel(float *dwte, const float *dout, const int32_t *rows,
                                                 const int32_t *starts, const int32_t *positions, int C) {
    const int r = blockIdx.x;
    const int c = blockIdx.y * EMB_THREADS + threadIdx.x;
    if (c >= C) return;
    const int begin = starts[r], end = starts[r + 1];
    float *g = dwte + (size_t)rows[r] * C + c;
    float acc = *g;
    for (int i = begin; i < end; i++) acc = acc + dout[(size_t)positions[i] * C + c];
    *g = acc;
}

extern "C" int cuda_embedding_backward(float *dwte, const float *dout, const int32_t *rows, const int32_t *starts,
                                       const int32_t *positions, int num_rows, int C, cudaStream_t stream) {
    if (num_rows <= 0) return 0;
    dim3 grid((unsigned)num_rows, ct_blocks((size_t)C, EMB_THREADS));
    embedding_backward_kernel<<<grid, EMB_THREADS, 0, stream>>>(dwte, dout, rows, starts, positions, C);
    CT_LAUNCHED("embedding_backward", stream);
    return 0;
}
