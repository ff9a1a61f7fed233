/* train_data.c — the data a training run reads: the train and validation sets its
 * configuration names, checked against the configuration before any work starts. Everything
 * the run will do with the files' HDF5 metadata (open, look up every chunk, read the ends of
 * each training file and all of the validation split) is done once first in a child process,
 * so that a damaged file is an error at the start and not a crash at step 5,000. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "data.h"
#include "dist.h"
#include "isolate.h"
#include "progress.h"
#include "train.h"
#include "trainer.h"

/* The child's time limit: opening the sets, chunk lookups, and reading the validation split
 * take seconds; only an HDF5 loop on damaged metadata takes this long. */
#define DATA_CHECK_TIMEOUT_S 600.0

/* The data's BOS token, which smear_gate_enabled's mask and doc_packing's cuts need: every file
 * of both splits must record the same bos_id (the backend is given the first training file's; a
 * file with -1 would silently make every row one document, or mix across documents). `key` is
 * the setting that needs it, for the message. */
static int check_data_bos(const char *key, const TokenSet *train, const TokenSet *val) {
    const int64_t bos = train->files[0].bos_id;
    const TokenSet *sets[2] = {train, val};
    const char *names[2] = {"train_files", "val_files"};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < sets[k]->num_files; i++) {
            const TokenFileInfo *f = &sets[k]->files[i];
            if (f->bos_id < 0)
                return ct_fail("%s: %s: '%s' records no bos_id (bos_id -1), but it needs the data's BOS token; import "
                               "the data with its bos_id (`ctrain data import-bin --bos-id N`) or turn %s off",
                               key, names[k], f->path, key);
            if (f->bos_id != bos)
                return ct_fail("%s: %s: '%s' records bos_id %lld but '%s' records %lld; expected one bos_id", key,
                               names[k], f->path, (long long)f->bos_id, train->files[0].path, (long long)bos);
        }
    return 0;
}

/* Validation rows are packed rows of the training row's length: the split must hold one. */
static int check_packed_val(const Config *cfg, const TokenSet *val) {
    const int64_t row = config_seq_len(cfg);
    if (val->num_files && val->total_tokens < row + 1)
        return ct_fail("doc_packing = 1: val_files '%s' hold %lld tokens, fewer than one packed row of "
                       "train_batch_tokens / grad_accum_slots + 1 = %lld",
                       cfg->val_files, (long long)val->total_tokens, (long long)row + 1);
    return 0;
}

static int open_data_here(const Config *cfg, TokenSet *train, TokenSet *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (data_open_set(cfg->train_files, train) != 0) return ct_fail_prefix("train_files");
    if (train->vocab_size != cfg->vocab_size) {
        ct_fail("train_files: the data's vocab_size is %lld (%s) but the configuration says vocab_size = %lld",
                (long long)train->vocab_size, train->files[0].path, (long long)cfg->vocab_size);
        data_free_set(train);
        return -1;
    }
    int64_t step_tokens = config_step_stream_tokens(cfg);
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
    if ((cfg->smear_gate_enabled && check_data_bos("smear_gate_enabled = 1", train, val) != 0) ||
        (cfg->doc_packing && (check_data_bos("doc_packing = 1", train, val) != 0 || check_packed_val(cfg, val) != 0))) {
        data_free_set(train);
        data_free_set(val);
        return -1;
    }
    /* what identifies the training files in checkpoints (data.h) */
    if (data_fingerprint(train) != 0) {
        data_free_set(train);
        data_free_set(val);
        return ct_fail_prefix("train_files");
    }
    return 0;
}

/* In the child: all of the above, then the storage of every file and the validation split. */
static int check_data_files(void *ctx, void *out) {
    (void)out;
    const Config *cfg = ctx;
    TokenSet train, val;
    if (open_data_here(cfg, &train, &val) != 0) return -1;
    int rc = data_check_storage(&train) == 0 ? 0 : ct_fail_prefix("train_files");
    if (rc == 0 && val.num_files) {
        ValData v;
        memset(&v, 0, sizeof v);
        if ((rc = data_check_storage(&val)) != 0) ct_fail_prefix("val_files");
        if (rc == 0) rc = val_load(cfg, &val, &v);
        val_free(&v);
    }
    data_free_set(&train);
    data_free_set(&val);
    return rc;
}

int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    char what[4500];
    snprintf(what, sizeof what, "checking the data files (train_files '%s'%s%s%s; damaged HDF5 structure?)",
             cfg->train_files, cfg->val_files[0] ? ", val_files '" : "", cfg->val_files, cfg->val_files[0] ? "'" : "");
    if (ct_run_isolated(what, check_data_files, (void *)cfg, NULL, 0, DATA_CHECK_TIMEOUT_S) != 0) return -1;
    return open_data_here(cfg, train, val);
}

static void report_scan(void *ctx, int64_t done, int64_t total) {
    (void)total;
    progress_update(ctx, done);
}

int train_check_tokens(const TokenSet *train, const DistInfo *dist, int rank, int world) {
    /* this rank's share: files rank, rank + world, ... (a view: the file entries are borrowed) */
    TokenSet mine = *train;
    mine.files = ct_calloc((size_t)train->num_files, sizeof *mine.files, "training file share");
    mine.num_files = 0;
    mine.total_tokens = 0;
    for (int i = rank; i < train->num_files; i += world) {
        mine.files[mine.num_files++] = train->files[i];
        mine.total_tokens += train->files[i].num_tokens;
    }
    double start = ct_now_ms();
    Progress progress;
    progress_begin(&progress, "checking training tokens", "tokens", mine.total_tokens);
    const int rc = mine.num_files > 0 && data_scan_tokens(&mine, NULL, report_scan, &progress) != 0
                       ? ct_fail_prefix("train_files")
                       : 0;
    progress_end(&progress);
    free(mine.files);
    /* the lowest failing rank's message goes to every rank (rank 0 prints it); a stop asked for
     * meanwhile is the training loop's */
    if (dist_agree_errors(dist, rc, "the check of the training tokens") != 0) return -1;
    int with_crc = 0;
    for (int i = 0; i < train->num_files; i++) with_crc += train->files[i].tokens_crc32 >= 0;
    printf("train data: checked all %lld tokens in %.1f s: below vocab_size, tokens_crc32 matches in %d of %d "
           "file(s)\n", (long long)train->total_tokens, (ct_now_ms() - start) / 1e3, with_crc, train->num_files);
    return 0;
}
