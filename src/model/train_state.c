/* train_state.c — allocation and initialisation of the host training state (train_state.h). */
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
    return 0;
}

void train_state_free(TrainState *st) {
    free(st->params);
    free(st->grads);
    free(st->exp_avg);
    free(st->exp_avg_sq);
    free(st->momentum);
    model_spec_free(&st->spec);
    memset(st, 0, sizeof *st);
}
