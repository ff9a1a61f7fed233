/* golf_hessians.h — the GPTQ Hessians of a model (docs/checkpoint-format.md, "The Hessians
 * file"): for each matrix the gptq-brotli artifact quantizes by GPTQ, H = the mean over the
 * calibration batches of X^T X of its input (cols x cols, float32), in an HDF5 file in the run's
 * directory (final_model.hessians.h5, beside the artifact), so that `ckpt golf` can quantize
 * again with other settings without collecting them again. One dataset per input: /hessians/NAME for each parameter NAME, the matrices that
 * read the same input (c_q, c_k, c_v of a block) hard links to one dataset. */
#ifndef CT_GOLF_HESSIANS_H
#define CT_GOLF_HESSIANS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "model.h"
#include "train_state.h"

typedef struct {
    int num_params;            /* the model's (ModelSpec.num_params) */
    float **h;                 /* [num_params]: parameter i's Hessian, or NULL (none); h[i] may equal h[j] */
    int64_t batches, tokens;   /* how many calibration batches and tokens they average over */
    int64_t step;              /* the optimizer steps of the weights they were collected with */
} GolfHessians;

/* Every Hessian path names for this model: which parameters have one (the matrices of more than
 * 65,536 elements, ndim 2, except the MTP heads), and which share the input of an earlier one
 * (*shares = that parameter's index, or -1). */
int golf_hessian_wanted(const ModelSpec *spec, int i, int *shares);

/* The Hessians file's name in a run's directory. */
#define GOLF_HESSIANS_FILE "final_model.hessians.h5"

/* Zeroed Hessians for every wanted parameter (sharing ones point to one buffer). */
void golf_hessians_alloc(const ModelSpec *spec, GolfHessians *h);
void golf_hessians_free(GolfHessians *h);

/* Whether path can be written (its folder made, its temporary file created and removed): an
 * error naming the file and the system's reason, so that a command fails before its calibration
 * rather than after it. */
int golf_hessians_check_writable(const char *path);
/* Write h to path atomically (a temporary file renamed into place). */
int golf_hessians_write(const ModelSpec *spec, const GolfHessians *h, const char *path);
/* Read the Hessians file at path for this model: each wanted parameter's dataset if present
 * (float32 [cols, cols]; another shape or type is an error naming the file and dataset), NULL
 * where absent. */
int golf_hessians_read(const ModelSpec *spec, const char *path, GolfHessians *h);

/* GPTQ's calibration (golf_hessians_collect.c): the Hessians of st's weights over
 * cfg->gptq_calibration_batches micro-batch slots at the start of cfg->train_files, on a backend
 * made for it on cfg->device (which must have accumulate_input_grams); prints the record's
 * "collected" line. On failure h is empty. */
int golf_collect_hessians(const Config *cfg, TrainState *st, GolfHessians *h);

#endif
