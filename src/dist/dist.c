/* dist.c — rank discovery (which launcher started us, rank and layout, cross-checked against
 * Slurm's SLURM_* variables) and the dispatch of collectives to MPI or the PMI2 KVS.
 *
 * Design: one PMI client per process. srun --mpi=pmi2 and MPICH's mpiexec (hydra) give each
 * rank one PMI_FD socket. MPICH 4.0.2 (Debian) contains its own PMI-1 client and bootstraps
 * over that socket inside MPI_Init; Slurm's libpmi2 is a second, PMI-2 client. Tried on this
 * cluster (srun --mpi=pmi2, Slurm 22.05, MPICH 4.0.2 ch4:ucx), both orders break the step:
 *   PMI2_Init then MPI_Init: MPICH's client reads PMI-2 framed replies ("PMIU_parse_keyvals:
 *     unexpected key delimiter"), the task dies with a broken pipe, the step hangs;
 *   MPI_Init then PMI2_Init: slurmstepd "mpi/pmi2: invalid pmi1 command received: 'init'"
 *     (the socket is already in PMI-1 mode) and PMI2_Init never returns.
 * (Under hydra, PMI2_Init then MPI_Init happened to work, but PMI2_Finalize failed.) So:
 *   - CPU jobs (use_mpi, world > 1): only MPI. Rank and size from MPI_COMM_WORLD, node-local
 *     ranks from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (MPICH derives it from the same
 *     PMI_process_mapping), host names gathered with MPI_Allgather. The KVS broadcast becomes
 *     MPI_Bcast.
 *   - everything else (GPU/NCCL jobs, world 1): Slurm's libpmi2 directly: PMI2_Init, the
 *     PMI_process_mapping job attribute, PMI2_KVS_Put/Fence/Get.
 * "Am I under PMI?" is decided from PMI_FD (set by both srun's pmi2 plugin and hydra), never by
 * calling PMI2_Init blindly. SLURM_* (PROCID, STEP_NUM_TASKS, LOCALID, NODEID) cross-check the
 * result when srun itself started this process, and give the layout when PMI is absent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"

static unsigned g_seq;     /* numbers the internal KVS keys of dist_bcast (same on every rank) */

/* MPICH's mpiexec (hydra) started this process: it sets these for its ranks. Inside an
 * allocation hydra starts its proxies with srun and the ranks inherit the proxies' SLURM_*
 * (and mpiexec's own SLURMD_NODENAME), which then describe the wrong process. */
static int started_by_hydra(void) { return getenv("HYDI_CONTROL_FD") || getenv("MPI_LOCALRANKID"); }

/* srun started this process itself (so SLURM_PROCID etc. describe it), as opposed to a batch
 * script's shell, or mpiexec run inside an allocation (whose ranks inherit the SLURM_* of the
 * step that started hydra's proxies, and Slurm's PMI_JOBID with them). */
static int started_by_srun(void) {
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    if (!job || !step || !getenv("SLURM_STEP_NUM_TASKS") || !getenv("SLURM_PROCID")) return 0;
    if (started_by_hydra()) return 0;
    if (getenv("PMI_FD")) {
        /* srun's pmi2 plugin sets PMI_JOBID=<job>.<step>, and PMI_SIZE to the step's tasks. */
        char want[64];
        snprintf(want, sizeof want, "%s.%s", job, step);
        const char *pmi_jobid = getenv("PMI_JOBID"), *pmi_size = getenv("PMI_SIZE");
        if (!pmi_jobid || strcmp(pmi_jobid, want) != 0) return 0;
        if (!pmi_size || strcmp(pmi_size, getenv("SLURM_STEP_NUM_TASKS")) != 0) return 0;
    }
    return 1;
}

/* The launcher's view must agree with srun's: a disagreement means GPUs, data shards or
 * checkpoints would be assigned to the wrong rank, so it is an error, not a warning. */
