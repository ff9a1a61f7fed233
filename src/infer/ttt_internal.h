/* ttt_internal.h — what the parts of the test-time-training evaluation share (ttt_eval.c runs it,
 * ttt_global.c takes the phases' global steps, ttt_dump.c writes --dump's files). Not for other
 * callers: infer.h has ttt_evaluate. */
#ifndef CT_TTT_INTERNAL_H
#define CT_TTT_INTERNAL_H

#include <stdint.h>

#include "infer.h"
#include "lora.h"
#include "ttt_plan.h"

typedef struct {
    const Config *cfg;
    TrainState *st;
    const DistInfo *d;
    const TttOptions *opt;
    ValData v;
    int64_t n;       /* the trimmed split's tokens */
    int64_t S, E, C; /* eval sequence length, TTT window, chunk */
    TttPlan plan;
    LoraLayout layout;
    float *initial;  /* a slot's starting adapters (lora_initial_slot) */
    Backend *tb;     /* the chunks' backend: rows rows of E tokens */
    int64_t rows;    /* a batch's most documents: ttt_batch_size, or fewer when the split has fewer */
    Backend *gb;     /* the global steps' backend: packed rows of S tokens (NULL without phases) */
    TttOptimizer o;
    /* per document (gathered across ranks at the end): loss sum, bytes; per batch: loss, tokens, bytes */
    double *doc_loss, *doc_bytes, *batch_sums;
    float *target_loss, *target_count; /* --dump: every target's loss, and whether it was scored */
    int *rank_of;                      /* [num_batches]: the rank scoring each queue position */
    double start_ms;
    int64_t sgd_steps; /* the global steps' SGD steps so far (CTRAIN_FAULT's ttt_global:N) */
} TttRun;

/* Global step k (ttt_global.c): SGD on the base weights over the step's documents. */
int ttt_global_step(TttRun *R, int k);
/* --dump's files (ttt_dump.c); every rank calls them, rank 0 writes. */
int ttt_dump_initial(const TttRun *R);
int ttt_dump_slot(const TttRun *R, int64_t doc, const float *slot);
int ttt_dump_phase(const TttRun *R, int k);
int ttt_dump_final(const TttRun *R, double val_loss, double val_bpb, double tokens, double bytes);

#endif
