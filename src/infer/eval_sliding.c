/* eval_sliding.c — the record's sliding-window validation (its train_gpt.py's eval_val_sliding,
 * eval_stride > 0): which windows there are, which positions each scores, and the loss, token
 * and byte sums of a range of windows on one backend. The sums across ranks and the mean are
 * eval.c's (val_evaluate_sliding); this file has no collective, so the CUDA tests link it alone. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "infer.h"
#include "stop.h"

int64_t val_sliding_windows(int64_t total_tokens, int64_t stride) { return (total_tokens + stride - 1) / stride; }

void val_sliding_window(int64_t window, int64_t total_tokens, int64_t seq_len, int64_t stride, int64_t *start,
                        int64_t *length, int64_t *scored_from) {
    *start = window * stride;
    *length = total_tokens - *start < seq_len ? total_tokens - *start : seq_len;
    /* the first window scores every position (no earlier window saw them); the others their
     * last `stride`, all of a window shorter than that */
    *scored_from = window == 0 ? 0 : (*length > stride ? *length - stride : 0);
}

int val_sliding_sums(Backend *b, const ValData *v, int64_t seq_len, int64_t stride, int64_t first, int64_t end,
                     double sums[3]) {
    return val_sliding_sums_polled(b, v, seq_len, stride, first, end, sums, NULL);
}

int val_sliding_sums_polled(Backend *b, const ValData *v, int64_t seq_len, int64_t stride, int64_t first,
                            int64_t end, double sums[3], const ValPoll *poll) {
    if (stride <= 0 || stride >= seq_len)
        return ct_fail("eval_stride = %lld: expected 0 < eval_stride < train_seq_len = %lld", (long long)stride,
                       (long long)seq_len);
    if (!b->evaluate_positions)
        return ct_fail("eval_stride = %lld: the %s backend gives no per-position losses (sliding-window validation)",
                       (long long)stride, b->name);
    if (b->seq_len != seq_len)
        return ct_fail("sliding-window validation: windows of %lld tokens but the backend's sequences have %d",
                       (long long)seq_len, b->seq_len);
    const int64_t T = seq_len, total = v->num_seqs * T;
    const int B = b->micro_batch_seqs;
    const size_t cap = (size_t)B * (size_t)T;
    uint32_t *inputs = ct_malloc(cap * sizeof(uint32_t), "sliding-window inputs");
    uint32_t *targets = ct_malloc(cap * sizeof(uint32_t), "sliding-window targets");
    float *losses = ct_malloc(cap * sizeof(float), "sliding-window losses");
    double loss_sum = 0, tokens = 0, bytes = 0;
    int rc = 0;
    for (int64_t w0 = first; w0 < end; w0 += B) {
        const int n = (int)(end - w0 < B ? end - w0 : B);
        const int stop = poll ? poll->stop(poll->ctx, (w0 - first) / B) : 0;
        if (stop != 0) {
            rc = stop < 0 ? ct_fail_prefix("sliding-window validation") : stop_abandon("the sliding-window validation");
            break;
        }
        /* a window shorter than seq_len is padded with token 0, as train_gpt.py pads it: the
         * attention is causal, so positions after the window change none of its losses */
        memset(inputs, 0, (size_t)n * (size_t)T * sizeof(uint32_t));
        memset(targets, 0, (size_t)n * (size_t)T * sizeof(uint32_t));
        for (int i = 0; i < n; i++) {
            int64_t start, len, from;
            val_sliding_window(w0 + i, total, T, stride, &start, &len, &from);
            memcpy(inputs + (size_t)i * T, v->tokens + start, (size_t)len * sizeof(uint32_t));
            memcpy(targets + (size_t)i * T, v->tokens + start + 1, (size_t)len * sizeof(uint32_t));
        }
        if (b->evaluate_positions(b, inputs, targets, n, losses) != 0) {
            rc = ct_fail_prefix("sliding-window validation");
            break;
        }
        for (int i = 0; i < n; i++) {
            int64_t start, len, from;
            val_sliding_window(w0 + i, total, T, stride, &start, &len, &from);
            double window_sum = 0;
            for (int64_t j = from; j < len; j++) window_sum += losses[(size_t)i * T + j];
            loss_sum += window_sum;
            tokens += (double)(len - from);
            bytes += val_target_bytes(v, start + from, len - from);
        }
    }
    free(inputs);
    free(targets);
    free(losses);
    sums[0] = loss_sum, sums[1] = tokens, sums[2] = bytes;
    return rc;
}
