/* ckpt_aside.c — moving the checkpoints of an abandoned lineage out of a checkpoint directory
 * into another (a resume that starts a new lineage), so that the directory holds one line of
 * training: pruning counts only its files and a fallback finds only them. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_internal.h"
#include "common.h"

static int move_into(const char *dir, const char *name, const char *aside_dir, int *made) {
    char from[4400], to[4400];
    if (!*made) {
        if (mkdir(aside_dir, 0777) != 0 && errno != EEXIST)
            return ct_fail("cannot create '%s': %s", aside_dir, strerror(errno));
        *made = 1;
    }
    snprintf(from, sizeof from, "%s/%s", dir, name);
    snprintf(to, sizeof to, "%s/%s", aside_dir, name);
    if (rename(from, to) != 0) return ct_fail("cannot move '%s' to '%s': %s", from, to, strerror(errno));
    return 0;
}

int checkpoint_set_aside(const char *dir, const CheckpointLineage *keep, const char *aside_dir, int *moved) {
    *moved = 0;
    char **names;
    int count = ckpt_list_dir(dir, &names);
    if (count < 0) return -1;
    char latest[256] = "";
    if (ckpt_read_latest(dir, latest, sizeof latest) < 0) latest[0] = '\0';
    int rc = 0, made = 0, latest_moved = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        char path[4400];
        CheckpointLineage l;
        int64_t step;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (checkpoint_read_lineage(path, &l, &step, NULL) == 0 && checkpoint_lineage_has(keep, &l, step)) continue;
        /* a newer ctrain's file is left where it is, as pruning leaves it: that ctrain may
         * still resume it, and a save of its step refuses to replace it */
        int64_t version;
        if (ckpt_newer_format(path, &version)) continue;
        rc = move_into(dir, names[i], aside_dir, &made);
        if (rc == 0) {
            (*moved)++;
            latest_moved |= !strcmp(names[i], latest);
        }
    }
    ckpt_free_names(names, count);
    if (rc == 0) ct_error_clear(); /* an unreadable file's message: it was moved, not an error */
    if (rc == 0 && latest_moved) rc = move_into(dir, "latest", aside_dir, &made);
    if (rc == 0 && made && (ckpt_fsync_path(aside_dir, 1) != 0 || ckpt_fsync_path(dir, 1) != 0)) rc = -1;
    return rc;
}
