/* data_file.c — one HDF5 token data file opened or created, for the rest of src/data (private,
 * data_internal.h): a file opened read-only with errors a user can act on (an llm.c .bin shard
 * given by mistake is named as one), its /tokens dataset opened for sequential reads, the stamp
 * that tells whether a file changed, and "<path>.tmp" created for a writer to rename into place.
 *
 * Every HDF5 call here runs under ct_hdf5_lock() (h5util.h). HDF5 failures are turned into our own
 * messages naming the file and object, with the most specific line of HDF5's error stack
 * appended, because HDF5's own printed stack is unreadable for users. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data_internal.h"
#include "h5util.h"
#include "shard_bin.h"

/* Raw-data chunk cache per open dataset: holds two 1M-token uint32 chunks, so that a
 * compressed (e.g. gzip from h5py) chunk is decompressed once, not once per small read. */
#define READER_CHUNK_CACHE_BYTES ((size_t)8 << 20)

/* True if the file starts with the .bin shard magic number (for a hint on what to run). */
static int looks_like_bin_shard(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[4];
    int ok = fread(b, 1, 4, f) == 4;
    fclose(f);
    return ok && (b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24) == CT_SHARD_MAGIC;
}

/* Open a data file read-only with errors a user can act on. Lock held. */
hid_t data_open_file(const char *path) {
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
hid_t data_open_tokens(hid_t file, const char *path) {
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

DataFileStamp data_stamp_of(const struct stat *st) {
    return (DataFileStamp){(int64_t)st->st_dev, (int64_t)st->st_ino, (int64_t)st->st_size,
                           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec};
}

/* Create "<path>.tmp", the file a finished write renames to path: *tmp_path (caller frees) and
 * the open *file, or -1 with neither (and no file left behind). Takes the lock itself. */
int data_create_tmp_file(const char *path, char **tmp_path, hid_t *file) {
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
    hid_t fcpl = ct_h5_untimed_plist(H5P_FILE_CREATE); /* the root group's times */
    *file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fcpl);
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
