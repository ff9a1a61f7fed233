/* backend_cuda_step.c — the CUDA backend's passes through the model: the token upload, the
 * forward and backward through the blocks (the CPU backend's graph, backend_cpu.c, in the
 * precision policy and fusions of docs/cuda.md), a training micro-batch as one CUDA graph, and
 * the evaluation and one-position logits built on the forward. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <float.h>
#include <math.h>
#include <stdio.h>

#include "common.h"
#include "bigram_hash.h" /* cpu_bigram_hash: the bigram buckets' index is made on the host */
#include "packing.h"     /* packing_segments: the CPU backend's segments, made on the host */

#include "backend_cuda_private.h"

/* Device pointers to block layer's parameter which (BLK_*): its fp32 value, its gradient and
 * its bf16 shadow (the operand of the products) */
static const float *block_param(const CudaBackend *cb, int layer, int which) {
    return cb->d_params + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
static float *block_grad(const CudaBackend *cb, int layer, int which) {
    return cb->d_grads + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
static const ct_bf16 *block_weight_bf16(const CudaBackend *cb, int layer, int which) {
    const ModelSpec *s = &cb->base.state->spec;
    return cb->w16[s->first_block + layer * BLK_NUM_PARAMS + which];
}
/* The sparse attention gate of block `layer` (model_attn_gate: NULL without the gate) and its
 * call's shape; attn.proj's input, the attention output after XSA and the gate where the block
 * has them, and the gate's, after XSA. */
static const ParamInfo *attn_gate(const CudaBackend *cb, int layer) {
    return model_attn_gate(&cb->base.state->spec, layer);
}
static CudaHeadGateShape gate_shape(const CudaBackend *cb, int N) {
    const ModelSpec *s = &cb->base.state->spec;
    return (CudaHeadGateShape){N, cb->num_heads, cb->head_dim, s->gate_window, s->gate_scale};
}
static const ct_bf16 *gate_input(const CudaLayer *a, int xsa) { return xsa ? a->y_xsa16 : a->y16; }
static const ct_bf16 *proj_input(const CudaLayer *a, int xsa) { return a->y_gate16 ? a->y_gate16 : gate_input(a, xsa); }
/* The plan this pass walks (block_plan.h: looped once depth recurrence is on), and whether its
 * run `run` is of an XSA block (a run's buffers are by run, its weights and flags by block). */
static const BlockPlan *pass_plan(const CudaBackend *cb) {
    return model_plan(&cb->base.state->spec, cb->base.state->loop_active);
}
static int run_xsa(const CudaBackend *cb, const BlockPlan *plan, int run) {
    return plan->runs[run].block >= cb->base.state->spec.xsa_first_layer;
}
/* dL/d(skip row j) of plan: in the x_in of the decoder run that adds it (its j-th, which writes
 * it after its residual-mix backward has read that x_in for the last time; the encoder run that
 * made the skip, earlier in the plan, consumes it later in the backward) */
static void *dskip_of(const CudaBackend *cb, const BlockPlan *plan, int j) {
    return cb->layers[plan->num_encoder + j].x_in;
}
/* The QK-norm/RoPE call's shape for q (heads = num_heads) or k (num_kv_heads) of B sequences:
 * a column block of the [c_q | c_k | c_v] rows, the backend's tables. */
static CudaRopeShape rope_shape(const CudaBackend *cb, int B, int heads) {
    return (CudaRopeShape){B, cb->T, heads, cb->head_dim, cb->rope_dims, cb->qkv_width, cb->rope_cos, cb->rope_sin};
}
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

/* ---- the ends of the residual stream ----
 * The stream's start (the embedding, its norm, the SmearGate) and the backward through it run
 * once per micro-batch in fp32 buffers. Under residual_dtype = bf16 each value train_gpt.py
 * stores in bf16 there (the embedding rows of its bf16 table, the norm's and the SmearGate's
 * outputs, their gradients) is rounded in place, so the fp32 kernels see and make the bf16
 * stream's values (docs/cuda.md, "Residual stream"). */
static int stream_bf16(const CudaBackend *cb) { return cb->stream_dtype == CT_BF16; }
static int round_if_bf16(CudaBackend *cb, float *x, size_t n) {
    return stream_bf16(cb) ? cuda_round_bf16_inplace(x, n, cb->stream) : 0;
}

/* ---- forward ---- */

static int forward_blocks(CudaBackend *cb, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = B * cb->T, D = cb->dim, KV = cb->kv_dim, HID = cb->hidden, QKV = cb->qkv_width;
    const int dt = cb->stream_dtype;
    const size_t ND = (size_t)N * D;
    cudaStream_t st = cb->stream;
    const int32_t *d_ids = cb->d_tok;
    RETURN_ON_FAILURE(cuda_embedding_forward(cb->emb, d_ids, cb->d_params + s->params[s->tok_emb].offset, N, D, st));
    RETURN_ON_FAILURE(round_if_bf16(cb, cb->emb, ND)); /* the rows of train_gpt.py's bf16 table */
    if (s->bigram_vocab) { /* emb += scale * proj(bigram_embed[hash(prev, token)]) */
        const float *scale = cb->d_params + s->params[s->bigram_scale].offset;
        const size_t BD = (size_t)s->bigram_dim;
        RETURN_ON_FAILURE(cuda_bigram_hash(cb->d_buckets, d_ids, B, cb->T, s->bigram_vocab, st));
        RETURN_ON_FAILURE(cuda_embedding_forward(cb->bigram_h, cb->d_buckets,
                                                 cb->d_params + s->params[s->bigram_embed].offset, N, (int)BD, st));
        RETURN_ON_FAILURE(round_if_bf16(cb, cb->bigram_h, (size_t)N * BD));
        if (s->bigram_proj >= 0) {
            RETURN_ON_FAILURE(cuda_f32_to_bf16(cb->bigram_h16, cb->bigram_h, (size_t)N * BD, st));
            RETURN_ON_FAILURE(cuda_linear_forward(cb->blas, cb->bigram_p16, CT_BF16, cb->bigram_h16,
                                                  cb->w16[s->bigram_proj], N, (int)BD, D));
            RETURN_ON_FAILURE(
                cuda_add_scalar_scaled_forward(cb->emb, cb->emb, NULL, cb->bigram_p16, scale, (size_t)N * D, st));
        } else {
            RETURN_ON_FAILURE(
                cuda_add_scalar_scaled_forward(cb->emb, cb->emb, cb->bigram_h, NULL, scale, (size_t)N * D, st));
        }
    }
    if (s->bigram_vocab) RETURN_ON_FAILURE(round_if_bf16(cb, cb->emb, ND));
    const float *norm_in = cb->emb; /* the x0 norm's input */
    if (s->smear_bos) { /* the 1.0611 SmearGate: on the embedding (with the bigram's share), before the norm */
        if (cb->base.bos_id < 0)
            return ct_fail("smear_gate_enabled = 1 needs the data's bos_id, and this forward was given none");
        RETURN_ON_FAILURE(cuda_smear_bos_forward(cb->emb_smeared, cb->emb, d_ids,
                                                 cb->d_params + s->params[s->smear_gate_w].offset,
                                                 cb->d_params + s->params[s->smear_lambda].offset, B, cb->T, D,
                                                 s->gate_window, cb->base.bos_id, st));
        RETURN_ON_FAILURE(round_if_bf16(cb, cb->emb_smeared, ND));
        norm_in = cb->emb_smeared;
    }
    if (s->smear_gate) { /* x0 = smear(rms_norm(emb)); with a bf16 stream made in dD2 (free until the backward) */
        RETURN_ON_FAILURE(cuda_rmsnorm_forward(cb->x_normed, NULL, cb->rstd0, cb->emb, N, D, FLT_EPSILON, CT_F32, st));
        RETURN_ON_FAILURE(round_if_bf16(cb, cb->x_normed, ND));
        float *smeared = stream_bf16(cb) ? cb->dD2 : (float *)cb->x0;
        RETURN_ON_FAILURE(
            cuda_smear_forward(smeared, cb->x_normed, cb->d_params + s->params[s->smear].offset, B, cb->T, D, st));
        if (stream_bf16(cb)) RETURN_ON_FAILURE(cuda_f32_to_bf16(cb->x0, smeared, ND, st));
    } else if (stream_bf16(cb)) {
        RETURN_ON_FAILURE(cuda_rmsnorm_forward(NULL, cb->x0, cb->rstd0, norm_in, N, D, FLT_EPSILON, CT_F32, st));
    } else {
        RETURN_ON_FAILURE(cuda_rmsnorm_forward(cb->x0, NULL, cb->rstd0, norm_in, N, D, FLT_EPSILON, CT_F32, st));
    }
    const void *x = cb->x0;
    const float *skip_w = cb->d_params + s->params[s->skip_weights].offset;
    const float *skip_gates = s->skip_gates >= 0 ? cb->d_params + s->params[s->skip_gates].offset : NULL;
    const BlockPlan *plan = pass_plan(cb);
    for (int run = 0; run < plan->num_runs; run++) { /* run: its buffers; l: its block's weights */
        CudaLayer *a = &cb->layers[run];
        const int l = plan->runs[run].block, xsa = run_xsa(cb, plan, run);
        const int dec = plan->runs[run].skip_row; /* the skip row it adds through, < 0 for none */
        const void *skip = dec >= 0 ? cb->layers[plan->runs[run].skip_source].x_out : NULL;
        const float ln = model_ln_scale(s, l); /* the block's norm outputs times ln (1 without ln_scale) */
        CudaMixNorm input = {.x_in = skip ? a->x_in : NULL, .xm = cb->xm, .rstd = a->rstd_attn, .a_bf16 = cb->a_in,
                             .x = x, .skip = skip, .skip_w = skip ? skip_w + (size_t)dec * D : NULL,
                             .skip_gate = skip && skip_gates ? skip_gates + (size_t)dec * D : NULL, .x0 = cb->x0,
                             .mix = block_param(cb, l, BLK_RESID_MIX), .N = N, .C = D, .eps = FLT_EPSILON,
                             .out_scale = ln, .dtype = dt};
        if (run == 0) {
            RETURN_ON_FAILURE(cuda_mix_norm_forward(&input, st));
        } else {
            /* the block before's output x_out = (xm + attn_scale * ao) + mlp_scale * mo (x1
             * recomputed, as add_norm_forward made it), written, and this block's input from it,
             * in one pass (the skip may be that very x_out: each element is written before it
             * is read there) */
            const CudaLayer *b = &cb->layers[run - 1];
            const int lb = plan->runs[run - 1].block;
            const CudaBlockOutput prev = {b->x_out, cb->xm, b->ao, b->mo, block_param(cb, lb, BLK_ATTN_SCALE),
                                          block_param(cb, lb, BLK_MLP_SCALE)};
            input.x = NULL; /* made by this pass: prev.x_out */
            RETURN_ON_FAILURE(cuda_out_mix_norm_forward(&prev, &input, st));
            x = b->x_out;
        }
        a->x_in_used = skip ? a->x_in : x;
        /* [q | k | v] = a_in [W_q; W_k; W_v]^T: one product, rows of QKV */
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->qkv, CT_BF16, cb->a_in, block_weight_bf16(cb, l, BLK_C_Q), N, D, QKV));
        const CudaRopeShape q_shape = rope_shape(cb, B, cb->num_heads), k_shape = rope_shape(cb, B, cb->num_kv_heads);
        RETURN_ON_FAILURE(
            cuda_qk_norm_rope_forward(NULL, a->q16, a->qkv, block_param(cb, l, BLK_Q_GAIN), &q_shape, st));
        RETURN_ON_FAILURE(cuda_qk_norm_rope_forward(NULL, a->k16, a->qkv + D, NULL, &k_shape, st));
        RETURN_ON_FAILURE(cuda_attention_forward(a->y16, a->lse, a->q16, a->k16, a->qkv + D + KV,
                                                 &(CudaAttentionShape){B, cb->T, cb->num_heads, cb->num_kv_heads,
                                                                       cb->head_dim, QKV, cb->d_seg},
                                                 st));
        if (xsa) /* XSA: y minus its component along the unit self value */
            RETURN_ON_FAILURE(cuda_xsa_forward(NULL, a->y_xsa16, a->y16, a->qkv + D + KV,
                                               &(CudaXsaShape){N, cb->num_heads, cb->num_kv_heads, cb->head_dim, QKV},
                                               st));
        if (a->y_gate16) { /* the sparse gate on each head's output, from a_in's first channels */
            const CudaHeadGateShape gs = gate_shape(cb, N);
            RETURN_ON_FAILURE(cuda_head_gate_forward(a->gate, a->y_gate16, gate_input(a, xsa), cb->a_in,
                                                     cb->d_params + attn_gate(cb, l)->offset, &gs, st));
        }
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->ao, CT_BF16, proj_input(a, xsa), block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
        RETURN_ON_FAILURE(cuda_add_norm_forward(NULL, a->rstd_mlp, a->m_in, cb->xm, a->ao,
                                                block_param(cb, l, BLK_ATTN_SCALE), N, D, FLT_EPSILON, ln, dt, st));
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->u, CT_BF16, a->m_in, block_weight_bf16(cb, l, BLK_FC), N, D, HID));
        RETURN_ON_FAILURE(cuda_relu2_forward(cb->h, a->u, (size_t)N * HID, s->mlp_negative_slope, st));
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->mo, CT_BF16, cb->h, block_weight_bf16(cb, l, BLK_MLP_PROJ), N, HID, D));
    }
    /* the last run's output (the others are made by the next run's input op) */
    CudaLayer *z = &cb->layers[plan->num_runs - 1];
    const int last = plan->runs[plan->num_runs - 1].block;
    RETURN_ON_FAILURE(cuda_scaled_add_forward(z->x_out, cb->xm, z->ao, block_param(cb, last, BLK_ATTN_SCALE), z->mo,
                                              block_param(cb, last, BLK_MLP_SCALE), N, D, dt, st));
    RETURN_ON_FAILURE(cuda_rmsnorm_forward(NULL, cb->xf16, cb->rstdf, z->x_out, N, D, FLT_EPSILON, dt, st));
    return 0;
}

