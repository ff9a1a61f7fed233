/* golf_artifact.c — the parameter-golf artifacts of a model (formats in golf_artifact.h, the
 * per-tensor rules in golf_quant.c): the format table, the layout of the int8 and int6 formats'
 * safetensors container, the tensors encoded into it and decoded from it, and the compressed
 * file written and read (gptq-brotli's own layout is golf_gptq_artifact.c's; both use the
 * file helpers of golf_artifact_file.c). The codecs are the libraries (zlib level
 * 9 as train_gpt.py's zlib.compress; libzstd level 22 as the record's
 * zstandard.ZstdCompressor(level=22)), never our own. */
#include "golf_artifact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#ifdef CT_HAVE_ZSTD
#include <zstd.h>
#endif

#include "common.h"
#include "golf_artifact_internal.h"
#include "safetensors.h"

/* ---- the formats ---- */

#define ZSTD_LEVEL 22 /* the record's */

static const struct {
    const char *name, *label, *file, *what; /* what: in "not the int8 artifact of this model" */
} FORMATS[] = {
    [GOLF_INT8_ZLIB] = {"int8-zlib", "int8+zlib", "final_model.int8.stz", "int8"},
    [GOLF_INT6_ZSTD] = {"int6-zstd", "int6+zstd", "final_model.int6.safetensors.zst", "int6"},
    [GOLF_GPTQ_BROTLI] = {"gptq-brotli", "quantized+brotli", "final_model.gptq.safetensors.br", "gptq"},
    [GOLF_GPTQ_PERGROUP] = {"gptq-pergroup", "quantized+pergroup", "final_model.gptq.pgrp", "gptq"},
};

int golf_format_from_name(const char *name, GolfFormat *format) {
    for (int f = 0; f < (int)(sizeof FORMATS / sizeof FORMATS[0]); f++)
        if (!strcmp(name, FORMATS[f].name)) {
            *format = (GolfFormat)f;
            return 0;
        }
    return -1;
}

const char *golf_format_label(GolfFormat format) { return FORMATS[format].label; }
int golf_format_is_gptq(GolfFormat format) { return format == GOLF_GPTQ_BROTLI || format == GOLF_GPTQ_PERGROUP; }
const char *golf_default_file(GolfFormat format) { return FORMATS[format].file; }

int golf_run_artifact_path(const char *out_dir, const char *format_name, char *path, size_t cap) {
    GolfFormat format;
    if (golf_format_from_name(format_name, &format) != 0)
        return ct_fail("golf_format = '%s': expected " GOLF_FORMAT_NAMES, format_name);
    snprintf(path, cap, "%s/%s", out_dir, golf_default_file(format));
    return 0;
}

int golf_format_available(GolfFormat format) {
#ifndef CT_HAVE_ZSTD
    if (format == GOLF_INT6_ZSTD)
        return ct_fail("golf format int6-zstd: this ctrain was built without libzstd; install it (Debian: apt-get "
                       "install libzstd-dev, or run scripts/install-deps.sh) and rebuild with make");
#endif
#ifndef CT_HAVE_BROTLI
    if (golf_format_is_gptq(format))
        return ct_fail("golf format %s: this ctrain was built without libbrotli; install it (Debian: apt-get "
                       "install libbrotli-dev, or run scripts/install-deps.sh) and rebuild with make",
                       FORMATS[format].name);
#endif
    (void)format;
    return 0;
}

static GolfKind kind_of(GolfFormat format, const ParamInfo *p) {
    return format == GOLF_INT8_ZLIB ? golf_int8_kind(p->name, p->ndim, p->count)
                                    : golf_mixed_int6_kind(p->name, p->ndim, p->count);
}

static int is_kept(GolfKind k) { return k == GOLF_KEEP_F32 || k == GOLF_KEEP_F16; }
static int is_rows(GolfKind k) { return k == GOLF_INT8_ROWS || k == GOLF_INT6_ROWS; }

/* ---- the container's layout ---- */

