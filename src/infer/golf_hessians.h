/* golf_hessians.h — the GPTQ Hessians of a model (docs/checkpoint-format.md, "The Hessians
 * file"): for each matrix the gptq-brotli artifact quantizes by GPTQ, H = the mean over the
 * calibration batches of X^T X of its input (cols x cols, float32), in an HDF5 file beside the
 * checkpoint, so that `ckpt golf` can quantize again with other settings without collecting
 * them again. One dataset per input: /hessians/NAME for each parameter NAME, the matrices that
 * read the same input (c_q, c_k, c_v of a block) hard links to one dataset. */
#ifndef CT_GOLF_HESSIANS_H
#define CT_GOLF_HESSIANS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

typedef struct {
    int num_params;            /* the model's (ModelSpec.num_params) */
    float **h;                 /* [num_params]: parameter i's Hessian, or NULL (none); h[i] may equal h[j] */
    int64_t batches, tokens;   /* how many calibration batches and tokens they average over */
} GolfHessians;

/* Every Hessian path names for this model: which parameters have one (the matrices of more than
 * 65,536 elements, ndim 2, except the MTP heads), and which share the input of an earlier one
 * (*shares = that parameter's index, or -1). */
int golf_hessian_wanted(const ModelSpec *spec, int i, int *shares);

/* The Hessians file beside checkpoint ckpt: its path with ".h5" replaced by ".hessians.h5"
 * (".hessians.h5" appended to another name); returns buf. */
const char *golf_hessians_path(const char *ckpt, char *buf, size_t cap);

/* Zeroed Hessians for every wanted parameter (sharing ones point to one buffer). */
void golf_hessians_alloc(const ModelSpec *spec, GolfHessians *h);
void golf_hessians_free(GolfHessians *h);

/* Write h to path atomically (a temporary file renamed into place); step: the checkpoint's. */
int golf_hessians_write(const ModelSpec *spec, const GolfHessians *h, int64_t step, const char *path);
/* Read the Hessians file at path for this model: each wanted parameter's dataset if present
 * (float32 [cols, cols]; another shape or type is an error naming the file and dataset), NULL
 * where absent. */
int golf_hessians_read(const ModelSpec *spec, const char *path, GolfHessians *h);

#endif
