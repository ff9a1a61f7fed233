/* data.h — HDF5 token data files (docs/data-format.md), their /tokens side: resolving a split's
 * glob into an ordered file list (data.c), reading token ranges with chunked hyperslab reads
 * (token_reader.c), writing new files (token_writer.c; used by `ctrain data` converters and
 * tests), and what identifies a file's tokens (data_identity.c, token_crc.c). The /tokenizer
 * side (byte-count tables, pieces) and the tokenizers are tokenizer.h's.
 *
 * A data file holds a 1-D chunked dataset /tokens (uint16 or uint32) with attributes
 * vocab_size (int64), bos_id (int64, -1 if none), tokenizer (string) and, in files written by
 * ctrain, tokens_crc32 (uint32, the CRC-32 of the tokens); optionally /tokenizer/base_bytes
 * (int16[vocab]), /tokenizer/has_leading_space (uint8[vocab]) and /tokenizer/is_boundary_token
 * (uint8[vocab]); optionally /bytes_per_token (uint16, one entry per token: the bytes of original
 * text each token stands for, the CaseOps byte sidecar; byte_counts.c).
 *
 * All functions return 0 on success, -1 with ct_error() naming the file and the problem.
 * Every function is safe to call from the loader's prefetch thread while the main thread
 * uses HDF5 elsewhere (HDF5 calls are serialised by a process-wide lock). */
#ifndef CT_DATA_H
#define CT_DATA_H

#include <stdint.h>

/* A file as stat(2) saw it: which file it is (device, inode), its size and when it was last
 * written. */
typedef struct {
    int64_t dev, ino, size, mtime_ns;
} DataFileStamp;

typedef struct {
    char *path;
    int64_t num_tokens;
    int64_t vocab_size;
    int64_t bos_id;
    int token_bytes; /* 2 (uint16) or 4 (uint32) */
    int has_luts;    /* all three /tokenizer tables present with vocab_size entries */
    int has_byte_counts; /* /bytes_per_token present with one entry per token */
    char *tokenizer; /* the tokenizer attribute (free text) */
    /* Identity of the content (data_identity.c), so that a resume notices a replaced file: */
    int64_t tokens_crc32; /* the tokens_crc32 attribute, -1 if the file has none */
    int64_t sample_crc32; /* CRC-32 of the first and last tokens (data_fingerprint); -1 until computed */
    /* The file as it was when opened: a reader checks it after every read, so a file changed,
     * cut or replaced during a run stops the run instead of feeding it what HDF5 makes of a
     * damaged file (zeros past a cut end). */
    DataFileStamp stamp;
} TokenFileInfo;

/* A split: the files of a glob in sorted path order, concatenated into one stream. */
typedef struct {
    char *pattern;
    int num_files;
    TokenFileInfo *files;
    int64_t total_tokens;
    int64_t vocab_size; /* agreed by every file */
    int has_luts;       /* every file has the LUTs */
    int any_byte_counts; /* some file has /bytes_per_token (validation needs it in every file) */
} TokenSet;

/* Expand the glob (sorted), open every file and read its metadata. Fails on an empty glob, a
 * file without a valid /tokens dataset, an unsupported dtype, an empty file, or files whose
 * vocab_size disagree. Does not scan token values (see data_check_tokens). */
int data_open_set(const char *pattern, TokenSet *set);
void data_free_set(TokenSet *set);

/* Read metadata of one file (no token scan). */
int data_file_info(const char *path, TokenFileInfo *info);
void data_free_file_info(TokenFileInfo *info);

/* Read n tokens starting at position pos of one file into out (widened to uint32). The range
 * must lie inside the file. Uses a hyperslab read; keeps a small cache of open files. After
 * each read the file must still be the one the set opened (TokenFileInfo's stamp), else the
 * read fails naming the file, the change and the position. */
