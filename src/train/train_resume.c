/* train_resume.c — where a run starts (resume = auto | none | PATH), the software stack compared
 * with the resumed checkpoint's, and continuing metrics.jsonl after a resume. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "checkpoint.h"
#include "common.h"
#include "trainer.h"

static void report_changed_key(const char *key, const char *old_value, const char *new_value) {
    printf("resume: %s changed from %s to %s\n", key, old_value, new_value);
}

static void warn_bad_checkpoint(const char *path, const char *reason) {
    fprintf(stderr, "ctrain: warning: checkpoint %s is not usable (%s); trying the previous one\n", path, reason);
}

static int load_from(Trainer *t, const char *path, int verified) {
    CheckpointInfo info;
    if (checkpoint_load(path, verified, t->cfg, &t->st, &t->train_set, &info, report_changed_key) != 0)
        return ct_fail_prefix("cannot resume from %s", path);
    t->step = info.step;
    t->training_ms = info.training_time_ms;
    t->start_cursor = info.cursor;
    t->last_saved_step = info.step;
    for (int i = 0; i < info.num_extras; i++) {
        if (!strcmp(info.extra_names[i], "last_val_step")) t->last_val_step = info.extra_values[i];
        if (!strcmp(info.extra_names[i], "last_val_loss")) t->last_val_loss = info.extra_values[i];
        if (!strcmp(info.extra_names[i], "last_val_bpb")) t->last_val_bpb = info.extra_values[i];
    }
    t->saved_val_step = t->last_val_step; /* what the file holds */
    snprintf(t->resumed_stack, sizeof t->resumed_stack, "%s", info.stack ? info.stack : "");
    int64_t expect = info.step * config_step_stream_tokens(t->cfg);
    int rc = 0;
    if (info.cursor.stream_tokens != expect)
        rc = ct_fail("checkpoint %s: the loader has taken %lld tokens, but %lld steps of this batch geometry take %lld",
                     path, (long long)info.cursor.stream_tokens, (long long)info.step, (long long)expect);
    if (rc == 0) {
        printf("resumed from %s: step %lld, %lld tokens, train_time %.0fms\n", path, (long long)info.step,
               (long long)info.cursor.stream_tokens, info.training_time_ms);
        if (info.world_size != t->world)
            printf("note: the checkpoint was written by %d rank(s), this run has %d: every step reads the same "
                   "tokens, but sums run in another order, so the bits may differ from an uninterrupted run\n",
                   info.world_size, t->world);
        if (info.device && strcmp(info.device, t->cfg->device) != 0)
            fprintf(stderr, "ctrain: warning: the checkpoint was written on device %s, this run uses %s: "
                    "training continues from the same fp32 weights, but the bits will differ\n",
                    info.device, t->cfg->device);
    }
    checkpoint_info_free(&info);
    return rc;
}

/* The stack item starting at p (a "name=value" of a "; "-separated stack): its length in *len;
 * returns where the next item starts, NULL after the last. */
static const char *stack_item(const char *p, size_t *len) {
    const char *end = strstr(p, "; ");
    *len = end ? (size_t)(end - p) : strlen(p);
    return end ? end + 2 : NULL;
}

/* Whether item (len bytes) is one of stack's items. */
static int stack_has(const char *stack, const char *item, size_t len) {
    for (const char *p = *stack ? stack : NULL; p;) {
        size_t n;
        const char *next = stack_item(p, &n);
        if (n == len && !strncmp(p, item, len)) return 1;
        p = next;
    }
    return 0;
}

/* The items of a missing from b, "; "-separated, into out. */
static void stack_missing(const char *a, const char *b, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (const char *p = *a ? a : NULL; p && n < cap;) {
        size_t len;
        const char *next = stack_item(p, &len);
        if (!stack_has(b, p, len)) n += (size_t)snprintf(out + n, cap - n, "%s%.*s", n ? "; " : "", (int)len, p);
        p = next;
    }
}

