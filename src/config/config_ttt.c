/* config_ttt.c — validation of test-time training's keys (issue 57; docs/model.md, "Test-time
 * training"): config_validate calls it; a file of its own keeps config.c from growing. A bad
 * value is refused at once, whether or not ttt_enabled is set, so it does not wait for the end of
 * a run; only the checks against other groups' keys (model_dim, the evaluation's sequence
 * length) wait for ttt_enabled, since the TTT defaults (rank 96, chunks of 32,768 tokens) need
 * not fit a small model that never adapts. */
#include "config.h"

#include <string.h>

#include "common.h"

#define REQUIRE(cond, ...)                        \
    do {                                          \
        if (!(cond)) return ct_fail(__VA_ARGS__); \
    } while (0)

int config_validate_ttt(const Config *c) {
    const int on = c->ttt_enabled != 0;
    /* (upper bounds keep the counts inside the int the backends and the plan index with) */
    REQUIRE(c->ttt_lora_rank >= 1 && c->ttt_lora_rank <= (1LL << 20), "ttt_lora_rank = %lld: expected in [1, %s]",
            (long long)c->ttt_lora_rank, on ? "model_dim" : "2^20");
    REQUIRE(!on || c->ttt_lora_rank <= c->model_dim,
            "ttt_lora_rank = %lld with ttt_enabled = 1: expected in [1, model_dim = %lld] (an adapter's rank above "
            "its input width adds nothing)",
            (long long)c->ttt_lora_rank, (long long)c->model_dim);
    REQUIRE(c->ttt_lora_alpha >= 0, "ttt_lora_alpha = %g: expected >= 0 (the adapters' scale is alpha / rank)",
            c->ttt_lora_alpha);
    REQUIRE(c->ttt_lora_lr >= 0, "ttt_lora_lr = %g: expected >= 0", c->ttt_lora_lr);
    REQUIRE(c->ttt_eval_seq_len >= 0 && c->ttt_eval_seq_len <= (1LL << 24),
            "ttt_eval_seq_len = %lld: expected 0 (eval_seq_len) or a window length in [1, 2^24]",
            (long long)c->ttt_eval_seq_len);
    REQUIRE(c->ttt_chunk_size >= 1 && c->ttt_chunk_size <= (1LL << 24),
            "ttt_chunk_size = %lld: expected in [1, the TTT window ttt_eval_seq_len]", (long long)c->ttt_chunk_size);
    /* E = 0 takes eval_seq_len or train_seq_len: another group's key, so only when TTT runs */
    if (c->ttt_eval_seq_len > 0 || on) {
        const int64_t window = config_ttt_eval_seq_len(c);
        REQUIRE(c->ttt_chunk_size <= window,
                "ttt_chunk_size = %lld: expected at most the TTT window, %s = %lld (a chunk's predictions must "
                "fit one forward window)",
                (long long)c->ttt_chunk_size,
                c->ttt_eval_seq_len > 0 ? "ttt_eval_seq_len"
                : c->eval_seq_len > 0   ? "eval_seq_len (ttt_eval_seq_len = 0)"
                                        : "train_seq_len (ttt_eval_seq_len = eval_seq_len = 0)",
                (long long)window);
    }
    REQUIRE(c->ttt_batch_size >= 1 && c->ttt_batch_size <= (1LL << 20), "ttt_batch_size = %lld: expected in [1, 2^20]",
            (long long)c->ttt_batch_size);
    REQUIRE(c->ttt_grad_steps >= 0 && c->ttt_grad_steps <= 1000000,
            "ttt_grad_steps = %lld: expected in [0, 10^6] (0 = score only)", (long long)c->ttt_grad_steps);
    REQUIRE(c->ttt_weight_decay >= 0, "ttt_weight_decay = %g: expected >= 0", c->ttt_weight_decay);
    REQUIRE(c->ttt_beta1 >= 0 && c->ttt_beta1 < 1, "ttt_beta1 = %g: expected in [0, 1)", c->ttt_beta1);
    REQUIRE(c->ttt_beta2 >= 0 && c->ttt_beta2 < 1, "ttt_beta2 = %g: expected in [0, 1)", c->ttt_beta2);
    REQUIRE(!strcmp(c->ttt_optimizer, "adam") || !strcmp(c->ttt_optimizer, "sgd"),
            "ttt_optimizer = '%s': expected adam or sgd", c->ttt_optimizer);
    REQUIRE(c->phased_ttt_prefix_docs >= 0, "phased_ttt_prefix_docs = %lld: expected >= 0 (0 = no global step)",
            (long long)c->phased_ttt_prefix_docs);
    REQUIRE(c->phased_ttt_num_phases >= 1 && c->phased_ttt_num_phases <= (1LL << 20),
            "phased_ttt_num_phases = %lld: expected in [1, 2^20]", (long long)c->phased_ttt_num_phases);
    REQUIRE(c->phased_ttt_prefix_docs == 0 || c->phased_ttt_num_phases <= c->phased_ttt_prefix_docs,
            "phased_ttt_num_phases = %lld: more phases than prefix documents (phased_ttt_prefix_docs = %lld); "
            "expected at most one phase per document",
            (long long)c->phased_ttt_num_phases, (long long)c->phased_ttt_prefix_docs);
    const struct { const char *name; double v; const char *zero; } nonneg[] = {
        {"global_ttt_lr", c->global_ttt_lr, ""},
        {"global_ttt_momentum", c->global_ttt_momentum, " (0 = plain SGD)"},
        {"global_ttt_warmup_start_lr", c->global_ttt_warmup_start_lr, ""},
        {"global_ttt_grad_clip", c->global_ttt_grad_clip, " (0 = off)"},
        {"ttt_time_budget", c->ttt_time_budget, " seconds (0 = no limit)"},
    };
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        REQUIRE(nonneg[i].v >= 0, "%s = %g: expected >= 0%s", nonneg[i].name, nonneg[i].v, nonneg[i].zero);
    REQUIRE(c->global_ttt_epochs >= 0 && c->global_ttt_epochs <= 1000000,
            "global_ttt_epochs = %lld: expected in [0, 10^6] (0 = no update)", (long long)c->global_ttt_epochs);
    REQUIRE(c->global_ttt_batch_seqs >= 1 && c->global_ttt_batch_seqs <= (1LL << 24),
            "global_ttt_batch_seqs = %lld: expected in [1, 2^24]", (long long)c->global_ttt_batch_seqs);
    REQUIRE(c->global_ttt_warmup_chunks >= 0, "global_ttt_warmup_chunks = %lld: expected >= 0 (0 = no warmup)",
            (long long)c->global_ttt_warmup_chunks);
    REQUIRE(c->global_ttt_chunk_tokens >= 1, "global_ttt_chunk_tokens = %lld: expected >= 1",
            (long long)c->global_ttt_chunk_tokens);
    /* each chunk's rows are sequences of the evaluation's length: a shorter chunk would hold none */
    REQUIRE(!on || c->global_ttt_chunk_tokens >= config_eval_seq_len(c),
            "global_ttt_chunk_tokens = %lld with ttt_enabled = 1: expected at least the evaluation's sequence "
            "length, %s = %lld (each chunk must hold one row)",
            (long long)c->global_ttt_chunk_tokens, c->eval_seq_len > 0 ? "eval_seq_len" : "train_seq_len",
            (long long)config_eval_seq_len(c));
    return 0;
}
