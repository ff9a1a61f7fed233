/* h5util.h — small HDF5 helpers shared by the token data files (data.c) and the checkpoints
 * (checkpoint/): turning HDF5's error stack into one readable message, naming a datatype the
 * way a numpy user would, and the file-access properties every open uses.
 * Call all of them with ct_hdf5_lock() held (data.h). */
#ifndef CT_H5UTIL_H
#define CT_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

/* ct_fail with the most specific message of the calling thread's HDF5 error stack appended,
 * e.g. "cannot open 'x.h5' (HDF5: file signature not found)"; clears the stack; returns -1. */
int ct_h5_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "uint16", "float32", "int8", "string", ...: how a user would name the dtype in numpy. */
void ct_h5_describe_type(hid_t type, char *buf, size_t cap);

/* A new file-access property list (caller closes it). On file systems without flock (some
 * Lustre/NFS mounts) HDF5's file locking fails every open; best effort keeps locking where it
 * works and skips it elsewhere. HDF5_USE_FILE_LOCKING=FALSE in the environment still turns
 * locking off entirely (HDF5 >= 1.10.7 reads it at every open, overriding this list). */
hid_t ct_h5_file_access_plist(void);

#endif
