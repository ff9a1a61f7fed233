/* backend_cuda.c — the CUDA backend's creation: the checks a model and micro-batch must pass,
 * the device and its stream, the one device allocation (its layout, written once and run twice:
 * to size it, then to carve it), the pinned host buffers, cuBLAS, the RoPE tables and the first
 * upload of the state; and the memory report, the small public accessors and destruction.
 * backend_cuda_private.h lists the backend's other files. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "rope_tables.h" /* cpu_rope_tables_init: the tables are computed on the host, as the CPU's */

#include "backend_cuda_private.h"

enum { CUBLAS_WORKSPACE_BYTES = 32 << 20, LOGITS_Z_TARGET_FLOATS = 16 << 20 };

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* BACKEND_TAKE_FLOATS (backend_common.h) for bf16 elements */
#define BACKEND_TAKE_BF16S(a, n, tally) ((ct_bf16 *)backend_arena_take((a), (size_t)(n) * sizeof(ct_bf16), (tally)))

/* n elements of the residual stream's type (residual_dtype) */
static void *take_stream(CudaBackend *cb, BackendArena *a, size_t n, size_t *tally) {
    return backend_arena_take(a, n * cb->stream_bytes, tally);
}

/* Whether parameter i is an operand of a matrix product, and so has a bf16 shadow: the
 * matrices, and the output projection (the token embedding when tied, else lm_head). */
static int uses_bf16_shadow(const ModelSpec *s, int i) {
    const ParamInfo *p = &s->params[i];
    if (p->group == PARAM_MATRIX) return 1;
    return i == s->tok_emb ? s->tied : i == s->lm_head;
}

/* Every device buffer, in one list (backend_common.h: sized, then carved), each counted as
 * state, activations or work for the memory report. */
