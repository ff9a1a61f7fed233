/* ttt_eval.c — the score-first test-time-training evaluation (infer.h's ttt_evaluate; issue 57,
 * docs/model.md "Test-time training"): the plan (ttt_plan.h) run on the ranks. Every rank scores
 * the batches the plan gives it, segment by segment; between segments the ranks take the phase's
 * global step together (ttt_global.c); after every queue position and global step (and within
 * a global step before every gradient sum) they agree (dist.h's dist_agree), so a stop or an
 * error on one rank ends the evaluation on all of them there. A batch's numbers depend only on
 * its documents and the base weights, and the sums are gathered per batch and added in queue
 * order, so the result is the same bits on any number of ranks (given the same base weights;
 * the global steps' gradient sums are the one place the world size can change rounding). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data.h"
#include "fault.h"
#include "ttt_internal.h"

/* ---- one batch ---- */

typedef struct {
    uint32_t *inputs, *targets;
    int64_t *start;     /* per row: its window's first token (document offset) */
    int32_t *from, *len; /* and the window positions it scores */
    uint8_t *train;
    float *losses;
} ChunkBuffers;

static void chunk_buffers_alloc(ChunkBuffers *c, int64_t rows, int64_t ctx) {
    const size_t n = (size_t)rows * (size_t)ctx;
    c->inputs = ct_calloc(n, sizeof(uint32_t), "TTT inputs");
    c->targets = ct_calloc(n, sizeof(uint32_t), "TTT targets");
    c->losses = ct_calloc(n, sizeof(float), "TTT losses");
    c->start = ct_calloc((size_t)rows, sizeof(int64_t), "TTT rows");
    c->from = ct_calloc((size_t)rows, sizeof(int32_t), "TTT rows");
    c->len = ct_calloc((size_t)rows, sizeof(int32_t), "TTT rows");
    c->train = ct_calloc((size_t)rows, 1, "TTT rows");
}

static void chunk_buffers_free(ChunkBuffers *c) {
    free(c->inputs), free(c->targets), free(c->losses), free(c->start), free(c->from), free(c->len), free(c->train);
}

/* Score (and, with adapt, adapt on) batch `batch`: its documents' loss sums and bytes into
 * R->doc_loss / doc_bytes, its sums into R->batch_sums[3 * batch]. */
