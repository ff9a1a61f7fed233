/* data.c — HDF5 token data files (format in docs/data-format.md) as a run sees them: each
 * file's metadata and validation (TokenFileInfo), a glob expanded into a split of files read
 * as one stream (TokenSet), and the check that every chunk of /tokens lies inside its file.
 * Opening a file is data_file.c's; reading tokens token_reader.c's; writing token_writer.c's;
 * the /tokenizer tables tokenizer_tables.c's.
 *
 * Every HDF5 call here runs under ct_hdf5_lock() (h5util.h). HDF5 failures are turned into our own
 * messages naming the file and object, with the most specific line of HDF5's error stack
 * appended, because HDF5's own printed stack is unreadable for users. */
#include "data.h"

#include <errno.h>
#include <glob.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

/* ---- metadata ---- */

/* Attributes live on /tokens; the root group is accepted too, as h5py users often write
 * f.attrs[...]. Returns 1 with *attr open, 0 if absent, -1 on error. Lock held. */
static int open_attribute(hid_t dset, hid_t file, const char *path, const char *name, hid_t *attr) {
    int found = ct_h5_attr_find(dset, path, NULL, name, attr);
    return found == 0 ? ct_h5_attr_find(file, path, NULL, name, attr) : found;
}

/* Read metadata of an open data file into info (path already set). Lock held. */
static int read_file_info(hid_t file, TokenFileInfo *info) {
    const char *path = info->path;
    hid_t dset = data_open_tokens(file, path);
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

    rc = data_check_luts(file, path, info->vocab_size, &info->has_luts);
    if (rc == 0) rc = data_check_byte_counts(file, path, info->num_tokens, &info->has_byte_counts);
done:
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(dset);
    return rc;
}

int data_file_info(const char *path, TokenFileInfo *info) {
    memset(info, 0, sizeof *info);
    info->path = ct_strdup(path);
    info->tokens_crc32 = info->sample_crc32 = -1;
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = data_open_file(path);
    if (file >= 0) {
        rc = read_file_info(file, info);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    struct stat st;
    if (rc == 0 && stat(path, &st) != 0) rc = ct_fail("'%s': cannot stat: %s", path, strerror(errno));
    if (rc == 0) info->stamp = data_stamp_of(&st);
    if (rc != 0) data_free_file_info(info);
    return rc;
}

void data_free_file_info(TokenFileInfo *info) {
    free(info->path);
    free(info->tokenizer);
    memset(info, 0, sizeof *info);
}

/* ---- sets ---- */

static int has_glob_chars(const char *s) { return strpbrk(s, "*?[") != NULL; }

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
        set->any_byte_counts |= f->has_byte_counts;
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
        hid_t file = data_open_file(info->path);
        hid_t dset = file >= 0 ? data_open_tokens(file, info->path) : H5I_INVALID_HID;
        rc = dset < 0 ? -1 : check_tokens_storage(file, dset, info);
        if (dset >= 0) H5Dclose(dset);
        if (file >= 0) H5Fclose(file);
        ct_hdf5_unlock();
    }
    return rc;
}
