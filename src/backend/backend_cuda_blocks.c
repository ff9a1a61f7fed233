/* backend_cuda_blocks.c — the CUDA backend's forward and backward through the model: the
 * stream's start (the embedding, the bigram embedding, the SmearGates, the x0 norm), the blocks
 * in the order of the block plan (block_plan.h: depth recurrence runs blocks again, each run with
 * its own saved activations, CudaLayer; parallel runs as two residual lanes), the final norm,
 * and the backward through all of it in reverse (the CPU backend's graph, backend_cpu.c, in the
 * precision policy and fusions of docs/cuda.md). backend_cuda_step.c drives them: token upload, the micro-batch and its CUDA
 * graph, evaluation. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <float.h>

#include "common.h"

#include "backend_cuda_private.h"

/* Device pointers to block layer's parameter which (BLK_*): its fp32 value, its gradient and
 * its bf16 shadow (the operand of the products) */
static const float *block_param(const CudaBackend *cb, int layer, int which) {
    return cb->d_params + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
static float *block_grad(const CudaBackend *cb, int layer, int which) {
    return cb->d_grads + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
/* Whether this backward makes the base's weight gradients: not in a test-time-training chunk,
 * which trains its adapters alone (d_grads is a scratch buffer then), unless CT_TTT_BASE_GRADS=1
 * asks for them (the earlier path, for timing). The per-channel gradients (norm scales, q_gain,
 * lambdas, gates) still go to that scratch: they are cheap, and their kernels make them in the
 * same pass as the input gradients. */
static int makes_weight_grads(const CudaBackend *cb) {
    return !(cb->ttt && cb->ttt->active && !cb->ttt->base_grads);
}
/* A matrix's weight gradient as cuda_linear_backward takes it: NULL (that product skipped) when
 * this backward makes none. */
static float *matrix_grad(const CudaBackend *cb, int layer, int which) {
    return makes_weight_grads(cb) ? block_grad(cb, layer, which) : NULL;
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

/* GPTQ's calibration (backend_cuda_grams.c): while gram_dev is set, X^T X of a matrix's input as
 * its product reads it, added into the parameter's device sum by the products' cuBLAS call
 * (cuda_linear_backward's weight gradient: a fixed algorithm, the same bits every call). */
int cuda_add_gram(CudaBackend *cb, int param, const ct_bf16 *x, int N, int cols) {
    if (param < 0 || !cb->gram_dev[param]) return 0;
    return cuda_linear_backward(cb->blas, NULL, CT_BF16, 0, cb->gram_dev[param], x, x, NULL, N, cols, cols);
}

/* ---- parallel residual lanes (docs/model.md) ----
 * A parallel run's attention reads lane 0 (x_in, through resid_mix as a sequential block), its
 * MLP lane 1; cuda_lane_mix makes both lanes' outputs (x_out, l1_out). After the last run the
 * final norm reads lane 0, lane 1 or their mean (parallel_final). */
static const float *lane_resid(const CudaBackend *cb, int layer, int grad) {
    const ModelSpec *s = &cb->base.state->spec;
    return (grad ? cb->d_grads : cb->d_params) + s->params[s->parallel_resid].offset + (size_t)2 * layer;
}
static const float *lane_post(const CudaBackend *cb, int layer, int grad) {
    const ModelSpec *s = &cb->base.state->spec;
    return (grad ? cb->d_grads : cb->d_params) + s->params[s->parallel_post].offset + (size_t)4 * layer;
}
/* Lane 1's input of parallel run `run`: the run before's output at the first, its lane 1 after. */
static const void *lane1_input(const CudaBackend *cb, const BlockPlan *plan, int run) {
    return run == plan->first_parallel ? cb->layers[run - 1].x_out : cb->layers[run - 1].l1_out;
}
/* The final norm's input (the CPU backend's final_hidden). */
static const void *final_hidden(const CudaBackend *cb, const BlockPlan *plan) {
    const CudaLayer *last = &cb->layers[plan->num_runs - 1];
    if (plan->first_parallel == plan->num_runs) return last->x_out;
    const int final = cb->base.state->spec.parallel_final;
    return final == PARALLEL_FINAL_ATTN ? last->x_out : final == PARALLEL_FINAL_MLP ? last->l1_out : cb->x_lanes;
}
/* A parallel run's MLP norm of lane 1: m_in = bf16(rms_norm(in) * ln), rstd_mlp; with ln_scale
 * through dD2 (free in the forward), as cuda_add_norm_forward rounds: the product, then bf16. */
static int mlp_norm_forward_lane(CudaBackend *cb, CudaLayer *a, const void *in, float ln, int N) {
    const ModelSpec *s = &cb->base.state->spec;
    const int D = cb->dim;
    if (!s->ln_scale)
        return cuda_rmsnorm_forward(NULL, a->m_in, a->rstd_mlp, in, N, D, FLT_EPSILON, cb->stream_dtype, cb->stream);
    RETURN_ON_FAILURE(
        cuda_rmsnorm_forward(cb->dD2, NULL, a->rstd_mlp, in, N, D, FLT_EPSILON, cb->stream_dtype, cb->stream));
    RETURN_ON_FAILURE(cuda_scale_inplace(cb->dD2, ln, (size_t)N * D, cb->stream));
    return cuda_f32_to_bf16(a->m_in, cb->dD2, (size_t)N * D, cb->stream);
}

/* ---- forward ---- */

int cuda_forward_blocks(CudaBackend *cb, int B) {
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
        } else if (plan->runs[run - 1].parallel) { /* its output is made already (lane_mix) */
            x = cb->layers[run - 1].x_out;
            input.x = x;
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
        /* test-time training's q, k, v adapters into their columns (no-ops outside a chunk) */
        RETURN_ON_FAILURE(cuda_lora_rows_forward(cb, run, LORA_Q, cb->a_in, a->qkv, QKV));
        RETURN_ON_FAILURE(cuda_lora_rows_forward(cb, run, LORA_K, cb->a_in, a->qkv + D, QKV));
        RETURN_ON_FAILURE(cuda_lora_rows_forward(cb, run, LORA_V, cb->a_in, a->qkv + D + KV, QKV));
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
        RETURN_ON_FAILURE(cuda_lora_rows_forward(cb, run, LORA_O, cb->a_in, a->ao, D)); /* TTT's o reads a_in */
        if (plan->runs[run].parallel) /* the MLP reads lane 1, not x1 */
            RETURN_ON_FAILURE(mlp_norm_forward_lane(cb, a, lane1_input(cb, plan, run), ln, N));
        else
            RETURN_ON_FAILURE(cuda_add_norm_forward(NULL, a->rstd_mlp, a->m_in, cb->xm, a->ao,
                                                    block_param(cb, l, BLK_ATTN_SCALE), N, D, FLT_EPSILON, ln, dt, st));
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->u, CT_BF16, a->m_in, block_weight_bf16(cb, l, BLK_FC), N, D, HID));
        RETURN_ON_FAILURE(cuda_relu2_forward(cb->h, a->u, (size_t)N * HID, s->mlp_negative_slope, st));
        RETURN_ON_FAILURE(
            cuda_linear_forward(cb->blas, a->mo, CT_BF16, cb->h, block_weight_bf16(cb, l, BLK_MLP_PROJ), N, HID, D));
        RETURN_ON_FAILURE(cuda_lora_rows_forward(cb, run, LORA_MLP, a->m_in, a->mo, D)); /* TTT's mlp bypasses the MLP */
        if (cb->gram_dev) { /* GPTQ's calibration: this run's matrix inputs, before the next run's overwrite them */
            const int first = s->first_block + l * BLK_NUM_PARAMS; /* block l's parameters, BLK_* order */
            RETURN_ON_FAILURE(cuda_add_gram(cb, first + BLK_C_Q, cb->a_in, N, D));
            RETURN_ON_FAILURE(cuda_add_gram(cb, first + BLK_PROJ, proj_input(a, xsa), N, D));
            RETURN_ON_FAILURE(cuda_add_gram(cb, first + BLK_FC, a->m_in, N, D));
            RETURN_ON_FAILURE(cuda_add_gram(cb, first + BLK_MLP_PROJ, cb->h, N, HID));
        }
        if (plan->runs[run].parallel) { /* both lanes take both branches (lane 0 from x_in, past the mix) */
            const CudaLaneMixForward mix = {
                .out0 = a->x_out, .out1 = a->l1_out, .l0 = a->x_in_used, .l1 = lane1_input(cb, plan, run),
                .ao = a->ao, .mo = a->mo, .attn_scale = block_param(cb, l, BLK_ATTN_SCALE),
                .mlp_scale = block_param(cb, l, BLK_MLP_SCALE), .resid = lane_resid(cb, l, 0),
                .post = lane_post(cb, l, 0), .N = N, .C = D, .dtype = dt};
            RETURN_ON_FAILURE(cuda_lane_mix_forward(&mix, st));
        }
    }
    /* the last run's output (the others are made by the next run's input op, or lane_mix) */
    CudaLayer *z = &cb->layers[plan->num_runs - 1];
    const int last = plan->runs[plan->num_runs - 1].block;
    if (!plan->runs[plan->num_runs - 1].parallel)
        RETURN_ON_FAILURE(cuda_scaled_add_forward(z->x_out, cb->xm, z->ao, block_param(cb, last, BLK_ATTN_SCALE), z->mo,
                                                  block_param(cb, last, BLK_MLP_SCALE), N, D, dt, st));
    else if (s->parallel_final == PARALLEL_FINAL_MEAN)
        RETURN_ON_FAILURE(cuda_lane_mean_forward(cb->x_lanes, z->x_out, z->l1_out, ND, dt, st));
    RETURN_ON_FAILURE(
        cuda_rmsnorm_forward(NULL, cb->xf16, cb->rstdf, final_hidden(cb, plan), N, D, FLT_EPSILON, dt, st));
    return 0;
}