typedef struct {
    char name[160];
    const char *dtype; /* I8, F16, F32 */
    int ndim;
    int64_t shape[3];
    size_t bytes, offset; /* bytes == 0: no such entry (the scale of a kept tensor) */
} Entry;

typedef struct {
    GolfKind kind;
    Entry values, scale;
} ParamPlan;

typedef struct {
    ParamPlan *params; /* model_artifact_params(spec), state_dict order */
    unsigned char *header;
    size_t header_len, data_bytes;
} Layout;

/* The record's meta dict as JSON text inside a JSON string (so its quotes are escaped):
 * {"name":"passthrough","other":{"type":"int6"},...}. Names need no other escaping (model.c
 * makes them of letters, digits, dots and underscores). */
static char *int6_meta_json(const ModelSpec *spec, const ParamPlan *plans) {
    const int n = model_artifact_params(spec); /* the MTP heads are not in the artifact */
    char *text = NULL;
    size_t size = 0;
    FILE *f = ct_open_memstream(&text, &size, "the artifact's metadata");
    fprintf(f, "\"format\":\"mixed_int6_v1\",\"writer\":\"ctrain\",\"m\":\"{");
    for (int i = 0; i < n; i++) {
        GolfKind k = plans[i].kind;
        const char *m = k == GOLF_KEEP_F16   ? "\\\"passthrough\\\""
                        : k == GOLF_KEEP_F32 ? "\\\"passthrough_ctrl\\\""
                        : k == GOLF_INT6_ROWS || k == GOLF_INT6_TENSOR ? "{\\\"type\\\":\\\"int6\\\"}"
                                                                       : "{\\\"type\\\":\\\"int8\\\"}";
        fprintf(f, "%s\\\"%s\\\":%s", i ? "," : "", spec->params[i].name, m);
    }
    fprintf(f, "}\"");
    fclose(f);
    return text;
}

static void layout_free(Layout *l) {
    free(l->params);
    free(l->header);
}

/* Every tensor's entries, their sizes and offsets, and the header, for this model and format. */
static void layout_for(const ModelSpec *spec, GolfFormat format, Layout *l) {
    const int count = model_artifact_params(spec); /* the MTP heads are not in the artifact */
    l->params = ct_calloc((size_t)count + 1, sizeof *l->params, "artifact layout");
    CtSafetensor *t = ct_calloc((size_t)count * 2 + 1, sizeof *t, "artifact header");
    size_t offset = 0;
    int n = 0;
    for (int i = 0; i < count; i++) {
        const ParamInfo *p = &spec->params[i];
        ParamPlan *pp = &l->params[i];
        GolfKind k = pp->kind = kind_of(format, p);
        Entry *v = &pp->values, *s = &pp->scale;
        if (format == GOLF_INT8_ZLIB) {
            snprintf(v->name, sizeof v->name, "%s/%s", is_kept(k) ? "passthrough" : "quantized", p->name);
            snprintf(s->name, sizeof s->name, "scales/%s", p->name);
        } else {
            snprintf(v->name, sizeof v->name, "%s%s", p->name, is_kept(k) ? "" : ".q");
            snprintf(s->name, sizeof s->name, "%s.scale", p->name);
        }
        v->dtype = k == GOLF_KEEP_F32 ? "F32" : k == GOLF_KEEP_F16 ? "F16" : "I8";
        v->ndim = p->ndim;
        v->shape[0] = p->shape[0];
        v->shape[1] = p->shape[1];
        v->shape[2] = p->shape[2];
        v->bytes = p->count * (k == GOLF_KEEP_F32 ? 4 : k == GOLF_KEEP_F16 ? 2 : 1);
        v->offset = offset;
        offset += v->bytes;
        t[n++] = (CtSafetensor){v->name, v->dtype, v->ndim, v->shape, v->bytes};
        if (is_kept(k)) continue;
        s->dtype = k == GOLF_INT8_TENSOR ? "F32" : "F16";
        s->ndim = is_rows(k) ? 1 : 0;
        s->shape[0] = p->shape[0];
        s->bytes = is_rows(k) ? (size_t)p->shape[0] * 2 : k == GOLF_INT8_TENSOR ? 4 : 2;
        s->offset = offset;
        offset += s->bytes;
        t[n++] = (CtSafetensor){s->name, s->dtype, s->ndim, s->shape, s->bytes};
    }
    char *meta = format == GOLF_INT8_ZLIB ? ct_strdup("\"format\":\"int8_clean_per_row_v1\",\"writer\":\"ctrain\"")
                                          : int6_meta_json(spec, l->params);
    l->header = ct_safetensors_header(meta, t, n, &l->header_len);
    l->data_bytes = offset;
    free(meta);
    free(t);
}

