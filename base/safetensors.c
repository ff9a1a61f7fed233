/* safetensors.c — builds a safetensors header (format in safetensors.h). */
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

unsigned char *ct_safetensors_header(const char *metadata, const CtSafetensor *t, int n, size_t *len) {
    char *json = NULL;
    size_t size = 0;
    FILE *f = ct_open_memstream(&json, &size, "a safetensors header");
    fprintf(f, "{\"__metadata__\":{%s}", metadata);
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        fprintf(f, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", offset, offset + t[i].bytes);
        offset += t[i].bytes;
    }
    fputc('}', f);
    fclose(f);
    size_t padded = (size + 7) / 8 * 8;
    unsigned char *out = ct_malloc(8 + padded, "safetensors header");
    for (int b = 0; b < 8; b++) out[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    memcpy(out + 8, json, size);
    memset(out + 8 + size, ' ', padded - size);
    free(json);
    *len = 8 + padded;
    return out;
}
