/* train_state.c — allocation and initialisation of the host training state (train_state.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "train_state.h"

int train_state_init(TrainState *st, const Config *cfg) {
    memset(st, 0, sizeof *st);
    if (model_spec_init(&st->spec, cfg) != 0) return -1;
    size_t n = st->spec.total_floats;
    st->params = ct_calloc(n, sizeof(float), "parameters");
    st->grads = ct_calloc(n, sizeof(float), "gradients");
    st->exp_avg = ct_calloc(n, sizeof(float), "Adam state");
    st->exp_avg_sq = ct_calloc(n, sizeof(float), "Adam state");
    st->momentum = ct_calloc(n, sizeof(float), "Muon state");
    model_init_weights(&st->spec, (uint64_t)cfg->seed, st->params);
    if (cfg->ema_enabled) {
        st->ema = ct_malloc(n * sizeof(float), "EMA weights");
        memcpy(st->ema, st->params, n * sizeof(float));
    }
    if (train_state_has_swa(cfg)) st->swa_sum = ct_calloc(n, sizeof(float), "SWA sum");
    st->qat_active = cfg->qat_enabled != 0;
    return 0;
}

int train_state_has_swa(const Config *cfg) { return cfg->swa_enabled && !cfg->ema_enabled; }

const char *train_state_final_weights(int has_ema, int has_swa, int64_t swa_count) {
    if (has_ema) return "ema";
    if (has_swa && swa_count >= 2) return "swa";
    return "live";
}

const char *train_state_use_average(TrainState *st, char *buf, size_t cap) {
    const size_t n = st->spec.total_floats;
    const char *which = train_state_final_weights(st->ema != NULL, st->swa_sum != NULL, st->swa_count);
    if (!strcmp(which, "ema")) {
        memcpy(st->params, st->ema, n * sizeof(float));
        snprintf(buf, cap, "EMA weights");
        return buf;
    }
    if (strcmp(which, "swa") != 0) return NULL;
    /* train_gpt.py's `t / swa_count`: an fp32 tensor divided by an integer, in fp32 */
    const float count = (float)st->swa_count;
    for (size_t i = 0; i < n; i++) st->params[i] = st->swa_sum[i] / count;
    snprintf(buf, cap, "SWA average of %lld snapshots", (long long)st->swa_count);
    return buf;
}

void train_state_free(TrainState *st) {
    free(st->params);
    free(st->grads);
    free(st->exp_avg);
    free(st->exp_avg_sq);
    free(st->momentum);
    free(st->ema);
    free(st->swa_sum);
    model_spec_free(&st->spec);
    memset(st, 0, sizeof *st);
}
