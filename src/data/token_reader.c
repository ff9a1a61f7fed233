/* token_reader.c — reading token ranges of a TokenSet's files (data.h): chunked hyperslab reads
 * through a small cache of open handles, each read checked against the file's stamp (a file
 * changed during a run stops it), and the scan of every token of a set (`ctrain data info`, a
 * fresh run's check). Every HDF5 call runs under ct_hdf5_lock() (h5util.h). */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

/* Open files a TokenReader keeps: the loader walks files in order, so a few suffice. */
#define READER_CACHE_SLOTS 4
/* Tokens per read when scanning every token of a set. */
#define SCAN_BLOCK_TOKENS ((int64_t)1 << 20)

typedef struct {
    int file_index; /* -1: empty slot */
    hid_t file, dset, space;
    uint64_t last_used;
} ReaderSlot;

struct TokenReader {
    int num_files;
    char **paths;        /* copies, so the reader does not depend on the set's lifetime */
    int64_t *num_tokens;
    int *token_bytes;
    DataFileStamp *stamps; /* each file as the set opened it */
    ReaderSlot slots[READER_CACHE_SLOTS];
    uint64_t clock;
};

static void slot_close(ReaderSlot *slot) {
    if (slot->file_index < 0) return;
    H5Sclose(slot->space);
    H5Dclose(slot->dset);
    H5Fclose(slot->file);
    slot->file_index = -1;
}

/* The cache slot holding file_index, opening it in the least recently used slot on a miss.
 * Lock held. */
static ReaderSlot *reader_slot(TokenReader *r, int file_index) {
    ReaderSlot *victim = &r->slots[0];
    for (int i = 0; i < READER_CACHE_SLOTS; i++) {
        ReaderSlot *s = &r->slots[i];
        if (s->file_index == file_index) {
            s->last_used = ++r->clock;
            return s;
        }
        if (s->file_index < 0 || (victim->file_index >= 0 && s->last_used < victim->last_used)) victim = s;
    }
    slot_close(victim);
    const char *path = r->paths[file_index];
    hid_t file = data_open_file(path);
    if (file < 0) return NULL;
    hid_t dset = data_open_tokens(file, path);
    if (dset < 0) {
        H5Fclose(file);
        return NULL;
    }
    hid_t space = H5Dget_space(dset);
    hsize_t length = 0;
    if (H5Sget_simple_extent_ndims(space) == 1) H5Sget_simple_extent_dims(space, &length, NULL);
    if ((int64_t)length < r->num_tokens[file_index]) {
        ct_fail("'%s': /tokens changed since the data set was opened (now %llu tokens, was %lld)", path,
                (unsigned long long)length, (long long)r->num_tokens[file_index]);
        H5Sclose(space);
        H5Dclose(dset);
        H5Fclose(file);
        return NULL;
    }
    victim->file_index = file_index;
    victim->file = file;
    victim->dset = dset;
    victim->space = space;
    victim->last_used = ++r->clock;
    return victim;
}

int token_reader_open(TokenReader **reader, const TokenSet *set) {
    TokenReader *r = ct_calloc(1, sizeof *r, "token reader");
    r->num_files = set->num_files;
    r->paths = ct_calloc((size_t)set->num_files, sizeof(char *), "token reader paths");
    r->num_tokens = ct_calloc((size_t)set->num_files, sizeof(int64_t), "token reader sizes");
    r->token_bytes = ct_calloc((size_t)set->num_files, sizeof(int), "token reader widths");
    for (int i = 0; i < set->num_files; i++) {
        r->paths[i] = ct_strdup(set->files[i].path);
        r->num_tokens[i] = set->files[i].num_tokens;
        r->token_bytes[i] = set->files[i].token_bytes;
    }
    r->stamps = ct_calloc((size_t)set->num_files, sizeof *r->stamps, "token reader file stamps");
    for (int i = 0; i < set->num_files; i++) r->stamps[i] = set->files[i].stamp;
    for (int i = 0; i < READER_CACHE_SLOTS; i++) r->slots[i].file_index = -1;
    *reader = r;
    return 0;
}

/* uint16 values packed at the start of out become uint32 in place; walking backwards never
 * overwrites a value before it is read. */
static void widen_uint16_in_place(uint32_t *out, int64_t n) {
    const unsigned char *packed = (const unsigned char *)out;
    for (int64_t i = n - 1; i >= 0; i--) {
        uint16_t v;
        memcpy(&v, packed + 2 * i, sizeof v);
        out[i] = v;
    }
}

/* The file at path is still the one whose stamp the set took: 0, else -1 saying what changed.
 * One stat per read: far below a percent of a step. */
