/* golf_hessians.c — the Hessians file (golf_hessians.h): which parameters have a Hessian, and the
 * HDF5 file written (atomically, hard links for shared inputs) and read back with errors naming
 * the file and the dataset. */
#include "golf_hessians.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "h5util.h"

#define HESSIANS_FORMAT "ctrain-gptq-hessians-v1"

/* The block-relative name after "blocks.L." of a parameter, or NULL. */
static const char *block_suffix(const char *name) {
    if (strncmp(name, "blocks.", 7) != 0) return NULL;
    const char *dot = strchr(name + 7, '.');
    return dot ? dot + 1 : NULL;
}

int golf_hessian_wanted(const ModelSpec *spec, int i, int *shares) {
    const ParamInfo *p = &spec->params[i];
    *shares = -1;
    if (i >= model_artifact_params(spec) || p->ndim != 2 || p->count <= 65536) return 0;
    /* c_k and c_v read c_q's input (the normed attention input of the same block) */
    const char *suffix = block_suffix(p->name);
    if (suffix && (!strcmp(suffix, "attn.c_k.weight") || !strcmp(suffix, "attn.c_v.weight"))) {
        char q[sizeof p->name];
        snprintf(q, sizeof q, "%.*sattn.c_q.weight", (int)(suffix - p->name), p->name);
        const ParamInfo *cq = model_find_param(spec, q);
        if (cq && cq->count > 65536) *shares = (int)(cq - spec->params);
    }
    return 1;
}

void golf_hessians_alloc(const ModelSpec *spec, GolfHessians *h) {
    memset(h, 0, sizeof *h);
    h->num_params = spec->num_params;
    h->h = ct_calloc((size_t)spec->num_params + 1, sizeof *h->h, "Hessians");
    for (int i = 0; i < spec->num_params; i++) {
        int shares;
        if (!golf_hessian_wanted(spec, i, &shares)) continue;
        const size_t cols = (size_t)spec->params[i].shape[1];
        h->h[i] = shares >= 0 ? h->h[shares] : ct_calloc(cols * cols, sizeof(float), "Hessian");
    }
}

void golf_hessians_free(GolfHessians *h) {
    for (int i = 0; h->h && i < h->num_params; i++) {
        int owner = 1;
        for (int j = 0; j < i && owner; j++) owner = h->h[j] != h->h[i];
        if (owner) free(h->h[i]);
    }
    free(h->h);
    memset(h, 0, sizeof *h);
}

/* ---- writing ---- */

static int write_datasets(hid_t file, const ModelSpec *spec, const GolfHessians *h, const char *path) {
    hid_t group = H5Gcreate2(file, "hessians", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (group < 0) return ct_h5_fail("'%s': cannot create /hessians", path);
    int rc = 0;
    for (int i = 0; rc == 0 && i < h->num_params && i < spec->num_params; i++) {
        if (!h->h[i]) continue;
        const ParamInfo *p = &spec->params[i];
        int shares;
        golf_hessian_wanted(spec, i, &shares);
        if (shares >= 0 && h->h[shares] == h->h[i]) {
            if (H5Lcreate_hard(group, spec->params[shares].name, group, p->name, H5P_DEFAULT, H5P_DEFAULT) < 0)
                rc = ct_h5_fail("'%s': cannot link /hessians/%s", path, p->name);
            continue;
        }
        const hsize_t dims[2] = {(hsize_t)p->shape[1], (hsize_t)p->shape[1]};
        /* chunks with the Fletcher32 checksum, as a checkpoint's datasets: a damaged Hessian is a
         * read error naming it, not a quietly different artifact (rows of 1024 at most: a chunk
         * stays far below HDF5's 4 GiB limit for any width) */
        const hsize_t chunk[2] = {dims[0] < 1024 ? dims[0] : 1024, dims[1]};
        hid_t space = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (dcpl >= 0 && (H5Pset_chunk(dcpl, 2, chunk) < 0 || H5Pset_fletcher32(dcpl) < 0)) {
            H5Pclose(dcpl);
            dcpl = -1;
        }
        hid_t d = space < 0 || dcpl < 0 ? -1
                                        : H5Dcreate2(group, p->name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, h->h[i]) < 0)
            rc = ct_h5_fail("'%s': cannot write /hessians/%s", path, p->name);
        if (d >= 0) H5Dclose(d);
        if (dcpl >= 0) H5Pclose(dcpl);
        if (space >= 0) H5Sclose(space);
    }
    H5Gclose(group);
    return rc;
}

/* The name a write of path goes to before its rename. */
static void temporary_name(const char *path, char *tmp, size_t cap) {
    snprintf(tmp, cap, "%s.tmp.%ld", path, (long)getpid());
}

int golf_hessians_check_writable(const char *path) {
    if (ct_mkdir_parent(path) != 0) return -1;
    char tmp[4300];
    temporary_name(path, tmp, sizeof tmp);
    /* fopen for the system's reason (HDF5's create gives none), under the name the write uses */
    FILE *probe = fopen(tmp, "wb");
    if (!probe) return ct_fail("cannot create '%s': %s", tmp, strerror(errno));
    fclose(probe);
    unlink(tmp);
    return 0;
}

