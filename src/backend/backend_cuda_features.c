/* backend_cuda_features.c — the configuration keys the CUDA backend does not implement yet (the
 * record stack of issue 36 is on the CPU backend first): a run that sets one is refused at
 * creation, naming the key, instead of training a different model than configured. Compiled in
 * every build (with and without CUDA) so the refusal reads the same everywhere. */
#include "backend_cuda.h"

#include "common.h"

int backend_cuda_check_features(const Config *cfg) {
    const struct {
        const char *key;
        int set;
    } keys[] = {
        /* ortho_init is not here: weights are initialised on the host for both backends */
        {"rope_dims", cfg->rope_dims != 0 && cfg->rope_dims != config_head_dim(cfg)},
        {"rope_train_seq_len", cfg->rope_train_seq_len != 0 && cfg->rope_train_seq_len < cfg->train_seq_len},
        {"ln_scale", cfg->ln_scale != 0},
        {"xsa_last_n", cfg->xsa_last_n != 0},
        {"smear_gate", cfg->smear_gate != 0},
        {"bigram_vocab_size", cfg->bigram_vocab_size != 0},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!keys[i].set) continue;
        const ConfigKey *k = config_find_key(keys[i].key);
        char text[64];
        return ct_fail("device = cuda: %s = %s is not implemented on device=cuda yet (issue 36: the record stack "
                       "runs on the CPU backend first); use device=cpu, or leave %s at its default",
                       keys[i].key, k ? config_value_text(cfg, k, text, sizeof text) : "?", keys[i].key);
    }
    return 0;
}
