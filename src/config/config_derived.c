/* config_derived.c — values that follow from the configuration's keys (config.h): the head width,
 * the block plan's settings, a rank's tokens per micro-step, the sequence lengths of training,
 * packing, evaluation and test-time training. Leaf functions, apart from the validation
 * (config.c, config_frontier.c, config_ttt.c) that uses them. */
#include "config.h"

int64_t config_head_dim(const Config *cfg) { return cfg->model_dim / cfg->num_heads; }

BlockPlanSettings config_block_plan_settings(const Config *c) {
    BlockPlanSettings s = {(int)c->num_layers, (int)c->num_loops, (int)c->loop_start, (int)c->loop_end,
                           (int)c->parallel_start_layer};
    return s;
}

int64_t config_local_tokens(const Config *cfg) { return cfg->train_batch_tokens / cfg->grad_accum_slots; }

int64_t config_seq_len(const Config *cfg) { return cfg->doc_packing ? config_local_tokens(cfg) : cfg->train_seq_len; }

int64_t config_max_doc_len(const Config *cfg) { return cfg->max_doc_len > 0 ? cfg->max_doc_len : cfg->train_seq_len; }

int64_t config_eval_seq_len(const Config *cfg) { return cfg->eval_seq_len > 0 ? cfg->eval_seq_len : cfg->train_seq_len; }

int64_t config_step_stream_tokens(const Config *cfg) { return cfg->grad_accum_slots * (config_local_tokens(cfg) + 1); }

int64_t config_ttt_eval_seq_len(const Config *cfg) {
    return cfg->ttt_eval_seq_len > 0 ? cfg->ttt_eval_seq_len : config_eval_seq_len(cfg);
}