static int run_batch(TttRun *R, ChunkBuffers *cb, int64_t batch, int adapt) {
    const TttPlan *p = &R->plan;
    const int64_t first = p->batch_first[batch], nb = p->batch_first[batch + 1] - first;
    const int64_t *docs = p->batch_docs + first;
    if (adapt && R->tb->ttt_reset(R->tb, R->initial, 0, (int)nb) != 0) return -1;
    /* documents ascend by predictions, so those still going at chunk c are a suffix of the batch
     * and the last one has the longest window */
    const int64_t chunks = ttt_doc_chunks(p->docs[docs[nb - 1]].predictions, R->C);
    int64_t first_active = 0;
    for (int64_t c = 0; c < chunks; c++) {
        while (ttt_doc_chunks(p->docs[docs[first_active]].predictions, R->C) <= c) first_active++;
        const int64_t rows = nb - first_active;
        int64_t ws, wl, sf, sl;
        ttt_chunk_window(p->docs[docs[nb - 1]].predictions, c, R->C, R->E, &ws, &wl, &sf, &sl);
        const int64_t ctx = wl;
        memset(cb->inputs, 0, (size_t)(rows * ctx) * sizeof(uint32_t));
        memset(cb->targets, 0, (size_t)(rows * ctx) * sizeof(uint32_t));
        for (int64_t i = 0; i < rows; i++) {
            const TttDoc *doc = &p->docs[docs[first_active + i]];
            ttt_chunk_window(doc->predictions, c, R->C, R->E, &ws, &wl, &sf, &sl);
            const uint32_t *at = R->v.tokens + doc->start + ws;
            memcpy(cb->inputs + i * ctx, at, (size_t)wl * sizeof(uint32_t));
            memcpy(cb->targets + i * ctx, at + 1, (size_t)wl * sizeof(uint32_t));
            cb->start[i] = ws, cb->from[i] = (int32_t)sf, cb->len[i] = (int32_t)sl;
            cb->train[i] = adapt && c + 1 < ttt_doc_chunks(doc->predictions, R->C);
        }
        const TttChunk chunk = {(int)rows, (int)ctx, (int)first_active, cb->inputs, cb->targets,
                                cb->from, cb->len, cb->train, adapt};
        if (R->tb->ttt_chunk(R->tb, &chunk, &R->o, cb->losses) != 0) return -1;
        for (int64_t i = 0; i < rows; i++) {
            const int64_t d = docs[first_active + i];
            /* the scored targets' split positions: each predicted from the token before it, at
             * the document's start + the window's + the scored position's */
            const int64_t at = p->docs[d].start + cb->start[i] + cb->from[i], n = cb->len[i];
            const float *l = cb->losses + i * ctx + cb->from[i];
            double sum = 0;
            for (int64_t j = 0; j < n; j++) sum += l[j];
            R->doc_loss[d] += sum;
            R->doc_bytes[d] += val_target_bytes(&R->v, at, n);
            if (R->target_loss)
                for (int64_t j = 0; j < n; j++) {
                    R->target_loss[at + j] = l[j];
                    R->target_count[at + j] += 1.0f;
                }
        }
    }
    if (R->opt->dump && R->opt->dump_doc >= 0 && adapt && p->docs[R->opt->dump_doc].batch == batch) {
        float *slot = ct_malloc(R->layout.slot_floats * sizeof(float), "TTT adapters");
        int rc = R->tb->ttt_slot_to_host(R->tb, (int)p->docs[R->opt->dump_doc].slot, slot);
        if (rc == 0) rc = ttt_dump_slot(R, R->opt->dump_doc, slot);
        free(slot);
        if (rc != 0) return -1;
    }
    double *sums = R->batch_sums + 3 * batch;
    for (int64_t i = 0; i < nb; i++) {
        sums[0] += R->doc_loss[docs[i]];
        sums[1] += (double)p->docs[docs[i]].predictions;
        sums[2] += R->doc_bytes[docs[i]];
    }
    return 0;
}

/* ---- setting up ---- */

static int open_data(TttRun *R) {
    const Config *cfg = R->cfg;
    TokenSet set;
    if (!cfg->val_files[0]) return ct_fail("val_files is empty: there is no validation data to evaluate on");
    if (data_open_set(cfg->val_files, &set) != 0) return ct_fail_prefix("val_files");
    int rc = 0;
    if (set.vocab_size != cfg->vocab_size)
        rc = ct_fail("val_files: the data's vocab_size is %lld (%s) but the model's is %lld", (long long)set.vocab_size,
                     set.files[0].path, (long long)cfg->vocab_size);
    else if (set.total_tokens < R->S + 1)
        rc = ct_fail("val_files '%s' hold %lld tokens, fewer than one evaluation sequence of %lld + 1", cfg->val_files,
                     (long long)set.total_tokens, (long long)R->S);
    if (rc == 0) { /* the split trimmed as plain evaluation trims it: to whole sequences of S */
        Config at_s = *cfg;
        at_s.doc_packing = 0;
        at_s.train_seq_len = R->S;
        rc = val_load(&at_s, &set, &R->v);
    }
    if (rc == 0) {
        R->n = R->v.num_seqs * R->S + 1;
        rc = ttt_plan_build(&R->plan, R->v.tokens, R->n, set.files[0].bos_id, cfg->ttt_batch_size,
                            R->opt->adapt ? cfg->phased_ttt_prefix_docs : 0, cfg->phased_ttt_num_phases,
                            set.files[0].path);
    }
    const int64_t bos = set.files[0].bos_id;
    data_free_set(&set);
    if (rc != 0) return -1;
    /* the chunks' backend: a batch's rows of E tokens, no packing (a row is one document); no
     * more rows than the split has documents (a ttt_batch_size far above them would size every
     * buffer for rows never used) */
    R->rows = cfg->ttt_batch_size < R->plan.num_docs ? cfg->ttt_batch_size : R->plan.num_docs;
    Config at = *cfg;
    at.doc_packing = 0;
    at.train_seq_len = R->E;
    at.grad_accum_slots = 1;
    at.train_batch_tokens = R->rows * R->E;
    at.qat_enabled = 0, at.late_qat = 0;
    at.mtp_loss_weight = 0;
    if (backend_create(&R->tb, &at, R->st) != 0) return -1;
    R->tb->bos_id = bos;
    if (!R->tb->ttt_open || !R->tb->ttt_chunk)
        return ct_fail("test-time training: the %s backend has no test-time-training hooks; give --device cpu or "
                       "cuda (device = cpu or cuda)", R->tb->name);
    if (R->tb->ttt_open(R->tb, &R->layout, (int)R->rows) != 0) return -1;
    if (R->plan.num_phases > 0) { /* the global steps' backend: one packed row of S tokens a call */
        Config g = *cfg;
        g.doc_packing = 1;
        g.train_seq_len = R->S;
        g.max_doc_len = R->S;
        g.grad_accum_slots = 1;
        g.train_batch_tokens = R->S;
        g.qat_enabled = 0, g.late_qat = 0;
        g.mtp_loss_weight = 0;
        if (backend_create(&R->gb, &g, R->st) != 0) return -1;
        R->gb->bos_id = bos;
        if (!R->gb->sgd_step) return ct_fail("test-time training: the %s backend has no SGD step", R->gb->name);
    }
    return 0;
}

