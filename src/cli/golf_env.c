/* golf_env.c — DATA_PATH, TOKENIZER_PATH and RUN_ID as train_gpt.py reads them (golf_env.h).
 * The shards are converted by `ctrain data import-bin` itself (the command the docs give for a
 * manual import, so both make the same files), into a folder beside them that is reused while
 * its import.txt matches the shards and tokenizer (name, size, modification time of each): a
 * changed, added or removed shard, or another tokenizer or vocab_size, imports again. */
#include "golf_env.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "dirlock.h"

/* train_gpt.py's default tokenizer, used when TOKENIZER_PATH is unset and it exists */
#define TRAIN_GPT_TOKENIZER "./data/tokenizers/fineweb_1024_bpe.model"
/* how long a rank waits for another process importing the same shards */
#define IMPORT_WAIT_S 7200.0

static const char *env_value(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static const char *tokenizer_path(void) {
    const char *t = env_value("TOKENIZER_PATH");
    if (t) return t;
    return access(TRAIN_GPT_TOKENIZER, R_OK) == 0 ? TRAIN_GPT_TOKENIZER : NULL;
}

static void cache_dir(char *buf, size_t cap) {
    const char *c = env_value("CTRAIN_DATA_CACHE");
    if (c) snprintf(buf, cap, "%s", c);
    else snprintf(buf, cap, "%s/ctrain-h5", env_value("DATA_PATH"));
}

static ConfigSource source_of(const Config *cfg, const char *key) {
    return (ConfigSource)cfg->source[config_find_key(key) - ct_config_keys];
}

/* Set key from a variable that is not the key's own (shown in the banner as its origin). */
static int set_from(Config *cfg, const char *key, const char *value, const char *variable) {
    char origin[96];
    snprintf(origin, sizeof origin, "environment variable %s", variable);
    if (config_set(cfg, key, value, CT_SOURCE_ENV, origin) != 0) return -1;
    cfg->derived_from[config_find_key(key) - ct_config_keys] = variable;
    return 0;
}

int golf_env_apply(Config *cfg) {
    const char *run_id = env_value("RUN_ID");
    if (run_id && source_of(cfg, "out_dir") < CT_SOURCE_ENV) {
        char dir[4200];
        snprintf(dir, sizeof dir, "runs/%s", run_id);
        if (set_from(cfg, "out_dir", dir, "RUN_ID") != 0) return -1;
    }
    if (!env_value("DATA_PATH")) return 0;
    char cache[4096], glob_text[4200];
    cache_dir(cache, sizeof cache);
    if (source_of(cfg, "train_files") < CT_SOURCE_ENV) {
        snprintf(glob_text, sizeof glob_text, "%s/fineweb_train_*.h5", cache);
        if (set_from(cfg, "train_files", glob_text, "DATA_PATH") != 0) return -1;
    }
    if (source_of(cfg, "val_files") < CT_SOURCE_ENV) {
        snprintf(glob_text, sizeof glob_text, "%s/fineweb_val_*.h5", cache);
        if (set_from(cfg, "val_files", glob_text, "DATA_PATH") != 0) return -1;
    }
    /* train_gpt.py stops at 600 s unless told otherwise; a run in its terms does the same */
    if (source_of(cfg, "max_wallclock_seconds") == CT_SOURCE_DEFAULT &&
        set_from(cfg, "max_wallclock_seconds", "600", "DATA_PATH (train_gpt.py's default)") != 0)
        return -1;
    return 0;
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

/* One line per input of the import: what the copy was made from. */
static int describe_input(FILE *out, const char *kind, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return ct_fail("cannot read '%s' (%s): %s", path, kind, strerror(errno));
    fprintf(out, "%s %s %lld %lld.%09ld\n", kind, path, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
            st.st_mtim.tv_nsec);
    return 0;
}

/* The text import.txt holds for these inputs; malloc'd, NULL with a message on failure. */
static char *describe_import(const glob_t *train, const glob_t *val, const char *tokenizer, int64_t vocab_size) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (!out) {
        ct_fail("out of memory describing the DATA_PATH import");
        return NULL;
    }
    int rc = 0;
    fprintf(out, "# the HDF5 copy of DATA_PATH's shards made by ctrain train (src/cli/golf_env.c)\n");
    fprintf(out, "vocab_size %lld\n", (long long)vocab_size);
    for (size_t i = 0; rc == 0 && i < train->gl_pathc; i++) rc = describe_input(out, "shard", train->gl_pathv[i]);
    for (size_t i = 0; rc == 0 && val && i < val->gl_pathc; i++) rc = describe_input(out, "shard", val->gl_pathv[i]);
    if (rc == 0 && tokenizer) rc = describe_input(out, "tokenizer", tokenizer);
    fclose(out);
    if (rc != 0) {
        free(text);
        return NULL;
    }
    return text;
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

/* Remove the copies of an earlier import (a shard may have gone since). */
static void remove_old_copies(const char *cache) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/fineweb_*.h5", cache);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
    globfree(&g);
}

/* `ctrain data import-bin --out CACHE/ [--tokenizer MODEL] --vocab-size V --bos-id 1 SHARDS...` */
static int run_import(const char *cache, const glob_t *train, const glob_t *val, const char *tokenizer,
                      int64_t vocab_size) {
    size_t n = train->gl_pathc + (val ? val->gl_pathc : 0);
    char **argv = ct_calloc(n + 12, sizeof(char *), "import arguments");
    char out[4200], vocab[32];
    snprintf(out, sizeof out, "%s/", cache);
    snprintf(vocab, sizeof vocab, "%lld", (long long)vocab_size);
    int argc = 0;
    argv[argc++] = "data";
    argv[argc++] = "import-bin";
    argv[argc++] = "--out";
    argv[argc++] = out;
    if (tokenizer) {
        argv[argc++] = "--tokenizer";
        argv[argc++] = (char *)tokenizer;
    }
    argv[argc++] = "--vocab-size";
    argv[argc++] = vocab;
    argv[argc++] = "--bos-id";
    argv[argc++] = "1"; /* parameter-golf's shards start each document with id 1 */
    for (size_t i = 0; i < train->gl_pathc; i++) argv[argc++] = train->gl_pathv[i];
    for (size_t i = 0; val && i < val->gl_pathc; i++) argv[argc++] = val->gl_pathv[i];
    printf("DATA_PATH: importing %zu shards once into %s (ctrain data import-bin --out %s%s%s --vocab-size %s "
           "--bos-id 1 ...)\n",
           n, cache, out, tokenizer ? " --tokenizer " : "", tokenizer ? tokenizer : "", vocab);
    fflush(stdout);
    int rc = data_main(argc, argv);
    free(argv);
    if (rc != 0) return ct_fail("DATA_PATH: importing its shards into '%s' failed (the error above)", cache);
    return 0;
}

int golf_env_prepare_data(const Config *cfg) {
    const char *data_path = env_value("DATA_PATH");
    const int train_from_env = cfg->derived_from[config_find_key("train_files") - ct_config_keys] != NULL;
    const int val_from_env = cfg->derived_from[config_find_key("val_files") - ct_config_keys] != NULL;
    if (!data_path || (!train_from_env && !val_from_env)) return 0;
    const char *tokenizer = tokenizer_path();
    char cache[4096], record[4200], tmp[4300];
    cache_dir(cache, sizeof cache);
    snprintf(record, sizeof record, "%s/import.txt", cache);
    glob_t train = {0}, val = {0};
    int rc = find_shards(data_path, "train", &train);
    if (rc == 0) rc = find_shards(data_path, "val", &val);
    char *want = rc == 0 ? describe_import(&train, &val, tokenizer, cfg->vocab_size) : NULL;
    if (!want) rc = -1;
    int lock = -1;
    if (rc == 0 && ct_mkdir_p(cache) != 0)
        rc = ct_fail("DATA_PATH: cannot make the folder for its HDF5 copy, '%s': %s (set CTRAIN_DATA_CACHE to a "
                     "writable folder)",
                     cache, strerror(errno));
    /* the ranks of a job start together: one imports, the others wait for it here */
    if (rc == 0 && (lock = ct_dir_lock(cache, IMPORT_WAIT_S)) < 0) rc = ct_fail_prefix("DATA_PATH");
    if (rc == 0) {
        char *have = read_small_file(record);
        if (have && !strcmp(have, want)) {
            printf("DATA_PATH: %zu shards, imported earlier into %s (%s matches them)\n",
                   train.gl_pathc + val.gl_pathc, cache, record);
        } else {
            unlink(record);
            remove_old_copies(cache);
            if (!tokenizer)
                printf("DATA_PATH: note: no TOKENIZER_PATH (and no %s): the copy has no tokenizer tables, so "
                       "val_bpb is not computed\n",
                       TRAIN_GPT_TOKENIZER);
            rc = run_import(cache, &train, &val, tokenizer, cfg->vocab_size);
            /* written last, and atomically: an interrupted import is redone */
            snprintf(tmp, sizeof tmp, "%s.tmp", record);
            FILE *f = rc == 0 ? fopen(tmp, "w") : NULL;
            if (f) {
                int bad = fputs(want, f) < 0;
                bad |= fclose(f) != 0;
                if (bad || rename(tmp, record) != 0) rc = ct_fail("DATA_PATH: cannot write '%s': %s", record, strerror(errno));
            } else if (rc == 0) {
                rc = ct_fail("DATA_PATH: cannot write '%s': %s", tmp, strerror(errno));
            }
        }
        free(have);
    }
    if (lock >= 0) close(lock);
    free(want);
    globfree(&train);
    globfree(&val);
    return rc;
}
