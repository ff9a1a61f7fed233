/* token_writer.c — writing a new token data file (data.h's TokenWriter, used by `ctrain data`'s
 * converters and tests): tokens appended in chunks to an extendible, checksummed /tokens, with
 * the tokens_crc32 attribute, in "<path>.tmp" renamed into place on close, so an interrupted
 * conversion never leaves a half-written file under the final name. The /tokenizer tables and
 * pieces a file may carry are written by tokenizer_tables.c and tokenizer_pieces.c, its
 * /bytes_per_token by byte_counts.c. */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

struct TokenWriter {
    char *path, *tmp_path;
    int token_bytes;
    int64_t vocab_size, bos_id;
    char *tokenizer;
    hid_t file, dset; /* dset is created at the first flush, when its chunk size is known */
    void *buffer;     /* one chunk of pending tokens */
    int64_t buffered, written;
    uint32_t crc;     /* of the tokens written so far: the tokens_crc32 attribute */
    hid_t counts_dset; /* /bytes_per_token, created by the first byte counts appended */
    int64_t counts_written;
};

/* Create the extendible /tokens dataset and its attributes. A file shorter than one chunk
 * gets a single chunk of exactly its length, so a tiny file does not occupy a whole 2 MiB
 * chunk on disk. Lock held. */