static void layout(CudaBackend *cb, BackendArena *a) {
    const ModelSpec *s = &cb->base.state->spec;
    const size_t N = (size_t)cb->num_tokens, D = (size_t)cb->dim, KV = (size_t)cb->kv_dim, HID = (size_t)cb->hidden;
    const size_t total = s->total_floats;
    size_t *st = &cb->state_bytes, *act = &cb->act_bytes, *wk = &cb->work_bytes;
    cb->state_bytes = cb->act_bytes = cb->work_bytes = 0;

    cb->d_params = BACKEND_TAKE_FLOATS(a, total, st);
    cb->d_grads = BACKEND_TAKE_FLOATS(a, total, st);
    cb->d_exp_avg = BACKEND_TAKE_FLOATS(a, total, st);
    cb->d_exp_avg_sq = BACKEND_TAKE_FLOATS(a, total, st);
    cb->d_momentum = BACKEND_TAKE_FLOATS(a, total, st);
    cb->d_ema = cb->base.state->ema ? BACKEND_TAKE_FLOATS(a, total, st) : NULL;
    cb->d_swa_sum = cb->base.state->swa_sum ? BACKEND_TAKE_FLOATS(a, total, st) : NULL;
    for (int i = 0; i < s->num_params; i++) {
        const int in_blocks = i >= s->first_block && i < s->first_block + s->num_layers * BLK_NUM_PARAMS;
        /* [W_q; W_k; W_v], one [D + 2 KV, D] matrix for one product */
        if (in_blocks && (i - s->first_block) % BLK_NUM_PARAMS == BLK_C_Q) {
            ct_bf16 *w =
                BACKEND_TAKE_BF16S(a, s->params[i].count + s->params[i + 1].count + s->params[i + 2].count, st);
            cb->w16[i] = w;
            cb->w16[i + 1] = w + s->params[i].count;
            cb->w16[i + 2] = w + s->params[i].count + s->params[i + 1].count;
            i += 2;
            continue;
        }
        cb->w16[i] = uses_bf16_shadow(s, i) ? BACKEND_TAKE_BF16S(a, s->params[i].count, st) : NULL;
    }
    cb->cublas_ws = backend_arena_take(a, CUBLAS_WORKSPACE_BYTES, wk);

    cb->d_tok = (int32_t *)backend_arena_take(a, cb->tok_count * sizeof(int32_t), wk);
    cb->d_seg = cb->max_doc_len > 0 && cb->d_tok ? cb->d_tok + cb->tok_count - N : NULL;
    cb->d_scalars = BACKEND_TAKE_DOUBLES(a, CUDA_SCALARS, wk);

    cb->emb = BACKEND_TAKE_FLOATS(a, N * D, act);
    cb->x0 = take_stream(cb, a, N * D, act);
    cb->rstd0 = BACKEND_TAKE_FLOATS(a, N, act);
    cb->xf16 = BACKEND_TAKE_BF16S(a, N * D, act);
    cb->xm = take_stream(cb, a, N * D, act);
    cb->a_in = BACKEND_TAKE_BF16S(a, N * D, act);
    cb->h = BACKEND_TAKE_BF16S(a, N * HID, act);
    cb->rstdf = BACKEND_TAKE_FLOATS(a, N, act);
    cb->losses = BACKEND_TAKE_FLOATS(a, N, act);
    /* one set per run of the longer (looped) plan: a block that runs again keeps each run's tensors
     * for the backward; x_in where either plan adds a skip at that run, XSA's output where either
     * runs an XSA block there (the same runs as without depth recurrence when it is off) */
    const BlockPlan *looped = &s->plan_looped, *plain = &s->plan_plain;
    for (int r = 0; r < model_max_runs(s); r++) {
        CudaLayer *y = &cb->layers[r];
        const int in_plain = r < plain->num_runs;
        const int skip = looped->runs[r].skip_row >= 0 || (in_plain && plain->runs[r].skip_row >= 0);
        const int xsa = looped->runs[r].block >= s->xsa_first_layer ||
                        (in_plain && plain->runs[r].block >= s->xsa_first_layer);
        y->x_in = skip ? take_stream(cb, a, N * D, act) : NULL;
        y->rstd_attn = BACKEND_TAKE_FLOATS(a, N, act);
        y->qkv = BACKEND_TAKE_BF16S(a, N * (size_t)cb->qkv_width, act);
        y->q16 = BACKEND_TAKE_BF16S(a, N * D, act);
        y->k16 = BACKEND_TAKE_BF16S(a, N * KV, act);
        y->y16 = BACKEND_TAKE_BF16S(a, N * D, act);
        y->y_xsa16 = xsa ? BACKEND_TAKE_BF16S(a, N * D, act) : NULL;
        y->gate = s->attn_gate ? BACKEND_TAKE_FLOATS(a, N * (size_t)cb->num_heads, act) : NULL;
        y->y_gate16 = s->attn_gate ? BACKEND_TAKE_BF16S(a, N * D, act) : NULL;
        y->lse = BACKEND_TAKE_FLOATS(a, N * (size_t)cb->num_heads, act);
        y->ao = BACKEND_TAKE_BF16S(a, N * D, act);
        y->rstd_mlp = BACKEND_TAKE_FLOATS(a, N, act);
        y->m_in = BACKEND_TAKE_BF16S(a, N * D, act);
        y->u = BACKEND_TAKE_BF16S(a, N * HID, act);
        y->mo = BACKEND_TAKE_BF16S(a, N * D, act);
        y->x_out = take_stream(cb, a, N * D, act);
        const int lanes = looped->runs[r].parallel || (in_plain && plain->runs[r].parallel);
        y->l1_out = lanes ? take_stream(cb, a, N * D, act) : NULL;
    }
    const int lanes = looped->first_parallel < looped->num_runs || plain->first_parallel < plain->num_runs;
    if (lanes && s->parallel_final == PARALLEL_FINAL_MEAN) cb->x_lanes = take_stream(cb, a, N * D, act);
    cb->rope_cos = BACKEND_TAKE_FLOATS(a, (size_t)cb->T * (size_t)(cb->rope_dims / 2), act);
    cb->rope_sin = BACKEND_TAKE_FLOATS(a, (size_t)cb->T * (size_t)(cb->rope_dims / 2), act);
    if (s->smear_gate) cb->x_normed = BACKEND_TAKE_FLOATS(a, N * D, act);
    if (s->smear_bos) {
        cb->emb_smeared = BACKEND_TAKE_FLOATS(a, N * D, act);
        cb->smear_scratch =
            BACKEND_TAKE_DOUBLES(a, cuda_smear_bos_backward_scratch_doubles(cb->B, cb->T, s->gate_window), wk);
    }
    if (s->bigram_vocab) {
        const size_t BD = (size_t)s->bigram_dim;
        cb->d_buckets = (int32_t *)backend_arena_take(a, N * sizeof(int32_t), act);
        cb->bigram_h = BACKEND_TAKE_FLOATS(a, N * BD, act);
        if (s->bigram_proj >= 0) {
            cb->bigram_h16 = BACKEND_TAKE_BF16S(a, N * BD, act);
            cb->bigram_p16 = BACKEND_TAKE_BF16S(a, N * D, act);
        }
        cb->dbigram_h = BACKEND_TAKE_FLOATS(a, N * BD, wk);
    }

    cb->dx = take_stream(cb, a, N * D, wk);
    cb->dx_alt = take_stream(cb, a, N * D, wk);
    cb->dx0 = take_stream(cb, a, N * D, wk);
    if (lanes) {
        cb->dl1 = take_stream(cb, a, N * D, wk);
        cb->dao16 = BACKEND_TAKE_BF16S(a, N * D, wk);
    }
    cb->dxf = BACKEND_TAKE_FLOATS(a, N * D, wk);
    cb->dD2 = BACKEND_TAKE_FLOATS(a, N * D, wk);
    cb->dq = BACKEND_TAKE_FLOATS(a, N * D, wk);
    cb->dk = BACKEND_TAKE_FLOATS(a, N * KV, wk);
    cb->dy16 = BACKEND_TAKE_BF16S(a, N * D, wk);
    cb->gD16 = BACKEND_TAKE_BF16S(a, N * D, wk);
    cb->gH16 = BACKEND_TAKE_BF16S(a, N * HID, wk);
    cb->dqkv16 = BACKEND_TAKE_BF16S(a, N * (size_t)cb->qkv_width, wk);
    cb->attn_D = BACKEND_TAKE_FLOATS(a, cuda_attention_backward_scratch_floats(cb->B, cb->T, cb->num_heads), wk);
    cb->rope_scratch =
        BACKEND_TAKE_FLOATS(a, cuda_qk_norm_rope_backward_scratch_floats(cb->B, cb->T, cb->num_heads), wk);
    size_t colsum = max_size(cuda_colsum_doubles(cb->num_tokens, cb->dim, 2),
                             cuda_qk_norm_rope_backward_partials_doubles(cb->B, cb->T, cb->num_heads));
    if (lanes) colsum = max_size(colsum, cuda_colsum_doubles(cb->num_tokens, cb->dim, 8)); /* lane_mix_backward */
    if (s->attn_gate) {
        cb->gate_dz = BACKEND_TAKE_FLOATS(a, N * (size_t)cb->num_heads, wk);
        colsum = max_size(colsum, cuda_head_gate_backward_partials_doubles(cb->num_tokens, cb->num_heads, s->gate_window));
    }
    cb->partials = BACKEND_TAKE_DOUBLES(a, colsum, wk);
    cb->z = BACKEND_TAKE_FLOATS(a, cuda_logits_z_floats(cb->logits_chunk, cb->vocab), wk);
    cb->dz = BACKEND_TAKE_BF16S(a, cuda_logits_dz_elems(cb->logits_chunk, cb->vocab), wk);

    size_t scratch = 1, reduce = cuda_reduce_doubles(N);
    reduce = max_size(reduce, cuda_reduce_doubles(total));
    if (s->bigram_vocab) reduce = max_size(reduce, cuda_add_scalar_scaled_backward_partials_doubles(N * D));
    for (int j = 0; j < cb->muon_plan.num_batches; j++) {
        const MuonBatch *k = &cb->muon_plan.batches[j];
        scratch = max_size(scratch, cuda_muon_scratch_bytes(k->m, k->n, k->count));
        reduce = max_size(reduce, cuda_reduce_doubles((size_t)k->m * (size_t)k->n));
    }
    cb->muon_scratch = backend_arena_take(a, scratch, wk);
    cb->red_partials = BACKEND_TAKE_DOUBLES(a, reduce + 1, wk);
}

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
    r->logits_chunk = cb->logits_chunk;
    r->ns_fp32 = cb->ns_fp32;
    r->residual_bf16 = cb->stream_dtype == CT_BF16;
    return 0;
}

