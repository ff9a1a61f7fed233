/* ckpt_dir.c — the checkpoint directory: step_NNNNNNNN.h5 names, the `latest` pointer, fsync of
 * files and directories, pruning old checkpoints, and finding the newest valid one to resume
 * from (resume=auto). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "common.h"

int64_t ckpt_name_step(const char *name) {
    if (strncmp(name, "step_", 5) != 0) return -1;
    const char *p = name + 5;
    int64_t step = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (digits == 18) return -1; /* would overflow; no run gets there */
        step = step * 10 + (*p - '0');
    }
    return digits > 0 && !strcmp(p, ".h5") ? step : -1;
}

static int is_regular_file(const char *dir, const char *name) {
    char path[4400];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int compare_by_step_desc(const void *a, const void *b) {
    const char *na = *(char *const *)a, *nb = *(char *const *)b;
    int64_t sa = ckpt_name_step(na), sb = ckpt_name_step(nb);
    if (sa != sb) return sa > sb ? -1 : 1;
    return -strcmp(na, nb); /* step_1.h5 and step_00000001.h5: any fixed order */
}

int ckpt_list_dir(const char *dir, char ***names) {
    *names = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return ct_fail("cannot read checkpoint directory '%s': %s", dir, strerror(errno));
    }
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (ckpt_name_step(e->d_name) < 0 || !is_regular_file(dir, e->d_name)) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(*names, (size_t)cap * sizeof *grown);
            if (!grown) {
                fprintf(stderr, "ctrain: error: out of memory listing '%s'\n", dir);
                exit(CT_EXIT_FAILURE);
            }
            *names = grown;
        }
        (*names)[count++] = ct_strdup(e->d_name);
    }
    closedir(d);
    if (count > 1) qsort(*names, (size_t)count, sizeof **names, compare_by_step_desc);
    return count;
}

void ckpt_free_names(char **names, int count) {
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
}

int ckpt_fsync_path(const char *path, int is_dir) {
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0));
    if (fd < 0) return ct_fail("cannot open '%s' to sync it: %s", path, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL) rc = ct_fail("cannot sync '%s' to disk: %s", path, strerror(errno));
    close(fd);
    return rc;
}

/* ---- latest ---- */

int ckpt_read_latest(const char *dir, char *name, size_t cap) {
    char path[4200], buf[256];
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        return ct_fail("cannot read '%s': %s", path, strerror(errno));
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
    if (n == 0) return ct_fail("'%s' is empty, expected the name of a checkpoint file such as step_00001000.h5", path);
    if (ckpt_name_step(buf) < 0 || strlen(buf) >= cap) {
        for (char *c = buf; *c; c++) /* a damaged file may hold anything: keep the message one readable line */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        return ct_fail("'%s' holds '%.80s', expected the name of a checkpoint file such as step_00001000.h5", path,
                       buf);
    }
    snprintf(name, cap, "%s", buf);
    return 1;
}

int ckpt_write_latest(const char *dir, const char *name) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return ct_fail("cannot create '%s': %s", tmp, strerror(errno));
    int ok = fprintf(f, "%s\n", name) > 0 && fflush(f) == 0;
    int err = errno;
    if (ok && fsync(fileno(f)) != 0 && errno != EINVAL) {
        ok = 0;
        err = errno;
    }
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        return ct_fail("cannot write '%s': %s", tmp, strerror(err));
    }
    ckpt_stage("latest-tmp-written");
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(err));
    }
    if (ckpt_fsync_path(dir, 1) != 0) return -1;
    ckpt_stage("latest-renamed");
    return 0;
}

/* ---- pruning ---- */

static void warn_unlink(const char *dir, const char *name, const char *what) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) != 0 && errno != ENOENT)
        fprintf(stderr, "ctrain: warning: cannot remove %s '%s': %s\n", what, path, strerror(errno));
}

/* Temporary files left by a save or `latest` update that was killed: only one run writes a
 * checkpoint directory, and it is not writing one now, so none of them is in use. */
static int is_leftover_tmp(const char *name) {
    return (!strncmp(name, "step_", 5) && strstr(name, ".h5.tmp.")) || !strncmp(name, "latest.tmp.", 11);
}

