/* dist_pmi2.c — rank discovery and the KVS through Slurm's PMI2 client library (libpmi2), for
 * processes that do not use MPI (GPU/NCCL jobs, single-rank steps). Never used together with
 * MPI_Init in one process: see dist.c for why. Every blocking call (PMI2_Init's handshake,
 * PMI2_KVS_Fence) runs under the watchdog. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"

#ifdef CT_HAVE_PMI2
#include <pmi2.h>

static int pmi2_up;
static unsigned max_seq; /* numbers the keys of dist_pmi2_max_i32 (same on every rank) */

/* Bytes per KVS value: two hex digits per byte, below PMI2_MAX_VALLEN with its NUL. */
#define PART_BYTES ((PMI2_MAX_VALLEN - 24) / 2)

int dist_pmi2_active(void) { return pmi2_up; }
int dist_pmi2_compiled(void) { return 1; }

int dist_pmi2_fence(const DistInfo *d, double timeout_s, const char *what) {
    dist_watchdog_arm(timeout_s, "PMI2_KVS_Fence in %s (waiting for all %d ranks)", what, d->world_size);
    int rc = PMI2_KVS_Fence();
    dist_watchdog_disarm();
    if (rc != PMI2_SUCCESS)
        return ct_fail("rank %d (%s): PMI2_KVS_Fence in %s failed (PMI2 error %d)", d->rank, d->host, what, rc);
    return 0;
}

static int kvs_put(const DistInfo *d, const char *key, const char *value) {
    int rc = PMI2_KVS_Put(key, value);
    if (rc != PMI2_SUCCESS)
        return ct_fail("rank %d (%s): PMI2_KVS_Put('%s', %zu chars) failed (PMI2 error %d)", d->rank, d->host,
                       key, strlen(value), rc);
    return 0;
}

static int kvs_get(const DistInfo *d, int src, const char *key, char *value, int cap, double timeout_s) {
    int len = 0;
    dist_watchdog_arm(timeout_s, "PMI2_KVS_Get('%s' from rank %d)", key, src);
    int rc = PMI2_KVS_Get(NULL, src, key, value, cap, &len);
    dist_watchdog_disarm();
    if (rc != PMI2_SUCCESS)
        return ct_fail("rank %d (%s): PMI2_KVS_Get('%s' from rank %d) failed (PMI2 error %d)", d->rank, d->host,
                       key, src, rc);
    value[cap - 1] = '\0';
    return 0;
}

/* Layout from the job's PMI_process_mapping; 1 if the process manager does not provide it. */
static int layout_from_mapping(DistInfo *d) {
    char map[PMI2_MAX_VALLEN];
    int found = 0;
    int rc = PMI2_Info_GetJobAttr("PMI_process_mapping", map, sizeof map, &found);
    if (rc != PMI2_SUCCESS || !found) return 1;
    map[sizeof map - 1] = '\0';
    int *node_of_rank = ct_malloc((size_t)d->world_size * sizeof *node_of_rank, "process mapping");
    rc = dist_parse_process_mapping(map, d->world_size, node_of_rank);
    if (rc == 0)
        rc = dist_layout_from_nodes(node_of_rank, d->world_size, d->rank, &d->local_rank, &d->local_size,
                                    &d->node_index, &d->num_nodes);
    free(node_of_rank);
    return rc;
}

