/* dist_gpus.c — the startup check of a GPU job's placement: each rank's GPU, identified by its
 * UUID, is gathered over the PMI2 KVS before NCCL exists, so that two ranks on one GPU (a
 * CUDA_VISIBLE_DEVICES or --gpu-bind mistake) end the job within seconds with a message naming
 * the ranks, the host and the GPU, instead of NCCL's "invalid usage" or two trainings sharing
 * one GPU's memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"

enum { ENTRY = 512 };

int dist_check_gpu_placement(const DistInfo *d, const char *gpu_id, const char *desc) {
    char mine[ENTRY];
    snprintf(mine, sizeof mine, "%s %s %s", gpu_id, d->host, desc);
    for (char *p = mine; *p; p++)
        if (*p == '\n' || *p == ';' || *p == '=') *p = ' ';
    char *all = ct_malloc((size_t)d->world_size * ENTRY, "GPU placement");
    if (dist_allgather_str(d, "ct!gpus", mine, all, ENTRY) != 0) {
        free(all);
        return ct_fail_prefix("rank %d (%s): checking which GPU each rank uses", d->rank, d->host);
    }
    int rc = 0;
    for (int r = 0; r < d->world_size && rc == 0; r++) {
        if (r == d->rank) continue;
        const char *other = all + (size_t)r * ENTRY;
        size_t id_len = strcspn(other, " ");
        if (id_len != strlen(gpu_id) || strncmp(other, gpu_id, id_len) != 0) continue;
        const char *other_host = other + id_len + (other[id_len] == ' ');
        int low = r < d->rank ? r : d->rank, high = r < d->rank ? d->rank : r;
        rc = ct_fail("ranks %d and %d both use GPU %s on %.*s (%s): each rank needs a GPU of its own; give every task "
                     "one GPU (srun --gpus-per-task=1) or show each task all of the node's GPUs (--gpu-bind=none, "
                     "ranks take their local rank's), and do not start more tasks per node than it has GPUs",
                     low, high, gpu_id, (int)strcspn(other_host, " "), other_host, desc);
    }
    free(all);
    return rc;
}
