/* trainer.h — state of one training run shared by the loop (train.c), its data checks
 * (train_data.c), NCCL start (train_nccl.c), checkpoint resume (train_resume.c), saving
 * (train_save.c) and the run's end (train_end.c); validation is src/infer/eval.c's. */
#ifndef CT_TRAINER_H
#define CT_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "checkpoint.h"
#include "config.h"
#include "golf_hessians.h"
#include "data.h"
#include "dist.h"
#include "dist_nccl.h"
#include "infer.h"
#include "isolate.h"
#include "loader.h"

typedef struct {
    const Config *cfg;
    DistInfo *dist;
    int rank, world, accum;
    TokenSet train_set, val_set;
    ValData val;
    TrainState st;
    Backend *backend;
    Loader loader;
    LoaderCursor start_cursor;
    FILE *metrics;
    int lock_fd;              /* rank 0: holds out_dir's lock (dirlock.h) until the run ends; -1 otherwise */
    char ckpt_dir[4200];
    int64_t step;             /* optimizer steps completed */
    int64_t last_saved_step;  /* -1 until a checkpoint exists for the current state */
    int failed_together;      /* every rank failed the same way (an agreed decision): no abort needed */
    double training_ms;       /* training time before t0 (excludes validation) */
    /* the latest validation (saved in checkpoints' /metrics); step -1 while there is none */
    double last_val_step, last_val_loss, last_val_bpb;
    double saved_val_step;    /* last_val_step when the checkpoint of last_saved_step was written */
    /* the newest checkpoint known to be complete (-1: none this process), and on rank 0 when its
     * write ended (ct_now_ms): a stop asked for before then came during that write */
    int64_t written_step;
    double written_end_ms;
    int64_t steps_timed;      /* steps this process has run, and the average time of those after */
    double step_ms_avg;       /* the first (an exponential moving average, for the ETA) */
    double t0;
    /* the background checkpoint writer (train_save.c): rank 0's child process; every rank
     * keeps save_pending/pending_step to collect the verdict together */
    CtChild writer;
    int save_pending;
    int64_t pending_step;
    /* NCCL jobs (train_nccl.c): the gradient reducer (NULL otherwise) and the log line; how the
     * Muon updates reach every rank: 1 broadcasts from their owners (the default), 0 one sum
     * (CT_MUON_COMBINE=allreduce, the earlier path, kept for side-by-side timing) */
    DistGradReducer *reducer;
    char nccl_note[600];
    int muon_share;
    /* the software stack the bits depend on (Backend.stack, and NCCL's in NCCL jobs), saved in
     * every checkpoint; and the resumed checkpoint's ("" for a fresh run or a file without one),
     * compared with it once the backend exists */
    char stack[1024], resumed_stack[1024];
    /* rank 0: the lineage its checkpoints carry (train_resume.c), and where the history of a
     * new lineage is read from (the abandoned lineage's metrics.jsonl, moved aside; "" else) */
    CheckpointLineage lineage;
    char metrics_from[4600];
} Trainer;

/* train_resume.c: after the backend exists, t->stack from it (and NCCL), printed; a resume from a
 * checkpoint of another stack says which items differ. */
void trainer_note_stack(Trainer *t);

/* train_data.c */
/* Read every token of the training files, each rank its share (files rank, rank + world, ...):
 * values below vocab_size and tokens_crc32 where a file has one. Every rank returns the same
 * verdict (-1 on all when any rank found a bad file; that rank's message names it). */
int train_check_tokens(const TokenSet *train, const DistInfo *dist, int rank, int world);

/* train_nccl.c (jobs where config_uses_nccl; train_nccl_connect in train.h starts them) */
/* The gradient buckets of a model: its parameters with model_grad_ready_stage, buckets of up to
 * bucket_mb MB (dist_buckets.h). */
int trainer_bucket_plan(const ModelSpec *s, double bucket_mb, DistBucketPlan *plan);
/* After backend_create: the gradient reducer (bucket plan of grad_bucket_mb over the model's
 * backward stages) on the backend's device gradients. */
int trainer_reducer_init(Trainer *t);
void trainer_reducer_free(Trainer *t);

/* train_resume.c */
/* Decide where the run starts (resume = auto | none | PATH) and load the checkpoint if any:
 * fills t->st, t->step, t->training_ms, t->start_cursor. Returns 0, or -1 with *exit_code set
 * (2 for a refused configuration, 1 otherwise; t->failed_together when the ranks agreed on a
 * failure to load a checkpoint that starts a new lineage: rank 0's message names the rank). */
