/* train_resume.c — where a run starts (resume = auto | none | PATH), the software stack compared
 * with the resumed checkpoint's, and continuing metrics.jsonl after a resume. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "common.h"
#include "fault.h"
#include "trainer.h"

static void report_changed_key(const char *key, const char *old_value, const char *new_value) {
    printf("resume: %s changed from %s to %s\n", key, old_value, new_value);
}

static void warn_bad_checkpoint(const char *path, const char *reason) {
    fprintf(stderr, "ctrain: warning: checkpoint %s is not usable (%s); trying the previous one\n", path, reason);
}

/* Load path into t; *from receives the file's lineage, *crc its content checksum. */
static int load_from(Trainer *t, const char *path, int verified, CheckpointLineage *from, uint32_t *crc) {
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
    *from = info.lineage;
    *crc = info.content_crc32;
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

/* What a start from a checkpoint does besides loading it (decided by rank 0). */
typedef struct {
    int new_lineage;  /* resume=PATH: a new lineage starts from PATH */
    int keep_history; /* ... and out_dir's metrics.jsonl holds PATH's history up to its step */
} StartPlan;

/* resume=PATH (path holds it). A requeued job gives the same PATH again: once out_dir's newest
 * valid checkpoint descends from PATH (its lineage started there: the same step and content
 * checksum, or, PATH having been pruned since, the same path), the run continues from that
 * checkpoint instead of throwing its work away. Otherwise a new lineage starts from PATH; a
 * newest checkpoint of another line of training is worth a warning (its files are moved aside
 * once PATH has loaded, trainer_resume). */
static int choose_explicit(Trainer *t, char *path, size_t cap, int *verified, StartPlan *plan) {
    const Config *cfg = t->cfg;
    plan->new_lineage = 1;
    CheckpointLineage from, newest_lineage;
    int64_t from_step = -1, newest_step;
    uint32_t from_crc = 0, newest_crc;
    struct stat st;
    int missing = stat(cfg->resume, &st) != 0 && errno == ENOENT;
    int known = !missing && checkpoint_read_lineage(cfg->resume, &from, &from_step, &from_crc) == 0;
    char newest[4400];
    int found = checkpoint_find_resumable(t->ckpt_dir, newest, sizeof newest, warn_bad_checkpoint);
    ct_error_clear(); /* none valid: PATH is asked for, out_dir's files are not needed */
    if (found <= 0 || checkpoint_read_lineage(newest, &newest_lineage, &newest_step, &newest_crc) != 0) {
        ct_error_clear();
        return 0;
    }
    const CheckpointLineage *n = &newest_lineage;
    plan->keep_history = known && checkpoint_lineage_has(n, &from, from_step);
    if (known && newest_step == from_step && newest_crc == from_crc) return 0; /* PATH is the newest itself */
    if (n->origin_step >= 0 && (known ? n->origin_step == from_step && n->origin_crc32 == (int64_t)from_crc
                                      : missing && !strcmp(n->origin_path, cfg->resume))) {
        if (strlen(newest) >= cap) return ct_fail("buffer of %zu bytes too small for '%s'", cap, newest);
        snprintf(path, cap, "%s", newest);
        *verified = 1;
        plan->new_lineage = 0;
        printf("resume: %s (step %lld) descends from resume=%s (its lineage %s started there at step %lld%s); "
               "continuing from it\n",
               newest, (long long)newest_step, cfg->resume, n->id, (long long)n->origin_step,
               known ? "" : ", a file that no longer exists");
        return 0;
    }
    fprintf(stderr, "ctrain: warning: resume=%s: the newest checkpoint in %s, %s (step %lld, lineage %s), does not "
            "descend from it; a new lineage starts from %s, and the checkpoints that are not part of its history "
            "are moved aside\n",
            cfg->resume, t->ckpt_dir, newest, (long long)newest_step, n->id[0] ? n->id : "(not recorded)",
            cfg->resume);
    return 0;
}

/* A new lineage from the checkpoint just loaded (rank 0): what out_dir holds of the run it
 * abandons (checkpoints that are not part of the new lineage's history, metrics.jsonl,
 * config.txt, final_model.*) goes aside, so that pruning, a fallback or the end of the run
 * never mixes the two; metrics.jsonl's lines up to the resumed step are kept when they are the
 * new lineage's history too. */
static int start_lineage(Trainer *t, const StartPlan *plan) {
    const Config *cfg = t->cfg;
    char metrics[4300], suffix[64], aside[4400];
    struct stat st;
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", cfg->out_dir);
    int has = checkpoint_dir_has_checkpoints(t->ckpt_dir);
    if (has < 0) return -1;
    if (!has && lstat(metrics, &st) != 0) return 0; /* a fresh out_dir */
    if (trainer_aside_suffix(cfg->out_dir, suffix, sizeof suffix) != 0) return -1;
    snprintf(aside, sizeof aside, "%s%s", t->ckpt_dir, suffix);
    int moved = 0;
    if (checkpoint_set_aside(t->ckpt_dir, &t->lineage, aside, &moved) != 0)
        return ct_fail_prefix("resume=%s: moving the other lineage's checkpoints aside", cfg->resume);
    if (moved) printf("resume: new lineage %s from %s: moved %d checkpoint(s) of the abandoned lineage to %s\n",
                      t->lineage.id, cfg->resume, moved, aside);
    char why[64];
    snprintf(why, sizeof why, "resume: new lineage %s", t->lineage.id);
    if (trainer_move_aside(cfg->out_dir, suffix, why, t->metrics_from, sizeof t->metrics_from) != 0) return -1;
    if (!plan->keep_history) t->metrics_from[0] = '\0'; /* the new metrics.jsonl starts empty */
    return 0;
}

/* Rank 0's half: which checkpoint to start from (path "" = fresh); *verified = 1 when it was
 * just verified (in a child process) while choosing it; *plan says whether it starts a new
 * lineage. */
static int choose_start(Trainer *t, char *path, size_t cap, int *exit_code, int *verified, StartPlan *plan) {
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
                           "(the earlier run's checkpoints, metrics.jsonl, config.txt and final_model.* are then moved "
                           "aside, to names ending in .replaced-<UTC time>)",
                           t->ckpt_dir);
        }
        if (has > 0) {
            /* overwrite=1: move the old run's checkpoints aside rather than delete them, and so
             * that a fallback can never pick up a checkpoint of the old run; its history,
             * configuration and artifact go with them, so the new run's folder holds only its own */
            char suffix[64], aside[4400];
            if (trainer_aside_suffix(cfg->out_dir, suffix, sizeof suffix) != 0) return -1;
            snprintf(aside, sizeof aside, "%s%s", t->ckpt_dir, suffix);
            if (rename(t->ckpt_dir, aside) != 0)
                return ct_fail("overwrite=1: cannot move %s aside to %s: %s", t->ckpt_dir, aside, strerror(errno));
            printf("overwrite=1: moved the earlier run's checkpoints to %s\n", aside);
            if (trainer_move_aside(cfg->out_dir, suffix, "overwrite=1", NULL, 0) != 0) return -1;
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
    return choose_explicit(t, path, cap, verified, plan);
}