/* A parallel run's backward up to its attention (the CPU's cpu_run_backward): the lane mix's, in
 * place (dx: dL/d(lane 0 out) -> lane 0's own share of dL/d(x_in); cb->dl1 likewise for lane 1),
 * d ao into dao16 and d mo into gD16; the MLP's, adding into cb->dl1; then xm and a_in remade
 * (cb->xm, cb->a_in: the attention's backward reads them). */
static int lanes_backward(CudaBackend *cb, const BlockPlan *plan, int run, void *dx) {
    const ModelSpec *s = &cb->base.state->spec;
    CudaLayer *a = &cb->layers[run];
    const int l = plan->runs[run].block, N = cb->num_tokens, D = cb->dim, HID = cb->hidden, dt = cb->stream_dtype;
    const float ln = model_ln_scale(s, l);
    cudaStream_t st = cb->stream;
    const void *l1 = lane1_input(cb, plan, run);
    const CudaLaneMixBackward mix = {
        .dl0 = dx, .dl1 = cb->dl1, .dao_bf16 = cb->dao16, .dmo_bf16 = cb->gD16,
        .dattn_scale = block_grad(cb, l, BLK_ATTN_SCALE), .dmlp_scale = block_grad(cb, l, BLK_MLP_SCALE),
        .dresid = (float *)lane_resid(cb, l, 1), .dpost = (float *)lane_post(cb, l, 1), .d0 = dx, .d1 = cb->dl1,
        .l0 = a->x_in_used, .l1 = l1, .ao = a->ao, .mo = a->mo, .attn_scale = block_param(cb, l, BLK_ATTN_SCALE),
        .mlp_scale = block_param(cb, l, BLK_MLP_SCALE), .resid = lane_resid(cb, l, 0), .post = lane_post(cb, l, 0),
        .partials = cb->partials, .N = N, .C = D, .dtype = dt};
    RETURN_ON_FAILURE(cuda_lane_mix_backward(&mix, st));
    /* the MLP, as in a sequential block (h remade by relu^2's backward), to its norm of lane 1 */
    RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->gH16, CT_BF16, 0, NULL, cb->gD16, NULL,
                                           block_weight_bf16(cb, l, BLK_MLP_PROJ), N, HID, D));
    RETURN_ON_FAILURE(cuda_relu2_backward(cb->gH16, cb->h, cb->gH16, a->u, (size_t)N * HID, s->mlp_negative_slope, st));
    RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, NULL, CT_BF16, 0, matrix_grad(cb, l, BLK_MLP_PROJ), cb->gD16,
                                           cb->h, NULL, N, HID, D));
    RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, matrix_grad(cb, l, BLK_FC), cb->gH16, a->m_in,
                                           block_weight_bf16(cb, l, BLK_FC), N, D, HID));
    RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_MLP, a->m_in, cb->gD16, D, cb->dD2));
    if (s->ln_scale) RETURN_ON_FAILURE(cuda_scale_inplace(cb->dD2, ln, (size_t)N * D, st));
    RETURN_ON_FAILURE(cuda_rmsnorm_backward(cb->dl1, cb->dD2, l1, a->rstd_mlp, N, D, dt, st));
    /* xm = mix(x_in, x0) and a_in = bf16(rms_norm(xm) * ln), the forward's bits (rstd_attn rewritten
     * with the same) */
    const CudaMixNorm input = {.xm = cb->xm, .rstd = a->rstd_attn, .a_bf16 = cb->a_in, .x = a->x_in_used,
                               .x0 = cb->x0, .mix = block_param(cb, l, BLK_RESID_MIX), .N = N, .C = D,
                               .eps = FLT_EPSILON, .out_scale = ln, .dtype = dt};
    return cuda_mix_norm_forward(&input, st);
}

