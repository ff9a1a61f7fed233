/* muon_batches.h — how a device backend batches Muon's Newton–Schulz iterations: the model's
 * matrices grouped by shape up to transposition (the iteration runs on the min x max
 * orientation, so a [1024, 512] and a [512, 1024] matrix share a group), each group cut into
 * near-equal runs of consecutive matrices of at most MUON_BATCH_MAX, and batch j computed on
 * rank j % world (sharded Muon, combined by one sum across ranks).
 *
 * Why batches of a fixed plan: one batched product per iteration step and batch replaces one
 * product per matrix (the baseline's 54 matrices × 15 products), and because the batches are
 * the same whatever the world size, every matrix's update is computed by the same products on
 * any number of ranks — the bits of an update do not depend on the world size (cuBLAS may
 * choose another kernel for another batch count). */
#ifndef CT_MUON_BATCHES_H
#define CT_MUON_BATCHES_H

#include "model.h"

/* A batch's time is mostly its 15 launches (5 iterations x 3 products) while it is small, so
 * fewer, larger batches are faster on one GPU; on W ranks the step waits for the rank with the
 * most batches. 12 cuts the baseline's three groups of 18 into 6 batches of 9: one batch per
 * rank on 8 ranks (8 would make 9 batches of 6, two of them on rank 0), 6 batched runs on one
 * GPU; the scratch is 57 MB. */
enum { MUON_BATCH_MAX = 12 };

typedef struct {
    int first;  /* index into MuonBatchPlan.params of the batch's first matrix */
    int count;  /* matrices in the batch (1..MUON_BATCH_MAX) */
    int m, n;   /* every member's smaller and larger side */
} MuonBatch;

typedef struct {
    int *params;        /* parameter indices (ModelSpec.params), batch after batch */
    int num_matrices;
    MuonBatch *batches;
    int num_batches;
} MuonBatchPlan;

/* The plan for s's PARAM_MATRIX parameters: groups in the order of their first matrix, the
 * matrices of a batch in parameter order (out of memory ends the process, as ct_malloc). */
void muon_batch_plan(const ModelSpec *s, MuonBatchPlan *plan);
void muon_batch_plan_free(MuonBatchPlan *plan);

/* The rank that computes batch j's updates among `world` ranks (world <= 1: rank 0). */
int muon_batch_owner(int j, int world);

#endif
