/* backend_cuda_step.c — the CUDA backend's passes through the model, built on the forward and
 * backward of backend_cuda_blocks.c: the token upload (with packing's segments), a training
 * micro-batch (the logits and loss, the embedding backward) as one CUDA graph, captured again
 * when the loss weight or the block plan changes, and the evaluation and one-position logits. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <math.h>
#include <stdio.h>

#include "common.h"
#include "bigram_hash.h" /* cpu_bigram_hash: the bigram buckets' index is made on the host */
#include "packing.h"     /* packing_segments: the CPU backend's segments, made on the host */

#include "backend_cuda_private.h"

/* The parameter of the output projection: the token embedding when tied, else lm_head. */
static int output_param_index(const CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    return s->tied ? s->tok_emb : s->lm_head;
}
/* The logits and loss of the last forward's N tokens against targets (device ids). */
static CudaLogits logits_of(const CudaBackend *cb, const int32_t *targets, int N) {
    return (CudaLogits){cb->losses, cb->xf16, cb->w16[output_param_index(cb)], targets, N, cb->dim, cb->vocab,
                        cb->base.state->spec.softcap, cb->z, cb->logits_chunk};
}

/* ---- tokens ---- */

/* doc_packing: the segment starts of the B rows of ids now in the staging buffer (packing_segments,
 * as the CPU backend's forward makes them), into the staging layout's seg part; queued for upload
 * too when upload (the paths whose token upload does not reach that part). No-op without packing. */
static int load_segments(CudaBackend *cb, int B, int upload) {
    if (!cb->h_seg) return 0;
    for (int b = 0; b < B; b++)
        packing_segments(cb->h_tok + (size_t)b * cb->T, cb->T, cb->base.bos_id, cb->max_doc_len,
                         cb->h_seg + (size_t)b * cb->T);
    if (!upload) return 0;
    return cuda_check(cudaMemcpyAsync(cb->d_seg, cb->h_seg, (size_t)B * cb->T * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, cb->stream),
                      "cuda: segment upload (cudaMemcpyAsync)");
}

/* Checks ids like the CPU backend, fills the pinned staging buffer (with the embedding
 * backward's index when with_index: the token ids', and the bigram buckets' when the model has
 * the bigram embedding, from the buckets cpu_bigram_hash makes on the host, the same as the
 * forward's cuda_bigram_hash) and uploads it. N = tokens of this call. */
static int load_tokens(CudaBackend *cb, const uint32_t *tokens, int N, int with_index) {
    const ModelSpec *s = &cb->base.state->spec;
    RETURN_ON_FAILURE(backend_check_tokens(tokens, (size_t)N + 1, cb->vocab));
    /* the previous upload from the staging buffer must be done before it is rewritten */
    RETURN_ON_FAILURE(sync_stream(cb, "cuda: waiting for the previous token upload"));
    int32_t *ids = cb->h_tok, *targets = ids + cb->num_tokens, *positions = targets + cb->num_tokens;
    int32_t *starts = positions + cb->num_tokens, *rows = starts + cb->vocab + 1;
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)tokens[i];
        targets[i] = (int32_t)tokens[i + 1];
    }
    size_t count = 2 * (size_t)cb->num_tokens;
    if (with_index) {
        cuda_embedding_index(ids, N, cb->vocab, rows, starts, positions, &cb->emb_rows);
        if (s->bigram_vocab) {
            int32_t *b_positions = rows + cb->vocab, *b_starts = b_positions + cb->num_tokens;
            int32_t *b_rows = b_starts + s->bigram_vocab + 1;
            cpu_bigram_hash(cb->h_buckets, ids, N / cb->T, cb->T, s->bigram_vocab);
            cuda_embedding_index(cb->h_buckets, N, s->bigram_vocab, b_rows, b_starts, b_positions, &cb->bigram_rows);
        }
        count = cb->tok_count; /* with the segments, the layout's last part */
    }
    RETURN_ON_FAILURE(load_segments(cb, N / cb->T, !with_index));
    return cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, count * sizeof(int32_t), cudaMemcpyHostToDevice,
                                      cb->stream),
                      "cuda: token upload (cudaMemcpyAsync)");
}

int cuda_load_tokens(CudaBackend *cb, const uint32_t *tokens, int N) { return load_tokens(cb, tokens, N, 0); }

