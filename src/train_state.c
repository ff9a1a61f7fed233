/* train_state.c — allocation of the host training state and backend selection. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "common.h"

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

int backend_create(Backend **out, const Config *cfg, TrainState *st) {
    if (!strcmp(cfg->device, "cpu")) return backend_cpu_create(out, cfg, st);
    if (!strcmp(cfg->device, "cuda")) return backend_cuda_create(out, cfg, st);
    return ct_fail("device = '%s': expected cpu or cuda", cfg->device);
}