void backend_cuda_describe(Backend *b, char *buf, size_t cap) {
    CudaMemoryReport r;
    backend_cuda_memory(b, &r);
    const double MiB = 1024.0 * 1024.0;
    snprintf(buf, cap,
             "cuda: device %d %s (sm_%d%d), %.1f MiB allocated (state %.1f, activations %.1f, work %.1f), device "
             "memory used %.1f / %.1f MiB, Newton-Schulz %s, residual stream %s",
             r.device_index, r.device_name, r.cc_major, r.cc_minor, r.arena_bytes / MiB, r.state_bytes / MiB,
             r.activation_bytes / MiB, r.work_bytes / MiB, r.device_used_bytes / MiB, r.device_total_bytes / MiB,
             r.ns_fp32 ? "fp32" : "bf16", r.residual_bf16 ? "bf16" : "fp32");
}

/* ---- creation ---- */

static void cuda_destroy(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    if (!cb) return;
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    if (cb->graph) cudaGraphExecDestroy(cb->graph);
    cuda_ttt_free(cb);
    if (cb->blas) cublasDestroy(cb->blas);
    if (cb->arena) cudaFree(cb->arena);
    if (cb->h_tok) cudaFreeHost(cb->h_tok);
    if (cb->h_scalars) cudaFreeHost(cb->h_scalars);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    free(cb->h_buckets);
    free(cb->w16);
    free(cb->layers);
    muon_batch_plan_free(&cb->muon_plan);
    free(cb->share_bufs);
    free(cb->share_counts);
    free(cb->share_roots);
    free(cb);
}

