/* golf_hessians_collect.c — GPTQ's calibration (golf_hessians.h): the Hessians of the matrices'
 * inputs over gptq_calibration_batches micro-batch slots of training tokens (training data
 * only, as the challenge requires), by the backend's accumulate_input_grams hook, on one rank.
 *
 * Which tokens: the first gptq_calibration_batches x (train_batch_tokens / grad_accum_slots)
 * tokens of train_files' stream (the files in order), batch k the k-th slot of them, each with
 * its next token as the evaluation's. The record draws its 16 batches from a shuffled loader of
 * the training data; the start of the stream is as much training data and the same on every
 * machine, world size and resume. H = the sum over batches of X^T X, divided by the number of
 * batches (the record's scale; GPTQ does not depend on it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data.h"
#include "fault.h"
#include "golf_hessians.h"
#include "infer.h"
#include "loader.h"
#include "stop.h"

/* The calibration tokens: batches slots of slot tokens and one more, checked against the vocab. */
static int read_calibration(const Config *cfg, TokenSet *set, int64_t batches, int64_t slot, uint32_t **tokens) {
    if (!cfg->train_files[0]) return ct_fail("train_files is empty: GPTQ calibrates on training data and there is none");
    if (data_open_set(cfg->train_files, set) != 0) return ct_fail_prefix("train_files");
    if (set->vocab_size != cfg->vocab_size)
        return ct_fail("train_files: the data's vocab_size is %lld (%s) but the model's is %lld",
                       (long long)set->vocab_size, set->files[0].path, (long long)cfg->vocab_size);
    const int64_t n = batches * slot + 1;
    *tokens = ct_malloc((size_t)n * sizeof **tokens, "calibration tokens");
    TokenReader *reader;
    if (token_reader_open(&reader, set) != 0) return -1;
    int rc = loader_read_stream(reader, set, loader_cursor_start(), n, *tokens);
    token_reader_close(reader);
    for (int64_t i = 0; rc == 0 && i < n; i++)
        if ((*tokens)[i] >= (uint64_t)set->vocab_size)
            rc = ct_fail("train_files: calibration token %lld is %u, which is >= vocab_size %lld", (long long)i,
                         (*tokens)[i], (long long)set->vocab_size);
    return rc;
}

int golf_collect_hessians(const Config *cfg, TrainState *st, GolfHessians *h) {
    const double start = ct_now_ms();
    const int64_t batches = cfg->gptq_calibration_batches, slot = config_local_tokens(cfg), T = config_seq_len(cfg);
    golf_hessians_alloc(&st->spec, h);
    h->batches = batches;
    h->tokens = batches * slot;
    h->step = st->adam_step;
    TokenSet set;
    memset(&set, 0, sizeof set);
    uint32_t *tokens = NULL;
    Backend *b = NULL;
    /* the backend adds into each input's Hessian once: the matrices that share one get NULL */
    float **grams = ct_calloc((size_t)h->num_params + 1, sizeof *grams, "Hessian list");
    int count = 0;
    for (int i = 0; i < h->num_params; i++) {
        if (!h->h[i]) continue;
        count++;
        int shares;
        golf_hessian_wanted(&st->spec, i, &shares);
        if (shares < 0 || h->h[shares] != h->h[i]) grams[i] = h->h[i];
    }
    int rc = read_calibration(cfg, &set, batches, slot, &tokens);
    if (rc == 0 && (rc = backend_create(&b, cfg, st)) == 0) {
        b->bos_id = set.files[0].bos_id; /* packing's cuts and the SmearGate's mask, as in training */
        if (!b->accumulate_input_grams)
            rc = ct_fail("device = %s cannot collect the GPTQ Hessians yet; collect them with device=cpu "
                         "(ctrain ckpt hessians CHECKPOINT --device cpu)", cfg->device);
    }
    for (int64_t k = 0; rc == 0 && k < batches; k++) {
        /* a stop (a preempted job's, or `ckpt hessians`'s) is honoured at each batch: the
         * calibration can be long (gptq_calibration_batches up to 10^6) and writes nothing */
        fault_point_stage("calibration", k + 1);
        if (stop_requested()) {
            rc = stop_abandon("GPTQ's calibration");
            break;
        }
        rc = b->accumulate_input_grams(b, tokens + k * slot, (int)(slot / T), grams);
    }
    for (int i = 0; rc == 0 && i < h->num_params; i++) {
        if (!grams[i]) continue;
        const size_t cols = (size_t)st->spec.params[i].shape[1];
        for (size_t j = 0; j < cols * cols; j++) grams[i][j] /= (float)batches;
    }
    if (b) b->destroy(b);
    free(grams);
    free(tokens);
    data_free_set(&set);
    if (rc != 0) {
        golf_hessians_free(h);
        return ct_fail_prefix("GPTQ calibration");
    }
    printf("GPTQ: collected %d Hessians from %lld batches of %lld training tokens in %.1fs\n", count,
           (long long)batches, (long long)slot, (ct_now_ms() - start) / 1000.0);
    fflush(stdout);
    return 0;
}