/* ---- tensors in and out (little-endian) ---- */

static void put_u16(unsigned char *b, uint16_t v) {
    b[0] = (unsigned char)v;
    b[1] = (unsigned char)(v >> 8);
}
static void put_f32(unsigned char *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(u >> (8 * i));
}
static uint16_t get_u16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }
static float get_f32(const unsigned char *b) {
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Quantize one parameter into its entries. halves: rows uint16 of scratch; work: count floats. */
static void encode_param(const ParamInfo *p, const ParamPlan *pp, const float *x, unsigned char *data,
                         uint16_t *halves, float *work) {
    unsigned char *v = data + pp->values.offset, *s = data + pp->scale.offset;
    int8_t *q = (int8_t *)v;
    int64_t n = (int64_t)p->count, rows = p->shape[0], cols = rows ? n / rows : 0;
    switch (pp->kind) {
    case GOLF_KEEP_F32:
        for (int64_t i = 0; i < n; i++) put_f32(v + 4 * i, x[i]);
        return;
    case GOLF_KEEP_F16:
        for (int64_t i = 0; i < n; i++) put_u16(v + 2 * i, golf_half_from_float(x[i]));
        return;
    case GOLF_INT8_ROWS:
    case GOLF_INT6_ROWS:
        if (pp->kind == GOLF_INT8_ROWS) golf_int8_rows(x, rows, cols, q, halves, work);
        else golf_int6_rows(x, rows, cols, q, halves);
        for (int64_t r = 0; r < rows; r++) put_u16(s + 2 * r, halves[r]);
        return;
    case GOLF_INT8_TENSOR:
        put_f32(s, golf_int8_tensor(x, n, q, work));
        return;
    case GOLF_INT6_TENSOR:
        put_u16(s, golf_int6_tensor(x, n, q));
        return;
    }
}

/* train_gpt.py's dequantization: q * scale in float32; kept floats widened. */
static void decode_param(const ParamInfo *p, const ParamPlan *pp, const unsigned char *data, float *x) {
    const unsigned char *v = data + pp->values.offset, *s = data + pp->scale.offset;
    int64_t n = (int64_t)p->count, rows = is_rows(pp->kind) ? p->shape[0] : 1, cols = rows ? n / rows : 0;
    if (pp->kind == GOLF_KEEP_F32) {
        for (int64_t i = 0; i < n; i++) x[i] = get_f32(v + 4 * i);
    } else if (pp->kind == GOLF_KEEP_F16) {
        for (int64_t i = 0; i < n; i++) x[i] = golf_half_to_float(get_u16(v + 2 * i));
    } else {
        for (int64_t r = 0; r < rows; r++) {
            float scale = pp->kind == GOLF_INT8_TENSOR ? get_f32(s) : golf_half_to_float(get_u16(s + 2 * r));
            for (int64_t c = 0; c < cols; c++) x[r * cols + c] = (float)(int8_t)v[r * cols + c] * scale;
        }
    }
}

/* ---- the codecs ---- */

static int compress_raw(GolfFormat format, const unsigned char *raw, size_t len, unsigned char **out,
                        size_t *out_len, const char *path) {
    if (format == GOLF_INT8_ZLIB) {
        uLongf n = compressBound((uLong)len);
        *out = ct_malloc(n, "compressed artifact");
        int z = compress2(*out, &n, raw, (uLong)len, Z_BEST_COMPRESSION);
        *out_len = n;
        return z == Z_OK ? 0 : ct_fail("'%s': zlib compression failed (%s)", path, zError(z));
    }
#ifdef CT_HAVE_ZSTD
    size_t cap = ZSTD_compressBound(len);
    *out = ct_malloc(cap, "compressed artifact");
    ZSTD_CCtx *c = ZSTD_createCCtx();
    if (!c) return ct_fail("'%s': out of memory for the zstd compressor", path);
    /* one thread (the default): the same bytes every time; the checksum makes damage an error */
    size_t n = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, ZSTD_LEVEL);
    if (!ZSTD_isError(n)) n = ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    if (!ZSTD_isError(n)) n = ZSTD_compress2(c, *out, cap, raw, len);
    ZSTD_freeCCtx(c);
    if (ZSTD_isError(n)) return ct_fail("'%s': zstd compression failed (%s)", path, ZSTD_getErrorName(n));
    *out_len = n;
    return 0;
#else
    (void)raw, (void)len, (void)out, (void)out_len, (void)path;
    return golf_format_available(format);
#endif
}

