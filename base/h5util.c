/* h5util.c — HDF5 helpers shared by src/data/ and checkpoint/ (see h5util.h), so that both report
 * HDF5 failures, and files that are not what they should be, in the same words. */
#include "h5util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common.h"

/* ---- the process-wide HDF5 lock ---- */

static pthread_mutex_t hdf5_mutex;
static pthread_once_t hdf5_mutex_once = PTHREAD_ONCE_INIT;

/* Recursive: a holder may call code that takes the lock again. */
static void init_recursive_mutex(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&hdf5_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

static void hdf5_mutex_init(void) {
    /* HDF5's exit handler closes every file still open. A file whose close failed (a full disk)
     * stays open in HDF5's tables, and closing it again at exit crashes inside HDF5 1.10
     * (SIGSEGV in H5F__close_cb) after the error was already reported. ctrain closes what it
     * opens and deletes what it failed to write, so the handler has nothing useful left to do.
     * It must be said before any other HDF5 call: every HDF5 call takes this lock first. */
    H5dont_atexit();
    init_recursive_mutex();
}

void ct_hdf5_lock(void) {
    pthread_once(&hdf5_mutex_once, hdf5_mutex_init);
    pthread_mutex_lock(&hdf5_mutex);
    /* Per thread in threadsafe builds, so it is repeated for whichever thread takes the lock. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ct_hdf5_unlock(void) { pthread_mutex_unlock(&hdf5_mutex); }

void ct_hdf5_lock_reset_in_child(void) {
    /* a recursive mutex remembers its owner, which is not this thread's id in the child:
     * initialise it anew rather than unlock it */
    init_recursive_mutex();
}

/* Keeps the innermost message, skipping the plugin loader's (for a missing filter it only
 * says that its plugin directory does not exist; the line above names the filter). */
static herr_t keep_innermost(unsigned n, const H5E_error2_t *err, void *data) {
    (void)n;
    char *detail = data;
    int plugin_search = err->func_name && !strncmp(err->func_name, "H5PL", 4);
    if (!detail[0] && !plugin_search && err->desc) snprintf(detail, 512, "%s", err->desc);
    return 0;
}

int ct_h5_fail(const char *fmt, ...) {
    char message[1536], detail[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, detail);
    H5Eclear2(H5E_DEFAULT);
    /* A failed system call comes as "file write failed: time = ..., filename = ..., errno = 28,
     * error message = 'No space left on device', buf = ..." over two lines: keep what failed
     * and the system's reason. */
    const char *reason = strstr(detail, "error message = '");
    char *colon = strchr(detail, ':');
    if (reason && colon && colon < reason) {
        reason += strlen("error message = '");
        const char *end = strchr(reason, '\'');
        *colon = '\0';
        return ct_fail("%s (HDF5: %s: %.*s)", message, detail, (int)(end ? end - reason : (long)strlen(reason)), reason);
    }
    if (detail[0]) return ct_fail("%s (HDF5: %s)", message, detail);
    return ct_fail("%s", message);
}

void ct_h5_describe_type(hid_t type, char *buf, size_t cap) {
    size_t bits = H5Tget_size(type) * 8;
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        snprintf(buf, cap, "%sint%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", bits);
        break;
    case H5T_FLOAT: snprintf(buf, cap, "float%zu", bits); break;
    case H5T_STRING: snprintf(buf, cap, "string"); break;
    case H5T_ENUM: snprintf(buf, cap, "enum%zu (numpy bool is stored as an enum)", bits); break;
    case H5T_COMPOUND: snprintf(buf, cap, "compound"); break;
    case H5T_ARRAY: snprintf(buf, cap, "array"); break;
    case H5T_VLEN: snprintf(buf, cap, "variable-length sequence"); break;
    case H5T_BITFIELD: snprintf(buf, cap, "bitfield%zu", bits); break;
    case H5T_OPAQUE: snprintf(buf, cap, "opaque"); break;
    case H5T_REFERENCE: snprintf(buf, cap, "reference"); break;
    default: snprintf(buf, cap, "unknown type"); break;
    }
}

