/* eval.c — validation as train_gpt.py's eval_val: the split read once, sequences shared out to
 * ranks, mean token loss and bits per byte from the tokenizer tables; and the same for a set of
 * weights on its own (evaluate_weights, for `ckpt golf`'s round trip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "infer.h"
#include "loader.h"
#include "tokenizer.h"

int val_load(const Config *cfg, const TokenSet *set, ValData *v) {
    memset(v, 0, sizeof *v);
    int64_t T = cfg->train_seq_len;
    v->num_seqs = (set->total_tokens - 1) / T;
    int64_t n = v->num_seqs * T + 1;
    v->tokens = ct_malloc((size_t)n * sizeof(uint32_t), "validation tokens");
    TokenReader *reader;
    if (token_reader_open(&reader, set) != 0) return -1;
    int rc = loader_read_stream(reader, set, loader_cursor_start(), n, v->tokens);
    token_reader_close(reader);
    if (rc != 0) return -1;
    /* Checked now, not when validation first runs (perhaps only after the last step, which
     * would then end without its final checkpoint). The stream is the files in order. */
    for (int64_t i = 0, file_start = 0, f = 0; i < n; i++) {
        if (v->tokens[i] < (uint64_t)set->vocab_size) continue;
        while (f + 1 < set->num_files && i >= file_start + set->files[f].num_tokens) file_start += set->files[f++].num_tokens;
        return ct_fail("val_files: '%s': token %lld of /tokens is %u, which is >= vocab_size %lld", set->files[f].path,
                       (long long)(i - file_start), v->tokens[i], (long long)set->vocab_size);
    }
    if (set->has_luts && data_read_luts(set, &v->base_bytes, &v->has_leading_space, &v->is_boundary_token) != 0)
        return -1;
    return 0;
}

void val_free(ValData *v) {
    free(v->tokens);
    free(v->base_bytes);
    free(v->has_leading_space);
    free(v->is_boundary_token);
    memset(v, 0, sizeof *v);
}

int val_evaluate(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, double *val_loss, double *val_bpb) {
    int rank = d->rank, world = d->world_size;
    int64_t first = v->num_seqs * rank / world, end = v->num_seqs * (rank + 1) / world;
    double loss_sum = 0, tokens = 0, bytes = 0;
    int batch = b->micro_batch_seqs;
    for (int64_t s = first; s < end; s += batch) {
        int n = (int)(end - s < batch ? end - s : batch);
        const uint32_t *tok = v->tokens + s * seq_len;
        double sum;
        if (b->evaluate(b, tok, n, &sum) != 0) return ct_fail_prefix("validation");
        loss_sum += sum;
        tokens += (double)n * seq_len;
        if (v->base_bytes) {
            for (int64_t i = 0; i < n * seq_len; i++) {
                uint32_t prev = tok[i], tgt = tok[i + 1];
                bytes += v->base_bytes[tgt] + (v->has_leading_space[tgt] && !v->is_boundary_token[prev] ? 1 : 0);
            }
        }
    }
    /* every rank's sums, added in rank order (deterministic) */
    double sums[3] = {loss_sum, tokens, bytes};
    if (dist_allreduce_sum_f64(d, sums, 3) != 0) return ct_fail_prefix("validation");
    *val_loss = sums[0] / sums[1];
    *val_bpb = v->base_bytes && sums[2] > 0 ? (*val_loss / log(2.0)) * (sums[1] / sums[2]) : NAN;
    return 0;
}

int evaluate_weights(const Config *cfg, TrainState *st, double *val_loss, double *val_bpb) {
    if (!cfg->val_files[0]) return ct_fail("val_files is empty: there is no validation data to evaluate on");
    TokenSet set;
    if (data_open_set(cfg->val_files, &set) != 0) return ct_fail_prefix("val_files");
    int rc = 0;
    if (set.vocab_size != cfg->vocab_size)
        rc = ct_fail("val_files: the data's vocab_size is %lld (%s) but the model's is %lld", (long long)set.vocab_size,
                     set.files[0].path, (long long)cfg->vocab_size);
    else if (set.total_tokens < cfg->train_seq_len + 1)
        rc = ct_fail("val_files '%s' hold %lld tokens, fewer than one sequence of train_seq_len + 1 = %lld",
                     cfg->val_files, (long long)set.total_tokens, (long long)cfg->train_seq_len + 1);
    ValData v;
    memset(&v, 0, sizeof v);
    Backend *b = NULL;
    DistInfo single;
    memset(&single, 0, sizeof single);
    single.world_size = 1;
    if (rc == 0) rc = val_load(cfg, &set, &v);
    if (rc == 0) rc = backend_create(&b, cfg, st);
    if (rc == 0) rc = val_evaluate(b, &v, &single, cfg->train_seq_len, val_loss, val_bpb);
    if (b) b->destroy(b);
    val_free(&v);
    data_free_set(&set);
    return rc;
}
