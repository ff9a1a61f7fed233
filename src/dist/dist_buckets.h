/* dist_buckets.h — the plan of a GPU job's gradient reduction: which contiguous ranges of the
 * flat gradient buffer ("buckets") are reduced together, and after which backward stage each
 * may start, so that the reduction of the last micro-step overlaps the rest of its backward
 * (as PyTorch DDP's buckets do). Plain C, no CUDA: the NCCL reducer (dist_nccl.c) executes the
 * plan, tests/unit/test_buckets.c checks it on the CPU.
 *
 * Stages number the points of a backward pass at which some gradients become final, in the
 * order the backward reaches them (model_grad_ready_stage in model.h gives each parameter's).
 * A bucket is a run of parameters that are neighbours in the flat buffer, gathered in the
 * order they become final (reverse layer order), holding at most cap floats unless one
 * parameter alone is larger; it may start once the last of its parameters is final. A bucket
 * takes in parameters of a later stage only while it is below a quarter of the cap, so a
 * layer's gradients never wait for the next layer's, and tiny parameters do not make tiny
 * buckets of their own (where they are neighbours). */
#ifndef CT_DIST_BUCKETS_H
#define CT_DIST_BUCKETS_H

#include <stddef.h>

/* One parameter's gradient: [offset, offset + count) of the flat buffer, final after stage
 * ready_stage (0 .. num_stages-1). */
typedef struct {
    size_t offset, count;
    int ready_stage;
} DistGradSegment;

typedef struct {
    size_t offset, count; /* the flat range the bucket reduces */
    int ready_stage;      /* the latest ready_stage of its segments */
    int num_segments;
} DistBucket;

typedef struct {
    DistBucket *buckets; /* in launch order: ready_stage ascending */
    int num_buckets, num_stages;
    int *stage_first;    /* [num_stages + 1]: buckets [stage_first[s], stage_first[s+1]) start after stage s */
    size_t total_floats; /* sum of the segments */
} DistBucketPlan;

/* Build the plan for n segments. Fails with a message if a segment is empty, overlaps
 * another, or has a ready_stage outside 0..num_stages-1, or if cap_floats is 0. */
int dist_bucket_plan_build(DistBucketPlan *plan, const DistGradSegment *segments, int n, int num_stages,
                           size_t cap_floats);
/* The buckets that may start once stage `stage` has ended: [*first, *first + *count). */
void dist_bucket_plan_ready(const DistBucketPlan *plan, int stage, int *first, int *count);
void dist_bucket_plan_free(DistBucketPlan *plan);

#endif