void ckpt_prune(const char *dir, int keep, const char *protect) {
    char **names;
    int count = ckpt_list_dir(dir, &names);
    if (count < 0) {
        fprintf(stderr, "ctrain: warning: not pruning old checkpoints: %s\n", ct_error());
        return;
    }
    char latest[256] = "";
    if (ckpt_read_latest(dir, latest, sizeof latest) < 0) latest[0] = '\0';
    /* the lineage being written (the file just saved): a file of another lineage (left by an
     * older ctrain, or copied in) is neither counted among the `keep` newest nor deleted */
    CheckpointLineage lineage, l;
    int64_t step;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, protect);
    int have_lineage = ckpt_read_lineage_here(path, &lineage, &step, NULL) == 0;
    /* A file holding another step than its name says (a copy under another name, which
     * verification refuses) must not take the place of a real one among the `keep` newest. */
    int kept = 0;
    for (int i = 0; i < count; i++) {
        int64_t version, held;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (have_lineage && ckpt_read_lineage_here(path, &l, &step, NULL) == 0 &&
            !checkpoint_lineage_has(&lineage, &l, step)) {
            fprintf(stderr, "ctrain: warning: '%s' belongs to lineage %s, not to %s's lineage %s; not counted in "
                    "keep_checkpoints, and left alone\n", path, l.id[0] ? l.id : "(not recorded)", protect,
                    lineage.id);
            continue;
        }
        if (kept < keep) {
            if (ckpt_misnamed(path, &held))
                fprintf(stderr, "ctrain: warning: '%s' holds step %lld, not the step its name says; not counted "
                        "in keep_checkpoints, and left alone\n", path, (long long)held);
            else
                kept++;
            continue;
        }
        if (!strcmp(names[i], protect) || !strcmp(names[i], latest)) continue;
        if (ckpt_newer_format(path, &version)) {
            fprintf(stderr, "ctrain: warning: not deleting '%s': written by a newer ctrain (format %lld)\n", path,
                    (long long)version);
            continue;
        }
        ckpt_stage("pruning");
        warn_unlink(dir, names[i], "old checkpoint");
    }
    ckpt_free_names(names, count);
    ct_error_clear(); /* a file whose lineage could not be read is pruned as before */

    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (is_leftover_tmp(e->d_name)) warn_unlink(dir, e->d_name, "leftover temporary file");
    closedir(d);
}

/* ---- finding checkpoints ---- */

int checkpoint_dir_has_checkpoints(const char *dir) {
    char **names;
    int count = ckpt_list_dir(dir, &names);
    if (count < 0) return -1;
    ckpt_free_names(names, count);
    return count > 0;
}

