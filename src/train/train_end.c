/* train_end.c — the work of a run's end after its last step (the last step's validation, the
 * EMA/SWA validation, the golf artifact and its round trip, the artifact's test-time-training
 * score on every rank), what of it is left, and the checks of that work that can be made before
 * the first step.
 *
 * What is left is recorded in out_dir/end_of_run.txt (written atomically by rank 0 when the run
 * starts, rewritten as each part is done, removed when the end is complete), so that a run
 * stopped (exit 75) or killed during its end is finished by the next call of the same command
 * instead of being reported finished. The last step's validation needs no record: the final
 * checkpoint says whether it holds it. The artifact's absence is seen too, so a run finished
 * before golf_artifact = 1 was asked for makes its artifact. The test-time training is a part of
 * its own, so a run stopped during it does it again without writing the artifact again. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "golf_artifact.h"
#include "trainer.h"

#define END_RECORD "end_of_run.txt"

static const struct { unsigned part; const char *word, *text; } parts[] = {
    {TRAINER_END_AVERAGED, "averaged_validation", "the EMA/SWA weights' validation"},
    {TRAINER_END_ARTIFACT, "golf_artifact", "the golf artifact and its round-trip evaluation"},
    {TRAINER_END_TTT, "golf_ttt", "the golf artifact's test-time-training evaluation"},
};

unsigned trainer_end_asked(const Trainer *t) {
    const Config *cfg = t->cfg;
    unsigned asked = 0;
    if ((cfg->ema_enabled || cfg->swa_enabled) && t->val.tokens) asked |= TRAINER_END_AVERAGED;
    if (cfg->golf_artifact) asked |= TRAINER_END_ARTIFACT;
    /* as golf_write_and_evaluate: the round trip, and so its test-time training, needs val_files */
    if (cfg->golf_artifact && cfg->ttt_enabled && cfg->val_files[0]) asked |= TRAINER_END_TTT;
    return asked;
}

int trainer_artifact_path(const Config *cfg, char *path, size_t cap) {
    return golf_run_artifact_path(cfg->out_dir, cfg->golf_format, path, cap);
}

int trainer_gptq_hessians(Trainer *t, GolfHessians *h) {
    char path[4300];
    struct stat sb;
    snprintf(path, sizeof path, "%s/" GOLF_HESSIANS_FILE, t->cfg->out_dir);
    if (stat(path, &sb) == 0 && golf_hessians_read(&t->st.spec, path, h) == 0) {
        if (h->step == t->st.adam_step && h->batches == t->cfg->gptq_calibration_batches) {
            printf("GPTQ: the Hessians of step %lld from %s\n", (long long)h->step, path);
            return 0;
        }
        golf_hessians_free(h); /* another step's, or other batches: collected again below */
    }
    ct_error_clear();
    if (golf_collect_hessians(t->cfg, &t->st, h) != 0) return -1;
    if (golf_hessians_write(&t->st.spec, h, path) != 0) {
        golf_hessians_free(h);
        return -1;
    }
    printf("hessians -> %s\n", path);
    return 0;
}

