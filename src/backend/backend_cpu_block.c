/* backend_cpu_block.c — the CPU backend's forward and backward of one run of the block plan:
 * a sequential block (x -> x + attention -> + MLP), or a parallel one whose two lanes feed the
 * attention (lane 0, through resid_mix) and the MLP (lane 1) and both take both outputs
 * (docs/model.md, "Parallel residual lanes"). backend_cpu.c walks the plan, adds the U-Net skips
 * and keeps everything before the first block and after the last. */
#include <float.h>

#include "backend_cpu.h"
#include "common.h"
#include "cpu_attention.h"
#include "cpu_ops.h"

/* Whether run `run` of `plan` is of a block with XSA. */
int cpu_run_xsa(const ModelSpec *s, const BlockPlan *plan, int run) {
    return plan->runs[run].block >= s->xsa_first_layer;
}

const float *cpu_lane1_input(const CpuBackend *cb, const BlockPlan *plan, int run) {
    return run == plan->first_parallel ? cb->layers[run - 1].x_out : cb->layers[run - 1].l1_out;
}


/* The lane lambdas of block l: resid [2], post [4] (model.h); gradients with grad != 0. */
static const float *lane_resid(const CpuBackend *cb, int l) {
    const ModelSpec *s = &cb->base.state->spec;
    return cb->base.state->params + s->params[s->parallel_resid].offset + (size_t)2 * l;
}
static const float *lane_post(const CpuBackend *cb, int l) {
    const ModelSpec *s = &cb->base.state->spec;
    return cb->base.state->params + s->params[s->parallel_post].offset + (size_t)4 * l;
}

/* ---- forward ---- */

/* a->xm -> a->ao: rms_norm (times ln_scale's factor), q/k/v, QK-norm and RoPE, attention, XSA,
 * the sparse gate, attn.proj. */
static void attention_forward(CpuBackend *cb, CpuLayerActs *a, int run, int l, int xsa, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    const int T = cb->T, N = B * T, D = s->dim, KV = s->kv_dim;
    cpu_rmsnorm_forward(a->a_in, a->rstd_attn, a->xm, N, D, FLT_EPSILON);
    if (s->ln_scale) cpu_scale(a->a_in, model_ln_scale(s, l), (size_t)N * D);
    cpu_linear_forward(a->q_raw, a->a_in, cpu_block_w(cb, l, BLK_C_Q), N, D, D);
    cpu_linear_forward(a->k_raw, a->a_in, cpu_block_w(cb, l, BLK_C_K), N, D, KV);
    cpu_linear_forward(a->v, a->a_in, cpu_block_w(cb, l, BLK_C_V), N, D, KV);
    cpu_lora_rows_forward(cb, run, LORA_Q, a->a_in, a->q_raw, B);
    cpu_lora_rows_forward(cb, run, LORA_K, a->a_in, a->k_raw, B);
    cpu_lora_rows_forward(cb, run, LORA_V, a->a_in, a->v, B);
    cpu_qk_norm_rope_forward(a->q, a->q_raw, cpu_block_w(cb, l, BLK_Q_GAIN), cb->rope_cos, cb->rope_sin, B, T,
                             s->num_heads, s->head_dim, s->rope_dims);
    cpu_qk_norm_rope_forward(a->k, a->k_raw, NULL, cb->rope_cos, cb->rope_sin, B, T, s->num_kv_heads, s->head_dim,
                             s->rope_dims);
    cpu_attention_forward(a->y, a->stats, a->q, a->k, a->v, cb->seg_start, B, T, s->num_heads, s->num_kv_heads,
                          s->head_dim, cb->attn_scratch, cb->attn_scratch_floats);
    if (xsa) cpu_xsa_forward(a->y_xsa, a->y, a->v, N, s->num_heads, s->num_kv_heads, s->head_dim);
    if (a->y_gate) /* the sparse gate on each head's output (after XSA), from a_in's first channels */
        cpu_head_gate_forward(a->y_gate, a->gate, xsa ? a->y_xsa : a->y, a->a_in,
                              cpu_weights_of(cb, model_attn_gate(s, l)), N, s->num_heads, s->head_dim,
                              s->gate_window, s->gate_scale);
    cpu_linear_forward(a->ao, cpu_proj_input(a, xsa), cpu_block_w(cb, l, BLK_PROJ), N, D, D);
    cpu_lora_rows_forward(cb, run, LORA_O, a->a_in, a->ao, B); /* TTT's o adapter reads the normed input */
}

