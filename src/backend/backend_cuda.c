/* backend_cuda.c — the CUDA backend's host orchestration: device selection, the one device
 * allocation, token upload, the forward and backward through the parameter-golf GPT and the
 * optimizer step, all on one stream (kernels in kernels/cuda/cuda_*.cu, declared in cuda_ops.h).
 *
 * The graph, the saved activations and the backward order are the CPU backend's
 * (backend_cpu.c); the differences are the precision policy (bf16 operands of every matrix
 * product, so the tensors that only feed products are kept in bf16) and a few fusions
 * (block-input mix + norm, attention residual + norm). docs/cuda.md describes both. */
#include "backend_cuda.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

#ifndef CT_HAVE_CUDA

static int no_cuda(void) {
    return ct_fail("device = cuda: this ctrain was built without CUDA (nvcc was not found at build time); "
                   "rebuild with CUDA_HOME pointing at a CUDA toolkit, or use device=cpu");
}
int backend_cuda_create(Backend **out, const Config *cfg, TrainState *st) {
    (void)out, (void)cfg, (void)st;
    return no_cuda();
}
int backend_cuda_visible(char *why, size_t cap) {
    snprintf(why, cap, "this ctrain was built without CUDA");
    return 0;
}
int backend_cuda_choose_gpu(BackendGpu *gpu) {
    (void)gpu;
    return no_cuda();
}
int backend_cuda_sync_to_host(Backend *b) {
    (void)b;
    return no_cuda();
}
int backend_cuda_sync_from_host(Backend *b) {
    (void)b;
    return no_cuda();
}
void backend_cuda_set_ns_fp32(Backend *b, int on) { (void)b, (void)on; }
float *backend_cuda_device_grads(Backend *b) {
    (void)b;
    return NULL;
}
void backend_cuda_graph_counts(Backend *b, long long *captures, long long *launches) {
    (void)b;
    *captures = *launches = 0;
}
void *backend_cuda_stream(Backend *b) {
    (void)b;
    return NULL;
}
int backend_cuda_memory(Backend *b, CudaMemoryReport *report) {
    (void)b;
    memset(report, 0, sizeof *report);
    return no_cuda();
}
void backend_cuda_describe(Backend *b, char *buf, size_t cap) {
    (void)b;
    snprintf(buf, cap, "cuda: not built");
}

#else /* CT_HAVE_CUDA */

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cpu_attention.h" /* cpu_rope_tables_init: the tables are computed on the host, as the CPU's */
#include "cuda_ops.h"

#include "backend_common.h"
#include "muon_batches.h"

enum { CUBLAS_WORKSPACE_BYTES = 32 << 20, LOGITS_Z_TARGET_FLOATS = 16 << 20 };

/* Saved activations of one block; N = B*T rows. Tensors that only feed matrix products are bf16.
 * Not kept, because the kernels that need them recompute them (to the same bits) for less than
 * keeping them costs (docs/cuda.md, "Memory plan"): xm = mix[0] * x_in + mix[1] * x0 and x1 =
 * xm + attn_scale * ao (read from x_in, x0 and ao), the norm rms_norm(xm) that feeds
 * c_q/c_k/c_v and relu(u)^2; the forward writes xm, that norm and relu(u)^2 of the block being
 * computed into buffers shared by all blocks (CudaBackend.xm, .a_in, .h). */
typedef struct {
    float *x_in;            /* x + skip_weights * skip; allocated only for layers with a U-Net skip */
    const float *x_in_used; /* the block input of the last forward (x_in, or the previous output) */
    float *rstd_attn;
    /* c_q, c_k and c_v's outputs side by side, [N, D + 2 KV] (one product for the three): the
     * raw q and k (the QK-norm/RoPE backward needs them) and v (an attention input) */
    ct_bf16 *qkv;
    ct_bf16 *q16, *k16; /* attention inputs: normed, rotated q and k */
    ct_bf16 *y16;             /* attention output */
    float *lse;
    ct_bf16 *ao; /* attention projection output */
    float *rstd_mlp;
    ct_bf16 *m_in;
    ct_bf16 *u; /* fc output (relu^2's input and its backward's) */
    ct_bf16 *mo; /* MLP projection output */
    float *x_out;
} CudaLayer;

typedef struct {
    Backend base;
    int B, T, N, V, D, KV, HID, H, KVH, HD, L;
    int QKV; /* D + 2 KV: the width of CudaLayer.qkv's rows */
    int device;
    char device_name[256];
    int cc_major, cc_minor;
    cudaStream_t stream;
    cublasHandle_t blas;
    int ns_fp32;
    int chunk; /* logits chunk (tokens) */
    int grads_on_host; /* grad_buffer() handed out the host gradients: upload before stepping */

    /* A training micro-batch's forward and backward as one CUDA graph (docs/cuda.md, "CUDA
     * graph"): a few hundred launches become one. Captured at the second forward_backward (the first warms
     * cuBLAS and the kernels' attributes up), again when the loss weight changes (its logits
     * kernels take it as an argument); every pointer it holds is fixed at creation. */
    int graph_on;            /* cuda_graph = 1, no debug synchronisation, no failed capture yet */
    int graph_warm;          /* a micro-batch has run launch by launch */
    cudaGraphExec_t graph;   /* NULL until captured */
    float graph_loss_weight; /* the loss weight graph was captured with */
    long long graph_captures, graph_launches;

    /* the one device allocation and its accounting */
    void *arena;
    size_t arena_bytes, state_bytes, act_bytes, work_bytes;
    size_t free_before, free_after, total_mem;

    /* device state, flat layout of TrainState */
    float *d_params, *d_grads, *d_exp_avg, *d_exp_avg_sq, *d_momentum;
    ct_bf16 **w16; /* [num_params]: bf16 shadow of each parameter used in a product, else NULL */
    void *cublas_ws;

    /* tokens: pinned host staging and its device copy, one layout:
     * ids [N] | targets [N] | positions [N] | starts [V+1] | rows [V] */
    int32_t *h_tok, *d_tok;
    size_t tok_count;
    int emb_rows;
    double *h_scalars; /* pinned: [0] loss sum, [1] grad norm */
    double *d_scalars;

    /* activations */
    float *emb, *x0, *rstd0, *rstdf, *losses;
    ct_bf16 *xf16;
    float *xm;         /* the current block's xm, rms_norm(xm) and relu(u)^2 (see CudaLayer) */
    ct_bf16 *a_in, *h;
    CudaLayer *layers;
    float *rope_cos, *rope_sin;

    /* backward work buffers */
    float *dx, *dx_alt, *dx0, *dxf, *dD2, *dq, *dk;
    ct_bf16 *gD16, *gH16, *dy16;
    ct_bf16 *dqkv16; /* dL/d(c_q, c_k, c_v outputs), laid out as CudaLayer.qkv */
    float **dskip; /* dL/d(skip) of decoder block j, in that block's x_in (dead by then) */
    float *attn_D, *rope_scratch;
    double *partials;     /* column reductions */
    double *red_partials; /* whole-buffer reductions (loss sum, norms) */
    float *z;
    ct_bf16 *dz;

    /* optimizer: Muon's Newton–Schulz in batches of matrices of one shape (muon_batches.h) */
    MuonBatchPlan muon_plan;
    void *muon_scratch; /* the largest batch's */
} CudaBackend;