hid_t ct_h5_file_access_plist(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if (H5_VERSION_GE(1, 10, 7) && !H5_VERSION_GE(1, 12, 0)) || H5_VERSION_GE(1, 12, 1)
    if (fapl >= 0) H5Pset_file_locking(fapl, 1, 1);
#endif
    return fapl;
}

hid_t ct_h5_open_read(const char *path, hid_t fapl, const CtH5OpenTerms *terms, CtH5OpenStatus *status) {
    CtH5OpenStatus ignored;
    if (!status) status = &ignored;
    *status = CT_H5_UNREADABLE;
    struct stat st;
    if (stat(path, &st) != 0) {
        *status = CT_H5_NO_ACCESS;
        ct_fail("cannot open %s '%s': %s", terms->what, path, strerror(errno));
        return H5I_INVALID_HID;
    }
    if (S_ISDIR(st.st_mode)) {
        *status = CT_H5_DIRECTORY;
        ct_fail("%s '%s' is a directory; %s '%s/%s'", terms->what, path, terms->directory_advice, path,
                terms->directory_example);
        return H5I_INVALID_HID;
    }
#if H5_VERSION_GE(1, 12, 0)
    htri_t is_hdf5 = H5Fis_accessible(path, fapl); /* H5Fis_hdf5 is deprecated there */
#else
    htri_t is_hdf5 = H5Fis_hdf5(path);
#endif
    if (is_hdf5 < 0) {
        ct_h5_fail("cannot read %s '%s'", terms->what, path);
        return H5I_INVALID_HID;
    }
    if (is_hdf5 == 0) {
        *status = CT_H5_NOT_HDF5;
        if (st.st_size == 0) ct_fail("%s '%s' is empty (0 bytes)", terms->what, path);
        else ct_fail("%s '%s' is not an HDF5 file (%s)", terms->what, path, terms->not_hdf5_hint);
        return H5I_INVALID_HID;
    }
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (file < 0) {
        /* taken at once: any further HDF5 call (even closing fapl) clears the error stack */
        ct_h5_fail("cannot open %s '%s' (%lld bytes)", terms->what, path, (long long)st.st_size);
        if (strstr(ct_error(), "truncated file")) {
            char message[1024];
            snprintf(message, sizeof message, "%s", ct_error());
            ct_fail("%s; the file is shorter than when it was written (an interrupted copy, or a full disk)", message);
        }
        return H5I_INVALID_HID;
    }
    *status = CT_H5_OPENED;
    return file;
}

/* ---- attributes ---- */

/* "NAME" or "NAME of WHERE", as messages name an attribute. */
static const char *attr_label(const char *name, const char *where, char *buf, size_t cap) {
    if (where) snprintf(buf, cap, "%s of %s", name, where);
    else snprintf(buf, cap, "%s", name);
    return buf;
}

int ct_h5_attr_find(hid_t obj, const char *file, const char *where, const char *name, hid_t *attr) {
    char label[512];
    htri_t exists = H5Aexists(obj, name);
    if (exists < 0)
        return ct_h5_fail("'%s': cannot look up attribute %s", file, attr_label(name, where, label, sizeof label));
    if (!exists) return 0;
    *attr = H5Aopen(obj, name, H5P_DEFAULT);
    if (*attr < 0)
        return ct_h5_fail("'%s': cannot open attribute %s", file, attr_label(name, where, label, sizeof label));
    return 1;
}

/* The attribute holds one value of class `want`; -1 with a message otherwise. */
static int check_scalar(hid_t attr, const char *file, const char *label, H5T_class_t want, const char *want_text) {
    hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
    H5T_class_t cls = H5Tget_class(type);
    hssize_t count = H5Sget_simple_extent_npoints(space);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    H5Tclose(type);
    H5Sclose(space);
    if (cls != want) return ct_fail("'%s': attribute %s has type %s, expected %s", file, label, type_name, want_text);
    if (count != 1)
        return ct_fail("'%s': attribute %s holds %lld values, expected a single value", file, label, (long long)count);
    return 0;
}