int cuda_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum) {
    CudaBackend *cb = (CudaBackend *)b;
    *loss_sum = 0;
    RETURN_ON_FAILURE(cuda_use_shadows(cb, 0)); /* evaluation reads the weights, never QAT's */
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        const int N = B * cb->T;
        RETURN_ON_FAILURE(load_tokens(cb, tokens + (size_t)first * cb->T, N, 0));
        RETURN_ON_FAILURE(forward_blocks(cb, B));
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
        /* the previous upload from the staging buffer must be done before it is rewritten */
        RETURN_ON_FAILURE(sync_stream(cb, "cuda: waiting for the previous token upload"));
        int32_t *ids = cb->h_tok, *tgt = ids + cb->num_tokens;
        for (int i = 0; i < N; i++) {
            ids[i] = (int32_t)inputs[at + i];
            tgt[i] = (int32_t)targets[at + i];
        }
        RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, 2 * (size_t)cb->num_tokens * sizeof(int32_t),
                                                     cudaMemcpyHostToDevice, cb->stream),
                                     "cuda: token upload (cudaMemcpyAsync)"));
        RETURN_ON_FAILURE(load_segments(cb, B, 1));
        RETURN_ON_FAILURE(forward_blocks(cb, B));
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
    RETURN_ON_FAILURE(forward_blocks(cb, 1));
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

