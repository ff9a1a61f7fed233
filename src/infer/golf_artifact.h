/* golf_artifact.h — the parameter-golf artifact: the model quantized and compressed, whose size
 * is the competition's measure, and the weights it gives back (docs/checkpoint-format.md, "The
 * parameter-golf artifact"). Two formats, each a train_gpt.py's ending:
 *
 *   int8-zlib  the naive baseline's: every tensor by the int8 rule (golf_quant.h), in a
 *              safetensors file holding "quantized/NAME" (I8), "scales/NAME" (F16 per row, or
 *              an F32 scalar) and "passthrough/NAME" (F16 or F32), __metadata__ format
 *              "int8_clean_per_row_v1"; compressed as one zlib stream at level 9 (the library).
 *              Python: safetensors.torch.load(zlib.decompress(open(path, "rb").read())).
 *   int6-zstd  the 1.1248 record's: the mixed int6 rule (golf_quant.h), in a safetensors file
 *              holding the record's own keys: "NAME" for a kept tensor (F16, or F32 for a large
 *              control tensor), "NAME.q" (I8, int6 or int8 values) and "NAME.scale" (F16 per row,
 *              an F16 scalar for int6, an F32 scalar for int8); __metadata__ format
 *              "mixed_int6_v1" and "m", the record's meta dict as JSON text (name -> "passthrough",
 *              "passthrough_ctrl", {"type": "int6"} or {"type": "int8"}); compressed as one zstd
 *              frame at level 22 with its content size and checksum (libzstd, not our own codec).
 *              Python: safetensors.torch.load(zstandard.ZstdDecompressor().decompress(...)).
 *   gptq-brotli the 1.0611 record's quantization (golf_gptq.h: GPTQ int6/int7 with the Hessians
 *              of the weights' inputs, LQER on the matrices with the largest error, int8 gate
 *              rows, float16 for the rest) in a safetensors file holding the record's keys
 *              ("NAME" float16, "NAME.q" I8 + "NAME.scale" F16 per row, "NAME.gq" + "NAME.gs",
 *              "NAME.lqA_a", "NAME.lqAs_a", "NAME.lqB_a", "NAME.lqBs_a" or the symmetric
 *              "NAME.lqA", ".lqAs", ".lqB", ".lqBs"); __metadata__ format "gptq_lqer_v1", "plan"
 *              (two letters per tensor, golf_gptq_artifact.c), "bits", "lqer" and "m" (the
 *              record's meta dict as JSON text); compressed with brotli at quality 11 (libbrotli).
 *              Python: safetensors.torch.load(brotli.decompress(open(path, "rb").read())).
 *   gptq-pergroup the same quantized container as gptq-brotli, split by role as the record's
 *              COMPRESSOR=pergroup: the GPTQ matrices' int8 values grouped (tok_emb, c_k, c_q,
 *              c_v, attn.proj, mlp.fc, mlp.proj), the rows of tok_emb, c_q and mlp.fc in L1
 *              nearest-neighbour order, each matrix column-major, each group through lrzip's
 *              ZPAQ mode (Debian's lrzip, run as a subprocess); the rest of the container, and
 *              the row orders, brotli; the streams behind the magic "CTPG" and a length table
 *              (docs/checkpoint-format.md, "gptq-pergroup", is enough to write a reader).
 *
 * Tensors are in state_dict order, values then scale; the multi-token-prediction heads, which
 * only train, are left out (as the record's export_sd drops mtp_heads). The bytes depend on the weights only:
 * writing the same weights twice gives the same file. */
#ifndef CT_GOLF_ARTIFACT_H
#define CT_GOLF_ARTIFACT_H

#include <stdint.h>

#include "golf_quant.h"
#include "model.h"

typedef enum { GOLF_INT8_ZLIB, GOLF_INT6_ZSTD, GOLF_GPTQ_BROTLI, GOLF_GPTQ_PERGROUP } GolfFormat;

/* the names --format and golf_format accept, for messages */
#define GOLF_FORMAT_NAMES "int8-zlib, int6-zstd, gptq-brotli or gptq-pergroup"
/* "int8-zlib", "int6-zstd", "gptq-brotli" or "gptq-pergroup" -> *format; -1 (no message) for
 * anything else */
int golf_format_from_name(const char *name, GolfFormat *format);
/* 0 when this build has the format's codec; else -1 with a message saying what to install
 * (int6-zstd needs libzstd, gptq-brotli libbrotli; the build finds them with pkg-config or
 * ZSTD_HOME / BROTLI_HOME) */
int golf_format_available(GolfFormat format);
/* 1 for the formats of GPTQ's quantization (gptq-brotli, gptq-pergroup): they need the Hessians */
int golf_format_is_gptq(GolfFormat format);
/* as train_gpt.py prints it: "int8+zlib", "int6+zstd", "quantized+brotli", "quantized+pergroup" */
const char *golf_format_label(GolfFormat format);
/* the file a run writes: final_model.int8.stz, final_model.int6.safetensors.zst (zstd -d gives
 * the safetensors file), final_model.gptq.safetensors.br (brotli -d gives it),
 * final_model.gptq.pgrp */
const char *golf_default_file(GolfFormat format);
/* path = the artifact a run in out_dir writes with golf_format = format_name (out_dir/
 * golf_default_file); -1 with a message naming the format when it is not one */
int golf_run_artifact_path(const char *out_dir, const char *format_name, char *path, size_t cap);

typedef struct {
    int64_t param_count, num_tensors; /* elements; tensors */
    int64_t num_int8, num_int6;       /* tensors quantized to int8, to int6 (the rest kept as floats) */
    int64_t num_gptq, num_lqer;       /* gptq-brotli: matrices by GPTQ (or rounding, without a Hessian); with LQER */
    int64_t baseline_bytes;           /* the float32 weights */
    int64_t payload_bytes;            /* quantized values + scales + kept floats */
    int64_t raw_bytes;                /* the uncompressed container */
    int64_t file_bytes;               /* the artifact */
} GolfStats;

typedef struct GolfGptqOptions GolfGptqOptions; /* golf_gptq.h */

/* ctrain's code size as parameter-golf counts code (golf_code_size.c, measured by the build; docs/
 * model.md, "The code's size"): the compressed bytes and the sources' own; -1 when unknown. */
extern const int64_t golf_code_bytes, golf_code_raw_bytes;

/* Quantize params (spec's layout, float32), write the artifact to path (atomically: a
 * temporary file renamed into place) and fill *stats. gptq: the GPTQ formats' settings and
 * Hessians (NULL for the other formats). */
int golf_write(const ModelSpec *spec, const float *params, GolfFormat format, const GolfGptqOptions *gptq,
               const char *path, GolfStats *stats);

/* Read an artifact back and dequantize it as the format's train_gpt.py does (q * scale in
 * float32; kept floats widened) into params (spec->total_floats). Fails with a message naming
 * the file if it is damaged or not the artifact of this format for a model of this shape. */
int golf_read(const ModelSpec *spec, GolfFormat format, const char *path, float *params);

/* Write params as a safetensors file of float32 tensors with train_gpt.py's names and shapes
 * (as `ctrain ckpt export`), atomically: the weights a round trip evaluates, for inspection. */
int golf_write_weights(const ModelSpec *spec, const float *params, const char *path);

#endif