#define NOT_THIS_MODEL                                                                            \
    "'%s' is not the %s artifact of this model (its header or size differs from the one this model's shape gives)"

/* Decompress into raw, exactly raw_len bytes: a stream of another length is not the artifact of
 * this model. */
static int decompress_raw(GolfFormat format, const unsigned char *packed, size_t len, unsigned char *raw,
                          size_t raw_len, const char *path) {
    if (format == GOLF_INT8_ZLIB) {
        uLongf got = raw_len + 1; /* room for one byte more: a longer stream is not this model's */
        int z = uncompress(raw, &got, packed, (uLong)len);
        if (z != Z_OK && z != Z_BUF_ERROR)
            return ct_fail("'%s' is not a zlib stream or is damaged (%s)", path, zError(z));
        if (z == Z_BUF_ERROR || got != raw_len) return ct_fail(NOT_THIS_MODEL, path, "int8");
        return 0;
    }
#ifdef CT_HAVE_ZSTD
    unsigned long long content = ZSTD_getFrameContentSize(packed, len);
    if (content == ZSTD_CONTENTSIZE_ERROR)
        return ct_fail("'%s' is not a zstd stream or is damaged (no zstd frame header at its start)", path);
    if (content != raw_len) return ct_fail(NOT_THIS_MODEL, path, "int6");
    size_t frame = ZSTD_findFrameCompressedSize(packed, len);
    if (ZSTD_isError(frame))
        return ct_fail("'%s' is not a zstd stream or is damaged (%s: truncated?)", path, ZSTD_getErrorName(frame));
    if (frame != len)
        return ct_fail("'%s' has %zu bytes after its zstd frame: not the int6 artifact as written", path,
                       len - frame);
    size_t got = ZSTD_decompress(raw, raw_len + 1, packed, len);
    if (ZSTD_isError(got))
        return ct_fail("'%s' is not a zstd stream or is damaged (%s)", path, ZSTD_getErrorName(got));
    return got == raw_len ? 0 : ct_fail(NOT_THIS_MODEL, path, "int6");
#else
    (void)packed, (void)len, (void)raw, (void)raw_len, (void)path;
    return golf_format_available(format);
#endif
}

/* ---- the artifact ---- */

