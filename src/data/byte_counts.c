/* byte_counts.c — a data file's optional /bytes_per_token dataset (docs/data-format.md): for
 * each token, how many bytes of the original text it stands for. It is the CaseOps "byte
 * sidecar" (the 1.0611 record's fineweb_val_bytes_*.bin): a tokenizer that rewrites the text
 * before tokenizing (capitals as operator tokens) cannot get bits per byte from its pieces'
 * lengths, so the bytes travel with the tokens. Checked when a file is opened (data.c), read for
 * a validation split (eval.c), written beside /tokens (token_writer.c owns the writer).
 * Stored as uint16, like the sidecar; any integer dtype with values 0..65535 is read. Every
 * HDF5 call runs under ct_hdf5_lock() (h5util.h). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"

#define BYTE_COUNTS "bytes_per_token"

/* Entries read at a time: bounds the int64 staging buffer. */
#define READ_BLOCK ((int64_t)1 << 20)

int data_check_byte_counts(hid_t file, const char *path, int64_t num_tokens, int *present) {
    *present = 0;
    htri_t exists = H5Lexists(file, BYTE_COUNTS, H5P_DEFAULT);
    if (exists < 0) return ct_h5_fail("'%s': cannot look up /" BYTE_COUNTS, path);
    if (!exists) return 0;
    hid_t dset = H5Dopen2(file, BYTE_COUNTS, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /" BYTE_COUNTS " as a dataset", path);
    hid_t type = H5Dget_type(dset), space = H5Dget_space(dset);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t length = 0;
    if (rank == 1) H5Sget_simple_extent_dims(space, &length, NULL);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    const int is_integer = H5Tget_class(type) == H5T_INTEGER;
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(dset);
    if (!is_integer)
        return ct_fail("'%s': /" BYTE_COUNTS " has dtype %s, expected uint16 (one byte count per token)", path,
                       type_name);
    if (rank != 1)
        return ct_fail("'%s': /" BYTE_COUNTS " has %d dimensions, expected a 1-D dataset of one count per token",
                       path, rank);
    if ((int64_t)length != num_tokens)
        return ct_fail("'%s': /" BYTE_COUNTS " has %lld entries but /tokens has %lld tokens: a byte sidecar gives "
                       "one count per token",
                       path, (long long)length, (long long)num_tokens);
    *present = 1;
    return 0;
}

/* Read counts [pos, pos + n) of one file into out, checking each is 0..65535. */
static int read_file_counts(const char *path, int64_t pos, int64_t n, uint16_t *out) {
    int64_t *stage = ct_malloc((size_t)(n < READ_BLOCK ? n : READ_BLOCK) * sizeof(int64_t), "byte count buffer");
    int rc = 0;
    ct_hdf5_lock();
    hid_t file = data_open_file(path), dset = H5I_INVALID_HID, space = H5I_INVALID_HID;
    if (file < 0) rc = -1;
    else if ((dset = H5Dopen2(file, BYTE_COUNTS, H5P_DEFAULT)) < 0 || (space = H5Dget_space(dset)) < 0)
        rc = ct_h5_fail("'%s': cannot open /" BYTE_COUNTS, path);
    for (int64_t done = 0; rc == 0 && done < n; done += READ_BLOCK) {
        const int64_t k = n - done < READ_BLOCK ? n - done : READ_BLOCK;
        hsize_t start = (hsize_t)(pos + done), count = (hsize_t)k;
        hid_t mem = H5Screate_simple(1, &count, NULL);
        if (H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
            H5Dread(dset, H5T_NATIVE_INT64, mem, space, H5P_DEFAULT, stage) < 0)
            rc = ct_h5_fail("'%s': cannot read /" BYTE_COUNTS "[%lld:%lld]", path, (long long)start,
                            (long long)(start + count));
        H5Sclose(mem);
        for (int64_t i = 0; rc == 0 && i < k; i++) {
            if (stage[i] < 0 || stage[i] > UINT16_MAX)
                rc = ct_fail("'%s': /" BYTE_COUNTS "[%lld] is %lld, expected a byte count 0 .. 65535", path,
                             (long long)(pos + done + i), (long long)stage[i]);
            else
                out[done + i] = (uint16_t)stage[i];
        }
    }
    if (space >= 0) H5Sclose(space);
    if (dset >= 0) H5Dclose(dset);
    if (file >= 0) H5Fclose(file);
    ct_hdf5_unlock();
    free(stage);
    return rc;
}

int data_read_byte_counts(const TokenSet *set, int64_t n, uint16_t **counts) {
    *counts = NULL;
    if (n < 0 || n > set->total_tokens)
        return ct_fail("'%s': %lld byte counts asked for, but the files hold %lld tokens", set->pattern, (long long)n,
                       (long long)set->total_tokens);
    uint16_t *out = ct_malloc((size_t)(n > 0 ? n : 1) * sizeof(uint16_t), "byte counts");
    int64_t done = 0;
    for (int f = 0; f < set->num_files && done < n; f++) {
        const TokenFileInfo *info = &set->files[f];
        if (!info->has_byte_counts) {
            free(out);
            return ct_fail("'%s' has no /" BYTE_COUNTS ", but other files of '%s' do: bits per byte needs the byte "
                           "counts of every file of the split (or of none)",
                           info->path, set->pattern);
        }
        const int64_t k = n - done < info->num_tokens ? n - done : info->num_tokens;
        if (read_file_counts(info->path, 0, k, out + done) != 0) {
            free(out);
            return -1;
        }
        done += k;
    }
    *counts = out;
    return 0;
}

hid_t data_create_byte_counts_locked(hid_t file, const char *path, int64_t chunk_entries) {
    hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = (hsize_t)chunk_entries;
    hid_t space = H5Screate_simple(1, &zero, &unlimited);
    hid_t dcpl = ct_h5_untimed_plist(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    H5Pset_fletcher32(dcpl); /* as /tokens: damage fails the read that meets it */
    hid_t dset = H5Dcreate2(file, BYTE_COUNTS, H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (dset < 0) ct_h5_fail("'%s': cannot create /" BYTE_COUNTS, path);
    return dset;
}

int data_append_byte_counts_locked(hid_t dset, const char *path, int64_t at, const uint16_t *counts, int64_t n) {
    hsize_t start = (hsize_t)at, count = (hsize_t)n, new_size = start + count;
    hid_t file_space = H5I_INVALID_HID, mem_space = H5Screate_simple(1, &count, NULL);
    int rc = 0;
    if (H5Dset_extent(dset, &new_size) < 0 || (file_space = H5Dget_space(dset)) < 0 ||
        H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, NULL, &count, NULL) < 0 ||
        H5Dwrite(dset, H5T_NATIVE_UINT16, mem_space, file_space, H5P_DEFAULT, counts) < 0)
        rc = ct_h5_fail("'%s': cannot write /" BYTE_COUNTS "[%lld:%lld]", path, (long long)start, (long long)new_size);
    if (file_space >= 0) H5Sclose(file_space);
    H5Sclose(mem_space);
    return rc;
}
