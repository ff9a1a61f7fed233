/* backend.c — backend selection (the one place that knows every backend) and the optimizer
 * hyperparameters of a step. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "common.h"
#include "ns5.h"
#include "schedule.h"

void backend_resolve_device(Config *cfg, char *note, size_t cap) {
    note[0] = '\0';
    if (strcmp(cfg->device, "auto") != 0) return;
    char why[320];
    const char *device = backend_cuda_visible(why, sizeof why) > 0 ? "cuda" : "cpu";
    free(cfg->device);
    cfg->device = ct_strdup(device);
    snprintf(note, cap, "device: auto -> %s (%s)", device, why);
}

int backend_choose_gpu(const Config *cfg, BackendGpu *gpu) {
    memset(gpu, 0, sizeof *gpu);
    gpu->index = -1;
    if (!strcmp(cfg->device, "cuda")) return backend_cuda_choose_gpu(gpu);
    return ct_fail("device = %s: no GPU to choose", cfg->device);
}

int backend_create(Backend **out, const Config *cfg, TrainState *st) {
    if (!strcmp(cfg->device, "cpu")) return backend_cpu_create(out, cfg, st);
    if (!strcmp(cfg->device, "cuda")) {
        /* before any device is touched: the refusals need no GPU */
        return backend_cuda_create(out, cfg, st);
    }
    if (!strcmp(cfg->device, "auto"))
        return ct_fail("device = auto: not resolved before the backend was created (backend_resolve_device)");
    return ct_fail("device = '%s': expected auto, cpu or cuda", cfg->device);
}

StepHyper step_hyper_from_config(const Config *cfg, int64_t step, double lr_scale) {
    StepHyper h = {
        .token_lr = (cfg->tie_embeddings ? cfg->tied_embed_lr : cfg->embed_lr) * lr_scale,
        .head_lr = cfg->head_lr * lr_scale,
        .matrix_lr = cfg->matrix_lr * lr_scale,
        .scalar_lr = cfg->scalar_lr * lr_scale,
        .muon_momentum = muon_momentum_at(step, cfg->muon_momentum_warmup_start, cfg->muon_momentum,
                                          cfg->muon_momentum_warmup_steps),
        .muon_steps = (int)cfg->muon_backend_steps,
        .muon_flags = (cfg->muon_polar_express ? CT_MUON_POLAR_EXPRESS : 0) |
                      (cfg->muon_row_normalize ? CT_MUON_ROW_NORMALIZE : 0),
        .beta1 = cfg->beta1,
        .beta2 = cfg->beta2,
        .adam_eps = cfg->adam_eps,
        .grad_clip_norm = cfg->grad_clip_norm,
        .muon_wd = cfg->muon_wd,
        .adam_wd = cfg->adam_wd,
        .embed_wd = cfg->embed_wd >= 0 ? cfg->embed_wd : cfg->adam_wd,
        .ema_decay = cfg->ema_enabled ? cfg->ema_decay : 0.0,
        .swa_add = train_state_has_swa(cfg) && lr_scale < 0.5 && (step + 1) % cfg->swa_every == 0,
        .shard_rank = 0,
        .shard_world = 1,
        .combine = NULL,
        .combine_ctx = NULL,
    };
    return h;
}