/* The model shapes the kernels cover, with the message for the first that is not. */
static int check_model(const ModelSpec *s, const Config *cfg) {
    for (int i = 0; cfg->muon_row_normalize && i < s->num_params; i++)
        if (s->params[i].group == PARAM_MATRIX && s->params[i].shape[1] > CUDA_MUON_ROW_NORM_MAX_COLS)
            return ct_fail("device = cuda: muon_row_normalize = 1 with %s's rows of %lld elements: the CUDA kernel "
                           "takes rows of at most %d (use device=cpu)",
                           s->params[i].name, (long long)s->params[i].shape[1], CUDA_MUON_ROW_NORM_MAX_COLS);
    if (!cuda_attention_supported(s->head_dim))
        return ct_fail("device = cuda: head_dim %d (model_dim %d / num_heads %d) is not supported by the CUDA "
                       "attention "
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
    return 0;
}

/* The training micro-batch, B sequences of T tokens, if the kernels' grids cover it. */
static int micro_batch_shape(const Config *cfg, int *B_out, int *T_out) {
    /* doc_packing: one row of the micro-batch's tokens (config_seq_len), as the CPU backend */
    const int T = (int)config_seq_len(cfg);
    const int B = (int)(config_local_tokens(cfg) / T);
    const long long N = (long long)B * T;
    if (B < 1 || B > 65535 || N > (long long)CUDA_COLSUM_ROWS * 65535)
        return ct_fail("device = cuda: a micro-batch of %d sequences x %d tokens is outside what the kernels' grids "
                       "cover (at most 65535 sequences and %d tokens)",
                       B, T, CUDA_COLSUM_ROWS * 65535);
    *B_out = B;
    *T_out = T;
    return 0;
}

/* The backend's host side: its hooks, shapes and settings, and the host tables (no device call). */
static CudaBackend *new_cuda_backend(const Config *cfg, TrainState *st, int device, int B, int T) {
    const ModelSpec *s = &st->spec;
    const long long N = (long long)B * T;
    CudaBackend *cb = ct_calloc(1, sizeof *cb, "cuda backend");
    cb->base.name = "cuda";
    cb->base.state = st;
    cb->base.micro_batch_seqs = B;
    cb->base.seq_len = T;
    cb->base.bos_id = -1; /* none until the caller sets the data's (backend.h) */
    cb->base.forward_backward = cuda_forward_backward;
    cb->base.evaluate = cuda_evaluate;
    cb->base.evaluate_positions = cuda_evaluate_positions;
    cb->base.position_logits = cuda_position_logits;
    cb->base.accumulate_input_grams = cuda_accumulate_input_grams;
    cb->base.grad_buffer = cuda_grad_buffer;
    cb->base.optimizer_step = cuda_optimizer_step;
    cb->base.sync_to_host = cuda_sync_for_checkpoint;
    cb->base.weights_from_host = cuda_weights_from_host;
    cb->base.device_grads = backend_cuda_device_grads;
    cb->base.device_stream = backend_cuda_stream;
    cb->base.ttt_open = cuda_ttt_open;
    cb->base.ttt_reset = cuda_ttt_reset;
    cb->base.ttt_chunk = cuda_ttt_chunk;
    cb->base.ttt_slot_to_host = cuda_ttt_slot_to_host;
    cb->base.sgd_step = cuda_sgd_optimizer_step;
    cb->base.destroy = cuda_destroy;
    cb->B = B;
    cb->T = T;
    cb->num_tokens = (int)N;
    cb->mtp_loss_weight = cfg->mtp_loss_weight;
    cb->vocab = s->vocab;
    cb->dim = s->dim;
    cb->kv_dim = s->kv_dim;
    cb->hidden = s->hidden;
    cb->num_heads = s->num_heads;
    cb->num_kv_heads = s->num_kv_heads;
    cb->head_dim = s->head_dim;
    cb->rope_dims = s->rope_dims;
    cb->num_layers = s->num_layers;
    cb->qkv_width = s->dim + 2 * s->kv_dim;
    cb->device = device;
    cb->graph_on = cfg->cuda_graph && !cuda_debug_sync_on(); /* a synchronised launch cannot be captured */
    cb->stream_dtype = strcmp(cfg->residual_dtype, "bf16") == 0 ? CT_BF16 : CT_F32;
    cb->stream_bytes = cb->stream_dtype == CT_BF16 ? sizeof(ct_bf16) : sizeof(float);
    {
        int ns = 0;
        cb->ns_fp32 = ct_env_nonneg_int("CT_CUDA_NS_FP32", &ns) == 0 && ns == 1;
    }
    long long chunk = LOGITS_Z_TARGET_FLOATS / cb->vocab;
    if (chunk < 64) chunk = 64;
    if (chunk > N) chunk = N;
    cb->logits_chunk = (int)chunk;
    cb->tok_count = 3 * (size_t)cb->num_tokens + 2 * (size_t)cb->vocab + 1;
    if (s->bigram_vocab) {
        cb->tok_count += (size_t)cb->num_tokens + 2 * (size_t)s->bigram_vocab + 1;
        cb->h_buckets = ct_malloc((size_t)N * sizeof(int32_t), "bigram buckets");
    }
    if (cfg->doc_packing) { /* the segment starts: the staging layout's last N entries */
        cb->tok_count += (size_t)cb->num_tokens;
        cb->max_doc_len = config_max_doc_len(cfg);
    }
    /* packed rows take row-absolute positions 0 .. T-1 with the base of train_seq_len, the
     * longest segment (the CPU backend's tables), not NTK-scaled for the row */
    cb->rope_base_len = (int)(cfg->doc_packing ? cfg->train_seq_len : T);
    cb->w16 = ct_calloc((size_t)s->num_params, sizeof(ct_bf16 *), "cuda weight table");
    cb->layers = ct_calloc((size_t)model_max_runs(s), sizeof(CudaLayer), "cuda layer table");
    muon_batch_plan(s, &cb->muon_plan);
    const size_t mats = (size_t)cb->muon_plan.num_matrices + 1;
    cb->share_bufs = ct_calloc(mats, sizeof *cb->share_bufs, "Muon share list");
    cb->share_counts = ct_calloc(mats, sizeof *cb->share_counts, "Muon share list");
    cb->share_roots = ct_calloc(mats, sizeof *cb->share_roots, "Muon share list");
    return cb;
}

/* Makes cb->device current, checks it (bf16 tensor cores), creates the context and the stream
 * and probes the kernels; *prop receives the device's properties. */
static int open_device(CudaBackend *cb, struct cudaDeviceProp *prop) {
    if (cuda_check(cudaSetDevice(cb->device), "device = cuda: cudaSetDevice") != 0 ||
        cuda_check(cudaGetDeviceProperties(prop, cb->device), "device = cuda: cudaGetDeviceProperties") != 0)
        return -1;
    snprintf(cb->device_name, sizeof cb->device_name, "%s", prop->name);
    cb->cc_major = prop->major;
    cb->cc_minor = prop->minor;
    if (prop->major < 8) {
        ct_fail("device = cuda: %s has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16 tensor "
                "cores)",
                prop->name, prop->major, prop->minor);
        return -1;
    }
    /* create the context, then measure what this backend takes */
    if (cuda_check(cudaFree(0), "device = cuda: initialising the CUDA context") != 0 ||
        cuda_check(cudaMemGetInfo(&cb->free_before, &cb->total_mem), "device = cuda: cudaMemGetInfo") != 0 ||
        cuda_check(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking), "device = cuda: cudaStreamCreate") !=
            0 ||
        cuda_probe_kernels(cb->stream) != 0)
        return -1;
    return 0;
}