/* in -> a->mo: rms_norm (times ln_scale's factor), fc, leaky relu^2, mlp.proj. */
static void mlp_forward(CpuBackend *cb, CpuLayerActs *a, int run, int l, const float *in, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = B * cb->T, D = s->dim, HID = s->hidden;
    cpu_rmsnorm_forward(a->m_in, a->rstd_mlp, in, N, D, FLT_EPSILON);
    if (s->ln_scale) cpu_scale(a->m_in, model_ln_scale(s, l), (size_t)N * D);
    cpu_linear_forward(a->u, a->m_in, cpu_block_w(cb, l, BLK_FC), N, D, HID);
    cpu_relu2_forward(a->h, a->u, N, HID, s->mlp_negative_slope);
    cpu_linear_forward(a->mo, a->h, cpu_block_w(cb, l, BLK_MLP_PROJ), N, HID, D);
    cpu_lora_rows_forward(cb, run, LORA_MLP, a->m_in, a->mo, B); /* TTT's mlp adapter bypasses the MLP */
}

void cpu_run_forward(CpuBackend *cb, const BlockPlan *plan, int run, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    CpuLayerActs *a = &cb->layers[run];
    const int l = plan->runs[run].block, N = B * cb->T, D = s->dim;
    cpu_residual_mix_forward(a->xm, a->x_in, cb->x0, cpu_block_w(cb, l, BLK_RESID_MIX), N, D);
    attention_forward(cb, a, run, l, cpu_run_xsa(s, plan, run), B);
    if (!plan->runs[run].parallel) {
        cpu_scaled_add_forward(a->x1, a->xm, a->ao, cpu_block_w(cb, l, BLK_ATTN_SCALE), N, D);
        mlp_forward(cb, a, run, l, a->x1, B);
        cpu_scaled_add_forward(a->x_out, a->x1, a->mo, cpu_block_w(cb, l, BLK_MLP_SCALE), N, D);
        return;
    }
    /* lane 0 (x_in, after the skip) continues past the mix, not from xm */
    const float *l1 = cpu_lane1_input(cb, plan, run);
    mlp_forward(cb, a, run, l, l1, B);
    cpu_lane_mix_forward(a->x_out, a->l1_out, a->x_in, l1, a->ao, a->mo, cpu_block_w(cb, l, BLK_ATTN_SCALE),
                         cpu_block_w(cb, l, BLK_MLP_SCALE), lane_resid(cb, l), lane_post(cb, l), N, D);
}

/* ---- backward ---- */

/* dmo = dL/d(mlp.proj output) -> din += dL/d(in), the MLP's input (x1, or lane 1). Uses dH1, dH2
 * and dD2; dmo may be dD1. */
static void mlp_backward(CpuBackend *cb, CpuLayerActs *a, int run, int l, const float *dmo, const float *in,
                         float *din, int B) {
    const ModelSpec *s = &cb->base.state->spec;
    const int N = B * cb->T, D = s->dim, HID = s->hidden;
    const size_t ND = (size_t)N * D;
    cpu_zero(cb->dH1, (size_t)N * HID);
    cpu_linear_backward(cb->dH1, cpu_block_linear_g(cb, l, BLK_MLP_PROJ), dmo, a->h,
                        cpu_block_w(cb, l, BLK_MLP_PROJ), N, HID, D);
    cpu_zero(cb->dH2, (size_t)N * HID);
    cpu_relu2_backward(cb->dH2, cb->dH1, a->u, N, HID, s->mlp_negative_slope);
    cpu_zero(cb->dD2, ND);
    cpu_linear_backward(cb->dD2, cpu_block_linear_g(cb, l, BLK_FC), cb->dH2, a->m_in, cpu_block_w(cb, l, BLK_FC), N, D,
                        HID);
    cpu_lora_rows_backward(cb, run, LORA_MLP, a->m_in, dmo, cb->dD2, cb->ttt ? cb->ttt->dh : NULL, B);
    if (s->ln_scale) cpu_scale(cb->dD2, model_ln_scale(s, l), ND);
    cpu_rmsnorm_backward(din, cb->dD2, in, a->rstd_mlp, N, D);
}

/* dao = dL/d(attn.proj output) -> dxm += dL/d(xm). Reads dao before it writes dD1, so dao may be
 * dD1; uses dD1, dD2, dq, dk, dv, dk_raw and gate_dz. */
