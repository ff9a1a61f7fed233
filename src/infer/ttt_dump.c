/* ttt_dump.c — `ctrain eval --dump DIR`'s files (ttt_internal.h), what tests/parity/ttt_ref.py
 * checks the test-time-training evaluation with (docs/testing.md): lora_init.safetensors (every
 * document's starting A's), docs.tsv (each document's plan place, loss sum, bytes, queue position, segment and rank),
 * losses.f32 (every target's loss), adapters_doc_N.safetensors (one document's adapters after its
 * last step), phase_K.safetensors (the base weights after global step K, from 0) and
 * summary.json. Rank 0 writes each file to a temporary name and renames it into place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "golf_artifact_internal.h" /* golf_file_write_atomically */
#include "safetensors.h"
#include "ttt_internal.h"

/* The dump's file names: written below and listed by ttt_dump_outputs from the same place. */
static const char INITIAL_NAME[] = "lora_init.safetensors", DOCS_NAME[] = "docs.tsv", LOSSES_NAME[] = "losses.f32",
                  SUMMARY_NAME[] = "summary.json";
static void phase_name(int k, char *name, size_t cap) { snprintf(name, cap, "phase_%d.safetensors", k); }
static void doc_name(int64_t doc, char *name, size_t cap) {
    snprintf(name, cap, "adapters_doc_%lld.safetensors", (long long)doc);
}

static void add_output(const char *dir, const char *name, CtPathList *outputs) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ct_path_list_add(outputs, "--dump", "a file of the dump", path);
}

void ttt_dump_outputs(const char *dir, const Config *cfg, int64_t dump_doc, CtPathList *outputs) {
    const char *const fixed[] = {INITIAL_NAME, DOCS_NAME, LOSSES_NAME, SUMMARY_NAME};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) add_output(dir, fixed[i], outputs);
    char name[64];
    for (int64_t k = 0; k <= cfg->phased_ttt_num_phases && k < 1000; k++) {
        phase_name((int)k, name, sizeof name);
        add_output(dir, name, outputs);
    }
    if (dump_doc >= 0) {
        doc_name(dump_doc, name, sizeof name);
        add_output(dir, name, outputs);
    }
}

/* DIR/name, or an error naming it when it does not fit. */
static int dump_path(const TttRun *R, const char *name, char *buf, size_t cap) {
    if ((size_t)snprintf(buf, cap, "%s/%s", R->opt->dump, name) >= cap)
        return ct_fail("--dump '%s': the path of %s is too long", R->opt->dump, name);
    return 0;
}

/* Write the parts, back to back, to DIR/name (golf_file_write_atomically: a temporary file
 * renamed into place). */
static int write_file(const TttRun *R, const char *name, const void *const *parts, const size_t *sizes, int nparts) {
    char path[4200];
    if (dump_path(R, name, path, sizeof path) != 0) return -1;
    return golf_file_write_atomically(path, parts, sizes, nparts) == 0 ? 0 : ct_fail_prefix("--dump");
}

/* f32 tensors as one safetensors file. */
static int write_tensors(const TttRun *R, const char *name, const CtSafetensor *t, const float *const *data, int n) {
    size_t len;
    unsigned char *head = ct_safetensors_header("\"format\":\"pt\"", t, n, &len);
    /* the header, then the tensors' data */
    const void **parts = ct_malloc((size_t)(n + 1) * sizeof *parts, "dump");
    size_t *sizes = ct_malloc((size_t)(n + 1) * sizeof *sizes, "dump");
    parts[0] = head, sizes[0] = len;
    for (int i = 0; i < n; i++) parts[i + 1] = data[i], sizes[i + 1] = t[i].bytes;
    const int rc = write_file(R, name, parts, sizes, n + 1);
    free(parts), free(sizes);
    free(head);
    return rc;
}

/* One slot's adapters as tensors lora.<run>.<kind>.A/B and lora.head.A/B (A only: just_a). */
static int write_slot(const TttRun *R, const char *name, const float *slot, int just_a) {
    const LoraLayout *L = &R->layout;
    const int most = 2 * (L->num_runs * LORA_KINDS + 1);
    CtSafetensor *t = ct_calloc((size_t)most, sizeof *t, "dump");
    const float **data = ct_calloc((size_t)most, sizeof *data, "dump");
    char (*names)[48] = ct_calloc((size_t)most, sizeof *names, "dump");
    int64_t (*shapes)[2] = ct_calloc((size_t)most, sizeof *shapes, "dump");
    int n = 0;
    for (int e = 0; e <= L->num_runs * LORA_KINDS; e++) {
        const int head = e == L->num_runs * LORA_KINDS;
        const LoraEntry *en = head ? &L->head : lora_entry(L, e / LORA_KINDS, (LoraKind)(e % LORA_KINDS));
        if (!en) continue;
        for (int part = 0; part < (just_a ? 1 : 2); part++, n++) {
            if (head) snprintf(names[n], sizeof names[n], "lora.head.%s", part ? "B" : "A");
            else
                snprintf(names[n], sizeof names[n], "lora.%d.%s.%s", e / LORA_KINDS,
                         lora_kind_name((LoraKind)(e % LORA_KINDS)), part ? "B" : "A");
            shapes[n][0] = part ? en->out : L->rank;
            shapes[n][1] = part ? L->rank : en->in;
            t[n] = (CtSafetensor){names[n], "F32", 2, shapes[n], (size_t)(shapes[n][0] * shapes[n][1]) * sizeof(float)};
            data[n] = slot + (part ? en->b : en->a);
        }
    }
    const int rc = write_tensors(R, name, t, data, n);
    free(t), free(data), free(names), free(shapes);
    return rc;
}

