/* dist.h — the distributed layer: which rank am I (rank discovery under srun --mpi=pmi2,
 * MPICH's mpiexec, or a plain start), a KVS broadcast for bootstrap blobs (NCCL's unique id),
 * and the CPU backend's collectives over MPI.
 *
 * Launchers (DistInfo.launcher):
 *   "pmi2"       PMI_FD in the environment: srun --mpi=pmi2 or MPICH's mpiexec (hydra). With
 *                use_mpi and world > 1, MPICH bootstraps itself over PMI inside MPI_Init and
 *                ctrain never touches libpmi2 (two PMI clients on one PMI_FD break the job, see
 *                dist.c); otherwise Slurm's libpmi2 is used directly (GPU/NCCL jobs).
 *   "slurm-env"  a task of an srun step without PMI (srun --mpi=none, or pmix): rank and
 *                layout from SLURM_* only; no KVS and no collectives when world > 1.
 *   "single"     started plainly (also a bare sbatch batch script): rank 0 of 1.
 *
 * Every function follows common.h: 0 on success, -1 after ct_fail(). With world_size 1 every
 * collective is a cheap no-op. Collectives are called by every rank in the same order. */
#ifndef CT_DIST_H
#define CT_DIST_H

#include <stddef.h>

typedef struct {
    int rank, world_size;       /* global */
    int local_rank, local_size; /* on this node */
    int node_index, num_nodes;
    char host[256];             /* SLURMD_NODENAME under srun (the name sinfo shows), else hostname */
    const char *launcher;       /* "pmi2", "slurm-env", "single" */
    int mpi;                    /* MPI initialised for collectives (CPU jobs with world_size > 1) */
    int srun;                   /* this rank is a task that srun started (SLURM_* describe it) */
    double timeout_s;           /* bootstrap timeout given to dist_init (<= 0: wait forever) */
    /* Hang detection for collectives: a rank that waits longer than this in one collective
     * prints what it waited for and ends the whole job. 0 (the default) waits forever, which
     * is right when a rank may legitimately be slow (e.g. rank 0 writing a checkpoint). */
    double op_timeout_s;
    int nccl;                   /* an NCCL communicator carries the collectives (dist_nccl.h) */
    /* a plain start (not by srun) inside a Slurm job that asked for more tasks: SLURM_NTASKS,
     * the tasks the job expected of which only this one runs; 0 otherwise */
    int tasks_not_started;
    /* this rank's GPU is shared with another rank (NCCL_MULTI_RANK_GPU_ENABLE=1; set by
     * dist_check_gpu_placement), which needs NCCL >= 2.30 */
    int gpu_shared;
} DistInfo;

/* Discover this process's rank and layout and, with use_mpi and world_size > 1, initialise
 * MPI. Every blocking step (PMI2_Init, the KVS fence, MPI_Init) ends the job with a message
 * naming the rank and what it waited for once timeout_s passes. Call once per process. On
 * failure d is still valid for dist_abort, which is the right reaction once other ranks may
 * be waiting:  if (dist_init(&d, 1, 60) < 0) dist_abort(&d, 1, ct_error()); */
int dist_init(DistInfo *d, int use_mpi, double timeout_s);

/* The one-line rank map, e.g. "rank map (rank=host/local_rank): 0=n1/0 1=n1/1 2=n2/0 3=n2/1".
 * Complete on rank 0 (gathered in dist_init); other ranks get only their own entry. Long maps
 * end with "... (+N more)" to fit cap. Returns 0, or -1 if cap is too small for anything. */
int dist_rank_map(const DistInfo *d, char *buf, size_t cap);

/* Send n bytes from root's blob to every rank's blob, through the PMI2 KVS (hex-encoded under
 * key, split into PMI2-sized values), MPI_Bcast when MPI is up, or nothing with one rank.
 * key must be unique per call within the job (KVS entries cannot be replaced), at most 40
 * characters. Used before NCCL exists, for ncclUniqueId. */
int dist_kvs_broadcast(const DistInfo *d, const char *key, void *blob, size_t n, int root,
                       double timeout_s);

/* Sum across ranks into buf on every rank, deterministic: element i is always summed in rank
 * order 0..W-1, by one rank, and the result copied to the others, so every rank holds the
 * same bits and the same inputs give the same bits on every run with the same world size.
 * Needs MPI when world_size > 1. */