#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((x) != 0) return -1;                                                                   \
    } while (0)

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

#define TAKE_F(a, n, t) BACKEND_TAKE_FLOATS(a, n, t)
#define TAKE_D(a, n, t) BACKEND_TAKE_DOUBLES(a, n, t)
#define TAKE_H(a, n, t) ((ct_bf16 *)backend_arena_take((a), (size_t)(n) * sizeof(ct_bf16), (t)))

static int uses_bf16_shadow(const ModelSpec *s, int i) {
    const ParamInfo *p = &s->params[i];
    if (p->group == PARAM_MATRIX) return 1;
    return i == s->tok_emb ? s->tied : i == s->lm_head;
}

static void layout(CudaBackend *cb, BackendArena *a) {
    const ModelSpec *s = &cb->base.state->spec;
    const size_t N = (size_t)cb->N, D = (size_t)cb->D, KV = (size_t)cb->KV, HID = (size_t)cb->HID;
    const size_t total = s->total_floats;
    size_t *st = &cb->state_bytes, *act = &cb->act_bytes, *wk = &cb->work_bytes;
    cb->state_bytes = cb->act_bytes = cb->work_bytes = 0;

    cb->d_params = TAKE_F(a, total, st);
    cb->d_grads = TAKE_F(a, total, st);
    cb->d_exp_avg = TAKE_F(a, total, st);
    cb->d_exp_avg_sq = TAKE_F(a, total, st);
    cb->d_momentum = TAKE_F(a, total, st);
    for (int i = 0; i < s->num_params; i++) {
        const int in_blocks = i >= s->first_block && i < s->first_block + s->num_layers * BLK_NUM_PARAMS;
        if (in_blocks && (i - s->first_block) % BLK_NUM_PARAMS == BLK_C_Q) { /* [W_q; W_k; W_v], one [D + 2 KV, D] matrix for one product */
            ct_bf16 *w = TAKE_H(a, s->params[i].count + s->params[i + 1].count + s->params[i + 2].count, st);
            cb->w16[i] = w;
            cb->w16[i + 1] = w + s->params[i].count;
            cb->w16[i + 2] = w + s->params[i].count + s->params[i + 1].count;
            i += 2;
            continue;
        }
        cb->w16[i] = uses_bf16_shadow(s, i) ? TAKE_H(a, s->params[i].count, st) : NULL;
    }
    cb->cublas_ws = backend_arena_take(a, CUBLAS_WORKSPACE_BYTES, wk);

    cb->d_tok = (int32_t *)backend_arena_take(a, cb->tok_count * sizeof(int32_t), wk);
    cb->d_scalars = TAKE_D(a, 4, wk);

    cb->emb = TAKE_F(a, N * D, act);
    cb->x0 = TAKE_F(a, N * D, act);
    cb->rstd0 = TAKE_F(a, N, act);
    cb->xf16 = TAKE_H(a, N * D, act);
    cb->xm = TAKE_F(a, N * D, act);
    cb->a_in = TAKE_H(a, N * D, act);
    cb->h = TAKE_H(a, N * HID, act);
    cb->rstdf = TAKE_F(a, N, act);
    cb->losses = TAKE_F(a, N, act);
    for (int l = 0; l < cb->L; l++) {
        CudaLayer *y = &cb->layers[l];
        const int dec = l - s->num_encoder;
        y->x_in = dec >= 0 && dec < s->num_skip ? TAKE_F(a, N * D, act) : NULL;
        y->rstd_attn = TAKE_F(a, N, act);
        y->qkv = TAKE_H(a, N * (size_t)cb->QKV, act);
        y->q16 = TAKE_H(a, N * D, act);
        y->k16 = TAKE_H(a, N * KV, act);
        y->y16 = TAKE_H(a, N * D, act);
        y->lse = TAKE_F(a, N * (size_t)cb->H, act);
        y->ao = TAKE_H(a, N * D, act);
        y->rstd_mlp = TAKE_F(a, N, act);
        y->m_in = TAKE_H(a, N * D, act);
        y->u = TAKE_H(a, N * HID, act);
        y->mo = TAKE_H(a, N * D, act);
        y->x_out = TAKE_F(a, N * D, act);
    }
    cb->rope_cos = TAKE_F(a, (size_t)cb->T * (size_t)(cb->HD / 2), act);
    cb->rope_sin = TAKE_F(a, (size_t)cb->T * (size_t)(cb->HD / 2), act);

    cb->dx = TAKE_F(a, N * D, wk);
    cb->dx_alt = TAKE_F(a, N * D, wk);
    cb->dx0 = TAKE_F(a, N * D, wk);
    cb->dxf = TAKE_F(a, N * D, wk);
    cb->dD2 = TAKE_F(a, N * D, wk);
    cb->dq = TAKE_F(a, N * D, wk);
    cb->dk = TAKE_F(a, N * KV, wk);
    cb->dy16 = TAKE_H(a, N * D, wk);
    cb->gD16 = TAKE_H(a, N * D, wk);
    cb->gH16 = TAKE_H(a, N * HID, wk);
    cb->dqkv16 = TAKE_H(a, N * (size_t)cb->QKV, wk);
    /* decoder block num_encoder + j writes dL/d(skip j) after its residual-mix backward has read
     * its x_in for the last time; encoder block num_encoder - 1 - j consumes it later */
    for (int j = 0; j < s->num_skip; j++) cb->dskip[j] = cb->layers[s->num_encoder + j].x_in;
    cb->attn_D = TAKE_F(a, cuda_attention_backward_scratch_floats(cb->B, cb->T, cb->H), wk);
    cb->rope_scratch = TAKE_F(a, cuda_qk_norm_rope_backward_scratch_floats(cb->B, cb->T, cb->H), wk);
    size_t colsum = max_size(cuda_colsum_doubles(cb->N, cb->D, 2),
                             cuda_qk_norm_rope_backward_partials_doubles(cb->B, cb->T, cb->H));
    cb->partials = TAKE_D(a, colsum, wk);
    cb->z = TAKE_F(a, cuda_logits_z_floats(cb->chunk, cb->V), wk);
    cb->dz = TAKE_H(a, cuda_logits_dz_elems(cb->chunk, cb->V), wk);

    size_t scratch = 1, reduce = cuda_reduce_doubles(N);
    reduce = max_size(reduce, cuda_reduce_doubles(total));
    for (int j = 0; j < cb->muon_plan.num_batches; j++) {
        const MuonBatch *k = &cb->muon_plan.batches[j];
        scratch = max_size(scratch, cuda_muon_scratch_bytes(k->m, k->n, k->count));
        reduce = max_size(reduce, cuda_reduce_doubles((size_t)k->m * (size_t)k->n));
    }
    cb->muon_scratch = backend_arena_take(a, scratch, wk);
    cb->red_partials = TAKE_D(a, reduce + 1, wk);
}

