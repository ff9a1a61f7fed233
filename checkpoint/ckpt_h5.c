/* ckpt_h5.c — the HDF5 calls the checkpoint files share: file access properties, opening a
 * checkpoint for reading with messages a user can act on, and typed scalar attributes.
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

/* ---- writing attributes ---- */

/* On failure the message names the attribute and is taken before any further HDF5 call
 * clears the error stack. */
static int write_scalar(hid_t obj, const char *name, hid_t file_type, hid_t mem_type, const void *value) {
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT);
    int rc = attr < 0 || H5Awrite(attr, mem_type, value) < 0 ? ct_h5_fail("cannot write attribute %s", name) : 0;
    if (attr >= 0) H5Aclose(attr);
    H5Sclose(space);
    return rc;
}

int ckpt_attr_write_i64(hid_t obj, const char *name, int64_t value) {
    return write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

int ckpt_attr_write_i32(hid_t obj, const char *name, int32_t value) {
    return write_scalar(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

int ckpt_attr_write_u32(hid_t obj, const char *name, uint32_t value) {
    return write_scalar(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value);
}

int ckpt_attr_write_f64(hid_t obj, const char *name, double value) {
    return write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

/* Variable-length UTF-8: what h5py writes for a Python str and reads back as str. */
int ckpt_attr_write_str(hid_t obj, const char *name, const char *value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    int rc = write_scalar(obj, name, type, type, &value);
    H5Tclose(type);
    return rc;
}

/* ---- reading attributes ---- */

/* Open attribute `name` of obj, which must hold one value of class `want`. Returns the open
 * attribute or -1 with a message. */
static hid_t open_scalar(hid_t obj, const char *file, const char *where, const char *name, H5T_class_t want,
                         const char *want_text) {
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0) {
        ct_h5_fail("'%s': cannot look up attribute %s of %s", file, name, where);
        return H5I_INVALID_HID;
    }
    if (!exists) {
        ct_fail("'%s': %s has no attribute %s (expected %s)", file, where, name, want_text);
        return H5I_INVALID_HID;
    }
    hid_t attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (attr < 0) {
        ct_h5_fail("'%s': cannot open attribute %s of %s", file, name, where);
        return H5I_INVALID_HID;
    }
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    H5T_class_t cls = H5Tget_class(type);
    hssize_t count = H5Sget_simple_extent_npoints(space);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    H5Tclose(type);
    H5Sclose(space);
    if (cls != want) {
        ct_fail("'%s': attribute %s of %s has type %s, expected %s", file, name, where, type_name, want_text);
    } else if (count != 1) {
        ct_fail("'%s': attribute %s of %s holds %lld values, expected a single %s", file, name, where,
                (long long)count, want_text);
    } else {
        return attr;
    }
    H5Aclose(attr);
    return H5I_INVALID_HID;
}

static int read_scalar(hid_t obj, const char *file, const char *where, const char *name, H5T_class_t want_class,
                       const char *want_text, hid_t mem_type, void *value) {
    hid_t attr = open_scalar(obj, file, where, name, want_class, want_text);
    if (attr < 0) return -1;
    int rc = H5Aread(attr, mem_type, value) < 0 ? ct_h5_fail("'%s': cannot read attribute %s of %s", file, name, where)
                                                : 0;
    H5Aclose(attr);
    return rc;
}

int ckpt_attr_read_i64(hid_t obj, const char *file, const char *where, const char *name, int64_t *value) {
    return read_scalar(obj, file, where, name, H5T_INTEGER, "an integer", H5T_NATIVE_INT64, value);
}

int ckpt_attr_read_f64(hid_t obj, const char *file, const char *where, const char *name, double *value) {
    return read_scalar(obj, file, where, name, H5T_FLOAT, "a float", H5T_NATIVE_DOUBLE, value);
}

/* Fixed-length (numpy bytes) or variable-length (Python str) strings. */
int ckpt_attr_read_str(hid_t obj, const char *file, const char *where, const char *name, char **value) {
    *value = NULL;
    hid_t attr = open_scalar(obj, file, where, name, H5T_STRING, "a string");
    if (attr < 0) return -1;
    hid_t file_type = H5Aget_type(attr);
    hid_t mem_type = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mem_type, H5Tget_cset(file_type)); /* HDF5 does not convert between charsets */
    int rc = 0;
    if (H5Tis_variable_str(file_type) > 0) {
        char *s = NULL;
        H5Tset_size(mem_type, H5T_VARIABLE);
        if (H5Aread(attr, mem_type, &s) < 0) rc = ct_h5_fail("'%s': cannot read attribute %s of %s", file, name, where);
        else *value = ct_strdup(s ? s : "");
        if (s) H5free_memory(s);
    } else {
        size_t size = H5Tget_size(file_type);
        char *s = ct_calloc(size + 1, 1, "string attribute");
        H5Tset_size(mem_type, size + 1);
        H5Tset_strpad(mem_type, H5T_STR_NULLTERM);
        if (H5Aread(attr, mem_type, s) < 0) {
            rc = ct_h5_fail("'%s': cannot read attribute %s of %s", file, name, where);
            free(s);
        } else {
            *value = s;
        }
    }
    H5Tclose(mem_type);
    H5Tclose(file_type);
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
