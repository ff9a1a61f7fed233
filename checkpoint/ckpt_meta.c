/* ckpt_meta.c — reads everything in a checkpoint except the tensors: the root attributes,
 * the configuration (/config, turned back into a Config and the ModelSpec it describes), the
 * Adam step, the loader cursor and data file list, and the /metrics scalars. Type and format
 * problems are reported naming the attribute or dataset. Lock held throughout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"

static hid_t open_group(hid_t file, const char *path, const char *group) {
    htri_t exists = H5Lexists(file, group, H5P_DEFAULT);
    if (exists <= 0) {
        if (exists < 0) ct_h5_fail("'%s': cannot look up %s", path, group);
        else ct_fail("'%s': %s is missing (every checkpoint has it)", path, group);
        return H5I_INVALID_HID;
    }
    hid_t g = H5Gopen2(file, group, H5P_DEFAULT);
    if (g < 0) ct_h5_fail("'%s': %s is not a group", path, group);
    return g;
}

static int read_root(hid_t file, const char *path, CkptMeta *m) {
    char *format = NULL;
    htri_t has = H5Aexists(file, "format");
    if (has <= 0) {
        if (has < 0) return ct_h5_fail("'%s': cannot read the root attributes", path);
        return ct_fail("'%s' has no root attribute 'format': not a ctrain checkpoint", path);
    }
    if (ckpt_attr_read_str(file, path, "/", "format", &format) != 0) return -1;
    int ok = !strcmp(format, CKPT_FORMAT);
    if (!ok) ct_fail("'%s': root attribute format is '%.100s', expected '%s': not a ctrain checkpoint", path, format,
                     CKPT_FORMAT);
    free(format);
    if (!ok) return -1;
    if (ckpt_attr_read_i64(file, path, "/", "format_version", &m->format_version) != 0) return -1;
    if (m->format_version < CKPT_FORMAT_VERSION_OLDEST || m->format_version > CKPT_FORMAT_VERSION)
        return ct_fail("'%s': format_version is %lld; this ctrain (%s) reads format_version %d to %d%s", path,
                       (long long)m->format_version, CT_VERSION, CKPT_FORMAT_VERSION_OLDEST, CKPT_FORMAT_VERSION,
                       m->format_version > CKPT_FORMAT_VERSION ? " (the file was written by a newer ctrain)" : "");
    int64_t crc;
    if (ckpt_attr_read_i64(file, path, "/", "step", &m->step) != 0 ||
        ckpt_attr_read_i64(file, path, "/", "train_tokens", &m->train_tokens) != 0 ||
        ckpt_attr_read_i64(file, path, "/", "world_size", &m->world_size) != 0 ||
        ckpt_attr_read_f64(file, path, "/", "training_time_ms", &m->training_time_ms) != 0 ||
        ckpt_attr_read_str(file, path, "/", "created", &m->created) != 0 ||
        ckpt_attr_read_str(file, path, "/", "ctrain_version", &m->ctrain_version) != 0 ||
        ckpt_attr_read_str(file, path, "/", "device", &m->device) != 0 ||
        ckpt_attr_read_i64(file, path, "/", "content_crc32", &crc) != 0)
        return -1;
    /* the software stack: optional (files of a ctrain that did not record it lack it) */
    htri_t has_stack = H5Aexists(file, "stack");
    if (has_stack < 0) return ct_h5_fail("'%s': cannot look up the root attribute stack", path);
    if (has_stack > 0 && ckpt_attr_read_str(file, path, "/", "stack", &m->stack) != 0) return -1;
    if (ckpt_lineage_read(file, path, &m->lineage) != 0) return -1;
    if (crc < 0 || crc > (int64_t)UINT32_MAX)
        return ct_fail("'%s': content_crc32 is %lld, expected a 32-bit checksum", path, (long long)crc);
    m->content_crc32 = (uint32_t)crc;
    if (m->step < 0 || m->train_tokens < 0 || m->world_size < 1)
        return ct_fail("'%s': step %lld, train_tokens %lld, world_size %lld: expected step, train_tokens >= 0 and "
                       "world_size >= 1", path, (long long)m->step, (long long)m->train_tokens, (long long)m->world_size);
    return 0;
}

/* /config attributes that no key of this build's table has (from another ctrain version). */
static herr_t note_unknown_key(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    (void)obj;
    (void)info;
    CkptMeta *m = data;
    if (config_find_key(name)) return 0;
    char **grown = realloc(m->unknown_keys, (size_t)(m->num_unknown_keys + 1) * sizeof *grown);
    if (!grown) return -1;
    m->unknown_keys = grown;
    m->unknown_keys[m->num_unknown_keys++] = ct_strdup(name);
    return 0;
}

