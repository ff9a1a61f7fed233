/* train_nccl.c — what a GPU job's ranks share over NCCL: at start, each rank's GPU (chosen from
 * its local rank, checked against the other ranks' so no two share one) and the communicator;
 * after the backend exists, the gradient reducer whose buckets follow the model's backward
 * stages (model_grad_ready_stage), so the last micro-batch's gradients are summed across ranks
 * while its backward still runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "dist_buckets.h"
#include "dist_nccl.h"
#include "train.h"
#include "trainer.h"

int train_nccl_connect(const Config *cfg, DistInfo *d, char *note, size_t cap) {
    BackendGpu gpu;
    if (backend_choose_gpu(cfg, &gpu) != 0) return ct_fail_prefix("rank %d (%s)", d->rank, d->host);
    if (d->world_size > 1 && dist_check_gpu_placement(d, gpu.uuid, gpu.desc) != 0) return -1;
    char detail[300];
    if (dist_nccl_init(d, gpu.index, d->timeout_s, detail, sizeof detail) != 0) return -1;
    snprintf(note, cap, "nccl: %s; rank %d on %s", detail, d->rank, gpu.desc);
    return 0;
}

int trainer_bucket_plan(const ModelSpec *s, double bucket_mb, DistBucketPlan *plan) {
    DistGradSegment *seg = ct_malloc((size_t)s->num_params * sizeof *seg, "gradient segments");
    int n = 0;
    for (int i = 0; i < s->num_params; i++) {
        if (s->params[i].count == 0) continue; /* skip_weights of a model without skips */
        seg[n].offset = s->params[i].offset;
        seg[n].count = s->params[i].count;
        seg[n].ready_stage = model_grad_ready_stage(s, i);
        n++;
    }
    const size_t cap = (size_t)(bucket_mb * 1048576.0 / sizeof(float));
    int rc = dist_bucket_plan_build(plan, seg, n, model_grad_num_stages(s), cap > 0 ? cap : 1);
    free(seg);
    return rc;
}

/* A 31-bit digest of a plan (FNV-1a over the buckets' ranges and stages). */
static int plan_digest(const DistBucketPlan *p) {
    uint64_t h = 1469598103934665603ULL;
    for (int b = 0; b < p->num_buckets; b++) {
        const uint64_t v[3] = {p->buckets[b].offset, p->buckets[b].count, (uint64_t)p->buckets[b].ready_stage};
        const unsigned char *c = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof v; i++) h = (h ^ c[i]) * 1099511628211ULL;
    }
    return (int)(h & 0x7fffffff);
}

/* *same = 1 when every rank holds the same value (non-negative), else 0. */
static int ranks_agree(const Trainer *t, int value, int *same) {
    int hi = value, lo_neg = -value;
    if (dist_allreduce_max_i32(t->dist, &hi) != 0 || dist_allreduce_max_i32(t->dist, &lo_neg) != 0) return -1;
    *same = hi == -lo_neg;
    return 0;
}

/* Every rank must reduce the same buckets in the same order: a rank with another grad_bucket_mb
 * or another ctrain would otherwise wait in a collective until collective_timeout. */
static int same_plan_everywhere(const Trainer *t, const DistBucketPlan *plan) {
    int same;
    if (ranks_agree(t, plan_digest(plan), &same) != 0) return -1;
    if (same) return 0;
    return ct_fail("rank %d (%s): the ranks' gradient bucket plans differ (this rank: %d buckets of up to %g MB): "
                   "every rank needs the same grad_bucket_mb and the same ctrain build",
                   t->rank, t->dist->host, plan->num_buckets, t->cfg->grad_bucket_mb);
}

/* CT_MUON_COMBINE: how the Muon updates reach every rank (broadcast, the default, or allreduce). */
static int muon_combine_choice(int *share) {
    const char *v = getenv("CT_MUON_COMBINE");
    *share = 1;
    if (!v || !*v || !strcmp(v, "broadcast")) return 0;
    if (!strcmp(v, "allreduce")) {
        *share = 0;
        return 0;
    }
    return ct_fail("CT_MUON_COMBINE = '%s': expected broadcast (each update sent by the rank that computed it, the "
                   "default) or allreduce (one sum of the updates)",
                   v);
}

int trainer_reducer_init(Trainer *t) {
    Backend *b = t->backend;
    int same;
    if (muon_combine_choice(&t->muon_share) != 0 || ranks_agree(t, t->muon_share, &same) != 0) return -1;
    /* a broadcast on one rank and a sum on another would wait for each other until the timeout */
    if (!same)
        return ct_fail("rank %d (%s): CT_MUON_COMBINE differs between the ranks (this rank: %s): give every rank the "
                       "same value",
                       t->rank, t->dist->host, t->muon_share ? "broadcast" : "allreduce");
    if (!b->device_grads || !b->device_stream)
        return ct_fail("nccl: the %s backend keeps its gradients on the host; NCCL needs device = cuda", b->name);
    DistBucketPlan plan;
    if (trainer_bucket_plan(&t->st.spec, t->cfg->grad_bucket_mb, &plan) != 0) return -1;
    if (same_plan_everywhere(t, &plan) != 0) {
        dist_bucket_plan_free(&plan);
        return -1;
    }
    int rc = dist_grad_reducer_create(&t->reducer, t->dist, &plan, b->device_grads(b), b->device_stream(b));
    if (rc == 0)
        printf("nccl: gradients in %d buckets of up to %g MB, reduced during the last micro-batch's backward; Muon "
               "updates %s\n",
               plan.num_buckets, t->cfg->grad_bucket_mb,
               t->muon_share ? "sent by the rank that computed each (broadcasts)"
                             : "combined by one sum (CT_MUON_COMBINE=allreduce)");
    dist_bucket_plan_free(&plan);
    return rc;
}

void trainer_reducer_free(Trainer *t) {
    dist_grad_reducer_free(t->reducer);
    t->reducer = NULL;
}
