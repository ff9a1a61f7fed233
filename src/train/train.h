/* train.h — a training run (the loop in train.c) and the data it reads (train_data.c); the
 * command line of `ctrain train` is src/cli/train_cmd.c. */
#ifndef CT_TRAIN_H
#define CT_TRAIN_H

#include "config.h"
#include "data.h"
#include "dist.h"
#include "train_state.h"

/* Resolve, check and describe the data a configuration names: opens the train (and val) sets,
 * checks vocab_size agreement with the config and that the training split holds at least one
 * optimizer step of tokens. */
int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val);

/* A GPU job's start over NCCL (train_nccl.c), for training and `ctrain launch-check --nccl`:
 * this rank's GPU (backend_choose_gpu), the check that no other rank uses it, and the NCCL
 * communicator on it (d->nccl set: dist.h's collectives go over NCCL from then on). Every rank
 * calls it right after dist_init; it fails within seconds, naming rank, host and GPU, when a
 * rank has no GPU of its own. note (cap bytes) gets a line for the log. */
int train_nccl_connect(const Config *cfg, DistInfo *d, char *note, size_t cap);

/* Run training with a validated configuration; returns the process exit code. device = auto is
 * resolved in place first (to cuda or cpu, printed), so the run, its config.txt and its
 * checkpoints name the device that trains. */
int train_run(Config *cfg);

#endif