int trainer_resume(Trainer *t, int *exit_code);
/* Open metrics.jsonl: fresh, or truncated after the resumed step so that the file continues
 * without duplicated or missing steps. */
int trainer_open_metrics(Trainer *t);
/* train_aside.c */
/* A suffix ".replaced-<UTC time>" (then "-2", "-3", ...) that no name in out_dir ends with yet. */
int trainer_aside_suffix(const char *out_dir, char *suffix, size_t cap);
/* Rename out_dir's metrics.jsonl, config.txt and final_model.* (those not already aside) to
 * the same names ending in suffix, each move printed after "<why>: "; metrics_aside (may be
 * NULL) receives the new path of metrics.jsonl ("" when there was none). */
int trainer_move_aside(const char *out_dir, const char *suffix, const char *why, char *metrics_aside, size_t cap);
/* train_end.c: the end of a run after its last step, the parts of it left (a bit set) */
enum { TRAINER_END_FINAL_VAL = 1, TRAINER_END_AVERAGED = 2, TRAINER_END_ARTIFACT = 4, TRAINER_END_TTT = 8 };
/* The parts of the end (TRAINER_END_AVERAGED, _ARTIFACT, _TTT) this configuration asks for. */
unsigned trainer_end_asked(const Trainer *t);
/* Rank 0 records in out_dir/end_of_run.txt (atomically) the parts still to do; 0 removes it. */
int trainer_end_record(const Trainer *t, unsigned left);
/* Every rank, for a run whose steps are done: what is left of its end (rank 0 reads the
 * record and looks for the artifact; the final validation follows the checkpoint), limited to
 * what the configuration asks for. */
int trainer_end_left(Trainer *t, unsigned *left);
/* The parts of left in words, ", "-separated. */
void trainer_end_describe(unsigned left, char *buf, size_t cap);
/* Every rank: the parts TRAINER_END_ARTIFACT (rank 0 writes the artifact and prints its round
 * trip) and TRAINER_END_TTT (every rank reads the artifact's weights into t->st and scores them
 * with test-time training, the job's ranks sharing the batches) of *left, each cleared from *left
 * and recorded done once done; the training backend of the ranks that run either is destroyed
 * first. 0, or -1 with the error set: a stop (stop_abandoned: the caller exits 75 with *left
 * recorded) or an error (with the test-time training asked for, on every rank alike:
 * t->failed_together). */
int trainer_end_golf(Trainer *t, unsigned *left);
/* out_dir/<the artifact's file name> for cfg's golf_format (fails on an unknown format). */
int trainer_artifact_path(const Config *cfg, char *path, size_t cap);
/* Rank 0, golf_format = gptq-brotli: the Hessians of the run's final weights (t->st), from
 * out_dir/final_model.hessians.h5 when it holds this step's (an end stopped after collecting
 * them), else collected (golf_hessians.h) and written there first. */
int trainer_gptq_hessians(Trainer *t, GolfHessians *h);
/* Before the first step: what the end of the run needs that can be checked now (the
 * artifact's format and path, the validation data's length for the round trip). */
int trainer_end_check(const Config *cfg, const TokenSet *val);

/* train_save.c */
/* Write a checkpoint of the current state (no-op if one exists for this step). Rank 0 writes.
 * In-line: every rank learns whether it worked before going on. In the background
 * (trainer_save_async): the write runs while training goes on, and every rank learns its
 * verdict at the next trainer_save or trainer_save_wait. */
int trainer_save(Trainer *t);
/* 1 when checkpoints are written in the background (checkpoint_async, device). */
int trainer_save_async(const Trainer *t);
/* Every rank: the verdict of the background write in flight, if any (0 when none). Call it
 * before the run ends or stops, so the last checkpoint is complete and its failure reported. */
int trainer_save_wait(Trainer *t);
/* Every rank, once a stop is asked for: *yes = 1 when it came while the newest checkpoint was
 * being written (rank 0's clock decides; a pending write's verdict is collected first), so that
 * the run stops at that checkpoint rather than write another; *step = its step. */
int trainer_stop_at_written(Trainer *t, int *yes, int64_t *step);
/* Rank 0 on a failure exit: let a background write in flight finish (its message, if it
 * fails, is printed), without talking to the other ranks. */
void trainer_save_abandon(Trainer *t);

#endif
