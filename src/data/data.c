/* data.c — HDF5 token data files (format in docs/data-format.md): metadata and validation,
 * glob expansion into a split, chunked hyperslab reads through a small cache of open handles,
 * the tokenizer byte-count tables, and the atomic (write to .tmp, rename) writer.
 *
 * Every HDF5 call here runs under ct_hdf5_lock() (h5util.h). HDF5 failures are turned into our own
 * messages naming the file and object, with the most specific line of HDF5's error stack
 * appended, because HDF5's own printed stack is unreadable for users. */
#include "data.h"

#include <errno.h>
#include <glob.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data_pieces.h"
#include "h5util.h"

/* Open files a TokenReader keeps: the loader walks files in order, so a few suffice. */
#define READER_CACHE_SLOTS 4
/* Raw-data chunk cache per open dataset: holds two 1M-token uint32 chunks, so that a
 * compressed (e.g. gzip from h5py) chunk is decompressed once, not once per small read. */
#define READER_CHUNK_CACHE_BYTES ((size_t)8 << 20)
/* Tokens per read when scanning every token of a set. */
#define SCAN_BLOCK_TOKENS ((int64_t)1 << 20)
/* Magic number of llm.c / parameter-golf .bin shards, used only for a hint. */
#define BIN_SHARD_MAGIC 20240520

static const char *const LUT_NAMES[3] = {"base_bytes", "has_leading_space", "is_boundary_token"};

/* ---- opening files ---- */

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* True if the file starts with the .bin shard magic number (for a hint on what to run). */
static int looks_like_bin_shard(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[4];
    int ok = fread(b, 1, 4, f) == 4;
    fclose(f);
    return ok && (b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24) == BIN_SHARD_MAGIC;
}

/* Open a data file read-only with errors a user can act on. Lock held. */
static hid_t open_data_file(const char *path) {
    static const CtH5OpenTerms terms = {"data file", "give a glob such as", "*.h5", "see docs/data-format.md"};
    hid_t fapl = ct_h5_file_access_plist();
    CtH5OpenStatus status;
    hid_t file = ct_h5_open_read(path, fapl, &terms, &status);
    H5Pclose(fapl);
    if (status == CT_H5_NOT_HDF5 && looks_like_bin_shard(path))
        ct_fail("data file '%s' is an llm.c/parameter-golf .bin shard, not HDF5; convert it with "
                "`ctrain data import-bin`", path);
    return file;
}

/* Open /tokens with a chunk cache sized for sequential reads. Lock held. */
static hid_t open_tokens_dataset(hid_t file, const char *path) {
    htri_t exists = H5Lexists(file, "tokens", H5P_DEFAULT);
    if (exists <= 0) {
        if (exists < 0) ct_h5_fail("'%s': cannot look up /tokens", path);
        else ct_fail("'%s' has no /tokens dataset (expected a 1-D uint16 or uint32 dataset, see "
                     "docs/data-format.md)", path);
        return H5I_INVALID_HID;
    }
    /* A link to another file, or data kept in raw files outside this one, would make the
     * tokens depend on files a run does not know about: said plainly, not as damage. */
    H5L_info_t link;
    if (H5Lget_info(file, "tokens", &link, H5P_DEFAULT) >= 0 && link.type != H5L_TYPE_HARD) {
        ct_fail("'%s': /tokens is %s link, which ctrain does not support: make a file that holds the tokens "
                "itself (h5py: f.create_dataset(\"tokens\", data=...))",
                path, link.type == H5L_TYPE_EXTERNAL ? "an external (other-file)" : "a soft");
        return H5I_INVALID_HID;
    }
    hid_t obj = H5Oopen(file, "tokens", H5P_DEFAULT);
    if (obj < 0) {
        ct_h5_fail("'%s': cannot open /tokens", path);
        return H5I_INVALID_HID;
    }
    H5I_type_t kind = H5Iget_type(obj);
    H5Oclose(obj);
    if (kind != H5I_DATASET) {
        ct_fail("'%s': /tokens is a %s, expected a 1-D uint16 or uint32 dataset", path,
                kind == H5I_GROUP ? "group" : "named datatype");
        return H5I_INVALID_HID;
    }
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(dapl, 521, READER_CHUNK_CACHE_BYTES, 1.0);
    hid_t dset = H5Dopen2(file, "tokens", dapl);
    H5Pclose(dapl);
    if (dset < 0) {
        ct_h5_fail("'%s': cannot open /tokens", path);
        return H5I_INVALID_HID;
    }
    hid_t dcpl = H5Dget_create_plist(dset);
    int external = dcpl >= 0 ? H5Pget_external_count(dcpl) : 0;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (external != 0) {
        ct_fail("'%s': /tokens keeps its data in %d external raw file(s) outside this file, which ctrain does not "
                "support: make a file that holds the tokens itself",
                path, external);
        H5Dclose(dset);
        return H5I_INVALID_HID;
    }
    return dset;
}

