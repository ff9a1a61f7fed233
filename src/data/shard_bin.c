/* shard_bin.c — reading and writing llm.c / parameter-golf .bin token shards (format in
 * shard_bin.h), and converting one (with its CaseOps byte sidecar, if it has one) into an HDF5 data file, streamed,
 * so that a shard of any size needs a bounded amount of memory. Used by `ctrain data import-bin`. */
#include "shard_bin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The path with the "bytes_" after the last "_bytes_" of its file name taken out, or NULL when
 * its file name has no "_bytes_" (caller frees). */
static char *token_shard_of_sidecar(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *mark = NULL;
    for (const char *p = strstr(base, "_bytes_"); p; p = strstr(p + 1, "_bytes_")) mark = p;
    if (!mark) return NULL;
    const size_t keep = (size_t)(mark - path) + 1, n = strlen(path); /* through the '_' */
    char *out = ct_malloc(n - 6 + 1, "shard path");
    memcpy(out, path, keep);
    memcpy(out + keep, mark + 7, n - (size_t)(mark + 7 - path) + 1);
    return out;
}

/* Index of path in paths, or -1. */
static int index_of(char *const *paths, int n, const char *path) {
    for (int i = 0; i < n; i++)
        if (strcmp(paths[i], path) == 0) return i;
    return -1;
}

int shard_bin_pair_sidecars(char *const *paths, int n, char ***token_shards, char ***sidecars, int *num_token_shards) {
    int *partner_of = ct_calloc((size_t)(n > 0 ? n : 1), sizeof(int), "sidecar pairs"); /* -1: a token shard */
    int rc = 0, count = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char *partner = token_shard_of_sidecar(paths[i]);
        partner_of[i] = partner ? index_of(paths, n, partner) : -1;
        const char *base = strrchr(paths[i], '/');
        /* the record's val sidecars without their shard: imported alone they would pass for tokens */
        if (partner && partner_of[i] < 0 && strstr(base ? base + 1 : paths[i], "_val_bytes_"))
            rc = ct_fail("'%s' is a CaseOps byte sidecar (its name has _val_bytes_), but its token shard '%s' is not "
                         "among the shards given: give both (the counts are stored in the token shard's file)",
                         paths[i], partner);
        free(partner);
    }
    char **tokens = ct_calloc((size_t)(n > 0 ? n : 1), sizeof(char *), "token shards");
    char **pairs = ct_calloc((size_t)(n > 0 ? n : 1), sizeof(char *), "byte sidecars");
    for (int i = 0; i < n && rc == 0; i++)
        if (partner_of[i] < 0) tokens[count++] = paths[i];
    for (int i = 0; i < n && rc == 0; i++) {
        if (partner_of[i] < 0) continue;
        const int t = index_of(tokens, count, paths[partner_of[i]]);
        if (t < 0)
            rc = ct_fail("'%s' and '%s' are each other's byte sidecar by name; give one token shard and its sidecar",
                         paths[i], paths[partner_of[i]]);
        else if (pairs[t])
            rc = ct_fail("token shard '%s' has two byte sidecars: '%s' and '%s'", tokens[t], pairs[t], paths[i]);
        else
            pairs[t] = paths[i];
    }
    free(partner_of);
    if (rc != 0) {
        free(tokens);
        free(pairs);
        return -1;
    }
    *token_shards = tokens;
    *sidecars = pairs;
    *num_token_shards = count;
    return 0;
}

int shard_bin_open_sidecar(const char *sidecar, const char *shard, int64_t num_tokens, FILE **file) {
    int64_t count;
    if (shard_bin_open(sidecar, file, &count) != 0) return ct_fail_prefix("byte sidecar");
    if (count == num_tokens) return 0;
    fclose(*file);
    *file = NULL;
    return ct_fail("byte sidecar '%s' holds %lld counts but its token shard '%s' holds %lld tokens: a sidecar gives "
                   "one count per token", sidecar, (long long)count, shard, (long long)num_tokens);
}

/* Read n little-endian uint16 values of a shard opened at its data into out. */
static int read_values(const char *shard, FILE *f, int64_t pos, int64_t n, unsigned char *raw, uint16_t *out) {
    if (fread(raw, 2, (size_t)n, f) != (size_t)n)
        return ct_fail("shard '%s': read failed at token %lld: %s", shard, (long long)pos,
                       ferror(f) ? strerror(errno) : "unexpected end of file");
    for (int64_t i = 0; i < n; i++) out[i] = (uint16_t)(raw[2 * i] | raw[2 * i + 1] << 8);
    return 0;
}

