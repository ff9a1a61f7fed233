/* h5util.c — HDF5 helpers shared by data.c and checkpoint/ (see h5util.h), so that both report
 * HDF5 failures, and files that are not what they should be, in the same words. */
#include "h5util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

/* ---- the process-wide HDF5 lock ---- */

static pthread_mutex_t hdf5_mutex;
static pthread_once_t hdf5_mutex_once = PTHREAD_ONCE_INIT;

static void hdf5_mutex_init(void) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&hdf5_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

void ct_hdf5_lock(void) {
    pthread_once(&hdf5_mutex_once, hdf5_mutex_init);
    pthread_mutex_lock(&hdf5_mutex);
    /* Per thread in threadsafe builds, so it is repeated for whichever thread takes the lock. */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ct_hdf5_unlock(void) { pthread_mutex_unlock(&hdf5_mutex); }

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