/* ---- metadata ---- */

/* Attributes live on /tokens; the root group is accepted too, as h5py users often write
 * f.attrs[...]. Returns 1 with *attr open, 0 if absent, -1 on error. Lock held. */
static int open_attribute(hid_t dset, hid_t file, const char *path, const char *name, hid_t *attr) {
    int found = ct_h5_attr_find(dset, path, NULL, name, attr);
    return found == 0 ? ct_h5_attr_find(file, path, NULL, name, attr) : found;
}

/* Check one /tokenizer table: 1-D, vocab_size entries, a usable dtype. Lock held. */
static int check_lut_table(hid_t group, const char *path, int table, int64_t vocab_size) {
    const char *name = LUT_NAMES[table];
    hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /tokenizer/%s as a dataset", path, name);
    hid_t type = H5Dget_type(dset), space = H5Dget_space(dset);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(dset);
    int flags_table = table != 0;
    int type_ok = cls == H5T_INTEGER || (flags_table && cls == H5T_ENUM && size == 1);
    if (!type_ok)
        return ct_fail("'%s': /tokenizer/%s has dtype %s, expected %s", path, name, type_name,
                       flags_table ? "uint8 (or bool)" : "int16");
    if (rank != 1)
        return ct_fail("'%s': /tokenizer/%s has %d dimensions, expected a 1-D table of vocab_size = %lld entries",
                       path, name, rank, (long long)vocab_size);
    if ((int64_t)dims[0] != vocab_size)
        return ct_fail("'%s': /tokenizer/%s has %lld entries, expected vocab_size = %lld", path, name,
                       (long long)dims[0], (long long)vocab_size);
    return 0;
}

/* *present = 1 if all three tables exist (and are valid), 0 if none do; -1 if only some
 * exist or one is malformed. Lock held. */
static int check_luts(hid_t file, const char *path, int64_t vocab_size, int *present) {
    *present = 0;
    htri_t has_group = H5Lexists(file, "tokenizer", H5P_DEFAULT);
    if (has_group < 0) return ct_h5_fail("'%s': cannot look up /tokenizer", path);
    if (!has_group) return 0;
    hid_t group = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
    if (group < 0) return ct_h5_fail("'%s': /tokenizer is not a group", path);
    int found[3], count = 0, rc = 0;
    for (int t = 0; t < 3; t++) {
        htri_t e = H5Lexists(group, LUT_NAMES[t], H5P_DEFAULT);
        if (e < 0) {
            rc = ct_h5_fail("'%s': cannot look up /tokenizer/%s", path, LUT_NAMES[t]);
            goto done;
        }
        found[t] = e > 0;
        count += found[t];
    }
    if (count > 0 && count < 3) {
        int missing = !found[0] ? 0 : !found[1] ? 1 : 2;
        rc = ct_fail("'%s': /tokenizer has %d of the 3 tables but lacks /tokenizer/%s; expected base_bytes, "
                     "has_leading_space and is_boundary_token, or none of them",
                     path, count, LUT_NAMES[missing]);
        goto done;
    }
    for (int t = 0; t < count; t++)
        if ((rc = check_lut_table(group, path, t, vocab_size)) != 0) goto done;
    *present = count == 3;
done:
    H5Gclose(group);
    return rc;
}