int dist_allreduce_sum_f32(const DistInfo *d, float *buf, size_t n);
int dist_allreduce_sum_f64(const DistInfo *d, double *buf, size_t n);
/* Maximum of *v across ranks (stop agreement). MPI, or the PMI2 KVS without MPI. */
int dist_allreduce_max_i32(const DistInfo *d, int *v);
/* Copy bytes from root to every rank. MPI, or the PMI2 KVS without MPI (small data only). */
int dist_bcast(const DistInfo *d, void *buf, size_t bytes, int root);
/* Wait until every rank arrives. MPI_Barrier, or PMI2_KVS_Fence without MPI. */
int dist_barrier(const DistInfo *d);
/* With an NCCL communicator (d->nccl, GPU jobs) the five collectives above go over NCCL instead,
 * with the same results: sums in rank order (every rank's values gathered, then added 0..W-1). */

/* ---- agreeing on a piece of work's outcome (dist_agree.c) ----
 *
 * After a piece of work that every rank of d does (a batch, an SGD step, loading a checkpoint),
 * before anything that needs all of them to have done it (the next collective): rc is this
 * rank's outcome, 0 or -1 with the error set (a stop: -1 after stop_abandon). Returns 0 on every
 * rank when every rc is 0 and no stop was asked of any rank (stop.h); else -1 on every rank, for
 * one reason, by one rule:
 *   - an error on any rank wins, over any stop: the lowest failing rank's message reaches every
 *     rank, which fails with "rank R failed during WHAT: <its message>" (the failing ranks keep
 *     their own; a rank that stopped takes the error and is no longer stop_abandoned), so every
 *     rank ends with exit 1;
 *   - else a stop on any rank: every rank fails through stop_abandon(WHAT) (a rank whose own rc
 *     was the stop keeps its message), so every rank ends with exit 75.
 * Every rank calls it at the same point, every time (a rank that fails goes straight to its
 * next agreement: any two agreements pair up, as each is the same collectives). One allreduce
 * of an int, and a broadcast of the message (2 KiB) on an error; no collective with one rank.
 * dist_agree_errors is the same without stops: a stop asked for is left to the caller (0 when
 * every rc is 0). */
int dist_agree(const DistInfo *d, int rc, const char *what);
int dist_agree_errors(const DistInfo *d, int rc, const char *what);

/* Every rank's string (at most cap-1 characters, no newlines): entry r of all (world_size
 * entries of cap bytes each) is rank r's `mine`. Through the PMI2 KVS (before NCCL exists);
 * key unique per call within the job. */
int dist_allgather_str(const DistInfo *d, const char *key, const char *mine, char *all, size_t cap);

/* A GPU job's placement check, before NCCL: every rank publishes its GPU (gpu_id, the device's
 * UUID; desc, e.g. "CUDA device 0 (NVIDIA H100 80GB HBM3)") and fails, naming both ranks, their
 * host and the GPU, when another rank uses the same GPU (NCCL refuses that, less clearly) —
 * unless NCCL_MULTI_RANK_GPU_ENABLE=1 (ct_ranks_may_share_gpu): then up to
 * CT_MAX_RANKS_PER_GPU ranks may share one, the lowest of them prints a warning naming the
 * variable, and d->gpu_shared is set. */
int dist_check_gpu_placement(DistInfo *d, const char *gpu_id, const char *desc);

/* Print "ctrain: error: rank R (host): msg" (msg as is when it already starts with "rank ")
 * and end the whole job now (MPI_Abort or
 * PMI2_Abort, so the launcher kills every rank instead of leaving them waiting for this one).
 * Exits with code when there is nothing to abort. Does not return. */
void dist_abort(const DistInfo *d, int code, const char *msg) __attribute__((noreturn));

/* Finalise MPI / PMI2. Safe to call twice, or after a failed dist_init. */
void dist_finalize(DistInfo *d);

/* ---- helpers, exposed for tests ---- */

/* Parse a PMI_process_mapping value "(vector,(start,nodes,ppn),...)" into node_of_rank[0..world)
 * (blocks of ppn consecutive ranks per node; the vector repeats until every rank is placed, as
 * for cyclic distributions). Returns -1 with a message if s is malformed or places a rank out
 * of range. */
int dist_parse_process_mapping(const char *s, int world_size, int *node_of_rank);

/* From node_of_rank[0..world): rank's local rank (ranks below it on its node), the ranks on its
 * node, its node index (position of its node id among the distinct ids, ascending) and the
 * number of distinct nodes. -1 if an id is negative or rank is out of range. */
int dist_layout_from_nodes(const int *node_of_rank, int world_size, int rank, int *local_rank,
                           int *local_size, int *node_index, int *num_nodes);

/* Entry node_index of a SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE value such as
 * "2(x3),1". Returns the count, or -1 with a message if malformed or too short. */
int dist_tasks_on_node(const char *tasks_per_node, int node_index);

/* Lowercase hex of n bytes into out (2n+1 bytes with the NUL); decode back, -1 with a message
 * if hex is not exactly 2n hex digits. */
void dist_hex_encode(const void *data, size_t n, char *out);
int dist_hex_decode(const char *hex, void *data, size_t n);

#endif
