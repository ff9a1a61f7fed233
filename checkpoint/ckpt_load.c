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
static int check_shape_keys(const CkptMeta *m, const Config *cfg) {
    char message[4096] = "";
    size_t used = 0;
    int bad = 0;
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        if (k->resume != CT_RESUME_SHAPE || config_value_equal(&m->cfg, cfg, k)) continue;
        char a[64], b[64];
        const char *old_v = config_value_text(&m->cfg, k, a, sizeof a);
        const char *new_v = config_value_text(cfg, k, b, sizeof b);
        const char *q = k->type == CT_KEY_STR ? "'" : "";
        if (used < sizeof message)
            used += (size_t)snprintf(message + used, sizeof message - used, "%s%s: checkpoint %s%s%s, configured %s%s%s",
                                     bad ? "; " : "", k->name, q, old_v, q, q, new_v, q);
        bad++;
    }
    if (!bad) return 0;
    return ct_fail("%s fixed on resume %s (%s); set %s as in the checkpoint, or start a new "
                   "run in another out_dir",
                   bad == 1 ? "a key that is" : "keys that are", bad == 1 ? "differs" : "differ", message,
                   bad == 1 ? "it" : "them");
}

/* 1 if file i of the checkpoint and of the set hold the same tokens as far as the recorded
 * checksums tell: the sample checksums agree, and so do the full ones where the checkpoint has
 * one (a file that lost its tokens_crc32 attribute was rewritten). */
static int same_content(const CkptMeta *m, const TokenSet *set, int i) {
    const TokenFileInfo *f = &set->files[i];
    if (m->file_sample_crc32[i] != f->sample_crc32) return 0;
    return m->file_crc32[i] < 0 || m->file_crc32[i] == f->tokens_crc32;
}

static void describe_difference(const CkptMeta *m, const TokenSet *set, int i, char *why, size_t cap) {
    const TokenFileInfo *f = &set->files[i];
    if (m->file_sample_crc32[i] != f->sample_crc32)
        snprintf(why, cap, "its first and last tokens differ: sample checksum 0x%08llx now, 0x%08llx then",
                 (unsigned long long)f->sample_crc32, (unsigned long long)m->file_sample_crc32[i]);
    else if (f->tokens_crc32 < 0)
        snprintf(why, cap, "it no longer has the tokens_crc32 attribute it had (0x%08llx): it was rewritten",
                 (unsigned long long)m->file_crc32[i]);
    else
        snprintf(why, cap, "tokens_crc32 is 0x%08llx now, 0x%08llx then", (unsigned long long)f->tokens_crc32,
                 (unsigned long long)m->file_crc32[i]);
}

/* The training files must be those the run was reading (resume_data: "same" paths, token
 * counts and contents; "moved": contents and counts, any paths; "changed": counts only). The
 * cursor must fit the files in every case. */
