/* golf_round_trip.c — train_gpt.py's ending, for `golf_artifact = 1` and `ctrain ckpt golf`:
 * the int8 + zlib artifact written (golf_artifact.c) and its size printed as train_gpt.py prints
 * it, then read back and evaluated (eval.c), so the score is that of the weights a reader of the
 * artifact gets. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "golf_artifact.h"
#include "infer.h"

/* parameter-golf's limit on a submission: the artifact plus the code that loads it */
#define GOLF_SIZE_CAP 16000000LL

int golf_write_and_evaluate(const Config *cfg, TrainState *st, const char *path, int evaluate, int64_t code_bytes) {
    GolfStats g;
    if (golf_write(&st->spec, st->params, path, &g) != 0) return -1;
    printf("int8 artifact: %lld parameters in %lld tensors, %lld quantized to int8\n", (long long)g.param_count,
           (long long)g.num_tensors, (long long)g.num_quantized);
    printf("Serialized model int8+zlib: %lld bytes (payload:%lld raw:%lld payload_ratio:%.2fx) -> %s\n",
           (long long)g.file_bytes, (long long)g.payload_bytes, (long long)g.raw_bytes,
           (double)g.baseline_bytes / (double)(g.payload_bytes > 0 ? g.payload_bytes : 1), path);
    const long long total = (long long)g.file_bytes + (code_bytes > 0 ? (long long)code_bytes : 0);
    if (code_bytes >= 0) {
        printf("Code size: %lld bytes\n", (long long)code_bytes);
        printf("Total submission size int8+zlib: %lld bytes\n", total);
    }
    if (total <= GOLF_SIZE_CAP)
        printf("size: %lld bytes%s, under the %lld-byte cap by %lld bytes\n", total,
               code_bytes >= 0 ? " with the code" : " (artifact only: give --code-bytes for the code's share)",
               GOLF_SIZE_CAP, GOLF_SIZE_CAP - total);
    else
        printf("size: %lld bytes%s, OVER the %lld-byte cap by %lld bytes\n", total,
               code_bytes >= 0 ? " with the code" : " (artifact only)", GOLF_SIZE_CAP, total - GOLF_SIZE_CAP);
    fflush(stdout);
    if (!evaluate) return 0;
    /* the weights as a reader of the artifact gets them, evaluated as train_gpt.py does (and
     * with eval_stride, its sliding window too) */
    if (golf_read(&st->spec, path, st->params) != 0 || print_round_trip_evaluation(cfg, st, "final_int8_zlib") != 0)
        return -1;
    return 0;
}
