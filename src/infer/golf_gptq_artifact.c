/* golf_gptq_artifact.c — the gptq-brotli artifact (golf_artifact.h): which rule each tensor
 * gets, the quantized tensors (golf_gptq.c), the LQER corrections of the matrices with the
 * largest error, their safetensors layout, brotli (libbrotli, quality 11 as the record's
 * brotli.compress), and the artifact read back and dequantized as the record's
 * dequantize_mixed does.
 *
 * The rules, in the record's order (docs/model.md, "The GPTQ quantizer"):
 *   'g'  an attention gate (".attn_gate_w", 2-D, 32..8192 elements) with gated_attn_quant_gate:
 *        int8 rows (golf_int8_rows_absmax);
 *   'h'  any other tensor of at most 65,536 elements, or not a matrix: float16;
 *   'q'  a matrix with a Hessian: GPTQ at embed_bits ("tok_emb" in its name) or matrix_bits,
 *        clip sigmas by class ("tok_emb" embed, ".mlp." mlp, ".attn." attn, else matrix);
 *   'r'  a matrix without one (ctrain collects none for it, e.g. the bigram table): rounded to
 *        nearest at GPTQ's scales (the record has no such tensor).
 * Then LQER on the lqer_top_k 'q'/'r' matrices of largest |W - q*scale| (ties: model order):
 * 'a' asymmetric when B's size is a multiple of lqer_asym_group and lqer_asym_enabled, else 's'.
 * The metadata's "plan" holds the two letters of every tensor (rule, then LQER or '-'), "bits"
 * "matrix,embed" and "lqer" "rank,group": with the model's shape they give the whole layout,
 * so a reader rebuilds the header from them and takes the file only if the two are the same
 * bytes; "crc32" is zlib's CRC-32 of the tensor bytes after the header (brotli has no checksum
 * of its own). A damaged or foreign file is an error naming it, never wrong weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef CT_HAVE_BROTLI
#include <brotli/decode.h>
#include <brotli/encode.h>
#endif

#include "common.h"
#include "crc32.h"
#include "golf_artifact_internal.h"
#include "golf_gptq.h"
#include "golf_quant.h"
#include "safetensors.h"

enum { MAX_ENTRIES = 6, BROTLI_QUALITY = 11 /* the Python module's default, as the record's */ };

typedef struct {
    char name[96];
    const char *dtype; /* I8, F16 */
    int ndim;
    int64_t shape[3];
    size_t bytes, offset;
} Entry;

typedef struct {
    char rule, lqer; /* see the top comment */
    int bits, rank;  /* 'q'/'r': bits; with LQER: its rank */
    int n;
    Entry e[MAX_ENTRIES]; /* values, scale; with LQER: A, A's scale, B, B's scale */
} Plan;

typedef struct {
    int matrix_bits, embed_bits, rank, group;
    uint32_t crc; /* of the tensor bytes */
    Plan *plans;
    unsigned char *header;
    size_t header_len, data_bytes;
} Layout;

static int is_gate(const char *name) {
    const size_t n = strlen(name), k = strlen(".attn_gate_w");
    return n >= k && !strcmp(name + n - k, ".attn_gate_w");
}

static int rows_of(const ParamInfo *p) { return (int)p->shape[0]; }
static int cols_of(const ParamInfo *p) { return p->ndim == 2 ? (int)p->shape[1] : 1; }

/* The rule of parameter i (see the top comment). */
static char rule_of(const ParamInfo *p, int i, const GolfGptqOptions *o) {
    if (o->quant_gate && p->ndim == 2 && is_gate(p->name) && p->count >= 32 && p->count <= 8192) return 'g';
    if (p->count <= GOLF_KEEP_FLOAT_MAX_NUMEL || p->ndim != 2) return 'h';
    return o->hessians[i] ? 'q' : 'r';
}

static float clip_sigmas_of(const char *name, const GolfGptqOptions *o) {
    if (strstr(name, "tok_emb")) return o->embed_clip_sigmas;
    if (strstr(name, ".mlp.")) return o->mlp_clip_sigmas;
    if (strstr(name, ".attn.")) return o->attn_clip_sigmas;
    return o->matrix_clip_sigmas;
}