static const float *P(const CudaBackend *cb, int layer, int which) {
    return cb->d_params + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
static float *G(const CudaBackend *cb, int layer, int which) {
    return cb->d_grads + model_block_param(&cb->base.state->spec, layer, which)->offset;
}
static const ct_bf16 *W16(const CudaBackend *cb, int layer, int which) {
    const ModelSpec *s = &cb->base.state->spec;
    return cb->w16[s->first_block + layer * BLK_NUM_PARAMS + which];
}
static int out_index(const CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    return s->tied ? s->tok_emb : s->lm_head;
}

static int refresh_shadows(CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    for (int i = 0; i < s->num_params; i++)
        if (cb->w16[i])
            TRY(cuda_f32_to_bf16(cb->w16[i], cb->d_params + s->params[i].offset, s->params[i].count, cb->stream));
    return 0;
}

static int sync_stream(CudaBackend *cb, const char *what) {
    return cuda_check(cudaStreamSynchronize(cb->stream), what);
}

/* ---- tokens ---- */

/* Checks ids like the CPU backend, fills the pinned staging buffer (with the embedding
 * backward's index when with_index) and uploads it. N = tokens of this call. */
static int load_tokens(CudaBackend *cb, const uint32_t *tokens, int N, int with_index) {
    TRY(backend_check_tokens(tokens, (size_t)N + 1, cb->V));
    /* the previous upload from the staging buffer must be done before it is rewritten */
    TRY(sync_stream(cb, "cuda: waiting for the previous token upload"));
    int32_t *ids = cb->h_tok, *targets = ids + cb->N, *positions = targets + cb->N;
    int32_t *starts = positions + cb->N, *rows = starts + cb->V + 1;
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)tokens[i];
        targets[i] = (int32_t)tokens[i + 1];
    }
    size_t count = 2 * (size_t)cb->N;
    if (with_index) {
        cuda_embedding_index(ids, N, cb->V, rows, starts, positions, &cb->emb_rows);
        count = cb->tok_count;
    }
    return cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, count * sizeof(int32_t), cudaMemcpyHostToDevice, cb->stream),
                      "cuda: token upload (cudaMemcpyAsync)");
}

/* ---- forward ---- */

static int forward_blocks(CudaBackend *cb, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = B * cb->T, D = cb->D, KV = cb->KV, HID = cb->HID, QKV = cb->QKV;
    cudaStream_t st = cb->stream;
    const int32_t *d_ids = cb->d_tok;
    TRY(cuda_embedding_forward(cb->emb, d_ids, cb->d_params + s->params[s->tok_emb].offset, N, D, st));
    TRY(cuda_rmsnorm_forward(cb->x0, NULL, cb->rstd0, cb->emb, N, D, FLT_EPSILON, st));
    const float *x = cb->x0;
    const float *skip_w = cb->d_params + s->params[s->skip_weights].offset;
    for (int l = 0; l < cb->L; l++) {
        CudaLayer *a = &cb->layers[l];
        const int dec = l - s->num_encoder;
        const float *skip = NULL;
        if (dec >= 0 && dec < s->num_skip) skip = cb->layers[s->num_encoder - 1 - dec].x_out;
        if (l == 0) {
            TRY(cuda_mix_norm_forward(skip ? a->x_in : NULL, cb->xm, a->rstd_attn, cb->a_in, x, skip,
                                      skip ? skip_w + (size_t)dec * D : NULL, cb->x0, P(cb, l, BLK_RESID_MIX), N, D,
                                      FLT_EPSILON, st));
        } else {
            /* the block before's output x_out = (xm + attn_scale * ao) + mlp_scale * mo (x1
             * recomputed, as add_norm_forward made it), written, and this block's input from it,
             * in one pass (the skip may be that very x_out: each element is written before it
             * is read there) */
            const CudaLayer *b = &cb->layers[l - 1];
            const CudaBlockOutput prev = {b->x_out, cb->xm, b->ao, b->mo, P(cb, l - 1, BLK_ATTN_SCALE),
                                          P(cb, l - 1, BLK_MLP_SCALE)};
            TRY(cuda_out_mix_norm_forward(&prev, skip ? a->x_in : NULL, cb->xm, a->rstd_attn, cb->a_in, skip,
                                          skip ? skip_w + (size_t)dec * D : NULL, cb->x0, P(cb, l, BLK_RESID_MIX), N,
                                          D, FLT_EPSILON, st));
            x = b->x_out;
        }
        a->x_in_used = skip ? a->x_in : x;
        /* [q | k | v] = a_in [W_q; W_k; W_v]^T: one product, rows of QKV */
        TRY(cuda_linear_forward(cb->blas, a->qkv, CT_BF16, cb->a_in, W16(cb, l, BLK_C_Q), N, D, QKV));
        TRY(cuda_qk_norm_rope_forward(NULL, a->q16, a->qkv, P(cb, l, BLK_Q_GAIN), cb->rope_cos, cb->rope_sin, B, cb->T,
                                      cb->H, cb->HD, QKV, st));
        TRY(cuda_qk_norm_rope_forward(NULL, a->k16, a->qkv + D, NULL, cb->rope_cos, cb->rope_sin, B, cb->T, cb->KVH,
                                      cb->HD, QKV, st));
        TRY(cuda_attention_forward(a->y16, a->lse, a->q16, a->k16, a->qkv + D + KV, QKV, B, cb->T, cb->H, cb->KVH,
                                   cb->HD, st));
        TRY(cuda_linear_forward(cb->blas, a->ao, CT_BF16, a->y16, W16(cb, l, BLK_PROJ), N, D, D));
        TRY(cuda_add_norm_forward(NULL, a->rstd_mlp, a->m_in, cb->xm, a->ao, P(cb, l, BLK_ATTN_SCALE), N, D,
                                  FLT_EPSILON, st));
        TRY(cuda_linear_forward(cb->blas, a->u, CT_BF16, a->m_in, W16(cb, l, BLK_FC), N, D, HID));
        TRY(cuda_relu2_forward(cb->h, a->u, (size_t)N * HID, st));
        TRY(cuda_linear_forward(cb->blas, a->mo, CT_BF16, cb->h, W16(cb, l, BLK_MLP_PROJ), N, HID, D));
    }
    /* the last block's output (the others are made by the next block's input op) */
    const int last = cb->L - 1;
    CudaLayer *z = &cb->layers[last];
    TRY(cuda_scaled_add_forward(z->x_out, cb->xm, z->ao, P(cb, last, BLK_ATTN_SCALE), z->mo, P(cb, last, BLK_MLP_SCALE),
                                N, D, st));
    TRY(cuda_rmsnorm_forward(NULL, cb->xf16, cb->rstdf, z->x_out, N, D, FLT_EPSILON, st));
    return 0;
}

static int zero(CudaBackend *cb, void *p, size_t bytes, const char *what) {
    return cuda_check(cudaMemsetAsync(p, 0, bytes, cb->stream), what);
}