int checkpoint_find_resumable(const char *dir, char *path_out, size_t cap,
                              void (*warn)(const char *path, const char *reason)) {
    char **names;
    int count = ckpt_list_dir(dir, &names);
    if (count < 0) return -1;
    char latest[256] = "", path[4400];
    snprintf(path, sizeof path, "%s/latest", dir);
    int has_latest = ckpt_read_latest(dir, latest, sizeof latest);
    if (has_latest < 0) {
        if (warn) warn(path, ct_error());
        latest[0] = '\0';
    } else if (has_latest > 0) {
        int found = 0;
        for (int i = 0; i < count; i++) found |= !strcmp(names[i], latest);
        if (!found) {
            snprintf(path, sizeof path, "%s/%s", dir, latest);
            if (warn) warn(path, "named by 'latest' but missing; trying the other checkpoints");
            latest[0] = '\0';
        }
    }
    /* `latest` first: it is what the last completed save committed; then by descending step. */
    char **order = ct_calloc((size_t)count + 1, sizeof *order, "checkpoint list");
    int n = 0;
    if (latest[0]) order[n++] = latest;
    for (int i = 0; i < count; i++)
        if (strcmp(names[i], latest) != 0) order[n++] = names[i];
    int rc = 0, have_lineage = 0;
    char first_reason[1024] = "", first_path[256] = "";
    /* the lineage of the first file that says which (normally `latest`): an older file of
     * another lineage (one a resume from an older step abandoned) is never resumed from */
    CheckpointLineage lineage, l;
    int64_t step;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, order[i]);
        if (checkpoint_verify(path, NULL) == 0) {
            if (checkpoint_read_lineage(path, &l, &step, NULL) == 0 && have_lineage &&
                !checkpoint_lineage_has(&lineage, &l, step)) {
                char reason[1024];
                snprintf(reason, sizeof reason, "it belongs to lineage %s, not to %s's lineage %s: a run never falls "
                         "back to a checkpoint of another lineage", l.id[0] ? l.id : "(not recorded)", first_path,
                         lineage.id[0] ? lineage.id : "(not recorded)");
                if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%s", reason);
                if (warn) warn(path, reason);
                continue;
            }
            if (strlen(path) >= cap) rc = ct_fail("buffer of %zu bytes too small for '%s'", cap, path);
            else {
                snprintf(path_out, cap, "%s", path);
                rc = 1;
            }
            break;
        }
        /* A newer ctrain's checkpoint is not damaged: falling back to an older one would train
         * from the wrong state and, by pruning, delete the newer run. */
        int64_t version;
        if (ckpt_newer_format(path, &version)) {
            rc = ct_fail("'%s' was written by a newer ctrain (format %lld; this ctrain %s reads formats up to %d): resume "
                         "it with that ctrain, or move it away (resume=PATH or overwrite=1) to start over",
                         path, (long long)version, CT_VERSION, CKPT_FORMAT_VERSION);
            break;
        }
        if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%s", ct_error());
        if (warn) warn(path, ct_error());
        if (!have_lineage && checkpoint_read_lineage(path, &lineage, &step, NULL) == 0) {
            have_lineage = 1;
            snprintf(first_path, sizeof first_path, "%s", order[i]);
        }
    }
    if (rc == 0 && n > 0)
        rc = ct_fail("none of the %d checkpoint file(s) in '%s' is valid (the first tried: %s); move them away to "
                     "start over, or name a good one with resume=PATH",
                     n, dir, first_reason);
    free(order);
    ckpt_free_names(names, count);
    return rc;
}

/* dir's checkpoint: the one `latest` names, else the newest step_*.h5; 0 if it has none. */
static int newest_in(const char *dir, char *out, size_t cap) {
    char name[256];
    int has_latest = ckpt_read_latest(dir, name, sizeof name);
    if (has_latest < 0) return -1;
    if (has_latest == 0) {
        char **names;
        int n = ckpt_list_dir(dir, &names);
        if (n < 0) return -1;
        if (n > 0) snprintf(name, sizeof name, "%s", names[0]); /* sorted by descending step */
        ckpt_free_names(names, n);
        if (n == 0) return 0;
    }
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) return ct_fail("path too long: '%s/%s'", dir, name);
    return 1;
}

int checkpoint_resolve(const char *arg, char *out, size_t cap) {
    struct stat st;
    size_t n = strlen(arg);
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/checkpoints", arg);
        int found = newest_in(sub, out, cap);
        if (found == 0) found = newest_in(arg, out, cap);
        if (found < 0) return -1;
        if (found == 0)
            return ct_fail("'%s' is a directory without checkpoints (expected a checkpoint file, a run directory "
                           "with checkpoints/, or a checkpoints directory)", arg);
        return 0;
    }
    if (n >= 6 && !strcmp(arg + n - 6, "latest") && (n == 6 || arg[n - 7] == '/')) {
        char dir[4200], name[256];
        snprintf(dir, sizeof dir, "%.*s", n == 6 ? 1 : (int)(n - 7), n == 6 ? "." : arg);
        int found = ckpt_read_latest(dir, name, sizeof name);
        if (found < 0) return -1;
        if (found == 0) return ct_fail("cannot open '%s': No such file or directory", arg);
        if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) return ct_fail("path too long: '%s/%s'", dir, name);
        return 0;
    }
    if (n >= cap) return ct_fail("path too long: '%s'", arg);
    memcpy(out, arg, n + 1);
    return 0;
}