static void set_entry(Entry *e, const char *param, const char *suffix, const char *dtype, int ndim, int64_t d0,
                      int64_t d1, size_t bytes, size_t *offset) {
    snprintf(e->name, sizeof e->name, "%s%s", param, suffix);
    e->dtype = dtype;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    e->shape[2] = 1;
    e->bytes = bytes;
    e->offset = *offset;
    *offset += bytes;
}

/* The record's meta dict (JSON text inside a JSON string) and ours beside it. */
static char *metadata_of(const ModelSpec *spec, const Layout *l) {
    const int n = model_artifact_params(spec);
    char *text = NULL;
    size_t size = 0;
    FILE *f = ct_open_memstream(&text, &size, "the artifact's metadata");
    fprintf(f, "\"format\":\"gptq_lqer_v1\",\"writer\":\"ctrain\",\"plan\":\"");
    for (int i = 0; i < n; i++) fprintf(f, "%c%c", l->plans[i].rule, l->plans[i].lqer);
    fprintf(f, "\",\"bits\":\"%d,%d\",\"lqer\":\"%d,%d\",\"crc32\":\"%08x\",\"m\":\"{", l->matrix_bits, l->embed_bits,
            l->rank, l->group, (unsigned)l->crc);
    for (int i = 0; i < n; i++) {
        const Plan *p = &l->plans[i];
        fprintf(f, "%s\\\"%s\\\":\\\"", i ? "," : "", spec->params[i].name);
        if (p->rule == 'h') fprintf(f, "passthrough (float16)");
        else if (p->rule == 'g') fprintf(f, "gate_int8_row");
        else fprintf(f, "%s (int%d)%s", p->rule == 'q' ? "gptq" : "rtn", p->bits,
                     p->lqer == 'a' ? "+lqer_asym" : p->lqer == 's' ? "+lqer" : "");
        fprintf(f, "\\\"");
    }
    fprintf(f, "}\"");
    fclose(f);
    return text;
}

/* Every tensor's entries and the header, from the plans' rules (set by the caller). */
static void layout_build(const ModelSpec *spec, Layout *l) {
    const int n = model_artifact_params(spec);
    CtSafetensor *t = ct_calloc((size_t)n * MAX_ENTRIES + 1, sizeof *t, "artifact header");
    size_t offset = 0;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &spec->params[i];
        Plan *pl = &l->plans[i];
        const int64_t rows = rows_of(p), cols = cols_of(p);
        pl->n = 0;
        pl->bits = strstr(p->name, "tok_emb") ? l->embed_bits : l->matrix_bits;
        if (pl->rule == 'h') {
            set_entry(&pl->e[pl->n], p->name, "", "F16", model_param_torch_ndim(p), p->shape[0], p->shape[1],
                      p->count * 2, &offset);
            pl->e[pl->n++].shape[2] = p->shape[2]; /* the parallel lanes' [L, 2, 2] */
        } else {
            const int gate = pl->rule == 'g';
            set_entry(&pl->e[pl->n++], p->name, gate ? ".gq" : ".q", "I8", 2, rows, cols, p->count, &offset);
            set_entry(&pl->e[pl->n++], p->name, gate ? ".gs" : ".scale", "F16", 1, rows, 0, (size_t)rows * 2, &offset);
        }
        if (pl->lqer != '-') {
            const int k = rows < cols ? (int)rows : (int)cols, r = l->rank < k ? l->rank : k;
            const int asym = pl->lqer == 'a';
            pl->rank = r;
            set_entry(&pl->e[pl->n++], p->name, asym ? ".lqA_a" : ".lqA", "I8", 2, rows, r, (size_t)rows * r, &offset);
            if (asym) set_entry(&pl->e[pl->n++], p->name, ".lqAs_a", "F16", 0, 0, 0, 2, &offset);
            else set_entry(&pl->e[pl->n++], p->name, ".lqAs", "F16", 1, rows, 0, (size_t)rows * 2, &offset);
            set_entry(&pl->e[pl->n++], p->name, asym ? ".lqB_a" : ".lqB", "I8", 2, r, cols, (size_t)r * cols, &offset);
            const int64_t groups = asym ? (int64_t)r * cols / l->group : r;
            set_entry(&pl->e[pl->n++], p->name, asym ? ".lqBs_a" : ".lqBs", "F16", 1, groups, 0, (size_t)groups * 2,
                      &offset);
        }
        for (int j = 0; j < pl->n; j++)
            t[nt++] = (CtSafetensor){pl->e[j].name, pl->e[j].dtype, pl->e[j].ndim, pl->e[j].shape, pl->e[j].bytes};
    }
    char *meta = metadata_of(spec, l);
    free(l->header);
    l->header = ct_safetensors_header(meta, t, nt, &l->header_len);
    l->data_bytes = offset;
    free(meta);
    free(t);
}

