/* ckpt_write.c — checkpoint_save: writes the HDF5 file under a temporary name, checksums it,
 * and commits it with fsync + rename, then moves `latest` and prunes old checkpoints
 * (ckpt_dir.c). The order of those steps is what makes a crash at any moment harmless: the
 * final name only ever refers to a complete, fsynced file, and `latest` is replaced only
 * after the file it names is durable. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "common.h"
#include "fault.h"
#include "h5util.h"

/* ---- writing the file (lock held) ---- */

/* Creation properties without modification times, so the file's bytes depend only on what is
 * saved (and `created`): two saves of the same state differ in nothing else. */
static hid_t group_plist(void) {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0);
    return gcpl;
}

/* Failures in this file are reported where they happen (ct_h5_fail naming the object), since
 * the next HDF5 call clears the error stack; write_file adds the file name. */
static hid_t create_group(hid_t parent, const char *name) {
    hid_t gcpl = group_plist();
    hid_t g = H5Gcreate2(parent, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (g < 0) ct_h5_fail("cannot create group %s", name);
    H5Pclose(gcpl);
    return g;
}

/* A chunked, Fletcher32-checksummed dataset of rank <= 3 holding data (mem_type) as file_type. Chunks are
 * the whole dataset up to CKPT_CHUNK_MAX_ELEMENTS, else slabs of whole rows. An empty dataset
 * (e.g. skip_weights of a 1-layer model) is contiguous: HDF5 rejects zero-sized chunks. */
static int write_dataset(hid_t parent, const char *name, hid_t file_type, hid_t mem_type, int rank,
                         const hsize_t *dims, const void *data) {
    hsize_t elements = 1, row = 1, chunk[3];
    for (int d = 0; d < rank; d++) elements *= dims[d];
    for (int d = 1; d < rank; d++) row *= dims[d];
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    if (elements > 0) {
        hsize_t rows = row >= (hsize_t)CKPT_CHUNK_MAX_ELEMENTS ? 1 : (hsize_t)CKPT_CHUNK_MAX_ELEMENTS / row;
        chunk[0] = rows < dims[0] ? rows : dims[0];
        for (int d = 1; d < rank; d++) chunk[d] = dims[d];
        H5Pset_chunk(dcpl, rank, chunk);
        H5Pset_fletcher32(dcpl);
    }
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dset = H5Dcreate2(parent, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = dset < 0 ? ct_h5_fail("cannot create dataset %s", name) : 0;
    if (rc == 0 && elements > 0 && H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        rc = ct_h5_fail("cannot write dataset %s", name);
    if (dset >= 0) H5Dclose(dset);
    H5Sclose(space);
    H5Pclose(dcpl);
    return rc;
}

static int write_tensor(hid_t parent, const char *name, const ParamInfo *p, const float *data) {
    hsize_t dims[3] = {(hsize_t)p->shape[0], (hsize_t)p->shape[1], (hsize_t)p->shape[2]};
    return write_dataset(parent, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, p->ndim, dims, data);
}

static int write_root_attributes(hid_t file, const CheckpointInfo *info) {
    char created[32];
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &utc);
    if (ct_h5_attr_write_str(file, "format", CKPT_FORMAT) != 0 ||
        ct_h5_attr_write_i32(file, "format_version", CKPT_FORMAT_VERSION) != 0 ||
        ct_h5_attr_write_i64(file, "step", info->step) != 0 ||
        ct_h5_attr_write_i64(file, "train_tokens", info->train_tokens) != 0 ||
        ct_h5_attr_write_i32(file, "world_size", info->world_size) != 0 ||
        ct_h5_attr_write_str(file, "created", created) != 0 ||
        ct_h5_attr_write_str(file, "ctrain_version", CT_VERSION) != 0 ||
        ct_h5_attr_write_f64(file, "training_time_ms", info->training_time_ms) != 0 ||
        ct_h5_attr_write_str(file, "device", info->device) != 0 ||
        (info->stack && ct_h5_attr_write_str(file, "stack", info->stack) != 0) ||
        ckpt_lineage_write(file, &info->lineage) != 0)
        return -1;
    return 0;
}

static int write_config(hid_t file, const Config *cfg) {
    hid_t g = create_group(file, "config");
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; i < ct_config_num_keys && rc == 0; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        const void *p = (const char *)cfg + k->offset;
        switch (k->type) {
        case CT_KEY_INT:
        case CT_KEY_BOOL: rc = ct_h5_attr_write_i64(g, k->name, *(const int64_t *)p); break;
        case CT_KEY_FLOAT: rc = ct_h5_attr_write_f64(g, k->name, *(const double *)p); break;
        case CT_KEY_STR: {
            const char *s = *(const char *const *)p;
            rc = ct_h5_attr_write_str(g, k->name, s ? s : "");
            break;
        }
        }
    }
    H5Gclose(g);
    return rc;
}

/* /ema, /swa (with its count) and /qat (its switch), as opt has them (docs/checkpoint-format.md,
 * "Weight averaging and QAT"). */
static int write_optional(hid_t file, const TrainState *st, CkptOptional opt, const CkptTensor *list, int n) {
    int rc = 0;
    hid_t ema = H5I_INVALID_HID, swa = H5I_INVALID_HID;
    if (opt.ema && (ema = create_group(file, "ema")) < 0) rc = -1;
    if (rc == 0 && opt.swa &&
        ((swa = create_group(file, "swa")) < 0 || ct_h5_attr_write_i64(swa, "count", st->swa_count) != 0))
        rc = -1;
    for (int i = 0; i < n && rc == 0; i++) {
        if (list[i].buffer != CKPT_BUF_EMA && list[i].buffer != CKPT_BUF_SWA) continue;
        const ParamInfo *p = list[i].param;
        rc = write_tensor(list[i].buffer == CKPT_BUF_EMA ? ema : swa, p->name, p,
                          ckpt_tensor_buffer(st, list[i].buffer) + p->offset);
        if (rc != 0) ct_fail_prefix("%s", list[i].path);
    }
    if (ema >= 0) H5Gclose(ema);
    if (swa >= 0) H5Gclose(swa);
    if (rc == 0 && opt.qat) {
        hid_t qat = create_group(file, "qat");
        if (qat < 0 || ct_h5_attr_write_i64(qat, "active", st->qat_active) != 0) rc = -1;
        if (qat >= 0) H5Gclose(qat);
    }
    if (rc == 0 && opt.loop) {
        hid_t loop = create_group(file, "loop");
        if (loop < 0 || ct_h5_attr_write_i64(loop, "active", st->loop_active) != 0) rc = -1;
        if (loop >= 0) H5Gclose(loop);
    }
    return rc;
}

static int write_tensors(hid_t file, const TrainState *st, CkptOptional opt) {
    CkptTensor *list;
    int n;
    ckpt_tensor_list(&st->spec, opt, &list, &n);
    int rc = 0;
    hid_t model = create_group(file, "model"), optim = H5I_INVALID_HID;
    if (model < 0) rc = -1;
    for (int i = 0; i < n && rc == 0 && list[i].buffer == CKPT_BUF_PARAMS; i++)
        rc = write_tensor(model, list[i].param->name, list[i].param, st->params + list[i].param->offset);
    ckpt_stage("tmp-half-written");
    if (rc != 0) ct_fail_prefix("/model");
    if (rc == 0 && ((optim = create_group(file, "optimizer")) < 0 ||
                    ct_h5_attr_write_i64(optim, "adam_step", st->adam_step) != 0))
        rc = -1;
    /* One group per parameter holding its optimizer buffer(s), as torch's state[param]. */
    for (int i = 0; i < n && rc == 0; i++) {
        const CkptTensor *t = &list[i];
        if (t->buffer == CKPT_BUF_PARAMS || t->buffer == CKPT_BUF_EMA || t->buffer == CKPT_BUF_SWA) continue;
        hid_t g;
        if (t->buffer == CKPT_BUF_EXP_AVG_SQ) g = H5Gopen2(optim, t->param->name, H5P_DEFAULT);
        else g = create_group(optim, t->param->name);
        if (g < 0) {
            rc = t->buffer == CKPT_BUF_EXP_AVG_SQ ? ct_h5_fail("cannot open group %s", t->param->name) : -1;
            break;
        }
        const char *leaf = strrchr(t->path, '/') + 1;
        rc = write_tensor(g, leaf, t->param, ckpt_tensor_buffer(st, t->buffer) + t->param->offset);
        H5Gclose(g);
        if (rc != 0) ct_fail_prefix("/optimizer/%s", t->param->name);
    }
    if (optim >= 0) H5Gclose(optim);
    if (model >= 0) H5Gclose(model);
    if (rc == 0) rc = write_optional(file, st, opt, list, n);
    free(list);
    return rc;
}

/* /loader/train: the cursor, and the file list with token counts and content checksums so
 * that a resume against different data is refused. Paths are fixed-length strings so that Fletcher32 covers their
 * bytes (a variable-length string's bytes live outside the dataset's chunks). */
static int write_loader(hid_t file, const CheckpointInfo *info, const TokenSet *set) {
    hid_t loader = create_group(file, "loader");
    if (loader < 0) return -1;
    hid_t train = create_group(loader, "train");
    H5Gclose(loader);
    if (train < 0) return -1;
    int rc = 0;
    if (ct_h5_attr_write_i64(train, "file_index", info->cursor.file_index) != 0 ||
        ct_h5_attr_write_i64(train, "position", info->cursor.position) != 0 ||
        ct_h5_attr_write_i64(train, "stream_tokens", info->cursor.stream_tokens) != 0)
        rc = -1;
    size_t width = 1;
    for (int i = 0; i < set->num_files; i++)
        if (strlen(set->files[i].path) + 1 > width) width = strlen(set->files[i].path) + 1;
    char *names = ct_calloc((size_t)set->num_files, width, "checkpoint file list");
    int64_t *tokens = ct_calloc((size_t)set->num_files, 3 * sizeof *tokens, "checkpoint file list");
    int64_t *crc = tokens + set->num_files, *sample = crc + set->num_files;
    for (int i = 0; i < set->num_files; i++) {
        memcpy(names + (size_t)i * width, set->files[i].path, strlen(set->files[i].path));
        tokens[i] = set->files[i].num_tokens;
        crc[i] = set->files[i].tokens_crc32;
        sample[i] = set->files[i].sample_crc32;
    }
    hsize_t n = (hsize_t)set->num_files;
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, width);
    H5Tset_strpad(str, H5T_STR_NULLTERM);
    H5Tset_cset(str, H5T_CSET_UTF8);
    if (rc == 0 && (write_dataset(train, "files", str, str, 1, &n, names) != 0 ||
                    write_dataset(train, "file_tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n, tokens) != 0 ||
                    write_dataset(train, "file_crc32", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n, crc) != 0 ||
                    write_dataset(train, "file_sample_crc32", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, &n, sample) != 0))
        rc = -1;
    H5Tclose(str);
    free(names);
    free(tokens);
    H5Gclose(train);
    return rc;
}

static int write_metrics(hid_t file, const CheckpointInfo *info) {
    hid_t g = create_group(file, "metrics");
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; i < info->num_extras && rc == 0; i++)
        rc = ct_h5_attr_write_f64(g, info->extra_names[i], info->extra_values[i]);
    H5Gclose(g);
    return rc;
}

