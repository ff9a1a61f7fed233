/* golf_import.c — DATA_PATH's HDF5 copies (golf_import.h): naming a copy after what it is made
 * from, importing it beside the others with `ctrain data import-bin`'s own code (so a manual
 * import makes the same files), and the locks that keep a copy in place while a run reads it. */
#include "golf_import.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "crc32.h"
#include "dirlock.h"
#include "stop.h"

/* how long a rank waits for another process importing (the ranks of a job start together) */
#define IMPORT_WAIT_S 7200.0

/* The lock of the copy this process reads: held (shared) until the process ends, so that no
 * other ctrain removes or replaces the copy under it. Never closed: closing any descriptor of
 * the file would release the lock. */
static int held_copy_lock = -1;

/* The inputs, found and described. */
typedef struct {
    glob_t train, val;
    char *want;     /* import.txt's text */
    char name[96];  /* the copy's folder name */
} Plan;

static void plan_free(Plan *p) {
    globfree(&p->train);
    globfree(&p->val);
    free(p->want);
}

/* The shards of one split, sorted (glob's order); fails when there are none. */
static int find_shards(const char *data_path, const char *split, glob_t *g) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/fineweb_%s_*.bin", data_path, split);
    int rc = glob(pattern, 0, NULL, g);
    if (rc == GLOB_NOMATCH)
        return ct_fail("DATA_PATH = '%s': no fineweb_%s_*.bin shards in it (train_gpt.py's layout: the folder of "
                       "fineweb_train_*.bin and fineweb_val_*.bin, e.g. data/datasets/fineweb10B_sp1024)",
                       data_path, split);
    if (rc != 0) return ct_fail("DATA_PATH = '%s': cannot list '%s'", data_path, pattern);
    return 0;
}

/* "shard NAME SIZE MTIME": a shard is known by its name in DATA_PATH, size and modification
 * time (reading terabytes at every start to checksum them is not an option). */
static int describe_shard(FILE *out, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return ct_fail("cannot read shard '%s': %s", path, strerror(errno));
    const char *base = strrchr(path, '/');
    fprintf(out, "shard %s %lld %lld.%09ld\n", base ? base + 1 : path, (long long)st.st_size,
            (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    return 0;
}

/* The CRC-32 and size of a (small) file: a tokenizer is known by its content. */
static int file_crc32(const char *path, const char *name, uint32_t *crc, long long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return ct_fail("%s = '%s': cannot read it: %s", name, path, strerror(errno));
    unsigned char buf[65536];
    size_t n;
    *crc = 0;
    *size = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        *crc = ct_crc32(*crc, buf, n);
        *size += (long long)n;
    }
    int bad = ferror(f);
    fclose(f);
    return bad ? ct_fail("%s = '%s': read failed", name, path) : 0;
}

static int make_plan(const GolfImport *g, Plan *p) {
    memset(p, 0, sizeof *p);
    char real[PATH_MAX];
    if (find_shards(g->data_path, "train", &p->train) != 0 || find_shards(g->data_path, "val", &p->val) != 0)
        return -1;
    if (!realpath(g->data_path, real)) return ct_fail("DATA_PATH = '%s': %s", g->data_path, strerror(errno));
    uint32_t tok_crc = 0;
    long long tok_size = 0;
    if (g->tokenizer && file_crc32(g->tokenizer, g->tokenizer_name, &tok_crc, &tok_size) != 0) return -1;
    size_t size = 0;
    FILE *out = open_memstream(&p->want, &size);
    if (!out) return ct_fail("out of memory describing the DATA_PATH import");
    fprintf(out, "# DATA_PATH's shards imported by ctrain train (src/cli/golf_import.c); the folder is named after "
                 "this text\n");
    fprintf(out, "data_path %s\nvocab_size %lld\nbos_id 1\n", real, (long long)g->vocab_size);
    if (g->tokenizer) fprintf(out, "tokenizer %lld bytes, crc32 %08x\n", tok_size, (unsigned)tok_crc);
    else fprintf(out, "tokenizer none\n");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < p->train.gl_pathc; i++) rc = describe_shard(out, p->train.gl_pathv[i]);
    for (size_t i = 0; rc == 0 && i < p->val.gl_pathc; i++) rc = describe_shard(out, p->val.gl_pathv[i]);
    fclose(out);
    if (rc != 0) return -1;
    char tok[16];
    if (g->tokenizer) snprintf(tok, sizeof tok, "sp%08x", (unsigned)tok_crc);
    else snprintf(tok, sizeof tok, "notok");
    snprintf(p->name, sizeof p->name, "vocab%lld-%s-%08x", (long long)g->vocab_size, tok,
             (unsigned)ct_crc32(0, p->want, strlen(p->want)));
    return 0;
}

int golf_import_copy_dir(const GolfImport *g, char *dir, size_t cap) {
    Plan p;
    int rc = make_plan(g, &p);
    if (rc == 0) snprintf(dir, cap, "%s/%s", g->cache, p.name);
    plan_free(&p);
    return rc;
}