typedef struct TokenReader TokenReader;
int token_reader_open(TokenReader **reader, const TokenSet *set);
int token_reader_read(TokenReader *reader, int file_index, int64_t pos, int64_t n, uint32_t *out);
void token_reader_close(TokenReader *reader);

/* Scan every token of every file in chunks; fail naming file, position and value of the first
 * token >= vocab_size, or a file whose tokens do not match its tokens_crc32 attribute. */
int data_check_tokens(const TokenSet *set);

/* The first n entries of the split's /bytes_per_token stream (the files in order), as *counts
 * (caller frees); fails naming a file of the first n tokens that has none, or a count above 65535. */
int data_read_byte_counts(const TokenSet *set, int64_t n, uint16_t **counts);

/* Writing: tokens are appended in chunks to an extendible chunked /tokens dataset; the file is
 * written under "<path>.tmp" and renamed into place by token_writer_close, so an interrupted
 * conversion never leaves a half-written file under the final name. */
typedef struct TokenWriter TokenWriter;
int token_writer_create(TokenWriter **writer, const char *path, int token_bytes, int64_t vocab_size,
                        int64_t bos_id, const char *tokenizer);
/* tokens has the writer's token width (uint16_t or uint32_t elements). Values are checked
 * against vocab_size. */
int token_writer_append(TokenWriter *writer, const void *tokens, int64_t n);
/* The byte counts of the next n tokens (/bytes_per_token); a file that has them must have one
 * per token by close. */
int token_writer_append_byte_counts(TokenWriter *writer, const uint16_t *counts, int64_t n);
/* The file's root attribute provenance: free text saying what made it (the command, the
 * tokenizer, the inputs), as `ctrain data tokenize` writes it. */
int token_writer_set_provenance(TokenWriter *writer, const char *text);
int token_writer_close(TokenWriter *writer);   /* finish + atomic rename */
void token_writer_abort(TokenWriter *writer);  /* remove the temporary file */

/* Like data_check_tokens, also reporting the largest token id seen (max_token may be NULL) and
 * calling progress(ctx, tokens_scanned, total_tokens) as the scan advances (may be NULL). */
typedef void (*DataProgressFn)(void *ctx, int64_t done, int64_t total);
int data_scan_tokens(const TokenSet *set, uint32_t *max_token, DataProgressFn progress, void *ctx);

/* Check the storage of every file's /tokens without reading the tokens: every chunk of the
 * chunk index is looked up and must lie inside the file (a truncated copy, a damaged index).
 * Run before training, in a child process (isolate.h), so that damaged metadata that would
 * crash HDF5 is found at the start and not when the loader reaches it. */
int data_check_storage(const TokenSet *set);

/* ---- identity (data_identity.c) ----
 * CRC-32s of tokens as they are stored: each token as a little-endian integer of the file's
 * width (2 or 4 bytes), i.e. zlib.crc32(tokens.astype("<u2").tobytes()) for a uint16 file. */
uint32_t data_crc32_tokens(uint32_t crc, const uint32_t *tokens, int64_t n, int token_bytes); /* widened values */
uint32_t data_crc32_packed(uint32_t crc, const void *tokens, int64_t n, int token_bytes);     /* native width */

/* Tokens at each end of a file that its sample checksum covers. */
#define CT_DATA_SAMPLE_TOKENS ((int64_t)1 << 16)
/* Fill every file's sample_crc32: the CRC-32 of its first CT_DATA_SAMPLE_TOKENS tokens followed
 * by its last CT_DATA_SAMPLE_TOKENS (of all its tokens when it has at most twice that many).
 * Cheap (two small reads per file), and with the token count it tells apart any two files
 * that differ at either end, whether or not they carry tokens_crc32. */
int data_fingerprint(TokenSet *set);

/* /tokens chunk length of files written by TokenWriter (docs/data-format.md says why). */
#define CT_DATA_CHUNK_TOKENS ((int64_t)1 << 20)

#endif