static void close_run(TttRun *R) {
    if (R->tb) R->tb->destroy(R->tb);
    if (R->gb) R->gb->destroy(R->gb);
    val_free(&R->v);
    ttt_plan_free(&R->plan);
    lora_layout_free(&R->layout);
    free(R->initial), free(R->doc_loss), free(R->doc_bytes), free(R->batch_sums);
    free(R->target_loss), free(R->target_count), free(R->rank_of);
}

/* ---- progress ---- */

static void progress(const TttRun *R, int64_t q, int segment, int adapt) {
    const TttPlan *p = &R->plan;
    if (R->d->rank != 0) return;
    const int64_t every = p->num_batches > 40 ? p->num_batches / 20 : 1;
    if (q % every != 0 && q + 1 != p->num_batches) return;
    double loss = 0, tokens = 0, bytes = 0; /* this rank's running sums, as the record's rank 0 prints them */
    int64_t docs = 0;
    for (int64_t i = 0; i <= q; i++) {
        const double *s = R->batch_sums + 3 * p->queue[i];
        loss += s[0], tokens += s[1], bytes += s[2];
        docs += s[1] > 0 ? p->batch_first[p->queue[i] + 1] - p->batch_first[p->queue[i]] : 0;
    }
    const double elapsed = (ct_now_ms() - R->start_ms) / 1000.0, budget = R->cfg->ttt_time_budget;
    char left[64] = "";
    if (budget > 0) snprintf(left, sizeof left, " left:%.0fs", budget - elapsed > 0 ? budget - elapsed : 0.0);
    printf("%s: batch %lld/%lld segment %d/%d docs:%lld tokens:%.0f running val_bpb:%.4f elapsed:%.0fs%s%s\n",
           R->opt->label, (long long)q + 1, (long long)p->num_batches, segment + 1, p->num_phases + 1,
           (long long)docs, tokens, tokens > 0 && bytes > 0 ? loss / tokens / log(2.0) * tokens / bytes : NAN,
           elapsed, left, adapt ? "" : " (not adapting)");
    fflush(stdout);
}

/* ---- the evaluation ---- */

