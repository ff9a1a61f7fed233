/* golf_round_trip.c — train_gpt.py's ending, for `golf_artifact = 1` and `ctrain ckpt golf`:
 * the artifact written (golf_artifact.c, int8 + zlib as the baseline or mixed int6 + zstd as the
 * 1.1248 record) and its size printed as that train_gpt.py prints it, then read back and
 * evaluated (eval.c), so the score is that of the weights a reader of the artifact gets, and with
 * ttt_enabled scored again with test-time training (ttt_eval.c): in this process for `ckpt
 * golf`, on every rank of the job for a run's end (golf_ttt_evaluate, which train.c calls once
 * the artifact is written). The code's
 * share is --code-bytes', else ctrain's own, measured by the build (golf_code_size.c; docs/model.md,
 * "The code's size"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fault.h"
#include "golf_artifact.h"
#include "golf_gptq.h"
#include "infer.h"
#include "stop.h"

/* parameter-golf's limit on a submission: the artifact plus the code that loads it */
#define GOLF_SIZE_CAP 16000000LL

static void print_sizes(const GolfStats *g, GolfFormat format, const char *path, int64_t code_bytes, int own_code) {
    const char *label = golf_format_label(format);
    if (format == GOLF_INT8_ZLIB) {
        printf("int8 artifact: %lld parameters in %lld tensors, %lld quantized to int8\n", (long long)g->param_count,
               (long long)g->num_tensors, (long long)g->num_int8);
        printf("Serialized model %s: %lld bytes (payload:%lld raw:%lld payload_ratio:%.2fx) -> %s\n", label,
               (long long)g->file_bytes, (long long)g->payload_bytes, (long long)g->raw_bytes,
               (double)g->baseline_bytes / (double)(g->payload_bytes > 0 ? g->payload_bytes : 1), path);
    } else if (golf_format_is_gptq(format)) {
        printf("gptq artifact: %lld parameters in %lld tensors: %lld matrices by GPTQ (%lld with LQER), %lld int8 "
               "gate rows, %lld kept as float16 (payload:%lld raw:%lld) -> %s\n",
               (long long)g->param_count, (long long)g->num_tensors, (long long)g->num_gptq, (long long)g->num_lqer,
               (long long)g->num_int8, (long long)(g->num_tensors - g->num_gptq - g->num_int8),
               (long long)g->payload_bytes, (long long)g->raw_bytes, path);
        printf("Serialized model %s: %lld bytes\n", label, (long long)g->file_bytes);
    } else {
        /* the record's own line is the second, word for word; ours says what is inside and where */
        printf("int6 artifact: %lld parameters in %lld tensors: %lld int6, %lld int8, %lld kept as floats "
               "(payload:%lld raw:%lld) -> %s\n",
               (long long)g->param_count, (long long)g->num_tensors, (long long)g->num_int6, (long long)g->num_int8,
               (long long)(g->num_tensors - g->num_int6 - g->num_int8), (long long)g->payload_bytes,
               (long long)g->raw_bytes, path);
        printf("Serialized model %s: %lld bytes\n", label, (long long)g->file_bytes);
    }
    const long long total = (long long)g->file_bytes + (code_bytes > 0 ? (long long)code_bytes : 0);
    if (code_bytes >= 0) {
        if (own_code) /* the record prints "Code size (compressed): N bytes" for its own */
            printf("Code size: %lld bytes (ctrain's sources: %lld bytes, a tar of them brotli-compressed; "
                   "docs/model.md)\n", (long long)code_bytes, (long long)golf_code_raw_bytes);
        else printf("Code size: %lld bytes\n", (long long)code_bytes);
        printf("Total submission size %s: %lld bytes\n", label, total);
    }
    if (total <= GOLF_SIZE_CAP)
        printf("size: %lld bytes%s, under the %lld-byte cap by %lld bytes\n", total,
               code_bytes >= 0 ? " with the code" : " (artifact only: give --code-bytes for the code's share)",
               GOLF_SIZE_CAP, GOLF_SIZE_CAP - total);
    else
        printf("size: %lld bytes%s, OVER the %lld-byte cap by %lld bytes\n", total,
               code_bytes >= 0 ? " with the code" : " (artifact only)", GOLF_SIZE_CAP, total - GOLF_SIZE_CAP);
    fflush(stdout);
}