static int cuda_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum) {
    CudaBackend *cb = (CudaBackend *)b;
    *loss_sum = 0;
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        const int N = B * cb->T;
        TRY(load_tokens(cb, tokens + (size_t)first * cb->T, N, 0));
        TRY(forward_blocks(cb, B));
        const int32_t *d_targets = cb->d_tok + cb->N;
        TRY(cuda_logits_ce_forward(cb->blas, cb->losses, cb->xf16, cb->w16[out_index(cb)], d_targets, N, cb->D, cb->V,
                                   cb->base.state->spec.softcap, cb->z, cb->chunk, cb->stream));
        TRY(cuda_sum(cb->d_scalars, cb->losses, (size_t)N, cb->red_partials, cb->stream));
        TRY(cuda_check(cudaMemcpyAsync(cb->h_scalars, cb->d_scalars, sizeof(double), cudaMemcpyDeviceToHost, cb->stream),
                       "cuda evaluate: loss download"));
        if (sync_stream(cb, "cuda evaluate") != 0) return -1;
        *loss_sum += cb->h_scalars[0];
    }
    return 0;
}

/* The softcapped logits at position pos of one sequence (for sampling): the blocks' forward
 * for that sequence, the output product for the one row (bf16 operands, as in training), the
 * softcap on the host in the CPU backend's fp32 operations. */
static int cuda_position_logits(Backend *b, const uint32_t *tokens, int pos, float *logits) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    if (pos < 0 || pos >= cb->T) return ct_fail("position %d outside the sequence of %d tokens", pos, cb->T);
    TRY(backend_check_tokens(tokens, (size_t)cb->T, cb->V));
    TRY(sync_stream(cb, "cuda: waiting for the previous token upload"));
    for (int i = 0; i < cb->T; i++) cb->h_tok[i] = (int32_t)tokens[i];
    TRY(cuda_check(cudaMemcpyAsync(cb->d_tok, cb->h_tok, (size_t)cb->T * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   cb->stream),
                   "cuda: token upload (cudaMemcpyAsync)"));
    TRY(forward_blocks(cb, 1));
    /* z[0, :] = xf[pos, :] @ W^T, in the logits scratch */
    TRY(cuda_linear_forward(cb->blas, cb->z, CT_F32, cb->xf16 + (size_t)pos * cb->D, cb->w16[out_index(cb)], 1, cb->D,
                            cb->V));
    TRY(cuda_check(cudaMemcpyAsync(logits, cb->z, (size_t)cb->V * sizeof(float), cudaMemcpyDeviceToHost, cb->stream),
                   "cuda: logits download"));
    TRY(sync_stream(cb, "cuda position_logits"));
    for (int v = 0; v < cb->V; v++) logits[v] = s->softcap * tanhf(logits[v] / s->softcap);
    return 0;
}

/* ---- forward + backward ---- */

static int backward_blocks(CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    const int B = cb->B, T = cb->T, N = cb->N, D = cb->D, KV = cb->KV, HID = cb->HID, QKV = cb->QKV;
    const size_t ND = (size_t)N * D;
    cudaStream_t st = cb->stream;
    float *dx = cb->dx, *dx_alt = cb->dx_alt;
    TRY(zero(cb, dx, ND * sizeof(float), "cuda: zeroing dx"));
    TRY(cuda_rmsnorm_backward(dx, cb->dxf, cb->layers[cb->L - 1].x_out, cb->rstdf, N, D, st));
    TRY(zero(cb, cb->dx0, ND * sizeof(float), "cuda: zeroing dx0"));
    float *dskip_w = cb->d_grads + s->params[s->skip_weights].offset;
    const float *skip_w = cb->d_params + s->params[s->skip_weights].offset;

    for (int l = cb->L - 1; l >= 0; l--) {
        CudaLayer *a = &cb->layers[l];
        /* dx holds dL/d(x_out); an encoder block whose output fed a skip also gets that path */
        const int skip_user = s->num_encoder - 1 - l;
        if (l < s->num_encoder && skip_user < s->num_skip) TRY(cuda_add_inplace(dx, cb->dskip[skip_user], ND, st));
        /* x_out = x1 + mlp_scale * mo (dx stays dL/dx1 on the residual path) */
        TRY(cuda_scaled_add_backward(NULL, NULL, cb->gD16, G(cb, l, BLK_MLP_SCALE), dx, NULL, a->mo,
                                     P(cb, l, BLK_MLP_SCALE), N, D, cb->partials, st));
        /* dh as bf16 (it only meets relu^2's backward, whose bf16 result overwrites it in place);
         * the weight gradient needs h = relu(u)^2, which relu^2's backward remakes in the same
         * pass over u, so that product comes after it */
        TRY(cuda_linear_backward(cb->blas, cb->gH16, CT_BF16, 0, NULL, cb->gD16, NULL, W16(cb, l, BLK_MLP_PROJ), N,
                                 HID, D));
        TRY(cuda_relu2_backward(cb->gH16, cb->h, cb->gH16, a->u, (size_t)N * HID, st));
        TRY(cuda_linear_backward(cb->blas, NULL, CT_BF16, 0, G(cb, l, BLK_MLP_PROJ), cb->gD16, cb->h, NULL, N, HID, D));
        TRY(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, G(cb, l, BLK_FC), cb->gH16, a->m_in, W16(cb, l, BLK_FC), N, D,
                                 HID));
        /* the MLP norm's input x1 = xm + attn_scale * ao, xm = mix(x_in, x0), recomputed; a_in =
         * rms_norm(xm) too, for the c_q/c_k/c_v weight gradients below; and, in the same pass,
         * x1's residual add: d ao = bf16(attn_scale * dx), d attn_scale += sum dx * ao */
        TRY(cuda_add_norm_backward(dx, cb->a_in, cb->gD16, G(cb, l, BLK_ATTN_SCALE), cb->dD2, a->x_in_used, cb->x0,
                                   P(cb, l, BLK_RESID_MIX), a->ao, P(cb, l, BLK_ATTN_SCALE), a->rstd_mlp, a->rstd_attn,
                                   N, D, cb->partials, st));
        /* dy straight to bf16: the attention backward is its only consumer */
        TRY(cuda_linear_backward(cb->blas, cb->dy16, CT_BF16, 0, G(cb, l, BLK_PROJ), cb->gD16, a->y16,
                                 W16(cb, l, BLK_PROJ), N, D, D));
        /* writes dq, dk (fp32: the QK-norm/RoPE backward's input) and dv (bf16, into dqkv16) */
        TRY(cuda_attention_backward(cb->dq, cb->dk, cb->dqkv16 + D + KV, cb->dy16, a->q16, a->k16, a->qkv + D + KV, QKV,
                                    a->y16, a->lse, B, T, cb->H, cb->KVH, cb->HD, cb->attn_D, st));
        TRY(cuda_qk_norm_rope_backward(NULL, cb->dqkv16, G(cb, l, BLK_Q_GAIN), cb->dq, a->qkv, P(cb, l, BLK_Q_GAIN),
                                       cb->rope_cos, cb->rope_sin, B, T, cb->H, cb->HD, QKV, cb->rope_scratch,
                                       cb->partials, st));
        TRY(cuda_qk_norm_rope_backward(NULL, cb->dqkv16 + D, NULL, cb->dk, a->qkv + D, NULL, cb->rope_cos, cb->rope_sin,
                                       B, T, cb->KVH, cb->HD, QKV, NULL, NULL, st));
        /* d a_in = [dq_raw | dk_raw | dv] [W_q; W_k; W_v] (one product over the QKV columns, written);
         * the three weight gradients (consecutive in the flat buffer) += dqkv^T a_in, one product */
        TRY(cuda_linear_backward(cb->blas, cb->dD2, CT_F32, 0, G(cb, l, BLK_C_Q), cb->dqkv16, cb->a_in,
                                 W16(cb, l, BLK_C_Q), N, D, QKV));
        /* the attention norm of xm = mix[0] * x_in + mix[1] * x0, then the mix: dx_alt becomes
         * dL/dx_in (written), dx is spent */
        TRY(cuda_norm_mix_backward(dx_alt, cb->dx0, G(cb, l, BLK_RESID_MIX), dx, cb->dD2, a->x_in_used, cb->x0,
                                   P(cb, l, BLK_RESID_MIX), a->rstd_attn, N, D, cb->partials, st));
        float *t = dx;
        dx = dx_alt;
        dx_alt = t;
        /* x_in = x_prev + skip_weights[dec] * skip for decoder blocks with a skip */
        const int dec = l - s->num_encoder;
        if (dec >= 0 && dec < s->num_skip)
            TRY(cuda_scaled_add_backward(NULL, cb->dskip[dec], NULL, dskip_w + (size_t)dec * D, dx,
                                         cb->layers[s->num_encoder - 1 - dec].x_out, NULL, skip_w + (size_t)dec * D, N, D,
                                         cb->partials, st));
        TRY(backend_grad_ready(&cb->base, model_grad_stage_of_block(s, l)));
    }
    /* x0 = rms_norm(emb) feeds block 0 directly (dx) and every resid_mix (dx0) */
    TRY(cuda_add_inplace(dx, cb->dx0, ND, st));
    TRY(zero(cb, cb->dxf, ND * sizeof(float), "cuda: zeroing d emb"));
    return cuda_rmsnorm_backward(cb->dxf, dx, cb->emb, cb->rstd0, N, D, st);
}

