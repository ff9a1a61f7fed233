/* model.c — parameter table of the parameter-golf GPT and its deterministic initialisation. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Parameter `name` of shape [d0], [d0, d1] or [d0, d1, d2] (ndim 1, 2, 3). */
static void add_param_shape(ModelSpec *s, int *cap, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                            ParamGroup group) {
    if (s->num_params == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        ParamInfo *p = realloc(s->params, (size_t)*cap * sizeof *p);
        if (!p) {
            fprintf(stderr, "ctrain: error: out of memory for the parameter table\n");
            exit(CT_EXIT_FAILURE);
        }
        s->params = p;
    }
    ParamInfo *p = &s->params[s->num_params++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim >= 2 ? d1 : 1;
    p->shape[2] = ndim == 3 ? d2 : 1;
    p->count = (size_t)d0 * (size_t)p->shape[1] * (size_t)p->shape[2];
    p->offset = s->total_floats;
    p->group = group;
    s->total_floats += p->count;
}

static void add_param(ModelSpec *s, int *cap, const char *name, int ndim, int64_t d0, int64_t d1, ParamGroup group) {
    add_param_shape(s, cap, name, ndim, d0, d1, 1, group);
}

int model_spec_init(ModelSpec *s, const Config *c) {
    memset(s, 0, sizeof *s);
    s->vocab = (int)c->vocab_size;
    s->num_layers = (int)c->num_layers;
    s->dim = (int)c->model_dim;
    s->num_heads = (int)c->num_heads;
    s->num_kv_heads = (int)c->num_kv_heads;
    s->head_dim = s->dim / s->num_heads;
    s->kv_dim = s->num_kv_heads * s->head_dim;
    s->hidden = (int)(c->mlp_mult * (double)s->dim); /* the record's int(mlp_mult * dim) */
    s->num_encoder = s->num_layers / 2;
    s->num_decoder = s->num_layers - s->num_encoder;
    const BlockPlanSettings plan = config_block_plan_settings(c);
    if (block_plan_check(&plan) != 0) return -1;
    s->num_loops = (int)c->num_loops;
    s->num_skip = block_plan_skip_rows(&plan); /* with num_loops = 0: min(num_encoder, num_decoder) */
    block_plan_build(&s->plan_plain, &plan, 0);
    block_plan_build(&s->plan_looped, &plan, s->num_loops > 0);
    s->tied = c->tie_embeddings != 0;
    s->softcap = (float)c->logit_softcap;
    s->rope_base = (float)c->rope_base;
    s->qk_gain_init = (float)c->qk_gain_init;
    s->tied_embed_init_std = (float)c->tied_embed_init_std;
    s->rope_dims = c->rope_dims ? (int)c->rope_dims : s->head_dim;
    s->rope_train_seq_len = (int)c->rope_train_seq_len;
    s->ln_scale = c->ln_scale != 0;
    s->xsa_first_layer = s->num_layers - (int)c->xsa_last_n;
    s->smear_gate = c->smear_gate != 0;
    s->smear_bos = c->smear_gate_enabled != 0;
    s->bigram_vocab = (int)c->bigram_vocab_size;
    s->bigram_dim = (int)c->bigram_dim;
    s->ortho_init = c->ortho_init != 0;
    s->mtp_heads = (int)c->mtp_num_heads;
    s->mlp_negative_slope = (float)c->mlp_negative_slope;
    s->attn_gate = c->sparse_attn_gate_enabled != 0;
    s->gate_window = (int)c->gate_window;
    s->gate_scale = (float)c->sparse_attn_gate_scale;
    s->gate_init_std = (float)c->sparse_attn_gate_init_std;
    s->bigram_scale = s->bigram_embed = s->bigram_proj = s->smear = s->skip_gates = s->first_attn_gate = s->first_mtp = -1;
    s->smear_gate_w = s->smear_lambda = s->parallel_post = s->parallel_resid = -1;
    s->parallel_final = !strcmp(c->parallel_final_lane, "attn")  ? PARALLEL_FINAL_ATTN
                        : !strcmp(c->parallel_final_lane, "mlp") ? PARALLEL_FINAL_MLP
                                                                 : PARALLEL_FINAL_MEAN;
    if ((double)c->vocab_size * c->model_dim > 1e10 || (double)s->hidden * s->dim > 1e10)
        return ct_fail("model too large: vocab_size * model_dim = %g", (double)c->vocab_size * c->model_dim);

    int cap = 0;
    char name[64];
    const int D = s->dim;
    /* state_dict order of train_gpt.py's GPT: tok_emb, skip_weights, blocks.*, lm_head */
    s->tok_emb = s->num_params;
    add_param(s, &cap, "tok_emb.weight", 2, s->vocab, D, PARAM_TOKEN_EMBED);
    s->skip_weights = s->num_params;
    add_param(s, &cap, "skip_weights", 2, s->num_skip, D, PARAM_SCALAR);
    s->first_block = s->num_params;
    for (int l = 0; l < s->num_layers; l++) {
#define BLOCK_PARAM(suffix, ndim, d0, d1, group)                   \
    snprintf(name, sizeof name, "blocks.%d.%s", l, suffix);        \
    add_param(s, &cap, name, ndim, d0, d1, group)
        BLOCK_PARAM("attn.c_q.weight", 2, D, D, PARAM_MATRIX);
        BLOCK_PARAM("attn.c_k.weight", 2, s->kv_dim, D, PARAM_MATRIX);
        BLOCK_PARAM("attn.c_v.weight", 2, s->kv_dim, D, PARAM_MATRIX);
        BLOCK_PARAM("attn.proj.weight", 2, D, D, PARAM_MATRIX);
        BLOCK_PARAM("attn.q_gain", 1, s->num_heads, 1, PARAM_SCALAR);
        BLOCK_PARAM("mlp.fc.weight", 2, s->hidden, D, PARAM_MATRIX);
        BLOCK_PARAM("mlp.proj.weight", 2, D, s->hidden, PARAM_MATRIX);
        BLOCK_PARAM("attn_scale", 1, D, 1, PARAM_SCALAR);
        BLOCK_PARAM("mlp_scale", 1, D, 1, PARAM_SCALAR);
        BLOCK_PARAM("resid_mix", 2, 2, D, PARAM_SCALAR);
#undef BLOCK_PARAM
    }
    s->lm_head = -1;
    if (!s->tied) {
        s->lm_head = s->num_params;
        add_param(s, &cap, "lm_head.weight", 2, s->vocab, D, PARAM_HEAD);
    }
    if (s->bigram_vocab) {
        /* the record's optimizer split: the table with the token embedding (Adam), the
         * projection with the block matrices (Muon), the scale with the scalars (Adam) */
        s->bigram_scale = s->num_params;
        add_param(s, &cap, "bigram.scale", 1, 1, 1, PARAM_SCALAR);
        s->bigram_embed = s->num_params;
        add_param(s, &cap, "bigram.embed.weight", 2, s->bigram_vocab, s->bigram_dim, PARAM_TOKEN_EMBED);
        if (s->bigram_dim != D) {
            s->bigram_proj = s->num_params;
            add_param(s, &cap, "bigram.proj.weight", 2, D, s->bigram_dim, PARAM_MATRIX);
        }
    }
    if (s->smear_gate) {
        s->smear = s->num_params;
        add_param(s, &cap, "smear.gate", 1, D, 1, PARAM_SCALAR);
    }
    if (c->skip_gates_enabled) { /* the record's scalar AdamW group, as skip_weights */
        s->skip_gates = s->num_params;
        add_param(s, &cap, "skip_gates", 2, s->num_skip, D, PARAM_SCALAR);
    }
    if (s->attn_gate) { /* the 1.0611 record's scalar group (its name matches attn_gate_w) */
        s->first_attn_gate = s->num_params;
        for (int l = 0; l < s->num_layers; l++) {
            snprintf(name, sizeof name, "blocks.%d.attn.attn_gate_w", l);
            add_param(s, &cap, name, 2, s->num_heads, s->gate_window, PARAM_SCALAR);
        }
    }
    if (s->smear_bos) { /* the 1.0611 record's SmearGate: its names, the scalar AdamW group, zero init */
        s->smear_gate_w = s->num_params;
        add_param(s, &cap, "smear_gate.weight", 2, 1, s->gate_window, PARAM_SCALAR);
        s->smear_lambda = s->num_params;
        add_param(s, &cap, "smear_lambda", 1, 1, 1, PARAM_SCALAR);
    }
    if (c->parallel_start_layer > 0) { /* the 1.0611 record's lane lambdas: its names, the scalar AdamW group */
        s->parallel_post = s->num_params;
        add_param_shape(s, &cap, "parallel_post_lambdas", 3, s->num_layers, 2, 2, PARAM_SCALAR);
        s->parallel_resid = s->num_params;
        add_param(s, &cap, "parallel_resid_lambdas", 2, s->num_layers, 2, PARAM_SCALAR);
    }
    /* the record's matrix_params take the heads: Muon, matrix_lr, muon_wd */
    if (s->mtp_heads > 0) s->first_mtp = s->num_params;
    for (int k = 0; k < s->mtp_heads; k++) {
        snprintf(name, sizeof name, "mtp_heads.%d.weight", k);
        add_param(s, &cap, name, 2, s->vocab, D, PARAM_MATRIX);
    }
    return 0;
}

void model_spec_free(ModelSpec *s) {
    free(s->params);
    block_plan_free(&s->plan_plain);
    block_plan_free(&s->plan_looped);
    memset(s, 0, sizeof *s);
}

int model_param_torch_ndim(const ParamInfo *p) { return strcmp(p->name, "bigram.scale") ? p->ndim : 0; }

const ParamInfo *model_find_param(const ModelSpec *s, const char *name) {
    for (int i = 0; i < s->num_params; i++)
        if (!strcmp(s->params[i].name, name)) return &s->params[i];
    return NULL;
}

int model_plan_first_run(const BlockPlan *p, int run) {
    for (int i = 0; i < run; i++)
        if (p->runs[i].block == p->runs[run].block) return 0;
    return 1;
}

/* The block of the last first run at or before run `last`: the backward has passed every run
 * from `last` on when it reports that block's stage. */
static int stage_block_through(const BlockPlan *p, int last) {
    int block = 0;
    for (int i = 0; i <= last && i < p->num_runs; i++)
        if (model_plan_first_run(p, i)) block = p->runs[i].block;
    return block;
}

int model_skip_stage_block(const ModelSpec *s) {
    const int plain = stage_block_through(&s->plan_plain, s->plan_plain.num_encoder);
    const int looped = stage_block_through(&s->plan_looped, s->plan_looped.num_encoder);
    return plain < looped ? plain : looped; /* the lower block's stage comes later */
}

/* The same for the lane lambdas: every parallel run, the first one last, uses them. */
static int lanes_stage_block(const ModelSpec *s) {
    const int plain = stage_block_through(&s->plan_plain, s->plan_plain.first_parallel);
    const int looped = stage_block_through(&s->plan_looped, s->plan_looped.first_parallel);
    return plain < looped ? plain : looped;
}

int model_grad_ready_stage(const ModelSpec *s, int param) {
    if (param == s->tok_emb || param == s->bigram_scale || param == s->bigram_embed || param == s->bigram_proj ||
        param == s->smear || param == s->smear_gate_w || param == s->smear_lambda)
        return model_grad_num_stages(s) - 1;
    if (param == s->lm_head || model_is_mtp_head(s, param)) return 0;
    /* skip_weights[dec] gets its gradient in decoder block num_encoder + dec; dec = 0 comes last */
    if (param == s->skip_weights || param == s->skip_gates) return model_grad_stage_of_block(s, model_skip_stage_block(s));
    if (param == s->parallel_post || param == s->parallel_resid) return model_grad_stage_of_block(s, lanes_stage_block(s));
    if (s->first_attn_gate >= 0 && param >= s->first_attn_gate && param < s->first_attn_gate + s->num_layers)
        return model_grad_stage_of_block(s, param - s->first_attn_gate);
    return model_grad_stage_of_block(s, (param - s->first_block) / BLK_NUM_PARAMS);
}

/* splitmix64 finaliser: a counter-based generator, so element i of parameter p gets the same
 * random number however the initialisation is scheduled. */
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* Uniform in (0, 1) with 53 random bits, never exactly 0 (safe for log). */
double model_uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t r = mix64(mix64(seed ^ mix64(stream)) + i);
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller from two independent uniforms of the same counter. */
static double normal01(uint64_t seed, uint64_t stream, uint64_t i) {
    double u1 = model_uniform01(seed, stream, 2 * i), u2 = model_uniform01(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* An orthogonal matrix as torch.nn.init.orthogonal_ draws one (the distribution, not torch's
 * bits): a [rows, cols] matrix of N(0, 1), its long side's columns orthonormalised by
 * Gram-Schmidt (the Q of a QR with positive diagonal R, which is what torch's sign fix gives),
 * transposed back when rows < cols. Classical Gram-Schmidt run twice in double keeps Q
 * orthogonal to rounding. Written here rather than with LAPACK so the bits do not depend on
 * the BLAS library's threading: every rank must draw the same weights. */
static void orthogonal_init(float *w, int64_t rows, int64_t cols, uint64_t seed, uint64_t stream) {
    const int64_t m = rows >= cols ? rows : cols, n = rows >= cols ? cols : rows; /* Q is [m, n], m >= n */
    double *q = ct_malloc((size_t)(m * n) * sizeof *q, "orthogonal init"); /* column-major: column j at q + j*m */
    double *dots = ct_malloc((size_t)n * sizeof *dots, "orthogonal init");
    for (int64_t i = 0; i < m * n; i++) q[i] = normal01(seed, stream, (uint64_t)i);
    for (int64_t j = 0; j < n; j++) {
        double *v = q + j * m;
        for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(static)
            for (int64_t k = 0; k < j; k++) {
                const double *u = q + k * m;
                double d = 0;
                for (int64_t i = 0; i < m; i++) d += u[i] * v[i];
                dots[k] = d;
            }
            /* pieces of rows to threads, each subtracting the projections in k order: every
             * element sees the same operations whatever the thread count */
            const int64_t piece = 256, pieces = (m + piece - 1) / piece;
#pragma omp parallel for schedule(static)
            for (int64_t p = 0; p < pieces; p++) {
                const int64_t i0 = p * piece, i1 = i0 + piece < m ? i0 + piece : m;
                for (int64_t k = 0; k < j; k++) {
                    const double *u = q + k * m, d = dots[k];
                    for (int64_t i = i0; i < i1; i++) v[i] -= d * u[i];
                }
            }
        }
        double norm = 0;
        for (int64_t i = 0; i < m; i++) norm += v[i] * v[i];
        norm = sqrt(norm);
        for (int64_t i = 0; i < m; i++) v[i] /= norm;
    }
    /* element [r, c] of the [rows, cols] weight: Q[r, c] when rows >= cols, else Q[c, r] */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) w[r * cols + c] = (float)(rows >= cols ? q[c * m + r] : q[r * m + c]);
    free(dots);
    free(q);
}

void model_init_weights(const ModelSpec *s, uint64_t seed, float *params) {
    for (int pi = 0; pi < s->num_params; pi++) {
        const ParamInfo *p = &s->params[pi];
        float *w = params + p->offset;
        const char *dot = strrchr(p->name, '.');
        const char *leaf = dot ? dot + 1 : p->name;
        int is_zero_init = strstr(p->name, "attn.proj.") || strstr(p->name, "mlp.proj.") || pi == s->lm_head ||
                           pi == s->bigram_embed || pi == s->smear || pi == s->skip_gates ||
                           pi == s->smear_gate_w || pi == s->smear_lambda ||
                           model_is_mtp_head(s, pi);
        if (pi == s->bigram_proj && !s->ortho_init) is_zero_init = 1; /* nn.init.zeros_ in the record's module */
        if (s->ortho_init && !is_zero_init && p->group == PARAM_MATRIX && p->shape[0] >= 64 && p->shape[1] >= 64) {
            orthogonal_init(w, p->shape[0], p->shape[1], seed, (uint64_t)pi);
            if (strstr(p->name, ".proj.")) { /* the record's `".proj." in name` rule: here bigram.proj */
                const float f = (float)(1.0 / sqrt(2.0 * s->num_layers));
                for (size_t i = 0; i < p->count; i++) w[i] *= f;
            }
        } else if (s->first_attn_gate >= 0 && pi >= s->first_attn_gate && pi < s->first_attn_gate + s->num_layers) {
            for (size_t i = 0; i < p->count; i++)
                w[i] = s->gate_init_std > 0 ? (float)(s->gate_init_std * normal01(seed, (uint64_t)pi, i)) : 0.0f;
        } else if (pi == s->bigram_scale) {
            w[0] = 0.05f;
        } else if (pi == s->parallel_resid) {
            for (size_t i = 0; i < p->count; i++) w[i] = 1.1f;
        } else if (pi == s->tok_emb) {
            double std = s->tied ? s->tied_embed_init_std : 1.0;
            for (size_t i = 0; i < p->count; i++) w[i] = (float)(std * normal01(seed, (uint64_t)pi, i));
        } else if (is_zero_init) {
            memset(w, 0, p->count * sizeof *w);
        } else if (p->group == PARAM_MATRIX) {
            double bound = 1.0 / sqrt((double)p->shape[1]);
            for (size_t i = 0; i < p->count; i++) w[i] = (float)(bound * (2.0 * model_uniform01(seed, (uint64_t)pi, i) - 1.0));
        } else if (!strcmp(leaf, "q_gain")) {
            for (size_t i = 0; i < p->count; i++) w[i] = s->qk_gain_init;
        } else if (!strcmp(leaf, "resid_mix")) {
            for (size_t i = 0; i < p->count; i++) w[i] = i < (size_t)s->dim ? 1.0f : 0.0f;
        } else { /* attn_scale, mlp_scale, skip_weights, parallel_post_lambdas */
            for (size_t i = 0; i < p->count; i++) w[i] = 1.0f;
        }
    }
}

float model_rope_base(const ModelSpec *s, int seq_len) {
    if (s->rope_train_seq_len <= 0 || seq_len <= s->rope_train_seq_len) return s->rope_base;
    double r = s->rope_dims, scale = (double)seq_len / (double)s->rope_train_seq_len;
    return (float)((double)s->rope_base * pow(scale, r / (r - 2.0)));
}

/* Per token and layer, forward: attention's q.k and p.v over on average T/2 causal positions per
 * head, 2 * 2 * dim * T/2. Backward costs twice the forward. */
double model_attention_flops_per_token(const ModelSpec *s, int T) {
    return 3.0 * s->num_layers * (2.0 * s->dim * T);
}

double model_train_flops_per_token(const ModelSpec *s, int T) {
    /* Per token and layer, forward: 2 * (weights of c_q, c_k, c_v, proj, fc, mlp.proj) for the
     * matrix products, plus attention (model_attention_flops_per_token). Logits: 2 * vocab * dim.
     * Backward costs twice the forward. */
    double D = s->dim;
    double per_layer = 2.0 * (D * D + 2.0 * s->kv_dim * D + D * D + 2.0 * s->hidden * D);
    double fwd = s->num_layers * per_layer + 2.0 * s->vocab * D;
    if (s->bigram_proj >= 0) fwd += 2.0 * s->bigram_dim * D;
    fwd += s->mtp_heads * 2.0 * s->vocab * D; /* each head's logits (over T-k-1 of T tokens; counted as T) */
    return 3.0 * fwd + model_attention_flops_per_token(s, T);
}
