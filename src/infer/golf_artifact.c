/* golf_artifact.c — train_gpt.py's int8 + zlib artifact of the model (rule and container in
 * golf_artifact.h). The quantization is written to give the same bytes as PyTorch's CPU ops
 * in train_gpt.py (tests/cli/test_golf.sh checks them against an independent PyTorch version):
 * float32 arithmetic throughout, torch.quantile's rank and interpolation formulas, round half
 * to even, and float16 conversion with round to nearest even. zlib is the library (level 9, as
 * train_gpt.py's zlib.compress), not our own deflate. */
#include "golf_artifact.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"
#include "safetensors.h"

/* train_gpt.py's constants */
#define KEEP_FLOAT_MAX_NUMEL 65536
#define CLIP_Q ((float)(99.99984 / 100.0)) /* torch.quantile takes q in the tensor's dtype */
static const char *const CONTROL_PATTERNS[] = {"attn_scale", "attn_scales", "mlp_scale", "mlp_scales", "resid_mix",
                                               "resid_mixes", "q_gain", "skip_weight", "skip_weights"};

typedef enum { KEEP_F32, KEEP_F16, QUANT_ROWS, QUANT_TENSOR } GolfKind;

static GolfKind kind_of(const ParamInfo *p) {
    if (p->count <= KEEP_FLOAT_MAX_NUMEL) {
        for (size_t i = 0; i < sizeof CONTROL_PATTERNS / sizeof CONTROL_PATTERNS[0]; i++)
            if (strstr(p->name, CONTROL_PATTERNS[i])) return KEEP_F32;
        return KEEP_F16;
    }
    return p->ndim == 2 ? QUANT_ROWS : QUANT_TENSOR;
}

/* ---- float16 ---- */

static uint16_t half_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < 0x38800000u) {                                      /* subnormal half (or zero) */
        /* a * 2^24 rounded to an integer, half to even, is the subnormal's mantissa */
        float scaled = (float)ldexp((double)fabsf(f), 24);
        return (uint16_t)(sign | (uint32_t)nearbyintf(scaled));
    }
    uint32_t mant = a & 0x7fffffu, exp = (a >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13), rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float v;
    if (exp == 0) v = (float)ldexp((double)mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = (float)ldexp((double)(mant | 0x400u), (int)exp - 25);
    uint32_t u;
    memcpy(&u, &v, 4);
    u |= sign;
    memcpy(&v, &u, 4);
    return v;
}

/* ---- the clip value: torch.quantile(|x|, CLIP_Q), linear interpolation ---- */

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* work: n floats of scratch */
static float clip_value(const float *x, int64_t n, float *work) {
    if (n == 0) return 0.0f;
    for (int64_t i = 0; i < n; i++) work[i] = fabsf(x[i]);
    qsort(work, (size_t)n, sizeof(float), compare_floats);
    float rank = CLIP_Q * (float)(n - 1);
    int64_t below = (int64_t)rank, above = (int64_t)ceilf(rank);
    float weight = rank - (float)below, a = work[below], b = work[above];
    /* torch's lerp: from the nearer end */
    return fabsf(weight) < 0.5f ? a + weight * (b - a) : b - (b - a) * (1.0f - weight);
}

static int8_t quantize_one(float x, float clip, float scale) {
    float c = x > clip ? clip : x < -clip ? -clip : x;
    float r = nearbyintf(c / scale); /* the default rounding mode: half to even */
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}

/* ---- the container ---- */

typedef struct {
    char name[160];
    const char *dtype; /* I8, F16, F32 */
    int ndim;
    int64_t shape[4];
    size_t bytes;
    size_t offset;
} Entry;

/* The entries of the container, in state_dict order; their sizes and offsets. Returns the count
 * (at most 2 per parameter). */
static int plan_entries(const ModelSpec *spec, Entry *e, size_t *data_bytes) {
    int n = 0;
    size_t offset = 0;
    for (int i = 0; i < spec->num_params; i++) {
        const ParamInfo *p = &spec->params[i];
        GolfKind k = kind_of(p);
        Entry *v = &e[n++];
        snprintf(v->name, sizeof v->name, "%s/%s", k == KEEP_F32 || k == KEEP_F16 ? "passthrough" : "quantized",
                 p->name);
        v->dtype = k == KEEP_F32 ? "F32" : k == KEEP_F16 ? "F16" : "I8";
        v->ndim = p->ndim;
        memcpy(v->shape, p->shape, sizeof v->shape);
        v->bytes = p->count * (k == KEEP_F32 ? 4 : k == KEEP_F16 ? 2 : 1);
        v->offset = offset;
        offset += v->bytes;
        if (k == QUANT_ROWS || k == QUANT_TENSOR) {
            Entry *s = &e[n++];
            snprintf(s->name, sizeof s->name, "scales/%s", p->name);
            s->dtype = k == QUANT_ROWS ? "F16" : "F32";
            s->ndim = k == QUANT_ROWS ? 1 : 0;
            s->shape[0] = p->shape[0];
            s->bytes = k == QUANT_ROWS ? (size_t)p->shape[0] * 2 : 4;
            s->offset = offset;
            offset += s->bytes;
        }
    }
    *data_bytes = offset;
    return n;
}