static void layout_free(Layout *l) {
    free(l->plans);
    free(l->header);
}

static void put_halves(unsigned char *b, const uint16_t *h, size_t n) {
    for (size_t i = 0; i < n; i++) b[2 * i] = (unsigned char)h[i], b[2 * i + 1] = (unsigned char)(h[i] >> 8);
}
static uint16_t get_half(const unsigned char *b, size_t i) { return (uint16_t)(b[2 * i] | b[2 * i + 1] << 8); }

/* ---- writing ---- */

/* The quantized matrix of one 'q'/'r'/'g' tensor and its error's squared norm. */
typedef struct {
    int8_t *q;
    uint16_t *scale;
    double err2;
} Quantized;

static int quantize_all(const ModelSpec *spec, const float *params, const GolfGptqOptions *o, Layout *l,
                        Quantized *qz) {
    const int n = model_artifact_params(spec);
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &spec->params[i];
        Plan *pl = &l->plans[i];
        pl->lqer = '-';
        pl->rule = rule_of(p, i, o);
        if (pl->rule == 'h') continue;
        const int rows = rows_of(p), cols = cols_of(p);
        const float *w = params + p->offset;
        qz[i].q = ct_malloc(p->count, "quantized matrix");
        qz[i].scale = ct_malloc((size_t)rows * sizeof(uint16_t), "row scales");
        if (pl->rule == 'g') {
            golf_int8_rows_absmax(qz[i].q, qz[i].scale, w, rows, cols);
            continue;
        }
        const int bits = strstr(p->name, "tok_emb") ? o->embed_bits : o->matrix_bits;
        const GolfGptqSettings gs = {clip_sigmas_of(p->name, o), (1 << (bits - 1)) - 1, 128, 0.01f};
        if (pl->rule == 'q') {
            if (golf_gptq_quantize(qz[i].q, qz[i].scale, w, o->hessians[i], rows, cols, &gs, p->name) != 0) return -1;
        } else {
            golf_gptq_row_scales(qz[i].scale, w, rows, cols, gs.clip_sigmas, gs.clip_range);
            golf_round_nearest(qz[i].q, w, qz[i].scale, rows, cols, gs.clip_range);
        }
        double e2 = 0;
        for (int r = 0; r < rows; r++) {
            const float s = golf_half_to_float(qz[i].scale[r]);
            for (int c = 0; c < cols; c++) {
                const float e = w[(size_t)r * cols + c] - (float)qz[i].q[(size_t)r * cols + c] * s;
                e2 += (double)e * e;
            }
        }
        qz[i].err2 = e2;
    }
    /* LQER on the top_k errors, largest first, ties in model order */
    for (int k = 0; o->lqer_enabled && k < o->lqer_top_k; k++) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if ((l->plans[i].rule == 'q' || l->plans[i].rule == 'r') && l->plans[i].lqer == '-' &&
                (best < 0 || qz[i].err2 > qz[best].err2))
                best = i;
        if (best < 0) break;
        const ParamInfo *p = &spec->params[best];
        const int k_max = rows_of(p) < cols_of(p) ? rows_of(p) : cols_of(p);
        const int r = o->lqer_rank < k_max ? o->lqer_rank : k_max;
        l->plans[best].lqer = o->lqer_asym && ((int64_t)r * cols_of(p)) % o->lqer_group == 0 ? 'a' : 's';
    }
    return 0;
}