static int cross_check_slurm(const DistInfo *d) {
    DistInfo s = *d;
    if (dist_layout_from_slurm_env(&s, 1) < 0) return ct_fail_prefix("rank %d (%s)", d->rank, d->host);
    if (s.rank == d->rank && s.world_size == d->world_size && s.local_rank == d->local_rank &&
        s.local_size == d->local_size && s.node_index == d->node_index && s.num_nodes == d->num_nodes)
        return 0;
    return ct_fail("rank %d (%s): %s%s says rank %d of %d, local rank %d of %d, node %d of %d, but srun says "
                   "rank %d of %d, local rank %d of %d, node %d of %d (SLURM_PROCID, SLURM_STEP_NUM_TASKS, "
                   "SLURM_LOCALID, SLURM_NODEID); an arbitrary task distribution (-m arbitrary) or SLURM_* "
                   "variables inherited from another step can cause this",
                   d->rank, d->host, d->launcher, d->mpi ? " (MPI)" : "", d->rank, d->world_size,
                   d->local_rank, d->local_size, d->node_index, d->num_nodes, s.rank, s.world_size,
                   s.local_rank, s.local_size, s.node_index, s.num_nodes);
}

static void set_host(DistInfo *d) {
    const char *node = started_by_hydra() ? NULL : getenv("SLURMD_NODENAME");
    if (node && *node) {
        snprintf(d->host, sizeof d->host, "%s", node);
    } else if (gethostname(d->host, sizeof d->host) != 0 || !d->host[0]) {
        snprintf(d->host, sizeof d->host, "unknown-host");
    }
    d->host[sizeof d->host - 1] = '\0';
}

static void store_own_entry(const DistInfo *d) {
    DistEntry *e = ct_malloc(sizeof *e, "rank map");
    dist_entry_set(e, d->rank, d->local_rank, d->host);
    dist_store_rank_map(e, 1);
}

/* The watchdog's way to end the whole job from its thread (registered in dist_init): MPI_Abort
 * or PMI2_Abort where that is possible from here, else _exit(1). The message is printed. */
static void abort_job_now(const char *msg) {
    if (dist_mpi_can_abort_async()) dist_mpi_abort(1);
    if (dist_pmi2_active()) dist_pmi2_abort(msg);
    _exit(CT_EXIT_FAILURE);
}

int dist_init(DistInfo *d, int use_mpi, double timeout_s) {
    memset(d, 0, sizeof *d);
    d->world_size = d->local_size = d->num_nodes = 1;
    d->launcher = "single";
    d->timeout_s = timeout_s;
    dist_watchdog_on_timeout(abort_job_now);
    set_host(d);
    d->srun = started_by_srun();
    int env_rank = -1;
    ct_env_nonneg_int("PMI_RANK", &env_rank);
    dist_watchdog_identity(env_rank, d->host);

    int env_size = -1;
    ct_env_nonneg_int("PMI_SIZE", &env_size);
    /* One rank needs no PMI: without libpmi2 compiled in it is simply started plainly. */
    int pmi = getenv("PMI_FD") && !(env_size == 1 && !dist_pmi2_compiled());
    if (pmi) {
        d->launcher = "pmi2";
        /* Provisional, for messages if the bootstrap fails; the backend sets the real ones. */
        if (env_rank >= 0) d->rank = env_rank;
        if (env_size > 0) d->world_size = env_size;
        int rc;
        if (use_mpi && env_size != 1) {
            d->mpi = 1;
            rc = dist_mpi_init(d, env_size);
        } else {
            rc = dist_pmi2_init(d);
        }
        if (rc < 0) return -1;
        if (d->srun && cross_check_slurm(d) < 0) return -1;
        return 0;
    }

    if (d->srun) {
        d->launcher = "slurm-env";
        if (dist_layout_from_slurm_env(d, 1) < 0) return ct_fail_prefix("rank %s", getenv("SLURM_PROCID"));
        dist_watchdog_identity(d->rank, d->host);
        store_own_entry(d);
        if (d->world_size > 1 && use_mpi) {
            const char *type = getenv("SLURM_MPI_TYPE");
            return ct_fail("rank %d (%s): srun started %d tasks without PMI2 (no PMI_FD; SLURM_MPI_TYPE=%s), "
                           "so MPI cannot connect them: run srun --mpi=pmi2 (or set MpiDefault=pmi2 in slurm.conf)",
                           d->rank, d->host, d->world_size, type ? type : "(unset)");
        }
        return 0;
    }

    /* A plain start. In a batch script SLURM_NTASKS says how many tasks the job asked for,
     * but they only exist when srun starts them. */
    int ntasks = 0;
    if (getenv("SLURM_JOB_ID") && ct_env_nonneg_int("SLURM_NTASKS", &ntasks) == 0 && ntasks > 1) {
        d->tasks_not_started = ntasks;
        fprintf(stderr, "ctrain: warning: SLURM_NTASKS=%d but this process was not started by srun: "
                        "running as a single process (start it with srun --mpi=pmi2)\n", ntasks);
    }
    dist_watchdog_identity(0, d->host);
    store_own_entry(d);
    return 0;
}

