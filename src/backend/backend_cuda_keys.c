/* backend_cuda_keys.c — the configuration keys the CUDA backend does not implement yet (the
 * record stack of issue 36 runs on the CPU backend first), refused by name rather than ignored:
 * a run that silently trained without them would not be the run that was asked for. Two lists:
 * the model's keys, which change every forward pass (refused when the backend is created, for
 * training, evaluation and sampling alike), and the training-only keys (refused before a
 * device=cuda run trains; evaluating or sampling such a run's checkpoint on the GPU is fine).
 * Built with and without CUDA, so the refusal is the same (and testable) everywhere. */
#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "common.h"

static int refuse(const Config *cfg, const char *key) {
    const ConfigKey *k = config_find_key(key);
    char value[64];
    return ct_fail("%s=%s is not implemented on device=cuda yet (issue 36); use device=cpu, or leave "
                   "%s at its default",
                   key, k ? config_value_text(cfg, k, value, sizeof value) : "?", key);
}

/* The first of keys[] whose value in cfg is not its default, or NULL. */
static const char *first_set(const Config *cfg, const char *const *keys, size_t n) {
    Config off;
    config_init(&off);
    const char *found = NULL;
    for (size_t i = 0; i < n && !found; i++) {
        const ConfigKey *k = config_find_key(keys[i]);
        if (k && !config_value_equal(cfg, &off, k)) found = keys[i];
    }
    config_free(&off);
    return found;
}

int backend_cuda_check_features(const Config *cfg) {
    /* rope_dims = head_dim and a rope_train_seq_len the sequences never exceed change nothing */
    if (cfg->rope_dims != 0 && cfg->rope_dims != config_head_dim(cfg)) return refuse(cfg, "rope_dims");
    if (cfg->rope_train_seq_len != 0 && cfg->rope_train_seq_len < cfg->train_seq_len)
        return refuse(cfg, "rope_train_seq_len");
    /* ortho_init is not here: the weights are initialised on the host for both backends */
    static const char *const keys[] = {"ln_scale", "xsa_last_n", "smear_gate", "bigram_vocab_size"};
    const char *key = first_set(cfg, keys, sizeof keys / sizeof keys[0]);
    return key ? refuse(cfg, key) : 0;
}

int backend_cuda_check_training_keys(const Config *cfg) {
    /* a training run is refused before it reads any data, for either list */
    if (backend_cuda_check_features(cfg) != 0) return -1;
    static const char *const keys[] = {"muon_wd", "adam_wd", "ema_enabled", "swa_enabled", "qat_enabled", "late_qat"};
    const char *key = first_set(cfg, keys, sizeof keys / sizeof keys[0]);
    return key ? refuse(cfg, key) : 0;
}