int trainer_end_record(const Trainer *t, unsigned left) {
    if (t->rank != 0) return 0;
    char path[4300], tmp[4400];
    snprintf(path, sizeof path, "%s/" END_RECORD, t->cfg->out_dir);
    if (!left) {
        if (unlink(path) != 0 && errno != ENOENT) return ct_fail("cannot remove '%s': %s", path, strerror(errno));
        return 0;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = ct_fopen_nofollow(tmp, "w");
    if (!f) return ct_fail("cannot write '%s': %s", tmp, ct_open_error(errno));
    fprintf(f, "# ctrain: the end of this run is not complete; the same command again does what is left\nleft:");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (left & parts[i].part) fprintf(f, " %s", parts[i].word);
    fprintf(f, "\n");
    int rc = ferror(f) ? -1 : 0;
    if ((fclose(f) != 0) | rc || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return ct_fail("cannot write '%s': %s", path, strerror(e));
    }
    return 0;
}

/* Rank 0: the parts the record names (0 without a record). */
static int read_record(const Config *cfg, unsigned *left) {
    char path[4300], line[512];
    snprintf(path, sizeof path, "%s/" END_RECORD, cfg->out_dir);
    *left = 0;
    FILE *f = ct_fopen_nofollow(path, "r");
    if (!f) return errno == ENOENT ? 0 : ct_fail("cannot read '%s': %s", path, ct_open_error(errno));
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "left:", 5))
            for (char *save = NULL, *w = strtok_r(line + 5, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
                for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
                    if (!strcmp(w, parts[i].word)) *left |= parts[i].part;
    fclose(f);
    return 0;
}

int trainer_end_left(Trainer *t, unsigned *left) {
    int rc = 0;
    unsigned found = 0;
    if (t->rank == 0) {
        rc = read_record(t->cfg, &found);
        char artifact[4300];
        struct stat sb;
        if (rc == 0 && t->cfg->golf_artifact && (rc = trainer_artifact_path(t->cfg, artifact, sizeof artifact)) == 0 &&
            stat(artifact, &sb) != 0)
            found |= TRAINER_END_ARTIFACT;
        /* the test-time training scores the artifact: whatever makes the artifact again scores it
         * again (a record of before it was a part of its own says golf_artifact alone) */
        if (found & TRAINER_END_ARTIFACT) found |= TRAINER_END_TTT;
    }
    int shared[2] = {rc, (int)found};
    if (t->world > 1 && dist_bcast(t->dist, shared, sizeof shared, 0) != 0) return -1;
    if (shared[0] != 0) return t->rank == 0 ? -1 : ct_fail("rank 0 could not read what is left of the run's end");
    /* only what this configuration asks for */
    *left = (unsigned)shared[1] & trainer_end_asked(t);
    if (t->val.tokens && t->last_val_step != (double)t->step) *left |= TRAINER_END_FINAL_VAL;
    return 0;
}

/* Rank 0: the artifact written and its round trip printed (the test-time training is every
 * rank's, after). */
static int write_artifact(Trainer *t, const char *path, GolfFormat format) {
    const Config *cfg = t->cfg;
    /* the code's size: ctrain's own; an artifact above the cap is still written (said OVER) */
    GolfOptions golf = {format, cfg->val_files[0] != '\0', -1, NULL, NULL, 0, 1};
    GolfHessians h = {0};
    if (golf_format_is_gptq(format)) {
        if (trainer_gptq_hessians(t, &h) != 0) return -1;
        golf.hessians = (const float *const *)h.h;
    }
    const int rc = golf_write_and_evaluate(cfg, &t->st, path, &golf);
    golf_hessians_free(&h);
    return rc;
}

int trainer_end_golf(Trainer *t, unsigned *left) {
    const Config *cfg = t->cfg;
    if (!(*left & (TRAINER_END_ARTIFACT | TRAINER_END_TTT))) return 0;
    char path[4300];
    GolfFormat format;
    /* the format is known: trainer_end_check refused any other before the first step */
    if (trainer_artifact_path(cfg, path, sizeof path) != 0 || golf_format_from_name(cfg->golf_format, &format) != 0)
        return -1;
    /* the weights are in the final checkpoint: the training backend can go (on the ranks that
     * run something here) */
    if (t->rank == 0 || (*left & TRAINER_END_TTT)) {
        t->backend->destroy(t->backend);
        t->backend = NULL;
    }
    int rc = 0, have = 0; /* have: t->st holds the artifact's weights as a reader gets them */
    if (*left & TRAINER_END_ARTIFACT) {
        /* rank 0 alone; the other ranks take it as done (rank 0 records what is left) */
        if (t->rank == 0 && (rc = write_artifact(t, path, format)) == 0) have = cfg->val_files[0] != '\0';
        if (rc == 0) *left &= ~(unsigned)TRAINER_END_ARTIFACT;
        if (rc == 0) rc = trainer_end_record(t, *left);
    }
    if (!(*left & TRAINER_END_TTT)) return rc; /* a failure of rank 0's alone: train.c ends the job */
    /* rank 0's artifact (written, or its error, or a stop asked of any rank) reaches every rank
     * before they read it; then every rank's weights, before the evaluation, which agrees at
     * each of its batches */
    const char *what = "the golf artifact's test-time-training evaluation";
    if (dist_agree(t->dist, rc, what) != 0 ||
        dist_agree(t->dist, have ? 0 : golf_read(&t->st.spec, format, path, t->st.params), what) != 0 ||
        golf_ttt_evaluate(cfg, &t->st, t->dist, format) != 0) {
        t->failed_together = 1;
        return -1;
    }
    *left &= ~(unsigned)TRAINER_END_TTT;
    return 0;
}

void trainer_end_describe(unsigned left, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    if (left & TRAINER_END_FINAL_VAL) n += (size_t)snprintf(buf, cap, "the last step's validation");
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && n < cap; i++)
        if (left & parts[i].part) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", parts[i].text);
}

int trainer_end_check(const Config *cfg, const TokenSet *val) {
    char artifact[4300];
    if (cfg->golf_artifact) {
        if (trainer_artifact_path(cfg, artifact, sizeof artifact) != 0) return -1;
        struct stat sb;
        if (lstat(artifact, &sb) == 0 && !S_ISREG(sb.st_mode))
            return ct_fail("golf_artifact = 1: '%s' exists and is not a regular file; the artifact cannot be written "
                           "there (move it away)", artifact);
        /* the round trip evaluates on sequences of eval_seq_len (train_seq_len when 0) */
        if (cfg->val_files[0] && cfg->eval_seq_len > 0 && val->total_tokens < cfg->eval_seq_len + 1)
            return ct_fail("golf_artifact = 1, eval_seq_len = %lld: val_files '%s' hold %lld tokens, fewer than one "
                           "sequence of eval_seq_len + 1 = %lld for the artifact's round trip (lower eval_seq_len, "
                           "or give more validation data)",
                           (long long)cfg->eval_seq_len, cfg->val_files, (long long)val->total_tokens,
                           (long long)cfg->eval_seq_len + 1);
    }
    return 0;
}