/* The embedding's weight gradient from d emb (in dxf): its grid is the number of distinct token
 * ids of the micro-batch, known on the host only, so it stays out of the micro-batch graph. */
static int embedding_backward(CudaBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    const int32_t *positions = cb->d_tok + 2 * (size_t)cb->N;
    const int32_t *starts = positions + cb->N, *rows = starts + cb->V + 1;
    TRY(cuda_embedding_backward(cb->d_grads + s->params[s->tok_emb].offset, cb->dxf, rows, starts, positions,
                                cb->emb_rows, cb->D, cb->stream));
    return backend_grad_ready(&cb->base, model_grad_num_stages(s) - 1);
}

/* Everything of a training micro-batch between the token upload and the embedding backward:
 * the forward, the logits and loss with their backward, the loss download, the blocks'
 * backward. Queued on the stream (no synchronisation), so it can be captured as it is. */
static int micro_batch_body(CudaBackend *cb, float loss_weight) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = cb->N;
    TRY(forward_blocks(cb, cb->B));
    TRY(zero(cb, cb->dxf, (size_t)N * cb->D * sizeof(float), "cuda: zeroing d xf"));
    const int out = out_index(cb);
    TRY(cuda_logits_ce_forward_backward(cb->blas, cb->dxf, cb->d_grads + s->params[out].offset, cb->losses, cb->xf16,
                                        cb->w16[out], cb->d_tok + N, N, cb->D, cb->V, s->softcap, loss_weight, cb->z,
                                        cb->dz, cb->chunk, cb->stream));
    TRY(cuda_sum(cb->d_scalars, cb->losses, (size_t)N, cb->red_partials, cb->stream));
    TRY(cuda_check(cudaMemcpyAsync(cb->h_scalars, cb->d_scalars, sizeof(double), cudaMemcpyDeviceToHost, cb->stream),
                   "cuda: loss download"));
    TRY(backend_grad_ready(&cb->base, 0));
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

static int cuda_forward_backward(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    const int N = cb->N;
    if (cb->grads_on_host) {
        /* the host gradients were handed out (grad_buffer) and may have been changed: they are
         * the ones to keep accumulating into */
        TRY(cuda_check(cudaMemcpyAsync(cb->d_grads, b->state->grads, s->total_floats * sizeof(float),
                                       cudaMemcpyHostToDevice, cb->stream),
                       "cuda: gradient upload"));
        cb->grads_on_host = 0;
    }
    TRY(load_tokens(cb, tokens, N, 1));
    /* the graph holds no gradient-ready reports: a micro-batch whose backward reports them (the
     * last of a step in an NCCL job) is launched op by op */
    const int graphed = cb->graph_on && cb->graph_warm && !b->grad_ready;
    if (graphed && (!cb->graph || cb->graph_loss_weight != loss_weight)) capture_micro_batch(cb, loss_weight);
    if (graphed && cb->graph) {
        TRY(cuda_check(cudaGraphLaunch(cb->graph, cb->stream), "cuda: launching the micro-batch's CUDA graph"));
        cb->graph_launches++;
    } else {
        TRY(micro_batch_body(cb, loss_weight));
        cb->graph_warm = 1;
    }
    TRY(embedding_backward(cb));
    TRY(sync_stream(cb, "cuda forward_backward"));
    *mean_loss = cb->h_scalars[0] / N;
    TRY(backend_check_loss(*mean_loss));
    return 0;
}

/* ---- optimizer ---- */

static float *cuda_grad_buffer(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    if (!cb->grads_on_host) {
        if (cuda_check(cudaMemcpyAsync(b->state->grads, cb->d_grads, b->state->spec.total_floats * sizeof(float),
                                       cudaMemcpyDeviceToHost, cb->stream),
                       "cuda: gradient download") != 0 ||
            sync_stream(cb, "cuda: gradient download") != 0)
            return NULL;
        cb->grads_on_host = 1;
    }
    return b->state->grads;
}

/* The flat range that holds every Muon matrix (the blocks' parameters), for the one sum that
 * combines sharded updates; the control tensors inside it are zeroed before that sum. */
static void matrix_range(const ModelSpec *s, size_t *begin, size_t *end) {
    *begin = (size_t)-1;
    *end = 0;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        if (p->offset < *begin) *begin = p->offset;
        if (p->offset + p->count > *end) *end = p->offset + p->count;
    }
}

/* Muon on batch j of the plan: the updates (in the gradients' place) on the rank that owns the
 * batch, the momentum alone (and +0 updates) on the others. */
