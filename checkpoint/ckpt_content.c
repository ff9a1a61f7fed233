/* ckpt_content.c — the objects of a checkpoint file and its content checksum.
 *
 * The checksum (docs/checkpoint-format.md, "Content checksum") is a CRC-32 over one record per
 * attribute and per dataset, in byte order of their keys, so anyone can recompute it (the doc
 * has the h5py version). Reading every dataset in full also makes HDF5 check the Fletcher32
 * checksum of every chunk, so a damaged tensor is reported by name. Lock held throughout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"
#include "crc32.h"
#include "h5util.h"

/* Bytes read per H5Dread while checksumming: bounds memory whatever the tensor size. */
#define READ_BLOCK_BYTES ((size_t)64 << 20)

/* ---- listing objects ---- */

typedef struct {
    const char *file;
    CkptObjects *objs;
    int cap;
    int failed;
} ListState;

static void add_object(ListState *s, const char *path, int is_dataset) {
    if (s->objs->count == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        CkptObject *grown = realloc(s->objs->items, (size_t)s->cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "ctrain: error: out of memory listing checkpoint objects\n");
            exit(CT_EXIT_FAILURE);
        }
        s->objs->items = grown;
    }
    s->objs->items[s->objs->count].path = ct_strdup(path);
    s->objs->items[s->objs->count++].is_dataset = is_dataset;
}

static herr_t list_link(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    ListState *s = data;
    char path[4096];
    snprintf(path, sizeof path, "/%s", name);
    if (info->type != H5L_TYPE_HARD) {
        ct_fail("'%s': %s is a %s link; a checkpoint holds only plain groups and datasets", s->file, path,
                info->type == H5L_TYPE_SOFT ? "soft" : "external");
        s->failed = 1;
        return -1;
    }
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    if (obj < 0) {
        ct_h5_fail("'%s': cannot open %s", s->file, path);
        s->failed = 1;
        return -1;
    }
    H5I_type_t kind = H5Iget_type(obj);
    H5Oclose(obj);
    if (kind != H5I_GROUP && kind != H5I_DATASET) {
        ct_fail("'%s': %s is a named datatype; a checkpoint holds only groups and datasets", s->file, path);
        s->failed = 1;
        return -1;
    }
    add_object(s, path, kind == H5I_DATASET);
    return 0;
}

static int compare_objects(const void *a, const void *b) {
    return strcmp(((const CkptObject *)a)->path, ((const CkptObject *)b)->path);
}

int ckpt_list_objects(hid_t file, const char *path, CkptObjects *out) {
    memset(out, 0, sizeof *out);
    ListState s = {path, out, 0, 0};
    add_object(&s, "/", 0);
    if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, list_link, &s) < 0) {
        if (!s.failed) ct_h5_fail("'%s': cannot list the objects of the file", path);
        else H5Eclear2(H5E_DEFAULT);
        ckpt_objects_free(out);
        return -1;
    }
    qsort(out->items, (size_t)out->count, sizeof *out->items, compare_objects);
    return 0;
}

void ckpt_objects_free(CkptObjects *objs) {
    for (int i = 0; i < objs->count; i++) free(objs->items[i].path);
    free(objs->items);
    memset(objs, 0, sizeof *objs);
}

int ckpt_objects_find(const CkptObjects *objs, const char *path) {
    int lo = 0, hi = objs->count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(objs->items[mid].path, path);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* ---- records of the content checksum ---- */

typedef struct {
    char *key;        /* "/model/x" for a dataset, "/loader/train@position" for an attribute */
    const char *path; /* the object (borrowed from CkptObjects) */
    const char *attr; /* points into key after '@'; NULL for a dataset */
} Record;

typedef struct {
    Record *items;
    int count, cap;
    const char *path;
} Records;

static void add_record(Records *r, const char *obj_path, const char *attr) {
    if (r->count == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        Record *grown = realloc(r->items, (size_t)r->cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "ctrain: error: out of memory listing checkpoint contents\n");
            exit(CT_EXIT_FAILURE);
        }
        r->items = grown;
    }
    Record *rec = &r->items[r->count++];
    size_t n = strlen(obj_path), a = attr ? strlen(attr) : 0;
    rec->key = ct_malloc(n + a + 2, "checksum record");
    memcpy(rec->key, obj_path, n + 1);
    rec->path = obj_path;
    rec->attr = NULL;
    if (attr) {
        rec->key[n] = '@';
        memcpy(rec->key + n + 1, attr, a + 1);
        rec->attr = rec->key + n + 1;
    }
}

