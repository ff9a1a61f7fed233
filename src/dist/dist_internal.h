/* dist_internal.h — what the dist*.c files share and nothing else includes: the per-process
 * bootstrap state, the rank-map records, the watchdog and the two backends (libpmi2, MPI). */
#ifndef CT_DIST_INTERNAL_H
#define CT_DIST_INTERNAL_H

#include <stddef.h>

#include "dist.h"

/* One rank's line in the rank map. Host names longer than this are cut (only for the map). */
typedef struct {
    int rank, local_rank;
    char host[48];
} DistEntry;

/* dist_util.c: "rank map (rank=host/local_rank): 0=n1/0 ..." from n entries, cut to cap. */
int dist_format_rank_map(const DistEntry *e, int n, char *buf, size_t cap);

/* dist_util.c: copy host into an entry's host field, keeping only [A-Za-z0-9._-] (the
 * entries travel as PMI values, where ';' and '=' are separators). */
void dist_entry_set(DistEntry *e, int rank, int local_rank, const char *host);

/* dist_layout.c: rank 0 keeps every rank's entry for dist_rank_map (takes ownership of e;
 * NULL frees it); the stored entries (NULL if none) and their count. */
void dist_store_rank_map(DistEntry *e, int n);
const DistEntry *dist_stored_rank_map(int *n);
/* dist_layout.c: layout (local rank/size, node index, count) from SLURM_* of an srun task; with
 * set_rank also rank and world size. -1 with a message if a variable is missing or bad. */
int dist_layout_from_slurm_env(DistInfo *d, int set_rank);

/* dist_watchdog.c: a thread that ends the job when one blocking step outlasts its timeout.
 * arm() names what the caller is about to wait for; with timeout_s <= 0 it does nothing.
 * When it fires it prints "ctrain: error: rank R (host): timed out after S s in WHAT ..." and
 * ends the job with the function given to dist_watchdog_on_timeout (dist.c gives one that
 * aborts through MPI or PMI2), then _exit(1). Arm/disarm pairs do not nest. */
void dist_watchdog_on_timeout(void (*end_job)(const char *msg));
void dist_watchdog_identity(int rank, const char *host);
void dist_watchdog_arm(double timeout_s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dist_watchdog_disarm(void);
void dist_watchdog_stop(void);

/* dist_pmi2.c: Slurm's libpmi2 (only when MPI is not used in this process). */
int dist_pmi2_init(DistInfo *d);
int dist_pmi2_fence(const DistInfo *d, double timeout_s, const char *what);
int dist_pmi2_kvs_broadcast(const DistInfo *d, const char *key, void *blob, size_t n, int root,
                            double timeout_s);
int dist_pmi2_max_i32(const DistInfo *d, int *v);
/* Every rank's string: entry r of all (world_size entries of cap bytes) is rank r's `mine`; key
 * unique per call in the job, `what` names the call in messages. */
int dist_pmi2_allgather_str(const DistInfo *d, const char *key, const char *what, const char *mine, char *all, size_t cap,
                            double timeout_s);
int dist_pmi2_active(void);
int dist_pmi2_compiled(void); /* built with libpmi2 */
void dist_pmi2_abort(const char *msg) __attribute__((noreturn));
void dist_pmi2_finalize(void);

/* dist_mpi.c: MPICH (bootstraps itself over PMI inside MPI_Init). */
int dist_mpi_init(DistInfo *d, int expected_world);
int dist_mpi_allreduce_sum(const DistInfo *d, void *buf, size_t n, int is_f64);
int dist_mpi_max_i32(const DistInfo *d, int *v);
int dist_mpi_bcast(const DistInfo *d, void *buf, size_t bytes, int root);
int dist_mpi_barrier(const DistInfo *d);
/* 1 when MPI is initialised and MPI_Abort may be called from another thread. */
int dist_mpi_can_abort_async(void);
int dist_mpi_active(void);
void dist_mpi_abort(int code) __attribute__((noreturn));
void dist_mpi_finalize(const DistInfo *d);

/* dist_nccl.c: the collectives of dist.h over the NCCL communicator (when d->nccl). */
int dist_nccl_sum(const DistInfo *d, void *buf, size_t n, int is_f64);
int dist_nccl_max_i32(const DistInfo *d, int *v);
int dist_nccl_bcast(const DistInfo *d, void *buf, size_t bytes, int root);
int dist_nccl_barrier(const DistInfo *d);
void dist_nccl_finalize(DistInfo *d);

#endif
