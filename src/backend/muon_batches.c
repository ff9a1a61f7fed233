/* muon_batches.c — the Newton–Schulz batch plan (see muon_batches.h). */
#include "muon_batches.h"

#include <stdlib.h>

#include "common.h"

static int side_min(const ParamInfo *p) { return (int)(p->shape[0] < p->shape[1] ? p->shape[0] : p->shape[1]); }
static int side_max(const ParamInfo *p) { return (int)(p->shape[0] < p->shape[1] ? p->shape[1] : p->shape[0]); }

void muon_batch_plan(const ModelSpec *s, MuonBatchPlan *plan) {
    plan->params = NULL;
    plan->batches = NULL;
    plan->num_matrices = plan->num_batches = 0;
    int total = 0;
    for (int i = 0; i < s->num_params; i++) total += s->params[i].group == PARAM_MATRIX;
    if (total == 0) return;
    plan->params = ct_malloc((size_t)total * sizeof(int), "Muon batch plan");
    plan->batches = ct_malloc((size_t)total * sizeof(MuonBatch), "Muon batch plan");
    char *taken = ct_calloc((size_t)s->num_params, 1, "Muon batch plan");
    for (int lead = 0; lead < s->num_params; lead++) {
        const ParamInfo *p = &s->params[lead];
        if (p->group != PARAM_MATRIX || taken[lead]) continue;
        /* the group of lead's shape: every matrix of that min x max, in parameter order */
        const int m = side_min(p), n = side_max(p), start = plan->num_matrices;
        for (int i = lead; i < s->num_params; i++) {
            const ParamInfo *q = &s->params[i];
            if (q->group != PARAM_MATRIX || taken[i] || side_min(q) != m || side_max(q) != n) continue;
            taken[i] = 1;
            plan->params[plan->num_matrices++] = i;
        }
        /* near-equal runs: sizes differ by at most one, the larger first */
        const int size = plan->num_matrices - start;
        const int runs = (size + MUON_BATCH_MAX - 1) / MUON_BATCH_MAX;
        for (int r = 0, at = start; r < runs; r++) {
            const int count = size / runs + (r < size % runs);
            plan->batches[plan->num_batches++] = (MuonBatch){.first = at, .count = count, .m = m, .n = n};
            at += count;
        }
    }
    free(taken);
}

void muon_batch_plan_free(MuonBatchPlan *plan) {
    free(plan->params);
    free(plan->batches);
    plan->params = NULL;
    plan->batches = NULL;
    plan->num_matrices = plan->num_batches = 0;
}

int muon_batch_owner(int j, int world) { return world > 1 ? j % world : 0; }