int dist_pmi2_init(DistInfo *d) {
    int spawned = 0, size = 0, rank = 0, appnum = 0;
    const char *fd = getenv("PMI_FD");
    dist_watchdog_arm(d->timeout_s, "PMI2_Init (handshake with the process manager on PMI_FD=%s)", fd ? fd : "?");
    int rc = PMI2_Init(&spawned, &size, &rank, &appnum);
    dist_watchdog_disarm();
    if (rc != PMI2_SUCCESS)
        return ct_fail("PMI2_Init failed (PMI2 error %d; PMI_FD=%s PMI_RANK=%s): started by a launcher that does "
                       "not speak PMI-2? use srun --mpi=pmi2 or MPICH's mpiexec",
                       rc, fd ? fd : "(unset)", getenv("PMI_RANK") ? getenv("PMI_RANK") : "(unset)");
    pmi2_up = 1;
    if (size < 1 || rank < 0 || rank >= size) return ct_fail("PMI2_Init returned rank %d of %d", rank, size);
    d->rank = rank;
    d->world_size = size;
    dist_watchdog_identity(rank, d->host);

    rc = layout_from_mapping(d);
    if (rc < 0) return ct_fail_prefix("rank %d (%s)", rank, d->host);
    if (rc > 0) {
        /* No mapping (unusual): srun's own variables still describe the layout. */
        if (!d->srun)
            return ct_fail("rank %d (%s): the process manager provides no PMI_process_mapping, so ctrain cannot "
                           "tell which ranks share a node", rank, d->host);
        if (dist_layout_from_slurm_env(d, 0) < 0) return ct_fail_prefix("rank %d (%s)", rank, d->host);
    }
    if (size == 1) {
        DistEntry *e = ct_malloc(sizeof *e, "rank map");
        dist_entry_set(e, 0, d->local_rank, d->host);
        dist_store_rank_map(e, 1);
        return 0;
    }

    /* Every rank publishes "local_rank host"; the fence doubles as "all ranks have started". */
    DistEntry me;
    dist_entry_set(&me, rank, d->local_rank, d->host);
    char key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];
    snprintf(key, sizeof key, "ct!host.%d", rank);
    snprintf(value, sizeof value, "%d %s", me.local_rank, me.host);
    if (kvs_put(d, key, value) < 0) return -1;
    if (dist_pmi2_fence(d, d->timeout_s, "dist_init") < 0) return -1;
    if (rank != 0) return 0;
    DistEntry *all = ct_calloc((size_t)size, sizeof *all, "rank map");
    for (int r = 0; r < size; r++) {
        snprintf(key, sizeof key, "ct!host.%d", r);
        if (kvs_get(d, r, key, value, sizeof value, d->timeout_s) < 0) {
            free(all);
            return -1;
        }
        int local = -1;
        char host[sizeof all->host];
        if (sscanf(value, "%d %47s", &local, host) != 2) {
            free(all);
            return ct_fail("rank 0: rank %d published a malformed host entry '%s'", r, value);
        }
        dist_entry_set(&all[r], r, local, host);
    }
    dist_store_rank_map(all, size);
    return 0;
}