static int muon_batch_step(CudaBackend *cb, int j, const StepHyper *h, int world) {
    const ModelSpec *s = &cb->base.state->spec;
    const MuonBatch *k = &cb->muon_plan.batches[j];
    const int *members = cb->muon_plan.params + k->first;
    if (muon_batch_owner(j, world) != h->shard_rank % world) {
        for (int i = 0; i < k->count; i++) {
            const ParamInfo *p = &s->params[members[i]];
            if (cuda_muon_momentum_advance(cb->d_grads + p->offset, cb->d_momentum + p->offset, p->count,
                                           h->muon_momentum, cb->stream) != 0)
                return ct_fail_prefix("optimizer step, %s", p->name);
        }
        return 0;
    }
    CudaMuonMatrix mats[MUON_BATCH_MAX];
    for (int i = 0; i < k->count; i++) {
        const ParamInfo *p = &s->params[members[i]];
        float *g = cb->d_grads + p->offset;
        mats[i] = (CudaMuonMatrix){g, g, cb->d_momentum + p->offset, (int)p->shape[0], (int)p->shape[1]};
    }
    if (cuda_muon_update_batch(cb->blas, mats, k->count, h->muon_momentum, 1, h->muon_steps, cb->ns_fp32,
                               cb->muon_scratch, cb->red_partials, cb->stream) != 0)
        return ct_fail_prefix("optimizer step, Muon batch %d (%s and %d more)", j, s->params[members[0]].name,
                              k->count - 1);
    return 0;
}

/* Adam on the embeddings and control tensors, then Muon: each matrix's update is written in
 * its gradient's place (the gradient is not needed after the momentum step), batch by batch
 * (muon_batches.h). With combine_device, batch j's updates are computed only on rank
 * j % shard_world (the others advance its momentum and leave +0 there) and one sum across
 * ranks over the blocks' range gives every rank every update, bitwise what it would have
 * computed itself: the batches, and so the products, are the same on any number of ranks. */
static int cuda_optimizer_step(Backend *b, const StepHyper *h, double *grad_norm) {
    CudaBackend *cb = (CudaBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    cudaStream_t stream = cb->stream;
    *grad_norm = 0;
    if (cb->grads_on_host) {
        TRY(cuda_check(cudaMemcpyAsync(cb->d_grads, st->grads, s->total_floats * sizeof(float), cudaMemcpyHostToDevice,
                                       stream),
                       "cuda: gradient upload"));
        cb->grads_on_host = 0;
    }
    if (h->grad_clip_norm > 0) {
        TRY(cuda_clip_grad_norm(cb->d_grads, s->total_floats, h->grad_clip_norm, cb->d_scalars + 1, cb->red_partials,
                                stream));
        TRY(cuda_check(cudaMemcpyAsync(cb->h_scalars + 1, cb->d_scalars + 1, sizeof(double), cudaMemcpyDeviceToHost,
                                       stream),
                       "cuda: gradient norm download"));
    }
    st->adam_step++;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group == PARAM_MATRIX) continue;
        if (cuda_adam_step(cb->d_params + p->offset, cb->w16[i], cb->d_grads + p->offset, cb->d_exp_avg + p->offset,
                           cb->d_exp_avg_sq + p->offset, p->count, backend_adam_lr(p->group, h), h->beta1, h->beta2,
                           h->adam_eps, st->adam_step, stream) != 0)
            return ct_fail_prefix("optimizer step, %s", p->name);
    }
    const int sharded = h->combine_device != NULL;
    const int world = sharded && h->shard_world > 1 ? h->shard_world : 1;
    for (int j = 0; j < cb->muon_plan.num_batches; j++) TRY(muon_batch_step(cb, j, h, world));
    if (sharded) {
        size_t begin, end;
        matrix_range(s, &begin, &end);
        for (int i = 0; i < s->num_params; i++) { /* the control tensors there are spent: +0 in the sum */
            const ParamInfo *p = &s->params[i];
            if (p->group != PARAM_MATRIX && p->offset >= begin && p->offset < end)
                TRY(zero(cb, cb->d_grads + p->offset, p->count * sizeof(float), "cuda: zeroing spent gradients"));
        }
        if (end > begin && h->combine_device(h->combine_ctx, cb->d_grads + begin, end - begin, stream) != 0)
            return ct_fail_prefix("combining the Muon updates");
    }
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (p->group != PARAM_MATRIX) continue;
        if (cuda_muon_apply(cb->d_params + p->offset, cb->w16[i], cb->d_grads + p->offset, p->count, h->matrix_lr,
                            stream) != 0)
            return ct_fail_prefix("optimizer step, %s", p->name);
    }
    TRY(zero(cb, cb->d_grads, s->total_floats * sizeof(float), "cuda: zeroing the gradients"));
    TRY(sync_stream(cb, "cuda optimizer_step"));
    if (h->grad_clip_norm > 0) *grad_norm = cb->h_scalars[1];
    return 0;
}

/* ---- state sync ---- */

static int copy_state(CudaBackend *cb, int to_host) {
    TrainState *st = cb->base.state;
    const size_t bytes = st->spec.total_floats * sizeof(float);
    float *host[5] = {st->params, st->grads, st->exp_avg, st->exp_avg_sq, st->momentum};
    float *dev[5] = {cb->d_params, cb->d_grads, cb->d_exp_avg, cb->d_exp_avg_sq, cb->d_momentum};
    const char *names[5] = {"params", "grads", "exp_avg", "exp_avg_sq", "momentum"};
    for (int i = 0; i < 5; i++) {
        if (i == 1 && to_host && cb->grads_on_host) continue; /* the host copy is the current one */
        char what[96];
        snprintf(what, sizeof what, "cuda: %s %s", to_host ? "download of" : "upload of", names[i]);
        TRY(cuda_check(cudaMemcpyAsync(to_host ? (void *)host[i] : (void *)dev[i], to_host ? (void *)dev[i] : (void *)host[i],
                                       bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cb->stream),
                       what));
    }
    if (!to_host) {
        cb->grads_on_host = 0;
        TRY(refresh_shadows(cb));
    }
    return sync_stream(cb, to_host ? "cuda: state download" : "cuda: state upload");
}

int backend_cuda_sync_to_host(Backend *b) { return copy_state((CudaBackend *)b, 1); }

/* Backend.sync_to_host, before a checkpoint: only what a checkpoint holds (ckpt_layout.c) — the
 * weights, Muon's momentum of the matrices, Adam's moments of the others — in runs of
 * neighbouring parameters; not the gradients (zero after every step) nor the unused halves of
 * the optimizer buffers. For the baseline that is 138 MB instead of 341 MB, which shortens the
 * pause of a background checkpoint. */
static int cuda_sync_for_checkpoint(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    TRY(cuda_check(cudaMemcpyAsync(st->params, cb->d_params, s->total_floats * sizeof(float), cudaMemcpyDeviceToHost,
                                   cb->stream),
                   "cuda: download of params"));
    for (int i = 0; i < s->num_params;) {
        const int matrix = s->params[i].group == PARAM_MATRIX;
        const size_t begin = s->params[i].offset;
        int j = i + 1;
        while (j < s->num_params && (s->params[j].group == PARAM_MATRIX) == matrix) j++;
        const size_t bytes = (s->params[j - 1].offset + s->params[j - 1].count - begin) * sizeof(float);
        if (matrix) {
            TRY(cuda_check(cudaMemcpyAsync(st->momentum + begin, cb->d_momentum + begin, bytes, cudaMemcpyDeviceToHost,
                                           cb->stream),
                           "cuda: download of momentum"));
        } else {
            TRY(cuda_check(cudaMemcpyAsync(st->exp_avg + begin, cb->d_exp_avg + begin, bytes, cudaMemcpyDeviceToHost,
                                           cb->stream),
                           "cuda: download of exp_avg"));
            TRY(cuda_check(cudaMemcpyAsync(st->exp_avg_sq + begin, cb->d_exp_avg_sq + begin, bytes,
                                           cudaMemcpyDeviceToHost, cb->stream),
                           "cuda: download of exp_avg_sq"));
        }
        i = j;
    }
    return sync_stream(cb, "cuda: state download for a checkpoint");
}
int backend_cuda_sync_from_host(Backend *b) { return copy_state((CudaBackend *)b, 0); }

