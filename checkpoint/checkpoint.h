/* checkpoint.h — HDF5 checkpoints of a training run (format: docs/checkpoint-format.md) and what
 * the `ctrain ckpt` tools show of them.
 *
 * A checkpoint is <dir>/step_NNNNNNNN.h5: the fp32 master weights under /model (names and
 * shapes of train_gpt.py's state_dict), the optimizer state under /optimizer, the loader
 * cursor and data file list under /loader/train, the whole configuration under /config and
 * named scalars under /metrics. Every dataset is Fletcher32-checksummed per chunk and the root
 * attribute content_crc32 covers every dataset and attribute, so damage anywhere is detected
 * before a run resumes from it. <dir>/latest names the newest complete checkpoint.
 *
 * Writes are crash-safe: the file is written under a temporary name, fsynced and renamed into
 * place, then `latest` is replaced the same way; a crash or SIGKILL at any moment leaves the
 * previous checkpoint valid and `latest` naming a valid file.
 *
 * All functions return 0 (or the documented count) on success and -1 with ct_error() naming
 * the file, the object and what was expected. They take ct_hdf5_lock() themselves, so they
 * may run while the loader's prefetch thread reads token files. */
#ifndef CT_CHECKPOINT_H
#define CT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "data.h"
#include "loader.h"
#include "train_state.h"

/* Which line of training a checkpoint belongs to (docs/checkpoint-format.md "Lineage"): a run
 * that starts from the initial weights, or from a checkpoint named by resume=PATH, starts a
 * new lineage; resuming a run's own checkpoint continues its lineage. The root attributes
 * lineage, lineage_origin, lineage_origin_step, lineage_origin_crc32 and lineage_origin_path;
 * all optional (a file of an older ctrain has none: id "", origin_step -1). */
#define CKPT_LINEAGE_ID_CAP 32
typedef struct {
    char id[CKPT_LINEAGE_ID_CAP];     /* 16 hex digits, random; "" when the file records none */
    char origin[CKPT_LINEAGE_ID_CAP]; /* the lineage of the checkpoint it started from ("" none) */
    int64_t origin_step;              /* that checkpoint's step; -1: from the initial weights */
    int64_t origin_crc32;             /* that checkpoint's content_crc32; -1 with origin_step -1 */
    char origin_path[4200];           /* that checkpoint's path as resume= gave it ("" none) */
} CheckpointLineage;

/* A new lineage id in l (16 random hex digits); origin fields from `from` (the checkpoint the
 * lineage starts from: its lineage, step, content_crc32 and path), or "from the initial
 * weights" when from_path is NULL. */
void checkpoint_lineage_start(CheckpointLineage *l, const CheckpointLineage *from, int64_t from_step,
                              uint32_t from_crc32, const char *from_path);
/* 1 if a checkpoint of lineage c at step c_step is part of l's history: l's own lineage, or
 * the lineage l started from, up to the step it started at. Files without a lineage count as
 * one lineage (id ""). */
int checkpoint_lineage_has(const CheckpointLineage *l, const CheckpointLineage *c, int64_t c_step);
/* The lineage, step and content_crc32 of a checkpoint, from its root attributes only (no
 * verification), read in a child process (isolate.h: not while another thread may hold the
 * HDF5 lock): 0, or -1 with a message when the file or those attributes cannot be read. */
int checkpoint_read_lineage(const char *path, CheckpointLineage *l, int64_t *step, uint32_t *content_crc32);
/* Move every step_*.h5 of dir that is not part of keep's history (checkpoint_lineage_has, with
 * the file's own lineage; a file whose lineage cannot be read is not) into aside_dir, made on
 * the first move (a file of a newer checkpoint format stays, as pruning leaves it), and `latest` with them when it names a moved file. *moved counts the files.
 * Returns 0, or -1 with a message (files already moved stay moved). */
int checkpoint_set_aside(const char *dir, const CheckpointLineage *keep, const char *aside_dir, int *moved);

/* The run position saved beside the tensors. */
typedef struct {
    int64_t step;         /* optimizer steps completed */
    int64_t train_tokens; /* tokens taken from the training stream */
    int world_size;
    double training_time_ms;
    const char *device; /* "cpu" / "cuda" */
    /* (may be NULL) the libraries and hardware the bits depend on (Backend.stack), the root
     * attribute `stack`; NULL after a load of a file without it (an older ctrain wrote it) */
    const char *stack;
    LoaderCursor cursor;
    /* Extra named scalars for exact continuation and logging (e.g. last_val_loss); may be 0
     * entries. Names are attribute names of /metrics: non-empty, unique, without '/'. */
    int num_extras;
    const char *const *extra_names;
    const double *extra_values;
    /* the lineage written (nothing when id is ""); on load, the file's */
    CheckpointLineage lineage;
    uint32_t content_crc32; /* on load: the file's content checksum (ignored when writing) */
} CheckpointInfo;

/* Write dir/step_NNNNNNNN.h5 (created with its parent directories if needed) atomically,
 * point dir/latest at it, then delete the oldest checkpoints so that `keep` (>= 1) remain;
 * the file just written and the one `latest` named before are never deleted, nor is a file of
 * a newer checkpoint format. An existing file of the same step is replaced atomically (one of
 * a newer format is not: that is an error). path_out (may be NULL) receives the final
 * path. Failing to delete an old checkpoint only prints a warning. st must hold the host copy
 * of the state (the CUDA backend syncs it first). */
