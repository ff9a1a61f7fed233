/* golf_env.c — DATA_PATH, TOKENIZER_PATH and RUN_ID as train_gpt.py reads them (golf_env.h):
 * the configuration they give, the run's folder when no RUN_ID names it, and the stop handlers
 * and the copy of the shards (golf_import.h) before training. */
#include "golf_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fault.h"
#include "golf_import.h"
#include "stop.h"

/* train_gpt.py's default tokenizer, used when TOKENIZER_PATH is unset and it exists */
#define TRAIN_GPT_TOKENIZER "./data/tokenizers/fineweb_1024_bpe.model"
/* How out_dir was chosen when neither RUN_ID nor out_dir was given (the banner's origin). */
static const char FRESH_ID[] = "DATA_PATH without RUN_ID: a fresh run id";
static const char SLURM_ID[] = "SLURM_JOB_ID (DATA_PATH without RUN_ID)";

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

static int all_digits(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* The run id of a train_gpt.py-style run that names none. Under Slurm, the job's (an array
 * task's: ARRAYJOB_TASK, as Slurm's %A_%a): every rank agrees on it and a requeued job, which
 * keeps its id, resumes its run. Otherwise a fresh one each time, as train_gpt.py's uuid4: the
 * UTC time (so runs/ lists in order) and 32 random bits. */
static int fresh_run_id(char *id, size_t cap, const char **origin) {
    const char *job = env_value("SLURM_JOB_ID"), *array = env_value("SLURM_ARRAY_JOB_ID");
    const char *task = env_value("SLURM_ARRAY_TASK_ID");
    if (all_digits(array) && all_digits(task)) {
        snprintf(id, cap, "%s_%s", array, task);
        *origin = SLURM_ID;
        return 0;
    }
    if (all_digits(job)) {
        snprintf(id, cap, "%s", job);
        *origin = SLURM_ID;
        return 0;
    }
    int ranks = 1;
    if (ct_env_nonneg_int("PMI_SIZE", &ranks) == 0 && ranks > 1)
        return ct_fail("DATA_PATH without RUN_ID or out_dir: the %d ranks mpiexec started cannot agree on a fresh "
                       "run id outside Slurm; set RUN_ID (or out_dir)", ranks);
    uint32_t bits = (uint32_t)getpid() * 2654435761u ^ (uint32_t)time(NULL);
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&bits, sizeof bits, 1, f) != 1) bits ^= (uint32_t)clock();
        fclose(f);
    }
    time_t now = time(NULL);
    struct tm tm;
    char stamp[32] = "run";
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(id, cap, "%s-%08x", stamp, (unsigned)bits);
    *origin = FRESH_ID;
    return 0;
}

/* key's value from DATA_PATH: its copy's folder (or, when the shards cannot be described yet,
 * the cache itself: golf_env_prepare_data then fails naming why) and pattern. */
static int set_data_glob(Config *cfg, const char *key, const char *dir, const char *pattern) {
    char glob_text[4500];
    snprintf(glob_text, sizeof glob_text, "%s/%s", dir, pattern);
    return set_from(cfg, key, glob_text, "DATA_PATH");
}

/* What DATA_PATH's import is made from: the shards, the cache, TOKENIZER_PATH and vocab_size,
 * named for messages as the user set them. */
static void import_of(const Config *cfg, GolfImport *g, char *cache, size_t cap) {
    cache_dir(cache, cap);
    g->data_path = env_value("DATA_PATH");
    g->cache = cache;
    g->tokenizer = tokenizer_path();
    g->tokenizer_name = env_value("TOKENIZER_PATH") ? "TOKENIZER_PATH" : "train_gpt.py's default tokenizer";
    g->vocab_size = cfg->vocab_size;
    g->vocab_name = source_of(cfg, "vocab_size") == CT_SOURCE_ENV ? "VOCAB_SIZE" : "vocab_size";
}

