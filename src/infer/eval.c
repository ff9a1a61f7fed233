/* eval.c — validation as train_gpt.py's eval_val: the split read once, sequences shared out to
 * ranks, mean token loss and bits per byte from the tokenizer tables; the record's sliding-window
 * validation (eval_val_sliding, eval_stride > 0; its windows in eval_sliding.c) with its windows
 * shared out to ranks the same way; and either for a set of weights on its own
 * (print_round_trip_evaluation: `ckpt golf`'s round trip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "infer.h"
#include "loader.h"
#include "stop.h"
#include "tokenizer.h"

int val_load(const Config *cfg, const TokenSet *set, ValData *v) {
    memset(v, 0, sizeof *v);
    int64_t T = config_seq_len(cfg); /* with doc_packing, packed rows of the training row's length */
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
    /* CaseOps data: its tokenizer tables count the transformed text (capital operators as 3-byte
     * characters), so the byte counts win */
    if (set->any_byte_counts) return data_read_byte_counts(set, n, &v->byte_counts) == 0 ? 0 : ct_fail_prefix("val_files");
    if (set->has_luts && data_read_luts(set, &v->base_bytes, &v->has_leading_space, &v->is_boundary_token) != 0)
        return -1;
    return 0;
}

void val_free(ValData *v) {
    free(v->tokens);
    free(v->base_bytes);
    free(v->has_leading_space);
    free(v->is_boundary_token);
    free(v->byte_counts);
    memset(v, 0, sizeof *v);
}

/* A stop request during an evaluation: a single process gives up at the next batch; ranks agree
 * every EVAL_STOP_EVERY batches (one small collective, at the same batch on every rank: within
 * the batches that every rank's share has), so that all of them give up together. */
#define EVAL_STOP_EVERY 4

typedef struct {
    const DistInfo *d;
    int64_t common; /* batches every rank runs */
} StopPoll;

static int eval_stop(void *ctx, int64_t batch) {
    const StopPoll *p = ctx;
    int stop = stop_requested() != 0;
    if (p->d->world_size <= 1) return stop;
    if (batch >= p->common || batch % EVAL_STOP_EVERY != 0) return 0;
    return dist_allreduce_max_i32(p->d, &stop) != 0 ? -1 : stop;
}

/* The poll for items [0, count) shared out to ranks as eval.c does, batch items a batch. */
static StopPoll stop_poll(const DistInfo *d, int64_t count, int batch) {
    StopPoll p = {d, INT64_MAX};
    for (int r = 0; r < d->world_size; r++) {
        const int64_t share = count * (r + 1) / d->world_size - count * r / d->world_size;
        const int64_t batches = (share + batch - 1) / batch;
        if (batches < p.common) p.common = batches;
    }
    return p;
}

int val_evaluate(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, double *val_loss, double *val_bpb) {
    int rank = d->rank, world = d->world_size;
    int64_t first = v->num_seqs * rank / world, end = v->num_seqs * (rank + 1) / world;
    double loss_sum = 0, tokens = 0, bytes = 0;
    int batch = b->micro_batch_seqs;
    StopPoll poll = stop_poll(d, v->num_seqs, batch);
    for (int64_t s = first; s < end; s += batch) {
        int n = (int)(end - s < batch ? end - s : batch);
        const int stop = eval_stop(&poll, (s - first) / batch);
        if (stop < 0) return ct_fail_prefix("validation");
        if (stop) return stop_abandon("the validation");
        const uint32_t *tok = v->tokens + s * seq_len;
        double sum;
        if (b->evaluate(b, tok, n, &sum) != 0) return ct_fail_prefix("validation");
        loss_sum += sum;
        tokens += (double)n * seq_len;
        bytes += val_target_bytes(v, s * seq_len, n * seq_len);
    }
    /* every rank's sums, added in rank order (deterministic) */
    double sums[3] = {loss_sum, tokens, bytes};
    if (dist_allreduce_sum_f64(d, sums, 3) != 0) return ct_fail_prefix("validation");
    *val_loss = sums[0] / sums[1];
    *val_bpb = val_bytes_source(v) && sums[2] > 0 ? (*val_loss / log(2.0)) * (sums[1] / sums[2]) : NAN;
    return 0;
}

