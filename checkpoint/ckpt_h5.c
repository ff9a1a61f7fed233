/* ckpt_h5.c — the HDF5 calls the checkpoint files share: file access properties, opening a
 * checkpoint for reading with messages a user can act on, and the attributes a checkpoint must
 * have (the typed readers and writers themselves are h5util's).
 * Every function here runs with ct_hdf5_lock() held by its caller. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"

hid_t ckpt_fapl(void) {
    hid_t fapl = ct_h5_file_access_plist();
    if (fapl < 0) return fapl;
    /* Object header version 2 carries a checksum, so damaged metadata (attributes, links) is
     * detected by HDF5 itself; the 1.8 format is read by every HDF5 and h5py in use. */
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
    /* Closing the file really closes it, even if a handle leaked on an error path, so the
     * fsync and rename that follow see the complete file. */
    H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG);
    return fapl;
}

hid_t ckpt_open_read(const char *path) {
    static const CtH5OpenTerms terms = {"checkpoint", "expected a file, such as", "step_00001000.h5",
                                        "damaged, or not a checkpoint"};
    hid_t fapl = ckpt_fapl();
    hid_t file = ct_h5_open_read(path, fapl, &terms, NULL);
    H5Pclose(fapl);
    return file;
}

/* ---- required attributes ---- */

/* Open attribute `name` of obj, which must exist; -1 with a message naming what was expected. */
static hid_t open_required(hid_t obj, const char *file, const char *where, const char *name, const char *want_text) {
    hid_t attr = H5I_INVALID_HID;
    int found = ct_h5_attr_find(obj, file, where, name, &attr);
    if (found == 0) ct_fail("'%s': %s has no attribute %s (expected %s)", file, where, name, want_text);
    return found == 1 ? attr : H5I_INVALID_HID;
}

int ckpt_attr_read_i64(hid_t obj, const char *file, const char *where, const char *name, int64_t *value) {
    hid_t attr = open_required(obj, file, where, name, "an integer");
    if (attr < 0) return -1;
    int rc = ct_h5_attr_read_i64(attr, file, where, name, value);
    H5Aclose(attr);
    return rc;
}

int ckpt_attr_read_f64(hid_t obj, const char *file, const char *where, const char *name, double *value) {
    hid_t attr = open_required(obj, file, where, name, "a float");
    if (attr < 0) return -1;
    int rc = ct_h5_attr_read_f64(attr, file, where, name, value);
    H5Aclose(attr);
    return rc;
}

int ckpt_attr_read_str(hid_t obj, const char *file, const char *where, const char *name, char **value) {
    *value = NULL;
    hid_t attr = open_required(obj, file, where, name, "a string");
    if (attr < 0) return -1;
    int rc = ct_h5_attr_read_str(attr, file, where, name, value);
    H5Aclose(attr);
    return rc;
}

int ckpt_dataset_shape(hid_t dset, hsize_t *dims) {
    hid_t space = H5Dget_space(dset);
    if (space < 0) return -1;
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank > 8) rank = -1;
    else if (rank > 0) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    return rank;
}
