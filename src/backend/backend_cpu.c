/* backend_cpu.c — the CPU backend's forward and backward pass through the parameter-golf GPT
 * (fp32, kernels/cpu/cpu_*). Activations of one micro-batch are allocated once, at creation;
 * nothing is allocated per step. Forward order and the saved tensors follow train_gpt.py's
 * GPT.forward; the backward walks the same graph in reverse (docs/model.md). This file creates
 * the backend and runs the training step (the loss, the multi-token heads, the embeddings'
 * backward), the evaluations, sampling's logits and GPTQ's calibration; the pass through the
 * network is backend_cpu_pass.c's, one run of the block plan backend_cpu_block.c's, test-time
 * training backend_cpu_ttt.c's. */
#include <math.h>
#include <float.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "backend_cpu.h"
#include "common.h"
#include "cpu_attention.h"
#include "cpu_blas.h" /* openblas_get_config: the stack a checkpoint records */
#include "cpu_fake_quant.h"
#include "blas_core.h"
#include "omp_wait.h"
#include "cpu_ops.h"

/* Whether run `run` is parallel in either plan (it needs lane 1's buffer). */
static int run_parallel(const ModelSpec *s, int run) {
    return s->plan_looped.runs[run].parallel || (run < s->plan_plain.num_runs && s->plan_plain.runs[run].parallel);
}

/* Every activation and work buffer, in one list (backend_common.h: sized, then carved). */
static void layout(CpuBackend *cb, BackendArena *a) {
    const ModelSpec *s = &cb->base.state->spec;
    const int B = cb->B, T = cb->T;
    const size_t N = (size_t)B * T, D = (size_t)s->dim, KV = (size_t)s->kv_dim, HID = (size_t)s->hidden;
    cb->emb = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->x0 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->rstd0 = BACKEND_TAKE_FLOATS(a, N, NULL);
    cb->xf = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->rstdf = BACKEND_TAKE_FLOATS(a, N, NULL);
    cb->losses = BACKEND_TAKE_FLOATS(a, N, NULL);
    const size_t stats = cpu_attention_stats_floats(B, T, s->num_heads);
    /* one set per run of the longer (looped) plan: a block that runs again keeps each run's
     * tensors for the backward; XSA's output where either plan runs an XSA block there */
    for (int l = 0; l < model_max_runs(s); l++) {
        CpuLayerActs *y = &cb->layers[l];
        y->x_in = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->xm = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->rstd_attn = BACKEND_TAKE_FLOATS(a, N, NULL);
        y->a_in = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->q_raw = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->k_raw = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
        y->v = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
        y->q = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->k = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
        y->y = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->y_xsa = cpu_run_xsa(s, &s->plan_looped, l) || (l < s->plan_plain.num_runs && cpu_run_xsa(s, &s->plan_plain, l))
                       ? BACKEND_TAKE_FLOATS(a, N * D, NULL)
                       : NULL;
        y->gate = s->attn_gate ? BACKEND_TAKE_FLOATS(a, N * (size_t)s->num_heads, NULL) : NULL;
        y->y_gate = s->attn_gate ? BACKEND_TAKE_FLOATS(a, N * D, NULL) : NULL;
        y->stats = BACKEND_TAKE_FLOATS(a, stats, NULL);
        y->ao = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->x1 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->rstd_mlp = BACKEND_TAKE_FLOATS(a, N, NULL);
        y->m_in = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->u = BACKEND_TAKE_FLOATS(a, N * HID, NULL);
        y->h = BACKEND_TAKE_FLOATS(a, N * HID, NULL);
        y->mo = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->x_out = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        y->l1_out = run_parallel(s, l) ? BACKEND_TAKE_FLOATS(a, N * D, NULL) : NULL;
    }
    cb->rope_cos = BACKEND_TAKE_FLOATS(a, (size_t)T * (size_t)(s->rope_dims / 2), NULL);
    cb->rope_sin = BACKEND_TAKE_FLOATS(a, (size_t)T * (size_t)(s->rope_dims / 2), NULL);
    if (s->bigram_vocab) {
        const size_t BD = (size_t)s->bigram_dim;
        cb->bigram_h = BACKEND_TAKE_FLOATS(a, N * BD, NULL);
        cb->bigram_p = s->bigram_proj >= 0 ? BACKEND_TAKE_FLOATS(a, N * D, NULL) : cb->bigram_h;
        cb->dbigram_h = s->bigram_proj >= 0 ? BACKEND_TAKE_FLOATS(a, N * BD, NULL) : NULL;
    }
    if (s->smear_gate) cb->x_normed = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    if (s->smear_bos) cb->emb_smeared = BACKEND_TAKE_FLOATS(a, N * D, NULL);

    /* backward work buffers (one set, reused by every layer) */
    cb->dx = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dx_alt = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dx0 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dD1 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dD2 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dH1 = BACKEND_TAKE_FLOATS(a, N * HID, NULL);
    cb->dH2 = BACKEND_TAKE_FLOATS(a, N * HID, NULL);
    cb->dq = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->dk = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
    cb->dv = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
    cb->dk_raw = BACKEND_TAKE_FLOATS(a, N * KV, NULL);
    cb->gate_dz = s->attn_gate ? BACKEND_TAKE_FLOATS(a, N * (size_t)s->num_heads, NULL) : NULL;
    if (s->parallel_post >= 0) {
        cb->x_lanes = s->parallel_final == PARALLEL_FINAL_MEAN ? BACKEND_TAKE_FLOATS(a, N * D, NULL) : NULL;
        cb->dl1 = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        cb->dl1_alt = BACKEND_TAKE_FLOATS(a, N * D, NULL);
        cb->dao = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    }
    for (int j = 0; j < s->num_skip; j++) cb->dskip[j] = BACKEND_TAKE_FLOATS(a, N * D, NULL);
    cb->attn_scratch = BACKEND_TAKE_FLOATS(a, cb->attn_scratch_floats, NULL);
    cb->rope_scratch = BACKEND_TAKE_FLOATS(a, cpu_qk_norm_rope_backward_scratch_floats(B, T, s->num_heads), NULL);
    cb->logits_scratch = BACKEND_TAKE_FLOATS(a, (size_t)CPU_LOGITS_CHUNK * (size_t)s->vocab, NULL);
}

