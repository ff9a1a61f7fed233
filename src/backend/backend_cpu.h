/* backend_cpu.h — private state of the CPU backend shared by its forward/backward
 * (backend_cpu.c, and backend_cpu_block.c for one run of the block plan) and optimizer
 * (backend_cpu_optim.c) files. */
#ifndef CT_BACKEND_CPU_H
#define CT_BACKEND_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "backend_common.h"

/* Saved activations of one block (N = B*T rows). */
typedef struct {
    float *x_in;      /* block input (after the U-Net skip add) */
    float *xm;        /* resid_mix output */
    float *rstd_attn; /* rmsnorm of xm */
    float *a_in;      /* rms_norm(xm): input of c_q, c_k, c_v */
    float *q_raw, *k_raw, *v;
    float *q, *k; /* after QK-norm + RoPE (+ q_gain) */
    float *y;     /* attention output */
    float *y_xsa; /* y minus its self-value component (XSA blocks; NULL elsewhere): attn.proj's input */
    float *gate;  /* sparse attention gate g [N, heads] (NULL without the gate) */
    float *y_gate; /* the gated attention output (after XSA): attn.proj's input with the gate */
    float *stats; /* softmax row statistics */
    float *ao;    /* attn.proj output */
    float *x1;    /* xm + attn_scale * ao */
    float *rstd_mlp;
    float *m_in; /* rms_norm(x1) */
    float *u;    /* fc output */
    float *h;    /* relu(u)^2 */
    float *mo;   /* mlp.proj output */
    float *x_out; /* the block's output; a parallel run's lane 0 */
    /* parallel runs: lane 1's output (NULL for a run that no plan runs in parallel). Lane 0's
     * input is x_in; lane 1's is the previous run's l1_out (its x_out at the first parallel run).
     * A parallel run leaves x1 unused. */
    float *l1_out;
} CpuLayerActs;

/* Tokens per chunk of the fused logits + cross-entropy (cpu_logits_ce_*): its scratch's rows. */
enum { CPU_LOGITS_CHUNK = 256 };

/* Test-time training's adapters on the CPU backend (backend_cpu_ttt.c; NULL until ttt_open). */
typedef struct {
    const LoraLayout *layout;
    int slots;
    float *w, *g, *m, *v; /* [slots * slot_floats]: adapters, their gradients, Adam's moments (SGD's buffer: m) */
    int64_t *steps;       /* [slots]: optimizer steps taken since the slot's reset */
    float *h;             /* [T * rank]: one row's x A^T */
    float *dh, *dh_o;     /* [B * T * rank]: dL/dh of the adapter being differentiated; the o adapter's, kept
                           * until the normed attention input's gradient is put together */
    float *head_h, *head_dh; /* [B * T * rank]: the head adapter's h and dL/dh */
    float *junk_grads;    /* the base gradients a chunk's backward adds to instead of the state's (never read):
                           * the per-channel ones (norm scales, q_gain, lambdas, gates: cheap), and with
                           * base_grads the matrices' too */
    int base_grads;       /* CT_TTT_BASE_GRADS=1 (backend_ttt_base_grads): the matrices' weight gradients made too */
    int slot0;            /* while a chunk runs: row 0's slot */
    int active;           /* 1 while a chunk with adapters runs: the block passes add them */
    const uint8_t *row_train; /* while a chunk's backward runs: which rows train (the others' gradients are 0) */
} CpuTtt;