/* Stream one validated shard into out_path. */
int shard_bin_convert(const char *shard, FILE *f, int64_t num_tokens, const char *sidecar, const char *out_path,
                      const ShardImportSettings *settings, Progress *progress, int64_t *progress_done) {
    FILE *sf = NULL;
    if (sidecar && shard_bin_open_sidecar(sidecar, shard, num_tokens, &sf) != 0) return -1;
    TokenWriter *writer;
    if (token_writer_create(&writer, out_path, 2, settings->vocab_size, settings->bos_id, settings->tokenizer) != 0) {
        if (sf) fclose(sf);
        return -1;
    }
    if ((settings->base_bytes && token_writer_set_luts(writer, settings->base_bytes, settings->has_leading_space,
                                                       settings->is_boundary_token) != 0) ||
        (settings->pieces && token_writer_set_pieces(writer, settings->pieces) != 0)) {
        token_writer_abort(writer);
        if (sf) fclose(sf);
        return -1;
    }
    unsigned char *raw = ct_malloc((size_t)COPY_BLOCK * 2, "shard read buffer");
    uint16_t *tokens = ct_malloc((size_t)COPY_BLOCK * sizeof(uint16_t), "shard token buffer");
    int rc = 0;
    for (int64_t pos = 0; pos < num_tokens && rc == 0; pos += COPY_BLOCK) {
        int64_t n = num_tokens - pos < COPY_BLOCK ? num_tokens - pos : COPY_BLOCK;
        if (sf && (read_values(sidecar, sf, pos, n, raw, tokens) != 0 ||
                   token_writer_append_byte_counts(writer, tokens, n) != 0)) {
            rc = -1;
            break;
        }
        if (read_values(shard, f, pos, n, raw, tokens) != 0) {
            rc = -1;
            break;
        }
        for (int64_t i = 0; i < n; i++) {
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
    if (sf) fclose(sf);
    if (rc != 0) {
        token_writer_abort(writer);
        return -1;
    }
    return token_writer_close(writer);
}

/* ---- writing ---- */

struct ShardBinWriter {
    char *path, *tmp_path;
    FILE *f;
    int64_t count;
    unsigned char *raw; /* COPY_BLOCK values as little-endian bytes */
};

static void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8), p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* The header for count values. */
static int write_header(ShardBinWriter *w) {
    unsigned char header[CT_SHARD_HEADER_BYTES] = {0};
    put_le32(header, CT_SHARD_MAGIC);
    put_le32(header + 4, CT_SHARD_VERSION);
    put_le32(header + 8, (uint32_t)w->count);
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(header, 1, sizeof header, w->f) != sizeof header)
        return ct_fail("cannot write the header of '%s': %s", w->tmp_path, strerror(errno));
    return 0;
}

int shard_bin_writer_create(ShardBinWriter **writer, const char *path) {
    *writer = NULL;
    ShardBinWriter *w = ct_calloc(1, sizeof *w, "shard writer");
    w->path = ct_strdup(path);
    w->tmp_path = ct_malloc(strlen(path) + 5, "temporary path");
    sprintf(w->tmp_path, "%s.tmp", path);
    if (ct_mkdir_parent(path) != 0) {
        free(w->tmp_path);
        w->tmp_path = NULL; /* nothing of ours to remove */
        shard_bin_writer_abort(w);
        return -1;
    }
    if (!(w->f = fopen(w->tmp_path, "wb"))) {
        ct_fail("cannot create '%s': %s", w->tmp_path, strerror(errno));
        free(w->tmp_path);
        w->tmp_path = NULL;
        shard_bin_writer_abort(w);
        return -1;
    }
    w->raw = ct_malloc((size_t)COPY_BLOCK * 2, "shard write buffer");
    if (write_header(w) != 0) { /* the count is filled in at close */
        shard_bin_writer_abort(w);
        return -1;
    }
    *writer = w;
    return 0;
}

int shard_bin_writer_append(ShardBinWriter *w, const uint16_t *values, int64_t n) {
    if (w->count + n > INT32_MAX)
        return ct_fail("'%s': %lld values do not fit a shard, whose header counts at most %d", w->path,
                       (long long)(w->count + n), INT32_MAX);
    for (int64_t done = 0; done < n; done += COPY_BLOCK) {
        const int64_t k = n - done < COPY_BLOCK ? n - done : COPY_BLOCK;
        for (int64_t i = 0; i < k; i++) {
            w->raw[2 * i] = (unsigned char)values[done + i];
            w->raw[2 * i + 1] = (unsigned char)(values[done + i] >> 8);
        }
        if (fwrite(w->raw, 2, (size_t)k, w->f) != (size_t)k)
            return ct_fail("cannot write '%s': %s", w->tmp_path, strerror(errno));
    }
    w->count += n;
    return 0;
}

int shard_bin_writer_close(ShardBinWriter *w) {
    int rc = 0;
    if (w->count == 0) rc = ct_fail("'%s': no tokens were written; an empty shard is not valid", w->path);
    if (rc == 0) rc = write_header(w);
    if (rc == 0 && fflush(w->f) != 0) rc = ct_fail("cannot write '%s': %s", w->tmp_path, strerror(errno));
    if (rc == 0) {
        const int closed = fclose(w->f);
        w->f = NULL;
        if (closed != 0) rc = ct_fail("cannot write '%s': %s", w->tmp_path, strerror(errno));
    }
    if (rc == 0 && rename(w->tmp_path, w->path) != 0)
        rc = ct_fail("cannot rename '%s' to '%s': %s", w->tmp_path, w->path, strerror(errno));
    if (rc == 0) {
        free(w->tmp_path);
        w->tmp_path = NULL; /* nothing left to remove */
    }
    shard_bin_writer_abort(w);
    return rc;
}

void shard_bin_writer_abort(ShardBinWriter *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->tmp_path) unlink(w->tmp_path);
    free(w->path);
    free(w->tmp_path);
    free(w->raw);
    free(w);
}
