/* train.h — `ctrain train`: command-line handling (train_cmd.c) and the training run. */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

#include "config.h"
#include "data.h"

/* CLI entry; argv[0] is "train". Returns the process exit code. */
int train_main(int argc, char **argv);

/* Resolve, check and describe the data a configuration names: opens the train (and val) sets,
 * checks vocab_size agreement with the config and that the training split holds at least one
 * optimizer step of tokens. */
int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val);

/* Run training with a validated configuration; returns the process exit code. */
int train_run(const Config *cfg);

#endif
