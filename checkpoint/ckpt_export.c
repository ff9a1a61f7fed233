/* ckpt_export.c — `ctrain ckpt export`: a checkpoint's weights as a safetensors file with
 * train_gpt.py's parameter names and shapes, so that
 *   GPT(...).load_state_dict(safetensors.torch.load_file(path), strict=True)
 * works on train_gpt.py's model, and any safetensors reader (PyTorch, JAX, llm tooling) can
 * load the weights.
 *
 * The safetensors format is small enough to write directly, and doing so keeps ctrain free of
 * a Rust/Python dependency: the header (base/safetensors.h), then the tensors' little-endian
 * bytes (F32 or BF16) back to back in the checkpoint's (state_dict) order. The file is
 * published atomically. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"
#include "safetensors.h"

/* fp32 -> bf16 with round-to-nearest-even, as torch's .to(torch.bfloat16); NaN stays a quiet
 * NaN (a verified checkpoint holds none). */
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int write_all(FILE *f, const void *p, size_t n, const char *path) {
    if (n && fwrite(p, 1, n, f) != n) return ct_fail("cannot write '%s': %s", path, strerror(errno));
    return 0;
}

/* The body of the header's __metadata__ (string values only, as safetensors requires): the
 * format and source, the step, and the model's configuration (every "model" key, and
 * train_seq_len), so a reader can build the model the weights belong to without the
 * checkpoint. Values are numbers or 0/1, which need no JSON escaping. */
static char *export_metadata(const CkptMeta *m, const char *weights) {
    const size_t cap = 8192; /* ~20 short keys and numbers */
    char *text = ct_malloc(cap, "export metadata");
    size_t n = (size_t)snprintf(text, cap, "\"format\":\"pt\",\"source\":\"ctrain %s\",\"step\":\"%lld\"", CT_VERSION,
                                (long long)m->step);
    /* which weights, where a checkpoint has a choice (one without averages exports as before) */
    if (weights) n += (size_t)snprintf(text + n, cap - n, ",\"weights\":\"%s\"", weights);
    for (int i = 0; i < ct_config_num_keys && n < cap; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        if (strcmp(k->group, "model") != 0 && strcmp(k->name, "train_seq_len") != 0) continue;
        char buf[64];
        n += (size_t)snprintf(text + n, cap - n, ",\"%s\":\"%s\"", k->name, config_value_text(&m->cfg, k, buf, sizeof buf));
    }
    return text;
}

int checkpoint_export_safetensors(const char *path, const char *out_path, int bf16, int live, char *weights,
                                  size_t weights_cap) {
    /* in a child first: a damaged file must not crash the export */
    if (checkpoint_verify(path, NULL) != 0) return -1;
    CkptMeta m;
    memset(&m, 0, sizeof m);
    ct_hdf5_lock();
    hid_t file = ckpt_open_read(path);
    int rc = file < 0 || ckpt_meta_read(file, path, &m) != 0 ? -1 : 0;
    const ModelSpec *s = &m.spec;
    /* which weights: the group they are read from, and SWA's divisor */
    const char *source =
        rc == 0 && !live ? train_state_final_weights(m.optional.ema, m.optional.swa, m.swa_count) : "live";
    const char *group = !strcmp(source, "ema") ? "/ema" : !strcmp(source, "swa") ? "/swa" : "/model";
    const int has_averages = rc == 0 && (m.optional.ema || m.optional.swa);
    if (weights_cap) weights[0] = '\0';
    if (has_averages && weights_cap) {
        if (!strcmp(source, "swa"))
            snprintf(weights, weights_cap, "SWA average of %lld snapshots, /swa", (long long)m.swa_count);
        else snprintf(weights, weights_cap, "%s, %s", !strcmp(source, "ema") ? "EMA weights" : "live weights", group);
    }
    float *values = NULL;
    unsigned char *header = NULL;
    FILE *out = NULL;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_path, (long)getpid());
    if (rc == 0) rc = ct_mkdir_parent(out_path);
    if (rc == 0) {
        /* the header first: every tensor's dtype, shape and byte range */
        CtSafetensor *t = ct_calloc((size_t)s->num_params + 1, sizeof *t, "export header");
        for (int i = 0; i < s->num_params; i++) {
            const ParamInfo *p = &s->params[i];
            t[i] = (CtSafetensor){p->name, bf16 ? "BF16" : "F32", model_param_torch_ndim(p), p->shape,
                                  p->count * (bf16 ? 2 : 4)};
        }
        char *metadata = export_metadata(&m, has_averages ? source : NULL);
        size_t header_len;
        header = ct_safetensors_header(metadata, t, s->num_params, &header_len);
        free(metadata);
        free(t);
        out = fopen(tmp, "wb");
        if (!out) rc = ct_fail("cannot write '%s': %s", tmp, strerror(errno));
        if (rc == 0) rc = write_all(out, header, header_len, tmp);
        values = ct_malloc(s->total_floats * sizeof(float) + 1, "exported weights");
    }
    for (int i = 0; rc == 0 && i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        char name[CKPT_PATH_MAX];
        snprintf(name, sizeof name, "%s/%s", group, p->name);
        hid_t dset = H5Dopen2(file, name, H5P_DEFAULT);
        if (dset < 0 || H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0)
            rc = ct_h5_fail("'%s': %s: cannot read the data", path, name);
        if (dset >= 0) H5Dclose(dset);
        if (rc != 0) break;
        if (!strcmp(source, "swa")) { /* train_gpt.py's `t / swa_count` in fp32, as train_state_use_average */
            const float count = (float)m.swa_count;
            for (size_t e = 0; e < p->count; e++) values[e] = values[e] / count;
        }
        /* little-endian on disk: the hosts ctrain builds for (x86-64, aarch64) are */
        if (bf16) {
            uint16_t *h = (uint16_t *)values;
            for (size_t e = 0; e < p->count; e++) h[e] = bf16_bits(values[e]);
            rc = write_all(out, h, p->count * 2, tmp);
        } else {
            rc = write_all(out, values, p->count * 4, tmp);
        }
    }
    if (file >= 0) H5Fclose(file);
    ct_hdf5_unlock();
    if (out) {
        if (rc == 0 && (fflush(out) != 0 || fsync(fileno(out)) != 0))
            rc = ct_fail("cannot write '%s': %s", tmp, strerror(errno));
        if (fclose(out) != 0 && rc == 0) rc = ct_fail("cannot write '%s': %s", tmp, strerror(errno));
        if (rc == 0 && rename(tmp, out_path) != 0)
            rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, out_path, strerror(errno));
        if (rc != 0) unlink(tmp);
    }
    free(values);
    free(header);
    ckpt_meta_free(&m);
    return rc;
}
