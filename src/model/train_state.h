/* train_state.h — the state a run trains and checkpoints: fp32 master weights, gradients and
 * optimizer state in flat host buffers laid out by the ModelSpec (model.h). The backends compute
 * on it (the CUDA backend on device copies it syncs back), checkpoints save and load it. */
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H

#include <stdint.h>

#include "config.h"
#include "model.h"

typedef struct {
    ModelSpec spec;
    float *params;     /* [spec.total_floats] fp32 master weights */
    float *grads;      /* [spec.total_floats] accumulated over the micro-steps of one step */
    float *exp_avg;    /* Adam first moment (entries of Adam-managed parameters) */
    float *exp_avg_sq; /* Adam second moment */
    float *momentum;   /* Muon momentum buffers (entries of Muon-managed parameters) */
    int64_t adam_step; /* Adam steps taken (torch's per-parameter "step", equal for all) */
} TrainState;

/* Allocate every buffer (zeroed) and initialise the weights from cfg->seed. */
int train_state_init(TrainState *st, const Config *cfg);
void train_state_free(TrainState *st);

#endif
