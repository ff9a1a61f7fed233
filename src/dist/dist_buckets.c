/* dist_buckets.c — building the gradient-reduction plan (dist_buckets.h): sort the parameters
 * by the stage that finalises them (and, within a stage, from the top of the buffer down, the
 * order a backward pass meets a block's parameters), then grow each bucket downwards through
 * the flat buffer while the next parameter is its neighbour, the cap allows, and it either
 * becomes final at the same stage or the bucket is still small. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist_buckets.h"

static const DistGradSegment *g_sort_segments; /* qsort has no context argument */

static int by_stage_then_offset_down(const void *a, const void *b) {
    const DistGradSegment *x = &g_sort_segments[*(const int *)a], *y = &g_sort_segments[*(const int *)b];
    if (x->ready_stage != y->ready_stage) return x->ready_stage < y->ready_stage ? -1 : 1;
    return x->offset > y->offset ? -1 : x->offset < y->offset ? 1 : 0;
}

static int by_offset(const void *a, const void *b) {
    const DistGradSegment *x = &g_sort_segments[*(const int *)a], *y = &g_sort_segments[*(const int *)b];
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

/* Every segment non-empty, inside the stage range, and no two overlapping. */
static int check_segments(const DistGradSegment *s, int n, int num_stages, int *order) {
    for (int i = 0; i < n; i++) {
        if (s[i].count == 0) return ct_fail("gradient buckets: segment %d is empty", i);
        if (s[i].ready_stage < 0 || s[i].ready_stage >= num_stages)
            return ct_fail("gradient buckets: segment %d is ready at stage %d, outside 0..%d", i, s[i].ready_stage,
                           num_stages - 1);
        order[i] = i;
    }
    g_sort_segments = s;
    qsort(order, (size_t)n, sizeof *order, by_offset);
    for (int i = 1; i < n; i++) {
        const DistGradSegment *lo = &s[order[i - 1]], *hi = &s[order[i]];
        if (lo->offset + lo->count > hi->offset)
            return ct_fail("gradient buckets: segments %d [%zu, %zu) and %d [%zu, %zu) overlap", order[i - 1],
                           lo->offset, lo->offset + lo->count, order[i], hi->offset, hi->offset + hi->count);
    }
    return 0;
}

int dist_bucket_plan_build(DistBucketPlan *plan, const DistGradSegment *segments, int n, int num_stages,
                           size_t cap_floats) {
    memset(plan, 0, sizeof *plan);
    if (n <= 0 || num_stages <= 0) return ct_fail("gradient buckets: %d segments over %d stages", n, num_stages);
    if (cap_floats == 0) return ct_fail("gradient buckets: the bucket size cap is 0");
    int *order = ct_malloc((size_t)n * sizeof *order, "gradient bucket order");
    if (check_segments(segments, n, num_stages, order) != 0) {
        free(order);
        return -1;
    }
    g_sort_segments = segments;
    qsort(order, (size_t)n, sizeof *order, by_stage_then_offset_down);
    plan->buckets = ct_malloc((size_t)n * sizeof *plan->buckets, "gradient buckets");
    plan->num_stages = num_stages;
    DistBucket *cur = NULL;
    for (int k = 0; k < n; k++) {
        const DistGradSegment *s = &segments[order[k]];
        plan->total_floats += s->count;
        /* joins the open bucket when it lies just below it, the bucket stays within the cap, and
         * it becomes final at the bucket's stage, or the bucket is still small (below a quarter
         * of the cap): a bucket waits for a later stage only for a little data, never a layer's */
        if (cur && s->offset + s->count == cur->offset && cur->count + s->count <= cap_floats &&
            (s->ready_stage == cur->ready_stage || cur->count < cap_floats / 4)) {
            cur->offset = s->offset;
            cur->count += s->count;
            cur->ready_stage = s->ready_stage; /* sorted: never earlier than the bucket's */
            cur->num_segments++;
            continue;
        }
        cur = &plan->buckets[plan->num_buckets++];
        cur->offset = s->offset;
        cur->count = s->count;
        cur->ready_stage = s->ready_stage;
        cur->num_segments = 1;
    }
    free(order);
    plan->stage_first = ct_malloc((size_t)(num_stages + 1) * sizeof *plan->stage_first, "gradient bucket stages");
    int b = 0;
    for (int stage = 0; stage <= num_stages; stage++) {
        while (b < plan->num_buckets && plan->buckets[b].ready_stage < stage) b++;
        plan->stage_first[stage] = b;
    }
    return 0;
}

void dist_bucket_plan_ready(const DistBucketPlan *plan, int stage, int *first, int *count) {
    if (stage < 0 || stage >= plan->num_stages) {
        *first = *count = 0;
        return;
    }
    *first = plan->stage_first[stage];
    *count = plan->stage_first[stage + 1] - plan->stage_first[stage];
}

void dist_bucket_plan_free(DistBucketPlan *plan) {
    free(plan->buckets);
    free(plan->stage_first);
    memset(plan, 0, sizeof *plan);
}