/* The container's header: the length prefix and the JSON (base/safetensors.h). Caller frees. */
static unsigned char *header_for(const Entry *e, int n, size_t *len) {
    CtSafetensor *t = ct_calloc((size_t)n + 1, sizeof *t, "artifact header");
    for (int i = 0; i < n; i++) t[i] = (CtSafetensor){e[i].name, e[i].dtype, e[i].ndim, e[i].shape, e[i].bytes};
    unsigned char *header = ct_safetensors_header("\"format\":\"int8_clean_per_row_v1\",\"writer\":\"ctrain\"", t, n, len);
    free(t);
    return header;
}

/* Quantize one parameter into its entries' bytes (little-endian). */
static void encode_param(const ParamInfo *p, const float *x, unsigned char *values, unsigned char *scales,
                         float *work) {
    GolfKind k = kind_of(p);
    if (k == KEEP_F32) {
        for (size_t i = 0; i < p->count; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int b = 0; b < 4; b++) values[4 * i + b] = (unsigned char)(u >> (8 * b));
        }
    } else if (k == KEEP_F16) {
        for (size_t i = 0; i < p->count; i++) {
            uint16_t h = half_from_float(x[i]);
            values[2 * i] = (unsigned char)h;
            values[2 * i + 1] = (unsigned char)(h >> 8);
        }
    } else if (k == QUANT_ROWS) {
        int64_t rows = p->shape[0], cols = (int64_t)p->count / rows;
        for (int64_t r = 0; r < rows; r++) {
            const float *row = x + r * cols;
            float clip = clip_value(row, cols, work);
            float scale = clip / 127.0f;
            if (scale < (float)(1.0 / 127.0)) scale = (float)(1.0 / 127.0);
            for (int64_t c = 0; c < cols; c++) values[r * cols + c] = (unsigned char)quantize_one(row[c], clip, scale);
            uint16_t h = half_from_float(scale);
            scales[2 * r] = (unsigned char)h;
            scales[2 * r + 1] = (unsigned char)(h >> 8);
        }
    } else {
        float clip = clip_value(x, (int64_t)p->count, work);
        /* train_gpt.py divides in Python (double) and stores the scale as float32 */
        float scale = clip > 0 ? (float)((double)clip / 127.0) : 1.0f;
        for (size_t i = 0; i < p->count; i++) values[i] = (unsigned char)quantize_one(x[i], clip, scale);
        uint32_t u;
        memcpy(&u, &scale, 4);
        for (int b = 0; b < 4; b++) scales[b] = (unsigned char)(u >> (8 * b));
    }
}

static Entry *entries_for(const ModelSpec *spec, int *n, size_t *data_bytes, size_t *header_len,
                          unsigned char **header) {
    Entry *e = ct_calloc((size_t)spec->num_params * 2 + 1, sizeof *e, "artifact entries");
    *n = plan_entries(spec, e, data_bytes);
    *header = header_for(e, *n, header_len);
    return e;
}

