/* backend_common.c — helpers every backend shares (backend_common.h). */
#include <math.h>

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

int backend_check_loss(double mean_loss) {
    if (isfinite(mean_loss)) return 0;
    return ct_fail("the training loss is %s: training diverged (lower the learning rates or enable "
                   "grad_clip_norm); no checkpoint is written from this state",
                   ct_nonfinite_name(mean_loss));
}

double backend_adam_lr(ParamGroup group, const StepHyper *h) {
    return group == PARAM_TOKEN_EMBED ? h->token_lr : group == PARAM_HEAD ? h->head_lr : h->scalar_lr;
}
