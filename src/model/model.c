/* model.c — parameter table of the parameter-golf GPT and its deterministic initialisation. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void add_param(ModelSpec *s, int *cap, const char *name, int ndim, int64_t d0, int64_t d1,
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
    p->shape[1] = ndim == 2 ? d1 : 1;
    p->count = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    p->offset = s->total_floats;
    p->group = group;
    s->total_floats += p->count;
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
    s->hidden = (int)c->mlp_mult * s->dim;
    s->num_encoder = s->num_layers / 2;
    s->num_decoder = s->num_layers - s->num_encoder;
    s->num_skip = s->num_encoder < s->num_decoder ? s->num_encoder : s->num_decoder;
    s->tied = c->tie_embeddings != 0;
    s->softcap = (float)c->logit_softcap;
    s->rope_base = (float)c->rope_base;
    s->qk_gain_init = (float)c->qk_gain_init;
    s->tied_embed_init_std = (float)c->tied_embed_init_std;
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
    return 0;
}

void model_spec_free(ModelSpec *s) {
    free(s->params);
    memset(s, 0, sizeof *s);
}

const ParamInfo *model_find_param(const ModelSpec *s, const char *name) {
    for (int i = 0; i < s->num_params; i++)
        if (!strcmp(s->params[i].name, name)) return &s->params[i];
    return NULL;
}

int model_grad_ready_stage(const ModelSpec *s, int param) {
    if (param == s->tok_emb) return model_grad_num_stages(s) - 1;
    if (param == s->lm_head) return 0;
    /* skip_weights[dec] gets its gradient in decoder block num_encoder + dec; dec = 0 comes last */
    if (param == s->skip_weights) return model_grad_stage_of_block(s, s->num_encoder);
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
static double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {
    uint64_t r = mix64(mix64(seed ^ mix64(stream)) + i);
    return ((double)(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal by Box-Muller from two independent uniforms of the same counter. */
static double normal01(uint64_t seed, uint64_t stream, uint64_t i) {
    double u1 = uniform01(seed, stream, 2 * i), u2 = uniform01(seed, stream, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void model_init_weights(const ModelSpec *s, uint64_t seed, float *params) {
    for (int pi = 0; pi < s->num_params; pi++) {
        const ParamInfo *p = &s->params[pi];
        float *w = params + p->offset;
        const char *dot = strrchr(p->name, '.');
        const char *leaf = dot ? dot + 1 : p->name;
        int is_zero_init = strstr(p->name, "attn.proj.") || strstr(p->name, "mlp.proj.") || pi == s->lm_head;
        if (pi == s->tok_emb) {
            double std = s->tied ? s->tied_embed_init_std : 1.0;
            for (size_t i = 0; i < p->count; i++) w[i] = (float)(std * normal01(seed, (uint64_t)pi, i));
        } else if (is_zero_init) {
            memset(w, 0, p->count * sizeof *w);
        } else if (p->group == PARAM_MATRIX) {
            double bound = 1.0 / sqrt((double)p->shape[1]);
            for (size_t i = 0; i < p->count; i++) w[i] = (float)(bound * (2.0 * uniform01(seed, (uint64_t)pi, i) - 1.0));
        } else if (!strcmp(leaf, "q_gain")) {
            for (size_t i = 0; i < p->count; i++) w[i] = s->qk_gain_init;
        } else if (!strcmp(leaf, "resid_mix")) {
            for (size_t i = 0; i < p->count; i++) w[i] = i < (size_t)s->dim ? 1.0f : 0.0f;
        } else { /* attn_scale, mlp_scale, skip_weights */
            for (size_t i = 0; i < p->count; i++) w[i] = 1.0f;
        }
    }
}

double model_train_flops_per_token(const ModelSpec *s, int T) {
    /* Per token and layer, forward: 2 * (weights of c_q, c_k, c_v, proj, fc, mlp.proj) for the
     * matrix products, plus attention: q.k and p.v over on average T/2 causal positions per
     * head, 2 * 2 * dim * T/2. Logits: 2 * vocab * dim. Backward costs twice the forward. */
    double D = s->dim;
    double per_layer = 2.0 * (D * D + 2.0 * s->kv_dim * D + D * D + 2.0 * s->hidden * D) + 2.0 * D * T;
    double fwd = s->num_layers * per_layer + 2.0 * s->vocab * D;
    return 3.0 * fwd;
}
