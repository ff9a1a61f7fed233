/* ckpt_stage.c — the named stages of a checkpoint save (ckpt_internal.h) at which a test can
 * simulate a crash. Its own file because both the file writer (ckpt_write.c) and the directory
 * updates (ckpt_dir.c) report stages, and neither should depend on the other for it. */
#include "ckpt_internal.h"

void (*ckpt_test_stage_hook)(const char *stage);

void ckpt_stage(const char *stage) {
    if (ckpt_test_stage_hook) ckpt_test_stage_hook(stage);
}
