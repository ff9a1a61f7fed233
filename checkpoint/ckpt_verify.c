/* ckpt_verify.c — checkpoint_verify: everything that can be checked without a configuration.
 * The file's own /config says which model it holds, so the structure check knows every
 * object that must be there and its shape; reading every dataset checks every chunk's
 * Fletcher32 checksum; the content checksum then catches any other change. Structure is
 * checked first so that a missing or misshapen tensor is reported by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"
#include "isolate.h"

static void add_expected(CkptObjects *e, int *cap, const char *path, int is_dataset) {
    if (e->count == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        CkptObject *grown = realloc(e->items, (size_t)*cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "ctrain: error: out of memory checking a checkpoint\n");
            exit(CT_EXIT_FAILURE);
        }
        e->items = grown;
    }
    e->items[e->count].path = ct_strdup(path);
    e->items[e->count++].is_dataset = is_dataset;
}

static int compare_objects(const void *a, const void *b) {
    return strcmp(((const CkptObject *)a)->path, ((const CkptObject *)b)->path);
}

/* The float32 tensor at t->path must have the parameter's shape. */
static int check_tensor(hid_t file, const char *path, const CkptTensor *t) {
    hid_t dset = H5Dopen2(file, t->path, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open %s", path, t->path);
    hid_t type = H5Dget_type(dset);
    char type_name[96], want[64], got[160];
    ct_h5_describe_type(type, type_name, sizeof type_name);
    int is_f32 = H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
    H5Tclose(type);
    hsize_t dims[8];
    int rank = ckpt_dataset_shape(dset, dims);
    H5Dclose(dset);
    const ParamInfo *p = t->param;
    ckpt_format_shape(p->ndim, p->shape, want, sizeof want);
    int same = rank == p->ndim;
    for (int d = 0; same && d < rank; d++) same = (int64_t)dims[d] == p->shape[d];
    if (!is_f32) return ct_fail("'%s': %s has type %s, expected float32 %s", path, t->path, type_name, want);
    if (!same) {
        int64_t d64[8];
        for (int d = 0; d < rank && d < 8; d++) d64[d] = (int64_t)dims[d];
        ckpt_format_shape(rank < 0 ? 0 : rank, d64, got, sizeof got);
        return ct_fail("'%s': %s has shape %s, expected %s for the model described by /config", path, t->path, got,
                       want);
    }
    return 0;
}

/* Every dataset with elements is chunked with Fletcher32 inside the file (docs/checkpoint-format.md):
 * data in an external raw file would be read from outside the checkpoint, unchecked. */
static int check_storage(hid_t file, const char *path, const char *dset_path) {
    hid_t dset = H5Dopen2(file, dset_path, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open %s", path, dset_path);
    hid_t dcpl = H5Dget_create_plist(dset);
    hid_t space = H5Dget_space(dset);
    hssize_t elements = space >= 0 ? H5Sget_simple_extent_npoints(space) : -1;
    int external = dcpl >= 0 ? H5Pget_external_count(dcpl) : -1;
    int chunked = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED;
    unsigned flags = 0;
    size_t n_values = 0;
    char filter_name[64];
    int fletcher = chunked && H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &n_values, NULL,
                                                   sizeof filter_name, filter_name, NULL) >= 0;
    H5Eclear2(H5E_DEFAULT); /* the filter lookup reports an error when the filter is absent */
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Dclose(dset);
    if (external != 0)
        return ct_fail("'%s': %s keeps its data in an external file, outside the checkpoint; a checkpoint holds "
                       "all its data inside (not supported)",
                       path, dset_path);
    if (elements > 0 && !fletcher)
        return ct_fail("'%s': %s is not stored in chunks with the Fletcher32 checksum, as every dataset of a "
                       "checkpoint is (docs/checkpoint-format.md, \"Storage and integrity\")",
                       path, dset_path);
    return 0;
}

/* 1 with the step when path's file name is a checkpoint's, step_<digits>.h5. */
static int named_step(const char *path, long long *named) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int end = 0;
    return !strncmp(base, "step_", 5) && base[5] >= '0' && base[5] <= '9' &&
           sscanf(base, "step_%lld.h5%n", named, &end) == 1 && end > 0 && base[end] == '\0';
}

/* A file named like a checkpoint of a run, step_NNNNNNNN.h5, holds that step: resume and pruning
 * go by the names. */