int checkpoint_save(const char *dir, const Config *cfg, const TrainState *st, const CheckpointInfo *info,
                    const TokenSet *train_set, int keep, char *path_out, size_t path_cap);

/* What a verified checkpoint holds, in brief. */
typedef struct {
    int64_t step;
    int num_tensors;
    uint32_t content_crc32;
} CheckpointSummary;

/* Fully verify a file without needing a configuration: the format attributes, that every
 * object the model described by the file's own /config needs is present with the right type
 * and shape (and nothing else is), the loader cursor against the recorded file list, the
 * Fletcher32 checksum of every chunk of every dataset, and the content checksum. summary (may
 * be NULL) is filled when the file is valid. */
int checkpoint_verify(const char *path, CheckpointSummary *summary);

/* Resume: verify the file (in a child process, unless `verified`: the caller has just had
 * checkpoint_verify accept it, as checkpoint_find_resumable does; the checks below still read
 * the whole file in this process), then check it against cfg: every SHAPE key of the key table must be
 * equal (the message lists each differing key with the checkpoint's and the configured
 * value); the training data files must be train_set's as cfg->resume_data asks (same: paths,
 * token counts and checksums; moved: counts and checksums; changed: counts; the message names
 * the first difference and what to set if the change was meant). Messages of these checks start
 * with what differs; the caller says which file it was resuming from. Then fill st (params,
 * exp_avg, exp_avg_sq, momentum, adam_step; st must have been made by train_state_init from cfg) and *info (step, train_tokens,
 * world_size, training_time_ms, device, cursor, extras: allocated copies, freed with
 * checkpoint_info_free). FREE keys whose value differs are reported by calling
 * report(key, checkpoint_value, configured_value) for each, after the load succeeded (report
 * may be NULL). On failure st is unspecified and *info is empty. */
int checkpoint_load(const char *path, int verified, const Config *cfg, TrainState *st, const TokenSet *train_set,
                    CheckpointInfo *info,
                    void (*report)(const char *key, const char *old_value, const char *new_value));
void checkpoint_info_free(CheckpointInfo *info);

/* The configuration a checkpoint was written with (its /config, defaults for keys it lacks) and
 * its state (st made by train_state_init from it), for tools that use the weights without a
 * run: `ctrain ckpt golf`. The file is verified first, in a child process. The caller frees cfg
 * and st, also on failure. */
int checkpoint_read_weights(const char *path, Config *cfg, TrainState *st);

/* resume=auto: the newest valid checkpoint in dir. Tries the one `latest` names first, then
 * the other step_*.h5 files by descending step; for each one that fails verification (and
 * for a `latest` that is unreadable or names a missing file) calls warn(path, reason) (warn may
 * be NULL). The first file whose lineage can be read decides the lineage: a valid file outside
 * its history (checkpoint_lineage_has) is passed over with a warning, never resumed from. Returns 1 with the path in path_out, 0 if dir holds no checkpoint (or does not
 * exist), -1 if checkpoints exist but none is valid, or on an error reading dir. */
int checkpoint_find_resumable(const char *dir, char *path_out, size_t cap,
                              void (*warn)(const char *path, const char *reason));

/* The checkpoint a command-line argument names, for the `ctrain ckpt` tools: a file as is; a
 * checkpoints directory or a run directory (its checkpoints/): the file its `latest` names, or
 * its newest step_*.h5 when it has no `latest`; a `latest` file: the file it names. Fails with
 * a message when a directory holds no checkpoint. */
int checkpoint_resolve(const char *arg, char *path_out, size_t cap);

/* 1 if dir holds at least one step_*.h5 checkpoint, 0 if none (or dir does not exist), -1 if
 * dir cannot be read (resume=none refuses to overwrite an existing run). */
int checkpoint_dir_has_checkpoints(const char *dir);

/* `ctrain ckpt info`: print what the file holds (position, configuration summary, tensor table)
 * from its metadata, without verifying the tensors. */
int checkpoint_print_info(const char *path);

/* The train_files and val_files globs of a checkpoint's /config (allocated; the caller frees
 * them), read from its metadata in a child process (a damaged file cannot crash the caller):
 * the data files a command must not write over (paths.h). -1 with a message if unreadable. */
int checkpoint_data_globs(const char *path, char **train_files, char **val_files);

/* `ctrain ckpt diff`: print how two readable checkpoints differ (position, configuration,
 * per-tensor differences, a summary of the weights' distance). model_only: compare the /model
 * tensors only, and call them identical when those are bitwise equal. Returns the exit code:
 * 0, or 1 with exact when they are not identical, 1 on errors (printed). */
int checkpoint_diff(const char *a, const char *b, int exact, int model_only);

/* `ctrain ckpt export`: verify the checkpoint, then write its weights (the weights its run ends
 * with, train_state_final_weights: /ema, the average of /swa, or /model; with `live` always
 * /model) to out_path as safetensors (train_gpt.py's names, shapes and state_dict order; fp32,
 * or bf16 rounded to nearest even), atomically. For a checkpoint with /ema or /swa the
 * metadata's "weights" says which were taken (ema, swa or live) and weights (weights_cap bytes,
 * may be 0) receives it in words ("EMA weights, /ema"); for one without, weights is "" and
 * the file is what it always was. */
int checkpoint_export_safetensors(const char *path, const char *out_path, int bf16, int live, char *weights,
                                  size_t weights_cap);

#endif
