/* train_data.c — the data a training run reads: the train and validation sets its
 * configuration names, checked against the configuration before any work starts. */
#include <string.h>

#include "common.h"
#include "config.h"
#include "data.h"
#include "train.h"

int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (data_open_set(cfg->train_files, train) != 0) return ct_fail_prefix("train_files");
    if (train->vocab_size != cfg->vocab_size) {
        ct_fail("train_files: the data's vocab_size is %lld (%s) but the configuration says vocab_size = %lld",
                (long long)train->vocab_size, train->files[0].path, (long long)cfg->vocab_size);
        data_free_set(train);
        return -1;
    }
    int64_t step_tokens = cfg->grad_accum_slots * (config_local_tokens(cfg) + 1);
    if (train->total_tokens < step_tokens) {
        ct_fail("train_files '%s' hold %lld tokens, fewer than one optimizer step needs "
                "(grad_accum_slots * (train_batch_tokens / grad_accum_slots + 1) = %lld)",
                cfg->train_files, (long long)train->total_tokens, (long long)step_tokens);
        data_free_set(train);
        return -1;
    }
    if (cfg->val_files[0]) {
        if (data_open_set(cfg->val_files, val) != 0) {
            data_free_set(train);
            return ct_fail_prefix("val_files");
        }
        if (val->vocab_size != cfg->vocab_size) {
            ct_fail("val_files: the data's vocab_size is %lld (%s) but the configuration says vocab_size = %lld",
                    (long long)val->vocab_size, val->files[0].path, (long long)cfg->vocab_size);
            data_free_set(train);
            data_free_set(val);
            return -1;
        }
        if (val->total_tokens < cfg->train_seq_len + 1) {
            ct_fail("val_files '%s' hold %lld tokens, fewer than one sequence of train_seq_len + 1 = %lld",
                    cfg->val_files, (long long)val->total_tokens, (long long)cfg->train_seq_len + 1);
            data_free_set(train);
            data_free_set(val);
            return -1;
        }
    }
    return 0;
}
