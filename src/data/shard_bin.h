/* shard_bin.h — the llm.c / parameter-golf .bin token shard (what train_gpt.py reads): a header
 * of 256 little-endian int32 words ([0] magic, [1] version, [2] token count, the rest zero), then
 * the tokens as little-endian uint16. The format lives here and in shard_bin.c only; `ctrain
 * data import-bin` converts shards to HDF5 data files with it, and opening a data file names a
 * shard given by mistake (data_file.c). Errors name the shard and what is wrong. */
#ifndef CT_SHARD_BIN_H
#define CT_SHARD_BIN_H

#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "progress.h"
#include "tokenizer.h"

/* The header: its size in bytes, and the values of its first two words. */
#define CT_SHARD_HEADER_BYTES 1024
#define CT_SHARD_MAGIC 20240520
#define CT_SHARD_VERSION 1
/* The same as text, for help messages: "1024-byte header: magic 20240520, version 1". */
#define CT_SHARD_STRINGIFY_(x) #x
#define CT_SHARD_STRINGIFY(x) CT_SHARD_STRINGIFY_(x)
#define CT_SHARD_HEADER_TEXT                                                                           \
    CT_SHARD_STRINGIFY(CT_SHARD_HEADER_BYTES) "-byte header: magic " CT_SHARD_STRINGIFY(CT_SHARD_MAGIC) \
    ", version " CT_SHARD_STRINGIFY(CT_SHARD_VERSION)

/* Open a shard and check its header against its size; leaves *file positioned at the first
 * token, *num_tokens the header's count. */
int shard_bin_open(const char *path, FILE **file, int64_t *num_tokens);

/* What each converted file gets beside the tokens. */
typedef struct {
    int64_t vocab_size, bos_id;
    const char *tokenizer;
    const int16_t *base_bytes; /* NULL: no tables */
    const uint8_t *has_leading_space, *is_boundary_token;
    const TokenPieces *pieces; /* NULL: no pieces */
    const char *vocab_name;    /* how the user sets vocab_size, for messages; NULL: "--vocab-size" */
} ShardImportSettings;

/* Stream one shard opened by shard_bin_open (f, num_tokens) into the HDF5 data file out_path,
 * checking every token against settings->vocab_size; *progress_done counts the tokens copied
 * and progress shows them. A stop signal (stop.h) ends it after the block in hand: it fails
 * saying so, and out_path is not made (nor its partial .tmp left). */
int shard_bin_convert(const char *shard, FILE *f, int64_t num_tokens, const char *out_path,
                      const ShardImportSettings *settings, Progress *progress, int64_t *progress_done);

#endif