/* Read metadata of an open data file into info (path already set). Lock held. */
static int read_file_info(hid_t file, TokenFileInfo *info) {
    const char *path = info->path;
    hid_t dset = open_tokens_dataset(file, path);
    if (dset < 0) return -1;
    int rc = -1;
    hid_t type = H5Dget_type(dset), space = H5Dget_space(dset), attr = H5I_INVALID_HID;
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    size_t size = H5Tget_size(type);
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_sign(type) != H5T_SGN_NONE || (size != 2 && size != 4)) {
        ct_fail("'%s': /tokens has dtype %s, expected uint16 (vocab_size <= 65536) or uint32; in numpy "
                "convert with tokens.astype(np.uint16)", path, type_name);
        goto done;
    }
    info->token_bytes = (int)size;
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank != 1) {
        hsize_t dims[H5S_MAX_RANK] = {0};
        char shape[256] = "";
        if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
        for (int d = 0; d < rank; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%llu", d ? " x " : "",
                     (unsigned long long)dims[d]);
        ct_fail("'%s': /tokens has %d dimensions%s%s%s, expected a 1-D dataset; in numpy flatten it with "
                "tokens.reshape(-1)", path, rank, rank > 0 ? " [" : "", shape, rank > 0 ? "]" : "");
        goto done;
    }
    hsize_t length = 0;
    H5Sget_simple_extent_dims(space, &length, NULL);
    info->num_tokens = (int64_t)length;
    if (info->num_tokens == 0) {
        ct_fail("'%s': /tokens is empty (0 tokens)", path);
        goto done;
    }

    int found = open_attribute(dset, file, path, "vocab_size", &attr);
    if (found < 0) goto done;
    if (!found) {
        ct_fail("'%s': /tokens has no vocab_size attribute (expected int64, e.g. in h5py "
                "f['tokens'].attrs['vocab_size'] = 1024)", path);
        goto done;
    }
    if (ct_h5_attr_read_i64(attr, path, NULL, "vocab_size", &info->vocab_size) != 0) goto done;
    H5Aclose(attr);
    attr = H5I_INVALID_HID;
    if (info->vocab_size < 1 || info->vocab_size > ((int64_t)1 << 32)) {
        ct_fail("'%s': vocab_size = %lld, expected 1 .. 4294967296", path, (long long)info->vocab_size);
        goto done;
    }

    info->bos_id = -1; /* optional: no BOS token */
    if ((found = open_attribute(dset, file, path, "bos_id", &attr)) < 0) goto done;
    if (found) {
        if (ct_h5_attr_read_i64(attr, path, NULL, "bos_id", &info->bos_id) != 0) goto done;
        H5Aclose(attr);
        attr = H5I_INVALID_HID;
        if (info->bos_id < -1 || info->bos_id >= info->vocab_size) {
            ct_fail("'%s': bos_id = %lld, expected -1 (none) or a token id below vocab_size = %lld", path,
                    (long long)info->bos_id, (long long)info->vocab_size);
            goto done;
        }
    }

    if ((found = open_attribute(dset, file, path, "tokenizer", &attr)) < 0) goto done;
    if (found) {
        if (ct_h5_attr_read_str(attr, path, NULL, "tokenizer", &info->tokenizer) != 0) goto done;
        H5Aclose(attr);
        attr = H5I_INVALID_HID;
    } else {
        info->tokenizer = ct_strdup(""); /* optional free text */
    }

    info->tokens_crc32 = -1; /* optional: written by ctrain's converters */
    if ((found = open_attribute(dset, file, path, "tokens_crc32", &attr)) < 0) goto done;
    if (found) {
        if (ct_h5_attr_read_i64(attr, path, NULL, "tokens_crc32", &info->tokens_crc32) != 0) goto done;
        H5Aclose(attr);
        attr = H5I_INVALID_HID;
        if (info->tokens_crc32 < 0 || info->tokens_crc32 > (int64_t)UINT32_MAX) {
            ct_fail("'%s': tokens_crc32 = %lld, expected a CRC-32 (0 .. 4294967295)", path,
                    (long long)info->tokens_crc32);
            goto done;
        }
    }

    rc = check_luts(file, path, info->vocab_size, &info->has_luts);
