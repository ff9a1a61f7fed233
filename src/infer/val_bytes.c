/* val_bytes.c — the bytes a validation's predicted tokens stand for, the denominator of bits per
 * byte (infer.h): the split's /bytes_per_token counts (CaseOps data), else train_gpt.py's rule
 * on the tokenizer tables. Shared by the plain and the sliding-window validation. */
#include "infer.h"

const char *val_bytes_source(const ValData *v) {
    return v->byte_counts ? "bytes_per_token" : v->base_bytes ? "tokenizer tables" : NULL;
}

double val_target_bytes(const ValData *v, int64_t at, int64_t n) {
    double bytes = 0;
    if (v->byte_counts) {
        for (int64_t i = 1; i <= n; i++) bytes += v->byte_counts[at + i];
    } else if (v->base_bytes) {
        for (int64_t i = 0; i < n; i++) {
            const uint32_t prev = v->tokens[at + i], tgt = v->tokens[at + i + 1];
            bytes += v->base_bytes[tgt] + (v->has_leading_space[tgt] && !v->is_boundary_token[prev] ? 1 : 0);
        }
    }
    return bytes;
}