int golf_write_and_evaluate(const Config *cfg, TrainState *st, const char *path, const GolfOptions *o) {
    GolfStats g;
    /* a stop asked for (a training run's handlers, or `ckpt golf`'s) is honoured between the
     * parts, and within the evaluation at each batch */
    fault_point_stage("artifact", -1);
    if (stop_requested()) return stop_abandon("the golf artifact's write");
    const GolfGptqOptions gptq = {(int)cfg->matrix_bits, (int)cfg->embed_bits, (float)cfg->matrix_clip_sigmas,
                                  (float)cfg->mlp_clip_sigmas, (float)cfg->attn_clip_sigmas,
                                  (float)cfg->embed_clip_sigmas, (int)cfg->gated_attn_quant_gate,
                                  (int)cfg->lqer_enabled, (int)cfg->lqer_rank, (int)cfg->lqer_top_k,
                                  (int)cfg->lqer_factor_bits, (int)cfg->lqer_asym_enabled, (int)cfg->lqer_asym_group,
                                  o->hessians};
    const int own_code = o->code_bytes < 0;
    const int64_t code_bytes = own_code ? golf_code_bytes : o->code_bytes;
    if (!o->refuse_oversize) {
        if (golf_write(&st->spec, st->params, o->format, &gptq, path, &g) != 0) return -1;
    } else {
        /* written beside path first: above the cap, nothing replaces path */
        char pending[4400];
        snprintf(pending, sizeof pending, "%s.pending.%ld", path, (long)getpid());
        if (golf_write(&st->spec, st->params, o->format, &gptq, pending, &g) != 0) return -1;
        const long long total = (long long)g.file_bytes + (code_bytes > 0 ? (long long)code_bytes : 0);
        if (total > GOLF_SIZE_CAP) {
            unlink(pending);
            return ct_fail("'%s': the artifact's %lld bytes and the code's %lld make %lld bytes, above "
                           "parameter-golf's limit of %lld bytes: not written (--allow-oversize writes it)",
                           path, (long long)g.file_bytes, (long long)(code_bytes > 0 ? code_bytes : 0), total,
                           GOLF_SIZE_CAP);
        }
        if (rename(pending, path) != 0) {
            unlink(pending);
            return ct_fail("cannot rename '%s' to '%s'", pending, path);
        }
    }
    print_sizes(&g, o->format, path, code_bytes, own_code);
    if (!o->evaluate && !o->dequantized) return 0;
    /* the weights as a reader of the artifact gets them */
    if (golf_read(&st->spec, o->format, path, st->params) != 0) return -1;
    if (o->dequantized) {
        if (golf_write_weights(&st->spec, st->params, o->dequantized) != 0) return -1;
        printf("dequantized weights -> %s\n", o->dequantized);
        fflush(stdout);
    }
    if (!o->evaluate) return 0;
    fault_point_stage("round_trip", -1);
    if (stop_requested()) return stop_abandon("the golf artifact's round-trip evaluation");
    /* evaluated as train_gpt.py does, and with eval_stride, the record's sliding window too */
    if (print_round_trip_evaluation(cfg, st, golf_eval_label(o->format)) != 0) return -1;
    if (!cfg->ttt_enabled || o->ttt_elsewhere) return 0;
    /* then, as the record ends, the artifact's weights scored with test-time training, here in
     * this one process */
    if (stop_requested()) return stop_abandon("the golf artifact's test-time-training evaluation");
    DistInfo single;
    memset(&single, 0, sizeof single);
    single.world_size = 1;
    return golf_ttt_evaluate(cfg, st, &single, o->format);
}

const char *golf_eval_label(GolfFormat format) {
    return format == GOLF_INT8_ZLIB ? "final_int8_zlib" : format == GOLF_INT6_ZSTD ? "final_int6" : "final_gptq";
}

int golf_ttt_evaluate(const Config *cfg, TrainState *st, const DistInfo *d, GolfFormat format) {
    char label[64];
    snprintf(label, sizeof label, "%s_ttt_phased", golf_eval_label(format));
    const TttOptions t = {1, label, NULL, -1};
    TttResult r;
    return ttt_evaluate(cfg, st, d, &t, &r);
}