void backend_cuda_set_ns_fp32(Backend *b, int on) { ((CudaBackend *)b)->ns_fp32 = on ? 1 : 0; }
float *backend_cuda_device_grads(Backend *b) { return ((CudaBackend *)b)->d_grads; }
void backend_cuda_graph_counts(Backend *b, long long *captures, long long *launches) {
    const CudaBackend *cb = (const CudaBackend *)b;
    *captures = cb->graph_captures;
    *launches = cb->graph_launches;
}
void *backend_cuda_stream(Backend *b) { return (void *)((CudaBackend *)b)->stream; }

int backend_cuda_memory(Backend *b, CudaMemoryReport *r) {
    const CudaBackend *cb = (const CudaBackend *)b;
    memset(r, 0, sizeof *r);
    snprintf(r->device_name, sizeof r->device_name, "%s", cb->device_name);
    r->cc_major = cb->cc_major;
    r->cc_minor = cb->cc_minor;
    r->device_index = cb->device;
    r->arena_bytes = cb->arena_bytes;
    r->state_bytes = cb->state_bytes;
    r->activation_bytes = cb->act_bytes;
    r->work_bytes = cb->work_bytes;
    r->cublas_workspace_bytes = CUBLAS_WORKSPACE_BYTES;
    r->device_used_bytes = cb->free_before > cb->free_after ? cb->free_before - cb->free_after : 0;
    r->device_total_bytes = cb->total_mem;
    r->micro_batch_seqs = cb->B;
    r->logits_chunk = cb->chunk;
    r->ns_fp32 = cb->ns_fp32;
    return 0;
}

void backend_cuda_describe(Backend *b, char *buf, size_t cap) {
    CudaMemoryReport r;
    backend_cuda_memory(b, &r);
    const double MiB = 1024.0 * 1024.0;
    snprintf(buf, cap,
             "cuda: device %d %s (sm_%d%d), %.1f MiB allocated (state %.1f, activations %.1f, work %.1f), device "
             "memory used %.1f / %.1f MiB, Newton-Schulz %s",
             r.device_index, r.device_name, r.cc_major, r.cc_minor, r.arena_bytes / MiB, r.state_bytes / MiB,
             r.activation_bytes / MiB, r.work_bytes / MiB, r.device_used_bytes / MiB, r.device_total_bytes / MiB,
             r.ns_fp32 ? "fp32" : "bf16");
}

/* ---- creation ---- */

static void cuda_destroy(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    if (!cb) return;
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    if (cb->graph) cudaGraphExecDestroy(cb->graph);
    if (cb->blas) cublasDestroy(cb->blas);
    if (cb->arena) cudaFree(cb->arena);
    if (cb->h_tok) cudaFreeHost(cb->h_tok);
    if (cb->h_scalars) cudaFreeHost(cb->h_scalars);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb->w16);
    free(cb->dskip);
    free(cb->layers);
    muon_batch_plan_free(&cb->muon_plan);
    free(cb);
}

int backend_cuda_visible(char *why, size_t cap) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        snprintf(why, cap, "no CUDA device visible (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(why, cap, "%d CUDA device%s visible, the first %s", count, count == 1 ? "" : "s", prop.name);
    else
        snprintf(why, cap, "%d CUDA device%s visible", count, count == 1 ? "" : "s");
    return count;
}