done:
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(dset);
    return rc;
}

static DataFileStamp stamp_of(const struct stat *st) {
    return (DataFileStamp){(int64_t)st->st_dev, (int64_t)st->st_ino, (int64_t)st->st_size,
                           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
}

int data_file_info(const char *path, TokenFileInfo *info) {
    memset(info, 0, sizeof *info);
    info->path = ct_strdup(path);
    info->tokens_crc32 = info->sample_crc32 = -1;
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = open_data_file(path);
    if (file >= 0) {
        rc = read_file_info(file, info);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    struct stat st;
    if (rc == 0 && stat(path, &st) != 0) rc = ct_fail("'%s': cannot stat: %s", path, strerror(errno));
    if (rc == 0) info->stamp = stamp_of(&st);
    if (rc != 0) data_free_file_info(info);
    return rc;
}

void data_free_file_info(TokenFileInfo *info) {
    free(info->path);
    free(info->tokenizer);
    memset(info, 0, sizeof *info);
}

/* ---- sets ---- */

static int compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A hint for an empty glob: the part of the pattern before its first wildcard, if that
 * directory does not exist. */
static void missing_directory_hint(const char *pattern, char *hint, size_t cap) {
    hint[0] = '\0';
    const char *wild = strpbrk(pattern, "*?[");
    const char *slash = NULL;
    for (const char *p = pattern; p < wild; p++)
        if (*p == '/') slash = p;
    if (!slash || slash == pattern) return;
    char dir[4096];
    size_t n = (size_t)(slash - pattern);
    if (n >= sizeof dir) return;
    memcpy(dir, pattern, n);
    dir[n] = '\0';
    struct stat st;
    if (stat(dir, &st) != 0) snprintf(hint, cap, " (directory '%s' does not exist)", dir);
}

/* Expand pattern into paths in byte-wise sorted order (as Python's sorted(), and independent
 * of the locale, so every rank of every job sees the same order). A pattern without
 * wildcards is taken as one path, whose absence data_file_info reports precisely. */
static int expand_pattern(const char *pattern, char ***paths, int *count) {
    if (!has_glob_chars(pattern)) {
        *paths = ct_malloc(sizeof(char *), "file list");
        (*paths)[0] = ct_strdup(pattern);
        *count = 1;
        return 0;
    }
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        char hint[4200];
        missing_directory_hint(pattern, hint, sizeof hint);
        if (rc == 0) globfree(&g);
        return ct_fail("no files match '%s'%s", pattern, hint);
    }
    if (rc != 0) return ct_fail("cannot expand '%s': %s", pattern, rc == GLOB_NOSPACE ? "out of memory" : "read error");
    *count = (int)g.gl_pathc;
    *paths = ct_malloc(g.gl_pathc * sizeof(char *), "file list");
    for (size_t i = 0; i < g.gl_pathc; i++) (*paths)[i] = ct_strdup(g.gl_pathv[i]);
    globfree(&g);
    qsort(*paths, (size_t)*count, sizeof(char *), compare_paths);
    return 0;
}

int data_open_set(const char *pattern, TokenSet *set) {
    memset(set, 0, sizeof *set);
    char **paths = NULL;
    int count = 0;
    if (expand_pattern(pattern, &paths, &count) != 0) return -1;
    set->pattern = ct_strdup(pattern);
    set->files = ct_calloc((size_t)count, sizeof(TokenFileInfo), "token file list");
    set->has_luts = 1;
    int rc = 0;
    for (int i = 0; i < count && rc == 0; i++) {
        TokenFileInfo *f = &set->files[i];
        if ((rc = data_file_info(paths[i], f)) != 0) break;
        set->num_files = i + 1;
        if (i > 0 && f->vocab_size != set->files[0].vocab_size)
            rc = ct_fail("files of '%s' disagree on vocab_size: '%s' has %lld but '%s' has %lld", pattern,
                         set->files[0].path, (long long)set->files[0].vocab_size, f->path,
                         (long long)f->vocab_size);
        set->total_tokens += f->num_tokens;
        set->has_luts &= f->has_luts;
    }
    for (int i = 0; i < count; i++) free(paths[i]);
    free(paths);
    if (rc != 0) {
        data_free_set(set);
        return -1;
    }
    set->vocab_size = set->files[0].vocab_size;
    return 0;
}

void data_free_set(TokenSet *set) {
    for (int i = 0; i < set->num_files; i++) data_free_file_info(&set->files[i]);
    free(set->files);
    free(set->pattern);
    memset(set, 0, sizeof *set);
}

/* ---- storage check ---- */

/* Where /tokens' bytes lie must be inside the file: each chunk the index lists, or the one
 * contiguous block. The chunks are looked up by coordinate (a B-tree search each), which
 * parses every node of the index without reading any token. Lock held. */
static int check_tokens_storage(hid_t file, hid_t dset, const TokenFileInfo *info) {
    const char *path = info->path;
    hsize_t file_size = 0;
    if (H5Fget_filesize(file, &file_size) < 0) return ct_h5_fail("'%s': cannot get the file size", path);
    hid_t dcpl = H5Dget_create_plist(dset);
    if (dcpl < 0) return ct_h5_fail("'%s': cannot read the storage properties of /tokens", path);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    hsize_t chunk = 0;
    if (layout == H5D_CHUNKED && H5Pget_chunk(dcpl, 1, &chunk) != 1) chunk = 0;
    H5Pclose(dcpl);
    uint64_t need = (uint64_t)info->num_tokens * (uint64_t)info->token_bytes;
    if (layout == H5D_CONTIGUOUS) {
        haddr_t offset = H5Dget_offset(dset);
        if (offset == HADDR_UNDEF)
            return ct_fail("'%s': /tokens has no data stored (a dataset created but never written)", path);
        if (offset > file_size || need > file_size - offset)
            return ct_fail("'%s': /tokens is stored at bytes %llu .. %llu but the file has %llu bytes: the file is "
                           "truncated or damaged", path, (unsigned long long)offset,
                           (unsigned long long)(offset + need), (unsigned long long)file_size);
        return 0;
    }
    if (layout == H5D_COMPACT) return 0; /* inside the object header, already parsed */
    if (layout != H5D_CHUNKED || chunk == 0)
        return ct_fail("'%s': /tokens has a storage layout this ctrain cannot check (%d)", path, (int)layout);
    for (hsize_t start = 0; start < (hsize_t)info->num_tokens; start += chunk) {
        unsigned filter_mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(dset, &start, &filter_mask, &addr, &size) < 0)
            return ct_h5_fail("'%s': cannot look up the chunk of /tokens at token %llu in the chunk index", path,
                              (unsigned long long)start);
        if (addr == HADDR_UNDEF)
            return ct_fail("'%s': the chunk of /tokens at token %llu is not stored (it would read as zeros): the "
                           "file is incomplete", path, (unsigned long long)start);
        if (addr > file_size || size > file_size - addr)
            return ct_fail("'%s': the chunk of /tokens at token %llu lies at bytes %llu .. %llu but the file has %llu "
                           "bytes: the file is truncated or damaged", path, (unsigned long long)start,
                           (unsigned long long)addr, (unsigned long long)(addr + size),
                           (unsigned long long)file_size);
    }
    return 0;
}

