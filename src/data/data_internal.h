/* data_internal.h — private to src/data: what the files of a token data file's code share, all on
 * HDF5 handles and called with the HDF5 lock held unless said otherwise. The public interfaces
 * are data.h (the /tokens side) and tokenizer.h (the /tokenizer side). */
#ifndef CT_DATA_INTERNAL_H
#define CT_DATA_INTERNAL_H

#include <hdf5.h>
#include <sys/stat.h>

#include "data.h"
#include "tokenizer.h"

/* ---- data_file.c ---- */

/* Open a data file read-only with errors a user can act on. Lock held. */
hid_t data_open_file(const char *path);
/* Open /tokens with a chunk cache sized for sequential reads. Lock held. */
hid_t data_open_tokens(hid_t file, const char *path);
/* A file's stamp from its stat(2). */
DataFileStamp data_stamp_of(const struct stat *st);
/* Create "<path>.tmp", the file a finished write renames to path: *tmp_path (caller frees) and
 * the open *file, or -1 with neither (and no file left behind). Takes the lock itself. */
int data_create_tmp_file(const char *path, char **tmp_path, hid_t *file);

/* ---- byte_counts.c ---- */

/* *present = 1 if the file has a valid /bytes_per_token (1-D, integer, one entry per token),
 * 0 if it has none; -1 if it is malformed. Lock held. */
int data_check_byte_counts(hid_t file, const char *path, int64_t num_tokens, int *present);
/* Create an empty, extendible, checksummed uint16 /bytes_per_token. Lock held. */
hid_t data_create_byte_counts_locked(hid_t file, const char *path, int64_t chunk_entries);
/* Write counts[0, n) at entries [at, at + n), extending the dataset. Lock held. */
int data_append_byte_counts_locked(hid_t dset, const char *path, int64_t at, const uint16_t *counts, int64_t n);

/* ---- tokenizer_tables.c ---- */

/* *present = 1 if all three tables exist (and are valid), 0 if none do; -1 if only some
 * exist or one is malformed. Lock held. */
int data_check_luts(hid_t file, const char *path, int64_t vocab_size, int *present);
/* The three tables as /tokenizer (created) of an open file. Lock held. */
int data_write_luts_locked(hid_t file, const char *path, int64_t vocab_size, const int16_t *base_bytes,
                           const uint8_t *has_leading_space, const uint8_t *is_boundary_token);

/* ---- tokenizer_pieces.c ---- */

/* The pieces into the /tokenizer group that data_write_luts_locked made. Lock held. */
int data_write_pieces_locked(hid_t file, const char *path, int64_t vocab_size, const TokenPieces *pieces);

#endif
