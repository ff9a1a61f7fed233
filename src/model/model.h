/* model.h — the parameter-golf GPT's parameters: names, shapes and order exactly as
 * train_gpt.py's state_dict (so checkpoints map 1:1 onto it), which optimizer owns each, where
 * each lives in one flat fp32 buffer, and the deterministic initialisation from `seed`.
 * The math itself lives in the backends (backend.h). */
#ifndef CT_MODEL_H
#define CT_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* Which optimizer updates a parameter (train_gpt.py's split). */
typedef enum {
    PARAM_TOKEN_EMBED, /* tok_emb.weight: Adam, tied_embed_lr (embed_lr when untied) */
    PARAM_HEAD,        /* lm_head.weight (untied only): Adam, head_lr */
    PARAM_MATRIX,      /* 2-D block matrices: Muon, matrix_lr */
    PARAM_SCALAR,      /* control tensors and skip_weights: Adam, scalar_lr */
} ParamGroup;

typedef struct {
    char name[64];
    int ndim;
    int64_t shape[3]; /* shape[ndim..2] are 1 (a 1-D [n] is {n, 1, 1}) */
    size_t offset; /* in floats, into the flat parameter buffer */
    size_t count;
    ParamGroup group;
} ParamInfo;

/* Per-block parameter indices into ModelSpec.params (the order inside a block follows
 * train_gpt.py's module registration order). */
enum { BLK_C_Q, BLK_C_K, BLK_C_V, BLK_PROJ, BLK_Q_GAIN, BLK_FC, BLK_MLP_PROJ, BLK_ATTN_SCALE, BLK_MLP_SCALE,
       BLK_RESID_MIX, BLK_NUM_PARAMS };

/* ModelSpec.parallel_final: the hidden state after the last parallel block */
enum { PARALLEL_FINAL_MEAN, PARALLEL_FINAL_ATTN, PARALLEL_FINAL_MLP };

typedef struct {
    int vocab, num_layers, dim, num_heads, num_kv_heads, head_dim, kv_dim, hidden;
    int num_encoder, num_decoder, num_skip; /* of the plain plan; num_skip: block_plan_skip_rows */
    /* the block run order (block_plan.h): plain (depth recurrence off, or not switched on yet)
     * and looped (num_loops > 0; the same list as plain when num_loops = 0). A backend walks the
     * one model_plan(spec, state->loop_active) gives. */
    int num_loops;
    BlockPlan plan_plain, plan_looped;
    int tied;
    float softcap, rope_base, qk_gain_init, tied_embed_init_std;
    /* the record stack (docs/model.md, "Record features"); each 0 when off */
    int rope_dims;          /* dims of each head RoPE rotates (head_dim when rope_dims = 0) */
    int rope_train_seq_len; /* NTK base scaling above this length; 0 = never */
    int ln_scale;           /* block l's norm outputs times 1/sqrt(l+1) */
    int xsa_first_layer;    /* XSA in blocks [xsa_first_layer, num_layers); num_layers = none */
    int smear_gate;
    /* the 1.0611 record's SmearGate (smear_gate_enabled): on the raw embedding, masked at BOS */
    int smear_bos;
    int bigram_vocab, bigram_dim; /* bigram_vocab 0 = no bigram embedding */
    int ortho_init;
    int mtp_heads; /* multi-token-prediction heads (training only) */
    float mlp_negative_slope; /* MLP activation leaky_relu(h, s)^2; 0 = relu^2 */
    /* the sparse attention gate (docs/model.md): per block attn_gate_w [num_heads, gate_window] */
    int attn_gate, gate_window;
    float gate_scale, gate_init_std;
    /* parallel residual lanes (parallel_start_layer > 0; block_plan.h marks the runs): what leaves
     * the last block, PARALLEL_FINAL_* from parallel_final_lane */
    int parallel_final;

    int num_params;
    ParamInfo *params;   /* state_dict order */
    size_t total_floats; /* size of the flat parameter buffer */
    int tok_emb, skip_weights, lm_head; /* indices; lm_head = -1 when tied */
    int first_block;                    /* index of blocks.0.attn.c_q.weight */
    /* record-stack parameters, after all of the above (so the baseline's layout is unchanged);
     * -1 when absent. bigram_proj is absent when bigram_dim == model_dim (no projection). */
    int bigram_scale, bigram_embed, bigram_proj, smear;
    /* skip_gates [num_skip, D] (skip_gates_enabled), after smear.gate; -1 when absent. Its rows,
     * as skip_weights', are num_skip: the one place that count is set (model_spec_init) */
    int skip_gates;
    /* blocks.l.attn.attn_gate_w is parameter first_attn_gate + l (after the record-stack ones
     * above, so BLK_NUM_PARAMS's per-block layout is unchanged); -1 when the gate is off */
    int first_attn_gate;
    /* smear_gate.weight [1, gate_window] and smear_lambda [1] (smear_gate_enabled), after the
     * attention gates; -1 when off */
    int smear_gate_w, smear_lambda;
    /* parallel_post_lambdas [L, 2, 2] and parallel_resid_lambdas [L, 2] (parallel_start_layer > 0),
     * after the SmearGate's; -1 when off. Row b is block b's: post[b, branch (0 attention, 1 MLP),
     * lane], resid[b, lane]; rows of sequential blocks stay at their init, gradient 0 */
    int parallel_post, parallel_resid;
    /* mtp_heads.k.weight is parameter first_mtp + k (k < mtp_heads), the last ones; -1 when none */
    int first_mtp;
} ModelSpec;