static int check_data(const char *path, const CkptMeta *m, const TokenSet *set, const char *mode) {
    static const char *const changed_hint =
        "; if the change is deliberate, set resume_data=changed (batches then differ from an uninterrupted run)";
    int moved_ok = !strcmp(mode, "moved") || !strcmp(mode, "changed"), changed_ok = !strcmp(mode, "changed");
    int have_identity = m->file_sample_crc32 != NULL;
    int n = m->num_files < set->num_files ? m->num_files : set->num_files;
    int num_moved = 0, num_changed = 0;
    if (m->num_files != set->num_files) { /* checked first: no resume_data allows it */
        int only_old = n < m->num_files;
        return ct_fail("the training data differs: the checkpoint lists %d file(s), "
                       "train_files now matches %d (file %d, '%s', is only in %s)",
                       m->num_files, set->num_files, n, only_old ? m->files[n] : set->files[n].path,
                       only_old ? "the checkpoint" : "the current data");
    }
    for (int i = 0; i < n; i++) {
        const char *old_path = m->files[i], *new_path = set->files[i].path;
        int same_path = !strcmp(old_path, new_path);
        if (m->file_tokens[i] != set->files[i].num_tokens) {
            if (same_path)
                return ct_fail("the training data differs: '%s' had %lld tokens when the "
                               "checkpoint was written and has %lld now",
                               old_path, (long long)m->file_tokens[i], (long long)set->files[i].num_tokens);
            return ct_fail("the training data differs: file %d is '%s' (%lld tokens) in the "
                           "checkpoint but '%s' (%lld tokens) now",
                           i, old_path, (long long)m->file_tokens[i], new_path,
                           (long long)set->files[i].num_tokens);
        }
        int content_ok = !have_identity || same_content(m, set, i);
        if (!content_ok && !changed_ok) {
            char why[200];
            describe_difference(m, set, i, why, sizeof why);
            return ct_fail("the training data differs: '%s'%s%s%s holds other tokens than "
                           "when the checkpoint was written (the same count, %lld, but %s)%s",
                           new_path, same_path ? "" : " (file '", same_path ? "" : old_path,
                           same_path ? "" : "' in the checkpoint)", (long long)set->files[i].num_tokens, why,
                           changed_hint);
        }
        if (!same_path && !moved_ok)
            return ct_fail("the training data differs: file %d is '%s' in the checkpoint but "
                           "'%s' now%s",
                           i, old_path, new_path,
                           have_identity ? "; its tokens are the same, so if the data was moved, set resume_data=moved"
                                         : "; if the data was moved, set resume_data=moved (changed, if it was "
                                           "changed on purpose)");
        num_moved += !same_path;
        num_changed += !content_ok;
    }
    if (loader_cursor_check(set, &m->cursor) != 0) return -1;
    if (!have_identity)
        printf("note: '%s' is a format 1 checkpoint, which records no data checksums: the training files were "
               "compared by path and token count only\n", path);
    if (num_moved)
        printf("resume_data=%s: %d of %d training file(s) are at other paths than in the checkpoint%s\n", mode,
               num_moved, n, num_changed ? "" : ", with the same tokens");
    if (num_changed)
        printf("resume_data=changed: %d of %d training file(s) hold other tokens than when the checkpoint was "
               "written; training continues on the new data\n", num_changed, n);
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

/* Read every tensor into its place in st, and the SWA count and QAT switch; optimizer entries
 * no tensor covers are zero, as in a fresh state. st's optional buffers must be those the file
 * holds (m->optional). Lock held. */
static int read_tensors(hid_t file, const char *path, const CkptMeta *m, TrainState *st) {
    const ModelSpec *spec = &m->spec;
    if (m->optional.ema != (st->ema != NULL) || m->optional.swa != (st->swa_sum != NULL))
        return ct_fail("'%s' %s EMA weights and %s SWA sum, the training state %s and %s", path,
                       m->optional.ema ? "holds" : "holds no", m->optional.swa ? "a" : "no",
                       st->ema ? "has them" : "has none", st->swa_sum ? "has one" : "none");
    size_t total = spec->total_floats;
    memset(st->exp_avg, 0, total * sizeof(float));
    memset(st->exp_avg_sq, 0, total * sizeof(float));
    memset(st->momentum, 0, total * sizeof(float));
    st->swa_count = m->swa_count;
    st->qat_active = (int)m->qat_active;
    st->loop_active = (int)m->loop_active;
    CkptTensor *list;
    int n, rc = 0;
    ckpt_tensor_list(spec, m->optional, &list, &n);
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
    info->stack = m->stack ? ct_strdup(m->stack) : NULL;
    info->cursor = m->cursor;
    info->lineage = m->lineage;
    info->content_crc32 = m->content_crc32;
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

/* Verify path (in a child process first, unless `verified`), then open it and check it again
 * in this process, filling *m (freed by the caller in every case). Returns the open file with
 * the HDF5 lock held (the caller closes it, then unlocks), or -1 with the lock released. */
static hid_t open_checked(const char *path, int verified, CkptMeta *m) {
    memset(m, 0, sizeof *m);
    /* a file that crashes HDF5 must not crash this process */
    if (!verified && checkpoint_verify(path, NULL) != 0) return H5I_INVALID_HID;
    ct_hdf5_lock();
    hid_t file = ckpt_open_read(path);
    if (file >= 0 && ckpt_verify_open(file, path, m) != 0) {
        H5Fclose(file);
        file = H5I_INVALID_HID;
    }
    if (file < 0) ct_hdf5_unlock();
    return file;
}

int checkpoint_load(const char *path, int verified, const Config *cfg, TrainState *st, const TokenSet *train_set,
                    CheckpointInfo *info,
                    void (*report)(const char *key, const char *old_value, const char *new_value)) {
    memset(info, 0, sizeof *info);
    CkptMeta m;
    hid_t file = open_checked(path, verified, &m);
    int rc = file < 0 ? -1 : 0;
    if (file >= 0) {
        rc = check_shape_keys(&m, cfg);
        if (rc == 0) rc = check_data(path, &m, train_set, cfg->resume_data);
        if (rc == 0 && !same_spec(&m.spec, &st->spec))
            rc = ct_fail("the training state was not made from this configuration");
        if (rc == 0) rc = read_tensors(file, path, &m, st);
        H5Fclose(file);
        ct_hdf5_unlock();
    }
    if (rc == 0) {
        st->adam_step = m.adam_step;
        fill_info(&m, info);
        /* Reported only once the load can no longer fail, outside the HDF5 lock. */
        for (int i = 0; report && i < ct_config_num_keys; i++) {
            const ConfigKey *k = &ct_config_keys[i];
            if (k->resume != CT_RESUME_FREE || !m.cfg_present[i] || config_value_equal(&m.cfg, cfg, k)) continue;
            char a[64], b[64];
            report(k->name, config_value_text(&m.cfg, k, a, sizeof a), config_value_text(cfg, k, b, sizeof b));
        }
    }
    ckpt_meta_free(&m);
    return rc;
}

int checkpoint_read_weights(const char *path, Config *cfg, TrainState *st) {
    config_init(cfg);
    memset(st, 0, sizeof *st);
    CkptMeta m;
    hid_t file = open_checked(path, 0, &m);
    int rc = file < 0 ? -1 : 0;
    if (file >= 0) {
        config_free(cfg);
        *cfg = m.cfg; /* the caller owns it now */
        config_init(&m.cfg);
        rc = train_state_init(st, cfg);
        if (rc == 0) rc = read_tensors(file, path, &m, st);
        H5Fclose(file);
        ct_hdf5_unlock();
    }
    if (rc == 0) st->adam_step = m.adam_step;
    ckpt_meta_free(&m);
    return rc;
}

void checkpoint_info_free(CheckpointInfo *info) {
    free((char *)info->device);
    free((char *)info->stack);
    for (int i = 0; i < info->num_extras; i++) free((char *)info->extra_names[i]);
    free((char **)info->extra_names);
    free((double *)info->extra_values);
    memset(info, 0, sizeof *info);
}
