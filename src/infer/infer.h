/* infer.h — a model's weights put to use outside the training step: validation loss and bits
 * per byte (eval.c; the training loop's validation and `ckpt golf`'s round trip), text from a
 * model (sample.c, `ctrain sample`), and train_gpt.py's ending, the golf artifact written,
 * sized and read back (golf_round_trip.c; the formats are golf_artifact.h). */
#ifndef CT_INFER_H
#define CT_INFER_H

#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "data.h"
#include "dist.h"
#include "golf_artifact.h"
#include "train_state.h"

/* Validation data, read once: train_gpt.py's load_validation_tokens keeps
 * ((tokens - 1) // seq_len) * seq_len + 1 tokens of the split. */
typedef struct {
    uint32_t *tokens;
    int64_t num_seqs;
    int16_t *base_bytes; /* tokenizer tables, NULL when the data has none */
    uint8_t *has_leading_space, *is_boundary_token;
} ValData;

int val_load(const Config *cfg, const TokenSet *set, ValData *v);
void val_free(ValData *v);
/* eval_val: each rank evaluates its share of the sequences; the loss, token and byte sums are
 * added across ranks; mean token loss, and bits per byte when the data has the tokenizer
 * tables (NaN otherwise). */
int val_evaluate(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, double *val_loss, double *val_bpb);

/* Validation loss and bits per byte (NaN without tokenizer tables) of the weights in st on
 * cfg's val_files, in this process alone, on cfg's device; as a run's validation computes them. */
int evaluate_weights(const Config *cfg, TrainState *st, double *val_loss, double *val_bpb);

/* train_gpt.py's ending (golf_artifact.h): write the artifact of st's weights in the chosen
 * format to path and print its size, with the code's (code_bytes; -1 when not known) as
 * train_gpt.py prints them, and the total against parameter-golf's 16,000,000-byte cap; with
 * evaluate, read it back into st->params (replacing the weights) and print the round-trip
 * val_loss and val_bpb on cfg's val_files; with dequantized, read it back and also write those
 * weights there as safetensors. */
typedef struct {
    GolfFormat format;
    int evaluate;
    int64_t code_bytes;
    const char *dequantized; /* NULL: none */
} GolfOptions;
int golf_write_and_evaluate(const Config *cfg, TrainState *st, const char *path, const GolfOptions *o);

/* Sampling text from a model: num_tokens new tokens after the prompt; temperature 0 (or
 * top_k 1) takes the most likely token, top_k 0 keeps the whole vocabulary; the same seed
 * gives the same tokens. */
typedef struct {
    int64_t num_tokens, top_k;
    double temperature;
    uint64_t seed;
} SampleOptions;
/* Generate with a backend made over the model (its seq_len is the context window); emit is
 * called with each new token as it is drawn. Needs the backend's position_logits (CPU). */
int sample_tokens(Backend *b, const uint32_t *prompt, int64_t prompt_len, const SampleOptions *o,
                  void (*emit)(void *ctx, uint32_t token), void *ctx);

#endif