/* Divisions model_spec_init relies on; a damaged /config must fail here, not divide by zero. */
static int check_model_keys(const char *path, const Config *c) {
    if (c->vocab_size < 1 || c->num_layers < 1 || c->model_dim < 1 || c->num_heads < 1 || c->num_kv_heads < 1 ||
        !(c->mlp_mult > 0 && c->mlp_mult <= 1024) || c->model_dim % c->num_heads != 0 || c->num_heads % c->num_kv_heads != 0 ||
        c->model_dim > (1 << 20) || c->num_layers > 100000)
        return ct_fail("'%s': /config describes no valid model (vocab_size %lld, num_layers %lld, model_dim %lld, "
                       "num_heads %lld, num_kv_heads %lld, mlp_mult %g)",
                       path, (long long)c->vocab_size, (long long)c->num_layers, (long long)c->model_dim,
                       (long long)c->num_heads, (long long)c->num_kv_heads, c->mlp_mult);
    return 0;
}

/* A float key; checkpoints written while the key was an integer (mlp_mult before it took
 * fractional values) hold an integer attribute, read as its value. */
static int read_float_key(hid_t g, const char *path, const char *name, double *value) {
    hid_t attr = H5Aopen(g, name, H5P_DEFAULT);
    if (attr < 0) return ct_h5_fail("'%s': cannot open attribute %s of /config", path, name);
    hid_t type = H5Aget_type(attr);
    int integer = type >= 0 && H5Tget_class(type) == H5T_INTEGER;
    if (type >= 0) H5Tclose(type);
    H5Aclose(attr);
    if (!integer) return ckpt_attr_read_f64(g, path, "/config", name, value);
    int64_t v;
    if (ckpt_attr_read_i64(g, path, "/config", name, &v) != 0) return -1;
    *value = (double)v;
    return 0;
}

static int read_config(hid_t file, const char *path, CkptMeta *m) {
    hid_t g = open_group(file, path, "/config");
    if (g < 0) return -1;
    int rc = 0;
    for (int i = 0; i < ct_config_num_keys && rc == 0; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        htri_t has = H5Aexists(g, k->name);
        if (has < 0) rc = ct_h5_fail("'%s': cannot look up attribute %s of /config", path, k->name);
        if (has <= 0) continue; /* older file: the key keeps its default */
        m->cfg_present[i] = 1;
        void *field = (char *)&m->cfg + k->offset;
        switch (k->type) {
        case CT_KEY_INT: rc = ckpt_attr_read_i64(g, path, "/config", k->name, field); break;
        case CT_KEY_BOOL:
            rc = ckpt_attr_read_i64(g, path, "/config", k->name, field);
            if (rc == 0 && *(int64_t *)field != 0 && *(int64_t *)field != 1)
                rc = ct_fail("'%s': attribute %s of /config is %lld, expected 0 or 1", path, k->name,
                             (long long)*(int64_t *)field);
            break;
        case CT_KEY_FLOAT: rc = read_float_key(g, path, k->name, field); break;
        case CT_KEY_STR: {
            char *s;
            rc = ckpt_attr_read_str(g, path, "/config", k->name, &s);
            if (rc == 0) {
                free(*(char **)field);
                *(char **)field = s;
            }
            break;
        }
        }
    }
    if (rc == 0 && H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, note_unknown_key, m) < 0)
        rc = ct_h5_fail("'%s': cannot list the attributes of /config", path);
    H5Gclose(g);
    if (rc == 0) rc = check_model_keys(path, &m->cfg);
    if (rc == 0 && model_spec_init(&m->spec, &m->cfg) != 0)
        rc = ct_fail_prefix("'%s': the model described by /config", path);
    return rc;
}