typedef struct {
    Backend base;
    int B, T; /* the buffers' capacity; a test-time-training chunk runs at T = its window (<= capacity) */
    CpuTtt *ttt;
    void *arena; /* every buffer below (but the optimizer's) is carved from it */
    int32_t *ids, *targets;
    /* doc_packing (NULL when off): [N] each token's segment start within its row (packing.h),
     * computed from ids by forward_blocks; max_doc_len cuts long documents */
    int32_t *seg_start;
    int64_t max_doc_len;
    float *emb, *x0, *rstd0, *xf, *rstdf, *losses;
    /* record stack (NULL when the model has no such part) */
    int32_t *bigram_ids;         /* [N] bucket of each position's token pair */
    float *bigram_h, *bigram_p;  /* [N, bigram_dim] table rows; [N, D] projected (= bigram_h without proj) */
    float *emb_smeared;          /* [N, D] emb after the 1.0611 SmearGate, its norm's input */
    float *x_normed;             /* [N, D] rms_norm(emb), the SmearGate's input (x0 is its output) */
    float *dbigram_h;            /* [N, bigram_dim] backward through the projection */
    CpuLayerActs *layers;
    float *rope_cos, *rope_sin;
    /* backward work buffers */
    float *dx, *dx_alt, *dx0, *dD1, *dD2, *dH1, *dH2, *dq, *dk, *dv, *dk_raw;
    float *gate_dz; /* the sparse attention gate's logit gradient [N, heads] (NULL without the gate) */
    /* parallel lanes (NULL without): x_lanes [N, D] the mean of the last run's lanes (its
     * final norm's input, parallel_final_lane = mean); dl1, dl1_alt lane 1's gradient beside
     * dx, dx_alt; dao the attention's output gradient while dD1 holds the MLP's */
    float *x_lanes, *dl1, *dl1_alt, *dao;
    float **dskip;
    float *attn_scratch, *rope_scratch, *logits_scratch;
    size_t attn_scratch_floats;
    /* optimizer work buffers (backend_cpu_optim.c) */
    float *muon_updates; /* every matrix's update, flat, in parameter order (for sharding) */
    size_t muon_update_floats;
    float *muon_scratch;
    float **clip_grads;
    size_t *clip_counts;
    float *sgd_buf; /* sgd_step's momentum (test-time training's global step), allocated at its first use */
    /* late QAT (backend_cpu.c): the fake-quantized weights of the linear layers (allocated with
     * qat_enabled or late_qat, else NULL), read instead of the master weights while qat_in_use */
    float *qat_params;
    int qat_in_use;
    double mtp_loss_weight; /* the multi-token-prediction heads' share of the loss (config) */
} CpuBackend;

/* ---- weights as a pass reads them (late QAT's copy while qat_in_use, qat_begin in backend_cpu.c) ---- */
static inline const float *cpu_weights_of(const CpuBackend *cb, const ParamInfo *p) {
    const float *base = cb->qat_in_use && backend_qat_quantizes(p) ? cb->qat_params : cb->base.state->params;
    return base + p->offset;
}
static inline const float *cpu_block_w(const CpuBackend *cb, int layer, int which) {
    return cpu_weights_of(cb, model_block_param(&cb->base.state->spec, layer, which));
}
static inline float *cpu_block_g(CpuBackend *cb, int layer, int which) {
    TrainState *st = cb->base.state;
    return st->grads + model_block_param(&st->spec, layer, which)->offset;
}
/* A linear layer's weight gradient as the backward takes it: NULL (not computed) while a
 * test-time-training chunk trains only its adapters (unless CT_TTT_BASE_GRADS=1 asks for them,
 * into the chunk's scratch). */
static inline float *cpu_block_linear_g(CpuBackend *cb, int layer, int which) {
    return cb->ttt && cb->ttt->active && !cb->ttt->base_grads ? NULL : cpu_block_g(cb, layer, which);
}

/* ---- test-time training's adapters inside a pass (backend_cpu_lora.c): no-ops unless a chunk
 * with adapters runs (cb->ttt->active); row b of the B rows uses slot ttt->slot0 + b ---- */
/* out += s * (x A^T) B^T of adapter (run, kind), row by row (x [B*T, in], out [B*T, out]). */
void cpu_lora_rows_forward(CpuBackend *cb, int run, LoraKind kind, const float *x, float *out, int B);
/* Given dout = dL/d(out): dh (dh_keep [B*T, rank]) and the adapter's gradients for the training
 * rows, and dx += dh A when dx is not NULL. */
