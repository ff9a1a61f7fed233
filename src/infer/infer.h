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
#include "paths.h"
#include "train_state.h"

/* Validation data, read once: train_gpt.py's load_validation_tokens keeps
 * ((tokens - 1) // seq_len) * seq_len + 1 tokens of the split. */
typedef struct {
    uint32_t *tokens;
    int64_t num_seqs;
    int16_t *base_bytes; /* tokenizer tables, NULL when the data has none */
    uint8_t *has_leading_space, *is_boundary_token;
    uint16_t *byte_counts; /* the split's /bytes_per_token beside tokens (CaseOps), NULL when none */
} ValData;

/* The split's tokens and what bits per byte counts: the byte counts when its files have
 * /bytes_per_token (every file, else an error naming one without), else the tokenizer tables
 * when they have those, else nothing (val_bpb NaN). */
int val_load(const Config *cfg, const TokenSet *set, ValData *v);
void val_free(ValData *v);
/* Whether v can give bits per byte, and how, for messages: "bytes_per_token", "tokenizer
 * tables" or NULL. */
const char *val_bytes_source(const ValData *v);
/* The bytes of the n targets tokens[at + 1 .. at + n] (each predicted from the token before it):
 * their /bytes_per_token counts, or the tokenizer tables' rule (the target's bytes, plus its
 * leading space unless the token before it is a boundary); 0 when v has neither. */
double val_target_bytes(const ValData *v, int64_t at, int64_t n);
/* eval_val: each rank evaluates its share of the sequences; the loss, token and byte sums are
 * added across ranks; mean token loss, and bits per byte when the data has the tokenizer
 * tables (NaN otherwise). Both validations give up within a few batches of a stop request
 * (stop.h; every rank at the same batch), failing through stop_abandon. */
int val_evaluate(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, double *val_loss, double *val_bpb);

/* train_gpt.py's eval_val_sliding (docs/model.md, "Sliding-window validation"): windows of
 * seq_len tokens start every `stride` tokens of the split's total_tokens = num_seqs * seq_len
 * (0 < stride < seq_len); a window scores its positions [scored_from, length) (the first window
 * all of them, each later one its last `stride`, or all when shorter); windows are shared out to
 * ranks as contiguous ranges, the loss, token and byte sums added across ranks in rank order.
 * Needs the backend's evaluate_positions. */
int val_evaluate_sliding(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, int64_t stride,
                         double *val_loss, double *val_bpb);
/* That rule's parts (eval_sliding.c): how many windows there are over total_tokens; window
 * i's first token, its length (min(seq_len, total_tokens - start)) and the first position it
 * scores; and the sums of windows [first, end) on one backend, without any collective:
 * sums = {scored losses (double), scored tokens, their bytes (0 without tokenizer tables)}. */
int64_t val_sliding_windows(int64_t total_tokens, int64_t stride);
void val_sliding_window(int64_t window, int64_t total_tokens, int64_t seq_len, int64_t stride, int64_t *start,
                        int64_t *length, int64_t *scored_from);
int val_sliding_sums(Backend *b, const ValData *v, int64_t seq_len, int64_t stride, int64_t first, int64_t end,
                     double sums[3]);
/* Asked before each batch of an evaluation (batch counts from 0): 1 to give up there (a stop
 * was asked for; the evaluation then fails through stop_abandon), -1 on an error, 0 to go on. */
typedef struct {
    int (*stop)(void *ctx, int64_t batch);
    void *ctx;
} ValPoll;
/* val_sliding_sums asking poll (NULL: never) before each batch. */
int val_sliding_sums_polled(Backend *b, const ValData *v, int64_t seq_len, int64_t stride, int64_t first,
                            int64_t end, double sums[3], const ValPoll *poll);
/* The validation eval_stride asks for: val_evaluate for 0, val_evaluate_sliding otherwise. */
int val_evaluate_with_stride(Backend *b, const ValData *v, const DistInfo *d, int64_t seq_len, int64_t stride,
                             double *val_loss, double *val_bpb);

/* The round trip's evaluation of the weights in st on cfg's val_files, in this process alone, on
 * cfg's device, on sequences of eval_seq_len tokens (train_seq_len when 0; a line says so when
 * they differ), printed as train_gpt.py prints it: "<label>_roundtrip val_loss:...
 * val_bpb:... eval_time:Nms" and "<label>_roundtrip_exact ..." (non-overlapping), then with
 * cfg->eval_stride > 0 "<label>_sliding_window val_loss:... val_bpb:... stride:N eval_time:Nms"
 * and its _exact line; label is e.g. "final_int8_zlib". */
