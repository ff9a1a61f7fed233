/* golf_artifact_internal.h — what the artifact formats' files share: whole-file reads and atomic
 * writes (golf_artifact_file.c), and the gptq-brotli format's entry points (golf_gptq_artifact.c)
 * that golf_artifact.c's golf_write and golf_read dispatch to. */
#ifndef CT_GOLF_ARTIFACT_INTERNAL_H
#define CT_GOLF_ARTIFACT_INTERNAL_H

#include <stddef.h>

#include "golf_artifact.h"

/* (golf_artifact_file.c) parts[0..n) written back to back into path through a temporary file renamed into place */
int golf_file_write_atomically(const char *path, const void *const *parts, const size_t *lens, int n);
/* the whole of path into a malloc'd *buf (one byte more allocated) of *len bytes */
int golf_file_read(const char *path, unsigned char **buf, size_t *len);

/* gptq-brotli (golf_gptq_artifact.c): golf_write's and golf_read's work for that format */
int golf_gptq_write(const ModelSpec *spec, const float *params, const GolfGptqOptions *gptq, const char *path,
                    GolfStats *stats);
int golf_gptq_read(const ModelSpec *spec, const char *path, float *params);

#endif
