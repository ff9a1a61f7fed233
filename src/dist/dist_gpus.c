/* dist_gpus.c — the startup check of a GPU job's placement: each rank's GPU, identified by its
 * UUID, is gathered over the PMI2 KVS before NCCL exists, so that two ranks on one GPU (a
 * CUDA_VISIBLE_DEVICES or --gpu-bind mistake) end the job within seconds with a message naming
 * the ranks, the host and the GPU, instead of NCCL's "invalid usage" or two trainings sharing
 * one GPU's memory. NCCL 2.30 can run two ranks on one GPU when NCCL_MULTI_RANK_GPU_ENABLE=1
 * (experimental; what lets a two-rank NCCL job be tested on a single GPU): with that set, up to
 * CT_MAX_RANKS_PER_GPU ranks may share one, with a warning naming the variable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"

enum { ENTRY = 512 };

/* entry's GPU id equals gpu_id (an entry is "id host desc") */
static int same_gpu(const char *entry, const char *gpu_id) {
    size_t id_len = strcspn(entry, " ");
    return id_len == strlen(gpu_id) && strncmp(entry, gpu_id, id_len) == 0;
}

int dist_check_gpu_placement(DistInfo *d, const char *gpu_id, const char *desc) {
    char mine[ENTRY];
    snprintf(mine, sizeof mine, "%s %s %s", gpu_id, d->host, desc);
    for (char *p = mine; *p; p++)
        if (*p == '\n' || *p == ';' || *p == '=') *p = ' ';
    char *all = ct_malloc((size_t)d->world_size * ENTRY, "GPU placement");
    if (dist_allgather_str(d, "ct!gpus", mine, all, ENTRY) != 0) {
        free(all);
        return ct_fail_prefix("rank %d (%s): checking which GPU each rank uses", d->rank, d->host);
    }
    /* the ranks on this rank's GPU, in rank order ("0, 1"), and the first other one */
    int sharers = 0, other = -1, first = d->rank;
    char ranks[200] = "";
    size_t len = 0;
    for (int r = 0; r < d->world_size; r++) {
        if (!same_gpu(all + (size_t)r * ENTRY, gpu_id)) continue;
        sharers++;
        if (r != d->rank && other < 0) other = r;
        if (r < first) first = r;
        if (len < sizeof ranks)
            len += (size_t)snprintf(ranks + len, sizeof ranks - len, "%s%d", len ? ", " : "", r);
    }
    int rc = 0;
    if (sharers > 1) {
        const char *other_entry = all + (size_t)other * ENTRY;
        const char *other_host = other_entry + strcspn(other_entry, " ");
        other_host += *other_host == ' ';
        const int host_len = (int)strcspn(other_host, " ");
        const int low = other < d->rank ? other : d->rank, high = other < d->rank ? d->rank : other;
        if (!ct_ranks_may_share_gpu())
            rc = ct_fail("ranks %d and %d both use GPU %s on %.*s (%s): each rank needs a GPU of its own; give every "
                         "task one GPU (srun --gpus-per-task=1) or show each task all of the node's GPUs "
                         "(--gpu-bind=none, ranks take their local rank's), and do not start more tasks per node than "
                         "it has GPUs (to let two ranks share a GPU for a test: %s=1, NCCL >= 2.30)",
                         low, high, gpu_id, host_len, other_host, desc, CT_MULTI_RANK_GPU_VAR);
        else if (sharers > CT_MAX_RANKS_PER_GPU)
            rc = ct_fail("ranks %s all use GPU %s on %.*s (%s): %s=1 lets at most %d ranks share a GPU (NCCL's "
                         "limit in its default configuration)",
                         ranks, gpu_id, host_len, other_host, desc, CT_MULTI_RANK_GPU_VAR, CT_MAX_RANKS_PER_GPU);
        else {
            d->gpu_shared = 1;
            if (d->rank == first) /* one warning per shared GPU */
                fprintf(stderr,
                        "ctrain: warning: ranks %s share GPU %s on %.*s (%s) because %s=1: NCCL's experimental "
                        "multi-rank GPU mode (NCCL >= 2.30, NVLS off); for tests, not for speed\n",
                        ranks, gpu_id, host_len, other_host, desc, CT_MULTI_RANK_GPU_VAR);
        }
    }
    free(all);
    return rc;
}
