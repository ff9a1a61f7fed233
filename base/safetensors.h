/* safetensors.h — the header of a safetensors file, the one piece of that format both of
 * ctrain's writers (`ckpt export`, checkpoint/ckpt_export.c, and the parameter-golf artifact,
 * src/infer/golf_artifact.c) need: an 8-byte little-endian length N, then N bytes of JSON
 * {"__metadata__": {...}, "name": {"dtype": ..., "shape": [...], "data_offsets": [begin, end]},
 * ...} padded with spaces to a multiple of 8, the tensors' bytes following back to back in the
 * order given. */
#ifndef CT_SAFETENSORS_H
#define CT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;
    const char *dtype; /* "F32", "BF16", "F16", "I8", ... */
    int ndim;          /* 0 for a scalar */
    const int64_t *shape;
    size_t bytes;
} CtSafetensor;

/* The length prefix and the JSON header for tensors t[0..n) laid out back to back in that order;
 * metadata is the body of __metadata__ (e.g. "\"format\":\"pt\""). Returns a malloc'd buffer of
 * *len bytes (a multiple of 8); the data starts right after it. */
unsigned char *ct_safetensors_header(const char *metadata, const CtSafetensor *t, int n, size_t *len);

#endif