static char *read_small_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *text = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&text, &cap, '\0', f);
    fclose(f);
    if (n < 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* 1 if dir holds a complete copy made from want (its import.txt is written last). */
static int copy_matches(const char *dir, const char *want) {
    char record[4300];
    snprintf(record, sizeof record, "%s/import.txt", dir);
    char *have = read_small_file(record);
    int same = have && !strcmp(have, want);
    free(have);
    return same;
}

/* Remove a copy's folder and the files in it (a copy has no subfolders); a missing one is no
 * error. */
static int remove_copy(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : ct_fail("cannot list '%s': %s", dir, strerror(errno));
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[4600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && rc == 0) rc = ct_fail("cannot remove '%s': %s", path, strerror(errno));
    }
    closedir(d);
    if (rc == 0 && rmdir(dir) != 0) rc = ct_fail("cannot remove '%s': %s", dir, strerror(errno));
    return rc;
}

/* The shard lines of a description: what a copy was made from in DATA_PATH. */
static void shard_lines(const char *text, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) + 1 : strlen(line);
        if (!strncmp(line, "shard ", 6) && n + len < cap) {
            memcpy(out + n, line, len);
            n += len;
            out[n] = '\0';
        }
        line = end ? end + 1 : NULL;
    }
}

/* The value of a description's "KEY value" line (up to the line's end), or "" */
static void line_value(const char *text, const char *key, char *out, size_t cap) {
    size_t k = strlen(key);
    out[0] = '\0';
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        if (!strncmp(line, key, k) && line[k] == ' ') {
            size_t len = strcspn(line + k + 1, "\n");
            snprintf(out, cap, "%.*s", (int)(len < cap ? len : cap - 1), line + k + 1);
            return;
        }
}

/* After an import (under CACHE/.lock): remove what no run can need any more — the copies made
 * from this DATA_PATH's shards as they were before they changed, unless a run still reads one
 * (it holds the copy's lock), and the .tmp folders of imports that were killed. Copies of other
 * settings made from the current shards stay: a run with those settings reuses them. */
static void remove_stale(const char *cache, const char *want, const char *own_name) {
    DIR *d = opendir(cache);
    if (!d) return;
    size_t cap = strlen(want) + 1;
    char *now = ct_malloc(cap, "shard list"), *then = NULL;
    char data_path[PATH_MAX + 1], other_path[PATH_MAX + 1];
    shard_lines(want, now, cap);
    line_value(want, "data_path", data_path, sizeof data_path);
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        char dir[4400];
        snprintf(dir, sizeof dir, "%s/%s", cache, n);
        if (strncmp(n, "vocab", 5) != 0 || !strcmp(n, own_name)) continue;
        if (len > 4 && !strcmp(n + len - 4, ".tmp")) { /* its importer died (none runs: we hold CACHE/.lock) */
            if (remove_copy(dir) != 0) fprintf(stderr, "ctrain: warning: %s\n", ct_error());
            continue;
        }
        if (strchr(n, '.')) continue; /* a lock file */
        char record[4500];
        snprintf(record, sizeof record, "%s/import.txt", dir);
        char *text = read_small_file(record);
        if (!text) continue;
        line_value(text, "data_path", other_path, sizeof other_path);
        free(then);
        then = ct_malloc(strlen(text) + 1, "shard list");
        shard_lines(text, then, strlen(text) + 1);
        free(text);
        if (strcmp(other_path, data_path) != 0 || !strcmp(then, now)) continue;
        char lock_path[4500];
        snprintf(lock_path, sizeof lock_path, "%s.lock", dir);
        int fd = ct_lock_file(lock_path, CT_LOCK_EXCLUSIVE, 0, "a run reading the copy");
        if (fd < 0) {
            ct_error_clear();
            printf("DATA_PATH: kept %s, made from the shards as they were before they changed: a run is reading "
                   "it (a later import removes it once that run has ended)\n", dir);
            continue;
        }
        if (remove_copy(dir) == 0)
            printf("DATA_PATH: removed %s, made from the shards as they were before they changed\n", dir);
        else
            fprintf(stderr, "ctrain: warning: %s\n", ct_error());
        close(fd);
    }
    free(then);
    free(now);
    closedir(d);
}