int cuda_load_rows(CudaBackend *cb, const uint32_t *inputs, const uint32_t *targets, int B) {
    const int N = B * cb->T;
    /* the previous upload from the staging buffer must be done before it is rewritten */
    RETURN_ON_FAILURE(sync_stream(cb, "cuda: waiting for the previous token upload"));
    int32_t *ids = cb->h_tok, *tgt = ids + cb->num_tokens;
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)inputs[i];
        tgt[i] = (int32_t)targets[i];
    }
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, 2 * (size_t)cb->num_tokens * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, cb->stream),
                                 "cuda: token upload (cudaMemcpyAsync)"));
    return load_segments(cb, B, 1);
}

int cuda_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum) {
    CudaBackend *cb = (CudaBackend *)b;
    *loss_sum = 0;
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0)); /* evaluation reads the weights, never QAT's */
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        const int N = B * cb->T;
        RETURN_ON_FAILURE(load_tokens(cb, tokens + (size_t)first * cb->T, N, 0));
        RETURN_ON_FAILURE(cuda_forward_blocks(cb, B));
        const int32_t *d_targets = cb->d_tok + cb->num_tokens;
        const CudaLogits logits = logits_of(cb, d_targets, N);
        RETURN_ON_FAILURE(cuda_logits_ce_forward(cb->blas, &logits, cb->stream));
        RETURN_ON_FAILURE(cuda_sum(cb->d_scalars, cb->losses, (size_t)N, cb->red_partials, cb->stream));
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->h_scalars, cb->d_scalars, sizeof(double),
                                                     cudaMemcpyDeviceToHost, cb->stream),
                                     "cuda evaluate: loss download"));
        if (sync_stream(cb, "cuda evaluate") != 0) return -1;
        *loss_sum += cb->h_scalars[0];
    }
    return 0;
}

/* Sliding-window validation's windows (backend.h, evaluate_positions): inputs and targets
 * uploaded apart, the forward and loss of cuda_evaluate, every position's loss downloaded. */
int cuda_evaluate_positions(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs, float *losses) {
    CudaBackend *cb = (CudaBackend *)b;
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0));
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        const int N = B * cb->T;
        const size_t at = (size_t)first * cb->T;
        RETURN_ON_FAILURE(backend_check_tokens(inputs + at, (size_t)N, cb->vocab));
        RETURN_ON_FAILURE(backend_check_tokens(targets + at, (size_t)N, cb->vocab));
        RETURN_ON_FAILURE(cuda_load_rows(cb, inputs + at, targets + at, B));
        RETURN_ON_FAILURE(cuda_forward_blocks(cb, B));
        const CudaLogits logits = logits_of(cb, cb->d_tok + cb->num_tokens, N);
        RETURN_ON_FAILURE(cuda_logits_ce_forward(cb->blas, &logits, cb->stream));
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(losses + at, cb->losses, (size_t)N * sizeof(float),
                                                     cudaMemcpyDeviceToHost, cb->stream),
                                     "cuda evaluate_positions: loss download"));
        RETURN_ON_FAILURE(sync_stream(cb, "cuda evaluate_positions"));
    }
    return 0;
}

/* The softcapped logits at position pos of one sequence (for sampling): the blocks' forward
 * for that sequence, the output product for the one row (bf16 operands, as in training), the
 * softcap on the host in the CPU backend's fp32 operations. */
int cuda_position_logits(Backend *b, const uint32_t *tokens, int pos, float *logits) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    if (pos < 0 || pos >= cb->T) return ct_fail("position %d outside the sequence of %d tokens", pos, cb->T);
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0));
    RETURN_ON_FAILURE(backend_check_tokens(tokens, (size_t)cb->T, cb->vocab));
    RETURN_ON_FAILURE(sync_stream(cb, "cuda: waiting for the previous token upload"));
    for (int i = 0; i < cb->T; i++) cb->h_tok[i] = (int32_t)tokens[i];
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, (size_t)cb->T * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, cb->stream),
                                 "cuda: token upload (cudaMemcpyAsync)"));
    RETURN_ON_FAILURE(load_segments(cb, 1, 1));
    RETURN_ON_FAILURE(cuda_forward_blocks(cb, 1));
    /* z[0, :] = xf[pos, :] @ W^T, in the logits scratch */
    RETURN_ON_FAILURE(cuda_linear_forward(cb->blas, cb->z, CT_F32, cb->xf16 + (size_t)pos * cb->dim,
                                          cb->w16[output_param_index(cb)], 1, cb->dim, cb->vocab));
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(logits, cb->z, (size_t)cb->vocab * sizeof(float),
                                                 cudaMemcpyDeviceToHost, cb->stream),
                                 "cuda: logits download"));
    RETURN_ON_FAILURE(sync_stream(cb, "cuda position_logits"));
    for (int v = 0; v < cb->vocab; v++) logits[v] = s->softcap * tanhf(logits[v] / s->softcap);
    return 0;
}

