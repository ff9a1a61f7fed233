/* cpu_embedding.c — token embedding lookup (forward gather) and its scatter-add backward. */
#include <stddef.h>
#include <string.h>

#include "common.h"
#include "cpu_ops.h"

int cpu_embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int V, int C) {
    /* Check first so that bad data is an error message, not a read outside wte. */
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            return ct_fail("embedding: token id %d at position %d is outside the vocabulary [0, %d)",
                           (int)ids[n], n, V);
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)ids[n] * C, (size_t)C * sizeof(float));
    return 0;
}

void cpu_embedding_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C) {
    /* Repeated ids make rows of dwte collide, so threads split channels, not tokens: each thread
     * owns whole channel blocks of every row and adds the tokens in order. */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int c1 = c0 + CPU_CHANNEL_BLOCK < C ? c0 + CPU_CHANNEL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            float *grad_row = dwte + (size_t)ids[n] * C;
            const float *dout_row = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) grad_row[c] += dout_row[c];
        }
    }
}
