/* golf_artifact_internal.h — what the artifact formats' files share: whole-file reads and atomic
 * writes (golf_artifact_file.c), the GPTQ formats' quantized container and brotli
 * (golf_gptq_artifact.c), which gptq-brotli compresses whole and gptq-pergroup splits by role
 * (golf_pergroup.c), and the entry points golf_artifact.c's golf_write and golf_read dispatch to. */
#ifndef CT_GOLF_ARTIFACT_INTERNAL_H
#define CT_GOLF_ARTIFACT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "golf_artifact.h"

/* (golf_artifact_file.c) parts[0..n) written back to back into path through a temporary file renamed into place */
int golf_file_write_atomically(const char *path, const void *const *parts, const size_t *lens, int n);
/* the whole of path into a malloc'd *buf (one byte more allocated) of *len bytes */
int golf_file_read(const char *path, unsigned char **buf, size_t *len);

/* ---- the GPTQ formats' container (golf_gptq_artifact.c) ---- */

enum { GOLF_BROTLI_WINDOW = 22 /* the Python module's default window, as the record's brotli.compress */ };

/* The quantized tensors of params (GPTQ, LQER, gate rows, float16) as the uncompressed
 * safetensors container (header with the plan and the tensors' CRC-32, then the tensors) in a
 * malloc'd *container; fills stats but file_bytes. */
int golf_gptq_container(const ModelSpec *spec, const float *params, const GolfGptqOptions *gptq, const char *path,
                        GolfStats *stats, unsigned char **container, size_t *container_len);
/* The container's weights into params after checking its header is this model's and its CRC-32;
 * errors name path. */
int golf_gptq_decode(const ModelSpec *spec, const unsigned char *container, size_t len, const char *path,
                     float *params);
/* Where each parameter's int8 values ("NAME.q", a GPTQ or rounded matrix; bytes = 0 for any
 * other rule) lie in the data after the header. container needs only hold the header (len
 * bytes); -1 naming path when the header is not this model's. values: model_artifact_params. */
typedef struct {
    size_t offset, bytes;
} GolfGptqValues;
int golf_gptq_values(const ModelSpec *spec, const unsigned char *container, size_t len, const char *path,
                     size_t *header_len, size_t *data_bytes, GolfGptqValues *values);
/* the largest container this model can have (a bound for decompressing) */
size_t golf_gptq_container_cap(const ModelSpec *spec);

/* libbrotli at quality 11 with this window (lgwin); decompressing stops at cap bytes (more is an
 * error naming path, as are a damaged stream and bytes after it). *out / *raw malloc'd, also on
 * failure (the caller frees). Without libbrotli: golf_format_available's message. */
int golf_brotli_compress(const unsigned char *raw, size_t len, int window, unsigned char **out, size_t *out_len,
                         const char *path);
int golf_brotli_decompress(const unsigned char *packed, size_t len, size_t cap, unsigned char **raw,
                           size_t *raw_len, const char *path);

/* gptq-brotli's second half: a container golf_gptq_container made, brotli-compressed into path
 * (atomically); *file_bytes its size */
int golf_gptq_pack(const unsigned char *container, size_t len, const char *path, int64_t *file_bytes);
/* gptq-brotli (golf_gptq_artifact.c): the container, brotli-compressed */
int golf_gptq_write(const ModelSpec *spec, const float *params, const GolfGptqOptions *gptq, const char *path,
                    GolfStats *stats);
int golf_gptq_read(const ModelSpec *spec, const char *path, float *params);

/* ---- gptq-pergroup (golf_pergroup.c) ---- */

/* The same container split by role: the GPTQ matrices' values by group, rows of the hot groups
 * in L1 nearest-neighbour order, each group through lrzip's ZPAQ (a subprocess), the rest brotli
 * (docs/checkpoint-format.md, "gptq-pergroup"). */
int golf_pergroup_write(const ModelSpec *spec, const float *params, const GolfGptqOptions *gptq, const char *path,
                        GolfStats *stats);
int golf_pergroup_read(const ModelSpec *spec, const char *path, float *params);
/* golf_pergroup_write's second half: a container golf_gptq_container made, packed into path
 * (atomically); *file_bytes its size */
int golf_pergroup_pack(const ModelSpec *spec, const unsigned char *container, size_t len, const char *path,
                       int64_t *file_bytes);
/* The record's row order for a hot group: start at row 0, then repeatedly the unused row of least
 * L1 distance to the last one taken (ties: the lowest index). order: rows entries, rows <= 65536. */
void golf_l1_sort_rows(const int8_t *m, int rows, int cols, uint16_t *order);

#endif