int data_check_storage(const TokenSet *set) {
    int rc = 0;
    for (int i = 0; i < set->num_files && rc == 0; i++) {
        const TokenFileInfo *info = &set->files[i];
        ct_hdf5_lock();
        hid_t file = open_data_file(info->path);
        hid_t dset = file >= 0 ? open_tokens_dataset(file, info->path) : H5I_INVALID_HID;
        rc = dset < 0 ? -1 : check_tokens_storage(file, dset, info);
        if (dset >= 0) H5Dclose(dset);
        if (file >= 0) H5Fclose(file);
        ct_hdf5_unlock();
    }
    return rc;
}

/* ---- reading ---- */

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
    hid_t file = open_data_file(path);
    if (file < 0) return NULL;
    hid_t dset = open_tokens_dataset(file, path);
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
        const DataFileStamp now = stamp_of(&st);
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

/* ---- tokenizer tables ---- */

/* Read one validated table into out (int16 for base_bytes, uint8 0/1 for the flags). Lock held. */
static int read_lut_table(hid_t file, const char *path, int table, int64_t vocab_size, void *out) {
    char name[64];
    snprintf(name, sizeof name, "tokenizer/%s", LUT_NAMES[table]);
    hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /%s", path, name);
    hid_t file_type = H5Dget_type(dset);
    /* numpy bool arrays are stored as an 8-bit enum, which HDF5 will not convert to an
     * integer: read those with their own (native) type, whose values are 0 and 1. */
    hid_t mem_type = table == 0                          ? H5Tcopy(H5T_NATIVE_INT16)
                     : H5Tget_class(file_type) == H5T_ENUM ? H5Tget_native_type(file_type, H5T_DIR_ASCEND)
                                                           : H5Tcopy(H5T_NATIVE_UINT8);
    int rc = 0;
    if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        rc = ct_h5_fail("'%s': cannot read /%s", path, name);
    H5Tclose(mem_type);
    H5Tclose(file_type);
    H5Dclose(dset);
    if (rc != 0) return -1;
    for (int64_t i = 0; i < vocab_size; i++) {
        if (table == 0 && ((int16_t *)out)[i] < 0)
            return ct_fail("'%s': /%s[%lld] = %d, expected a byte count >= 0", path, name, (long long)i,
                           ((int16_t *)out)[i]);
        if (table != 0) ((uint8_t *)out)[i] = ((uint8_t *)out)[i] != 0;
    }
    return 0;
}

