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

/* The CaseOps byte sidecar (the 1.0611 record's fineweb_val_bytes_000000.bin beside
 * fineweb_val_000000.bin): a shard of the same format whose uint16 values are each token's count
 * of original text bytes. A shard whose file name holds "_bytes_" is one; its token shard is the
 * same path without "bytes_" there. shard_bin_pair_sidecars sorts a list of shards into token
 * shards and, for each, its sidecar (NULL: none); a sidecar whose token shard is not in the list
 * is an error naming both (imported alone it would pass for tokens). *token_shards and
 * *sidecars point into paths (arrays the caller frees). */
int shard_bin_pair_sidecars(char *const *paths, int n, char ***token_shards, char ***sidecars, int *num_token_shards);
/* Open a sidecar as shard_bin_open does and check it holds the num_tokens counts of its token
 * shard; *file is left at the first count. */
int shard_bin_open_sidecar(const char *sidecar, const char *shard, int64_t num_tokens, FILE **file);

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
 * checking every token against settings->vocab_size; with a sidecar (NULL: none), which must
 * hold num_tokens values, its counts become the file's /bytes_per_token. *progress_done counts
 * the tokens copied and progress shows them. A stop signal (stop.h) ends it after the block in
 * hand: it fails saying so, and out_path is not made (nor its partial .tmp left). */
int shard_bin_convert(const char *shard, FILE *f, int64_t num_tokens, const char *sidecar, const char *out_path,
                      const ShardImportSettings *settings, Progress *progress, int64_t *progress_done);

/* Writing a shard (`ctrain data tokenize --format bin`): values appended to "<path>.tmp", whose
 * header gets the count at close, when it is renamed to path; abort removes it. At most
 * INT32_MAX values (the header's count is an int32). */
typedef struct ShardBinWriter ShardBinWriter;
int shard_bin_writer_create(ShardBinWriter **writer, const char *path);
int shard_bin_writer_append(ShardBinWriter *writer, const uint16_t *values, int64_t n);
int shard_bin_writer_close(ShardBinWriter *writer);
void shard_bin_writer_abort(ShardBinWriter *writer);

#endif