int dist_rank_map(const DistInfo *d, char *buf, size_t cap) {
    int n;
    const DistEntry *map = dist_stored_rank_map(&n);
    if (d->rank == 0 && map) return dist_format_rank_map(map, n, buf, cap);
    DistEntry self;
    dist_entry_set(&self, d->rank, d->local_rank, d->host);
    return dist_format_rank_map(&self, 1, buf, cap);
}

/* Why a collective cannot run in this process (world_size > 1, no MPI). */
static int no_collectives(const DistInfo *d, const char *op) {
    if (!strcmp(d->launcher, "pmi2"))
        return ct_fail("rank %d (%s): %s needs MPI, but this process runs without it (dist_init without "
                       "use_mpi: GPU jobs reduce with NCCL)", d->rank, d->host, op);
    return ct_fail("rank %d (%s): %s is impossible: srun started the %d ranks without PMI2, so they cannot "
                   "reach each other; run srun --mpi=pmi2", d->rank, d->host, op, d->world_size);
}

int dist_kvs_broadcast(const DistInfo *d, const char *key, void *blob, size_t n, int root,
                       double timeout_s) {
    /* Checked in every mode, so that a bad key shows up in a one-rank test too. */
    size_t klen = key ? strlen(key) : 0;
    if (klen == 0 || klen > 40 || strpbrk(key, ";= \t\n"))
        return ct_fail("dist_kvs_broadcast: key '%s' must be 1..40 characters without ';', '=' or spaces",
                       key ? key : "(null)");
    if (root < 0 || root >= d->world_size)
        return ct_fail("dist_kvs_broadcast('%s'): root %d outside 0..%d", key, root, d->world_size - 1);
    if (d->world_size == 1) return 0;
    if (d->mpi) {
        dist_watchdog_arm(timeout_s, "dist_kvs_broadcast('%s') (MPI_Bcast of %zu bytes from rank %d)", key, n, root);
        int rc = dist_mpi_bcast(d, blob, n, root);
        dist_watchdog_disarm();
        return rc;
    }
    if (dist_pmi2_active()) return dist_pmi2_kvs_broadcast(d, key, blob, n, root, timeout_s);
    return no_collectives(d, "dist_kvs_broadcast");
}

int dist_allreduce_sum_f32(const DistInfo *d, float *buf, size_t n) {
    if (d->world_size == 1) return 0;
    if (d->nccl) return dist_nccl_sum(d, buf, n, 0);
    if (!d->mpi) return no_collectives(d, "dist_allreduce_sum_f32");
    dist_watchdog_arm(d->op_timeout_s, "dist_allreduce_sum_f32 (%zu floats over MPI)", n);
    int rc = dist_mpi_allreduce_sum(d, buf, n, 0);
    dist_watchdog_disarm();
    return rc;
}

int dist_allreduce_sum_f64(const DistInfo *d, double *buf, size_t n) {
    if (d->world_size == 1) return 0;
    if (d->nccl) return dist_nccl_sum(d, buf, n, 1);
    if (!d->mpi) return no_collectives(d, "dist_allreduce_sum_f64");
    dist_watchdog_arm(d->op_timeout_s, "dist_allreduce_sum_f64 (%zu doubles over MPI)", n);
    int rc = dist_mpi_allreduce_sum(d, buf, n, 1);
    dist_watchdog_disarm();
    return rc;
}

