/* train_outputs.c — the check of `ctrain train`'s outputs against its inputs (train_outputs.h). */
#include "train_outputs.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "common.h"
#include "infer.h"
#include "paths.h"

int train_check_outputs(const Config *cfg, const char *const *config_files, int num_config_files) {
    CtPathList outputs = {0}, inputs = {0};
    char path[4400];
    /* what the run writes in out_dir (the checkpoints' folder is checked below) */
    static const char *const files[] = {"config.txt", "metrics.jsonl", ".lock"};
    static const char *const roles[] = {"out_dir's config.txt", "out_dir's metrics.jsonl", "out_dir's .lock"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", cfg->out_dir, files[i]);
        ct_path_list_add(&outputs, roles[i], "a file the run writes", path);
    }
    if (golf_run_artifact_path(cfg->out_dir, cfg->golf_format, path, sizeof path) == 0)
        ct_path_list_add(&outputs, "out_dir's artifact", "the golf artifact the run writes", path);
    /* out_dir's own config.txt is the run's record and a --config file made to be given again
     * (rerun or resume a run as it was): it has been read whole before this check, and the run
     * replaces it atomically (config_write_file: a temporary file renamed over it) by the
     * resolved configuration, which is what it is for. Every other collision stays refused. */
    for (int i = 0; i < num_config_files; i++)
        if (!ct_same_file(config_files[i], outputs.items[0].path))
            ct_path_list_add(&inputs, "--config", "a configuration file read", config_files[i]);
    ct_path_list_add_glob(&inputs, "train_files", "the training data", cfg->train_files);
    ct_path_list_add_glob(&inputs, "val_files", "the validation data", cfg->val_files);
    const char *tokenizer = getenv("TOKENIZER_PATH");
    if (getenv("DATA_PATH") && tokenizer && *tokenizer)
        ct_path_list_add(&inputs, "TOKENIZER_PATH", "the SentencePiece model imported", tokenizer);
    int rc = cli_check_outputs("train", NULL, &outputs, &inputs);
    snprintf(path, sizeof path, "%s/checkpoints", cfg->out_dir);
    for (int i = 0; rc == 0 && i < inputs.count; i++)
        if (ct_path_inside(inputs.items[i].path, path))
            rc = cli_usage_error("train", NULL,
                                 "%s '%s' lies in out_dir's checkpoints/ folder '%s', where the run writes, prunes "
                                 "and moves aside its checkpoints: give %s outside it",
                                 inputs.items[i].role, inputs.items[i].path, path, inputs.items[i].what);
    ct_path_list_free(&outputs);
    ct_path_list_free(&inputs);
    return rc;
}