int backend_cpu_create(Backend **out, const Config *cfg, TrainState *st) {
    if (cfg->threads > 0) omp_set_num_threads((int)cfg->threads);
    cpu_blas_prepare();
    const ModelSpec *s = &st->spec;
    CpuBackend *cb = ct_calloc(1, sizeof *cb, "cpu backend");
    /* doc_packing: one row of the micro-batch's tokens (config_seq_len), cut into documents */
    int T = (int)config_seq_len(cfg);
    int B = (int)(config_local_tokens(cfg) / T);
    size_t N = (size_t)B * T;
    cb->base.name = "cpu";
    cb->base.state = st;
    cb->base.micro_batch_seqs = B;
    cb->base.seq_len = T;
    cb->base.bos_id = -1;
    cb->B = B;
    cb->T = T;
    cb->mtp_loss_weight = cfg->mtp_loss_weight;
    cb->ids = ct_calloc(N, sizeof(int32_t), "token ids");
    cb->targets = ct_calloc(N, sizeof(int32_t), "targets");
    if (cfg->doc_packing) {
        cb->seg_start = ct_calloc(N, sizeof(int32_t), "segment starts");
        cb->max_doc_len = config_max_doc_len(cfg);
    }
    cb->layers = ct_calloc((size_t)model_max_runs(s), sizeof(CpuLayerActs), "layer activations");
    cb->dskip = ct_calloc((size_t)(s->num_skip ? s->num_skip : 1), sizeof(float *), "skip gradients");
    int threads = omp_get_max_threads();
    char core[200], wait[160];
    snprintf(cb->base.detail, sizeof cb->base.detail, "OpenBLAS core %s, %d thread%s (waiting: %s)",
             cpu_blas_core_describe(core, sizeof core), threads, threads == 1 ? "" : "s",
             omp_wait_describe(wait, sizeof wait));
    /* the loaded OpenBLAS and its kernel set (the core is in its config string): another core's
     * sgemm kernels may round differently; the thread count does not matter (fixed tiles) */
    snprintf(cb->base.stack, sizeof cb->base.stack, "blas=%s", openblas_get_config());
    cb->attn_scratch_floats = cpu_attention_backward_scratch_floats(B, T, s->num_heads, s->num_kv_heads, s->head_dim,
                                                                    threads);
    size_t fwd = cpu_attention_forward_scratch_floats(B, T, s->num_heads, s->num_kv_heads, s->head_dim, threads);
    if (fwd > cb->attn_scratch_floats) cb->attn_scratch_floats = fwd;

    BackendArena plan = {NULL, 0};
    layout(cb, &plan);
    cb->arena = ct_calloc(plan.used, 1, "activations");
    BackendArena real = {cb->arena, 0};
    layout(cb, &real);
    /* packed rows take row-absolute positions 0 .. T-1 (docs/model.md); the base is the one
     * for train_seq_len, the longest segment, not NTK-scaled for the row */
    cpu_rope_tables_init(cb->rope_cos, cb->rope_sin, T, s->rope_dims,
                         model_rope_base(s, (int)(cfg->doc_packing ? cfg->train_seq_len : T)));
    if (s->bigram_vocab) cb->bigram_ids = ct_calloc(N, sizeof(int32_t), "bigram buckets");
    cpu_optimizer_init(cb);
    if (cfg->qat_enabled || cfg->late_qat) cb->qat_params = ct_calloc(s->total_floats, sizeof(float), "QAT weights");

    cb->base.forward_backward = cpu_forward_backward;
    cb->base.evaluate = cpu_evaluate;
    cb->base.evaluate_positions = cpu_evaluate_positions;
    cb->base.position_logits = cpu_position_logits;
    cb->base.accumulate_input_grams = cpu_accumulate_input_grams;
    cb->base.grad_buffer = cpu_grad_buffer;
    cb->base.optimizer_step = cpu_optimizer_step;
    cb->base.ttt_open = cpu_ttt_open;
    cb->base.ttt_reset = cpu_ttt_reset;
    cb->base.ttt_chunk = cpu_ttt_chunk;
    cb->base.ttt_slot_to_host = cpu_ttt_slot_to_host;
    cb->base.sgd_step = cpu_sgd_optimizer_step;
    cb->base.destroy = cpu_destroy;
    *out = &cb->base;
    return 0;
}

