/* ckpt_load.c — checkpoint_load: resume a run. The file is verified in full first (a resume
 * must never start from damaged state), then held against the run's configuration and data:
 * SHAPE keys and the training files must match, FREE keys may differ and are reported. Only
 * then are the tensors read into the TrainState. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"

/* Every SHAPE key must agree; the message lists all that do not. */
static int check_shape_keys(const char *path, const CkptMeta *m, const Config *cfg) {
    char message[4096] = "";
    size_t used = 0;
    int bad = 0;
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        if (k->resume != CT_RESUME_SHAPE || config_value_equal(&m->cfg, cfg, k)) continue;
        char a[64], b[64];
        const char *old_v = config_value_text(&m->cfg, k, CONFIG_TEXT_SHORT, a, sizeof a);
        const char *new_v = config_value_text(cfg, k, CONFIG_TEXT_SHORT, b, sizeof b);
        const char *q = k->type == CT_KEY_STR ? "'" : "";
        if (used < sizeof message)
            used += (size_t)snprintf(message + used, sizeof message - used, "%s%s: checkpoint %s%s%s, configured %s%s%s",
                                     bad ? "; " : "", k->name, q, old_v, q, q, new_v, q);
        bad++;
    }
    if (!bad) return 0;
    return ct_fail("cannot resume from '%s': %s %s fixed on resume (%s); set %s as in the checkpoint, or start a new "
                   "run in another out_dir",
                   path, bad == 1 ? "a key that is" : "keys that are", bad == 1 ? "differs" : "differ", message,
                   bad == 1 ? "it" : "them");
}

/* The training files and their token counts must be those the run was reading. */
static int check_data(const char *path, const CkptMeta *m, const TokenSet *set) {
    int n = m->num_files < set->num_files ? m->num_files : set->num_files;
    for (int i = 0; i < n; i++) {
        if (strcmp(m->files[i], set->files[i].path) != 0)
            return ct_fail("cannot resume from '%s': the training data differs: file %d is '%s' in the checkpoint "
                           "but '%s' now",
                           path, i, m->files[i], set->files[i].path);
        if (m->file_tokens[i] != set->files[i].num_tokens)
            return ct_fail("cannot resume from '%s': the training data differs: '%s' had %lld tokens when the "
                           "checkpoint was written and has %lld now",
                           path, m->files[i], (long long)m->file_tokens[i], (long long)set->files[i].num_tokens);
    }
    if (m->num_files != set->num_files) {
        int only_old = n < m->num_files;
        return ct_fail("cannot resume from '%s': the training data differs: the checkpoint lists %d file(s), "
                       "train_files now matches %d (first difference: file %d, '%s', is only in %s)",
                       path, m->num_files, set->num_files, n, only_old ? m->files[n] : set->files[n].path,
                       only_old ? "the checkpoint" : "the current data");
    }
    if (loader_cursor_check(set, &m->cursor) != 0) return ct_fail_prefix("cannot resume from '%s'", path);
    return 0;
}

static int same_spec(const ModelSpec *a, const ModelSpec *b) {
    if (a->num_params != b->num_params || a->total_floats != b->total_floats) return 0;
    for (int i = 0; i < a->num_params; i++)
        if (strcmp(a->params[i].name, b->params[i].name) != 0 || a->params[i].count != b->params[i].count ||
            a->params[i].offset != b->params[i].offset)
            return 0;
    return 1;
}

/* Read every tensor into its place in st; optimizer entries no tensor covers are zero, as in a
 * fresh state. Lock held. */
static int read_tensors(hid_t file, const char *path, const ModelSpec *spec, TrainState *st) {
    size_t total = spec->total_floats;
    memset(st->exp_avg, 0, total * sizeof(float));
    memset(st->exp_avg_sq, 0, total * sizeof(float));
    memset(st->momentum, 0, total * sizeof(float));
    CkptTensor *list;
    int n, rc = 0;
    ckpt_tensor_list(spec, &list, &n);
    for (int i = 0; i < n && rc == 0; i++) {
        if (list[i].param->count == 0) continue;
        hid_t dset = H5Dopen2(file, list[i].path, H5P_DEFAULT);
        float *dst = ckpt_tensor_buffer(st, list[i].buffer) + list[i].param->offset;
        if (dset < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
            rc = ct_h5_fail("'%s': %s: cannot read the data", path, list[i].path);
        if (dset >= 0) H5Dclose(dset);
    }
    free(list);
    return rc;
}

static void fill_info(const CkptMeta *m, CheckpointInfo *info) {
    info->step = m->step;
    info->train_tokens = m->train_tokens;
    info->world_size = (int)m->world_size;
    info->training_time_ms = m->training_time_ms;
    info->device = ct_strdup(m->device);
    info->cursor = m->cursor;
    info->num_extras = m->num_extras;
    if (m->num_extras > 0) {
        char **names = ct_calloc((size_t)m->num_extras, sizeof *names, "checkpoint metrics");
        double *values = ct_calloc((size_t)m->num_extras, sizeof *values, "checkpoint metrics");
        for (int i = 0; i < m->num_extras; i++) {
            names[i] = ct_strdup(m->extra_names[i]);
            values[i] = m->extra_values[i];
        }
        info->extra_names = (const char *const *)names;
        info->extra_values = values;
    }
}

int checkpoint_load(const char *path, const Config *cfg, TrainState *st, const TokenSet *train_set,
                    CheckpointInfo *info,
                    void (*report)(const char *key, const char *old_value, const char *new_value)) {
    memset(info, 0, sizeof *info);
    /* first in a child process: a file that crashes HDF5 must not crash the run */
    if (checkpoint_verify(path, NULL) != 0) return -1;
    CkptMeta m;
    memset(&m, 0, sizeof m);
    ct_hdf5_lock();
    int rc = -1;
    hid_t file = ckpt_open_read(path);
    if (file >= 0) {
        rc = ckpt_verify_open(file, path, &m);
        if (rc == 0) rc = check_shape_keys(path, &m, cfg);
        if (rc == 0) rc = check_data(path, &m, train_set);
        if (rc == 0 && !same_spec(&m.spec, &st->spec))
            rc = ct_fail("cannot resume from '%s': the training state was not made from this configuration", path);
        if (rc == 0) rc = read_tensors(file, path, &m.spec, st);
        H5Fclose(file);
    }
    ct_hdf5_unlock();
    if (rc == 0) {
        st->adam_step = m.adam_step;
        fill_info(&m, info);
        /* Reported only once the load can no longer fail, outside the HDF5 lock. */
        for (int i = 0; report && i < ct_config_num_keys; i++) {
            const ConfigKey *k = &ct_config_keys[i];
            if (k->resume != CT_RESUME_FREE || !m.cfg_present[i] || config_value_equal(&m.cfg, cfg, k)) continue;
            char a[64], b[64];
            report(k->name, config_value_text(&m.cfg, k, CONFIG_TEXT_SHORT, a, sizeof a), config_value_text(cfg, k, CONFIG_TEXT_SHORT, b, sizeof b));
        }
    }
    ckpt_meta_free(&m);
    return rc;
}

void checkpoint_info_free(CheckpointInfo *info) {
    free((char *)info->device);
    for (int i = 0; i < info->num_extras; i++) free((char *)info->extra_names[i]);
    free((char **)info->extra_names);
    free((double *)info->extra_values);
    memset(info, 0, sizeof *info);
}