static int check_name(const char *path, const CkptMeta *m) {
    long long named;
    if (!named_step(path, &named)) return 0;
    if (named != m->step)
        return ct_fail("'%s' holds step %lld, but its name says step %lld (renamed or copied over?); resume and "
                       "pruning go by the name, so it is not used",
                       path, (long long)m->step, named);
    return 0;
}

static int check_cursor(const char *path, const CkptMeta *m) {
    TokenFileInfo *files = ct_calloc((size_t)m->num_files, sizeof *files, "checkpoint file list");
    TokenSet set = {0};
    set.pattern = (char *)"the files listed in /loader/train/files";
    set.num_files = m->num_files;
    set.files = files;
    for (int i = 0; i < m->num_files; i++) {
        files[i].path = m->files[i];
        files[i].num_tokens = m->file_tokens[i];
        set.total_tokens += m->file_tokens[i];
    }
    int rc = loader_cursor_check(&set, &m->cursor);
    free(files);
    return rc != 0 ? ct_fail_prefix("'%s': /loader/train", path) : 0;
}

int ckpt_check_structure(hid_t file, const char *path, const CkptMeta *m, const CkptObjects *objs) {
    static const char *const groups[] = {"/", "/config", "/model", "/optimizer", "/loader", "/loader/train", "/metrics"};
    CkptObjects expected = {0, NULL};
    int cap = 0, rc = 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) add_expected(&expected, &cap, groups[i], 0);
    add_expected(&expected, &cap, "/loader/train/files", 1);
    add_expected(&expected, &cap, "/loader/train/file_tokens", 1);
    if (m->format_version >= 2) {
        add_expected(&expected, &cap, "/loader/train/file_crc32", 1);
        add_expected(&expected, &cap, "/loader/train/file_sample_crc32", 1);
    }
    if (m->optional.ema) add_expected(&expected, &cap, "/ema", 0);
    if (m->optional.swa) add_expected(&expected, &cap, "/swa", 0);
    if (m->optional.qat) add_expected(&expected, &cap, "/qat", 0);
    if (m->optional.loop) add_expected(&expected, &cap, "/loop", 0);
    CkptTensor *list;
    int n;
    ckpt_tensor_list(&m->spec, m->optional, &list, &n);
    for (int i = 0; i < n; i++) {
        add_expected(&expected, &cap, list[i].path, 1);
        if (list[i].buffer == CKPT_BUF_EXP_AVG || list[i].buffer == CKPT_BUF_MOMENTUM) {
            char group[CKPT_PATH_MAX];
            snprintf(group, sizeof group, "/optimizer/%s", list[i].param->name);
            add_expected(&expected, &cap, group, 0);
        }
    }
    qsort(expected.items, (size_t)expected.count, sizeof *expected.items, compare_objects);

    /* Missing objects first, tensors in state_dict order: the most useful thing to report. */
    for (int i = 0; i < n && rc == 0; i++)
        if (ckpt_objects_find(objs, list[i].path) < 0) {
            char want[64];
            ckpt_format_shape(list[i].param->ndim, list[i].param->shape, want, sizeof want);
            rc = ct_fail("'%s': %s is missing (expected float32 %s for the model described by /config)", path,
                         list[i].path, want);
        }
    for (int i = 0; i < expected.count && rc == 0; i++) {
        int at = ckpt_objects_find(objs, expected.items[i].path);
        if (at < 0) rc = ct_fail("'%s': %s is missing (every checkpoint has it)", path, expected.items[i].path);
        else if (objs->items[at].is_dataset != expected.items[i].is_dataset)
            rc = ct_fail("'%s': %s is a %s, expected a %s", path, expected.items[i].path,
                         objs->items[at].is_dataset ? "dataset" : "group",
                         expected.items[i].is_dataset ? "dataset" : "group");
    }
    for (int i = 0; i < objs->count && rc == 0; i++)
        if (ckpt_objects_find(&expected, objs->items[i].path) < 0)
            rc = ct_fail("'%s': unexpected %s %s (not part of a checkpoint of the model described by /config)", path,
                         objs->items[i].is_dataset ? "dataset" : "group", objs->items[i].path);
    for (int i = 0; i < n && rc == 0; i++) rc = check_tensor(file, path, &list[i]);
    for (int i = 0; i < objs->count && rc == 0; i++)
        if (objs->items[i].is_dataset) rc = check_storage(file, path, objs->items[i].path);
    if (rc == 0) rc = check_cursor(path, m);
    free(list);
    ckpt_objects_free(&expected);
    return rc;
}