int golf_env_apply(Config *cfg) {
    const char *run_id = env_value("RUN_ID");
    if (run_id && source_of(cfg, "out_dir") < CT_SOURCE_ENV) {
        char dir[4200];
        snprintf(dir, sizeof dir, "runs/%s", run_id);
        if (set_from(cfg, "out_dir", dir, "RUN_ID") != 0) return -1;
    }
    if (!env_value("DATA_PATH")) return 0;
    /* train_gpt.py starts a new run each time: so does a run in its terms that names none */
    if (!run_id && source_of(cfg, "out_dir") == CT_SOURCE_DEFAULT) {
        char id[128], dir[200];
        const char *origin = NULL;
        if (fresh_run_id(id, sizeof id, &origin) != 0) return -1;
        snprintf(dir, sizeof dir, "runs/%s", id);
        if (set_from(cfg, "out_dir", dir, origin) != 0) return -1;
    }
    char cache[4096], copy[4400];
    GolfImport g;
    import_of(cfg, &g, cache, sizeof cache);
    if (golf_import_copy_dir(&g, copy, sizeof copy) != 0) {
        ct_error_clear(); /* reported by golf_env_prepare_data, before any work */
        snprintf(copy, sizeof copy, "%s", cache);
    }
    if (source_of(cfg, "train_files") < CT_SOURCE_ENV && set_data_glob(cfg, "train_files", copy, "fineweb_train_*.h5"))
        return -1;
    if (source_of(cfg, "val_files") < CT_SOURCE_ENV && set_data_glob(cfg, "val_files", copy, "fineweb_val_*.h5"))
        return -1;
    /* train_gpt.py stops at 600 s unless told otherwise; a run in its terms does the same */
    if (source_of(cfg, "max_wallclock_seconds") == CT_SOURCE_DEFAULT &&
        set_from(cfg, "max_wallclock_seconds", "600", "DATA_PATH (train_gpt.py's default)") != 0)
        return -1;
    return 0;
}

/* The run's folder, when golf_env_apply chose it: said before any work, so it can be found. */
static void say_run_dir(const Config *cfg) {
    const char *origin = cfg->derived_from[config_find_key("out_dir") - ct_config_keys];
    if (origin == FRESH_ID)
        printf("run folder: %s (a fresh run id, as train_gpt.py makes one, since neither RUN_ID nor out_dir is given; "
               "RUN_ID=%s continues this run)\n", cfg->out_dir, cfg->out_dir + 5);
    else if (origin == SLURM_ID)
        printf("run folder: %s (the Slurm job's id, since neither RUN_ID nor out_dir is given: a requeue of this job "
               "continues this run)\n", cfg->out_dir);
    fflush(stdout);
}

/* The rank of this process as its launcher gives it, before MPI or PMI is started: for
 * CTRAIN_FAULT's per-rank entries. */
static int launcher_rank(void) {
    int rank = 0;
    if (ct_env_nonneg_int("PMI_RANK", &rank) != 0 && ct_env_nonneg_int("SLURM_PROCID", &rank) != 0) rank = 0;
    return rank;
}

int golf_env_prepare_data(Config *cfg) {
    const int train_from_env = cfg->derived_from[config_find_key("train_files") - ct_config_keys] != NULL;
    const int val_from_env = cfg->derived_from[config_find_key("val_files") - ct_config_keys] != NULL;
    if (!env_value("DATA_PATH")) return 0;
    say_run_dir(cfg);
    if (!train_from_env && !val_from_env) return 0;
    /* a stop (a requeue, a time limit) during the import ends it cleanly with exit 75 */
    if (stop_install(cfg->stop_signal) != 0 || fault_init(launcher_rank()) != 0) return -1;
    char cache[4096], copy[4400];
    GolfImport g;
    import_of(cfg, &g, cache, sizeof cache);
    if (golf_import_prepare(&g, copy, sizeof copy) != 0) return -1;
    /* the copy made now (the shards may have changed since golf_env_apply named one) */
    if (train_from_env && set_data_glob(cfg, "train_files", copy, "fineweb_train_*.h5") != 0) return -1;
    if (val_from_env && set_data_glob(cfg, "val_files", copy, "fineweb_val_*.h5") != 0) return -1;
    return 0;
}