int dist_allreduce_max_i32(const DistInfo *d, int *v) {
    if (d->world_size == 1) return 0;
    if (d->nccl) return dist_nccl_max_i32(d, v);
    int rc;
    dist_watchdog_arm(d->op_timeout_s, "dist_allreduce_max_i32 (%s)", d->mpi ? "MPI" : "PMI2 KVS");
    if (d->mpi) rc = dist_mpi_max_i32(d, v);
    else if (dist_pmi2_active()) rc = dist_pmi2_max_i32(d, v);
    else rc = no_collectives(d, "dist_allreduce_max_i32");
    dist_watchdog_disarm();
    return rc;
}

int dist_bcast(const DistInfo *d, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= d->world_size)
        return ct_fail("dist_bcast: root %d outside 0..%d", root, d->world_size - 1);
    if (d->world_size == 1) return 0;
    if (d->nccl) return dist_nccl_bcast(d, buf, bytes, root);
    if (d->mpi) {
        dist_watchdog_arm(d->op_timeout_s, "dist_bcast (%zu bytes from rank %d over MPI)", bytes, root);
        int rc = dist_mpi_bcast(d, buf, bytes, root);
        dist_watchdog_disarm();
        return rc;
    }
    if (dist_pmi2_active()) {
        char key[32];
        snprintf(key, sizeof key, "ct!bc.%u", g_seq++);
        return dist_pmi2_kvs_broadcast(d, key, buf, bytes, root, d->op_timeout_s);
    }
    return no_collectives(d, "dist_bcast");
}

int dist_barrier(const DistInfo *d) {
    if (d->world_size == 1) return 0;
    if (d->nccl) return dist_nccl_barrier(d);
    if (d->mpi) {
        dist_watchdog_arm(d->op_timeout_s, "dist_barrier (MPI_Barrier, waiting for all %d ranks)", d->world_size);
        int rc = dist_mpi_barrier(d);
        dist_watchdog_disarm();
        return rc;
    }
    if (dist_pmi2_active()) return dist_pmi2_fence(d, d->op_timeout_s, "dist_barrier");
    return no_collectives(d, "dist_barrier");
}

int dist_allgather_str(const DistInfo *d, const char *key, const char *mine, char *all, size_t cap) {
    if (strlen(mine) >= cap || strchr(mine, '\n'))
        return ct_fail("dist_allgather_str('%s'): the value must be one line below %zu characters", key, cap);
    if (d->world_size == 1) {
        snprintf(all, cap, "%s", mine);
        return 0;
    }
    if (!d->mpi && dist_pmi2_active())
        return dist_pmi2_allgather_str(d, key, key, mine, all, cap, d->timeout_s);
    return ct_fail("rank %d (%s): dist_allgather_str needs the PMI2 KVS (a GPU job started by srun --mpi=pmi2)",
                   d->rank, d->host);
}

void dist_abort(const DistInfo *d, int code, const char *msg) {
    if (!msg || !*msg) msg = "aborting";
    if (!strncmp(msg, "rank ", 5)) fprintf(stderr, "ctrain: error: %s\n", msg);
    else fprintf(stderr, "ctrain: error: rank %d (%s): %s\n", d->rank, d->host, msg);
    fflush(stderr);
    fflush(stdout);
    if (d->world_size > 1) { /* with one rank there is nobody to take down: keep the code */
        if (dist_mpi_active()) dist_mpi_abort(code);
        if (dist_pmi2_active()) dist_pmi2_abort(msg);
    }
    exit(code);
}

void dist_finalize(DistInfo *d) {
    if (d->nccl) dist_nccl_finalize(d); /* its waits have their own deadlines */
    if (dist_mpi_active()) {
        dist_watchdog_arm(d->timeout_s, "MPI_Finalize (waiting for the other ranks to finish)");
        dist_mpi_finalize(d);
    }
    if (dist_pmi2_active()) {
        dist_watchdog_arm(d->timeout_s, "PMI2_Finalize");
        dist_pmi2_finalize();
    }
    dist_watchdog_disarm();
    dist_watchdog_stop();
    dist_store_rank_map(NULL, 0);
    d->mpi = 0;
}