int dist_pmi2_kvs_broadcast(const DistInfo *d, const char *key, void *blob, size_t n, int root,
                            double timeout_s) {
    size_t parts = n == 0 ? 0 : (n + PART_BYTES - 1) / PART_BYTES;
    char pkey[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];
    if (d->rank == root) {
        for (size_t i = 0; i < parts; i++) {
            size_t off = i * PART_BYTES, len = n - off < PART_BYTES ? n - off : PART_BYTES;
            snprintf(pkey, sizeof pkey, "%s#%zu", key, i);
            dist_hex_encode((const unsigned char *)blob + off, len, value);
            if (kvs_put(d, pkey, value) < 0) return -1;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "dist_kvs_broadcast('%s' from rank %d)", key, root);
    if (dist_pmi2_fence(d, timeout_s, what) < 0) return -1;
    if (d->rank == root) return 0;
    for (size_t i = 0; i < parts; i++) {
        size_t off = i * PART_BYTES, len = n - off < PART_BYTES ? n - off : PART_BYTES;
        snprintf(pkey, sizeof pkey, "%s#%zu", key, i);
        if (kvs_get(d, root, pkey, value, sizeof value, timeout_s) < 0) return -1;
        if (dist_hex_decode(value, (unsigned char *)blob + off, len) < 0)
            return ct_fail_prefix("rank %d (%s): dist_kvs_broadcast('%s') part %zu", d->rank, d->host, key, i);
    }
    return 0;
}

int dist_pmi2_allgather_str(const DistInfo *d, const char *key, const char *what, const char *mine, char *all, size_t cap,
                            double timeout_s) {
    char k[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN];
    if (strlen(mine) >= sizeof value || strlen(mine) >= cap)
        return ct_fail("rank %d (%s): %s: value of %zu characters is too long for the KVS", d->rank, d->host, key,
                       strlen(mine));
    snprintf(k, sizeof k, "%s.%d", key, d->rank);
    if (kvs_put(d, k, mine) < 0) return -1;
    if (dist_pmi2_fence(d, timeout_s, what) < 0) return -1;
    for (int r = 0; r < d->world_size; r++) {
        if (r == d->rank) {
            snprintf(all + (size_t)r * cap, cap, "%s", mine);
            continue;
        }
        snprintf(k, sizeof k, "%s.%d", key, r);
        if (kvs_get(d, r, k, value, sizeof value, timeout_s) < 0) return -1;
        snprintf(all + (size_t)r * cap, cap, "%s", value);
    }
    return 0;
}

int dist_pmi2_max_i32(const DistInfo *d, int *v) {
    char key[32], mine[16];
    snprintf(key, sizeof key, "ct!max.%u", max_seq++);
    snprintf(mine, sizeof mine, "%d", *v);
    char *all = ct_malloc((size_t)d->world_size * sizeof mine, "max values");
    if (dist_pmi2_allgather_str(d, key, "dist_allreduce_max_i32", mine, all, sizeof mine, d->op_timeout_s) < 0) {
        free(all);
        return ct_fail_prefix("dist_allreduce_max_i32");
    }
    int best = *v;
    for (int r = 0; r < d->world_size; r++) {
        char *end;
        long x = strtol(all + (size_t)r * sizeof mine, &end, 10);
        if (*end || end == all + (size_t)r * sizeof mine) {
            ct_fail("rank %d: rank %d published a malformed value '%s' for max", d->rank, r, all + (size_t)r * sizeof mine);
            free(all);
            return -1;
        }
        if (x > best) best = (int)x;
    }
    free(all);
    *v = best;
    return 0;
}

void dist_pmi2_abort(const char *msg) {
    /* The abort command travels as "msg=...;": drop the PMI separators from the text. */
    char clean[512];
    size_t n = 0;
    for (const char *p = msg ? msg : ""; *p && n + 1 < sizeof clean; p++)
        clean[n++] = (*p == ';' || *p == '=' || *p == '\n') ? ' ' : *p;
    clean[n] = '\0';
    fflush(stdout);
    fflush(stderr);
    /* The launcher forwards this process's stderr through a pipe and ends every process as soon
     * as the abort arrives: a moment first, so the message printed just before reaches the job's
     * log. Without it hydra dropped rank 0's "timed out after 20 s in ..." in 2 of 3 two-rank
     * hang tests on an H100 (2026-11-25). */
    nanosleep(&(struct timespec){0, 500000000}, NULL);
    /* isworld: slurmstepd kills the whole step (and hydra the whole job). Exits with 1. */
    PMI2_Abort(1, clean);
    _exit(CT_EXIT_FAILURE);
}

void dist_pmi2_finalize(void) {
    if (!pmi2_up) return;
    pmi2_up = 0;
    PMI2_Finalize();
}

#else /* !CT_HAVE_PMI2 */

int dist_pmi2_active(void) { return 0; }
int dist_pmi2_compiled(void) { return 0; }

int dist_pmi2_init(DistInfo *d) {
    (void)d;
    return ct_fail("PMI_FD is set (srun --mpi=pmi2 or mpiexec) but this ctrain was built without Slurm's PMI2 "
                   "library (install libpmi2-0-dev or set PMI2_HOME, then rebuild)");
}

int dist_pmi2_fence(const DistInfo *d, double timeout_s, const char *what) {
    (void)timeout_s;
    return ct_fail("rank %d: %s: built without PMI2", d->rank, what);
}

int dist_pmi2_kvs_broadcast(const DistInfo *d, const char *key, void *blob, size_t n, int root,
                            double timeout_s) {
    (void)blob, (void)n, (void)root, (void)timeout_s;
    return ct_fail("rank %d: dist_kvs_broadcast('%s'): built without PMI2", d->rank, key);
}

int dist_pmi2_max_i32(const DistInfo *d, int *v) {
    (void)v;
    return ct_fail("rank %d: dist_allreduce_max_i32: built without PMI2", d->rank);
}

int dist_pmi2_allgather_str(const DistInfo *d, const char *key, const char *what, const char *mine, char *all, size_t cap,
                            double timeout_s) {
    (void)key, (void)mine, (void)all, (void)cap, (void)timeout_s;
    return ct_fail("rank %d: %s: built without PMI2", d->rank, what);
}

void dist_pmi2_abort(const char *msg) {
    (void)msg;
    _exit(CT_EXIT_FAILURE);
}

void dist_pmi2_finalize(void) {}

#endif
