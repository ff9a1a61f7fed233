/* test_device_choice.c — which CUDA device a rank takes (backend_pick_gpu in
 * src/backend/backend_common.c): one GPU per task as Slurm binds them, all GPUs shown to every
 * task, CT_CUDA_DEVICE, and the layouts that must fail with a message instead of putting two
 * ranks on one GPU unless NCCL_MULTI_RANK_GPU_ENABLE=1 lets them share (ct_ranks_may_share_gpu).
 * Plain C: runs without a GPU. */
#include <stdlib.h>

#include "backend.h"
#include "backend_common.h"
#include "config.h"
#include "common.h"
#include "harness.h"

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

static void one_gpu_per_task(void) {
    int d = -7;
    /* --gpus-per-task=1 / --gpu-bind=single:1: every rank sees its own single GPU as device 0 */
    for (int r = 0; r < 8; r++) {
        CHECK(backend_pick_gpu(1, -1, r, 8, 0, "n1", "3", &d) == 0 && d == 0, "local rank %d: %d (%s)", r, d, ct_error());
    }
    /* one process, no launcher */
    CHECK(backend_pick_gpu(4, -1, -1, 0, 0, "n1", NULL, &d) == 0 && d == 0, "single process: %d", d);
}

static void all_gpus_visible(void) {
    int d = -7;
    /* --gpu-bind=none: 8 tasks see the node's 8 GPUs; each takes its local rank's */
    for (int r = 0; r < 8; r++)
        CHECK(backend_pick_gpu(8, -1, r, 8, 0, "n1", NULL, &d) == 0 && d == r, "local rank %d got %d", r, d);
    /* local size unknown (no --ntasks-per-node): the local rank's, if it exists */
    CHECK(backend_pick_gpu(4, -1, 3, 0, 0, "n1", NULL, &d) == 0 && d == 3, "rank 3 of unknown: %d", d);
    /* fewer tasks than GPUs is fine */
    CHECK(backend_pick_gpu(8, -1, 1, 2, 0, "n1", NULL, &d) == 0 && d == 1, "2 tasks on 8 GPUs: %d", d);
}

static void explicit_device(void) {
    int d = -7;
    CHECK(backend_pick_gpu(4, 2, 0, 4, 0, "n1", NULL, &d) == 0 && d == 2, "CT_CUDA_DEVICE=2: %d", d);
    CHECK(backend_pick_gpu(2, 5, 0, 1, 0, "gpu7", "0,1", &d) != 0 && error_has("CT_CUDA_DEVICE=5") &&
              error_has("gpu7 sees only 2 CUDA device(s) (CUDA_VISIBLE_DEVICES=0,1)"),
          "%s", ct_error());
}

static void layouts_that_fail(void) {
    int d = -7;
    /* no GPU at all */
    CHECK(backend_pick_gpu(0, -1, 3, 8, 0, "n2", "", &d) != 0 && error_has("n2 (local rank 3) sees no CUDA device") &&
              d == -1,
          "%s", ct_error());
    /* 8 tasks on a node whose tasks each see 4 GPUs: ranks would share; never wrap around */
    CHECK(backend_pick_gpu(4, -1, 1, 8, 0, "n3", NULL, &d) != 0 && error_has("n3 runs 8 task(s) but each sees 4 CUDA devices") &&
              error_has("srun --gpus-per-task=1") && error_has("at most 4 tasks"),
          "fewer GPUs than tasks: %s", ct_error());
    /* local size unknown but the local rank has no GPU of its own */
    CHECK(backend_pick_gpu(4, -1, 5, 0, 0, "n3", NULL, &d) != 0 && error_has("local rank 5 has none of its own"),
          "%s", ct_error());
}

/* NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30) lets ranks share GPUs round-robin, at most 2 per GPU;
 * without it the same layouts fail and the message names the variable. */
static void sharing_only_when_enabled(void) {
    int d = -7;
    CHECK(backend_pick_gpu(2, -1, 3, 4, 0, "n4", NULL, &d) != 0 && error_has("local rank 3 has none of its own") &&
              error_has("NCCL_MULTI_RANK_GPU_ENABLE=1") && d == -1,
          "not enabled: %s", ct_error());
    for (int r = 0; r < 4; r++)
        CHECK(backend_pick_gpu(2, -1, r, 4, 1, "n4", NULL, &d) == 0 && d == r % 2, "shared, local rank %d got %d (%s)",
              r, d, ct_error());
    /* local size unknown: the local rank alone says how many there are at least */
    CHECK(backend_pick_gpu(2, -1, 3, 0, 1, "n4", NULL, &d) == 0 && d == 1, "shared, size unknown: %d", d);
    /* three ranks on one GPU: refused even when enabled */
    CHECK(backend_pick_gpu(2, -1, 1, 5, 1, "n4", "0,1", &d) != 0 && error_has("3 ranks per GPU") &&
              error_has("at most 2") && d == -1,
          "5 tasks on 2 GPUs: %s", ct_error());
    CHECK(backend_pick_gpu(2, -1, 4, 0, 1, "n4", NULL, &d) != 0 && error_has("3 ranks per GPU"), "%s", ct_error());
    /* ranks that fit need no sharing and are unchanged by it */
    CHECK(backend_pick_gpu(8, -1, 5, 8, 1, "n4", NULL, &d) == 0 && d == 5, "8 on 8, enabled: %d", d);
    /* the variable as NCCL reads it: a non-zero number */
    const struct { const char *value; int enabled; } env[] = {{"1", 1}, {"2", 1}, {"0", 0}, {"", 0}, {"yes", 0}};
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++) {
        setenv("NCCL_MULTI_RANK_GPU_ENABLE", env[i].value, 1);
        CHECK(ct_ranks_may_share_gpu() == env[i].enabled, "NCCL_MULTI_RANK_GPU_ENABLE='%s'", env[i].value);
    }
    unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
    CHECK(!ct_ranks_may_share_gpu(), "unset");
}

/* device=auto with no device visible (CUDA_VISIBLE_DEVICES empty, set before CUDA starts in this
 * process) resolves to cpu and says why; explicit devices are left alone. (auto -> cuda on a
 * GPU: test_gpu_step.) */
static void device_auto_without_gpu(void) {
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    Config cfg;
    config_init(&cfg);
    CHECK(!strcmp(cfg.device, "auto"), "default device %s", cfg.device);
    char note[400];
    backend_resolve_device(&cfg, note, sizeof note);
    CHECK(!strcmp(cfg.device, "cpu"), "auto resolved to %s", cfg.device);
    CHECK(strstr(note, "device: auto -> cpu (") == note, "note: %s", note);
    CHECK(config_set(&cfg, "device", "cuda", CT_SOURCE_COMMAND_LINE, "test") == 0, "%s", ct_error());
    backend_resolve_device(&cfg, note, sizeof note);
    CHECK(!strcmp(cfg.device, "cuda") && note[0] == '\0', "explicit cuda changed: %s / %s", cfg.device, note);
    config_free(&cfg);
}

int main(void) {
    RUN(device_auto_without_gpu);
    RUN(one_gpu_per_task);
    RUN(all_gpus_visible);
    RUN(explicit_device);
    RUN(layouts_that_fail);
    RUN(sharing_only_when_enabled);
    TEST_EXIT();
}