static void attention_backward(CpuBackend *cb, CpuLayerActs *a, int run, int l, int xsa, const float *dao,
                               float *dxm, int B) {
    TrainState *st = cb->base.state;
    const ModelSpec *s = &st->spec;
    const int T = cb->T, N = B * T, D = s->dim, KV = s->kv_dim;
    const size_t ND = (size_t)N * D;
    /* the o adapter's dh while dao is there (it may be dD1); its input share comes with a_in's below */
    cpu_lora_rows_backward(cb, run, LORA_O, a->a_in, dao, NULL, cb->ttt ? cb->ttt->dh_o : NULL, B);
    cpu_zero(cb->dD2, ND);
    cpu_linear_backward(cb->dD2, cpu_block_linear_g(cb, l, BLK_PROJ), dao, cpu_proj_input(a, xsa), cpu_block_w(cb, l, BLK_PROJ),
                        N, D, D);
    const ParamInfo *gate_w = model_attn_gate(s, l);
    if (gate_w) /* through the sparse gate, in place: dD2 becomes dL/d(its input); dz kept for d a_in */
        cpu_head_gate_backward(cb->dD2, cb->gate_dz, st->grads + gate_w->offset, cb->dD2, xsa ? a->y_xsa : a->y,
                               a->gate, a->a_in, N, s->num_heads, s->head_dim, s->gate_window, s->gate_scale);
    cpu_zero(cb->dq, ND);
    cpu_zero(cb->dk, (size_t)N * KV);
    cpu_zero(cb->dv, (size_t)N * KV);
    float *dy = cb->dD2; /* dL/d(attention output) */
    if (xsa) {           /* through XSA: to y, and to v via its unit vector */
        cpu_zero(cb->dD1, ND);
        cpu_xsa_backward(cb->dD1, cb->dv, cb->dD2, a->y, a->v, N, s->num_heads, s->num_kv_heads, s->head_dim);
        dy = cb->dD1;
    }
    cpu_attention_backward(cb->dq, cb->dk, cb->dv, dy, a->q, a->k, a->v, cb->seg_start, a->stats, B, T, s->num_heads,
                           s->num_kv_heads, s->head_dim, cb->attn_scratch, cb->attn_scratch_floats);
    cpu_zero(cb->dD1, ND); /* dq_raw */
    cpu_qk_norm_rope_backward(cb->dD1, cpu_block_g(cb, l, BLK_Q_GAIN), cb->dq, a->q_raw, cpu_block_w(cb, l, BLK_Q_GAIN),
                              cb->rope_cos, cb->rope_sin, B, T, s->num_heads, s->head_dim, s->rope_dims,
                              cb->rope_scratch);
    cpu_zero(cb->dk_raw, (size_t)N * KV);
    cpu_qk_norm_rope_backward(cb->dk_raw, NULL, cb->dk, a->k_raw, NULL, cb->rope_cos, cb->rope_sin, B, T,
                              s->num_kv_heads, s->head_dim, s->rope_dims, cb->rope_scratch);
    cpu_zero(cb->dD2, ND); /* d a_in */
    cpu_linear_backward(cb->dD2, cpu_block_linear_g(cb, l, BLK_C_Q), cb->dD1, a->a_in, cpu_block_w(cb, l, BLK_C_Q), N,
                        D, D);
    cpu_linear_backward(cb->dD2, cpu_block_linear_g(cb, l, BLK_C_K), cb->dk_raw, a->a_in, cpu_block_w(cb, l, BLK_C_K),
                        N, D, KV);
    cpu_linear_backward(cb->dD2, cpu_block_linear_g(cb, l, BLK_C_V), cb->dv, a->a_in, cpu_block_w(cb, l, BLK_C_V), N,
                        D, KV);
    if (cb->ttt && cb->ttt->active) { /* the adapters reading a_in: o (its dh from above), q, k, v */
        cpu_lora_rows_backward_input(cb, run, LORA_O, cb->ttt->dh_o, cb->dD2, B);
        cpu_lora_rows_backward(cb, run, LORA_Q, a->a_in, cb->dD1, cb->dD2, cb->ttt->dh, B);
        cpu_lora_rows_backward(cb, run, LORA_K, a->a_in, cb->dk_raw, cb->dD2, cb->ttt->dh, B);
        cpu_lora_rows_backward(cb, run, LORA_V, a->a_in, cb->dv, cb->dD2, cb->ttt->dh, B);
    }
    if (gate_w) /* the gate read a_in's first gate_window channels */
        cpu_head_gate_input_backward(cb->dD2, cb->gate_dz, cpu_weights_of(cb, gate_w), N, s->num_heads, s->head_dim,
                                     s->gate_window);
    if (s->ln_scale) cpu_scale(cb->dD2, model_ln_scale(s, l), ND);
    cpu_rmsnorm_backward(dxm, cb->dD2, a->xm, a->rstd_attn, N, D);
}