float *cpu_grad_buffer(Backend *b) { return b->state->grads; }

/* Split the span into int32 inputs and targets, checking ids against the vocabulary. */
static int load_tokens(CpuBackend *cb, const uint32_t *tokens, size_t N) {
    if (backend_check_tokens(tokens, N + 1, cb->base.state->spec.vocab) != 0) return -1;
    for (size_t i = 0; i < N; i++) {
        cb->ids[i] = (int32_t)tokens[i];
        cb->targets[i] = (int32_t)tokens[i + 1];
    }
    return 0;
}

/* ---- late QAT (docs/model.md): the weights the forward reads ----
 * While a training forward/backward runs with TrainState.qat_active, the weights late QAT
 * quantizes (backend_qat_quantizes) are read from cb->qat_params, their int6 fake-quantized copy
 * made at the start of the micro-batch; everything else, and evaluation always, reads the master
 * weights. Gradients go to the master weights' places as they are (straight-through). */

/* The weights of parameter p as this pass uses them. */
static int qat_begin(CpuBackend *cb) {
    const TrainState *st = cb->base.state;
    if (!st->qat_active) return 0;
    if (!cb->qat_params)
        return ct_fail("QAT is on in the training state, but the backend was created without qat_enabled or late_qat");
    for (int i = 0; i < st->spec.num_params; i++) {
        const ParamInfo *p = &st->spec.params[i];
        if (backend_qat_quantizes(p))
            cpu_fake_quant_int6_rows(cb->qat_params + p->offset, st->params + p->offset, (int)p->shape[0],
                                     (int)p->shape[1]);
    }
    cb->qat_in_use = 1;
    return 0;
}