int golf_hessians_write(const ModelSpec *spec, const GolfHessians *h, const char *path) {
    if (golf_hessians_check_writable(path) != 0) return -1;
    char tmp[4300];
    temporary_name(path, tmp, sizeof tmp);
    ct_hdf5_lock();
    hid_t fapl = ct_h5_file_access_plist();
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int rc = file < 0 ? ct_h5_fail("cannot create '%s'", tmp) : 0;
    if (rc == 0 && (ct_h5_attr_write_str(file, "format", HESSIANS_FORMAT) != 0 ||
                    ct_h5_attr_write_i64(file, "calibration_batches", h->batches) != 0 ||
                    ct_h5_attr_write_i64(file, "calibration_tokens", h->tokens) != 0 ||
                    ct_h5_attr_write_i64(file, "step", h->step) != 0))
        rc = ct_fail_prefix("'%s'", tmp);
    if (rc == 0) rc = write_datasets(file, spec, h, tmp);
    if (file >= 0 && H5Fclose(file) < 0 && rc == 0) rc = ct_h5_fail("'%s': cannot finish writing (disk full?)", tmp);
    ct_hdf5_unlock();
    if (rc == 0 && rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (rc != 0) unlink(tmp);
    return rc;
}

/* ---- reading ---- */

static int read_dataset(hid_t group, const char *path, const ParamInfo *p, float **out) {
    hid_t d = H5Dopen2(group, p->name, H5P_DEFAULT);
    if (d < 0) return ct_h5_fail("'%s': cannot open /hessians/%s", path, p->name);
    hid_t space = H5Dget_space(d), type = H5Dget_type(d);
    hsize_t dims[2] = {0, 0};
    const int ndim = space >= 0 ? H5Sget_simple_extent_ndims(space) : -1;
    if (ndim == 2) H5Sget_simple_extent_dims(space, dims, NULL);
    int rc = 0;
    const hsize_t cols = (hsize_t)p->shape[1];
    if (ndim != 2) {
        rc = ct_fail("'%s': /hessians/%s has %d dimensions, expected a [%llu, %llu] matrix: the Hessian of the %lld "
                     "inputs of %s in this model", path, p->name, ndim, (unsigned long long)cols,
                     (unsigned long long)cols, (long long)cols, p->name);
    } else if (dims[0] != cols || dims[1] != cols) {
        rc = ct_fail("'%s': /hessians/%s has shape [%llu, %llu], expected [%llu, %llu]: the "
                     "Hessian of the %lld inputs of %s in this model",
                     path, p->name, (unsigned long long)dims[0], (unsigned long long)dims[1],
                     (unsigned long long)cols, (unsigned long long)cols, (long long)cols, p->name);
    } else if (H5Tget_class(type) != H5T_FLOAT) {
        char t[64];
        ct_h5_describe_type(type, t, sizeof t);
        rc = ct_fail("'%s': /hessians/%s is %s, expected float32", path, p->name, t);
    } else {
        *out = ct_malloc((size_t)(cols * cols) * sizeof(float), "Hessian");
        if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
            free(*out);
            *out = NULL;
            rc = ct_h5_fail("'%s': cannot read /hessians/%s", path, p->name);
        }
    }
    H5Tclose(type);
    H5Sclose(space);
    H5Dclose(d);
    return rc;
}

int golf_hessians_read(const ModelSpec *spec, const char *path, GolfHessians *h) {
    static const CtH5OpenTerms terms = {"Hessians file", "give the file, such as", "hessians.h5",
                                        "see docs/checkpoint-format.md, \"The Hessians file\""};
    memset(h, 0, sizeof *h);
    h->num_params = spec->num_params;
    h->h = ct_calloc((size_t)spec->num_params + 1, sizeof *h->h, "Hessians");
    ct_hdf5_lock();
    hid_t fapl = ct_h5_file_access_plist();
    hid_t file = ct_h5_open_read(path, fapl, &terms, NULL);
    H5Pclose(fapl);
    int rc = file < 0 ? -1 : 0;
    hid_t group = -1;
    if (rc == 0) {
        char *format = NULL;
        hid_t attr;
        int found = ct_h5_attr_find(file, path, NULL, "format", &attr);
        if (found == 1) {
            rc = ct_h5_attr_read_str(attr, path, NULL, "format", &format);
            H5Aclose(attr);
        }
        if (found < 0) rc = -1;
        else if (rc == 0 && (!format || strcmp(format, HESSIANS_FORMAT) != 0))
            rc = ct_fail("'%s' is not a Hessians file: its attribute format is '%s', expected '" HESSIANS_FORMAT "'",
                         path, format ? format : "(absent)");
        free(format);
        const char *const counts[] = {"calibration_batches", "calibration_tokens", "step"};
        int64_t *values[] = {&h->batches, &h->tokens, &h->step};
        for (int k = 0; rc == 0 && k < 3; k++)
            if ((found = ct_h5_attr_find(file, path, NULL, counts[k], &attr)) == 1) {
                rc = ct_h5_attr_read_i64(attr, path, NULL, counts[k], values[k]);
                H5Aclose(attr);
            } else if (found < 0) {
                rc = -1;
            }
        if (rc == 0 && (group = H5Gopen2(file, "hessians", H5P_DEFAULT)) < 0)
            rc = ct_h5_fail("'%s' has no /hessians group", path);
    }
    for (int i = 0; rc == 0 && i < spec->num_params; i++) {
        int shares;
        if (!golf_hessian_wanted(spec, i, &shares)) continue;
        const htri_t exists = H5Lexists(group, spec->params[i].name, H5P_DEFAULT);
        if (exists < 0) rc = ct_h5_fail("'%s': cannot look up /hessians/%s", path, spec->params[i].name);
        else if (exists > 0) rc = read_dataset(group, path, &spec->params[i], &h->h[i]);
    }
    if (group >= 0) H5Gclose(group);
    if (file >= 0) H5Fclose(file);
    ct_hdf5_unlock();
    if (rc != 0) golf_hessians_free(h);
    return rc;
}