typedef struct {
    Records *records;
    const char *obj_path;
} AttrVisit;

static herr_t list_attribute(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    (void)obj;
    (void)info;
    AttrVisit *v = data;
    /* The checksum cannot cover itself. */
    if (!strcmp(v->obj_path, "/") && !strcmp(name, "content_crc32")) return 0;
    add_record(v->records, v->obj_path, name);
    return 0;
}

static int compare_records(const void *a, const void *b) {
    return strcmp(((const Record *)a)->key, ((const Record *)b)->key);
}

static void put_le64(unsigned char *out, uint64_t v) {
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * i));
}

/* Attribute payload: integers as int64 little-endian, floats as float64 little-endian,
 * strings as their bytes plus a NUL. */
static int crc_attribute(hid_t file, const char *path, const Record *rec, uint32_t *crc) {
    hid_t obj = H5Oopen(file, rec->path, H5P_DEFAULT);
    if (obj < 0) return ct_h5_fail("'%s': cannot open %s", path, rec->path);
    int rc = -1;
    hid_t attr = H5Aopen(obj, rec->attr, H5P_DEFAULT);
    if (attr < 0) {
        ct_h5_fail("'%s': cannot open attribute %s of %s", path, rec->attr, rec->path);
        goto done;
    }
    hid_t type = H5Aget_type(attr);
    H5T_class_t cls = H5Tget_class(type);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    H5Tclose(type);
    unsigned char bytes[8];
    if (cls == H5T_INTEGER) {
        int64_t v;
        if (ct_h5_attr_read_i64(attr, path, rec->path, rec->attr, &v) != 0) goto done;
        put_le64(bytes, (uint64_t)v);
        *crc = ct_crc32(*crc, bytes, 8);
    } else if (cls == H5T_FLOAT) {
        double v;
        uint64_t bits;
        if (ct_h5_attr_read_f64(attr, path, rec->path, rec->attr, &v) != 0) goto done;
        memcpy(&bits, &v, 8);
        put_le64(bytes, bits);
        *crc = ct_crc32(*crc, bytes, 8);
    } else if (cls == H5T_STRING) {
        char *s;
        if (ct_h5_attr_read_str(attr, path, rec->path, rec->attr, &s) != 0) goto done;
        *crc = ct_crc32(*crc, s, strlen(s) + 1);
        free(s);
    } else {
        ct_fail("'%s': attribute %s of %s has type %s; checkpoint attributes are integers, floats or strings", path,
                rec->attr, rec->path, type_name);
        goto done;
    }
    rc = 0;
done:
    if (attr >= 0) H5Aclose(attr);
    H5Oclose(obj);
    return rc;
}

/* Dataset payload: the elements in row-major order, numbers little-endian, fixed-length
 * strings as stored (NUL-padded). Read in slabs of whole rows. */