int golf_write(const ModelSpec *spec, const float *params, const char *path, GolfStats *stats) {
    memset(stats, 0, sizeof *stats);
    int n;
    size_t data_bytes, header_len;
    unsigned char *header;
    Entry *e = entries_for(spec, &n, &data_bytes, &header_len, &header);
    size_t raw_len = header_len + data_bytes, largest = 0;
    unsigned char *raw = ct_malloc(raw_len, "artifact");
    memcpy(raw, header, header_len);
    unsigned char *data = raw + header_len;
    for (int i = 0; i < spec->num_params; i++)
        if (spec->params[i].count > largest) largest = spec->params[i].count;
    float *work = ct_malloc(largest * sizeof(float) + 4, "quantile scratch");
    for (int i = 0, j = 0; i < spec->num_params; i++) {
        const ParamInfo *p = &spec->params[i];
        GolfKind k = kind_of(p);
        unsigned char *scales = k == QUANT_ROWS || k == QUANT_TENSOR ? data + e[j + 1].offset : NULL;
        encode_param(p, params + p->offset, data + e[j].offset, scales, work);
        stats->param_count += (int64_t)p->count;
        stats->num_tensors++;
        stats->baseline_bytes += (int64_t)p->count * 4;
        stats->payload_bytes += (int64_t)e[j].bytes + (scales ? (int64_t)e[j + 1].bytes : 0);
        stats->num_quantized += scales != NULL;
        j += scales ? 2 : 1;
    }
    free(work);
    uLongf packed_len = compressBound((uLong)raw_len);
    unsigned char *packed = ct_malloc(packed_len, "compressed artifact");
    int rc = 0, z = compress2(packed, &packed_len, raw, (uLong)raw_len, Z_BEST_COMPRESSION);
    if (z != Z_OK) rc = ct_fail("'%s': zlib compression failed (%s)", path, zError(z));
    stats->raw_bytes = (int64_t)raw_len;
    stats->file_bytes = (int64_t)packed_len;
    if (rc == 0) rc = ct_mkdir_parent(path);
    if (rc == 0) {
        char tmp[4300];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f) {
            rc = ct_fail("cannot write '%s': %s", tmp, strerror(errno));
        } else {
            int bad = fwrite(packed, 1, packed_len, f) != packed_len || fflush(f) != 0 || fsync(fileno(f)) != 0;
            int e2 = errno;
            if (fclose(f) != 0 && !bad) bad = 1, e2 = errno;
            if (bad) rc = ct_fail("cannot write '%s': %s", tmp, strerror(e2));
            else if (rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
            if (rc != 0) unlink(tmp);
        }
    }
    free(packed);
    free(raw);
    free(header);
    free(e);
    return rc;
}

int golf_read(const ModelSpec *spec, const char *path, float *params) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (f) fclose(f);
        return ct_fail("cannot open artifact '%s': %s", path, strerror(e));
    }
    size_t len = (size_t)st.st_size;
    unsigned char *packed = ct_malloc(len + 1, "compressed artifact");
    int read_error = fread(packed, 1, len, f) != len;
    fclose(f);
    int n;
    size_t data_bytes, header_len;
    unsigned char *header;
    Entry *e = entries_for(spec, &n, &data_bytes, &header_len, &header);
    uLongf raw_len = (uLongf)(header_len + data_bytes);
    uLongf got = raw_len + 1; /* room for one byte more: a longer stream is not this model's */
    unsigned char *raw = ct_malloc(got, "artifact");
    int rc = 0;
    if (read_error) {
        rc = ct_fail("cannot read '%s'", path);
    } else {
        int z = uncompress(raw, &got, packed, (uLong)len);
        if (z != Z_OK && z != Z_BUF_ERROR)
            rc = ct_fail("'%s' is not a zlib stream or is damaged (%s)", path, zError(z));
        else if (z == Z_BUF_ERROR || got != raw_len || memcmp(raw, header, header_len) != 0)
            rc = ct_fail("'%s' is not the int8 artifact of this model (its header or size differs from the one "
                         "this model's shape gives)", path);
    }
    const unsigned char *data = raw + header_len;
    for (int i = 0, j = 0; rc == 0 && i < spec->num_params; i++) {
        const ParamInfo *p = &spec->params[i];
        GolfKind k = kind_of(p);
        const unsigned char *v = data + e[j].offset;
        float *x = params + p->offset;
        if (k == KEEP_F32) {
            for (size_t t = 0; t < p->count; t++) {
                uint32_t u = (uint32_t)v[4 * t] | (uint32_t)v[4 * t + 1] << 8 | (uint32_t)v[4 * t + 2] << 16 |
                             (uint32_t)v[4 * t + 3] << 24;
                memcpy(&x[t], &u, 4);
            }
        } else if (k == KEEP_F16) {
            for (size_t t = 0; t < p->count; t++) x[t] = half_to_float((uint16_t)(v[2 * t] | v[2 * t + 1] << 8));
        } else {
            const unsigned char *s = data + e[j + 1].offset;
            int64_t rows = k == QUANT_ROWS ? p->shape[0] : 1, cols = (int64_t)p->count / rows;
            for (int64_t r = 0; r < rows; r++) {
                float scale;
                if (k == QUANT_ROWS) {
                    scale = half_to_float((uint16_t)(s[2 * r] | s[2 * r + 1] << 8));
                } else {
                    uint32_t u = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
                    memcpy(&scale, &u, 4);
                }
                for (int64_t c = 0; c < cols; c++) x[r * cols + c] = (float)(int8_t)v[r * cols + c] * scale;
            }
        }
        j += k == QUANT_ROWS || k == QUANT_TENSOR ? 2 : 1;
    }
    free(raw);
    free(packed);
    free(header);
    free(e);
    return rc;
}