static int select_device(int *device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return ct_fail("device = cuda: no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    /* the rank's place on its node: torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE, or srun's
     * SLURM_LOCALID / SLURM_NTASKS_PER_NODE (set with --ntasks-per-node) */
    int explicit_device = -1, local_rank = -1, local_size = 0;
    if (ct_env_nonneg_int("CT_CUDA_DEVICE", &explicit_device) != 0) explicit_device = -1;
    if (ct_env_nonneg_int("LOCAL_RANK", &local_rank) != 0 && ct_env_nonneg_int("SLURM_LOCALID", &local_rank) != 0)
        local_rank = -1;
    if (ct_env_nonneg_int("LOCAL_WORLD_SIZE", &local_size) != 0 &&
        ct_env_nonneg_int("SLURM_NTASKS_PER_NODE", &local_size) != 0)
        local_size = 0;
    char host[256] = "this host";
    gethostname(host, sizeof host - 1);
    return backend_pick_gpu(count, explicit_device, local_rank, local_size, host, getenv("CUDA_VISIBLE_DEVICES"),
                            device);
}

int backend_cuda_choose_gpu(BackendGpu *gpu) {
    if (select_device(&gpu->index) != 0) return -1;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaSetDevice(gpu->index);
    if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, gpu->index);
    if (e != cudaSuccess) return ct_fail("device = cuda: CUDA device %d: %s", gpu->index, cudaGetErrorString(e));
    const unsigned char *u = (const unsigned char *)prop.uuid.bytes;
    snprintf(gpu->uuid, sizeof gpu->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4],
             u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    snprintf(gpu->desc, sizeof gpu->desc, "CUDA device %d (%.120s, PCI %04x:%02x:%02x.0)", gpu->index, prop.name,
             prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    return 0;
}

int backend_cuda_create(Backend **out, const Config *cfg, TrainState *st) {
    const ModelSpec *s = &st->spec;
    int device = 0;
    if (select_device(&device) != 0) return -1;
    if (!cuda_attention_supported(s->head_dim))
        return ct_fail("device = cuda: head_dim %d (model_dim %d / num_heads %d) is not supported by the CUDA attention "
                       "kernels, which are built for head_dim 32, 64 and 128",
                       s->head_dim, s->dim, s->num_heads);
    if (s->dim % 4 != 0 || s->kv_dim % 4 != 0)
        return ct_fail("device = cuda: model_dim %d and the kv width %d must be multiples of 4", s->dim, s->kv_dim);
    for (int l = 0; l < s->num_layers; l++) { /* one product's weight gradient covers the three */
        const ParamInfo *q = model_block_param(s, l, BLK_C_Q), *k = model_block_param(s, l, BLK_C_K),
                        *v = model_block_param(s, l, BLK_C_V);
        if (k->offset != q->offset + q->count || v->offset != k->offset + k->count)
            return ct_fail("device = cuda: block %d's c_q, c_k and c_v are not consecutive in the parameter buffer, "
                           "which their one product needs",
                           l);
    }
    const int T = (int)cfg->train_seq_len;
    const int B = (int)(config_local_tokens(cfg) / cfg->train_seq_len);
    const long long N = (long long)B * T;
    if (B < 1 || B > 65535 || N > (long long)CUDA_COLSUM_ROWS * 65535)
        return ct_fail("device = cuda: a micro-batch of %d sequences x %d tokens is outside what the kernels' grids "
                       "cover (at most 65535 sequences and %d tokens)",
                       B, T, CUDA_COLSUM_ROWS * 65535);

    CudaBackend *cb = ct_calloc(1, sizeof *cb, "cuda backend");
    cb->base.name = "cuda";
    cb->base.state = st;
    cb->base.micro_batch_seqs = B;
    cb->base.seq_len = T;
    cb->base.forward_backward = cuda_forward_backward;
    cb->base.evaluate = cuda_evaluate;
    cb->base.position_logits = cuda_position_logits;
    cb->base.grad_buffer = cuda_grad_buffer;
    cb->base.optimizer_step = cuda_optimizer_step;
    cb->base.sync_to_host = cuda_sync_for_checkpoint;
    cb->base.device_grads = backend_cuda_device_grads;
    cb->base.device_stream = backend_cuda_stream;
    cb->base.destroy = cuda_destroy;
    cb->B = B;
    cb->T = T;
    cb->N = (int)N;
    cb->V = s->vocab;
    cb->D = s->dim;
    cb->KV = s->kv_dim;
    cb->HID = s->hidden;
    cb->H = s->num_heads;
    cb->KVH = s->num_kv_heads;
    cb->HD = s->head_dim;
    cb->L = s->num_layers;
    cb->QKV = s->dim + 2 * s->kv_dim;
    cb->device = device;
    cb->graph_on = cfg->cuda_graph && !cuda_debug_sync_on(); /* a synchronised launch cannot be captured */
    {
        int ns = 0;
        cb->ns_fp32 = ct_env_nonneg_int("CT_CUDA_NS_FP32", &ns) == 0 && ns == 1;
    }
    long long chunk = LOGITS_Z_TARGET_FLOATS / cb->V;
    if (chunk < 64) chunk = 64;
    if (chunk > N) chunk = N;
    cb->chunk = (int)chunk;
    cb->tok_count = 3 * (size_t)cb->N + 2 * (size_t)cb->V + 1;
    cb->w16 = ct_calloc((size_t)s->num_params, sizeof(ct_bf16 *), "cuda weight table");
    cb->dskip = ct_calloc((size_t)(s->num_skip ? s->num_skip : 1), sizeof(float *), "cuda skip table");
    cb->layers = ct_calloc((size_t)s->num_layers, sizeof(CudaLayer), "cuda layer table");
    muon_batch_plan(s, &cb->muon_plan);

    struct cudaDeviceProp prop;
    if (cuda_check(cudaSetDevice(device), "device = cuda: cudaSetDevice") != 0 ||
        cuda_check(cudaGetDeviceProperties(&prop, device), "device = cuda: cudaGetDeviceProperties") != 0)
        goto fail;
    snprintf(cb->device_name, sizeof cb->device_name, "%s", prop.name);
    cb->cc_major = prop.major;
    cb->cc_minor = prop.minor;
    if (prop.major < 8) {
        ct_fail("device = cuda: %s has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16 tensor cores)",
                prop.name, prop.major, prop.minor);
        goto fail;
    }
    /* create the context, then measure what this backend takes */
    if (cuda_check(cudaFree(0), "device = cuda: initialising the CUDA context") != 0 ||
        cuda_check(cudaMemGetInfo(&cb->free_before, &cb->total_mem), "device = cuda: cudaMemGetInfo") != 0 ||
        cuda_check(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking), "device = cuda: cudaStreamCreate") != 0 ||
        cuda_probe_kernels(cb->stream) != 0)
        goto fail;

    BackendArena plan = {NULL, 0};
    layout(cb, &plan);
    cb->arena_bytes = plan.used;
    cudaError_t e = cudaMalloc(&cb->arena, cb->arena_bytes);
    if (e != cudaSuccess) {
        cb->arena = NULL;
        const double MiB = 1024.0 * 1024.0;
        ct_fail("device = cuda: cannot allocate %.1f MiB on %s (%.1f MiB free of %.1f): %s; state %.1f MiB, "
                "activations %.1f MiB for a micro-batch of %d x %d tokens, work %.1f MiB; use a smaller micro-batch "
                "(lower train_batch_tokens or raise grad_accum_slots)",
                cb->arena_bytes / MiB, prop.name, cb->free_before / MiB, cb->total_mem / MiB, cudaGetErrorString(e),
                cb->state_bytes / MiB, cb->act_bytes / MiB, B, T, cb->work_bytes / MiB);
        goto fail;
    }
    BackendArena real = {(char *)cb->arena, 0};
    layout(cb, &real);
    if (cuda_check(cudaMallocHost((void **)&cb->h_tok, cb->tok_count * sizeof(int32_t)),
                   "device = cuda: cudaMallocHost (token staging)") != 0 ||
        cuda_check(cudaMallocHost((void **)&cb->h_scalars, 4 * sizeof(double)), "device = cuda: cudaMallocHost") != 0)
        goto fail;
    if (cuda_blas_create(&cb->blas, cb->stream, cb->cublas_ws, CUBLAS_WORKSPACE_BYTES) != 0) {
        ct_fail_prefix("device = cuda");
        goto fail;
    }

    /* RoPE tables: computed on the host exactly as the CPU backend's, then uploaded */
    {
        const size_t n = (size_t)T * (size_t)(cb->HD / 2);
        float *tables = ct_malloc(2 * n * sizeof(float), "rope tables");
        cpu_rope_tables_init(tables, tables + n, T, cb->HD, s->rope_base);
        int rc = cuda_check(cudaMemcpy(cb->rope_cos, tables, n * sizeof(float), cudaMemcpyHostToDevice),
                            "device = cuda: RoPE table upload");
        if (rc == 0)
            rc = cuda_check(cudaMemcpy(cb->rope_sin, tables + n, n * sizeof(float), cudaMemcpyHostToDevice),
                            "device = cuda: RoPE table upload");
        free(tables);
        if (rc != 0) goto fail;
    }
    if (copy_state(cb, 0) != 0) goto fail;
    if (cuda_check(cudaMemGetInfo(&cb->free_after, &cb->total_mem), "device = cuda: cudaMemGetInfo") != 0) goto fail;
    {
        /* the start banner's line: device and memory (the full split stays in describe) */
        const double GiB = 1024.0 * 1024.0 * 1024.0;
        snprintf(cb->base.detail, sizeof cb->base.detail,
                 "device %d %.80s (sm_%d%d), %.2f GiB allocated (state %.2f, activations %.2f, work %.2f) of %.1f, "
                 "micro-batches %s",
                 device, cb->device_name, cb->cc_major, cb->cc_minor, cb->arena_bytes / GiB, cb->state_bytes / GiB,
                 cb->act_bytes / GiB, cb->work_bytes / GiB, cb->total_mem / GiB,
                 cb->graph_on ? "as a CUDA graph" : "launch by launch");
    }
    *out = &cb->base;
    return 0;
fail:
    cuda_destroy(&cb->base);
    return -1;
}

#endif /* CT_HAVE_CUDA */
