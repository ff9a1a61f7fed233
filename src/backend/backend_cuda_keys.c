/* backend_cuda_keys.c — the configuration keys the CUDA backend does not implement yet (the
 * record stack's optimizer additions, issue 36, run on the CPU backend first), refused by name
 * before a device=cuda run trains rather than ignored: a run that silently trained without them
 * would not be the run that was asked for. Evaluating or sampling such a run's checkpoint on the
 * GPU is fine: these keys change only training. (The record's model keys are implemented: the
 * CUDA step runs them.) Built with and without CUDA, so the refusal is the same (and testable)
 * everywhere. */
#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "common.h"

int backend_cuda_check_training_keys(const Config *cfg) {
    /* each key with the value that means "off" (its default); another value is refused */
    static const char *const keys[] = {"muon_wd", "adam_wd", "ema_enabled", "swa_enabled", "qat_enabled", "late_qat"};
    Config off;
    config_init(&off);
    int rc = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && rc == 0; i++) {
        const ConfigKey *k = config_find_key(keys[i]);
        if (!k || config_value_equal(cfg, &off, k)) continue;
        char value[64];
        rc = ct_fail("%s=%s is not implemented on device=cuda yet (issue 36); use device=cpu", k->name,
                     config_value_text(cfg, k, value, sizeof value));
    }
    config_free(&off);
    return rc;
}