int ckpt_verify_open(hid_t file, const char *path, CkptMeta *m) {
    if (ckpt_meta_read(file, path, m) != 0 || check_name(path, m) != 0) return -1;
    /* values the command line would refuse (a damaged or hand-edited /config); world size 1
     * divides every accumulation, since the file may be resumed on another world size */
    if (config_validate(&m->cfg, 1) != 0) return ct_fail_prefix("'%s': /config", path);
    const int64_t per_step = config_step_stream_tokens(&m->cfg);
    if (m->cursor.stream_tokens != m->step * per_step)
        return ct_fail("'%s': the loader has taken %lld tokens (/loader/train stream_tokens), but step %lld of this "
                       "batch geometry takes %lld (%lld per step)",
                       path, (long long)m->cursor.stream_tokens, (long long)m->step, (long long)(m->step * per_step),
                       (long long)per_step);
    CkptObjects objs;
    if (ckpt_list_objects(file, path, &objs) != 0) return -1;
    uint32_t crc = 0;
    int rc = ckpt_check_structure(file, path, m, &objs);
    if (rc == 0) rc = ckpt_content_crc(file, path, &objs, &crc);
    if (rc == 0 && crc != m->content_crc32)
        rc = ct_fail("'%s': content checksum mismatch: content_crc32 is 0x%08x but the contents give 0x%08x (the "
                     "file was changed or damaged after it was written)",
                     path, m->content_crc32, crc);
    ckpt_objects_free(&objs);
    return rc;
}

/* The verification itself; run in a child process by checkpoint_verify. */
static int verify_here(void *ctx, void *out) {
    const char *path = ctx;
    CheckpointSummary *summary = out;
    ct_hdf5_lock();
    CkptMeta m;
    memset(&m, 0, sizeof m);
    int rc = -1;
    hid_t file = ckpt_open_read(path);
    if (file >= 0) {
        rc = ckpt_verify_open(file, path, &m);
        H5Fclose(file);
    }
    if (rc == 0) {
        CkptTensor *list;
        summary->step = m.step;
        summary->content_crc32 = m.content_crc32;
        ckpt_tensor_list(&m.spec, m.optional, &list, &summary->num_tensors);
        free(list);
    }
    ckpt_meta_free(&m);
    ct_hdf5_unlock();
    return rc;
}

int checkpoint_verify(const char *path, CheckpointSummary *summary) {
    /* Damaged HDF5 metadata can crash or hang the library itself (HDF5 1.10 segfaults on some
     * flipped bytes in object headers), so the file is verified in a child process: a crash is
     * then one more reason the file is invalid, and resume=auto falls back past it instead of
     * crashing on every requeue. Reading is ~1 GB/s; the time limit leaves ample room. */
    struct stat st;
    double limit_s = 120.0 + (stat(path, &st) == 0 ? (double)st.st_size / 20e6 : 0.0);
    char what[4300];
    snprintf(what, sizeof what, "checking '%s' (damaged HDF5 structure?)", path);
    CheckpointSummary s;
    memset(&s, 0, sizeof s);
    int rc = ct_run_isolated(what, verify_here, (void *)path, &s, sizeof s, limit_s);
    if (rc == 0 && summary) *summary = s;
    return rc;
}

/* A root attribute of path read as an integer, without a message: 1 with *value, else 0 (no
 * such file, attribute or integer). Takes the lock. */
static int peek_root_i64(const char *path, const char *name, int64_t *value) {
    ct_hdf5_lock();
    int found = 0;
    hid_t fapl = ckpt_fapl();
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (file >= 0) {
        hid_t attr = H5I_INVALID_HID;
        found = ct_h5_attr_find(file, path, NULL, name, &attr) == 1 &&
                ct_h5_attr_read_i64(attr, path, NULL, name, value) == 0;
        if (attr >= 0) H5Aclose(attr);
        H5Fclose(file);
    }
    H5Eclear2(H5E_DEFAULT);
    ct_hdf5_unlock();
    return found;
}

int ckpt_newer_format(const char *path, int64_t *version) {
    int64_t v;
    if (!peek_root_i64(path, "format_version", &v) || v <= CKPT_FORMAT_VERSION) return 0;
    *version = v;
    return 1;
}

int ckpt_misnamed(const char *path, int64_t *held) {
    long long named;
    int64_t step;
    if (!named_step(path, &named) || !peek_root_i64(path, "step", &step) || step == named) return 0;
    *held = step;
    return 1;
}
