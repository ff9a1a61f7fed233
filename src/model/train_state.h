/* train_state.h — the state a run trains and checkpoints: fp32 master weights, gradients and
 * optimizer state in flat host buffers laid out by the ModelSpec (model.h). The backends compute
 * on it (the CUDA backend on device copies it syncs back), checkpoints save and load it. */
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H

#include <stddef.h>
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
    /* Weight averaging (docs/model.md, "Weight averaging"), in the flat layout of params: */
    float *ema;        /* [spec.total_floats] the EMA of the weights (ema_enabled), else NULL */
    float *swa_sum;    /* [spec.total_floats] the sum of swa_count snapshots (train_state_has_swa), else NULL */
    int64_t swa_count; /* snapshots in swa_sum; 0 until SWA starts */
    /* Late QAT's switch: once on, the training forward fake-quantizes the linear layers' weights
     * (qat_enabled: on from step 0). Part of the state so that a resume continues exactly. */
    int qat_active;
    /* Depth recurrence's switch (num_loops > 0): once on, the passes walk the looped block plan
     * (model_plan). Checkpointed (/loop) as qat_active, so a resume continues exactly. */
    int loop_active;
} TrainState;

/* Allocate every buffer (zeroed) and initialise the weights from cfg->seed; with ema_enabled
 * the EMA starts as a copy of those weights (train_gpt.py's EMA starts from the weights at step
 * 0), with SWA the sum starts empty; qat_active starts at cfg->qat_enabled. */
int train_state_init(TrainState *st, const Config *cfg);
void train_state_free(TrainState *st);

/* SWA keeps state only when it can run: swa_enabled without ema_enabled (train_gpt.py takes
 * the EMA when both are set, and never accumulates the SWA). */
int train_state_has_swa(const Config *cfg);

/* Which weights a run ends with, as train_gpt.py after its loop: "ema" with the EMA; else "swa"
 * when the SWA sum holds more than one snapshot (their average, sum / count in fp32); else
 * "live". The one rule for the run's end and for the tools that read a checkpoint's model. */
const char *train_state_final_weights(int has_ema, int has_swa, int64_t swa_count);

/* Those weights (train_state_final_weights) copied over st->params; returns what they are
 * ("EMA weights", "SWA average of 3 snapshots", in buf) or NULL when the live weights stay. */
const char *train_state_use_average(TrainState *st, char *buf, size_t cap);

#endif