int trainer_resume(Trainer *t, int *exit_code) {
    snprintf(t->ckpt_dir, sizeof t->ckpt_dir, "%s/checkpoints", t->cfg->out_dir);
    t->step = 0;
    t->training_ms = 0;
    t->start_cursor = loader_cursor_start();
    t->last_saved_step = t->written_step = -1;
    t->metrics_from[0] = '\0';
    /* Rank 0 decides (it alone may move files aside) and tells the others, so every rank
     * loads the same file. */
    struct {
        int rc, exit_code, verified;
        StartPlan plan;
        char path[4400];
    } choice;
    memset(&choice, 0, sizeof choice);
    if (t->rank == 0)
        choice.rc = choose_start(t, choice.path, sizeof choice.path, &choice.exit_code, &choice.verified, &choice.plan);
    if (dist_bcast(t->dist, &choice, sizeof choice, 0) != 0) return -1;
    *exit_code = choice.exit_code ? choice.exit_code : CT_EXIT_FAILURE;
    if (choice.rc != 0) return t->rank == 0 ? -1 : ct_fail("rank 0 could not decide where to start (see its error)");
    *exit_code = CT_EXIT_FAILURE;
    if (!choice.path[0]) {
        checkpoint_lineage_start(&t->lineage, NULL, 0, 0, NULL);
        return 0;
    }
    CheckpointLineage from;
    uint32_t crc = 0;
    int rc = fault_error_stage("resume", -1);
    if (rc == 0) rc = load_from(t, choice.path, choice.verified, &from, &crc);
    if (choice.plan.new_lineage) {
        /* files are moved aside only once every rank has the state: a refused resume leaves
         * out_dir as it was */
        char what[4500];
        snprintf(what, sizeof what, "the resume from %s", choice.path);
        if (dist_agree_errors(t->dist, rc, what) != 0) {
            t->failed_together = 1; /* every rank knows: none waits for another, rank 0 says why */
            return -1;
        }
        checkpoint_lineage_start(&t->lineage, &from, t->step, crc, t->cfg->resume);
        /* a finished run does nothing more (train.c): nothing to replace */
        if (t->rank == 0 && t->step < t->cfg->iterations && start_lineage(t, &choice.plan) != 0) return -1;
        return 0;
    }
    if (rc != 0) return -1;
    /* the same lineage goes on; a file of an older ctrain had none: one starts from it */
    if (from.id[0]) t->lineage = from;
    else checkpoint_lineage_start(&t->lineage, &from, t->step, crc, choice.path);
    return 0;
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
    /* a new lineage's history is read from the abandoned lineage's file, moved aside */
    const char *from = t->metrics_from[0] ? t->metrics_from : path;
    FILE *in = ct_fopen_nofollow(from, "r");
    if (!in && errno != ENOENT) return ct_fail("cannot read '%s': %s", from, ct_open_error(errno));
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
                        "dropped\n", from, held_number, held);
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