int cpu_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum) {
    CpuBackend *cb = (CpuBackend *)b;
    const ModelSpec *s = &b->state->spec;
    *loss_sum = 0;
    /* Sequences go through in groups of the training micro-batch, the buffers' capacity. */
    for (int first = 0; first < num_seqs; first += cb->B) {
        int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        size_t N = (size_t)B * cb->T;
        if (load_tokens(cb, tokens + (size_t)first * cb->T, N) != 0) return -1;
        if (cpu_forward_blocks(cb, B) != 0) return -1;
        double sum = 0;
        if (cpu_logits_ce_forward(NULL, &sum, cb->xf, cpu_output_matrix(cb), cb->targets, (int)N, s->dim, s->vocab, s->softcap,
                              cb->logits_scratch, CPU_LOGITS_CHUNK) != 0)
            return -1;
        *loss_sum += sum;
    }
    return 0;
}

/* Sliding-window validation's windows (backend.h, evaluate_positions): the same forward and
 * loss as cpu_evaluate, on inputs and targets given apart, every position's loss kept. */
int cpu_evaluate_positions(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs, float *losses) {
    CpuBackend *cb = (CpuBackend *)b;
    const ModelSpec *s = &b->state->spec;
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B;
        const size_t N = (size_t)B * cb->T, at = (size_t)first * cb->T;
        if (backend_check_tokens(inputs + at, N, s->vocab) != 0 || backend_check_tokens(targets + at, N, s->vocab) != 0)
            return -1;
        for (size_t i = 0; i < N; i++) {
            cb->ids[i] = (int32_t)inputs[at + i];
            cb->targets[i] = (int32_t)targets[at + i];
        }
        if (cpu_forward_blocks(cb, B) != 0) return -1;
        double sum;
        if (cpu_logits_ce_forward(losses + at, &sum, cb->xf, cpu_output_matrix(cb), cb->targets, (int)N, s->dim, s->vocab,
                                  s->softcap, cb->logits_scratch, CPU_LOGITS_CHUNK) != 0)
            return -1;
    }
    return 0;
}

/* grams[param] += X^T X of its input x (N x cols), for the GPTQ calibration. */
static void add_gram(float *const *grams, int param, const float *x, int N, int cols) {
    if (param >= 0 && grams[param]) cpu_sgemm(1, 0, cols, cols, N, 1.0f, x, cols, x, cols, 1.0f, grams[param], cols);
}

/* GPTQ's calibration (backend.h, accumulate_input_grams): the evaluation's forward, then each
 * matrix's input from the activations it left, run by run. */
int cpu_accumulate_input_grams(Backend *b, const uint32_t *tokens, int num_seqs, float *const *grams) {
    CpuBackend *cb = (CpuBackend *)b;
    const ModelSpec *s = &b->state->spec;
    const BlockPlan *plan = model_plan(s, b->state->loop_active);
    const int D = s->dim;
    for (int first = 0; first < num_seqs; first += cb->B) {
        const int B = num_seqs - first < cb->B ? num_seqs - first : cb->B, N = B * cb->T;
        if (load_tokens(cb, tokens + (size_t)first * cb->T, (size_t)N) != 0) return -1;
        if (cpu_forward_blocks(cb, B) != 0) return -1;
        for (int run = 0; run < plan->num_runs; run++) {
            const CpuLayerActs *a = &cb->layers[run];
            const int l = plan->runs[run].block;
            const int index = s->first_block + l * BLK_NUM_PARAMS; /* block l's parameters, BLK_* order */
            add_gram(grams, index + BLK_C_Q, a->a_in, N, D);
            add_gram(grams, index + BLK_PROJ, cpu_proj_input(a, cpu_run_xsa(s, plan, run)), N, D);
            add_gram(grams, index + BLK_FC, a->m_in, N, D);
            add_gram(grams, index + BLK_MLP_PROJ, a->h, N, s->hidden);
        }
        add_gram(grams, s->tied ? s->tok_emb : s->lm_head, cb->xf, N, D);
        if (s->bigram_vocab && s->bigram_proj >= 0) add_gram(grams, s->bigram_proj, cb->bigram_h, N, s->bigram_dim);
    }
    return 0;
}

