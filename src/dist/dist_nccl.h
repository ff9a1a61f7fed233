/* dist_nccl.h — NCCL for GPU jobs: the communicator (its id travels through the PMI2 KVS), the
 * collectives of dist.h on it, a sum on a device buffer (the Muon updates), and the gradient
 * reducer that runs a DistBucketPlan (dist_buckets.h) on its own stream while the last
 * micro-batch's backward goes on.
 *
 * Every wait polls the GPU work and ncclCommGetAsyncError with the job's timeout (a dead rank,
 * a hung collective, an NCCL error): on failure the communicator is aborted and the call fails
 * with a message naming the rank, the host and the operation, so the caller's dist_abort ends
 * the job. The watchdog (dist_watchdog.c) backs each wait with a longer deadline, in case NCCL
 * itself stops answering.
 *
 * Determinism: NCCL's ring and tree sums are the same bits on every rank and on every run with
 * the same communicator, sizes and grouping; NVLink SHARP (NVLS) and CollNet reductions are not
 * promised to be. dist_nccl_init turns those two off unless the environment already sets them
 * (docs/slurm.md). In builds without NCCL every function fails with a message saying so. */
#ifndef CT_DIST_NCCL_H
#define CT_DIST_NCCL_H

#include <stddef.h>

#include "dist.h"
#include "dist_buckets.h"

/* 1 when this build has NCCL. */
int dist_nccl_compiled(void);

/* Create the job's communicator on CUDA device `device` (made this thread's device): rank 0's
 * ncclUniqueId goes to every rank through the PMI2 KVS, then a non-blocking
 * ncclCommInitRankConfig polled until done, or aborted after timeout_s (a rank that never
 * arrives). Sets d->nccl; detail (cap bytes) gets a line for the log, e.g. "NCCL 2.28.9, 8 ranks,
 * NVLS and CollNet off (determinism)". Works with one rank (the multi-GPU path, checked on one
 * GPU). */
int dist_nccl_init(DistInfo *d, int device, double timeout_s, char *detail, size_t cap);

/* The NCCL a job's bits depend on, for Backend.stack's record: "nccl=2.28.9; nccl_algo=...;
 * nccl_proto=..." (NCCL_ALGO / NCCL_PROTO as the environment sets them, "(tuner)" when NCCL
 * chooses: its tuner's choice may differ between machines). */
void dist_nccl_stack(char *buf, size_t cap);

/* Sum n floats of a device buffer across ranks in place, queued on `stream` (a cudaStream_t)
 * after the work already there; returns when the sum is done. */
int dist_nccl_allreduce_device(const DistInfo *d, float *buf, size_t n, void *stream, const char *what);

/* Send count device buffers, bufs[i] (counts[i] floats) from rank roots[i] to every rank, in
 * place, one broadcast after another queued on `stream` (not grouped: a group of broadcasts from
 * different roots delivered nothing on an H100 with NCCL 2.30.7); returns when done. For values
 * one rank computed (the Muon updates): no arithmetic, so every rank gets the owner's bits by
 * construction, and each element crosses a link about once where a sum of mostly zeros moves it
 * about twice. */
int dist_nccl_broadcast_device(const DistInfo *d, float *const *bufs, const size_t *counts, const int *roots,
                               int count, void *stream, const char *what);

/* launch-check: the Muon updates' path. Parts of n floats in one device buffer, part j rooted at
 * rank j % W (W + 1 parts, so rank 0 roots two), rank r filling its own parts with known values
 * and the others with NaN, broadcast as dist_nccl_broadcast_device does; every element must come
 * back with its root's bits. Returns the first wrong index, -1 when all are right, or -2 after
 * ct_fail. */
long dist_nccl_check_device_broadcast(const DistInfo *d, size_t n);

/* launch-check: sum n floats of known, exactly representable values on the device across
 * ranks (rank r contributes (r+1) * (i%97+1) / 4 at i) and compare every result with the exact
 * sum. Returns the first wrong index, -1 when all are right, or -2 after ct_fail. */
long dist_nccl_check_device_sum(const DistInfo *d, size_t n);

/* The gradient reducer: buckets of `plan` over the device buffer `grads`, started on a stream of
 * its own once the backend's `stream` has finished their stage. */
typedef struct DistGradReducer DistGradReducer;
int dist_grad_reducer_create(DistGradReducer **out, const DistInfo *d, const DistBucketPlan *plan, float *grads,
                             void *stream);
/* Backend.grad_ready: stage `stage` of the backward is queued on the backend's stream; start
 * the buckets it completes. ctx is the DistGradReducer. */
int dist_grad_reducer_stage(void *ctx, int stage);
/* After the last micro-batch: start any bucket not started yet (a backward that reported no
 * stages), wait for all of them, and make the backend's stream wait for them too. */
int dist_grad_reducer_finish(DistGradReducer *r);
void dist_grad_reducer_free(DistGradReducer *r);

#endif