/* A per-file int64 dataset of /loader/train holding CRC-32s (-1 allowed where may_be_absent). */
static int read_identity(hid_t train, const char *path, const char *name, hsize_t n, int may_be_absent,
                         int64_t **out) {
    hid_t dset = H5Dopen2(train, name, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open /loader/train/%s", path, name);
    hid_t type = H5Dget_type(dset);
    H5T_class_t cls = H5Tget_class(type);
    H5Tclose(type);
    hsize_t len = 0;
    if (cls != H5T_INTEGER || ckpt_dataset_shape(dset, &len) != 1 || len != n) {
        H5Dclose(dset);
        return ct_fail("'%s': /loader/train/%s must be a 1-D int64 dataset with one value per file (%llu files)", path,
                       name, (unsigned long long)n);
    }
    *out = ct_calloc((size_t)n, sizeof **out, "checkpoint file list");
    herr_t read = H5Dread(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out);
    H5Dclose(dset);
    if (read < 0) return ct_h5_fail("'%s': /loader/train/%s: cannot read the data", path, name);
    for (hsize_t i = 0; i < n; i++)
        if ((*out)[i] < (may_be_absent ? -1 : 0) || (*out)[i] > (int64_t)UINT32_MAX)
            return ct_fail("'%s': /loader/train/%s[%llu] is %lld, expected a CRC-32 (0 .. 4294967295)%s", path, name,
                           (unsigned long long)i, (long long)(*out)[i], may_be_absent ? " or -1 (none)" : "");
    return 0;
}

/* /loader/train/files (fixed-length strings) and file_tokens (int64), equally long; from
 * format 2 on, file_crc32 and file_sample_crc32 too. */
static int read_file_list(hid_t train, const char *path, CkptMeta *m) {
    hid_t files = H5Dopen2(train, "files", H5P_DEFAULT), tokens = H5I_INVALID_HID;
    hid_t ftype = H5I_INVALID_HID, mtype = H5I_INVALID_HID;
    char *buf = NULL;
    int rc = -1;
    if (files < 0) {
        ct_h5_fail("'%s': cannot open /loader/train/files", path);
        goto done;
    }
    ftype = H5Dget_type(files);
    if (H5Tget_class(ftype) != H5T_STRING || H5Tis_variable_str(ftype) != 0) {
        char type_name[96];
        ct_h5_describe_type(ftype, type_name, sizeof type_name);
        ct_fail("'%s': /loader/train/files has type %s%s, expected fixed-length strings", path, type_name,
                H5Tis_variable_str(ftype) > 0 ? " (variable-length)" : "");
        goto done;
    }
    hsize_t n = 0, n_tokens = 0;
    if (ckpt_dataset_shape(files, &n) != 1) {
        ct_fail("'%s': /loader/train/files is not a 1-D dataset", path);
        goto done;
    }
    tokens = H5Dopen2(train, "file_tokens", H5P_DEFAULT);
    if (tokens < 0) {
        ct_h5_fail("'%s': cannot open /loader/train/file_tokens", path);
        goto done;
    }
    hid_t ttype = H5Dget_type(tokens);
    H5T_class_t tcls = H5Tget_class(ttype);
    H5Tclose(ttype);
    if (tcls != H5T_INTEGER || ckpt_dataset_shape(tokens, &n_tokens) != 1 || n_tokens != n) {
        ct_fail("'%s': /loader/train/file_tokens must be a 1-D int64 dataset with one count per file (%llu files)",
                path, (unsigned long long)n);
        goto done;
    }
    if (n < 1 || n > 10000000) {
        ct_fail("'%s': /loader/train/files lists %llu files, expected at least one", path, (unsigned long long)n);
        goto done;
    }
    size_t width = H5Tget_size(ftype) + 1;
    mtype = H5Tcopy(H5T_C_S1);
    H5Tset_size(mtype, width);
    H5Tset_strpad(mtype, H5T_STR_NULLTERM);
    H5Tset_cset(mtype, H5Tget_cset(ftype));
    buf = ct_calloc((size_t)n, width, "checkpoint file list");
    m->file_tokens = ct_calloc((size_t)n, sizeof *m->file_tokens, "checkpoint file list");
    if (H5Dread(files, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        ct_h5_fail("'%s': /loader/train/files: cannot read the data", path);
        goto done;
    }
    if (H5Dread(tokens, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->file_tokens) < 0) {
        ct_h5_fail("'%s': /loader/train/file_tokens: cannot read the data", path);
        goto done;
    }
    if (m->format_version >= 2 && (read_identity(train, path, "file_crc32", n, 1, &m->file_crc32) != 0 ||
                                   read_identity(train, path, "file_sample_crc32", n, 0, &m->file_sample_crc32) != 0))
        goto done;
    m->files = ct_calloc((size_t)n, sizeof *m->files, "checkpoint file list");
    m->num_files = (int)n;
    for (hsize_t i = 0; i < n; i++) m->files[i] = ct_strdup(buf + i * width);
    for (hsize_t i = 0; i < n; i++)
        if (m->file_tokens[i] < 1) {
            ct_fail("'%s': /loader/train/file_tokens[%llu] is %lld, expected a positive token count", path,
                    (unsigned long long)i, (long long)m->file_tokens[i]);
            goto done;
        }
    rc = 0;
done:
    free(buf);
    if (mtype >= 0) H5Tclose(mtype);
    if (ftype >= 0) H5Tclose(ftype);
    if (tokens >= 0) H5Dclose(tokens);
    if (files >= 0) H5Dclose(files);
    return rc;
}

static int read_loader(hid_t file, const char *path, CkptMeta *m) {
    hid_t g = open_group(file, path, "/loader/train");
    if (g < 0) return -1;
    int rc = 0;
    if (ckpt_attr_read_i64(g, path, "/loader/train", "file_index", &m->cursor.file_index) != 0 ||
        ckpt_attr_read_i64(g, path, "/loader/train", "position", &m->cursor.position) != 0 ||
        ckpt_attr_read_i64(g, path, "/loader/train", "stream_tokens", &m->cursor.stream_tokens) != 0 ||
        read_file_list(g, path, m) != 0)
        rc = -1;
    H5Gclose(g);
    return rc;
}

typedef struct {
    CkptMeta *m;
    const char *path;
    int failed;
} MetricsVisit;

static herr_t read_metric(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    MetricsVisit *v = data;
    double value;
    if (ckpt_attr_read_f64(obj, v->path, "/metrics", name, &value) != 0) {
        v->failed = 1;
        return -1;
    }
    CkptMeta *m = v->m;
    char **names = realloc(m->extra_names, (size_t)(m->num_extras + 1) * sizeof *names);
    double *values = names ? realloc(m->extra_values, (size_t)(m->num_extras + 1) * sizeof *values) : NULL;
    if (names) m->extra_names = names;
    if (!names || !values) {
        v->failed = 1;
        ct_fail("out of memory reading /metrics");
        return -1;
    }
    m->extra_values = values;
    m->extra_names[m->num_extras] = ct_strdup(name);
    m->extra_values[m->num_extras++] = value;
    return 0;
}

static int read_metrics(hid_t file, const char *path, CkptMeta *m) {
    hid_t g = open_group(file, path, "/metrics");
    if (g < 0) return -1;
    MetricsVisit v = {m, path, 0};
    int rc = 0;
    if (H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, read_metric, &v) < 0)
        rc = v.failed ? -1 : ct_h5_fail("'%s': cannot list the attributes of /metrics", path);
    H5Eclear2(H5E_DEFAULT);
    H5Gclose(g);
    return rc;
}

/* The attribute of an optional group (/swa count, /qat active), when /config says the file has
 * the group (`because` says why): an int64 in [0, max]. */
static int read_optional_attr(hid_t file, const char *path, const char *group, const char *because,
                              const char *name, int64_t max, int64_t *value) {
    if (H5Lexists(file, group, H5P_DEFAULT) == 0)
        return ct_fail("'%s': %s is missing (its /config has %s)", path, group, because);
    hid_t g = open_group(file, path, group);
    if (g < 0) return -1;
    int rc = ckpt_attr_read_i64(g, path, group, name, value);
    H5Gclose(g);
    if (rc == 0 && (*value < 0 || *value > max))
        rc = ct_fail("'%s': attribute %s of %s is %lld, expected %s", path, name, group, (long long)*value,
                     max == 1 ? "0 or 1" : ">= 0");
    return rc;
}

int ckpt_meta_read(hid_t file, const char *path, CkptMeta *m) {
    memset(m, 0, sizeof *m);
    config_init(&m->cfg);
    if (read_root(file, path, m) != 0 || read_config(file, path, m) != 0) return -1;
    m->optional = ckpt_optional(&m->cfg);
    if ((m->optional.swa &&
         read_optional_attr(file, path, "/swa", "swa_enabled = 1", "count", INT64_MAX, &m->swa_count) != 0) ||
        (m->optional.qat &&
         read_optional_attr(file, path, "/qat", "qat_enabled or late_qat = 1", "active", 1, &m->qat_active) != 0) ||
        (m->optional.loop &&
         read_optional_attr(file, path, "/loop", "num_loops > 0", "active", 1, &m->loop_active) != 0))
        return -1;
    hid_t optim = open_group(file, path, "/optimizer");
    if (optim < 0) return -1;
    int rc = ckpt_attr_read_i64(optim, path, "/optimizer", "adam_step", &m->adam_step);
    H5Gclose(optim);
    if (rc == 0 && m->adam_step < 0)
        rc = ct_fail("'%s': adam_step of /optimizer is %lld, expected >= 0", path, (long long)m->adam_step);
    if (rc != 0 || read_loader(file, path, m) != 0 || read_metrics(file, path, m) != 0) return -1;
    return 0;
}

void ckpt_meta_free(CkptMeta *m) {
    free(m->created);
    free(m->ctrain_version);
    free(m->device);
    free(m->stack);
    config_free(&m->cfg);
    for (int i = 0; i < m->num_unknown_keys; i++) free(m->unknown_keys[i]);
    free(m->unknown_keys);
    if (m->spec.params) model_spec_free(&m->spec);
    for (int i = 0; i < m->num_files; i++) free(m->files[i]);
    free(m->files);
    free(m->file_tokens);
    free(m->file_crc32);
    free(m->file_sample_crc32);
    for (int i = 0; i < m->num_extras; i++) free(m->extra_names[i]);
    free(m->extra_names);
    free(m->extra_values);
    memset(m, 0, sizeof *m);
}