int ttt_dump_initial(const TttRun *R) {
    if (R->d->rank != 0) return 0;
    if (ct_mkdir_p(R->opt->dump) != 0) return ct_fail_prefix("--dump '%s'", R->opt->dump);
    return write_slot(R, INITIAL_NAME, R->initial, 1);
}

int ttt_dump_slot(const TttRun *R, int64_t doc, const float *slot) {
    char name[64];
    doc_name(doc, name, sizeof name);
    if (ct_mkdir_p(R->opt->dump) != 0) return ct_fail_prefix("--dump '%s'", R->opt->dump);
    return write_slot(R, name, slot, 0); /* the rank that ran the document writes it */
}

int ttt_dump_phase(const TttRun *R, int k) {
    if (R->d->rank != 0) return 0;
    const ModelSpec *s = &R->st->spec;
    const int n = model_artifact_params(s);
    CtSafetensor *t = ct_calloc((size_t)n, sizeof *t, "dump");
    const float **data = ct_calloc((size_t)n, sizeof *data, "dump");
    for (int i = 0; i < n; i++) {
        const ParamInfo *p = &s->params[i];
        t[i] = (CtSafetensor){p->name, "F32", p->ndim, p->shape, p->count * sizeof(float)};
        data[i] = R->st->params + p->offset;
    }
    char name[64];
    phase_name(k, name, sizeof name);
    const int rc = write_tensors(R, name, t, data, n);
    free(t), free(data);
    return rc;
}

int ttt_dump_final(const TttRun *R, double val_loss, double val_bpb, double tokens, double bytes) {
    if (R->d->rank != 0) return 0;
    const TttPlan *p = &R->plan;
    /* losses.f32: entry j is the loss of target tokens[j + 1]; NaN where no document scored it, or
     * more than one did (every target is scored exactly once: the tests check there is no NaN) */
    float *losses = ct_malloc((size_t)(R->n - 1) * sizeof(float), "dump");
    for (int64_t j = 0; j + 1 < R->n; j++) losses[j] = R->target_count[j] == 1.0f ? R->target_loss[j] : NAN;
    const void *part[1] = {losses};
    size_t size[1] = {(size_t)(R->n - 1) * sizeof(float)};
    int rc = write_file(R, LOSSES_NAME, part, size, 1);
    free(losses);
    char *text;
    size_t len;
    FILE *f = ct_open_memstream(&text, &len, "dump");
    /* each batch's queue position, segment (the global steps before it) and rank */
    int64_t *queue_pos = ct_malloc((size_t)p->num_batches * sizeof(int64_t), "dump");
    for (int64_t q = 0; q < p->num_batches; q++) queue_pos[p->queue[q]] = q;
    fprintf(f, "doc\tstart\tpredictions\tbatch\tslot\tloss_sum\tbytes\tqueue\tsegment\trank\n");
    for (int64_t i = 0; i < p->num_docs; i++) {
        const int64_t q = queue_pos[p->docs[i].batch];
        int segment = 0;
        while (segment < p->num_phases && q >= p->segment_end[segment]) segment++;
        fprintf(f, "%lld\t%lld\t%lld\t%lld\t%lld\t%.17g\t%.0f\t%lld\t%d\t%d\n", (long long)i,
                (long long)p->docs[i].start, (long long)p->docs[i].predictions, (long long)p->docs[i].batch,
                (long long)p->docs[i].slot, R->doc_loss[i], R->doc_bytes[i], (long long)q, segment, R->rank_of[q]);
    }
    free(queue_pos);
    fclose(f);
    part[0] = text, size[0] = len;
    if (rc == 0) rc = write_file(R, DOCS_NAME, part, size, 1);
    free(text);
    f = ct_open_memstream(&text, &len, "dump");
    /* JSON has no NaN: a figure that is not finite (val_bpb without the data's byte counts) is null */
    char loss_s[32] = "null", bpb_s[32] = "null";
    if (isfinite(val_loss)) snprintf(loss_s, sizeof loss_s, "%.17g", val_loss);
    if (isfinite(val_bpb)) snprintf(bpb_s, sizeof bpb_s, "%.17g", val_bpb);
    fprintf(f, "{\"val_loss\": %s, \"val_bpb\": %s, \"tokens\": %.0f, \"bytes\": %.0f}\n", loss_s, bpb_s, tokens,
            bytes);
    fclose(f);
    part[0] = text, size[0] = len;
    if (rc == 0) rc = write_file(R, SUMMARY_NAME, part, size, 1);
    free(text);
    return rc;
}