/* The embedding's weight gradient from d emb (in dxf), and the bigram table's from d bigram rows:
 * their grids are the numbers of distinct token ids and buckets of the micro-batch, known on the
 * host only, so they stay out of the micro-batch graph. */
static int embedding_backward(CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    const int32_t *positions = cb->d_tok + 2 * (size_t)cb->num_tokens;
    const int32_t *starts = positions + cb->num_tokens, *rows = starts + cb->vocab + 1;
    RETURN_ON_FAILURE(cuda_embedding_backward(cb->d_grads + s->params[s->tok_emb].offset, cb->dxf, rows, starts,
                                              positions, cb->emb_rows, cb->dim, cb->stream));
    if (s->bigram_vocab) { /* the bigram table's, by the buckets' index (load_tokens) */
        const int32_t *b_positions = rows + cb->vocab, *b_starts = b_positions + cb->num_tokens;
        const int32_t *b_rows = b_starts + s->bigram_vocab + 1;
        RETURN_ON_FAILURE(cuda_embedding_backward(cb->d_grads + s->params[s->bigram_embed].offset, cb->dbigram_h,
                                                  b_rows, b_starts, b_positions, cb->bigram_rows, s->bigram_dim,
                                                  cb->stream));
    }
    return backend_grad_ready(&cb->base, model_grad_num_stages(s) - 1);
}

/* The multi-token-prediction heads' losses and gradients on the final normed x, added to dxf
 * and to the heads' gradients, each head's loss sum into d_scalars[2 + k] (backend_common.h:
 * one logits call per head and sequence, the targets those of the next k+1 positions). */
static int mtp_heads_backward(CudaBackend *cb, float loss_weight) {
    const ModelSpec *s = &cb->base.state->spec;
    const int B = cb->B, T = cb->T;
    const float call_weight = backend_mtp_call_weight(loss_weight, cb->mtp_loss_weight, s->mtp_heads, B);
    const int32_t *targets = cb->d_tok + cb->num_tokens;
    for (int k = 0; k < s->mtp_heads; k++) {
        const int head = s->first_mtp + k, rows = T - k - 1; /* config_validate keeps rows >= 1 */
        for (int b = 0; b < B; b++) {
            const size_t at = (size_t)b * T;
            const CudaLogits logits = {cb->losses + (size_t)b * rows, cb->xf16 + at * cb->dim, cb->w16[head],
                                       targets + at + k + 1, rows, cb->dim, cb->vocab, s->softcap, cb->z,
                                       cb->logits_chunk};
            RETURN_ON_FAILURE(cuda_logits_ce_forward_backward(cb->blas, &logits, cb->dxf + at * cb->dim,
                                                              cb->d_grads + s->params[head].offset, call_weight, cb->dz,
                                                              cb->stream));
        }
        RETURN_ON_FAILURE(
            cuda_sum(cb->d_scalars + 2 + k, cb->losses, (size_t)B * rows, cb->red_partials, cb->stream));
    }
    return 0;
}

static int mtp_on(const CudaBackend *cb) { return backend_mtp_active(&cb->base.state->spec, cb->mtp_loss_weight); }

/* Everything of a training micro-batch between the token upload and the embedding backward:
 * the forward, the logits and loss with their backward, the loss download, the blocks'
 * backward. Queued on the stream (no synchronisation), so it can be captured as it is. */
static int micro_batch_body(CudaBackend *cb, float loss_weight) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = cb->num_tokens;
    RETURN_ON_FAILURE(cuda_forward_blocks(cb, cb->B));
    RETURN_ON_FAILURE(zero_on_stream(cb, cb->dxf, (size_t)N * cb->dim * sizeof(float), "cuda: zeroing d xf"));
    const int out = output_param_index(cb);
    const CudaLogits logits = logits_of(cb, cb->d_tok + N, N);
    RETURN_ON_FAILURE(cuda_logits_ce_forward_backward(cb->blas, &logits, cb->dxf, cb->d_grads + s->params[out].offset,
                                                      loss_weight, cb->dz, cb->stream));
    RETURN_ON_FAILURE(cuda_sum(cb->d_scalars, cb->losses, (size_t)N, cb->red_partials, cb->stream));
    if (mtp_on(cb)) RETURN_ON_FAILURE(mtp_heads_backward(cb, loss_weight));
    /* the loss sums: the main one in [0], the heads' in [2, 2 + heads) ([1] is the gradient norm's) */
    const size_t sums = mtp_on(cb) ? 2 + (size_t)s->mtp_heads : 1;
    RETURN_ON_FAILURE(cuda_check(
        cudaMemcpyAsync(cb->h_scalars, cb->d_scalars, sums * sizeof(double), cudaMemcpyDeviceToHost, cb->stream),
        "cuda: loss download"));
    RETURN_ON_FAILURE(backend_grad_ready(&cb->base, 0));
    return cuda_backward_blocks(cb);
}

