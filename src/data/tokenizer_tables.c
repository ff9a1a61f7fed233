/* tokenizer_tables.c — the tokenizer byte-count tables of a data file (/tokenizer/base_bytes,
 * has_leading_space, is_boundary_token; docs/data-format.md), which validation's bits per byte
 * needs: checked when a file is opened, read for a set (every file must have the same), and
 * written into a new data file or into a file holding only /tokenizer (`ctrain data luts`).
 * Every HDF5 call runs under ct_hdf5_lock() (h5util.h). */
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

static const char *const LUT_NAMES[3] = {"base_bytes", "has_leading_space", "is_boundary_token"};

/* ---- checking (when a file is opened) ---- */

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
int data_check_luts(hid_t file, const char *path, int64_t vocab_size, int *present) {
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

/* ---- reading ---- */

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
    if (data_check_luts(file, path, vocab_size, &present) != 0) return -1;
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
    hid_t file = data_open_file(path);
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

/* Contiguous 1-D table under /tokenizer. Lock held. */
static int write_lut_table(hid_t group, const char *name, hid_t file_type, hid_t mem_type, int64_t n,
                           const void *data) {
    hsize_t dims = (hsize_t)n;
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t dcpl = ct_h5_untimed_plist(H5P_DATASET_CREATE);
    hid_t dset = H5Dcreate2(group, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    int rc = dset < 0 || H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ? -1 : 0;
    if (dset >= 0) H5Dclose(dset);
    H5Sclose(space);
    return rc;
}

/* The three tables as /tokenizer (created) of an open file. Lock held. */
int data_write_luts_locked(hid_t file, const char *path, int64_t vocab_size, const int16_t *base_bytes,
                           const uint8_t *has_leading_space, const uint8_t *is_boundary_token) {
    for (int64_t i = 0; i < vocab_size; i++)
        if (base_bytes[i] < 0)
            return ct_fail("'%s': base_bytes[%lld] = %d, expected a byte count >= 0", path, (long long)i,
                           base_bytes[i]);
    int rc = 0;
    hid_t gcpl = ct_h5_untimed_plist(H5P_GROUP_CREATE);
    hid_t group = H5Gcreate2(file, "tokenizer", H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    if (group < 0 ||
        write_lut_table(group, LUT_NAMES[0], H5T_STD_I16LE, H5T_NATIVE_INT16, vocab_size, base_bytes) != 0 ||
        write_lut_table(group, LUT_NAMES[1], H5T_STD_U8LE, H5T_NATIVE_UINT8, vocab_size, has_leading_space) != 0 ||
        write_lut_table(group, LUT_NAMES[2], H5T_STD_U8LE, H5T_NATIVE_UINT8, vocab_size, is_boundary_token) != 0)
        rc = ct_h5_fail("'%s': cannot write the /tokenizer tables", path);
    if (group >= 0) H5Gclose(group);
    return rc;
}

int data_write_tokenizer_file(const char *path, int64_t vocab_size, const int16_t *base_bytes,
                              const uint8_t *has_leading_space, const uint8_t *is_boundary_token,
                              const TokenPieces *pieces) {
    char *tmp;
    hid_t file;
    if (data_create_tmp_file(path, &tmp, &file) != 0) return -1;
    ct_hdf5_lock();
    int rc = data_write_luts_locked(file, tmp, vocab_size, base_bytes, has_leading_space, is_boundary_token);
    if (rc == 0 && pieces) rc = data_write_pieces_locked(file, tmp, vocab_size, pieces);
    if (H5Fclose(file) < 0 && rc == 0) rc = ct_h5_fail("'%s': cannot finish writing", tmp);
    ct_hdf5_unlock();
    if (rc == 0 && rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (rc != 0) unlink(tmp);
    free(tmp);
    return rc;
}
