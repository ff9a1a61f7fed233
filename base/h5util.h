/* h5util.h — small HDF5 helpers shared by the token data files (src/data/) and the checkpoints
 * (checkpoint/): turning HDF5's error stack into one readable message, naming a datatype the
 * way a numpy user would, the file-access properties every open uses, and opening a file for
 * reading with messages that say what is wrong with it.
 * Call all of them with ct_hdf5_lock() held (below). */
#ifndef CT_H5UTIL_H
#define CT_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

/* The process-wide lock that serialises every HDF5 call: clusters often have HDF5 builds that
 * are not threadsafe, and the loader's prefetch thread reads while the main thread writes
 * checkpoints. Every HDF5 call of ctrain holds it (data files and checkpoints). It is
 * recursive, so a holder may call code that takes it again. Taking it also turns off HDF5's own
 * error-stack printing for the calling thread: failures are reported through ct_error(). */
void ct_hdf5_lock(void);
void ct_hdf5_unlock(void);
/* In a child made by fork() while the forking thread held the lock (so that no other thread
 * was inside HDF5): makes the lock free again in the child, where that thread's copy is the
 * only thread. */
void ct_hdf5_lock_reset_in_child(void);

/* ct_fail with the most specific message of the calling thread's HDF5 error stack appended,
 * e.g. "cannot open 'x.h5' (HDF5: file signature not found)"; clears the stack; returns -1. */
int ct_h5_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "uint16", "float32", "int8", "string", ...: how a user would name the dtype in numpy. */
void ct_h5_describe_type(hid_t type, char *buf, size_t cap);

/* ---- attributes ----
 * Messages name the attribute as "'FILE': attribute NAME of WHERE ..." (WHERE, the object that
 * holds it, e.g. "/loader/train", may be NULL: "'FILE': attribute NAME ..."). */

/* Look up attribute `name` of obj: 1 with *attr open (caller closes it), 0 if obj has none,
 * -1 with a message if the lookup fails. */
int ct_h5_attr_find(hid_t obj, const char *file, const char *where, const char *name, hid_t *attr);

/* Read an open attribute that must hold a single value: an integer (any width and sign) as
 * int64, a float as double, a string (fixed-length numpy bytes or variable-length Python str)
 * as a new C string. Another type or more than one value fails naming both. */
int ct_h5_attr_read_i64(hid_t attr, const char *file, const char *where, const char *name, int64_t *value);
int ct_h5_attr_read_f64(hid_t attr, const char *file, const char *where, const char *name, double *value);
int ct_h5_attr_read_str(hid_t attr, const char *file, const char *where, const char *name, char **value);

/* Create a scalar attribute of obj in little-endian file types (strings: variable-length UTF-8,
 * what h5py writes for a Python str); fails naming the attribute. */
int ct_h5_attr_write_i64(hid_t obj, const char *name, int64_t value);
int ct_h5_attr_write_i32(hid_t obj, const char *name, int32_t value);
int ct_h5_attr_write_u32(hid_t obj, const char *name, uint32_t value);
int ct_h5_attr_write_f64(hid_t obj, const char *name, double value);
int ct_h5_attr_write_str(hid_t obj, const char *name, const char *value);

/* A new file-access property list (caller closes it). On file systems without flock (some
 * Lustre/NFS mounts) HDF5's file locking fails every open; best effort keeps locking where it
 * works and skips it elsewhere. HDF5_USE_FILE_LOCKING=FALSE in the environment still turns
 * locking off entirely (HDF5 >= 1.10.7 reads it at every open, overriding this list). */
hid_t ct_h5_file_access_plist(void);

/* A new property list of class cls (H5P_FILE_CREATE, H5P_GROUP_CREATE, H5P_DATASET_CREATE) whose
 * objects record no access, change or modification times: files written by ctrain then depend
 * only on what they hold, so two runs that write the same data write the same bytes. The
 * caller closes it. */
hid_t ct_h5_untimed_plist(hid_t cls);

/* How ct_h5_open_read names the file in its messages. */
typedef struct {
    const char *what;              /* "checkpoint", "data file" */
    const char *directory_advice;  /* given a directory: "is a directory; <this> 'DIR/<example>'" */
    const char *directory_example;
    const char *not_hdf5_hint;     /* given another kind of file: "is not an HDF5 file (<this>)" */
} CtH5OpenTerms;

/* CT_H5_NO_ACCESS: stat failed (missing, no permission, a path component not a directory). */
typedef enum { CT_H5_OPENED, CT_H5_NO_ACCESS, CT_H5_DIRECTORY, CT_H5_NOT_HDF5, CT_H5_UNREADABLE } CtH5OpenStatus;

/* Open an existing HDF5 file read-only with the caller's file-access list (not closed here).
 * On failure: H5I_INVALID_HID, and a ct_fail message naming the file in the caller's terms and
 * what is wrong with it (missing or unreadable, a directory, empty, not HDF5, truncated, or
 * HDF5's own reason); *status (may be NULL) tells the caller which, so it can say more. */
hid_t ct_h5_open_read(const char *path, hid_t fapl, const CtH5OpenTerms *terms, CtH5OpenStatus *status);

#endif
