/* ckpt_info.c — what `ctrain ckpt info` shows: a checkpoint's position, configuration summary
 * and tensor table, read from its metadata without verifying the tensors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"
#include "isolate.h"

void ckpt_format_bytes(double bytes, char *buf, size_t cap) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, cap, "%.0f B", bytes);
    else snprintf(buf, cap, "%.1f %s", bytes, units[u]);
}

static void print_summary(const char *path, const CkptMeta *m) {
    const Config *c = &m->cfg;
    struct stat st;
    char size[32] = "?";
    if (stat(path, &st) == 0) ckpt_format_bytes((double)st.st_size, size, sizeof size);
    printf("file:           %s (%s)\n", path, size);
    char s1[256], s2[256];
    printf("format:         %s version %lld, written by ctrain %s at %s\n", CKPT_FORMAT, (long long)m->format_version,
           ct_shorten(m->ctrain_version, s1, sizeof s1), ct_shorten(m->created, s2, sizeof s2));
    printf("step:           %lld (adam_step %lld)\n", (long long)m->step, (long long)m->adam_step);
    printf("train tokens:   %lld\n", (long long)m->train_tokens);
    printf("world size:     %lld\n", (long long)m->world_size);
    printf("device:         %s\n", ct_shorten(m->device, s1, sizeof s1));
    char wide[800];
    printf("stack:          %s\n",
           m->stack ? ct_shorten(m->stack, wide, sizeof wide) : "(not recorded: an older ctrain wrote the file)");
    const CheckpointLineage *l = &m->lineage;
    if (!l->id[0]) printf("lineage:        (not recorded: an older ctrain wrote the file)\n");
    else if (l->origin_step < 0) printf("lineage:        %s, started from the initial weights\n", l->id);
    else
        printf("lineage:        %s, started from step %lld of lineage %s (content_crc32 0x%08llx, %s)\n", l->id,
               (long long)l->origin_step, l->origin[0] ? l->origin : "(not recorded)", (long long)l->origin_crc32,
               ct_shorten(l->origin_path, wide, sizeof wide));
    printf("training time:  %.3f s\n", m->training_time_ms / 1000.0);
    printf("model:          vocab_size %lld, num_layers %lld, model_dim %lld, num_heads %lld, num_kv_heads %lld, "
           "mlp_mult %g, %s embeddings; %zu parameters\n",
           (long long)c->vocab_size, (long long)c->num_layers, (long long)c->model_dim, (long long)c->num_heads,
           (long long)c->num_kv_heads, c->mlp_mult, c->tie_embeddings ? "tied" : "untied",
           m->spec.total_floats);
    printf("batch:          train_batch_tokens %lld, train_seq_len %lld, grad_accum_slots %lld\n",
           (long long)c->train_batch_tokens, (long long)c->train_seq_len, (long long)c->grad_accum_slots);
    printf("schedule:       iterations %lld, warmdown_iters %lld, seed %lld\n", (long long)c->iterations,
           (long long)c->warmdown_iters, (long long)c->seed);
    int64_t total = 0;
    for (int i = 0; i < m->num_files; i++) total += m->file_tokens[i];
    printf("train data:     %d file(s), %lld tokens (train_files = %s)\n", m->num_files, (long long)total,
           ct_shorten(c->train_files, s1, sizeof s1));
    printf("loader cursor:  file %lld (%s), position %lld, stream_tokens %lld\n", (long long)m->cursor.file_index,
           m->cursor.file_index >= 0 && m->cursor.file_index < m->num_files
               ? ct_shorten(m->files[m->cursor.file_index], s2, sizeof s2)
               : "?",
           (long long)m->cursor.position, (long long)m->cursor.stream_tokens);
    if (m->optional.ema) printf("averaging:      EMA of the weights in /ema (ema_decay %g)\n", c->ema_decay);
    if (m->optional.swa)
        printf("averaging:      SWA sum of %lld snapshot(s) in /swa (swa_every %lld)\n", (long long)m->swa_count,
               (long long)c->swa_every);
    if (m->optional.qat)
        printf("qat:            %s (qat_enabled %lld, late_qat %lld, qat_threshold %g)\n",
               m->qat_active ? "active" : "not active yet", (long long)c->qat_enabled, (long long)c->late_qat,
               c->qat_threshold);
    if (m->optional.loop)
        printf("layer_loop:     %s (num_loops %lld, blocks %lld..%lld, enable_looping_at %g)\n",
               m->loop_active ? "active" : "not active yet", (long long)c->num_loops, (long long)c->loop_start,
               (long long)c->loop_end, c->enable_looping_at);
    printf("metrics:       ");
    if (!m->num_extras) printf(" (none)");
    for (int i = 0; i < m->num_extras; i++) printf(" %s = %.9g%s", m->extra_names[i], m->extra_values[i],
                                                   i + 1 < m->num_extras ? "," : "");
    printf("\n");
    int missing = 0;
    for (int i = 0; i < ct_config_num_keys; i++) missing += !m->cfg_present[i];
    if (missing) {
        printf("config:         %d key(s) absent from /config (default used):", missing);
        for (int i = 0; i < ct_config_num_keys; i++)
            if (!m->cfg_present[i]) printf(" %s", ct_config_keys[i].name);
        printf("\n");
    }
    if (m->num_unknown_keys) {
        printf("config:         %d key(s) this ctrain does not know:", m->num_unknown_keys);
        for (int i = 0; i < m->num_unknown_keys; i++) printf(" %s", ct_shorten(m->unknown_keys[i], s1, sizeof s1));
        printf("\n");
    }
    printf("content_crc32:  0x%08x (not checked here; run `ctrain ckpt verify`)\n", m->content_crc32);
}

/* The tensor table, in state_dict order, shapes and types as stored. Lock held. */
static void print_tensors(hid_t file, const CkptMeta *m) {
    CkptTensor *list;
    int n;
    ckpt_tensor_list(&m->spec, m->optional, &list, &n);
    int width = 6;
    for (int i = 0; i < n; i++)
        if ((int)strlen(list[i].path) > width) width = (int)strlen(list[i].path);
    printf("\n%-*s  %-14s %-8s %10s\n", width, "tensor", "shape", "dtype", "size");
    double total = 0;
    int present = 0;
    for (int i = 0; i < n; i++) {
        hid_t dset = H5Dopen2(file, list[i].path, H5P_DEFAULT);
        if (dset < 0) {
            H5Eclear2(H5E_DEFAULT);
            printf("%-*s  (missing)\n", width, list[i].path);
            continue;
        }
        hsize_t dims[8];
        int64_t d64[8];
        int rank = ckpt_dataset_shape(dset, dims);
        hid_t type = H5Dget_type(dset);
        char type_name[96], shape[96], size[32];
        ct_h5_describe_type(type, type_name, sizeof type_name);
        double bytes = (double)H5Tget_size(type);
        H5Tclose(type);
        H5Dclose(dset);
        for (int d = 0; d < rank; d++) {
            d64[d] = (int64_t)dims[d];
            bytes *= (double)dims[d];
        }
        ckpt_format_shape(rank < 0 ? 0 : rank, d64, shape, sizeof shape);
        ckpt_format_bytes(bytes, size, sizeof size);
        printf("%-*s  %-14s %-8s %10s\n", width, list[i].path, shape, type_name, size);
        total += bytes;
        present++;
    }
    char size[32];
    ckpt_format_bytes(total, size, sizeof size);
    printf("\ntotal: %d tensors, %s of tensor data\n", present, size);
    free(list);
}