static void swap(float **a, float **b) {
    float *t = *a;
    *a = *b;
    *b = t;
}

void cpu_run_backward(CpuBackend *cb, const BlockPlan *plan, int run, int B, float **dx, float **dx_alt) {
    const ModelSpec *s = &cb->base.state->spec;
    CpuLayerActs *a = &cb->layers[run];
    const int l = plan->runs[run].block, xsa = cpu_run_xsa(s, plan, run), N = B * cb->T, D = s->dim;
    const size_t ND = (size_t)N * D;
    if (!plan->runs[run].parallel) {
        /* x_out = x1 + mlp_scale * mo; *dx keeps being dL/d(x1) for the residual path */
        cpu_zero(cb->dD1, ND);
        cpu_scaled_add_backward(NULL, cb->dD1, cpu_block_g(cb, l, BLK_MLP_SCALE), *dx, a->mo,
                                cpu_block_w(cb, l, BLK_MLP_SCALE), N, D);
        mlp_backward(cb, a, run, l, cb->dD1, a->x1, *dx, B);
        /* x1 = xm + attn_scale * ao */
        cpu_zero(cb->dD1, ND);
        cpu_scaled_add_backward(NULL, cb->dD1, cpu_block_g(cb, l, BLK_ATTN_SCALE), *dx, a->ao,
                                cpu_block_w(cb, l, BLK_ATTN_SCALE), N, D);
        attention_backward(cb, a, run, l, xsa, cb->dD1, *dx, B);
    } else {
        /* *dx, cb->dl1: dL/d(lane 0, lane 1 out) -> *dx_alt, cb->dl1_alt: their inputs' (the
         * mix's share; the branches add theirs), dao and dD1: the branches' outputs' */
        const TrainState *st = cb->base.state;
        const float *l1 = cpu_lane1_input(cb, plan, run);
        cpu_zero(*dx_alt, ND);
        cpu_zero(cb->dl1_alt, ND);
        cpu_zero(cb->dao, ND);
        cpu_zero(cb->dD1, ND);
        cpu_lane_mix_backward(*dx_alt, cb->dl1_alt, cb->dao, cb->dD1, cpu_block_g(cb, l, BLK_ATTN_SCALE),
                              cpu_block_g(cb, l, BLK_MLP_SCALE),
                              st->grads + s->params[s->parallel_resid].offset + (size_t)2 * l,
                              st->grads + s->params[s->parallel_post].offset + (size_t)4 * l, *dx, cb->dl1, a->x_in,
                              l1, a->ao, a->mo, cpu_block_w(cb, l, BLK_ATTN_SCALE), cpu_block_w(cb, l, BLK_MLP_SCALE),
                              lane_resid(cb, l), lane_post(cb, l), N, D);
        mlp_backward(cb, a, run, l, cb->dD1, l1, cb->dl1_alt, B);
        swap(&cb->dl1, &cb->dl1_alt);
        cpu_zero(*dx, ND); /* dL/d(xm): the attention's alone */
        attention_backward(cb, a, run, l, xsa, cb->dao, *dx, B);
        /* *dx_alt holds lane 0's own share; the mix below adds the attention's */
        swap(dx, dx_alt);
        cpu_residual_mix_backward(*dx, cb->dx0, cpu_block_g(cb, l, BLK_RESID_MIX), *dx_alt, a->x_in, cb->x0,
                                  cpu_block_w(cb, l, BLK_RESID_MIX), N, D);
        return;
    }
    /* xm = mix[0] * x_in + mix[1] * x0 */
    cpu_zero(*dx_alt, ND);
    cpu_residual_mix_backward(*dx_alt, cb->dx0, cpu_block_g(cb, l, BLK_RESID_MIX), *dx, a->x_in, cb->x0,
                              cpu_block_w(cb, l, BLK_RESID_MIX), N, D);
    swap(dx, dx_alt);
}
