/* train_aside.c — moving an earlier run's files in out_dir aside instead of deleting or
 * mixing them: overwrite=1 (the whole earlier run) and a resume that starts a new lineage (the
 * abandoned lineage's checkpoints, history, configuration and artifact). Every name moved
 * aside gets the same suffix, .replaced-<UTC time>, made unique within out_dir. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common.h"
#include "trainer.h"

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

/* 1 if some name in dir ends with suffix (a file moved aside earlier under it). */
static int suffix_taken(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int taken = 0;
    struct dirent *e;
    while (!taken && (e = readdir(d)) != NULL) taken = ends_with(e->d_name, suffix);
    closedir(d);
    return taken;
}

int trainer_aside_suffix(const char *out_dir, char *suffix, size_t cap) {
    /* the time says when; a counter keeps two replacements within one second apart (a rename
     * onto a name taken by the first would silently replace what it moved aside) */
    char base[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(base, sizeof base, ".replaced-%Y%m%dT%H%M%SZ", &tm);
    for (int n = 1; n <= 1000; n++) {
        if (n == 1) snprintf(suffix, cap, "%s", base);
        else snprintf(suffix, cap, "%s-%d", base, n);
        if (!suffix_taken(out_dir, suffix)) return 0;
    }
    return ct_fail("'%s': every name ending in %s-N (N up to 1000) is taken; move the earlier runs' files away",
                   out_dir, base);
}

/* A run's own file or one of its artifacts, not already moved aside. */
static int is_run_file(const char *name) {
    if (!strcmp(name, "metrics.jsonl") || !strcmp(name, "config.txt")) return 1;
    return !strncmp(name, "final_model.", 12) && !strstr(name, ".replaced-");
}

int trainer_move_aside(const char *out_dir, const char *suffix, const char *why, char *metrics_aside, size_t cap) {
    if (metrics_aside) metrics_aside[0] = '\0';
    DIR *d = opendir(out_dir);
    if (!d) return errno == ENOENT ? 0 : ct_fail("cannot read '%s': %s", out_dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char from[4400], to[4500];
        struct stat st;
        if (!is_run_file(e->d_name)) continue;
        snprintf(from, sizeof from, "%s/%s", out_dir, e->d_name);
        if (lstat(from, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        snprintf(to, sizeof to, "%s%s", from, suffix);
        if (rename(from, to) != 0) {
            rc = ct_fail("%s: cannot move %s aside to %s: %s", why, from, to, strerror(errno));
            break;
        }
        printf("%s: moved %s to %s\n", why, from, to);
        if (metrics_aside && !strcmp(e->d_name, "metrics.jsonl")) snprintf(metrics_aside, cap, "%s", to);
    }
    closedir(d);
    return rc;
}
