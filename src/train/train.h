/* train.h — a training run (the loop in train.c) and the data it reads (train_data.c); the
 * command line of `ctrain train` is src/cli/train_cmd.c. */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

#include "config.h"
#include "data.h"

/* Resolve, check and describe the data a configuration names: opens the train (and val) sets,
 * checks vocab_size agreement with the config and that the training split holds at least one
 * optimizer step of tokens. */
int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val);

/* Run training with a validated configuration; returns the process exit code. */
int train_run(const Config *cfg);

#endif