/* Read all three tables of one file; fails if they are absent. Lock held. */
static int read_luts_locked(hid_t file, const char *path, int64_t vocab_size, int16_t **base_bytes,
                            uint8_t **has_leading_space, uint8_t **is_boundary_token) {
    int present = 0;
    if (check_luts(file, path, vocab_size, &present) != 0) return -1;
    if (!present)
        return ct_fail("'%s' has no /tokenizer tables (base_bytes, has_leading_space, is_boundary_token); "
                       "they are needed for bits per byte", path);
    int16_t *bb = ct_malloc((size_t)vocab_size * sizeof(int16_t), "base_bytes table");
    uint8_t *ls = ct_malloc((size_t)vocab_size, "has_leading_space table");
    uint8_t *bt = ct_malloc((size_t)vocab_size, "is_boundary_token table");
    if (read_lut_table(file, path, 0, vocab_size, bb) != 0 || read_lut_table(file, path, 1, vocab_size, ls) != 0 ||
        read_lut_table(file, path, 2, vocab_size, bt) != 0) {
        free(bb);
        free(ls);
        free(bt);
        return -1;
    }
    *base_bytes = bb;
    *has_leading_space = ls;
    *is_boundary_token = bt;
    return 0;
}

int data_read_luts_file(const char *path, int64_t vocab_size, int16_t **base_bytes, uint8_t **has_leading_space,
                        uint8_t **is_boundary_token) {
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = open_data_file(path);
    if (file >= 0) {
        rc = read_luts_locked(file, path, vocab_size, base_bytes, has_leading_space, is_boundary_token);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    return rc;
}

int data_read_luts(const TokenSet *set, int16_t **base_bytes, uint8_t **has_leading_space,
                   uint8_t **is_boundary_token) {
    if (set->num_files < 1) return ct_fail("token set '%s' has no files", set->pattern ? set->pattern : "?");
    for (int i = 0; i < set->num_files; i++)
        if (!set->files[i].has_luts)
            return ct_fail("'%s' has no /tokenizer tables (base_bytes, has_leading_space, is_boundary_token); "
                           "they are needed for bits per byte", set->files[i].path);
    const char *first = set->files[0].path;
    int64_t vocab = set->vocab_size;
    if (data_read_luts_file(first, vocab, base_bytes, has_leading_space, is_boundary_token) != 0) return -1;
    /* Bits per byte is only meaningful if every file describes the same tokenizer. */
    for (int i = 1; i < set->num_files; i++) {
        int16_t *bb;
        uint8_t *ls, *bt;
        const char *path = set->files[i].path;
        if (data_read_luts_file(path, vocab, &bb, &ls, &bt) != 0) goto fail;
        int same = !memcmp(bb, *base_bytes, (size_t)vocab * sizeof(int16_t)) &&
                   !memcmp(ls, *has_leading_space, (size_t)vocab) && !memcmp(bt, *is_boundary_token, (size_t)vocab);
        free(bb);
        free(ls);
        free(bt);
        if (!same) {
            ct_fail("files of '%s' have different /tokenizer tables: '%s' and '%s'", set->pattern, first, path);
            goto fail;
        }
    }
    return 0;
fail:
    free(*base_bytes);
    free(*has_leading_space);
    free(*is_boundary_token);
    *base_bytes = NULL;
    *has_leading_space = *is_boundary_token = NULL;
    return -1;
}

/* ---- writing ---- */

struct TokenWriter {
    char *path, *tmp_path;
    int token_bytes;
    int64_t vocab_size, bos_id;
    char *tokenizer;
    hid_t file, dset; /* dset is created at the first flush, when its chunk size is known */
    void *buffer;     /* one chunk of pending tokens */
    int64_t buffered, written;
    uint32_t crc;     /* of the tokens written so far: the tokens_crc32 attribute */
};

/* Create the extendible /tokens dataset and its attributes. A file shorter than one chunk
 * gets a single chunk of exactly its length, so a tiny file does not occupy a whole 2 MiB
 * chunk on disk. Lock held. */
static int create_tokens_dataset(TokenWriter *w, int64_t chunk_tokens) {
    hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = (hsize_t)chunk_tokens;
    hid_t space = H5Screate_simple(1, &zero, &unlimited);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
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

/* Create "<path>.tmp", the file a finished write renames to path: *tmp_path (caller frees) and
 * the open *file, or -1 with neither (and no file left behind). Takes the lock itself. */
static int create_tmp_file(const char *path, char **tmp_path, hid_t *file) {
    *file = H5I_INVALID_HID;
    size_t n = strlen(path);
    char *tmp = ct_malloc(n + 5, "temporary path");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    if (ct_mkdir_parent(path) != 0) {
        free(tmp);
        *tmp_path = NULL;
        return -1;
    }
    /* fopen first for a plain "No such file or directory" instead of HDF5's wording. */
    FILE *probe = fopen(tmp, "wb");
    if (!probe) {
        ct_fail("cannot create '%s': %s", tmp, strerror(errno));
        free(tmp); /* not ours to remove */
        *tmp_path = NULL;
        return -1;
    }
    fclose(probe);
    ct_hdf5_lock();
    hid_t fapl = ct_h5_file_access_plist();
    *file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    int rc = *file < 0 ? ct_h5_fail("cannot create '%s'", tmp) : 0;
    H5Pclose(fapl);
    ct_hdf5_unlock();
    if (rc != 0) {
        *file = H5I_INVALID_HID;
        unlink(tmp);
        free(tmp);
        tmp = NULL;
    }
    *tmp_path = tmp;
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
    w->dset = H5I_INVALID_HID;
    w->buffer = ct_malloc((size_t)CT_DATA_CHUNK_TOKENS * (size_t)token_bytes, "token write buffer");
    if (create_tmp_file(path, &w->tmp_path, &w->file) != 0) {
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

/* Contiguous 1-D table under /tokenizer. Lock held. */
static int write_lut_table(hid_t group, const char *name, hid_t file_type, hid_t mem_type, int64_t n,
                           const void *data) {
    hsize_t dims = (hsize_t)n;
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t dset = H5Dcreate2(group, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = dset < 0 || H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ? -1 : 0;
    if (dset >= 0) H5Dclose(dset);
    H5Sclose(space);
    return rc;
}

/* The three tables as /tokenizer (created) of an open file. Lock held. */
static int write_luts_locked(hid_t file, const char *path, int64_t vocab_size, const int16_t *base_bytes,
                             const uint8_t *has_leading_space, const uint8_t *is_boundary_token) {
    for (int64_t i = 0; i < vocab_size; i++)
        if (base_bytes[i] < 0)
            return ct_fail("'%s': base_bytes[%lld] = %d, expected a byte count >= 0", path, (long long)i,
                           base_bytes[i]);
    int rc = 0;
    hid_t group = H5Gcreate2(file, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0 ||
        write_lut_table(group, LUT_NAMES[0], H5T_STD_I16LE, H5T_NATIVE_INT16, vocab_size, base_bytes) != 0 ||
        write_lut_table(group, LUT_NAMES[1], H5T_STD_U8LE, H5T_NATIVE_UINT8, vocab_size, has_leading_space) != 0 ||
        write_lut_table(group, LUT_NAMES[2], H5T_STD_U8LE, H5T_NATIVE_UINT8, vocab_size, is_boundary_token) != 0)
        rc = ct_h5_fail("'%s': cannot write the /tokenizer tables", path);
    if (group >= 0) H5Gclose(group);
    return rc;
}

int token_writer_set_luts(TokenWriter *w, const int16_t *base_bytes, const uint8_t *has_leading_space,
                          const uint8_t *is_boundary_token) {
    ct_hdf5_lock();
    int rc = write_luts_locked(w->file, w->tmp_path, w->vocab_size, base_bytes, has_leading_space, is_boundary_token);
    ct_hdf5_unlock();
    return rc;
}

/* The pieces into the /tokenizer group that write_luts_locked made. Lock held. */
static int write_pieces_locked(hid_t file, const char *path, int64_t vocab_size, const TokenPieces *pieces) {
    if (pieces->vocab_size != vocab_size)
        return ct_fail("'%s': the tokenizer has %lld pieces but vocab_size is %lld", path,
                       (long long)pieces->vocab_size, (long long)vocab_size);
    hid_t group = H5Gopen2(file, "tokenizer", H5P_DEFAULT);
    if (group < 0) return ct_h5_fail("'%s': pieces need the /tokenizer tables first", path);
    int rc = data_pieces_write_locked(group, path, pieces);
    H5Gclose(group);
    return rc;
}

int token_writer_set_pieces(TokenWriter *w, const TokenPieces *pieces) {
    ct_hdf5_lock();
    int rc = write_pieces_locked(w->file, w->tmp_path, w->vocab_size, pieces);
    ct_hdf5_unlock();
    return rc;
}

int data_write_tokenizer_file(const char *path, int64_t vocab_size, const int16_t *base_bytes,
                              const uint8_t *has_leading_space, const uint8_t *is_boundary_token,
                              const TokenPieces *pieces) {
    char *tmp;
    hid_t file;
    if (create_tmp_file(path, &tmp, &file) != 0) return -1;
    ct_hdf5_lock();
    int rc = write_luts_locked(file, tmp, vocab_size, base_bytes, has_leading_space, is_boundary_token);
    if (rc == 0 && pieces) rc = write_pieces_locked(file, tmp, vocab_size, pieces);
    if (H5Fclose(file) < 0 && rc == 0) rc = ct_h5_fail("'%s': cannot finish writing", tmp);
    ct_hdf5_unlock();
    if (rc == 0 && rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}

int data_read_pieces_file(const char *path, int64_t vocab_size, TokenPieces *pieces, int *present) {
    memset(pieces, 0, sizeof *pieces);
    *present = 0;
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = open_data_file(path);
    if (file >= 0) {
        rc = data_pieces_read_locked(file, path, vocab_size, pieces, present);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    return rc;
}

int token_writer_close(TokenWriter *w) {
    if (writer_flush(w) != 0) goto fail;
    if (w->written == 0) {
        ct_fail("'%s': no tokens were written; an empty /tokens is not a valid data file", w->path);
        goto fail;
    }
    ct_hdf5_lock();
    herr_t closed = ct_h5_attr_write_u32(w->dset, "tokens_crc32", w->crc) == 0 ? 0 : -1;
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
    if (w->file >= 0) H5Fclose(w->file);
    ct_hdf5_unlock();
    if (w->tmp_path) unlink(w->tmp_path);
    free(w->path);
    free(w->tmp_path);
    free(w->tokenizer);
    free(w->buffer);
    free(w);
}
