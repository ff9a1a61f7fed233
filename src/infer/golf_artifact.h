/* golf_artifact.h — the parameter-golf artifact: the model quantized to int8 by train_gpt.py's
 * rule and compressed with zlib, whose size is the competition's measure, and the weights it
 * gives back (docs/checkpoint-format.md "The parameter-golf artifact").
 *
 * The rule (train_gpt.py's quantize_state_dict_int8, "int8_clean_per_row_v1"), per tensor in
 * state_dict order: tensors of at most 65,536 elements are kept as floats — float32 when the
 * name contains a control-tensor pattern (attn_scale, mlp_scale, resid_mix, q_gain,
 * skip_weight, and their plurals), float16 otherwise; larger 2-D tensors get int8 values with
 * one float16 scale per row, larger others one float32 scale. The clip value is the 99.99984th
 * percentile of |x| (torch.quantile's linear interpolation, in float32); scale = clip / 127
 * (at least 1/127 for rows), q = round-half-even(clamp(x, -clip, clip) / scale).
 *
 * The container is a safetensors file (8-byte header length, JSON header, raw little-endian
 * tensors) holding "quantized/NAME" (I8), "scales/NAME" (F16 per row, or F32 scalar) and
 * "passthrough/NAME" (F16 or F32), the whole file compressed as one zlib stream at level 9
 * (Python: safetensors.torch.load(zlib.decompress(open(path, "rb").read()))). */
#ifndef CT_GOLF_ARTIFACT_H
#define CT_GOLF_ARTIFACT_H

#include <stdint.h>

#include "model.h"

typedef struct {
    int64_t param_count, num_tensors, num_quantized; /* elements; tensors; of those, int8 */
    int64_t baseline_bytes;                          /* the float32 weights */
    int64_t payload_bytes;                           /* int8 values + scales + kept floats */
    int64_t raw_bytes;                               /* the uncompressed container */
    int64_t file_bytes;                              /* the artifact: zlib level 9 */
} GolfStats;

/* Quantize params (spec's layout, float32), write the artifact to path (atomically: a
 * temporary file renamed into place) and fill *stats. */
int golf_write(const ModelSpec *spec, const float *params, const char *path, GolfStats *stats);

/* Read an artifact back and dequantize it as train_gpt.py's dequantize_state_dict_int8 does
 * (q * scale in float32; kept floats widened) into params (spec->total_floats). Fails with a
 * message naming the file if it is not the artifact of a model of this shape. */
int golf_read(const ModelSpec *spec, const char *path, float *params);

#endif