int checkpoint_print_info(const char *path) {
    CkptMeta m;
    memset(&m, 0, sizeof m);
    ct_hdf5_lock();
    hid_t file = ckpt_open_read(path);
    int rc = file < 0 || ckpt_meta_read(file, path, &m) != 0 ? -1 : 0;
    if (rc == 0) {
        print_summary(path, &m);
        print_tensors(file, &m);
    }
    if (file >= 0) H5Fclose(file);
    ct_hdf5_unlock();
    ckpt_meta_free(&m);
    return rc;
}

/* The data globs, read in a child process by checkpoint_data_globs: "train\0val\0" in out. */
enum { DATA_GLOBS_CAP = 16384 };
static int data_globs_here(void *ctx, void *out) {
    const char *path = ctx;
    CkptMeta m;
    memset(&m, 0, sizeof m);
    ct_hdf5_lock();
    hid_t file = ckpt_open_read(path);
    int rc = file < 0 || ckpt_meta_read(file, path, &m) != 0 ? -1 : 0;
    if (file >= 0) H5Fclose(file);
    ct_hdf5_unlock();
    if (rc == 0) {
        size_t nt = strlen(m.cfg.train_files) + 1, nv = strlen(m.cfg.val_files) + 1;
        if (nt + nv > DATA_GLOBS_CAP) rc = ct_fail("'%s': its train_files and val_files are too long", path);
        else memcpy(out, m.cfg.train_files, nt), memcpy((char *)out + nt, m.cfg.val_files, nv);
    }
    ckpt_meta_free(&m);
    return rc;
}

int checkpoint_data_globs(const char *path, char **train_files, char **val_files) {
    char what[4300];
    snprintf(what, sizeof what, "reading the configuration of '%s' (damaged HDF5 structure?)", path);
    char *globs = ct_calloc(DATA_GLOBS_CAP, 1, "data globs");
    int rc = ct_run_isolated(what, data_globs_here, (void *)path, globs, DATA_GLOBS_CAP, 120.0);
    *train_files = rc == 0 ? ct_strdup(globs) : NULL;
    *val_files = rc == 0 ? ct_strdup(globs + strlen(globs) + 1) : NULL;
    free(globs);
    return rc;
}