/* ---- forward + backward ---- */

static int backward_blocks(CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    const int B = cb->B, T = cb->T, N = cb->num_tokens, D = cb->dim, KV = cb->kv_dim, HID = cb->hidden,
              QKV = cb->qkv_width;
    const size_t ND = (size_t)N * D;
    const int dt = cb->stream_dtype;
    cudaStream_t st = cb->stream;
    void *dx = cb->dx, *dx_alt = cb->dx_alt;
    const CudaXsaShape xsa_shape = {N, cb->num_heads, cb->num_kv_heads, cb->head_dim, QKV};
    RETURN_ON_FAILURE(zero_on_stream(cb, dx, ND * cb->stream_bytes, "cuda: zeroing dx"));
    const BlockPlan *plan = pass_plan(cb);
    RETURN_ON_FAILURE(cuda_rmsnorm_backward(dx, cb->dxf, cb->layers[plan->num_runs - 1].x_out, cb->rstdf, N, D, dt, st));
    RETURN_ON_FAILURE(zero_on_stream(cb, cb->dx0, ND * cb->stream_bytes, "cuda: zeroing dx0"));
    float *dskip_w = cb->d_grads + s->params[s->skip_weights].offset;
    const float *skip_w = cb->d_params + s->params[s->skip_weights].offset;

    for (int run = plan->num_runs - 1; run >= 0; run--) { /* the plan in reverse: buffers by run, weights by block */
        CudaLayer *a = &cb->layers[run];
        const int l = plan->runs[run].block, xsa = run_xsa(cb, plan, run);
        /* dx holds dL/d(x_out); an encoder run whose output fed a skip also gets that path (its
         * decoder run, later in the plan, has been through already) */
        for (int j = plan->num_encoder; j < plan->num_runs; j++)
            if (plan->runs[j].skip_source == run)
                RETURN_ON_FAILURE(cuda_add_inplace(dx, dskip_of(cb, plan, plan->runs[j].skip_row), ND, dt, st));
        /* x_out = x1 + mlp_scale * mo (dx stays dL/dx1 on the residual path) */
        const CudaScaledAddBackward mlp_residual = {
            .dbranch_bf16 = cb->gD16, .dscale = block_grad(cb, l, BLK_MLP_SCALE), .dout = dx, .branch_bf16 = a->mo,
            .scale = block_param(cb, l, BLK_MLP_SCALE), .partials = cb->partials, .N = N, .C = D, .dtype = dt};
        RETURN_ON_FAILURE(cuda_scaled_add_backward(&mlp_residual, st));
        /* dh as bf16 (it only meets relu^2's backward, whose bf16 result overwrites it in place);
         * the weight gradient needs h = relu(u)^2, which relu^2's backward remakes in the same
         * pass over u, so that product comes after it */
        RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->gH16, CT_BF16, 0, NULL, cb->gD16, NULL,
                                               block_weight_bf16(cb, l, BLK_MLP_PROJ), N, HID, D));
        RETURN_ON_FAILURE(
            cuda_relu2_backward(cb->gH16, cb->h, cb->gH16, a->u, (size_t)N * HID, s->mlp_negative_slope, st));
        RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, NULL, CT_BF16, 0, block_grad(cb, l, BLK_MLP_PROJ), cb->gD16,
                                               cb->h, NULL, N, HID, D));
        RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, block_grad(cb, l, BLK_FC), cb->gH16,
                                               a->m_in, block_weight_bf16(cb, l, BLK_FC), N, D, HID));
        const float ln = model_ln_scale(s, l); /* m_in and a_in were the norms times ln */
        if (s->ln_scale) RETURN_ON_FAILURE(cuda_scale_inplace(cb->dD2, ln, ND, st));
        /* the MLP norm's input x1 = xm + attn_scale * ao, xm = mix(x_in, x0), recomputed; a_in =
         * rms_norm(xm) too, for the c_q/c_k/c_v weight gradients below; and, in the same pass,
         * x1's residual add: d ao = bf16(attn_scale * dx), d attn_scale += sum dx * ao */
        const CudaAddNormBackward mlp_norm = {
            .dx = dx, .dout = cb->dD2, .rstd = a->rstd_mlp, .x_in = a->x_in_used, .x0 = cb->x0,
            .mix = block_param(cb, l, BLK_RESID_MIX), .branch = a->ao, .scale = block_param(cb, l, BLK_ATTN_SCALE),
            .renorm = cb->a_in, .renorm_rstd = a->rstd_attn, .renorm_scale = ln, .dbranch = cb->gD16,
            .dscale = block_grad(cb, l, BLK_ATTN_SCALE), .partials = cb->partials, .N = N, .C = D, .dtype = dt};
        RETURN_ON_FAILURE(cuda_add_norm_backward(&mlp_norm, st));
        const ParamInfo *gate_w = attn_gate(cb, l);
        const CudaHeadGateShape gs = gate_shape(cb, N);
        if (gate_w) {
            /* the gate: dL/d(gated y) in fp32 (dD2 is free until d a_in below); through the gate
             * in place where XSA follows (its input is fp32), else straight to the attention's
             * bf16 dy; the gate's logit gradient waits in gate_dz for d a_in */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, block_grad(cb, l, BLK_PROJ),
                                                   cb->gD16, a->y_gate16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
            RETURN_ON_FAILURE(cuda_head_gate_backward(xsa ? cb->dD2 : NULL, xsa ? NULL : cb->dy16,
                                                      cb->gate_dz, cb->d_grads + gate_w->offset, cb->dD2,
                                                      gate_input(a, xsa), a->gate, cb->a_in, &gs, cb->partials, st));
            if (xsa)
                RETURN_ON_FAILURE(cuda_xsa_backward(NULL, cb->dy16, NULL, NULL, cb->dD2, a->y16, a->qkv + D + KV,
                                                    &xsa_shape, st));
        } else if (xsa) {
            /* XSA: dL/d(y_xsa) in fp32 (dD2 is free until d a_in below), then through XSA to the
             * attention output's dy (bf16, the attention backward's input) */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, block_grad(cb, l, BLK_PROJ),
                                                   cb->gD16, a->y_xsa16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
            RETURN_ON_FAILURE(cuda_xsa_backward(NULL, cb->dy16, NULL, NULL, cb->dD2, a->y16, a->qkv + D + KV,
                                                &xsa_shape, st));
        } else {
            /* dy straight to bf16: the attention backward is its only consumer */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dy16, CT_BF16, 0, block_grad(cb, l, BLK_PROJ),
                                                   cb->gD16, a->y16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
        }
        /* writes dq, dk (fp32: the QK-norm/RoPE backward's input) and dv (bf16, into dqkv16) */
        const CudaAttentionBackward grads = {.dq = cb->dq, .dk = cb->dk, .dv = cb->dqkv16 + D + KV, .dy = cb->dy16,
                                             .q = a->q16, .k = a->k16, .v = a->qkv + D + KV, .y = a->y16,
                                             .lse = a->lse, .scratch = cb->attn_D};
        RETURN_ON_FAILURE(cuda_attention_backward(
            &grads, &(CudaAttentionShape){B, T, cb->num_heads, cb->num_kv_heads, cb->head_dim, QKV, cb->d_seg}, st));
        if (xsa) /* XSA's share of dv (through the unit value), added to the attention's */
            RETURN_ON_FAILURE(cuda_xsa_backward(NULL, NULL, NULL, cb->dqkv16 + D + KV, cb->dD2, a->y16,
                                                a->qkv + D + KV, &xsa_shape, st));
        const CudaRopeShape q_shape = rope_shape(cb, B, cb->num_heads), k_shape = rope_shape(cb, B, cb->num_kv_heads);
        RETURN_ON_FAILURE(cuda_qk_norm_rope_backward(NULL, cb->dqkv16, block_grad(cb, l, BLK_Q_GAIN), cb->dq, a->qkv,
                                                     block_param(cb, l, BLK_Q_GAIN), &q_shape, cb->rope_scratch,
                                                     cb->partials, st));
        RETURN_ON_FAILURE(
            cuda_qk_norm_rope_backward(NULL, cb->dqkv16 + D, NULL, cb->dk, a->qkv + D, NULL, &k_shape, NULL, NULL, st));
        /* d a_in = [dq_raw | dk_raw | dv] [W_q; W_k; W_v] (one product over the QKV columns, written);
         * the three weight gradients (consecutive in the flat buffer) += dqkv^T a_in, one product */
        RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, block_grad(cb, l, BLK_C_Q), cb->dqkv16,
                                               cb->a_in, block_weight_bf16(cb, l, BLK_C_Q), N, D, QKV));
        if (gate_w) /* the gate read a_in's first gate_window channels */
            RETURN_ON_FAILURE(
                cuda_head_gate_input_backward(cb->dD2, cb->gate_dz, cb->d_params + gate_w->offset, &gs, st));
        if (s->ln_scale) RETURN_ON_FAILURE(cuda_scale_inplace(cb->dD2, ln, ND, st));
        /* the attention norm of xm = mix[0] * x_in + mix[1] * x0, then the mix: dx_alt becomes
         * dL/dx_in (written), dx is spent */
        const CudaNormMixBackward attn_norm = {
            .dx_in = dx_alt, .dx0 = cb->dx0, .dmix = block_grad(cb, l, BLK_RESID_MIX), .dx = dx, .dout = cb->dD2,
            .rstd = a->rstd_attn, .x_in = a->x_in_used, .x0 = cb->x0, .mix = block_param(cb, l, BLK_RESID_MIX),
            .partials = cb->partials, .N = N, .C = D, .dtype = dt};
        RETURN_ON_FAILURE(cuda_norm_mix_backward(&attn_norm, st));
        void *t = dx;
        dx = dx_alt;
        dx_alt = t;
        /* x_in = x_prev + skip_weights[dec] * skip for decoder blocks with a skip (gated: the lerp,
         * its x_prev gradient made in place in dx) */
        const int dec = plan->runs[run].skip_row; /* decoder runs only: run > 0 */
        const void *skip_x = dec >= 0 ? cb->layers[plan->runs[run].skip_source].x_out : NULL;
        if (dec >= 0 && s->skip_gates >= 0) {
            const size_t row = (size_t)dec * D, gates = s->params[s->skip_gates].offset;
            const CudaSkipGateBackward gate = {
                .dx = dx, .dskip = dskip_of(cb, plan, dec), .dw = dskip_w + row, .dgate = cb->d_grads + gates + row,
                .dout = dx, .x = cb->layers[run - 1].x_out, .skip = skip_x, .w = skip_w + row,
                .gate = cb->d_params + gates + row, .partials = cb->partials, .N = N, .C = D, .dtype = dt};
            RETURN_ON_FAILURE(cuda_skip_gate_backward(&gate, st));
        } else if (dec >= 0) { /* the skip and its gradient are of the stream's type */
            void *dskip = dskip_of(cb, plan, dec);
            const CudaScaledAddBackward skip = {
                .dbranch = stream_bf16(cb) ? NULL : dskip, .dbranch_bf16 = stream_bf16(cb) ? dskip : NULL,
                .dscale = dskip_w + (size_t)dec * D, .dout = dx, .branch = stream_bf16(cb) ? NULL : skip_x,
                .branch_bf16 = stream_bf16(cb) ? skip_x : NULL, .scale = skip_w + (size_t)dec * D,
                .partials = cb->partials, .N = N, .C = D, .dtype = dt};
            RETURN_ON_FAILURE(cuda_scaled_add_backward(&skip, st));
        }
        /* a block's gradients are final once its first run is through (model.h) */
        if (model_plan_first_run(plan, run))
            RETURN_ON_FAILURE(backend_grad_ready(&cb->base, model_grad_stage_of_block(s, l)));
    }
    /* x0 = rms_norm(emb) (smeared with the SmearGate) feeds block 0 directly (dx) and every
     * resid_mix (dx0); its backward runs in fp32 buffers (free by now: dD2, dq), rounded where
     * train_gpt.py's gradients are bf16 */
    RETURN_ON_FAILURE(cuda_add_inplace(dx, cb->dx0, ND, dt, st));
    const float *dx0_total = dx;
    if (stream_bf16(cb)) {
        RETURN_ON_FAILURE(cuda_bf16_to_f32(cb->dD2, dx, ND, st));
        dx0_total = cb->dD2;
    }
    if (s->smear_gate) {
        float *dnormed = stream_bf16(cb) ? cb->dq : dx_alt;
        RETURN_ON_FAILURE(zero_on_stream(cb, dnormed, ND * sizeof(float), "cuda: zeroing d x_normed"));
        RETURN_ON_FAILURE(cuda_smear_backward(dnormed, cb->d_grads + s->params[s->smear].offset, dx0_total,
                                              cb->x_normed, cb->d_params + s->params[s->smear].offset, B, T, D,
                                              cb->partials, st));
        RETURN_ON_FAILURE(round_if_bf16(cb, dnormed, ND));
        dx0_total = dnormed;
    }
    /* the x0 norm's backward into d emb (dxf), or with the BOS SmearGate into d emb_smeared (dq,
     * free by now: the two SmearGates are never on together) and from there through the gate */
    float *dnorm_in = s->smear_bos ? cb->dq : cb->dxf;
    RETURN_ON_FAILURE(zero_on_stream(cb, dnorm_in, ND * sizeof(float), "cuda: zeroing d emb"));
    RETURN_ON_FAILURE(cuda_rmsnorm_backward(dnorm_in, dx0_total, s->smear_bos ? cb->emb_smeared : cb->emb, cb->rstd0,
                                            N, D, CT_F32, st));
    RETURN_ON_FAILURE(round_if_bf16(cb, dnorm_in, ND));
    if (s->smear_bos) {
        RETURN_ON_FAILURE(zero_on_stream(cb, cb->dxf, ND * sizeof(float), "cuda: zeroing d emb"));
        RETURN_ON_FAILURE(cuda_smear_bos_backward(
            cb->dxf, cb->d_grads + s->params[s->smear_gate_w].offset, cb->d_grads + s->params[s->smear_lambda].offset,
            dnorm_in, cb->emb, cb->d_tok, cb->d_params + s->params[s->smear_gate_w].offset,
            cb->d_params + s->params[s->smear_lambda].offset, B, T, D, s->gate_window, cb->base.bos_id,
            cb->smear_scratch, st));
        RETURN_ON_FAILURE(round_if_bf16(cb, cb->dxf, ND));
    }
    if (s->bigram_vocab) { /* emb = tok_emb[ids] + scale * bigram branch: d scale, d branch, through bigram.proj */
        const float *scale = cb->d_params + s->params[s->bigram_scale].offset;
        float *dscale = cb->d_grads + s->params[s->bigram_scale].offset;
        const int BD = s->bigram_dim;
        if (s->bigram_proj >= 0) {
            RETURN_ON_FAILURE(cuda_add_scalar_scaled_backward(NULL, cb->gD16, dscale, cb->dxf, NULL, cb->bigram_p16,
                                                              scale, ND, cb->red_partials, st));
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dbigram_h, CT_F32, 0,
                                                   cb->d_grads + s->params[s->bigram_proj].offset, cb->gD16,
                                                   cb->bigram_h16, cb->w16[s->bigram_proj], N, BD, D));
        } else {
            RETURN_ON_FAILURE(
                zero_on_stream(cb, cb->dbigram_h, (size_t)N * BD * sizeof(float), "cuda: zeroing d bigram rows"));
            RETURN_ON_FAILURE(cuda_add_scalar_scaled_backward(cb->dbigram_h, NULL, dscale, cb->dxf, cb->bigram_h, NULL,
                                                              scale, ND, cb->red_partials, st));
        }
    }
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
    RETURN_ON_FAILURE(forward_blocks(cb, cb->B));
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
    return backward_blocks(cb);
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