/* Write the whole file at tmp_path, including its content checksum. Lock held. */
static int write_file(const char *tmp_path, const Config *cfg, const TrainState *st, const CheckpointInfo *info,
                      const TokenSet *set) {
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = ckpt_fapl();
    H5Pset_obj_track_times(fcpl, 0);
    hid_t file = H5Fcreate(tmp_path, H5F_ACC_TRUNC, fcpl, fapl);
    if (file < 0) ct_h5_fail("cannot create '%s'", tmp_path);
    H5Pclose(fcpl);
    H5Pclose(fapl);
    if (file < 0) return -1;
    int rc = 0;
    const char *what = "";
    if (write_root_attributes(file, info) != 0) what = "root attributes";
    else if (write_config(file, cfg) != 0) what = "/config";
    else if (write_tensors(file, st, ckpt_optional(cfg)) != 0) what = "tensors";
    else if (write_loader(file, info, set) != 0) what = "/loader/train";
    else if (write_metrics(file, info) != 0) what = "/metrics";
    if (what[0]) rc = ct_fail_prefix("'%s': writing the %s", tmp_path, what);

    /* The checksum is computed by reading the file back through HDF5 with the same code that
     * verifies it, so writer and reader cannot disagree about what it covers. */
    CkptObjects objs = {0, NULL};
    uint32_t crc = 0;
    if (rc == 0 && H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
        rc = ct_h5_fail("'%s': cannot flush", tmp_path);
    if (rc == 0 && ckpt_list_objects(file, tmp_path, &objs) == 0 && ckpt_content_crc(file, tmp_path, &objs, &crc) == 0) {
        if (ct_h5_attr_write_u32(file, "content_crc32", crc) != 0) rc = ct_fail_prefix("'%s'", tmp_path);
    } else if (rc == 0) {
        rc = ct_fail_prefix("checksumming the new checkpoint");
    }
    ckpt_objects_free(&objs);
    if (H5Fclose(file) < 0 && rc == 0) rc = ct_h5_fail("'%s': cannot finish writing (disk full?)", tmp_path);
    return rc;
}

/* ---- checks before anything is written ---- */

/* A diverged state is never published: resuming from it could only fail again, and resume=auto
 * would keep choosing it over the good checkpoint before it. */
static int check_finite(const TrainState *st, CkptOptional opt, const CheckpointInfo *info) {
    for (int i = 0; i < info->num_extras; i++)
        if (!isfinite(info->extra_values[i]))
            return ct_fail("metric %s is %g: training diverged; no checkpoint is written from this state",
                           info->extra_names[i], info->extra_values[i]);
    CkptTensor *list;
    int n;
    if (ckpt_tensor_list(&st->spec, opt, &list, &n) != 0) return -1;
    int rc = 0;
    for (int t = 0; t < n && rc == 0; t++) {
        const float *v = ckpt_tensor_buffer(st, list[t].buffer) + list[t].param->offset;
        for (size_t e = 0; e < list[t].param->count; e++)
            if (!isfinite(v[e])) {
                rc = ct_fail("%s holds %s at element %zu: training diverged; no checkpoint is written from this state "
                             "(lower the learning rates or enable grad_clip_norm)",
                             list[t].path, ct_nonfinite_name(v[e]), e);
                break;
            }
    }
    free(list);
    return rc;
}

static int check_request(const Config *cfg, const TrainState *st, const CheckpointInfo *info, const TokenSet *set,
                         int keep) {
    if (keep < 1) return ct_fail("keep_checkpoints = %d: expected >= 1", keep);
    if (info->step < 0 || info->train_tokens < 0)
        return ct_fail("step %lld / train_tokens %lld: expected >= 0", (long long)info->step,
                       (long long)info->train_tokens);
    if (info->world_size < 1) return ct_fail("world_size %d: expected >= 1", info->world_size);
    if (!info->device || !info->device[0]) return ct_fail("device is not set");
    if (!set || set->num_files < 1) return ct_fail("no training data set given to record in the checkpoint");
    for (int i = 0; i < set->num_files; i++)
        if (set->files[i].sample_crc32 < 0)
            return ct_fail("the identity of training file '%s' was not computed (data_fingerprint)", set->files[i].path);
    if (loader_cursor_check(set, &info->cursor) != 0) return ct_fail_prefix("checkpoint of step %lld", (long long)info->step);
    for (int i = 0; i < info->num_extras; i++) {
        const char *name = info->extra_names[i];
        if (!name || !name[0] || strchr(name, '/') || !strcmp(name, "."))
            return ct_fail("metric name '%s': expected a non-empty name without '/'", name ? name : "(null)");
        for (int j = 0; j < i; j++)
            if (!strcmp(name, info->extra_names[j])) return ct_fail("metric '%s' is given twice", name);
    }
    /* The tensors must be those of the model the saved /config describes, or the checkpoint
     * would contradict itself. */
    ModelSpec spec;
    if (model_spec_init(&spec, cfg) != 0) return -1;
    int same = spec.num_params == st->spec.num_params && spec.total_floats == st->spec.total_floats;
    for (int i = 0; same && i < spec.num_params; i++)
        same = !strcmp(spec.params[i].name, st->spec.params[i].name) &&
               spec.params[i].count == st->spec.params[i].count && spec.params[i].offset == st->spec.params[i].offset;
    model_spec_free(&spec);
    if (!same) return ct_fail("the training state does not match the model of the configuration being saved");
    const CkptOptional opt = ckpt_optional(cfg);
    if (opt.ema != (st->ema != NULL) || opt.swa != (st->swa_sum != NULL))
        return ct_fail("the training state %s EMA weights and %s SWA sum, but the configuration being saved says "
                       "ema_enabled = %lld, swa_enabled = %lld",
                       st->ema ? "has" : "has no", st->swa_sum ? "a" : "no", (long long)cfg->ema_enabled,
                       (long long)cfg->swa_enabled);
    if (st->swa_count < 0 || (st->swa_count > 0 && !st->swa_sum))
        return ct_fail("swa_count %lld: expected a count >= 0 (0 without SWA)", (long long)st->swa_count);
    if (st->qat_active != 0 && (st->qat_active != 1 || !opt.qat))
        return ct_fail("qat_active %d: expected 0 or 1, and 0 unless qat_enabled or late_qat is set", st->qat_active);
    if (st->loop_active != 0 && (st->loop_active != 1 || !opt.loop))
        return ct_fail("loop_active %d: expected 0 or 1, and 0 unless num_loops > 0", st->loop_active);
    return check_finite(st, opt, info);
}

/* ---- checkpoint_save ---- */

int checkpoint_save(const char *dir, const Config *cfg, const TrainState *st, const CheckpointInfo *info,
                    const TokenSet *train_set, int keep, char *path_out, size_t path_cap) {
    if (path_out && path_cap) path_out[0] = '\0';
    if (check_request(cfg, st, info, train_set, keep) != 0) return -1;
    char name[64], final_path[4200], tmp_path[4300];
    snprintf(name, sizeof name, "step_%08lld.h5", (long long)info->step);
    if ((size_t)snprintf(final_path, sizeof final_path, "%s/%s", dir, name) >= sizeof final_path)
        return ct_fail("checkpoint directory path too long: '%s'", dir);
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp.%ld", final_path, (long)getpid());
    if (path_out && strlen(final_path) >= path_cap)
        return ct_fail("buffer of %zu bytes too small for the checkpoint path '%s'", path_cap, final_path);
    int64_t newer_version;
    if (ckpt_newer_format(final_path, &newer_version))
        return ct_fail("not replacing '%s': it was written by a newer ctrain (format %lld; this ctrain %s writes "
                       "format %d); use another out_dir",
                       final_path, (long long)newer_version, CT_VERSION, CKPT_FORMAT_VERSION);
    if (ct_mkdir_p(dir) != 0) return ct_fail_prefix("checkpoint directory");
    /* The directory's own entry must be durable too, or the first checkpoint of a run could
     * vanish with it after a crash. */
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/') parent[--n] = '\0';
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
    if (ckpt_fsync_path(parent, 1) != 0) return ct_fail_prefix("checkpoint directory");

    ct_hdf5_lock();
    int rc = write_file(tmp_path, cfg, st, info, train_set);
    ct_hdf5_unlock();
    if (rc == 0) {
        ckpt_stage("tmp-written");
        fault_point_checkpoint(info->step); /* CTRAIN_FAULT=KILL@ckpt:N (tests/cli/test_resume.sh) */
        rc = ckpt_fsync_path(tmp_path, 0);
    }
    if (rc == 0 && rename(tmp_path, final_path) != 0)
        rc = ct_fail("cannot rename '%s' to '%s': %s", tmp_path, final_path, strerror(errno));
    if (rc != 0) {
        unlink(tmp_path);
        return ct_fail_prefix("writing checkpoint '%s'", final_path);
    }
    if (ckpt_fsync_path(dir, 1) != 0) return ct_fail_prefix("checkpoint '%s' written", final_path);
    ckpt_stage("renamed");
    if (ckpt_write_latest(dir, name) != 0)
        return ct_fail_prefix("checkpoint '%s' written, but %s/latest still names the previous one", final_path, dir);
    ckpt_prune(dir, keep, name);
    if (path_out) snprintf(path_out, path_cap, "%s", final_path);
    return 0;
}
