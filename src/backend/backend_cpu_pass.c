/* backend_cpu_pass.c — the CPU backend's pass through the network for B rows of cb->T tokens
 * (backend_cpu.h): forward from the token ids through the embeddings, every run of the block plan
 * with its U-Net skips and the final norm (cpu_forward_blocks), and the backward from the final
 * norm's output back to x0 (cpu_backward_blocks). The training step and the evaluations
 * (backend_cpu.c) and test-time training (backend_cpu_ttt.c) are built on them; one run of the
 * plan is backend_cpu_block.c's. */
#include <float.h>

#include "backend_cpu.h"
#include "common.h"
#include "cpu_ops.h"
#include "packing.h"

/* The last run's output, the final norm's input: with parallel lanes the one
 * parallel_final_lane names, or their mean (x_lanes) */
static const float *final_hidden(const CpuBackend *cb, const BlockPlan *plan) {
    const CpuLayerActs *last = &cb->layers[plan->num_runs - 1];
    if (plan->first_parallel == plan->num_runs) return last->x_out;
    const int final = cb->base.state->spec.parallel_final;
    return final == PARALLEL_FINAL_ATTN ? last->x_out : final == PARALLEL_FINAL_MLP ? last->l1_out : cb->x_lanes;
}

/* Forward through embeddings and blocks for B sequences; leaves the final normed x in cb->xf. */
int cpu_forward_blocks(CpuBackend *cb, int B) {
    TrainState *st = cb->base.state;
    const ModelSpec *s = &st->spec;
    int T = cb->T, N = B * T, D = s->dim;
    if (cb->seg_start) /* each row's documents, from its ids (the backward reuses them) */
        for (int b = 0; b < B; b++)
            packing_segments(cb->ids + (size_t)b * T, T, cb->base.bos_id, cb->max_doc_len,
                             cb->seg_start + (size_t)b * T);
    if (cpu_embedding_forward(cb->emb, cb->ids, st->params + s->params[s->tok_emb].offset, N, s->vocab, D) != 0) return -1;
    if (s->bigram_vocab) { /* emb += scale * proj(bigram_embed[hash(prev, token)]) */
        cpu_bigram_hash(cb->bigram_ids, cb->ids, B, T, s->bigram_vocab);
        if (cpu_embedding_forward(cb->bigram_h, cb->bigram_ids, st->params + s->params[s->bigram_embed].offset, N,
                                  s->bigram_vocab, s->bigram_dim) != 0)
            return -1;
        if (s->bigram_proj >= 0)
            cpu_linear_forward(cb->bigram_p, cb->bigram_h, cpu_weights_of(cb, &s->params[s->bigram_proj]), N,
                               s->bigram_dim, D);
        cpu_add_scalar_scaled_forward(cb->emb, cb->emb, cb->bigram_p, st->params + s->params[s->bigram_scale].offset,
                                      (size_t)N * D);
    }
    if (s->smear_bos) { /* the 1.0611 SmearGate: on the embedding (with the bigram's share), before the norm */
        if (cb->base.bos_id < 0)
            return ct_fail("smear_gate_enabled = 1 needs the data's bos_id, and this forward was given none");
        cpu_smear_bos_forward(cb->emb_smeared, cb->emb, cb->ids, st->params + s->params[s->smear_gate_w].offset,
                              st->params + s->params[s->smear_lambda].offset, B, T, D, s->gate_window,
                              cb->base.bos_id);
        cpu_rmsnorm_forward(cb->x0, cb->rstd0, cb->emb_smeared, N, D, FLT_EPSILON);
    } else if (s->smear_gate) {
        cpu_rmsnorm_forward(cb->x_normed, cb->rstd0, cb->emb, N, D, FLT_EPSILON);
        cpu_smear_forward(cb->x0, cb->x_normed, st->params + s->params[s->smear].offset, B, T, D);
    } else {
        cpu_rmsnorm_forward(cb->x0, cb->rstd0, cb->emb, N, D, FLT_EPSILON);
    }
    const float *x = cb->x0;
    const float *skip_w = st->params + s->params[s->skip_weights].offset;
    const BlockPlan *plan = model_plan(s, st->loop_active);
    for (int run = 0; run < plan->num_runs; run++) {
        CpuLayerActs *a = &cb->layers[run];
        const int dec = plan->runs[run].skip_row; /* skip row, < 0 for none */
        if (dec >= 0) {
            /* U-Net skip: x + skip_weights[dec] * output of the run the plan pairs it with;
             * with skip gates lerp(skip_weights[dec] * skip, x, sigmoid(skip_gates[dec])); a parallel
             * run takes it into lane 0 only */
            const float *skip = cb->layers[plan->runs[run].skip_source].x_out;
            if (s->skip_gates >= 0)
                cpu_skip_gate_forward(a->x_in, x, skip, skip_w + (size_t)dec * D,
                                      st->params + s->params[s->skip_gates].offset + (size_t)dec * D, N, D);
            else
                cpu_scaled_add_forward(a->x_in, x, skip, skip_w + (size_t)dec * D, N, D);
        } else {
            cpu_copy(a->x_in, x, (size_t)N * D);
        }
        cpu_run_forward(cb, plan, run, B);
        x = a->x_out;
    }
    if (cb->x_lanes && plan->first_parallel < plan->num_runs) { /* 0.5 * (lane 0 + lane 1) */
        const size_t ND = (size_t)N * D;
        cpu_copy(cb->x_lanes, x, ND);
        cpu_add_into(cb->x_lanes, cb->layers[plan->num_runs - 1].l1_out, ND);
        cpu_scale(cb->x_lanes, 0.5f, ND);
    }
    cpu_rmsnorm_forward(cb->xf, cb->rstdf, final_hidden(cb, plan), N, D, FLT_EPSILON);
    return 0;
}

