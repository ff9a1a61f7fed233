/* dist_layout.c — what the launcher backends (dist.c, dist_mpi.c, dist_pmi2.c) share about
 * where ranks run: the rank map rank 0 keeps for `dist_rank_map`, and a task's layout read
 * from srun's SLURM_* variables. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"


/* ---- the rank map rank 0 keeps ---- */

static DistEntry *g_map; /* rank 0: every rank's entry */
static int g_map_n;

void dist_store_rank_map(DistEntry *e, int n) {
    free(g_map);
    g_map = e;
    g_map_n = n;
}

const DistEntry *dist_stored_rank_map(int *n) {
    *n = g_map_n;
    return g_map;
}

/* ---- layout from SLURM_* ---- */

int dist_layout_from_slurm_env(DistInfo *d, int set_rank) {
    int procid, ntasks, localid, nodeid, nnodes;
    if (ct_env_nonneg_int("SLURM_PROCID", &procid) < 0 || ct_env_nonneg_int("SLURM_STEP_NUM_TASKS", &ntasks) < 0 ||
        ct_env_nonneg_int("SLURM_LOCALID", &localid) < 0 || ct_env_nonneg_int("SLURM_NODEID", &nodeid) < 0 ||
        ct_env_nonneg_int("SLURM_STEP_NUM_NODES", &nnodes) < 0)
        return ct_fail("srun task without complete SLURM_* layout (SLURM_PROCID=%s SLURM_STEP_NUM_TASKS=%s "
                       "SLURM_LOCALID=%s SLURM_NODEID=%s SLURM_STEP_NUM_NODES=%s)",
                       getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "(unset)",
                       getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : "(unset)",
                       getenv("SLURM_LOCALID") ? getenv("SLURM_LOCALID") : "(unset)",
                       getenv("SLURM_NODEID") ? getenv("SLURM_NODEID") : "(unset)",
                       getenv("SLURM_STEP_NUM_NODES") ? getenv("SLURM_STEP_NUM_NODES") : "(unset)");
    const char *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
    int local_size = dist_tasks_on_node(tpn, nodeid);
    if (local_size < 0) return ct_fail_prefix("SLURM_STEP_TASKS_PER_NODE");
    if (procid >= ntasks || nodeid >= nnodes || localid >= local_size)
        return ct_fail("inconsistent SLURM_* layout: SLURM_PROCID=%d of SLURM_STEP_NUM_TASKS=%d, SLURM_NODEID=%d "
                       "of SLURM_STEP_NUM_NODES=%d, SLURM_LOCALID=%d of %d",
                       procid, ntasks, nodeid, nnodes, localid, local_size);
    if (set_rank) {
        d->rank = procid;
        d->world_size = ntasks;
    }
    d->local_rank = localid;
    d->local_size = local_size;
    d->node_index = nodeid;
    d->num_nodes = nnodes;
    return 0;
}