int val_evaluate_sliding(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, int64_t stride,
                         double *val_loss, double *val_bpb) {
    /* train_gpt.py's total_tokens: the loaded split (num_seqs * seq_len + 1 tokens) less one */
    const int64_t windows = stride > 0 ? val_sliding_windows(v->num_seqs * seq_len, stride) : 0;
    double sums[3];
    StopPoll stop = stop_poll(d, windows, b->micro_batch_seqs);
    const ValPoll poll = {eval_stop, &stop};
    if (val_sliding_sums_polled(b, v, seq_len, stride, windows * d->rank / d->world_size,
                                windows * (d->rank + 1) / d->world_size, sums, &poll) != 0)
        return -1;
    /* every rank's sums, added in rank order (deterministic) */
    if (dist_allreduce_sum_f64(d, sums, 3) != 0) return ct_fail_prefix("sliding-window validation");
    *val_loss = sums[0] / sums[1];
    *val_bpb = val_bytes_source(v) && sums[2] > 0 ? (*val_loss / log(2.0)) * (sums[1] / sums[2]) : NAN;
    return 0;
}

int val_evaluate_with_stride(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, int64_t stride,
                             double *val_loss, double *val_bpb) {
    if (stride == 0) return val_evaluate(b, v, d, seq_len, val_loss, val_bpb);
    return val_evaluate_sliding(b, v, d, seq_len, stride, val_loss, val_bpb);
}

/* The validation data and a backend over st's weights, in this process alone (for
 * print_round_trip_evaluation), on sequences of T tokens; eval_close frees what eval_open made,
 * also after a failure. */
typedef struct {
    TokenSet set;
    ValData v;
    Backend *b;
    DistInfo single;
    int64_t T;
} WeightsEval;

static int eval_open(const Config *cfg, TrainState *st, WeightsEval *e) {
    memset(e, 0, sizeof *e);
    e->single.world_size = 1;
    e->T = cfg->doc_packing ? config_seq_len(cfg) : cfg->eval_seq_len > 0 ? cfg->eval_seq_len : cfg->train_seq_len;
    if (!cfg->val_files[0]) return ct_fail("val_files is empty: there is no validation data to evaluate on");
    if (data_open_set(cfg->val_files, &e->set) != 0) return ct_fail_prefix("val_files");
    if (e->set.vocab_size != cfg->vocab_size)
        return ct_fail("val_files: the data's vocab_size is %lld (%s) but the model's is %lld",
                       (long long)e->set.vocab_size, e->set.files[0].path, (long long)cfg->vocab_size);
    const char *which = cfg->doc_packing ? "packed row" : cfg->eval_seq_len > 0 ? "eval_seq_len" : "train_seq_len";
    if (e->set.total_tokens < e->T + 1)
        return ct_fail("val_files '%s' hold %lld tokens, fewer than one sequence of %s + 1 = %lld", cfg->val_files,
                       (long long)e->set.total_tokens, which, (long long)e->T + 1);
    /* The backend and the split for sequences of T tokens: the run's configuration with T as its
     * sequence length and micro-batches of as many whole sequences of T as the run's micro-batch
     * holds tokens (one at least). A shallow copy: it shares cfg's strings and is not freed. The
     * RoPE tables follow T, NTK-scaled above rope_train_seq_len (model_rope_base). */
    Config at_t = *cfg;
    if (cfg->doc_packing) { /* the run's packed rows, documents of at most eval_seq_len (else max_doc_len) */
        if (cfg->eval_seq_len > 0) at_t.max_doc_len = cfg->eval_seq_len;
        if (val_load(&at_t, &e->set, &e->v) != 0 || backend_create(&e->b, &at_t, st) != 0) return -1;
        e->b->bos_id = e->set.files[0].bos_id; /* packing's cuts and the SmearGate's mask, as in training */
        return 0;
    }
    const int64_t whole = config_local_tokens(cfg) / e->T, seqs = whole > 0 ? whole : 1;
    at_t.train_seq_len = e->T;
    at_t.train_batch_tokens = seqs * e->T * cfg->grad_accum_slots;
    if (val_load(&at_t, &e->set, &e->v) != 0) return -1;
    if (e->T != cfg->train_seq_len)
        printf("round trip on sequences of eval_seq_len = %lld tokens (trained on %lld; RoPE base %g)\n",
               (long long)e->T, (long long)cfg->train_seq_len, (double)model_rope_base(&st->spec, (int)e->T));
    if (cfg->smear_gate_enabled && e->set.files[0].bos_id < 0)
        return ct_fail("smear_gate_enabled = 1: the validation data '%s' records no bos_id (-1), and the SmearGate's "
                       "mask needs its BOS token", e->set.files[0].path);
    if (backend_create(&e->b, &at_t, st) != 0) return -1;
    e->b->bos_id = e->set.files[0].bos_id; /* the SmearGate's mask: the data's BOS, as in training */
    return 0;
}

