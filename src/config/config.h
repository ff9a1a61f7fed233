/* config.h — the run configuration: a struct generated from config_keys.h, parsed from a
 * `key = value` file and command-line `key=value` overrides, validated before any work. */
#ifndef CT_CONFIG_H
#define CT_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "block_plan.h"
#include "config_keys.h"

typedef enum { CT_KEY_INT, CT_KEY_FLOAT, CT_KEY_BOOL, CT_KEY_STR } ConfigKeyType;
typedef enum { CT_RESUME_SHAPE, CT_RESUME_FREE } ConfigResumeRule;

#define CT_CFG_FIELD_INT(name) int64_t name;
#define CT_CFG_FIELD_FLOAT(name) double name;
#define CT_CFG_FIELD_BOOL(name) int64_t name;
#define CT_CFG_FIELD_STR(name) char *name;
#define CT_CFG_FIELD(name, type, def, group, resume, help) CT_CFG_FIELD_##type(name)

/* Where a key's value came from, in order of precedence (a later source wins): the default,
 * the config file, the environment (train_gpt.py's variables: a key's upper-case name), the
 * command line. */
typedef enum { CT_SOURCE_DEFAULT = 0, CT_SOURCE_FILE = 1, CT_SOURCE_ENV = 2, CT_SOURCE_COMMAND_LINE = 3 } ConfigSource;

/* The number of keys of the table, as a constant for the per-key arrays below. */
#define CT_CFG_COUNT_KEY(name, type, def, group, resume, help) +1
enum { CT_CONFIG_NUM_KEYS = 0 CT_CONFIG_KEYS(CT_CFG_COUNT_KEY) };
/* The most multi-token-prediction heads (mtp_num_heads); backends keep per-head sums in arrays
 * of this size. */
enum { CT_MTP_MAX_HEADS = 16 };

typedef struct {
    CT_CONFIG_KEYS(CT_CFG_FIELD)
    /* where each key's value came from: a ConfigSource */
    unsigned char source[CT_CONFIG_NUM_KEYS];
    /* for a key set from the environment by a variable other than its own upper-case name
     * (train_gpt.py's DATA_PATH, RUN_ID: src/cli/golf_env.c), that variable; NULL otherwise */
    const char *derived_from[CT_CONFIG_NUM_KEYS];
    /* for a key whose value came from a config file (CT_SOURCE_FILE), that file's path as given
     * to config_load_file (which must outlive cfg); NULL for keys no file set */
    const char *file_from[CT_CONFIG_NUM_KEYS];
} Config;

typedef struct {
    const char *name;
    ConfigKeyType type;
    const char *default_value;
    const char *group;
    ConfigResumeRule resume;
    const char *help;
    size_t offset;
} ConfigKey;

extern const ConfigKey ct_config_keys[];
extern const int ct_config_num_keys;

/* Find a key by name; NULL if unknown. */
const ConfigKey *config_find_key(const char *name);

/* Fill every key with its default. */
void config_init(Config *cfg);
void config_free(Config *cfg);

/* Set one key from its textual value; source as in Config.source. Fails naming the key,
 * the value and what was expected (e.g. "an integer"). `origin` ("FILE:LINE" or
 * "command line") is used in the message. */
int config_set(Config *cfg, const char *key, const char *value, int source, const char *origin);

/* Parse a `key = value` file (# comments, blank lines, optional quotes around values). Several
 * files are applied in the order loaded: a key set in a later file wins over an earlier file's
 * (file_from names the file each value came from); a key set twice in one file is refused. */
int config_load_file(Config *cfg, const char *path);

/* Every key whose upper-case name (ITERATIONS, TRAIN_SEQ_LEN: train_gpt.py's environment
 * variables) is set in the environment, set from it; applied after the config file and before
 * the command line. Fails naming the variable. */
int config_apply_env(Config *cfg);
/* A key's environment variable name: its name in upper case. */
void config_env_name(const ConfigKey *k, char *buf, size_t cap);
/* The variable key i of cfg (a CT_SOURCE_ENV key) came from: derived_from[i] when another
 * variable set it (DATA_PATH, RUN_ID), else the key's own name; in buf, which is returned. */
const char *config_env_origin(const Config *cfg, int i, char *buf, size_t cap);

/* Parse "key=value" arguments. */
int config_apply_args(Config *cfg, int argc, char **argv);

/* Check ranges and consistency (divisibility of shapes and batch geometry); messages name
 * the keys involved. world_size is checked against grad_accum_slots. */
int config_validate(const Config *cfg, int world_size);
/* The 1.0611 record's schedule and optimizer keys (config_frontier.c), called by
 * config_validate: 0, or -1 with ct_fail naming the key, its value and what was expected. */
int config_validate_schedule_optim(const Config *cfg);
/* Test-time training's keys (config_ttt.c), called by config_validate once the model, batch and
 * evaluation keys are valid: 0, or -1 with ct_fail naming the key, its value and what was
 * expected. The checks that read only ttt keys always run; those against model_dim and the
 * evaluation's sequence length only with ttt_enabled (a small model that does not use TTT is
 * not held to the TTT defaults). */
int config_validate_ttt(const Config *cfg);

/* Format one key's value as text (buf of at least 64 bytes; STR values are returned as is, ""
 * when unset). Floats take the shortest form that reads back to the same double (0.04, not
 * 0.040000000000000001), so config.txt and the printed configuration are exact and readable. */
const char *config_value_text(const Config *cfg, const ConfigKey *key, char *buf, size_t cap);
/* Whether two configurations hold the same value for a key. */
int config_value_equal(const Config *a, const Config *b, const ConfigKey *key);

/* Write the resolved configuration as a loadable `key = value` file (with a header comment). */
int config_write(const Config *cfg, FILE *out);
/* The same into path (a temporary file renamed into place); note (NULL: none) is one more
 * comment line after the header, e.g. the software stack a run's bits depend on. */
int config_write_file(const Config *cfg, const char *path, const char *note);

/* `ctrain train --help`'s key listing, grouped, with type, default and meaning. */
void config_print_help(FILE *out);

/* docs/configuration.md's key tables (the docs test compares the committed file to this). */
void config_print_markdown(FILE *out);

/* The job's ranks talk over NCCL (device = cuda with nccl = on, or auto and world_size > 1). */
int config_uses_nccl(const Config *cfg, int world_size);
/* Derived geometry, valid after config_validate. */
int64_t config_head_dim(const Config *cfg);
/* The block plan's settings (block_plan.h) from the keys of the same names. */
BlockPlanSettings config_block_plan_settings(const Config *cfg);
int64_t config_local_tokens(const Config *cfg); /* tokens per rank per micro-step */
/* The sequence length the backends run on: train_seq_len, or with doc_packing the whole
 * micro-batch row (config_local_tokens; one sequence per micro-batch, cut into documents by the
 * backend: docs/model.md, "Document packing"). Validation rows have the same length. */
int64_t config_seq_len(const Config *cfg);
/* The longest packed segment: max_doc_len, or train_seq_len when it is 0. */
int64_t config_max_doc_len(const Config *cfg);
/* The evaluation's sequence length: eval_seq_len, or train_seq_len when it is 0. */
int64_t config_eval_seq_len(const Config *cfg);
/* Test-time training's window E: ttt_eval_seq_len, or config_eval_seq_len when it is 0. */
int64_t config_ttt_eval_seq_len(const Config *cfg);
/* Tokens the global stream advances per optimizer step: grad_accum_slots micro-batches of
 * config_local_tokens + 1 (the last target) each, whatever the world size. */
int64_t config_step_stream_tokens(const Config *cfg);

#endif