int golf_write(const ModelSpec *spec, const float *params, GolfFormat format, const GolfGptqOptions *gptq,
               const char *path, GolfStats *stats) {
    memset(stats, 0, sizeof *stats);
    const int n = model_artifact_params(spec); /* the MTP heads are not in the artifact */
    if (golf_format_available(format) != 0) return -1;
    if (format == GOLF_GPTQ_BROTLI) return golf_gptq_write(spec, params, gptq, path, stats);
    if (format == GOLF_GPTQ_PERGROUP) return golf_pergroup_write(spec, params, gptq, path, stats);
    Layout l;
    layout_for(spec, format, &l);
    size_t raw_len = l.header_len + l.data_bytes, largest = 0, most_rows = 0;
    unsigned char *raw = ct_malloc(raw_len, "artifact");
    memcpy(raw, l.header, l.header_len);
    for (int i = 0; i < n; i++) {
        if (spec->params[i].count > largest) largest = spec->params[i].count;
        if ((size_t)spec->params[i].shape[0] > most_rows) most_rows = (size_t)spec->params[i].shape[0];
    }
    float *work = ct_malloc(largest * sizeof(float) + 4, "quantile scratch");
    uint16_t *halves = ct_malloc(most_rows * sizeof(uint16_t) + 2, "row scales");
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &spec->params[i];
        const ParamPlan *pp = &l.params[i];
        encode_param(p, pp, params + p->offset, raw + l.header_len, halves, work);
        stats->param_count += (int64_t)p->count;
        stats->num_tensors++;
        stats->baseline_bytes += (int64_t)p->count * 4;
        stats->payload_bytes += (int64_t)(pp->values.bytes + pp->scale.bytes);
        stats->num_int8 += pp->kind == GOLF_INT8_ROWS || pp->kind == GOLF_INT8_TENSOR;
        stats->num_int6 += pp->kind == GOLF_INT6_ROWS || pp->kind == GOLF_INT6_TENSOR;
    }
    free(halves);
    free(work);
    unsigned char *packed = NULL;
    size_t packed_len = 0;
    int rc = compress_raw(format, raw, raw_len, &packed, &packed_len, path);
    stats->raw_bytes = (int64_t)raw_len;
    stats->file_bytes = (int64_t)packed_len;
    if (rc == 0) {
        const void *parts[] = {packed};
        rc = golf_file_write_atomically(path, parts, &packed_len, 1);
    }
    free(packed);
    free(raw);
    layout_free(&l);
    return rc;
}

int golf_read(const ModelSpec *spec, GolfFormat format, const char *path, float *params) {
    if (golf_format_available(format) != 0) return -1;
    if (format == GOLF_GPTQ_BROTLI) return golf_gptq_read(spec, path, params);
    if (format == GOLF_GPTQ_PERGROUP) return golf_pergroup_read(spec, path, params);
    const int n = model_artifact_params(spec); /* the MTP heads are not in the artifact */
    unsigned char *packed = NULL;
    size_t len = 0;
    if (golf_file_read(path, &packed, &len) != 0) return -1;
    Layout l;
    layout_for(spec, format, &l);
    size_t raw_len = l.header_len + l.data_bytes;
    unsigned char *raw = ct_malloc(raw_len + 1, "artifact");
    int rc = decompress_raw(format, packed, len, raw, raw_len, path);
    if (rc == 0 && memcmp(raw, l.header, l.header_len) != 0)
        rc = ct_fail(NOT_THIS_MODEL, path, FORMATS[format].what);
    for (int i = 0; rc == 0 && i < n; i++)
        decode_param(&spec->params[i], &l.params[i], raw + l.header_len, params + spec->params[i].offset);
    free(raw);
    free(packed);
    layout_free(&l);
    return rc;
}

int golf_write_weights(const ModelSpec *spec, const float *params, const char *path) {
    const int n = model_artifact_params(spec); /* the weights the artifact holds */
    CtSafetensor *t = ct_calloc((size_t)n + 1, sizeof *t, "weights header");
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &spec->params[i];
        t[i] = (CtSafetensor){p->name, "F32", model_param_torch_ndim(p), p->shape, p->count * 4};
    }
    size_t header_len;
    unsigned char *header = ct_safetensors_header("\"format\":\"pt\",\"writer\":\"ctrain\"", t, n,
                                                  &header_len);
    free(t);
    /* the header, then each tensor's float32 values (little-endian on the hosts we build for) */
    const void **parts = ct_calloc((size_t)n + 1, sizeof *parts, "weights parts");
    size_t *lens = ct_calloc((size_t)n + 1, sizeof *lens, "weights parts");
    parts[0] = header;
    lens[0] = header_len;
    for (int i = 0; i < n; i++) {
        parts[i + 1] = params + spec->params[i].offset;
        lens[i + 1] = spec->params[i].count * sizeof(float);
    }
    int rc = golf_file_write_atomically(path, parts, lens, n + 1);
    free(parts);
    free(lens);
    free(header);
    return rc;
}