static int evaluate(TttRun *R, TttResult *res) {
    const Config *cfg = R->cfg;
    const TttPlan *p = &R->plan;
    const DistInfo *d = R->d;
    int *rank_of = R->rank_of = ct_malloc((size_t)(p->num_batches > 0 ? p->num_batches : 1) * sizeof(int), "TTT ranks");
    ttt_plan_assign(p, d->world_size, R->C, R->E, rank_of);
    ChunkBuffers cb;
    chunk_buffers_alloc(&cb, R->rows, R->E);
    int rc = 0, budget_hit = 0;
    for (int k = 0; k <= p->num_phases && rc == 0; k++) {
        const int64_t q0 = k == 0 ? 0 : p->segment_end[k - 1], q1 = p->segment_end[k];
        for (int64_t q = q0; q < q1 && rc == 0; q++) {
            fault_point_stage("ttt", q + 1);
            rc = fault_error_stage("ttt", q + 1);
            if (!budget_hit && cfg->ttt_time_budget > 0 && ct_now_ms() - R->start_ms > cfg->ttt_time_budget * 1000.0)
                budget_hit = 1;
            const int adapt = R->opt->adapt && !budget_hit;
            if (rc == 0 && rank_of[q] == d->rank) {
                rc = run_batch(R, &cb, p->queue[q], adapt);
                if (!adapt && R->opt->adapt) res->unadapted_batches++;
            }
            if (rc == 0) progress(R, q, k, adapt);
            /* every rank at every queue position, its own batch or not: a stop or an error ends
             * the evaluation on all of them here */
            rc = dist_agree(d, rc, "the test-time-training evaluation");
        }
        if (rc != 0 || k == p->num_phases) break;
        /* every rank has scored the segment: the phase's global step, unless the time is up
         * (the ranks agree, so that all of them take it or none) */
        int over = cfg->ttt_time_budget > 0 && ct_now_ms() - R->start_ms > cfg->ttt_time_budget * 1000.0;
        if (dist_allreduce_max_i32(d, &over) != 0) {
            rc = -1;
            break;
        }
        if (over) {
            budget_hit = 1;
            continue;
        }
        rc = ttt_global_step(R, k);
        if (rc == 0) res->phases_run++;
        if (rc == 0 && R->opt->dump) rc = ttt_dump_phase(R, k);
        rc = dist_agree(d, rc, "the test-time-training evaluation");
    }
    chunk_buffers_free(&cb);
    if (rc != 0) return -1;
    /* every batch's and document's sums come from its one rank (the others add +0) */
    if (dist_allreduce_sum_f64(d, R->batch_sums, (size_t)p->num_batches * 3) != 0 ||
        dist_allreduce_sum_f64(d, R->doc_loss, (size_t)p->num_docs) != 0 ||
        dist_allreduce_sum_f64(d, R->doc_bytes, (size_t)p->num_docs) != 0)
        return -1;
    if (R->target_loss && (dist_allreduce_sum_f32(d, R->target_loss, (size_t)R->n) != 0 ||
                           dist_allreduce_sum_f32(d, R->target_count, (size_t)R->n) != 0))
        return -1;
    double loss = 0, tokens = 0, bytes = 0;
    for (int64_t q = 0; q < p->num_batches; q++) {
        const double *s = R->batch_sums + 3 * p->queue[q];
        loss += s[0], tokens += s[1], bytes += s[2];
    }
    res->tokens = tokens, res->bytes = bytes;
    res->val_loss = loss / tokens;
    res->val_bpb = bytes > 0 ? res->val_loss / log(2.0) * tokens / bytes : NAN;
    if (budget_hit && d->rank == 0)
        printf("%s: time budget ttt_time_budget = %gs reached: %lld of %lld batches scored without adapting, global "
               "steps taken %d of %d\n",
               R->opt->label, cfg->ttt_time_budget, (long long)res->unadapted_batches, (long long)p->num_batches,
               res->phases_run, p->num_phases);
    return 0;
}