/* The one device allocation (sized by layout, then carved by it), the pinned host buffers and
 * the cuBLAS handle on the arena's workspace; a failed allocation says what would not fit. */
static int allocate(CudaBackend *cb, const struct cudaDeviceProp *prop) {
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
                cb->arena_bytes / MiB, prop->name, cb->free_before / MiB, cb->total_mem / MiB, cudaGetErrorString(e),
                cb->state_bytes / MiB, cb->act_bytes / MiB, cb->B, cb->T, cb->work_bytes / MiB);
        return -1;
    }
    BackendArena real = {(char *)cb->arena, 0};
    layout(cb, &real);
    if (cuda_check(cudaMallocHost((void **)&cb->h_tok, cb->tok_count * sizeof(int32_t)),
                   "device = cuda: cudaMallocHost (token staging)") != 0)
        return -1;
    if (cb->max_doc_len > 0) cb->h_seg = cb->h_tok + cb->tok_count - (size_t)cb->num_tokens;
    if (
        cuda_check(cudaMallocHost((void **)&cb->h_scalars, CUDA_SCALARS * sizeof(double)), "device = cuda: cudaMallocHost") != 0)
        return -1;
    if (cuda_blas_create(&cb->blas, cb->stream, cb->cublas_ws, CUBLAS_WORKSPACE_BYTES) != 0) {
        ct_fail_prefix("device = cuda");
        return -1;
    }
    return 0;
}