int cuda_backward_blocks(CudaBackend *cb) {
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
    if (plan->first_parallel == plan->num_runs) {
        RETURN_ON_FAILURE(cuda_rmsnorm_backward(dx, cb->dxf, final_hidden(cb, plan), cb->rstdf, N, D, dt, st));
    } else { /* dx: dL/d(lane 0's output), dl1: lane 1's, from the final norm's input (parallel_final) */
        const int final = s->parallel_final;
        RETURN_ON_FAILURE(zero_on_stream(cb, cb->dl1, ND * cb->stream_bytes, "cuda: zeroing dl1"));
        RETURN_ON_FAILURE(cuda_rmsnorm_backward(final == PARALLEL_FINAL_MLP ? cb->dl1 : dx, cb->dxf,
                                                final_hidden(cb, plan), cb->rstdf, N, D, dt, st));
        if (final == PARALLEL_FINAL_MEAN) RETURN_ON_FAILURE(cuda_lane_mean_backward(dx, cb->dl1, dx, ND, dt, st));
    }
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
        const int lanes = plan->runs[run].parallel;
        const float ln = model_ln_scale(s, l); /* m_in and a_in were the norms times ln */
        if (lanes) { /* dx: lane 0's share of dL/d(x_in) from here; d ao in dao16; a_in remade */
            RETURN_ON_FAILURE(lanes_backward(cb, plan, run, dx));
        } else {
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
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, NULL, CT_BF16, 0, matrix_grad(cb, l, BLK_MLP_PROJ),
                                                   cb->gD16, cb->h, NULL, N, HID, D));
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, matrix_grad(cb, l, BLK_FC), cb->gH16,
                                                   a->m_in, block_weight_bf16(cb, l, BLK_FC), N, D, HID));
            RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_MLP, a->m_in, cb->gD16, D, cb->dD2));
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
        }
        const ct_bf16 *dao = lanes ? cb->dao16 : cb->gD16; /* dL/d(attn.proj output) */
        const ParamInfo *gate_w = attn_gate(cb, l);
        const CudaHeadGateShape gs = gate_shape(cb, N);
        if (gate_w) {
            /* the gate: dL/d(gated y) in fp32 (dD2 is free until d a_in below); through the gate
             * in place where XSA follows (its input is fp32), else straight to the attention's
             * bf16 dy; the gate's logit gradient waits in gate_dz for d a_in */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, matrix_grad(cb, l, BLK_PROJ),
                                                   dao, a->y_gate16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
            RETURN_ON_FAILURE(cuda_head_gate_backward(xsa ? cb->dD2 : NULL, xsa ? NULL : cb->dy16,
                                                      cb->gate_dz, cb->d_grads + gate_w->offset, cb->dD2,
                                                      gate_input(a, xsa), a->gate, cb->a_in, &gs, cb->partials, st));
            if (xsa)
                RETURN_ON_FAILURE(cuda_xsa_backward(NULL, cb->dy16, NULL, NULL, cb->dD2, a->y16, a->qkv + D + KV,
                                                    &xsa_shape, st));
        } else if (xsa) {
            /* XSA: dL/d(y_xsa) in fp32 (dD2 is free until d a_in below), then through XSA to the
             * attention output's dy (bf16, the attention backward's input) */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, matrix_grad(cb, l, BLK_PROJ),
                                                   dao, a->y_xsa16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
            RETURN_ON_FAILURE(cuda_xsa_backward(NULL, cb->dy16, NULL, NULL, cb->dD2, a->y16, a->qkv + D + KV,
                                                &xsa_shape, st));
        } else {
            /* dy straight to bf16: the attention backward is its only consumer */
            RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dy16, CT_BF16, 0, matrix_grad(cb, l, BLK_PROJ),
                                                   dao, a->y16, block_weight_bf16(cb, l, BLK_PROJ), N, D, D));
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
        RETURN_ON_FAILURE(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, matrix_grad(cb, l, BLK_C_Q), cb->dqkv16,
                                               cb->a_in, block_weight_bf16(cb, l, BLK_C_Q), N, D, QKV));
        /* test-time training's adapters reading a_in (the CPU's order: o, from dao, still intact; q, k, v) */
        RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_O, cb->a_in, dao, D, cb->dD2));
        RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_Q, cb->a_in, cb->dqkv16, QKV, cb->dD2));
        RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_K, cb->a_in, cb->dqkv16 + D, QKV, cb->dD2));
        RETURN_ON_FAILURE(cuda_lora_rows_backward(cb, run, LORA_V, cb->a_in, cb->dqkv16 + D + KV, QKV, cb->dD2));
        if (gate_w) /* the gate read a_in's first gate_window channels */
            RETURN_ON_FAILURE(
                cuda_head_gate_input_backward(cb->dD2, cb->gate_dz, cb->d_params + gate_w->offset, &gs, st));
        if (s->ln_scale) RETURN_ON_FAILURE(cuda_scale_inplace(cb->dD2, ln, ND, st));
        /* the attention norm of xm = mix[0] * x_in + mix[1] * x0, then the mix: dx_alt becomes
         * dL/dx_in (written), dx is spent */
        if (lanes) {
            /* dL/dxm is the attention's alone (into dx_alt, zeroed); the mix adds its share to
             * lane 0's own in dx (the CPU's two ops; xm is in cb->xm, remade by lanes_backward) */
            RETURN_ON_FAILURE(zero_on_stream(cb, dx_alt, ND * cb->stream_bytes, "cuda: zeroing dxm"));
            RETURN_ON_FAILURE(cuda_rmsnorm_backward(dx_alt, cb->dD2, cb->xm, a->rstd_attn, N, D, dt, st));
            const CudaResidualMixBackward mix = {
                .dx = dx, .dx_accumulate = 1, .dx0 = cb->dx0, .dmix = block_grad(cb, l, BLK_RESID_MIX), .dout = dx_alt,
                .x = a->x_in_used, .x0 = cb->x0, .mix = block_param(cb, l, BLK_RESID_MIX), .partials = cb->partials,
                .N = N, .C = D, .dtype = dt};
            RETURN_ON_FAILURE(cuda_residual_mix_backward(&mix, st));
        } else {
            const CudaNormMixBackward attn_norm = {
                .dx_in = dx_alt, .dx0 = cb->dx0, .dmix = block_grad(cb, l, BLK_RESID_MIX), .dx = dx, .dout = cb->dD2,
                .rstd = a->rstd_attn, .x_in = a->x_in_used, .x0 = cb->x0, .mix = block_param(cb, l, BLK_RESID_MIX),
                .partials = cb->partials, .N = N, .C = D, .dtype = dt};
            RETURN_ON_FAILURE(cuda_norm_mix_backward(&attn_norm, st));
            void *t = dx;
            dx = dx_alt;
            dx_alt = t;
        }
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
        /* both lanes started from the previous run's output */
        if (run == plan->first_parallel) RETURN_ON_FAILURE(cuda_add_inplace(dx, cb->dl1, ND, dt, st));
        /* a block's gradients are final once its first run is through (model.h) */
        if (model_plan_first_run(plan, run))
            RETURN_ON_FAILURE(backend_grad_ready(&cb->base, model_grad_stage_of_block(s, l)));
    }
    /* below x0 sit only base parameters (the embeddings, the SmearGates, the bigram's): what
     * follows makes their gradients and dxf = d emb for the embedding's. A test-time-training
     * chunk that makes none stops here (no adapter reads anything below x0). */
    if (!makes_weight_grads(cb)) return 0;
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

#endif /* CT_HAVE_CUDA */
