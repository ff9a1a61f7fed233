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

/* Validation loss and bits per byte (NaN without tokenizer tables) of the weights in st on
 * cfg's val_files, in this process alone, on cfg's device; as a run's validation computes them. */
int train_evaluate_weights(const Config *cfg, TrainState *st, double *val_loss, double *val_bpb);

/* train_gpt.py's ending (golf_artifact.h): write the int8 + zlib artifact of st's weights to
 * path and print its size; with evaluate, read it back into st->params (replacing the weights)
 * and print the round-trip val_loss and val_bpb on cfg's val_files. */
int train_golf_artifact(const Config *cfg, TrainState *st, const char *path, int evaluate);

/* Sampling text from a model: num_tokens new tokens after the prompt; temperature 0 (or
 * top_k 1) takes the most likely token, top_k 0 keeps the whole vocabulary; the same seed
 * gives the same tokens. */
typedef struct {
    int64_t num_tokens, top_k;
    double temperature;
    uint64_t seed;
} SampleOptions;
struct Backend;
/* Generate with a backend made over the model (its seq_len is the context window); emit is
 * called with each new token as it is drawn. Needs the backend's position_logits (CPU). */
int train_sample(struct Backend *b, const uint32_t *prompt, int64_t prompt_len, const SampleOptions *o,
                 void (*emit)(void *ctx, uint32_t token), void *ctx);

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
