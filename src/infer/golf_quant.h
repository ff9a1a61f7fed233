/* golf_quant.h — the per-tensor rules of parameter-golf's two artifacts (golf_artifact.h lays
 * their results out in a file): which tensors are quantized and how, as pure functions on
 * float32 values, each giving the bytes PyTorch's CPU ops give in the Python named beside it.
 * tests/unit/test_golf_quant.c checks them against hand-computed cases.
 *
 * int8 (the naive baseline's train_gpt.py, quantize_state_dict_int8 / quantize_float_tensor):
 *   tensors of at most 65,536 elements are kept, float32 when the name has a control pattern,
 *   float16 otherwise; larger 2-D tensors get int8 with one float16 scale per row, others int8
 *   with one float32 scale. The clip is the 99.99984th percentile of |x| (torch.quantile, linear
 *   interpolation, float32); scale = clip / 127 (at least 1/127 for rows);
 *   q = round_half_even(clamp(x, -clip, clip) / scale) limited to [-127, 127]; for rows q is
 *   computed with the float32 scale and the scale stored as float16.
 *
 * mixed int6 (the 1.1248 record's train_gpt.py, mixed_quantize_int6 with {"mlp", "attn"}), tested
 * in this order: tensors of at most 65,536 elements are kept as float16 (control tensors too);
 * larger tensors whose name has a control pattern are kept as float32; tensors of the mlp and
 * attn categories (golf_category) get int6 (quantize_int6_per_row); the rest (tok_emb, lm_head,
 * bigram.embed, ...) get the int8 rule above. int6 of a 2-D tensor: per row
 * scale = float16(max(rowmax|x| / 31, 1/31)), q = round_half_even(x / scale) limited to
 * [-32, 31], q computed with the float16 scale; of another rank: one float16 scale
 * amax / 31 (1 when amax is 0; no floor), the same q. int6 values are stored one per int8 byte,
 * as the record stores them (zstd does the packing). Dequantized, every kind gives q * scale in
 * float32, the kept tensors widened to float32. */
#ifndef CT_GOLF_QUANT_H
#define CT_GOLF_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* tensors of at most this many elements are kept as floats (both rules) */
#define GOLF_KEEP_FLOAT_MAX_NUMEL 65536

typedef enum {
    GOLF_KEEP_F32,    /* float32 as is */
    GOLF_KEEP_F16,    /* float16, round to nearest even */
    GOLF_INT8_ROWS,   /* int8, one float16 scale per row */
    GOLF_INT8_TENSOR, /* int8, one float32 scale */
    GOLF_INT6_ROWS,   /* int6 in int8 bytes, one float16 scale per row */
    GOLF_INT6_TENSOR, /* int6 in int8 bytes, one float16 scale */
} GolfKind;

/* The record's _classify_param: "tok_emb" or "lm_head" in the name -> embed; ".mlp." -> mlp;
 * ".attn.", or ".proj." without ".mlp." (bigram.proj.weight) -> attn; else other. */
typedef enum { GOLF_CAT_EMBED, GOLF_CAT_MLP, GOLF_CAT_ATTN, GOLF_CAT_OTHER } GolfCategory;
GolfCategory golf_category(const char *name);

/* The name contains a control-tensor pattern: attn_scale(s), mlp_scale(s), resid_mix(es),
 * q_gain, skip_weight(s), smear (CONTROL_TENSOR_NAME_PATTERNS; the baseline's list lacks
 * smear, which names no tensor of the baseline model, so one list serves both rules). */
int golf_is_control(const char *name);

/* How a tensor of this name, rank and element count is stored by each rule. */
GolfKind golf_int8_kind(const char *name, int ndim, size_t count);
GolfKind golf_mixed_int6_kind(const char *name, int ndim, size_t count);

/* float32 <-> float16 bits, round to nearest even (torch's .to(torch.float16)). */
uint16_t golf_half_from_float(float f);
float golf_half_to_float(uint16_t h);

/* quantize_float_tensor of a rows x cols matrix: q[rows * cols], scale[rows] as float16 bits.
 * work: cols floats of scratch. */
void golf_int8_rows(const float *x, int64_t rows, int64_t cols, int8_t *q, uint16_t *scale, float *work);
/* quantize_float_tensor of any other tensor of n elements: q[n]; returns the float32 scale.
 * work: n floats of scratch. */
float golf_int8_tensor(const float *x, int64_t n, int8_t *q, float *work);
/* quantize_int6_per_row of a rows x cols matrix: q[rows * cols] in [-32, 31], scale[rows] as
 * float16 bits. */
void golf_int6_rows(const float *x, int64_t rows, int64_t cols, int8_t *q, uint16_t *scale);
/* quantize_int6_per_row of any other tensor of n elements: q[n]; returns the float16 scale's
 * bits. */
uint16_t golf_int6_tensor(const float *x, int64_t n, int8_t *q);

#endif