/* LQER of tensor p (plan pl, its quantized levels qz) into its four entries of data. */
static int encode_lqer(const ParamInfo *p, const Plan *pl, const Quantized *qz, const float *w, int group,
                       int factor_bits, unsigned char *data) {
    const int rows = rows_of(p), cols = cols_of(p), r = pl->rank;
    float *e = ct_malloc(p->count * sizeof *e, "LQER error");
    float *a = ct_malloc((size_t)rows * r * sizeof *a, "LQER A"), *b = ct_malloc((size_t)r * cols * sizeof *b, "LQER B");
    golf_dequantize_rows(e, qz->q, qz->scale, rows, cols);
    for (size_t i = 0; i < p->count; i++) e[i] = w[i] - e[i];
    int rc = golf_lqer_factors(a, b, e, rows, cols, r) == r ? 0 : ct_fail_prefix("%s", p->name);
    if (rc == 0) {
        const Entry *ea = &pl->e[2], *eas = &pl->e[3], *eb = &pl->e[4], *ebs = &pl->e[5];
        uint16_t *scales_a = ct_malloc((size_t)rows * sizeof *scales_a, "LQER scales");
        uint16_t *scales_b = ct_malloc(ebs->bytes, "LQER scales");
        if (pl->lqer == 'a') {
            golf_lqer_pack_asym((int8_t *)(data + ea->offset), scales_a, (int8_t *)(data + eb->offset), scales_b, a,
                                rows * r, b, r * cols, group);
            put_halves(data + eas->offset, scales_a, 1);
        } else {
            golf_lqer_pack_sym((int8_t *)(data + ea->offset), scales_a, (int8_t *)(data + eb->offset), scales_b, a, b,
                               rows, r, cols, factor_bits);
            put_halves(data + eas->offset, scales_a, (size_t)rows);
        }
        put_halves(data + ebs->offset, scales_b, ebs->bytes / 2);
        free(scales_a);
        free(scales_b);
    }
    free(e), free(a), free(b);
    return rc;
}

int golf_brotli_compress(const unsigned char *raw, size_t len, int window, unsigned char **out, size_t *out_len,
                         const char *path) {
#ifdef CT_HAVE_BROTLI
    *out_len = BrotliEncoderMaxCompressedSize(len);
    if (*out_len == 0) return ct_fail("'%s': %zu bytes are too many for one brotli stream", path, len);
    *out = ct_malloc(*out_len, "compressed artifact");
    if (!BrotliEncoderCompress(BROTLI_QUALITY, window, BROTLI_MODE_GENERIC, len, raw, out_len, *out))
        return ct_fail("'%s': brotli compression failed", path);
    return 0;
#else
    (void)raw, (void)len, (void)window, (void)out, (void)out_len, (void)path;
    return golf_format_available(GOLF_GPTQ_BROTLI);
#endif
}

int golf_gptq_container(const ModelSpec *spec, const float *params, const GolfGptqOptions *o, const char *path,
                        GolfStats *stats, unsigned char **container, size_t *container_len) {
    *container = NULL;
    *container_len = 0;
    if (!o || !o->hessians)
        return ct_fail("'%s': a gptq artifact needs the Hessians of the weights' inputs (docs/model.md, "
                       "\"The GPTQ quantizer\")", path);
    const int n = model_artifact_params(spec);
    Layout l = {o->matrix_bits, o->embed_bits, o->lqer_rank, o->lqer_group, 0, NULL, NULL, 0, 0};
    l.plans = ct_calloc((size_t)n + 1, sizeof *l.plans, "artifact layout");
    Quantized *qz = ct_calloc((size_t)n + 1, sizeof *qz, "quantized tensors");
    int rc = quantize_all(spec, params, o, &l, qz);
    unsigned char *raw = NULL;
    size_t raw_len = 0;
    if (rc == 0) {
        layout_build(spec, &l);
        raw_len = l.header_len + l.data_bytes;
        raw = ct_calloc(raw_len, 1, "artifact");
        memcpy(raw, l.header, l.header_len);
        unsigned char *data = raw + l.header_len;
        for (int i = 0; rc == 0 && i < n; i++) {
            const ParamInfo *p = &spec->params[i];
            const Plan *pl = &l.plans[i];
            const float *w = params + p->offset;
            if (pl->rule == 'h') {
                for (size_t j = 0; j < p->count; j++) {
                    const uint16_t h = golf_half_from_float(w[j]);
                    put_halves(data + pl->e[0].offset + 2 * j, &h, 1);
                }
            } else {
                memcpy(data + pl->e[0].offset, qz[i].q, p->count);
                put_halves(data + pl->e[1].offset, qz[i].scale, (size_t)rows_of(p));
            }
            if (pl->lqer != '-') rc = encode_lqer(p, pl, &qz[i], w, l.group, o->lqer_factor_bits, data);
            stats->param_count += (int64_t)p->count;
            stats->num_tensors++;
            stats->baseline_bytes += (int64_t)p->count * 4;
            for (int j = 0; j < pl->n; j++) stats->payload_bytes += (int64_t)pl->e[j].bytes;
            stats->num_int8 += pl->rule == 'g';
            stats->num_gptq += pl->rule == 'q' || pl->rule == 'r';
            stats->num_lqer += pl->lqer != '-';
        }
    }
    if (rc == 0) { /* the header again, with the tensor bytes' checksum (its length does not change) */
        l.crc = ct_crc32(0, raw + l.header_len, l.data_bytes);
        layout_build(spec, &l);
        memcpy(raw, l.header, l.header_len);
    }
    stats->raw_bytes = (int64_t)raw_len;
    for (int i = 0; i < n; i++) free(qz[i].q), free(qz[i].scale);
    free(qz);
    layout_free(&l);
    if (rc != 0) {
        free(raw);
        return rc;
    }
    *container = raw;
    *container_len = raw_len;
    return 0;
}

