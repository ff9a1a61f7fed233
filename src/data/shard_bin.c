/* shard_bin.c — reading llm.c / parameter-golf .bin token shards (format in shard_bin.h) and
 * converting one into an HDF5 data file, streamed, so that a shard of any size needs a bounded
 * amount of memory. Used by `ctrain data import-bin`. */
#include "shard_bin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fault.h"
#include "stop.h"

/* Tokens converted per step: bounds memory whatever the shard size. */
#define COPY_BLOCK ((int64_t)1 << 20)

static uint32_t read_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Open a shard and check its header against its size; leaves f positioned at the first
 * token. Errors name the shard and what is wrong. */
int shard_bin_open(const char *path, FILE **file, int64_t *num_tokens) {
    FILE *f = fopen(path, "rb");
    if (!f) return ct_fail("cannot open shard '%s': %s", path, strerror(errno));
    struct stat st;
    unsigned char header[CT_SHARD_HEADER_BYTES];
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return ct_fail("shard '%s' is not a regular file", path);
    }
    if (st.st_size < CT_SHARD_HEADER_BYTES || fread(header, 1, sizeof header, f) != sizeof header) {
        fclose(f);
        return ct_fail("shard '%s' has %lld bytes, too few for the %d-byte header", path, (long long)st.st_size,
                       CT_SHARD_HEADER_BYTES);
    }
    int32_t magic = (int32_t)read_le32(header), version = (int32_t)read_le32(header + 4);
    int32_t count = (int32_t)read_le32(header + 8);
    int rc = 0;
    if (magic != CT_SHARD_MAGIC)
        rc = ct_fail("shard '%s' has magic number %d, expected %d (not an llm.c/parameter-golf token shard)", path,
                     magic, CT_SHARD_MAGIC);
    else if (version != CT_SHARD_VERSION)
        rc = ct_fail("shard '%s' has version %d, expected %d", path, version, CT_SHARD_VERSION);
    else if (count < 0)
        rc = ct_fail("shard '%s' header gives a negative token count %d", path, count);
    else if (st.st_size != CT_SHARD_HEADER_BYTES + 2 * (int64_t)count)
        rc = ct_fail("shard '%s' size mismatch: its header says %d tokens, so %lld bytes were expected, but the "
                     "file has %lld bytes", path, count, (long long)(CT_SHARD_HEADER_BYTES + 2 * (int64_t)count),
                     (long long)st.st_size);
    else if (count == 0)
        rc = ct_fail("shard '%s' holds no tokens", path);
    if (rc != 0) {
        fclose(f);
        return -1;
    }
    *file = f;
    *num_tokens = count;
    return 0;
}

/* Stream one validated shard into out_path. */
int shard_bin_convert(const char *shard, FILE *f, int64_t num_tokens, const char *out_path,
                      const ShardImportSettings *settings, Progress *progress, int64_t *progress_done) {
    TokenWriter *writer;
    if (token_writer_create(&writer, out_path, 2, settings->vocab_size, settings->bos_id, settings->tokenizer) != 0)
        return -1;
    if ((settings->base_bytes && token_writer_set_luts(writer, settings->base_bytes, settings->has_leading_space,
                                                       settings->is_boundary_token) != 0) ||
        (settings->pieces && token_writer_set_pieces(writer, settings->pieces) != 0)) {
        token_writer_abort(writer);
        return -1;
    }
    unsigned char *raw = ct_malloc((size_t)COPY_BLOCK * 2, "shard read buffer");
    uint16_t *tokens = ct_malloc((size_t)COPY_BLOCK * sizeof(uint16_t), "shard token buffer");
    int rc = 0;
    for (int64_t pos = 0; pos < num_tokens && rc == 0; pos += COPY_BLOCK) {
        int64_t n = num_tokens - pos < COPY_BLOCK ? num_tokens - pos : COPY_BLOCK;
        if (fread(raw, 2, (size_t)n, f) != (size_t)n) {
            rc = ct_fail("shard '%s': read failed at token %lld: %s", shard, (long long)pos,
                         ferror(f) ? strerror(errno) : "unexpected end of file");
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            tokens[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
            if (tokens[i] >= settings->vocab_size) {
                rc = ct_fail("shard '%s': token %lld is %u, which is >= vocab_size %lld (set %s)", shard,
                             (long long)(pos + i), tokens[i], (long long)settings->vocab_size,
                             settings->vocab_name ? settings->vocab_name : "--vocab-size");
                break;
            }
        }
        if (rc == 0) rc = token_writer_append(writer, tokens, n);
        *progress_done += n;
        progress_update(progress, *progress_done);
        fault_point_import(*progress_done - n, *progress_done); /* CTRAIN_FAULT=TERM@import:N */
        /* a stop asked for (where handlers are installed: DATA_PATH's import in `ctrain train`)
         * ends the import here: the half-made file is removed below */
        if (rc == 0 && stop_requested())
            rc = ct_fail("shard '%s': import stopped by signal %d after %lld of its %lld tokens", shard,
                         stop_requested(), (long long)(pos + n), (long long)num_tokens);
    }
    free(raw);
    free(tokens);
    if (rc != 0) {
        token_writer_abort(writer);
        return -1;
    }
    return token_writer_close(writer);
}
