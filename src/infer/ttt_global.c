/* ttt_global.c — a phase's global step of the test-time-training evaluation (ttt_internal.h;
 * docs/model.md "Test-time training"): SGD with momentum on every base weight over the documents
 * already scored (ttt_plan_phase_docs), their slices joined into one stream, in chunks of
 * global_ttt_chunk_tokens (the last skipped), each a batch of rows of S tokens. Every row is its
 * own packed row (documents cut at each BOS, as training packs them), whatever the world size; a
 * step's rows are shared out to the ranks in contiguous runs and its loss is the mean over them
 * of each row's mean token loss, so one rank and many take the same steps up to the rounding of
 * the gradients' sum across ranks. Before each gradient sum the ranks agree (dist_agree): an
 * error in one rank's rows, or a stop, ends the step on every rank there, none left in the sum
 * until collective_timeout; one allreduce of an int per SGD step (a few dozen a phase for the
 * record's settings) beside the sum of every weight's gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fault.h"
#include "ttt_internal.h"

/* The step's documents' slices (each from its BOS through its closing BOS) joined. */
static uint32_t *join_slices(const TttRun *R, const int64_t *docs, int64_t count, int64_t *len) {
    int64_t n = 0;
    for (int64_t i = 0; i < count; i++) n += R->plan.docs[docs[i]].predictions + 1;
    uint32_t *stream = ct_malloc((size_t)n * sizeof(uint32_t), "TTT global stream");
    int64_t at = 0;
    for (int64_t i = 0; i < count; i++) {
        const TttDoc *d = &R->plan.docs[docs[i]];
        memcpy(stream + at, R->v.tokens + d->start, (size_t)(d->predictions + 1) * sizeof(uint32_t));
        at += d->predictions + 1;
    }
    *len = n;
    return stream;
}

/* The gradients of every rank added, in the host buffer grad_buffer hands out (a device
 * backend downloads its gradients into it and takes the sum back at its sgd_step), as training
 * without a device reduction adds them. */
static int reduce_gradients(const TttRun *R) {
    Backend *b = R->gb;
    if (R->d->world_size <= 1) return 0;
    float *g = b->grad_buffer(b);
    if (!g) return -1;
    return dist_allreduce_sum_f32(R->d, g, R->st->spec.total_floats);
}

int ttt_global_step(TttRun *R, int k) {
    const Config *cfg = R->cfg;
    const DistInfo *d = R->d;
    Backend *b = R->gb;
    const double start = ct_now_ms();
    if (R->plan.phase_docs[k] == 0) { /* fewer documents than phases: this step has none */
        if (d->rank == 0) printf("%s: global step %d/%d: no documents\n", R->opt->label, k + 1, R->plan.num_phases);
        return 0;
    }
    int64_t *docs = ct_malloc((size_t)R->plan.phase_docs[k] * sizeof(int64_t), "TTT global documents");
    const int64_t count = ttt_plan_phase_docs(&R->plan, k, docs);
    int64_t len;
    uint32_t *stream = join_slices(R, docs, count, &len);
    free(docs);
    const int64_t chunks = ttt_global_chunks(len, cfg->global_ttt_chunk_tokens);
    int64_t steps = 0, rows_done = 0;
    int restart = 1, rc = 0, agreed = 0; /* agreed: every rank has failed together (dist_agree) */
    char what[96];
    snprintf(what, sizeof what, "the test-time-training evaluation's global step %d", k + 1);
    /* the weights the chunks' backend computes with may be its own copy: bring them to the host
     * first, and back after (the CPU backends share the host weights: nothing to do). A rank
     * that fails below goes straight to its next agreement (the next SGD step's, where the others
     * meet it) */
    if (R->tb->sync_to_host && R->tb->sync_to_host(R->tb) != 0) rc = -1;
    if (rc == 0 && b->weights_from_host && b->weights_from_host(b) != 0) rc = -1;
    /* a rank failing here agrees now, with the others, not at their first SGD step's agreement
     * (which would pair with its own agreement after the step, leaving them in one more) */
    rc = dist_agree(d, rc, what);
    agreed = rc != 0;
    for (int64_t i = 0; i + 1 < chunks && rc == 0; i++) {
        const int64_t rows = ttt_global_rows(len, cfg->global_ttt_chunk_tokens, R->S, i);
        if (rows <= 0) continue;
        const double lr = ttt_global_lr(i, chunks, cfg->global_ttt_lr, cfg->global_ttt_warmup_start_lr,
                                        cfg->global_ttt_warmup_chunks);
        for (int64_t epoch = 0; epoch < cfg->global_ttt_epochs && rc == 0; epoch++)
            for (int64_t g0 = 0; g0 < rows && rc == 0; g0 += cfg->global_ttt_batch_seqs) {
                const int64_t nrows = rows - g0 < cfg->global_ttt_batch_seqs ? rows - g0 : cfg->global_ttt_batch_seqs;
                const int64_t r0 = g0 + nrows * d->rank / d->world_size, r1 = g0 + nrows * (d->rank + 1) / d->world_size;
                fault_point_stage("ttt_global", ++R->sgd_steps);
                rc = fault_error_stage("ttt_global", R->sgd_steps);
                for (int64_t r = r0; r < r1 && rc == 0; r++) {
                    double mean;
                    const uint32_t *row = stream + i * cfg->global_ttt_chunk_tokens + r * R->S;
                    rc = b->forward_backward(b, row, (float)(1.0 / (double)nrows), &mean);
                }
                rc = dist_agree(d, rc, what); /* every rank, before the sum */
                agreed = rc != 0;
                if (rc == 0) rc = reduce_gradients(R);
                double norm;
                if (rc == 0) rc = b->sgd_step(b, lr, cfg->global_ttt_momentum, cfg->global_ttt_grad_clip, restart, &norm);
                if (rc == 0) rc = fault_error_stage("ttt_sgd", R->sgd_steps); /* a failure after the agreement */
                restart = 0;
                steps++;
                rows_done += nrows;
            }
    }
    free(stream);
    if (rc == 0 && b->sync_to_host && b->sync_to_host(b) != 0) rc = -1;
    if (rc == 0 && R->tb->weights_from_host && R->tb->weights_from_host(R->tb) != 0) rc = -1;
    /* a rank whose SGD step or copy back failed after its last agreement meets the others at
     * their next one (an SGD step's, or this one); after an agreed failure every rank is past it */
    if (!agreed) rc = dist_agree(d, rc, what);
    /* (on many ranks dist_agree's message names the rank and the step) */
    if (rc != 0) return d->world_size > 1 ? -1 : ct_fail_prefix("test-time training, global step %d", k + 1);
    if (d->rank == 0) {
        printf("%s: global step %d/%d on %lld documents (%lld tokens): %lld SGD steps over %lld rows of %lld, "
               "%.1fs\n",
               R->opt->label, k + 1, R->plan.num_phases, (long long)count, (long long)len, (long long)steps,
               (long long)rows_done, (long long)R->S, (ct_now_ms() - start) / 1000.0);
        fflush(stdout);
    }
    return 0;
}