int golf_gptq_pack(const unsigned char *container, size_t len, const char *path, int64_t *file_bytes) {
    unsigned char *packed = NULL;
    size_t packed_len = 0;
    int rc = golf_brotli_compress(container, len, GOLF_BROTLI_WINDOW, &packed, &packed_len, path);
    *file_bytes = (int64_t)packed_len;
    if (rc == 0) {
        const void *parts[] = {packed};
        rc = golf_file_write_atomically(path, parts, &packed_len, 1);
    }
    free(packed);
    return rc;
}

int golf_gptq_write(const ModelSpec *spec, const float *params, const GolfGptqOptions *o, const char *path,
                    GolfStats *stats) {
    unsigned char *raw = NULL;
    size_t raw_len = 0;
    int rc = golf_gptq_container(spec, params, o, path, stats, &raw, &raw_len);
    if (rc == 0) rc = golf_gptq_pack(raw, raw_len, path, &stats->file_bytes);
    free(raw);
    return rc;
}

/* ---- reading ---- */

#define NOT_THIS_MODEL                                                                            \
    "'%s' is not the gptq artifact of this model (its header differs from the one this model's shape and its " \
    "plan give)"

int golf_brotli_decompress(const unsigned char *packed, size_t len, size_t cap, unsigned char **raw,
                             size_t *raw_len, const char *path) {
#ifdef CT_HAVE_BROTLI
    BrotliDecoderState *d = BrotliDecoderCreateInstance(NULL, NULL, NULL);
    if (!d) return ct_fail("'%s': out of memory for the brotli decoder", path);
    size_t size = 1 << 20, used = 0, avail_in = len;
    const uint8_t *in = packed;
    *raw = ct_malloc(size, "artifact");
    BrotliDecoderResult r;
    for (;;) {
        size_t avail_out = size - used;
        uint8_t *next_out = *raw + used;
        r = BrotliDecoderDecompressStream(d, &avail_in, &in, &avail_out, &next_out, NULL);
        used = size - avail_out;
        if (r != BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) break;
        if (size >= cap) break; /* more than this model's artifact can hold */
        size = size * 2 < cap ? size * 2 : cap;
        *raw = realloc(*raw, size);
        if (!*raw) {
            BrotliDecoderDestroyInstance(d);
            return ct_fail("'%s': out of memory decompressing it (%zu bytes)", path, size);
        }
    }
    const char *why = r == BROTLI_DECODER_RESULT_ERROR ? BrotliDecoderErrorString(BrotliDecoderGetErrorCode(d)) : NULL;
    BrotliDecoderDestroyInstance(d);
    *raw_len = used;
    if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) return ct_fail(NOT_THIS_MODEL " (it holds more)", path);
    if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT)
        return ct_fail("'%s' is not a brotli stream or is damaged (it ends early: truncated?)", path);
    if (r == BROTLI_DECODER_RESULT_ERROR) return ct_fail("'%s' is not a brotli stream or is damaged (%s)", path, why);
    if (avail_in != 0) return ct_fail("'%s' has %zu bytes after its brotli stream: not the artifact as written", path, avail_in);
    return 0;