static int read_scalar(hid_t attr, const char *file, const char *where, const char *name, H5T_class_t want,
                       const char *want_text, hid_t mem_type, void *value) {
    char label[512];
    attr_label(name, where, label, sizeof label);
    if (check_scalar(attr, file, label, want, want_text) != 0) return -1;
    if (H5Aread(attr, mem_type, value) < 0) return ct_h5_fail("'%s': cannot read attribute %s", file, label);
    return 0;
}

int ct_h5_attr_read_i64(hid_t attr, const char *file, const char *where, const char *name, int64_t *value) {
    /* HDF5 clamps a uint64 beyond INT64_MAX to INT64_MAX when converting: read such an
     * attribute as unsigned, so a message shows the number the file holds. */
    hid_t type = H5Aget_type(attr);
    int big_unsigned = H5Tget_class(type) == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_NONE && H5Tget_size(type) >= 8;
    H5Tclose(type);
    if (!big_unsigned) return read_scalar(attr, file, where, name, H5T_INTEGER, "an integer", H5T_NATIVE_INT64, value);
    uint64_t u;
    if (read_scalar(attr, file, where, name, H5T_INTEGER, "an integer", H5T_NATIVE_UINT64, &u) != 0) return -1;
    if (u > (uint64_t)INT64_MAX) {
        char label[512];
        return ct_fail("'%s': attribute %s is %llu, beyond the integers ctrain reads (at most %lld)", file,
                       attr_label(name, where, label, sizeof label), (unsigned long long)u, (long long)INT64_MAX);
    }
    *value = (int64_t)u;
    return 0;
}

int ct_h5_attr_read_f64(hid_t attr, const char *file, const char *where, const char *name, double *value) {
    return read_scalar(attr, file, where, name, H5T_FLOAT, "a float", H5T_NATIVE_DOUBLE, value);
}

int ct_h5_attr_read_str(hid_t attr, const char *file, const char *where, const char *name, char **value) {
    char label[512];
    attr_label(name, where, label, sizeof label);
    *value = NULL;
    if (check_scalar(attr, file, label, H5T_STRING, "a string") != 0) return -1;
    hid_t file_type = H5Aget_type(attr);
    hid_t mem_type = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mem_type, H5Tget_cset(file_type)); /* HDF5 does not convert between charsets */
    int rc = 0;
    if (H5Tis_variable_str(file_type) > 0) {
        char *s = NULL;
        H5Tset_size(mem_type, H5T_VARIABLE);
        if (H5Aread(attr, mem_type, &s) < 0) rc = ct_h5_fail("'%s': cannot read attribute %s", file, label);
        else *value = ct_strdup(s ? s : "");
        if (s) H5free_memory(s);
    } else {
        size_t size = H5Tget_size(file_type);
        char *s = ct_calloc(size + 1, 1, "string attribute");
        H5Tset_size(mem_type, size + 1);
        H5Tset_strpad(mem_type, H5T_STR_NULLTERM);
        if (H5Aread(attr, mem_type, s) < 0) {
            rc = ct_h5_fail("'%s': cannot read attribute %s", file, label);
            free(s);
        } else {
            *value = s;
        }
    }
    H5Tclose(mem_type);
    H5Tclose(file_type);
    return rc;
}

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

int ct_h5_attr_write_i64(hid_t obj, const char *name, int64_t value) {
    return write_scalar(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

int ct_h5_attr_write_i32(hid_t obj, const char *name, int32_t value) {
    return write_scalar(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

int ct_h5_attr_write_u32(hid_t obj, const char *name, uint32_t value) {
    return write_scalar(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, &value);
}

int ct_h5_attr_write_f64(hid_t obj, const char *name, double value) {
    return write_scalar(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

int ct_h5_attr_write_str(hid_t obj, const char *name, const char *value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    int rc = write_scalar(obj, name, type, type, &value);
    H5Tclose(type);
    return rc;
}

hid_t ct_h5_untimed_plist(hid_t cls) {
    hid_t plist = H5Pcreate(cls);
    if (plist >= 0) H5Pset_obj_track_times(plist, 0);
    return plist;
}