/* RoPE tables: computed on the host exactly as the CPU backend's (rope_dims of each head; the
 * base NTK-scaled when rope_base_len, T or with doc_packing train_seq_len, is above
 * rope_train_seq_len), then uploaded */
static int upload_rope_tables(CudaBackend *cb) {
    const int T = cb->T;
    const size_t n = (size_t)T * (size_t)(cb->rope_dims / 2);
    float *tables = ct_malloc(2 * n * sizeof(float), "rope tables");
    cpu_rope_tables_init(tables, tables + n, T, cb->rope_dims, model_rope_base(&cb->base.state->spec, cb->rope_base_len));
    int rc = cuda_check(cudaMemcpy(cb->rope_cos, tables, n * sizeof(float), cudaMemcpyHostToDevice),
                        "device = cuda: RoPE table upload");
    if (rc == 0)
        rc = cuda_check(cudaMemcpy(cb->rope_sin, tables + n, n * sizeof(float), cudaMemcpyHostToDevice),
                        "device = cuda: RoPE table upload");
    free(tables);
    return rc;
}

/* Backend.stack: the CUDA runtime and driver, cuBLAS and the GPU (its name and compute
 * capability), what the bits depend on besides ctrain and the inputs. */
static void write_stack(CudaBackend *cb) {
    int runtime = 0, driver = 0, blas = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetVersion(cb->blas, &blas);
    snprintf(cb->base.stack, sizeof cb->base.stack,
             "cuda_runtime=%d.%d; cuda_driver=%d.%d; cublas=%d.%d.%d; gpu=%.120s sm_%d%d", runtime / 1000,
             runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, blas / 10000, blas / 100 % 100, blas % 100,
             cb->device_name, cb->cc_major, cb->cc_minor);
}

/* the start banner's line: device and memory (the full split stays in describe) */
static void write_start_line(CudaBackend *cb) {
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    snprintf(cb->base.detail, sizeof cb->base.detail,
             "device %d %.80s (sm_%d%d), %.2f GiB allocated (state %.2f, activations %.2f, work %.2f) of %.1f, "
             "micro-batches %s, residual stream %s",
             cb->device, cb->device_name, cb->cc_major, cb->cc_minor, cb->arena_bytes / GiB, cb->state_bytes / GiB,
             cb->act_bytes / GiB, cb->work_bytes / GiB, cb->total_mem / GiB,
             cb->graph_on ? "as a CUDA graph" : "launch by launch", cb->stream_dtype == CT_BF16 ? "bf16" : "fp32");
}

int backend_cuda_create(Backend **out, const Config *cfg, TrainState *st) {
    int device = 0, B = 0, T = 0;
    if (cuda_select_device(&device) != 0) return -1;
    if (check_model(&st->spec, cfg) != 0 || micro_batch_shape(cfg, &B, &T) != 0) return -1;
    CudaBackend *cb = new_cuda_backend(cfg, st, device, B, T);
    struct cudaDeviceProp prop;
    if (open_device(cb, &prop) != 0 || allocate(cb, &prop) != 0 || upload_rope_tables(cb) != 0 ||
        cuda_copy_state(cb, 0) != 0 ||
        cuda_check(cudaMemGetInfo(&cb->free_after, &cb->total_mem), "device = cuda: cudaMemGetInfo") != 0) {
        cuda_destroy(&cb->base);
        return -1;
    }
    write_start_line(cb);
    write_stack(cb);
    *out = &cb->base;
    return 0;
}

#endif /* CT_HAVE_CUDA */