int ttt_evaluate(const Config *cfg, TrainState *st, const DistInfo *d, const TttOptions *o, TttResult *res) {
    TttRun R;
    memset(&R, 0, sizeof R);
    memset(res, 0, sizeof *res);
    R.cfg = cfg, R.st = st, R.d = d, R.opt = o;
    R.start_ms = ct_now_ms();
    R.S = config_eval_seq_len(cfg);
    R.E = config_ttt_eval_seq_len(cfg);
    R.C = cfg->ttt_chunk_size;
    R.o = (TttOptimizer){strcmp(cfg->ttt_optimizer, "sgd") != 0, cfg->ttt_lora_lr, cfg->ttt_beta1, cfg->ttt_beta2,
                         1e-10, cfg->ttt_weight_decay, (int)cfg->ttt_grad_steps};
    /* the evaluation runs what the model ends with: depth recurrence on, no QAT */
    const int saved_loop = st->loop_active, saved_qat = st->qat_active;
    st->loop_active = st->spec.num_loops > 0;
    st->qat_active = 0;
    int rc = lora_layout_init(&R.layout, &st->spec, model_plan(&st->spec, st->loop_active), (int)cfg->ttt_lora_rank,
                              cfg->ttt_lora_alpha, (int)cfg->ttt_k_lora, (int)cfg->ttt_o_lora, (int)cfg->ttt_mlp_lora);
    if (rc == 0) {
        R.initial = ct_calloc(R.layout.slot_floats, sizeof(float), "TTT starting adapters");
        lora_initial_slot(&R.layout, (uint64_t)cfg->seed, R.initial);
        rc = open_data(&R);
    }
    if (rc == 0) {
        R.doc_loss = ct_calloc((size_t)R.plan.num_docs, sizeof(double), "TTT sums");
        R.doc_bytes = ct_calloc((size_t)R.plan.num_docs, sizeof(double), "TTT sums");
        R.batch_sums = ct_calloc((size_t)R.plan.num_batches * 3, sizeof(double), "TTT sums");
        /* checked before the dump's first file is written */
        if (o->dump && o->dump_doc >= R.plan.num_docs)
            rc = ct_fail("--dump-doc %lld: the validation split has %lld documents", (long long)o->dump_doc,
                         (long long)R.plan.num_docs);
        if (o->dump && rc == 0) {
            R.target_loss = ct_calloc((size_t)R.n, sizeof(float), "TTT losses");
            R.target_count = ct_calloc((size_t)R.n, sizeof(float), "TTT losses");
            rc = ttt_dump_initial(&R);
        }
    }
    /* every rank set up (or a stop asked for before the first batch) */
    rc = dist_agree(d, rc, "the test-time-training evaluation");
    if (rc == 0 && d->rank == 0) {
        printf("%s: %lld documents, %lld targets, %lld batches of up to %lld, chunks of %lld in windows of %lld, "
               "%s, %d global step%s on %lld prefix documents, %d rank%s\n",
               o->label, (long long)R.plan.num_docs, (long long)(R.n - 1 - R.plan.docs[0].start),
               (long long)R.plan.num_batches, (long long)cfg->ttt_batch_size, (long long)R.C, (long long)R.E,
               o->adapt ? "adapting" : "not adapting (the base model alone)", R.plan.num_phases,
               R.plan.num_phases == 1 ? "" : "s", (long long)R.plan.prefix_docs, d->world_size,
               d->world_size == 1 ? "" : "s");
        fflush(stdout);
    }
    if (rc == 0) rc = evaluate(&R, res);
    res->seconds = (ct_now_ms() - R.start_ms) / 1000.0;
    if (rc == 0 && o->dump) rc = ttt_dump_final(&R, res->val_loss, res->val_bpb, res->tokens, res->bytes);
    if (rc == 0 && d->rank == 0) {
        printf("%s val_loss:%.4f val_bpb:%.4f tokens:%.0f bytes:%.0f eval_time:%.0fms\n", o->label, res->val_loss,
               res->val_bpb, res->tokens, res->bytes, res->seconds * 1000.0);
        printf("%s_exact val_loss:%.8f val_bpb:%.8f\n", o->label, res->val_loss, res->val_bpb);
        fflush(stdout);
    }
    close_run(&R);
    st->loop_active = saved_loop, st->qat_active = saved_qat;
    return rc;
}
