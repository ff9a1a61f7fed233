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
        /* None of the record stack's model keys is here any more: the CUDA backend implements
         * rope_dims, rope_train_seq_len, ln_scale, xsa_last_n, smear_gate and bigram_vocab_size /
         * bigram_dim (tests/unit/test_gpu_step.c's record_keys cases), and ortho_init is the host's
         * initialisation for both backends. A key the CUDA backend does not implement gets a line
         * {"key", set} here. */
        {NULL, 0}, /* the end */
    };
    for (size_t i = 0; keys[i].key; i++) {
        if (!keys[i].set) continue;
        const ConfigKey *k = config_find_key(keys[i].key);
        char text[64];
        return ct_fail("device = cuda: %s = %s is not implemented on device=cuda yet (issue 36: the record stack "
                       "runs on the CPU backend first); use device=cpu, or leave %s at its default",
                       keys[i].key, k ? config_value_text(cfg, k, text, sizeof text) : "?", keys[i].key);
    }
    return 0;
}
