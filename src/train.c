/* train.c — the training run, shared by every backend: prepares out_dir, opens the data,
 * builds the state and backend, then runs train_gpt.py's loop (validation at step 0, every
 * val_loss_every steps and at the end; lr schedule and Muon momentum warmup; accumulation over
 * grad_accum_slots / world_size micro-batches), logging progress to stdout and every step to
 * out_dir/metrics.jsonl. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "config.h"
#include "cpu_optim.h"
#include "data.h"
#include "loader.h"
#include "train.h"

static void print_resolved(const Config *cfg) {
    static const char *const origin[] = {"", "  (config file)", "  (command line)"};
    printf("configuration:\n");
    for (int i = 0; i < ct_config_num_keys; i++) {
        char buf[64];
        const ConfigKey *k = &ct_config_keys[i];
        printf("  %-27s = %s%s\n", k->name, config_value_text(cfg, k, buf, sizeof buf), origin[cfg->source[i]]);
    }
    fflush(stdout);
}

/* Validation data, read once: train_gpt.py's load_validation_tokens keeps
 * ((tokens - 1) // seq_len) * seq_len + 1 tokens of the split. */
typedef struct {
    uint32_t *tokens;
    int64_t num_seqs;
    int16_t *base_bytes;
    uint8_t *has_leading_space, *is_boundary_token;
} ValData;

static int load_val(const Config *cfg, const TokenSet *set, ValData *v) {
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
    if (set->has_luts && data_read_luts(set, &v->base_bytes, &v->has_leading_space, &v->is_boundary_token) != 0)
        return -1;
    return 0;
}

static void free_val(ValData *v) {
    free(v->tokens);
    free(v->base_bytes);
    free(v->has_leading_space);
    free(v->is_boundary_token);
}

/* eval_val: mean token loss over this rank's share of the sequences, and bits per byte when
 * the data has the tokenizer tables (bytes counted per target with the leading-space rule). */
static int evaluate(Backend *b, const ValData *v, int rank, int world, int64_t seq_len, double *val_loss,
                    double *val_bpb) {
    int64_t first = v->num_seqs * rank / world, end = v->num_seqs * (rank + 1) / world;
    double loss_sum = 0, tokens = 0, bytes = 0;
    int batch = b->micro_batch_seqs;
    for (int64_t s = first; s < end; s += batch) {
        int n = (int)(end - s < batch ? end - s : batch);
        const uint32_t *tok = v->tokens + s * seq_len;
        double sum;
        if (b->evaluate(b, tok, n, &sum) != 0) return -1;
        loss_sum += sum;
        tokens += (double)n * seq_len;
        if (v->base_bytes) {
            for (int64_t i = 0; i < n * seq_len; i++) {
                uint32_t prev = tok[i], tgt = tok[i + 1];
                bytes += v->base_bytes[tgt] + (v->has_leading_space[tgt] && !v->is_boundary_token[prev] ? 1 : 0);
            }
        }
    }
    *val_loss = loss_sum / tokens;
    *val_bpb = v->base_bytes && bytes > 0 ? (*val_loss / log(2.0)) * (tokens / bytes) : NAN;
    return 0;
}

static void format_duration(double seconds, char *buf, size_t cap) {
    if (!(seconds >= 0) || seconds > 360000) {
        snprintf(buf, cap, "--:--");
        return;
    }
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
    else snprintf(buf, cap, "%d:%02d", s / 60, s % 60);
}