/* Import the shards into tmp (CACHE/<name>.tmp); on failure tmp is removed. */
static int import_into(const GolfImport *g, const Plan *p, const char *tmp, const char *dir) {
    size_t n = p->train.gl_pathc + p->val.gl_pathc;
    char **shards = ct_calloc(n, sizeof(char *), "import arguments");
    for (size_t i = 0; i < p->train.gl_pathc; i++) shards[i] = p->train.gl_pathv[i];
    for (size_t i = 0; i < p->val.gl_pathc; i++) shards[p->train.gl_pathc + i] = p->val.gl_pathv[i];
    char out[4500], vocab[32];
    snprintf(out, sizeof out, "%s/", tmp);
    snprintf(vocab, sizeof vocab, "%lld", (long long)g->vocab_size);
    ImportBinRequest r = {.out = out,
                          .vocab_text = vocab,
                          .bos_text = "1", /* parameter-golf's shards start each document with id 1 */
                          .tokenizer = g->tokenizer ? g->tokenizer : "",
                          .shards = shards,
                          .num_shards = (int)n,
                          .tokenizer_is_model = g->tokenizer != NULL,
                          .vocab_name = g->vocab_name,
                          .tokenizer_name = g->tokenizer_name};
    printf("DATA_PATH: importing %zu shards once into %s (made in %s and renamed when complete; as ctrain data "
           "import-bin --out %s/%s%s --vocab-size %s --bos-id 1 ...)\n",
           n, dir, tmp, dir, g->tokenizer ? " --tokenizer " : "", g->tokenizer ? g->tokenizer : "", vocab);
    if (!g->tokenizer)
        printf("DATA_PATH: note: no TOKENIZER_PATH (and no train_gpt.py default tokenizer): the copy has no tokenizer "
               "tables, so val_bpb is not computed\n");
    fflush(stdout);
    int rc = 0;
    if (remove_copy(tmp) != 0 || ct_mkdir_p(tmp) != 0) /* what an import that was killed left */
        rc = -1;
    else if (data_import_bin(&r) != CT_EXIT_OK) /* it printed why */
        rc = stop_requested() ? ct_fail("stopped by signal %d while importing its shards", stop_requested())
                              : ct_fail("importing its shards failed (the error above)");
    free(shards);
    if (rc == 0) { /* import.txt is written last: a folder that has it is complete */
        char record[4500];
        snprintf(record, sizeof record, "%s/import.txt", tmp);
        FILE *f = fopen(record, "w");
        int bad = !f || fputs(p->want, f) < 0;
        if (f) bad |= fclose(f) != 0;
        if (bad) rc = ct_fail("cannot write '%s': %s", record, strerror(errno));
    }
    if (rc != 0) {
        char why[2048];
        snprintf(why, sizeof why, "%s", ct_error());
        if (remove_copy(tmp) != 0) fprintf(stderr, "ctrain: warning: %s\n", ct_error());
        ct_fail("%s; its partial import '%s' was removed and the copies made earlier are as they were", why, tmp);
    }
    return rc;
}

int golf_import_prepare(const GolfImport *g, char *dir, size_t cap) {
    Plan p;
    if (make_plan(g, &p) != 0) {
        plan_free(&p);
        return -1;
    }
    snprintf(dir, cap, "%s/%s", g->cache, p.name);
    char lock_path[4400], tmp[4400];
    snprintf(lock_path, sizeof lock_path, "%s.lock", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    int rc = 0, all = -1, own = -1;
    if (ct_mkdir_p(g->cache) != 0)
        rc = ct_fail("cannot make the folder for its HDF5 copies, '%s': %s (set CTRAIN_DATA_CACHE to a writable "
                     "folder)", g->cache, strerror(errno));
    /* the ranks of a job start together: one imports, the others wait for it here */
    if (rc == 0 && (all = ct_dir_lock(g->cache, IMPORT_WAIT_S)) < 0) rc = -1;
    if (rc == 0 && (own = ct_lock_file(lock_path, CT_LOCK_SHARED, 0, "the copy's lock")) < 0) rc = -1;
    if (rc == 0 && copy_matches(dir, p.want)) {
        printf("DATA_PATH: %zu shards, imported earlier into %s (its import.txt matches them)\n",
               p.train.gl_pathc + p.val.gl_pathc, dir);
    } else if (rc == 0) {
        rc = import_into(g, &p, tmp, dir);
        /* a folder of that name without a matching record is not a copy of ours: never trained from
         * (a run checks the record), so it can be replaced once nobody holds it */
        struct stat st;
        if (rc == 0 && lstat(dir, &st) == 0) {
            if (ct_lock_try(own, CT_LOCK_EXCLUSIVE) != 0)
                rc = ct_fail("'%s' is in use by another ctrain run and is not the copy wanted; not replaced", dir);
            else if (remove_copy(dir) != 0)
                rc = -1;
            if (rc != 0) remove_copy(tmp);
        }
        if (rc == 0 && rename(tmp, dir) != 0) {
            rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, dir, strerror(errno));
            remove_copy(tmp);
        }
        if (rc == 0 && ct_lock_try(own, CT_LOCK_SHARED) != 0) /* exclusive -> shared never waits */
            rc = ct_fail("cannot lock '%s': %s", lock_path, strerror(errno));
    }
    if (rc == 0) remove_stale(g->cache, p.want, p.name);
    char old_record[4200];
    snprintf(old_record, sizeof old_record, "%s/import.txt", g->cache);
    if (rc == 0 && access(old_record, F_OK) == 0) /* never removed here: an older ctrain may read it */
        printf("DATA_PATH: note: %s/fineweb_*.h5 and %s are the copy an older ctrain made, no longer read; remove "
               "them to free the space\n", g->cache, old_record);
    if (rc == 0) held_copy_lock = own;
    else if (own >= 0) close(own);
    if (all >= 0) close(all);
    plan_free(&p);
    return rc == 0 ? 0 : ct_fail_prefix("DATA_PATH");
}