void cpu_lora_rows_backward(CpuBackend *cb, int run, LoraKind kind, const float *x, const float *dout, float *dx,
                            float *dh_keep, int B);
/* dx += dh A for the training rows, dh from an earlier cpu_lora_rows_backward (dx NULL there). */
void cpu_lora_rows_backward_input(CpuBackend *cb, int run, LoraKind kind, const float *dh_keep, float *dx, int B);

/* ---- one run of the block plan (backend_cpu_block.c), for B sequences ---- */
int cpu_run_xsa(const ModelSpec *s, const BlockPlan *plan, int run);
/* attn.proj's input: the attention output after XSA and the sparse gate, where the block has them. */
static inline const float *cpu_proj_input(const CpuLayerActs *a, int xsa) {
    return a->y_gate ? a->y_gate : xsa ? a->y_xsa : a->y;
}
/* Lane 1's input of parallel run `run`. */
const float *cpu_lane1_input(const CpuBackend *cb, const BlockPlan *plan, int run);
/* layers[run].x_in (after its skip) -> x_out, and l1_out for a parallel run (its lane 1 input
 * read from the run before). */
void cpu_run_forward(CpuBackend *cb, const BlockPlan *plan, int run, int B);
/* *dx = dL/d(x_out) (and cb->dl1 = dL/d(l1_out) for a parallel run) -> *dx = dL/d(x_in) (and
 * cb->dl1 = dL/d(lane 1 input)); the run's parameter gradients and cb->dx0 accumulate. Swaps
 * *dx with *dx_alt (and dl1 with dl1_alt) as it goes; dD1, dD2, dH1, dH2, dq, dk, dv, dk_raw,
 * dao are its scratch. */
void cpu_run_backward(CpuBackend *cb, const BlockPlan *plan, int run, int B, float **dx, float **dx_alt);

/* backend_cpu.c's passes, for test-time training (backend_cpu_ttt.c): cb->ids -> the final
 * normed x in cb->xf for B rows of cb->T; and cb->dD1 = dL/d(xf) -> *dx = dL/d(x0), the blocks'
 * gradients accumulated (dx, dx_alt: cb's two work buffers, swapped as it goes). */
int cpu_forward_blocks(CpuBackend *cb, int B);
int cpu_backward_blocks(CpuBackend *cb, int B, float **dx, float **dx_alt);
/* The output matrix (tok_emb tied, else lm_head) as the pass reads it. */
const float *cpu_output_matrix(const CpuBackend *cb);
/* The test-time-training hooks (backend.h), installed by backend_cpu_create. */
int cpu_ttt_open(Backend *b, const LoraLayout *layout, int slots);
int cpu_ttt_reset(Backend *b, const float *initial, int slot0, int n);
int cpu_ttt_chunk(Backend *b, const TttChunk *c, const TttOptimizer *o, float *losses);
int cpu_ttt_slot_to_host(Backend *b, int slot, float *out);
void cpu_ttt_free(CpuBackend *cb);
int cpu_sgd_optimizer_step(Backend *b, double lr, double momentum, double clip, int restart, double *grad_norm);

int cpu_forward_backward(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss);
int cpu_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum);
int cpu_evaluate_positions(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs, float *losses);
int cpu_position_logits(Backend *b, const uint32_t *tokens, int pos, float *logits);
int cpu_accumulate_input_grams(Backend *b, const uint32_t *tokens, int num_seqs, float *const *grams);
float *cpu_grad_buffer(Backend *b);
int cpu_optimizer_step(Backend *b, const StepHyper *h, double *grad_norm);
void cpu_optimizer_init(CpuBackend *cb);
void cpu_optimizer_free(CpuBackend *cb);
void cpu_destroy(Backend *b);

#endif
