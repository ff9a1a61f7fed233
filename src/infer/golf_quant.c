/* golf_quant.c — the per-tensor rules of the parameter-golf artifacts (golf_quant.h). Written to
 * give the bytes PyTorch's CPU ops give in the two train_gpt.py's: float32 arithmetic where
 * torch computes in float32 (and double where Python does, for the per-tensor scales), true
 * division, torch.quantile's rank and interpolation formulas, round half to even (the default
 * rounding mode's nearbyintf, as torch.round), and float16 conversion with round to nearest
 * even. tests/cli/test_golf.sh checks whole artifacts against independent PyTorch versions. */
#include "golf_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- which rule a tensor gets ---- */

/* the records' CONTROL_TENSOR_NAME_PATTERNS; skip_gates, attn_gate_w and the parallel lanes'
 * lambdas are the 1.0611 record's (issue 56: only a model with skip_gates_enabled, the sparse
 * attention gate or parallel_start_layer > 0 has a tensor they match), kept float32 as that
 * record keeps them */
static const char *const CONTROL_PATTERNS[] = {"attn_scale",   "attn_scales", "mlp_scale",   "mlp_scales",
                                               "resid_mix",    "resid_mixes", "q_gain",      "skip_weight",
                                               "skip_weights", "smear",       "skip_gates",  "attn_gate_w",
                                               "parallel_post_lambdas",       "parallel_resid_lambdas"};

int golf_is_control(const char *name) {
    for (size_t i = 0; i < sizeof CONTROL_PATTERNS / sizeof CONTROL_PATTERNS[0]; i++)
        if (strstr(name, CONTROL_PATTERNS[i])) return 1;
    return 0;
}

GolfCategory golf_category(const char *name) {
    if (strstr(name, "tok_emb") || strstr(name, "lm_head")) return GOLF_CAT_EMBED;
    if (strstr(name, ".mlp.")) return GOLF_CAT_MLP;
    if (strstr(name, ".attn.") || strstr(name, ".proj.")) return GOLF_CAT_ATTN; /* ".mlp." was tested above */
    return GOLF_CAT_OTHER;
}

GolfKind golf_int8_kind(const char *name, int ndim, size_t count) {
    if (count <= GOLF_KEEP_FLOAT_MAX_NUMEL) return golf_is_control(name) ? GOLF_KEEP_F32 : GOLF_KEEP_F16;
    return ndim == 2 ? GOLF_INT8_ROWS : GOLF_INT8_TENSOR;
}

GolfKind golf_mixed_int6_kind(const char *name, int ndim, size_t count) {
    /* the record's order: size first (so small control tensors become float16), then control */
    if (count <= GOLF_KEEP_FLOAT_MAX_NUMEL) return GOLF_KEEP_F16;
    if (golf_is_control(name)) return GOLF_KEEP_F32;
    GolfCategory c = golf_category(name);
    if ((c == GOLF_CAT_MLP || c == GOLF_CAT_ATTN) && ndim >= 1) return ndim == 2 ? GOLF_INT6_ROWS : GOLF_INT6_TENSOR;
    return ndim == 2 ? GOLF_INT8_ROWS : GOLF_INT8_TENSOR;
}

/* ---- float16 ---- */

uint16_t golf_half_from_float(float f) {
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

float golf_half_to_float(uint16_t h) {
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

/* ---- int8: the clip value, torch.quantile(|x|, q), linear interpolation ---- */

#define CLIP_Q ((float)(99.99984 / 100.0)) /* torch.quantile takes q in the tensor's dtype */

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

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

static int8_t int8_of(float x, float clip, float scale) {
    float c = x > clip ? clip : x < -clip ? -clip : x;
    float r = nearbyintf(c / scale);
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}

void golf_int8_rows(const float *x, int64_t rows, int64_t cols, int8_t *q, uint16_t *scale, float *work) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float clip = clip_value(row, cols, work);
        float s = clip / 127.0f;
        if (s < (float)(1.0 / 127.0)) s = (float)(1.0 / 127.0);
        for (int64_t c = 0; c < cols; c++) q[r * cols + c] = int8_of(row[c], clip, s);
        scale[r] = golf_half_from_float(s);
    }
}

float golf_int8_tensor(const float *x, int64_t n, int8_t *q, float *work) {
    float clip = clip_value(x, n, work);
    /* train_gpt.py divides in Python (double) and stores the scale as float32 */
    float s = clip > 0 ? (float)((double)clip / 127.0) : 1.0f;
    for (int64_t i = 0; i < n; i++) q[i] = int8_of(x[i], clip, s);
    return s;
}

/* ---- int6 ---- */

static int8_t int6_of(float x, float scale) {
    float r = nearbyintf(x / scale);
    if (isnan(r)) return 0; /* 0 / 0 under a scale that underflowed float16; torch's cast is undefined there */
    return (int8_t)(r > 31.0f ? 31.0f : r < -32.0f ? -32.0f : r);
}

void golf_int6_rows(const float *x, int64_t rows, int64_t cols, int8_t *q, uint16_t *scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float row_max = 0.0f;
        for (int64_t c = 0; c < cols; c++)
            if (fabsf(row[c]) > row_max) row_max = fabsf(row[c]);
        float s = row_max / 31.0f;
        if (s < (float)(1.0 / 31.0)) s = (float)(1.0 / 31.0);
        scale[r] = golf_half_from_float(s);
        const float s16 = golf_half_to_float(scale[r]); /* q uses the stored scale */
        for (int64_t c = 0; c < cols; c++) q[r * cols + c] = int6_of(row[c], s16);
    }
}

uint16_t golf_int6_tensor(const float *x, int64_t n, int8_t *q) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    /* Python divides in double; torch.tensor(..., dtype=float16) rounds through float32 */
    uint16_t scale = golf_half_from_float(amax > 0 ? (float)((double)amax / 31.0) : 1.0f);
    const float s16 = golf_half_to_float(scale);
    for (int64_t i = 0; i < n; i++) q[i] = int6_of(x[i], s16);
    return scale;
}
