/* backend_common.c — helpers every backend shares (backend_common.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_common.h"
#include "common.h"

void *backend_arena_take(BackendArena *a, size_t bytes, size_t *tally) {
    const size_t size = ((bytes ? bytes : 1) + 255) & ~(size_t)255;
    void *p = a->base ? a->base + a->used : NULL;
    a->used += size;
    if (tally) *tally += size;
    return p;
}

int backend_check_tokens(const uint32_t *tokens, size_t count, int64_t vocab) {
    const uint32_t V = (uint32_t)vocab;
    for (size_t i = 0; i < count; i++)
        if (tokens[i] >= V)
            return ct_fail("token id %u at position %zu of the micro-batch is >= vocab_size %u", tokens[i], i, V);
    return 0;
}

int backend_check_ttt_chunk(const TttChunk *c, int slots, int capacity, int64_t vocab) {
    if (slots < 1) return ct_fail("a chunk before ttt_open");
    if (c->rows < 1 || c->slot0 < 0 || c->slot0 + c->rows > slots)
        return ct_fail("rows [%d, %d) outside the %d slots", c->slot0, c->slot0 + c->rows, slots);
    if (c->ctx < 1 || c->ctx > capacity)
        return ct_fail("a window of %d tokens, the backend holds %d", c->ctx, capacity);
    for (int i = 0; i < c->rows; i++)
        if (c->from[i] < 0 || c->len[i] < 0 || c->from[i] + c->len[i] > c->ctx)
            return ct_fail("row %d scores [%d, %d) of a %d-token window", i, c->from[i],
                           c->from[i] + c->len[i], c->ctx);
    const size_t n = (size_t)c->rows * c->ctx;
    return backend_check_tokens(c->inputs, n, vocab) != 0 || backend_check_tokens(c->targets, n, vocab) != 0 ? -1 : 0;
}

int backend_ttt_base_grads(int *on) {
    const char *v = getenv("CT_TTT_BASE_GRADS");
    *on = 0;
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) {
        *on = 1;
        return 0;
    }
    return ct_fail("CT_TTT_BASE_GRADS = '%s': expected 0 (the default: a test-time-training chunk's backward makes "
                   "no base weight gradient) or 1 (it makes the blocks' weight gradients too, into a scratch "
                   "buffer: the earlier path, for timing)",
                   v);
}

int backend_check_loss(double mean_loss) {
    if (isfinite(mean_loss)) return 0;
    return ct_fail("the training loss is %s: training diverged (lower the learning rates or enable "
                   "grad_clip_norm); no checkpoint is written from this state",
                   ct_nonfinite_name(mean_loss));
}

double backend_adam_lr(ParamGroup group, const StepHyper *h) {
    return group == PARAM_TOKEN_EMBED ? h->token_lr : group == PARAM_HEAD ? h->head_lr : h->scalar_lr;
}

int backend_weight_decay_factor(ParamGroup group, const StepHyper *h, double *factor) {
    double lr, wd;
    switch (group) {
    case PARAM_MATRIX: lr = h->matrix_lr, wd = h->muon_wd; break;
    case PARAM_TOKEN_EMBED: lr = backend_adam_lr(group, h), wd = h->embed_wd; break;
    case PARAM_SCALAR: lr = backend_adam_lr(group, h), wd = h->adam_wd; break;
    default: return 0; /* PARAM_HEAD: torch.optim.Adam in the record, no decay */
    }
    if (wd == 0) return 0;
    *factor = 1.0 - lr * wd;
    return 1;
}

int backend_mtp_active(const ModelSpec *s, double mtp_loss_weight) {
    return s->mtp_heads > 0 && mtp_loss_weight > 0;
}

float backend_mtp_call_weight(float loss_weight, double mtp_loss_weight, int heads, int num_seqs) {
    return (float)((double)loss_weight * mtp_loss_weight / ((double)heads * (double)num_seqs));
}

double backend_mtp_loss(double main_mean, const double *head_means, int heads, double mtp_loss_weight) {
    double sum = 0;
    for (int k = 0; k < heads; k++) sum += head_means[k];
    return main_mean + mtp_loss_weight * (sum / heads);
}

int backend_qat_quantizes(const ParamInfo *p) {
    return (p->group == PARAM_MATRIX || p->group == PARAM_HEAD) && p->ndim == 2;
}

int backend_pick_gpu(int visible, int explicit_device, int local_rank, int local_size, int may_share,
                     const char *host, const char *cuda_visible_devices, int *device) {
    const char *cvd = cuda_visible_devices ? cuda_visible_devices : "(unset)";
    *device = -1;
    if (visible <= 0)
        return ct_fail("device = cuda: %s (local rank %d) sees no CUDA device (CUDA_VISIBLE_DEVICES=%s)", host,
                       local_rank, cvd);
    if (explicit_device >= 0) {
        if (explicit_device >= visible)
            return ct_fail("device = cuda: CT_CUDA_DEVICE=%d but %s sees only %d CUDA device(s) (CUDA_VISIBLE_DEVICES=%s)",
                           explicit_device, host, visible, cvd);
        *device = explicit_device;
        return 0;
    }
    if (local_rank < 0 || visible == 1) {
        *device = 0;
        return 0;
    }
    const int tasks = local_size > local_rank ? local_size : local_rank + 1;
    if (tasks <= visible) {
        *device = local_rank;
        return 0;
    }
    if (!may_share)
        return ct_fail("device = cuda: %s runs %d task(s) but each sees %d CUDA devices (CUDA_VISIBLE_DEVICES=%s), so "
                       "local rank %d has none of its own: give each task one GPU (srun --gpus-per-task=1) or start "
                       "at most %d tasks on the node (to let ranks share a GPU for a test: %s=1, NCCL >= 2.30)",
                       host, tasks, visible, cvd, local_rank, visible, CT_MULTI_RANK_GPU_VAR);
    /* ranks share GPUs round-robin; the placement check warns which ones */
    const int per_gpu = (tasks + visible - 1) / visible;
    if (per_gpu > CT_MAX_RANKS_PER_GPU)
        return ct_fail("device = cuda: %s runs %d task(s) on %d CUDA devices (CUDA_VISIBLE_DEVICES=%s): %d ranks per "
                       "GPU, but %s=1 allows at most %d (NCCL's limit in its default configuration)",
                       host, tasks, visible, cvd, per_gpu, CT_MULTI_RANK_GPU_VAR, CT_MAX_RANKS_PER_GPU);
    *device = local_rank % visible;
    return 0;
}