static int create_tokens_dataset(TokenWriter *w, int64_t chunk_tokens) {
    hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = (hsize_t)chunk_tokens;
    hid_t space = H5Screate_simple(1, &zero, &unlimited);
    hid_t dcpl = ct_h5_untimed_plist(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    /* Each chunk carries a Fletcher32 checksum that HDF5 checks whenever it reads the chunk (once
     * per 2 MiB chunk into the reader's cache, well below a percent of a step): damage on the
     * disk, or a chunk rewritten behind the file's back, fails the read that meets it. */
    H5Pset_fletcher32(dcpl);
    hid_t file_type = w->token_bytes == 2 ? H5T_STD_U16LE : H5T_STD_U32LE;
    w->dset = H5Dcreate2(w->file, "tokens", file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (w->dset < 0) return ct_h5_fail("'%s': cannot create /tokens", w->tmp_path);
    if (ct_h5_attr_write_i64(w->dset, "vocab_size", w->vocab_size) != 0 ||
        ct_h5_attr_write_i64(w->dset, "bos_id", w->bos_id) != 0 ||
        ct_h5_attr_write_str(w->dset, "tokenizer", w->tokenizer) != 0)
        return ct_fail_prefix("'%s': /tokens", w->tmp_path);
    return 0;
}

/* Append the buffered tokens to /tokens. */
static int writer_flush(TokenWriter *w) {
    if (w->buffered == 0) return 0;
    int rc = 0;
    ct_hdf5_lock();
    if (w->dset < 0) rc = create_tokens_dataset(w, w->buffered);
    if (rc == 0) {
        hsize_t start = (hsize_t)w->written, count = (hsize_t)w->buffered, new_size = start + count;
        hid_t file_space = H5I_INVALID_HID, mem_space = H5Screate_simple(1, &count, NULL);
        hid_t mem_type = w->token_bytes == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
        if (H5Dset_extent(w->dset, &new_size) < 0 || (file_space = H5Dget_space(w->dset)) < 0 ||
            H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
            H5Dwrite(w->dset, mem_type, mem_space, file_space, H5P_DEFAULT, w->buffer) < 0)
            rc = ct_h5_fail("'%s': cannot write /tokens[%lld:%lld]", w->tmp_path, (long long)start,
                         (long long)new_size);
        if (file_space >= 0) H5Sclose(file_space);
        H5Sclose(mem_space);
    }
    ct_hdf5_unlock();
    if (rc == 0) {
        w->crc = data_crc32_packed(w->crc, w->buffer, w->buffered, w->token_bytes);
        w->written += w->buffered;
        w->buffered = 0;
    }
    return rc;
}

int token_writer_create(TokenWriter **writer, const char *path, int token_bytes, int64_t vocab_size,
                        int64_t bos_id, const char *tokenizer) {
    *writer = NULL;
    if (token_bytes != 2 && token_bytes != 4)
        return ct_fail("'%s': token width %d bytes is not supported, expected 2 (uint16) or 4 (uint32)", path,
                       token_bytes);
    int64_t max_vocab = token_bytes == 2 ? (int64_t)1 << 16 : (int64_t)1 << 32;
    if (vocab_size < 1 || vocab_size > max_vocab)
        return ct_fail("'%s': vocab_size %lld does not fit %s tokens (expected 1 .. %lld)", path,
                       (long long)vocab_size, token_bytes == 2 ? "uint16" : "uint32", (long long)max_vocab);
    if (bos_id < -1 || bos_id >= vocab_size)
        return ct_fail("'%s': bos_id %lld is not -1 (none) or a token id below vocab_size %lld", path,
                       (long long)bos_id, (long long)vocab_size);
    TokenWriter *w = ct_calloc(1, sizeof *w, "token writer");
    w->path = ct_strdup(path);
    w->token_bytes = token_bytes;
    w->vocab_size = vocab_size;
    w->bos_id = bos_id;
    w->tokenizer = ct_strdup(tokenizer ? tokenizer : "");
    w->dset = w->counts_dset = H5I_INVALID_HID;
    w->buffer = ct_malloc((size_t)CT_DATA_CHUNK_TOKENS * (size_t)token_bytes, "token write buffer");
    if (data_create_tmp_file(path, &w->tmp_path, &w->file) != 0) {
        token_writer_abort(w);
        return -1;
    }
    *writer = w;
    return 0;
}

int token_writer_append(TokenWriter *w, const void *tokens, int64_t n) {
    const unsigned char *src = tokens;
    int64_t done = 0;
    while (done < n) {
        int64_t room = CT_DATA_CHUNK_TOKENS - w->buffered;
        int64_t k = n - done < room ? n - done : room;
        unsigned char *dst = (unsigned char *)w->buffer + w->buffered * w->token_bytes;
        memcpy(dst, src + done * w->token_bytes, (size_t)k * (size_t)w->token_bytes);
        for (int64_t i = 0; i < k; i++) {
            uint32_t v;
            if (w->token_bytes == 2) {
                uint16_t v16;
                memcpy(&v16, dst + 2 * i, 2);
                v = v16;
            } else {
                memcpy(&v, dst + 4 * i, 4);
            }
            if ((int64_t)v >= w->vocab_size)
                return ct_fail("'%s': token %lld is %u, which is >= vocab_size %lld", w->path,
                               (long long)(w->written + w->buffered + i), v, (long long)w->vocab_size);
        }
        w->buffered += k;
        done += k;
        if (w->buffered == CT_DATA_CHUNK_TOKENS && writer_flush(w) != 0) return -1;
    }
    return 0;
}

int token_writer_set_luts(TokenWriter *w, const int16_t *base_bytes, const uint8_t *has_leading_space,
                          const uint8_t *is_boundary_token) {
    ct_hdf5_lock();
    int rc = data_write_luts_locked(w->file, w->tmp_path, w->vocab_size, base_bytes, has_leading_space, is_boundary_token);
    ct_hdf5_unlock();
    return rc;
}

int token_writer_set_pieces(TokenWriter *w, const TokenPieces *pieces) {
    ct_hdf5_lock();
    int rc = data_write_pieces_locked(w->file, w->tmp_path, w->vocab_size, pieces);
    ct_hdf5_unlock();
    return rc;
}

int token_writer_set_provenance(TokenWriter *w, const char *text) {
    ct_hdf5_lock();
    int rc = ct_h5_attr_write_str(w->file, "provenance", text);
    ct_hdf5_unlock();
    return rc != 0 ? ct_fail_prefix("'%s': provenance attribute", w->tmp_path) : 0;
}

int token_writer_append_byte_counts(TokenWriter *w, const uint16_t *counts, int64_t n) {
    if (n <= 0) return 0;
    ct_hdf5_lock();
    int rc = 0;
    /* chunks as /tokens' (a file shorter than one chunk gets one chunk of its length) */
    if (w->counts_dset < 0 &&
        (w->counts_dset = data_create_byte_counts_locked(w->file, w->tmp_path,
                                                         n < CT_DATA_CHUNK_TOKENS ? n : CT_DATA_CHUNK_TOKENS)) < 0)
        rc = -1;
    if (rc == 0) rc = data_append_byte_counts_locked(w->counts_dset, w->tmp_path, w->counts_written, counts, n);
    ct_hdf5_unlock();
    if (rc == 0) w->counts_written += n;
    return rc;
}

int token_writer_close(TokenWriter *w) {
    if (writer_flush(w) != 0) goto fail;
    if (w->written == 0) {
        ct_fail("'%s': no tokens were written; an empty /tokens is not a valid data file", w->path);
        goto fail;
    }
    if (w->counts_dset >= 0 && w->counts_written != w->written) {
        ct_fail("'%s': %lld byte counts were written for %lld tokens; /bytes_per_token needs one per token", w->path,
                (long long)w->counts_written, (long long)w->written);
        goto fail;
    }
    ct_hdf5_lock();
    herr_t closed = ct_h5_attr_write_u32(w->dset, "tokens_crc32", w->crc) == 0 ? 0 : -1;
    if (w->counts_dset >= 0 && H5Dclose(w->counts_dset) < 0) closed = -1;
    w->counts_dset = H5I_INVALID_HID;
    if (H5Dclose(w->dset) < 0) closed = -1;
    w->dset = H5I_INVALID_HID;
    if (H5Fclose(w->file) < 0) closed = -1;
    w->file = H5I_INVALID_HID;
    int rc = closed < 0 ? ct_h5_fail("'%s': cannot finish writing", w->tmp_path) : 0;
    ct_hdf5_unlock();
    if (rc != 0) goto fail;
    if (rename(w->tmp_path, w->path) != 0) {
        ct_fail("cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
        goto fail;
    }
    free(w->tmp_path);
    w->tmp_path = NULL; /* nothing left to remove */
    token_writer_abort(w);
    return 0;
fail:
    token_writer_abort(w);
    return -1;
}

void token_writer_abort(TokenWriter *w) {
    if (!w) return;
    ct_hdf5_lock();
    if (w->dset >= 0) H5Dclose(w->dset);
    if (w->counts_dset >= 0) H5Dclose(w->counts_dset);
    if (w->file >= 0) H5Fclose(w->file);
    ct_hdf5_unlock();
    if (w->tmp_path) unlink(w->tmp_path);
    free(w->path);
    free(w->tmp_path);
    free(w->tokenizer);
    free(w->buffer);
    free(w);
}