/* Captures micro_batch_body into cb->graph. A capture that fails (a CUDA or cuBLAS call that
 * cannot be captured in this environment) is not an error: the run goes on launch by launch,
 * with one warning, and the micro-batch is run that way by the caller. */
static void capture_micro_batch(CudaBackend *cb, float loss_weight) {
    if (cb->graph) {
        cudaGraphExecDestroy(cb->graph);
        cb->graph = NULL;
    }
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed);
    const int body = e == cudaSuccess ? micro_batch_body(cb, loss_weight) : 0;
    if (e == cudaSuccess) e = cudaStreamEndCapture(cb->stream, &g); /* also when the body failed: ends the capture */
    if (e == cudaSuccess && body == 0) e = cudaGraphInstantiate(&cb->graph, g, 0);
    if (g) cudaGraphDestroy(g);
    if (e == cudaSuccess && body == 0) {
        cb->graph_loss_weight = loss_weight;
        cb->graph_loop_active = cb->base.state->loop_active;
        cb->graph_captures++;
        return;
    }
    (void)cudaGetLastError(); /* the failed capture's error is not the next launch's */
    cb->graph = NULL;
    cb->graph_on = 0;
    fprintf(stderr, "ctrain: warning: device = cuda: the micro-batch could not be captured as a CUDA graph (%s); "
                    "this run launches its kernels one by one\n",
            body != 0 ? ct_error() : cudaGetErrorString(e));
}

int cuda_forward_backward(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    const int N = cb->num_tokens;
    if (cb->grads_on_host) {
        /* the host gradients were handed out (grad_buffer) and may have been changed: they are
         * the ones to keep accumulating into */
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_grads, b->state->grads, s->total_floats * sizeof(float),
                                       cudaMemcpyHostToDevice, cb->stream),
                       "cuda: gradient upload"));
        cb->grads_on_host = 0;
    }
    /* late QAT's quantized weights while it is on (the graph reads the shadows, whatever they hold) */
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 1));
    RETURN_ON_FAILURE(load_tokens(cb, tokens, N, 1));
    /* the graph holds no gradient-ready reports: a micro-batch whose backward reports them (the
     * last of a step in an NCCL job) is launched op by op */
    const int graphed = cb->graph_on && cb->graph_warm && !b->grad_ready;
    /* captured again when the loss weight or the plan (depth recurrence switching on) changed */
    if (graphed && (!cb->graph || cb->graph_loss_weight != loss_weight || cb->graph_loop_active != b->state->loop_active))
        capture_micro_batch(cb, loss_weight);
    if (graphed && cb->graph) {
        RETURN_ON_FAILURE(
            cuda_check(cudaGraphLaunch(cb->graph, cb->stream), "cuda: launching the micro-batch's CUDA graph"));
        cb->graph_launches++;
    } else {
        RETURN_ON_FAILURE(micro_batch_body(cb, loss_weight));
        cb->graph_warm = 1;
    }
    RETURN_ON_FAILURE(embedding_backward(cb));
    RETURN_ON_FAILURE(sync_stream(cb, "cuda forward_backward"));
    *mean_loss = cb->h_scalars[0] / N;
    if (mtp_on(cb)) {
        double head_means[CT_MTP_MAX_HEADS];
        for (int k = 0; k < s->mtp_heads; k++) head_means[k] = cb->h_scalars[2 + k] / ((double)cb->B * (cb->T - k - 1));
        *mean_loss = backend_mtp_loss(*mean_loss, head_means, s->mtp_heads, cb->mtp_loss_weight);
    }
    RETURN_ON_FAILURE(backend_check_loss(*mean_loss));
    return 0;
}

#endif /* CT_HAVE_CUDA */