int model_spec_init(ModelSpec *spec, const Config *cfg);
void model_spec_free(ModelSpec *spec);

/* The plan a pass walks: the looped one once depth recurrence is on (TrainState.loop_active). */
static inline const BlockPlan *model_plan(const ModelSpec *s, int loop_active) {
    return loop_active && s->num_loops > 0 ? &s->plan_looped : &s->plan_plain;
}
/* The most runs either plan has (what a backend sizes its per-run activations for). */
static inline int model_max_runs(const ModelSpec *s) { return s->plan_looped.num_runs; }

/* The factor block `layer`'s RMSNorm outputs are multiplied by (ln_scale), 1 when off. */
static inline float model_ln_scale(const ModelSpec *s, int layer) {
    return s->ln_scale ? 1.0f / sqrtf((float)(layer + 1)) : 1.0f;
}
/* The RoPE base for sequences of seq_len tokens: rope_base, scaled NTK-style as the record's
 * Rotary when seq_len exceeds rope_train_seq_len: base * (seq_len / rope_train_seq_len)^(r/(r-2))
 * with r = rope_dims (computed in double, as Python does, then rounded to fp32). */
float model_rope_base(const ModelSpec *s, int seq_len);

/* Whether parameter `param` is a multi-token-prediction head: trained, checkpointed, never
 * evaluated, sampled or exported (the record drops mtp_heads from its artifact). */
static inline int model_is_mtp_head(const ModelSpec *s, int param) {
    return s->first_mtp >= 0 && param >= s->first_mtp && param < s->first_mtp + s->mtp_heads;
}

/* The parameters a parameter-golf artifact holds: every one but the multi-token-prediction
 * heads, which come last (params [0, model_artifact_params)). */
static inline int model_artifact_params(const ModelSpec *s) { return s->num_params - s->mtp_heads; }

/* Index of a parameter of block `layer` (BLK_*). */
static inline const ParamInfo *model_block_param(const ModelSpec *s, int layer, int which) {
    return &s->params[s->first_block + layer * BLK_NUM_PARAMS + which];
}
/* Block `layer`'s sparse attention gate weights attn_gate_w, NULL when the gate is off. */
static inline const ParamInfo *model_attn_gate(const ModelSpec *s, int layer) {
    return s->first_attn_gate >= 0 ? &s->params[s->first_attn_gate + layer] : NULL;
}
const ParamInfo *model_find_param(const ModelSpec *spec, const char *name);
/* The initialisation's random numbers: uniform in (0, 1) with 53 random bits, element i of
 * stream `stream` under `seed`, counter-based (the same number however the draws are scheduled). */