const float *cpu_output_matrix(const CpuBackend *cb) {
    const ModelSpec *s = &cb->base.state->spec;
    return cpu_weights_of(cb, &s->params[s->tied ? s->tok_emb : s->lm_head]);
}

/* cb->dD1 = dL/d(xf) -> *dx_io = dL/d(x0): the final norm, the lanes' ends, every run backwards
 * with the U-Net skips, and the resid_mix paths into x0 (backend_cpu.h). */
int cpu_backward_blocks(CpuBackend *cb, int B, float **dx_io, float **dx_alt_io) {
    TrainState *st = cb->base.state;
    const ModelSpec *s = &st->spec;
    Backend *b = &cb->base;
    const int N = B * cb->T, D = s->dim;
    const size_t ND = (size_t)N * D;
    float *dx = *dx_io, *dx_alt = *dx_alt_io;
    cpu_zero(dx, ND);
    const BlockPlan *plan = model_plan(s, st->loop_active);
    cpu_rmsnorm_backward(dx, cb->dD1, final_hidden(cb, plan), cb->rstdf, N, D);
    if (plan->first_parallel < plan->num_runs) { /* dx: dL/d(final hidden) -> lane 0's, dl1 lane 1's */
        if (s->parallel_final == PARALLEL_FINAL_MEAN) {
            cpu_scale(dx, 0.5f, ND);
            cpu_copy(cb->dl1, dx, ND);
        } else if (s->parallel_final == PARALLEL_FINAL_MLP) {
            cpu_copy(cb->dl1, dx, ND);
            cpu_zero(dx, ND);
        } else {
            cpu_zero(cb->dl1, ND);
        }
    }
    cpu_zero(cb->dx0, ND);
    for (int j = 0; j < s->num_skip; j++) cpu_zero(cb->dskip[j], ND);
    float *dskip_w = st->grads + s->params[s->skip_weights].offset;
    const float *skip_w = st->params + s->params[s->skip_weights].offset;

    for (int run = plan->num_runs - 1; run >= 0; run--) {
        const int l = plan->runs[run].block;
        /* dx holds dL/d(x_out). An encoder run whose output fed a skip also gets that path (its
         * decoder run, later in the plan, has been through already). */
        for (int j = plan->num_encoder; j < plan->num_runs; j++)
            if (plan->runs[j].skip_source == run) cpu_add_into(dx, cb->dskip[plan->runs[j].skip_row], ND);
        cpu_run_backward(cb, plan, run, B, &dx, &dx_alt);
        /* x_in = x_prev + skip_weights[dec] * skip for decoder runs with a skip (gated: the
         * lerp, whose x_prev gradient is a new buffer) */
        const int dec = plan->runs[run].skip_row;
        const float *skip = dec >= 0 ? cb->layers[plan->runs[run].skip_source].x_out : NULL;
        if (dec >= 0 && s->skip_gates >= 0) {
            const size_t row = (size_t)dec * D, gates = s->params[s->skip_gates].offset;
            cpu_zero(dx_alt, ND);
            cpu_skip_gate_backward(dx_alt, cb->dskip[dec], dskip_w + row, st->grads + gates + row, dx,
                                   run > 0 ? cb->layers[run - 1].x_out : cb->x0, skip, skip_w + row, st->params + gates + row, N, D);
            float *t = dx;
            dx = dx_alt;
            dx_alt = t;
        } else if (dec >= 0) {
            cpu_scaled_add_backward(NULL, cb->dskip[dec], dskip_w + (size_t)dec * D, dx, skip, skip_w + (size_t)dec * D,
                                    N, D);
        }
        /* both lanes started from the previous run's output */
        if (run == plan->first_parallel) cpu_add_into(dx, cb->dl1, ND);
        /* a block's gradients are final once its first run is through (model.h) */
        if (model_plan_first_run(plan, run) && backend_grad_ready(b, model_grad_stage_of_block(s, l)) != 0) return -1;
    }
    /* x0 = rms_norm(emb) (smeared with the SmearGate) feeds block 0 directly (dx) and every
     * resid_mix (dx0) */
    cpu_add_into(dx, cb->dx0, ND);
    *dx_io = dx, *dx_alt_io = dx_alt;
    return 0;
}