static int check_unchanged(const TokenReader *r, int file_index, int64_t pos, int64_t n) {
    const char *path = r->paths[file_index];
    const DataFileStamp was = r->stamps[file_index];
    struct stat st;
    char what[256];
    if (stat(path, &st) != 0) {
        snprintf(what, sizeof what, "it is gone: %s", strerror(errno));
    } else {
        const DataFileStamp now = data_stamp_of(&st);
        if (now.dev != was.dev || now.ino != was.ino)
            snprintf(what, sizeof what, "it was replaced by another file");
        else if (now.size != was.size)
            snprintf(what, sizeof what, "its size went from %lld to %lld bytes", (long long)was.size,
                     (long long)now.size);
        else if (now.mtime_ns != was.mtime_ns)
            snprintf(what, sizeof what, "it was written to (modification time changed)");
        else
            return 0;
    }
    return ct_fail("data file '%s' changed while ctrain was reading it (%s), found when reading /tokens[%lld:%lld]; "
                   "a run reads its files as they were when it started: restore the file, or start from the "
                   "last checkpoint with the new data (resume_data)",
                   path, what, (long long)pos, (long long)(pos + n));
}

int token_reader_read(TokenReader *r, int file_index, int64_t pos, int64_t n, uint32_t *out) {
    if (file_index < 0 || file_index >= r->num_files)
        return ct_fail("token read from file index %d, but the data set has %d files", file_index, r->num_files);
    const char *path = r->paths[file_index];
    int64_t length = r->num_tokens[file_index];
    if (pos < 0 || n < 0 || pos > length || n > length - pos)
        return ct_fail("'%s': cannot read tokens [%lld, %lld): /tokens holds %lld tokens", path, (long long)pos,
                       (long long)(pos + n), (long long)length);
    if (n == 0) return 0;
    int rc = 0;
    ct_hdf5_lock();
    ReaderSlot *slot = reader_slot(r, file_index);
    if (!slot) {
        rc = -1;
    } else {
        hsize_t start = (hsize_t)pos, count = (hsize_t)n;
        hid_t mem_space = H5Screate_simple(1, &count, NULL);
        /* Reading uint16 in the file's own width and widening ourselves avoids HDF5's much
         * slower strip-mined type conversion. */
        hid_t mem_type = r->token_bytes[file_index] == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
        if (H5Sselect_hyperslab(slot->space, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
            H5Dread(slot->dset, mem_type, mem_space, slot->space, H5P_DEFAULT, out) < 0) {
            rc = ct_h5_fail("'%s': cannot read /tokens[%lld:%lld]", path, (long long)pos, (long long)(pos + n));
            slot_close(slot); /* handles may be unusable; reopen on the next read */
        }
        H5Sclose(mem_space);
    }
    ct_hdf5_unlock();
    /* after the read: a change before or during it is seen, and the tokens are not used */
    if (rc == 0) rc = check_unchanged(r, file_index, pos, n);
    if (rc == 0 && r->token_bytes[file_index] == 2) widen_uint16_in_place(out, n);
    return rc;
}

void token_reader_close(TokenReader *r) {
    if (!r) return;
    ct_hdf5_lock();
    for (int i = 0; i < READER_CACHE_SLOTS; i++) slot_close(&r->slots[i]);
    ct_hdf5_unlock();
    for (int i = 0; i < r->num_files; i++) free(r->paths[i]);
    free(r->paths);
    free(r->num_tokens);
    free(r->token_bytes);
    free(r->stamps);
    free(r);
}

int data_scan_tokens(const TokenSet *set, uint32_t *max_token, DataProgressFn progress, void *ctx) {
    TokenReader *reader;
    if (token_reader_open(&reader, set) != 0) return -1;
    uint32_t *block = ct_malloc((size_t)SCAN_BLOCK_TOKENS * sizeof(uint32_t), "token scan buffer");
    uint32_t max_seen = 0;
    int64_t done = 0;
    int rc = 0;
    for (int f = 0; f < set->num_files && rc == 0; f++) {
        const TokenFileInfo *info = &set->files[f];
        uint32_t crc = 0;
        for (int64_t pos = 0; pos < info->num_tokens && rc == 0; pos += SCAN_BLOCK_TOKENS) {
            int64_t n = info->num_tokens - pos < SCAN_BLOCK_TOKENS ? info->num_tokens - pos : SCAN_BLOCK_TOKENS;
            if ((rc = token_reader_read(reader, f, pos, n, block)) != 0) break;
            for (int64_t i = 0; i < n; i++) {
                if (block[i] > max_seen) max_seen = block[i];
                if ((int64_t)block[i] >= set->vocab_size) {
                    rc = ct_fail("'%s': token %lld of /tokens is %u, which is >= vocab_size %lld", info->path,
                                 (long long)(pos + i), block[i], (long long)set->vocab_size);
                    break;
                }
            }
            if (info->tokens_crc32 >= 0) crc = data_crc32_tokens(crc, block, n, info->token_bytes);
            done += n;
            if (progress) progress(ctx, done, set->total_tokens);
        }
        if (rc == 0 && info->tokens_crc32 >= 0 && crc != (uint32_t)info->tokens_crc32)
            rc = ct_fail("'%s': the tokens do not match the file's tokens_crc32 attribute (it says 0x%08x, the tokens "
                         "give 0x%08x): the file was changed or damaged after it was written",
                         info->path, (unsigned)info->tokens_crc32, (unsigned)crc);
    }
    free(block);
    token_reader_close(reader);
    if (rc == 0 && max_token) *max_token = max_seen;
    return rc;
}

int data_check_tokens(const TokenSet *set) { return data_scan_tokens(set, NULL, NULL, NULL); }
