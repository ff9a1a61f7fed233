/* backend_cuda_grams.c — GPTQ's calibration on the CUDA backend (backend.h,
 * accumulate_input_grams; the CPU's is cpu_accumulate_input_grams): the evaluation's forward, and
 * X^T X of each matrix's input as its product reads it (the bf16 activation, widened) summed on
 * the device in fp32 by the products' cuBLAS call (cuda_linear_backward's weight gradient, its
 * fixed algorithm: the same bits every call), then added into the host grams in parameter order.
 * The forward (backend_cuda_blocks.c) adds each run's inputs through its cuda_add_gram while
 * CudaBackend.gram_dev is set, before the next run overwrites the shared a_in and h. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <stdlib.h>

#include "common.h"

#include "backend_cuda_private.h"

/* Whether the calibration fills parameter i: an input of a block's c_q, attn.proj, mlp.fc or
 * mlp.proj, the output projection, bigram.proj (the CPU backend's list). */
static int gram_param(const ModelSpec *s, int i) {
    if (i == (s->tied ? s->tok_emb : s->lm_head)) return 1;
    if (s->bigram_vocab && i == s->bigram_proj) return 1;
    if (i < s->first_block || i >= s->first_block + s->num_layers * BLK_NUM_PARAMS) return 0;
    const int which = (i - s->first_block) % BLK_NUM_PARAMS;
    return which == BLK_C_Q || which == BLK_PROJ || which == BLK_FC || which == BLK_MLP_PROJ;
}

static void free_grams(CudaBackend *cb, int n) {
    for (int i = 0; i < n; i++)
        if (cb->gram_dev[i]) cudaFree(cb->gram_dev[i]);
    free(cb->gram_dev);
    cb->gram_dev = NULL;
}

int cuda_accumulate_input_grams(Backend *b, const uint32_t *tokens, int num_seqs, float *const *grams) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    const int n = s->num_params;
    /* one zeroed device sum per gram asked for (allocated here: calibration runs once, after training) */
    cb->gram_dev = ct_calloc((size_t)n, sizeof(float *), "cuda gram table");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!grams[i] || !gram_param(s, i)) continue;
        const size_t cols = (size_t)s->params[i].shape[1], bytes = cols * cols * sizeof(float);
        rc = cuda_check(cudaMalloc((void **)&cb->gram_dev[i], bytes), "cuda grams: cudaMalloc");
        if (rc == 0) rc = zero_on_stream(cb, cb->gram_dev[i], bytes, "cuda grams: zeroing");
    }
    if (rc == 0) rc = cuda_use_shadows(cb, 0);
    for (int first = 0; first < num_seqs && rc == 0; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B, N = B * cb->T;
        rc = cuda_load_tokens(cb, tokens + (size_t)first * cb->T, N);
        if (rc == 0) rc = cuda_forward_blocks(cb, B); /* the blocks' grams */
        if (rc == 0) rc = cuda_add_gram(cb, s->tied ? s->tok_emb : s->lm_head, cb->xf16, N, s->dim);
        if (rc == 0 && s->bigram_vocab && s->bigram_proj >= 0)
            rc = cuda_add_gram(cb, s->bigram_proj, cb->bigram_h16, N, s->bigram_dim);
    }
    /* each device sum down and into its host gram, in parameter order */
    float *host = NULL;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!cb->gram_dev[i]) continue;
        const size_t count = (size_t)s->params[i].shape[1] * (size_t)s->params[i].shape[1];
        free(host);
        host = ct_malloc(count * sizeof(float), "cuda grams: host copy");
        rc = cuda_check(
            cudaMemcpyAsync(host, cb->gram_dev[i], count * sizeof(float), cudaMemcpyDeviceToHost, cb->stream),
            "cuda grams: download");
        if (rc == 0) rc = sync_stream(cb, "cuda grams");
        for (size_t k = 0; rc == 0 && k < count; k++) grams[i][k] += host[k];
    }
    free(host);
    if (rc != 0) sync_stream(cb, "cuda grams (after a failure)");
    free_grams(cb, n);
    return rc;
}

#endif /* CT_HAVE_CUDA */