static int crc_dataset(hid_t file, const char *path, const char *dset_path, uint32_t *crc) {
    hid_t dset = H5Dopen2(file, dset_path, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open %s", path, dset_path);
    int rc = -1;
    void *buf = NULL;
    hid_t file_space = H5I_INVALID_HID, mem_space = H5I_INVALID_HID;
    hid_t type = H5Dget_type(dset), mem_type = H5I_INVALID_HID;
    H5T_class_t cls = H5Tget_class(type);
    char type_name[96];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
        mem_type = H5Tcopy(type);
        H5Tset_order(mem_type, H5T_ORDER_LE);
    } else if (cls == H5T_STRING && H5Tis_variable_str(type) == 0) {
        mem_type = H5Tcopy(type);
    } else {
        ct_fail("'%s': %s has type %s%s; checkpoint datasets hold numbers or fixed-length strings", path, dset_path,
                type_name, cls == H5T_STRING ? " (variable-length)" : "");
        goto done;
    }
    hsize_t dims[8] = {0};
    int rank = ckpt_dataset_shape(dset, dims);
    if (rank < 0) {
        ct_h5_fail("'%s': cannot read the shape of %s", path, dset_path);
        goto done;
    }
    size_t elem = H5Tget_size(mem_type);
    if (rank == 0) { /* a scalar dataset */
        buf = ct_malloc(elem, "checkpoint read buffer");
        if (H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            ct_h5_fail("'%s': %s: cannot read the data", path, dset_path);
            goto done;
        }
        *crc = ct_crc32(*crc, buf, elem);
        rc = 0;
        goto done;
    }
    size_t row = elem;
    for (int d = 1; d < rank; d++) row *= (size_t)dims[d];
    if (dims[0] == 0 || row == 0) {
        rc = 0; /* no elements: an empty payload */
        goto done;
    }
    hsize_t rows_per_read = row >= READ_BLOCK_BYTES ? 1 : READ_BLOCK_BYTES / row;
    if (rows_per_read > dims[0]) rows_per_read = dims[0];
    buf = ct_malloc((size_t)rows_per_read * row, "checkpoint read buffer");
    file_space = H5Dget_space(dset);
    for (hsize_t r = 0; r < dims[0]; r += rows_per_read) {
        hsize_t start[8] = {0}, count[8];
        memcpy(count, dims, sizeof count);
        start[0] = r;
        count[0] = dims[0] - r < rows_per_read ? dims[0] - r : rows_per_read;
        if (mem_space >= 0) H5Sclose(mem_space);
        mem_space = H5Screate_simple(rank, count, NULL);
        if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(dset, mem_type, mem_space, file_space, H5P_DEFAULT, buf) < 0) {
            ct_h5_fail("'%s': %s: cannot read the data", path, dset_path);
            goto done;
        }
        *crc = ct_crc32(*crc, buf, (size_t)count[0] * row);
        if (cls == H5T_FLOAT && elem == sizeof(float)) {
            const float *v = buf;
            for (size_t e = 0; e < (size_t)count[0] * row / sizeof(float); e++)
                if (!isfinite(v[e])) {
                    ct_fail("'%s': %s holds %s at element %llu: a diverged state, not one to resume from", path,
                            dset_path, ct_nonfinite_name(v[e]),
                            (unsigned long long)(r * (row / sizeof(float)) + e));
                    goto done;
                }
        }
    }
    rc = 0;
done:
    free(buf);
    if (mem_space >= 0) H5Sclose(mem_space);
    if (file_space >= 0) H5Sclose(file_space);
    if (mem_type >= 0) H5Tclose(mem_type);
    H5Tclose(type);
    H5Dclose(dset);
    return rc;
}

int ckpt_content_crc(hid_t file, const char *path, const CkptObjects *objs, uint32_t *out) {
    Records r = {NULL, 0, 0, path};
    int rc = 0;
    for (int i = 0; i < objs->count && rc == 0; i++) {
        const CkptObject *o = &objs->items[i];
        hid_t obj = H5Oopen(file, o->path, H5P_DEFAULT);
        if (obj < 0) {
            rc = ct_h5_fail("'%s': cannot open %s", path, o->path);
            break;
        }
        AttrVisit v = {&r, o->path};
        if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, NULL, list_attribute, &v) < 0)
            rc = ct_h5_fail("'%s': cannot list the attributes of %s", path, o->path);
        H5Oclose(obj);
        if (o->is_dataset) add_record(&r, o->path, NULL);
    }
    if (rc == 0) qsort(r.items, (size_t)r.count, sizeof *r.items, compare_records);
    uint32_t crc = 0;
    for (int i = 0; i < r.count && rc == 0; i++) {
        const Record *rec = &r.items[i];
        char kind = rec->attr ? 'A' : 'D';
        crc = ct_crc32(crc, &kind, 1);
        crc = ct_crc32(crc, rec->key, strlen(rec->key) + 1);
        rc = rec->attr ? crc_attribute(file, path, rec, &crc) : crc_dataset(file, path, rec->path, &crc);
    }
    for (int i = 0; i < r.count; i++) free(r.items[i].key);
    free(r.items);
    if (rc == 0) *out = crc;
    return rc;
}