int print_round_trip_evaluation(const Config *cfg, TrainState *st, const char *label);

/* `ctrain eval`'s plain (stride 0) or sliding-window evaluation of the weights in st on cfg's
 * val_files as the round trip evaluates them, every rank of d its share; rank 0 prints "<label>
 * val_loss:... val_bpb:... tokens:N bytes:N eval_time:Nms" and "<label>_exact ...". */
int print_weights_evaluation(const Config *cfg, TrainState *st, const DistInfo *d, const char *label, int64_t stride);

/* train_gpt.py's ending (golf_artifact.h): write the artifact of st's weights in the chosen
 * format to path and print its size, with the code's (code_bytes; -1: ctrain's own, as the build
 * measured it, docs/model.md "The code's size") as
 * train_gpt.py prints them, and the total against parameter-golf's 16,000,000-byte cap; with
 * evaluate, read it back into st->params (replacing the weights) and print the round-trip
 * val_loss and val_bpb on cfg's val_files, then with cfg->ttt_enabled (unless ttt_elsewhere)
 * the test-time-training score; with dequantized, read it back and also write those weights
 * there as safetensors. A stop asked for (stop.h) is honoured between the parts and at an
 * evaluation's batches, failing through stop_abandon. */
typedef struct {
    GolfFormat format;
    int evaluate;
    int64_t code_bytes;
    const char *dequantized; /* NULL: none */
    /* gptq-brotli: per parameter, the Hessian of its input (golf_gptq.h; NULL entries: none
     * collected); the format's other settings are cfg's keys */
    const float *const *hessians;
    /* 1: an artifact whose size with the code's is above the 16,000,000-byte cap is not written
     * (an error naming both and the cap); 0 (a run's end): written, and said OVER */
    int refuse_oversize;
    /* 1 (a run's end): the test-time-training evaluation that ttt_enabled adds is left to the
     * caller, which runs it on every rank of its job (golf_ttt_evaluate); 0: run here, in this
     * process alone, after the round trip */
    int ttt_elsewhere;
} GolfOptions;
int golf_write_and_evaluate(const Config *cfg, TrainState *st, const char *path, const GolfOptions *o);

/* Score-first test-time training (ttt_eval.c; issue 57, docs/model.md "Test-time training"):
 * the validation documents of cfg's val_files (the split trimmed to eval sequences) scored as
 * ttt_plan.h plans them, every rank its share, with each document's own adapters learning from
 * the chunks it has scored and the base weights (st->params, changed in place) taking the
 * phases' global steps. adapt 0 is the `docs` evaluation: the same windows and batches with the
 * base model alone (no adapters, no global steps). Prints progress and "<label> val_loss:...
 * val_bpb:... tokens:N bytes:N eval_time:Nms" and its _exact line (rank 0). Every rank of d
 * calls it; the ranks agree (dist.h's dist_agree) after each batch, before each SGD step's
 * gradient sum and after each global step, so a stop asked of any rank ends it on all of them
 * there (failing through stop_abandon) and an error on one fails all of them (the lowest failing
 * rank's message on every rank; an error outranks a stop), none left waiting in a collective. */
typedef struct {
    int adapt;
    const char *label;
    const char *dump;  /* directory for the files tests/parity/ttt_ref.py reads (docs/testing.md); NULL: none */
    int64_t dump_doc;  /* with dump: the document whose adapters are written (-1: none) */
} TttOptions;
typedef struct {
    double val_loss, val_bpb, tokens, bytes, seconds;
    int64_t unadapted_batches; /* scored without adapting, past ttt_time_budget */
    int phases_run;
} TttResult;
int ttt_evaluate(const Config *cfg, TrainState *st, const DistInfo *d, const TttOptions *o, TttResult *r);
/* Every file `--dump DIR` may write (ttt_dump.c's names: the phases' of cfg, dump_doc's adapters
 * when >= 0), added to outputs, for the check that none is a file the evaluation reads. */
void ttt_dump_outputs(const char *dir, const Config *cfg, int64_t dump_doc, CtPathList *outputs);
/* The label of a format's round trip ("final_int8_zlib", "final_int6", "final_gptq"). */
const char *golf_eval_label(GolfFormat format);
/* The record's last stage: the weights in st (an artifact's, as golf_read gives them) scored with
 * test-time training on every rank of d, printed as "<golf_eval_label>_ttt_phased val_loss:..."
 * (rank 0). Every rank of d calls it; a stop or an error on any rank ends it on all of them
 * (ttt_evaluate). */
int golf_ttt_evaluate(const Config *cfg, TrainState *st, const DistInfo *d, GolfFormat format);

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