#else
    (void)packed, (void)len, (void)cap, (void)raw, (void)raw_len, (void)path;
    return golf_format_available(GOLF_GPTQ_BROTLI);
#endif
}

/* The metadata value of key in the header text, "key":"value" (the writer's own form), into
 * buf; -1 when absent or too long. */
static int metadata_value(const unsigned char *header, size_t len, const char *key, char *buf, size_t cap) {
    char pattern[40];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", key);
    const size_t pl = strlen(pattern);
    for (size_t i = 0; i + pl <= len; i++)
        if (!memcmp(header + i, pattern, pl)) {
            size_t j = i + pl, k = 0;
            while (j < len && header[j] != '"' && k + 1 < cap) buf[k++] = (char)header[j++];
            if (j >= len || header[j] != '"') return -1;
            buf[k] = 0;
            return 0;
        }
    return -1;
}

/* The layout the file's own metadata describes for this model; -1 when it does not parse. */
static int layout_from_header(const ModelSpec *spec, const unsigned char *header, size_t len, Layout *l) {
    const int n = model_artifact_params(spec);
    char bits[32], lqer[32], crc[16];
    unsigned crc_value = 0;
    char *plan = ct_malloc(2 * (size_t)n + 2, "artifact plan");
    int ok = metadata_value(header, len, "plan", plan, 2 * (size_t)n + 2) == 0 && strlen(plan) == 2 * (size_t)n &&
             metadata_value(header, len, "bits", bits, sizeof bits) == 0 &&
             metadata_value(header, len, "lqer", lqer, sizeof lqer) == 0 &&
             metadata_value(header, len, "crc32", crc, sizeof crc) == 0 && strlen(crc) == 8 &&
             sscanf(crc, "%8x", &crc_value) == 1 &&
             sscanf(bits, "%d,%d", &l->matrix_bits, &l->embed_bits) == 2 &&
             sscanf(lqer, "%d,%d", &l->rank, &l->group) == 2 && l->matrix_bits >= 2 && l->matrix_bits <= 8 &&
             l->embed_bits >= 2 && l->embed_bits <= 8 && l->rank >= 1 && l->group >= 1;
    l->plans = ct_calloc((size_t)n + 1, sizeof *l->plans, "artifact layout");
    for (int i = 0; ok && i < n; i++) {
        l->plans[i].rule = plan[2 * i];
        l->plans[i].lqer = plan[2 * i + 1];
        ok = strchr("hgqr", l->plans[i].rule) && strchr("-as", l->plans[i].lqer) &&
             (l->plans[i].lqer == '-' || l->plans[i].rule == 'q' || l->plans[i].rule == 'r') &&
             (l->plans[i].rule == 'h' || spec->params[i].ndim == 2);
        if (ok && l->plans[i].lqer == 'a') {
            const ParamInfo *p = &spec->params[i];
            const int k = rows_of(p) < cols_of(p) ? rows_of(p) : cols_of(p), r = l->rank < k ? l->rank : k;
            ok = ((int64_t)r * cols_of(p)) % l->group == 0;
        }
    }
    free(plan);
    l->crc = crc_value;
    if (ok) layout_build(spec, l);
    return ok ? 0 : -1;
}

/* The record's dequantization of tensor p into x: q * scale per row (+ the LQER product A B). */
static void decode_tensor(const ParamInfo *p, const Plan *pl, const unsigned char *data, float *x) {
    if (pl->rule == 'h') {
        for (size_t j = 0; j < p->count; j++) x[j] = golf_half_to_float(get_half(data + pl->e[0].offset, j));
        return;
    }
    const int rows = rows_of(p), cols = cols_of(p);
    const int8_t *q = (const int8_t *)(data + pl->e[0].offset);
    for (int r = 0; r < rows; r++) {
        const float s = golf_half_to_float(get_half(data + pl->e[1].offset, (size_t)r));
        for (int c = 0; c < cols; c++) x[(size_t)r * cols + c] = (float)q[(size_t)r * cols + c] * s;
    }
    if (pl->lqer == '-') return;
    const int rank = pl->rank;
    const int8_t *qa = (const int8_t *)(data + pl->e[2].offset), *qb = (const int8_t *)(data + pl->e[4].offset);
    const unsigned char *sa = data + pl->e[3].offset, *sb = data + pl->e[5].offset;
    const size_t group = pl->lqer == 'a' ? pl->e[4].bytes / (pl->e[5].bytes / 2) : 0;
    float *a = ct_malloc((size_t)rows * rank * sizeof *a, "LQER A"), *b = ct_malloc((size_t)rank * cols * sizeof *b, "LQER B");
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < rank; j++)
            a[(size_t)r * rank + j] =
                (float)qa[(size_t)r * rank + j] * golf_half_to_float(get_half(sa, pl->lqer == 'a' ? 0 : (size_t)r));
    for (int j = 0; j < rank; j++)
        for (int c = 0; c < cols; c++) {
            const size_t at = (size_t)j * cols + c;
            b[at] = (float)qb[at] * golf_half_to_float(get_half(sb, pl->lqer == 'a' ? at / group : (size_t)j));
        }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            float ab = 0;
            for (int j = 0; j < rank; j++) ab += a[(size_t)r * rank + j] * b[(size_t)j * cols + c];
            x[(size_t)r * cols + c] += ab;
        }
    free(a), free(b);
}