double model_uniform01(uint64_t seed, uint64_t stream, uint64_t i);

/* The number of dimensions train_gpt.py gives parameter p: its ndim, except 0 for the tensors
 * the record holds as 0-d (`nn.Parameter(torch.tensor(0.05))`: bigram.scale), which ctrain keeps
 * with shape [1]. For the files meant for train_gpt.py's load_state_dict(strict=True), which
 * refuses [1] for a 0-d parameter (ckpt export, ckpt golf --dequantized). */
int model_param_torch_ndim(const ParamInfo *p);

/* The backward pass in stages, the points at which some gradients become final (every backend
 * runs the backward in this order and reports the stages through Backend.grad_ready, so that a
 * GPU job can start reducing those gradients while the rest of the backward runs):
 *   stage 0                    the output layer (logits): lm_head when untied, and the
 *                              multi-token-prediction heads
 *   stage 1 + (L - 1 - l)      block l, for l = L-1 down to 0 (its ten parameters; its sparse
 *                              attention gate, which is not among the ten, with it). The backward
 *                              walks the plan's runs in reverse and reports block l's stage when
 *                              it has passed block l's FIRST run (with depth recurrence a block
 *                              runs more than once, and its gradient sums over all its runs);
 *                              first runs come in block order in both plans (block_plan.h), so the
 *                              stages still come in this order. skip_weights and skip_gates: the
 *                              stage reported after the first decoder run (the last to use them)
 *                              in either plan, the later of the two (model_skip_stage_block)
 *   stage L + 1                the embedding: tok_emb (tied: also the output layer's share),
 *                              and the bigram embedding and smear gate when the model has them
 * model_grad_ready_stage gives the stage after which parameter `param`'s gradient is final. */
static inline int model_grad_num_stages(const ModelSpec *s) { return s->num_layers + 2; }
static inline int model_grad_stage_of_block(const ModelSpec *s, int layer) { return s->num_layers - layer; }
int model_grad_ready_stage(const ModelSpec *spec, int param);
/* Run `run` of `plan` is its block's first run (where the backward reports the block's stage). */
int model_plan_first_run(const BlockPlan *plan, int run);
/* The block whose stage makes skip_weights and skip_gates final (see above). */
int model_skip_stage_block(const ModelSpec *spec);

/* Deterministic initialisation as train_gpt.py's GPT.__init__ (distributions, not torch's
 * bits): tok_emb N(0, tied_embed_init_std) when tied (N(0, 1), nn.Embedding's default, when
 * untied); c_q, c_k, c_v, fc U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (nn.Linear's default bound);
 * attn.proj, mlp.proj and lm_head zero; q_gain = qk_gain_init; attn_scale, mlp_scale and
 * skip_weights 1; resid_mix = [1; 0]. Record stack (docs/model.md): bigram.embed zero,
 * bigram.scale 0.05, smear.gate zero, skip_gates zero, parallel_post_lambdas 1, parallel_resid_lambdas 1.1, attn_gate_w zero (N(0,
 * sparse_attn_gate_init_std) when that is > 0), bigram.proj and mtp_heads zero (nn.init.zeros_, the
 * record's _zero_init); with ortho_init, the
 * record's _init_weights: every matrix that is not zero-initialised and has both sides >= 64
 * gets an orthogonal init (gain 1; that includes bigram.proj, whose zeros the record overwrites)
 * and those named *.proj are then scaled by 1/sqrt(2 * num_layers). Every element is a pure function of (seed, parameter
 * index, element index), so the result never depends on threads or order. */
void model_init_weights(const ModelSpec *spec, uint64_t seed, float *params);

/* Model FLOPs per token for a training step (forward + backward, matrix products and
 * attention), for tokens/s -> GFLOP/s reporting; see docs/model.md for the count. */
double model_train_flops_per_token(const ModelSpec *spec, int seq_len);
/* The attention's share of it (q.k and p.v, forward and backward): the rest is matrix products. */
double model_attention_flops_per_token(const ModelSpec *spec, int seq_len);

#endif