int cpu_position_logits(Backend *b, const uint32_t *tokens, int pos, float *logits) {
    CpuBackend *cb = (CpuBackend *)b;
    const ModelSpec *s = &b->state->spec;
    if (pos < 0 || pos >= cb->T) return ct_fail("position %d outside the sequence of %d tokens", pos, cb->T);
    if (backend_check_tokens(tokens, (size_t)cb->T, s->vocab) != 0) return -1;
    for (int i = 0; i < cb->T; i++) cb->ids[i] = (int32_t)tokens[i];
    if (cpu_forward_blocks(cb, 1) != 0) return -1;
    cpu_linear_forward(logits, cb->xf + (size_t)pos * s->dim, cpu_output_matrix(cb), 1, s->dim, s->vocab);
    for (int v = 0; v < s->vocab; v++) logits[v] = s->softcap * tanhf(logits[v] / s->softcap);
    return 0;
}

/* The multi-token-prediction heads' losses and gradients on the final normed x (cb->xf), added
 * to dD1 and to the heads' gradients; *mean_loss gains their share (backend_common.h). */
static int mtp_heads_backward(CpuBackend *cb, float loss_weight, double *mean_loss) {
    TrainState *st = cb->base.state;
    const ModelSpec *s = &st->spec;
    const int B = cb->B, T = cb->T, D = s->dim;
    const float call_weight = backend_mtp_call_weight(loss_weight, cb->mtp_loss_weight, s->mtp_heads, B);
    double head_means[CT_MTP_MAX_HEADS];
    for (int k = 0; k < s->mtp_heads; k++) {
        const ParamInfo *head = &s->params[s->first_mtp + k];
        const int rows = T - k - 1; /* config_validate keeps it >= 1 */
        double sum = 0;
        for (int b = 0; b < B; b++) {
            const size_t at = (size_t)b * T;
            double mean;
            if (cpu_logits_ce_forward_backward(cb->dD1 + at * D, st->grads + head->offset, cb->losses, &mean,
                                               cb->xf + at * D, cpu_weights_of(cb, head), cb->targets + at + k + 1, rows,
                                               D, s->vocab, s->softcap, call_weight, cb->logits_scratch,
                                               CPU_LOGITS_CHUNK) != 0)
                return ct_fail_prefix("%s, sequence %d", head->name, b);
            sum += mean;
        }
        head_means[k] = sum / B;
    }
    *mean_loss = backend_mtp_loss(*mean_loss, head_means, s->mtp_heads, cb->mtp_loss_weight);
    return 0;
}