int train_run(const Config *cfg) {
    int rank = 0, world = 1; /* single process until the distributed layer assigns them */
    int rc = CT_EXIT_FAILURE;
    TokenSet train_set, val_set;
    ValData val;
    TrainState st;
    Backend *backend = NULL;
    Loader loader;
    FILE *metrics = NULL;
    memset(&val, 0, sizeof val);
    memset(&st, 0, sizeof st);
    memset(&loader, 0, sizeof loader);
    memset(&train_set, 0, sizeof train_set);
    memset(&val_set, 0, sizeof val_set);

    print_resolved(cfg);
    char path[4200];
    if (ct_mkdir_p(cfg->out_dir) != 0) goto fail;
    snprintf(path, sizeof path, "%s/config.txt", cfg->out_dir);
    if (config_write_file(cfg, path) != 0) goto fail;
    if (train_open_data(cfg, &train_set, &val_set) != 0) goto fail;
    printf("train data: %d file(s), %lld tokens, vocab %lld (%s)\n", train_set.num_files,
           (long long)train_set.total_tokens, (long long)train_set.vocab_size, cfg->train_files);
    if (val_set.num_files) {
        if (load_val(cfg, &val_set, &val) != 0) goto fail;
        printf("val data:   %d file(s), %lld sequences of %lld%s (%s)\n", val_set.num_files, (long long)val.num_seqs,
               (long long)cfg->train_seq_len, val.base_bytes ? ", val_bpb enabled" : "", cfg->val_files);
    }
    if (train_state_init(&st, cfg) != 0 || backend_create(&backend, cfg, &st) != 0) goto fail;
    const int accum = (int)(cfg->grad_accum_slots / world);
    printf("model: %lld parameters, %d layers, dim %d, %d heads / %d kv heads; device %s; world %d, accumulation "
           "%d x %d sequences of %lld\n",
           (long long)st.spec.total_floats, st.spec.num_layers, st.spec.dim, st.spec.num_heads, st.spec.num_kv_heads,
           backend->name, world, accum, backend->micro_batch_seqs, (long long)cfg->train_seq_len);
    if (cfg->warmup_steps > 0)
        printf("note: warmup_steps = %lld ignored (ctrain has no compile warmup to prime)\n", (long long)cfg->warmup_steps);
    fflush(stdout);

    if (loader_init(&loader, &train_set, rank, world, config_local_tokens(cfg), loader_cursor_start(), 1) != 0) goto fail;
    snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->out_dir);
    metrics = fopen(path, "w");
    if (!metrics) {
        ct_fail("cannot write '%s': %s", path, strerror(errno));
        goto fail;
    }

    const double max_wallclock_ms = cfg->max_wallclock_seconds > 0 ? 1000.0 * cfg->max_wallclock_seconds : 0;
    const double step_tokens = (double)cfg->train_batch_tokens;
    const float loss_weight = 1.0f / (float)accum;
    double training_ms = 0, t0 = ct_now_ms();
    int64_t step = 0, stop_after = -1;
    for (;;) {
        int last = step == cfg->iterations || (stop_after >= 0 && step >= stop_after);
        if (val.tokens && (last || (cfg->val_loss_every > 0 && step % cfg->val_loss_every == 0))) {
            training_ms += ct_now_ms() - t0;
            double vl, vb;
            if (evaluate(backend, &val, rank, world, cfg->train_seq_len, &vl, &vb) != 0) goto fail;
            printf("step %lld/%lld  val_loss %.4f", (long long)step, (long long)cfg->iterations, vl);
            if (!isnan(vb)) printf("  val_bpb %.4f", vb);
            printf("  train_time %.0fms\n", training_ms);
            fprintf(metrics, "{\"step\": %lld, \"val_loss\": %.17g", (long long)step, vl);
            if (!isnan(vb)) fprintf(metrics, ", \"val_bpb\": %.17g", vb);
            fprintf(metrics, ", \"train_time_ms\": %.1f}\n", training_ms);
            fflush(metrics);
            fflush(stdout);
            t0 = ct_now_ms();
        }
        if (last) break;

        double step_start = ct_now_ms();
        double elapsed = training_ms + (step_start - t0);
        double scale = lr_scale(step, cfg->iterations, cfg->warmdown_iters, elapsed, max_wallclock_ms);
        double loss_sum = 0;
        for (int m = 0; m < accum; m++) {
            const uint32_t *tokens;
            double mean_loss;
            if (loader_next(&loader, &tokens) != 0) goto fail;
            if (backend->forward_backward(backend, tokens, loss_weight, &mean_loss) != 0) {
                ct_fail_prefix("step %lld, micro-batch %d", (long long)step + 1, m);
                goto fail;
            }
            loss_sum += mean_loss;
        }
        double train_loss = loss_sum / accum;
        StepHyper h = {
            .token_lr = (cfg->tie_embeddings ? cfg->tied_embed_lr : cfg->embed_lr) * scale,
            .head_lr = cfg->head_lr * scale,
            .matrix_lr = cfg->matrix_lr * scale,
            .scalar_lr = cfg->scalar_lr * scale,
            .muon_momentum = muon_momentum_at(step, cfg->muon_momentum_warmup_start, cfg->muon_momentum,
                                              cfg->muon_momentum_warmup_steps),
            .muon_steps = (int)cfg->muon_backend_steps,
            .beta1 = cfg->beta1,
            .beta2 = cfg->beta2,
            .adam_eps = cfg->adam_eps,
            .grad_clip_norm = cfg->grad_clip_norm,
        };
        double grad_norm;
        if (backend->optimizer_step(backend, &h, &grad_norm) != 0) goto fail;
        step++;

        double now = ct_now_ms();
        double step_ms = now - step_start;
        double train_time = training_ms + (now - t0);
        double tokens_per_s = step_tokens / (step_ms / 1000.0);
        fprintf(metrics,
                "{\"step\": %lld, \"train_loss\": %.17g, \"lr_scale\": %.17g, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, "
                "\"train_time_ms\": %.1f",
                (long long)step, train_loss, scale, step_ms, tokens_per_s, train_time);
        if (cfg->grad_clip_norm > 0) fprintf(metrics, ", \"grad_norm\": %.9g", grad_norm);
        fprintf(metrics, "}\n");
        fflush(metrics);
        if (step <= 10 || step % cfg->train_log_every == 0 || step == cfg->iterations) {
            char eta[32];
            format_duration((double)(cfg->iterations - step) * (train_time / (double)step) / 1000.0, eta, sizeof eta);
            printf("step %lld/%lld  loss %.4f  lr_scale %.3f  step %.0fms  %.0f tok/s  eta %s\n", (long long)step,
                   (long long)cfg->iterations, train_loss, scale, step_ms, tokens_per_s, eta);
            fflush(stdout);
        }
        if (max_wallclock_ms > 0 && stop_after < 0 && train_time >= max_wallclock_ms) {
            stop_after = step;
            printf("stopping early: wallclock cap, train_time %.0fms at step %lld/%lld\n", train_time, (long long)step,
                   (long long)cfg->iterations);
        }
    }
    printf("done: %lld steps, train_time %.0fms\n", (long long)step, training_ms);
    rc = CT_EXIT_OK;
    goto out;
fail:
    ct_print_error();
    rc = CT_EXIT_FAILURE;
out:
    if (metrics) fclose(metrics);
    loader_free(&loader);
    if (backend) backend->destroy(backend);
    train_state_free(&st);
    free_val(&val);
    data_free_set(&train_set);
    data_free_set(&val_set);
    return rc;
}