void trainer_note_stack(Trainer *t) {
    int n = snprintf(t->stack, sizeof t->stack, "%s", t->backend->stack);
    if (t->dist->nccl && n >= 0 && (size_t)n < sizeof t->stack) {
        char nccl[256];
        dist_nccl_stack(nccl, sizeof nccl);
        snprintf(t->stack + n, sizeof t->stack - (size_t)n, "%s%s", n ? "; " : "", nccl);
    }
    printf("stack: %s\n", t->stack);
    if (!t->resumed_stack[0] || !strcmp(t->resumed_stack, t->stack)) return;
    char was[1024], now[1024];
    stack_missing(t->resumed_stack, t->stack, was, sizeof was);
    stack_missing(t->stack, t->resumed_stack, now, sizeof now);
    printf("note: the checkpoint was written with %s; this run has %s: training continues from the same state, but "
           "bits are promised only for the same stack (docs/checkpoint-format.md)\n",
           was[0] ? was : "no item this run lacks", now[0] ? now : "no item the checkpoint lacks");
}

/* Rank 0's half: which checkpoint to start from (path "" = fresh); *verified = 1 when it was
 * just verified (in a child process) while choosing it. */
static int choose_start(Trainer *t, char *path, size_t cap, int *exit_code, int *verified) {
    const Config *cfg = t->cfg;
    path[0] = '\0';
    *exit_code = CT_EXIT_FAILURE;
    if (!strcmp(cfg->resume, "none")) {
        int has = checkpoint_dir_has_checkpoints(t->ckpt_dir);
        if (has < 0) return -1;
        if (has > 0 && !cfg->overwrite) {
            *exit_code = CT_EXIT_USAGE;
            return ct_fail("resume = none, but %s already holds checkpoints of an earlier run; use resume=auto to "
                           "continue it, resume=PATH to start from one file, or overwrite=1 to start afresh "
                           "(the earlier run's checkpoints, metrics.jsonl and config.txt are then moved aside, to "
                           "names ending in .replaced-<UTC time>)",
                           t->ckpt_dir);
        }
        if (has > 0) {
            /* overwrite=1: move the old run's checkpoints aside rather than delete them, and so
             * that a fallback can never pick up a checkpoint of the old run */
            char suffix[64], aside[4400];
            time_t now = time(NULL);
            struct tm tm;
            gmtime_r(&now, &tm);
            snprintf(suffix, sizeof suffix, ".replaced-%04d%02d%02dT%02d%02d%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
            snprintf(aside, sizeof aside, "%s%s", t->ckpt_dir, suffix);
            if (rename(t->ckpt_dir, aside) != 0)
                return ct_fail("overwrite=1: cannot move %s aside to %s: %s", t->ckpt_dir, aside, strerror(errno));
            printf("overwrite=1: moved the earlier run's checkpoints to %s\n", aside);
            /* its history and configuration go with them, not truncated by the new run */
            static const char *const companions[] = {"metrics.jsonl", "config.txt"};
            for (int i = 0; i < 2; i++) {
                char from[4300];
                snprintf(from, sizeof from, "%s/%s", cfg->out_dir, companions[i]);
                snprintf(aside, sizeof aside, "%s%s", from, suffix);
                if (rename(from, aside) == 0) printf("overwrite=1: moved %s to %s\n", from, aside);
                else if (errno != ENOENT)
                    return ct_fail("overwrite=1: cannot move %s aside to %s: %s", from, aside, strerror(errno));
            }
        }
        printf("resume: none, starting from the initial weights (seed %lld)\n", (long long)cfg->seed);
        return 0;
    }
    if (!strcmp(cfg->resume, "auto")) {
        int found = checkpoint_find_resumable(t->ckpt_dir, path, cap, warn_bad_checkpoint);
        if (found < 0) return ct_fail_prefix("resume = auto");
        *verified = found > 0;
        if (found == 0) {
            path[0] = '\0';
            printf("resume: no checkpoint in %s, starting from the initial weights (seed %lld)\n", t->ckpt_dir,
                   (long long)cfg->seed);
        }
        return 0;
    }
    snprintf(path, cap, "%s", cfg->resume);
    return 0;
}

int trainer_resume(Trainer *t, int *exit_code) {
    snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s/checkpoints", t->cfg->out_dir);
    t->step = 0;
    t->training_ms = 0;
    t->start_cursor = loader_cursor_start();
    t->last_saved_step = -1;
    /* Rank 0 decides (it alone may move files aside) and tells the others, so every rank
     * loads the same file. */
    struct {
        int rc, exit_code, verified;
        char path[4400];
    } choice;
    memset(&choice, 0, sizeof choice);
    if (t->rank == 0)
        choice.rc = choose_start(t, choice.path, sizeof choice.path, &choice.exit_code, &choice.verified);
    if (dist_bcast(t->dist, &choice, sizeof choice, 0) != 0) return -1;
    *exit_code = choice.exit_code ? choice.exit_code : CT_EXIT_FAILURE;
    if (choice.rc != 0) return t->rank == 0 ? -1 : ct_fail("rank 0 could not decide where to start (see its error)");
    *exit_code = CT_EXIT_FAILURE;
    return choice.path[0] ? load_from(t, choice.path, choice.verified) : 0;
}

/* A metrics line as ctrain writes it, {"step": N, ...} and a newline: 1 with its step. */
static int is_whole_record(const char *line, long long *step) {
    size_t n = strlen(line);
    return n >= 2 && line[n - 1] == '\n' && line[n - 2] == '}' && sscanf(line, "{\"step\": %lld", step) == 1;
}

/* Keep the lines of steps before `step`, the training line of `step` itself, and its validation
 * line when the checkpoint holds that validation (val_done: validation runs before the step's
 * checkpoint is written); otherwise the resumed loop validates `step` again and writes the line
 * anew (a checkpoint written on a stop request, before the step's validation). A line cut short
 * by a crash or a full disk (no closing "}" and newline) is dropped, so the file stays one JSON
 * object per line. */
static int keep_line(const char *line, int64_t step, int val_done) {
    long long s;
    if (!is_whole_record(line, &s)) return 0;
    if (s < step) return 1;
    return s == step && (val_done || strstr(line, "\"train_loss\"") != NULL);
}

int trainer_open_metrics(Trainer *t) {
    char path[4300], tmp[4400];
    snprintf(path, sizeof path, "%s/metrics.jsonl", t->cfg->out_dir);
    if (t->step == 0) {
        t->metrics = ct_fopen_nofollow(path, "w");
        if (!t->metrics) return ct_fail("cannot write '%s': %s", path, ct_open_error(errno));
        return 0;
    }
    /* Rewrite through a temporary file: a crash here must not lose the history. */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *in = ct_fopen_nofollow(path, "r");
    if (!in && errno != ENOENT) return ct_fail("cannot read '%s': %s", path, ct_open_error(errno));
    FILE *out = ct_fopen_nofollow(tmp, "w");
    if (!out) {
        int e = errno;
        if (in) fclose(in);
        return ct_fail("cannot write '%s': %s", tmp, ct_open_error(e));
    }
    if (in) {
        /* A damaged line inside the file (not the last one, which a crash may cut short) is
         * worth a word: history is being dropped. */
        char *line = NULL, *held = NULL;
        size_t cap = 0;
        long number = 0, held_number = 0;
        for (ssize_t n; (n = getline(&line, &cap, in)) >= 0;) {
            number++;
            if (held) {
                fprintf(stderr, "ctrain: warning: '%s' line %ld is not one whole JSON object (damaged: '%.60s'); "
                        "dropped\n", path, held_number, held);
                free(held);
                held = NULL;
            }
            long long step;
            if (keep_line(line, t->step, t->last_val_step == (double)t->step)) fputs(line, out);
            else if (!is_whole_record(line, &step)) {
                held = ct_strdup(line);
                held[strcspn(held, "\n")] = '\0';
                held_number = number;
            }
        }
        free(held);
        free(line);
        fclose(in);
    }
    int write_failed = ferror(out);
    if ((fclose(out) != 0) | write_failed || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return ct_fail("cannot rewrite '%s': %s", path, strerror(e));
    }
    t->metrics = ct_fopen_nofollow(path, "a");
    if (!t->metrics) return ct_fail("cannot append to '%s': %s", path, ct_open_error(errno));
    return 0;
}