/* The container's layout from its header (the one this model and the header's plan give, byte
 * for byte); l is filled only on success. */
static int container_layout(const ModelSpec *spec, const unsigned char *raw, size_t raw_len, const char *path,
                            Layout *l) {
    uint64_t hl = 0;
    for (int b = 0; b < 8 && b < (int)raw_len; b++) hl |= (uint64_t)raw[b] << (8 * b);
    *l = (Layout){0};
    if (raw_len < 8 || hl > raw_len - 8 || layout_from_header(spec, raw + 8, (size_t)hl, l) != 0 ||
        l->header_len != 8 + hl || memcmp(raw, l->header, l->header_len) != 0) {
        layout_free(l);
        *l = (Layout){0};
        return ct_fail(NOT_THIS_MODEL, path);
    }
    return 0;
}

int golf_gptq_values(const ModelSpec *spec, const unsigned char *raw, size_t raw_len, const char *path,
                     size_t *header_len, size_t *data_bytes, GolfGptqValues *values) {
    Layout l;
    if (container_layout(spec, raw, raw_len, path, &l) != 0) return -1;
    *header_len = l.header_len;
    *data_bytes = l.data_bytes;
    for (int i = 0; i < model_artifact_params(spec); i++) {
        const Plan *pl = &l.plans[i];
        const int gptq = pl->rule == 'q' || pl->rule == 'r';
        values[i] = (GolfGptqValues){gptq ? pl->e[0].offset : 0, gptq ? pl->e[0].bytes : 0};
    }
    layout_free(&l);
    return 0;
}

int golf_gptq_decode(const ModelSpec *spec, const unsigned char *raw, size_t raw_len, const char *path,
                     float *params) {
    Layout l;
    if (container_layout(spec, raw, raw_len, path, &l) != 0) return -1;
    int rc = 0;
    if (raw_len != l.header_len + l.data_bytes) rc = ct_fail(NOT_THIS_MODEL, path);
    else if (ct_crc32(0, raw + l.header_len, l.data_bytes) != l.crc)
        rc = ct_fail("'%s' is damaged: its tensors' CRC-32 is not the one its header records", path);
    for (int i = 0; rc == 0 && i < model_artifact_params(spec); i++)
        decode_tensor(&spec->params[i], &l.plans[i], raw + l.header_len, params + spec->params[i].offset);
    layout_free(&l);
    return rc;
}

size_t golf_gptq_container_cap(const ModelSpec *spec) {
    /* every tensor float16 or int8 with all its entries, plus a generous header */
    size_t cap = (size_t)64 << 20;
    for (int i = 0; i < model_artifact_params(spec); i++) cap += spec->params[i].count * 4;
    return cap;
}

int golf_gptq_read(const ModelSpec *spec, const char *path, float *params) {
    unsigned char *packed = NULL, *raw = NULL;
    size_t len = 0, raw_len = 0;
    if (golf_file_read(path, &packed, &len) != 0) return -1;
    int rc = golf_brotli_decompress(packed, len, golf_gptq_container_cap(spec), &raw, &raw_len, path);
    free(packed);
    if (rc == 0) rc = golf_gptq_decode(spec, raw, raw_len, path, params);
    free(raw);
    return rc;
}