static void eval_close(WeightsEval *e) {
    if (e->b) e->b->destroy(e->b);
    val_free(&e->v);
    data_free_set(&e->set);
    memset(e, 0, sizeof *e);
}

int print_weights_evaluation(const Config *cfg, TrainState *st, const DistInfo *d, const char *label, int64_t stride) {
    WeightsEval e;
    int rc = eval_open(cfg, st, &e);
    double val_loss, val_bpb, start = ct_now_ms();
    if (rc == 0) rc = val_evaluate_with_stride(e.b, &e.v, d, e.T, stride, &val_loss, &val_bpb);
    if (rc == 0 && d->rank == 0) {
        /* either way every target of the split's num_seqs * T is scored once */
        const int64_t tokens = e.v.num_seqs * e.T;
        const double bytes = val_target_bytes(&e.v, 0, tokens);
        printf("%s val_loss:%.4f val_bpb:%.4f tokens:%lld bytes:%.0f eval_time:%.0fms\n", label, val_loss, val_bpb,
               (long long)tokens, bytes, ct_now_ms() - start);
        printf("%s_exact val_loss:%.8f val_bpb:%.8f\n", label, val_loss, val_bpb);
        fflush(stdout);
    }
    eval_close(&e);
    return rc;
}

int print_round_trip_evaluation(const Config *cfg, TrainState *st, const char *label) {
    WeightsEval e;
    int rc = eval_open(cfg, st, &e);
    /* train_gpt.py's order: the non-overlapping evaluation, then the sliding window's */
    for (int sliding = 0; sliding <= (cfg->eval_stride > 0) && rc == 0; sliding++) {
        const int64_t stride = sliding ? cfg->eval_stride : 0;
        double val_loss, val_bpb, start = ct_now_ms();
        rc = val_evaluate_with_stride(e.b, &e.v, &e.single, e.T, stride, &val_loss, &val_bpb);
        if (rc != 0) break;
        const double ms = ct_now_ms() - start;
        if (sliding)
            printf("%s_sliding_window val_loss:%.4f val_bpb:%.4f stride:%lld eval_time:%.0fms\n", label, val_loss,
                   val_bpb, (long long)stride, ms);
        else
            printf("%s_roundtrip val_loss:%.4f val_bpb:%.4f eval_time:%.0fms\n", label, val_loss, val_bpb, ms);
        printf("%s_%s_exact val_loss:%.8f val_bpb:%.8f\n", label, sliding ? "sliding_window" : "roundtrip", val_loss,
               val_bpb);
        if (!sliding && isnan(val_bpb)) printf("note: val_bpb is nan: the validation data has no /tokenizer tables or /bytes_per_token\n");
        fflush(stdout);
    }
    eval_close(&e);
    return rc;
}