/* The forward and backward of one micro-batch (cpu_forward_backward, which sets up QAT). */
static int forward_backward_pass(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss) {
    CpuBackend *cb = (CpuBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    int B = cb->B, T = cb->T, N = B * T, D = s->dim;
    size_t ND = (size_t)N * D;
    if (load_tokens(cb, tokens, (size_t)N) != 0) return -1;
    if (cpu_forward_blocks(cb, B) != 0) return -1;

    /* loss and its gradient w.r.t. the final normed x (dD1) and the output matrix */
    float *dW_out = st->grads + s->params[s->tied ? s->tok_emb : s->lm_head].offset;
    cpu_zero(cb->dD1, ND);
    if (cpu_logits_ce_forward_backward(cb->dD1, dW_out, cb->losses, mean_loss, cb->xf, cpu_output_matrix(cb), cb->targets, N, D,
                                   s->vocab, s->softcap, loss_weight, cb->logits_scratch, CPU_LOGITS_CHUNK) != 0)
        return -1;
    if (backend_mtp_active(s, cb->mtp_loss_weight) && mtp_heads_backward(cb, loss_weight, mean_loss) != 0) return -1;
    if (backend_check_loss(*mean_loss) != 0) return -1;
    if (backend_grad_ready(b, 0) != 0) return -1;

    float *dx = cb->dx, *dx_alt = cb->dx_alt;
    if (cpu_backward_blocks(cb, B, &dx, &dx_alt) != 0) return -1;
    if (s->smear_gate) {
        cpu_zero(dx_alt, ND);
        cpu_smear_backward(dx_alt, st->grads + s->params[s->smear].offset, dx, cb->x_normed,
                           st->params + s->params[s->smear].offset, B, T, D);
        dx = dx_alt;
    }
    cpu_zero(cb->dD1, ND);
    cpu_rmsnorm_backward(cb->dD1, dx, s->smear_bos ? cb->emb_smeared : cb->emb, cb->rstd0, N, D);
    float *demb = cb->dD1; /* d(loss)/d(emb): tok_emb's and the bigram's */
    if (s->smear_bos) {
        cpu_zero(dx_alt, ND);
        cpu_smear_bos_backward(dx_alt, st->grads + s->params[s->smear_gate_w].offset,
                               st->grads + s->params[s->smear_lambda].offset, cb->dD1, cb->emb, cb->ids,
                               st->params + s->params[s->smear_gate_w].offset,
                               st->params + s->params[s->smear_lambda].offset, B, T, D, s->gate_window,
                               cb->base.bos_id);
        demb = dx_alt;
    }
    cpu_embedding_backward(st->grads + s->params[s->tok_emb].offset, demb, cb->ids, N, D);
    if (s->bigram_vocab) { /* emb = tok_emb[ids] + scale * bigram_p */
        float *dbigram_p = cb->dD2, *dbigram_h = s->bigram_proj >= 0 ? cb->dbigram_h : cb->dD2;
        cpu_zero(dbigram_p, ND);
        cpu_add_scalar_scaled_backward(dbigram_p, st->grads + s->params[s->bigram_scale].offset, demb, cb->bigram_p,
                                       st->params + s->params[s->bigram_scale].offset, ND);
        if (s->bigram_proj >= 0) {
            cpu_zero(dbigram_h, (size_t)N * s->bigram_dim);
            cpu_linear_backward(dbigram_h, st->grads + s->params[s->bigram_proj].offset, dbigram_p, cb->bigram_h,
                                cpu_weights_of(cb, &s->params[s->bigram_proj]), N, s->bigram_dim, D);
        }
        cpu_embedding_backward(st->grads + s->params[s->bigram_embed].offset, dbigram_h, cb->bigram_ids, N,
                               s->bigram_dim);
    }
    return backend_grad_ready(b, model_grad_num_stages(s) - 1);
}

int cpu_forward_backward(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss) {
    CpuBackend *cb = (CpuBackend *)b;
    if (qat_begin(cb) != 0) return -1;
    int rc = forward_backward_pass(b, tokens, loss_weight, mean_loss);
    cb->qat_in_use = 0; /* evaluation and sampling read the master weights */
    return rc;
}

void cpu_destroy(Backend *b) {
    CpuBackend *cb = (CpuBackend *)b;
    cpu_optimizer_free(cb);
    cpu_ttt_free(cb);
    free(cb->qat_params);
    free(cb->arena);
    free(cb->dskip);
    free(cb->layers);
    free(cb->ids);
    free(cb->targets);
    free(cb->seg_start);
    free(cb->bigram_ids);
    free(cb);
}
