/* ttt_plan.c — the plan of the score-first test-time-training evaluation (ttt_plan.h: the rules
 * are there): documents, batches, the scoring queue, phases and their segments, the global
 * steps' documents, chunk windows, the ranks' shares and the global step's chunk schedule. Pure
 * functions of the tokens and the keys, so every rank computes the same plan on its own and no
 * rank waits for another to learn what to score. */
#include "ttt_plan.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* A sort key and a unique index. qsort is not stable, but every order here is by (key, index)
 * with no two entries equal, so the order is total and the same on every rank and libc. */
typedef struct {
    int64_t key, index;
} KeyIndex;

static int by_key_then_index(const void *a, const void *b) {
    const KeyIndex *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int64_t batch_size_of(const TttPlan *p, int64_t b) { return p->batch_first[b + 1] - p->batch_first[b]; }

/* A batch's longest document: its last slot (slots are in ascending predictions). */
static int64_t batch_longest(const TttPlan *p, int64_t b) {
    return p->docs[p->batch_docs[p->batch_first[b + 1] - 1]].predictions;
}

int ttt_plan_build(TttPlan *p, const uint32_t *tokens, int64_t n, int64_t bos_id, int64_t batch_size,
                   int64_t prefix_docs, int64_t num_phases, const char *what) {
    memset(p, 0, sizeof *p);
    if (bos_id < 0)
        return ct_fail("ttt_enabled = 1 needs the validation data's bos_id: '%s' records none (%lld); documents "
                       "start at BOS tokens",
                       what, (long long)bos_id);
    if (batch_size < 1) return ct_fail("ttt_batch_size = %lld: expected >= 1", (long long)batch_size);
    if (prefix_docs < 0)
        return ct_fail("phased_ttt_prefix_docs = %lld: expected >= 0 (0 = no global step)", (long long)prefix_docs);
    if (num_phases < 1 || num_phases > INT_MAX)
        return ct_fail("phased_ttt_num_phases = %lld: expected in [1, 2^31 - 1]", (long long)num_phases);
    if (n < 1 || !tokens) return ct_fail("'%s' holds no validation tokens: test-time training needs a document", what);
    if ((int64_t)tokens[0] != bos_id)
        return ct_fail("'%s' does not start with BOS (token %u at position 0, bos_id %lld): the tokens before its "
                       "first BOS would never be scored",
                       what, tokens[0], (long long)bos_id);

    /* a BOS that is the split's last token would start a document of no prediction */
    int64_t D = 0;
    for (int64_t i = 0; i + 1 < n; i++) D += (int64_t)tokens[i] == bos_id;
    if (D == 0)
        return ct_fail("'%s' holds no document: its %lld token(s) have no prediction after a BOS", what, (long long)n);
    p->num_docs = D;
    p->docs = ct_calloc((size_t)D, sizeof *p->docs, "the TTT plan's documents");
    for (int64_t i = 0, d = 0; i + 1 < n; i++)
        if ((int64_t)tokens[i] == bos_id) p->docs[d++].start = i;
    /* a slice runs up to and including the next document's BOS: predictions = its length - 1 */
    for (int64_t d = 0; d < D; d++)
        p->docs[d].predictions = (d + 1 < D ? p->docs[d + 1].start : n - 1) - p->docs[d].start;

    /* batches: ascending predictions, ties in split order, cut from the shortest */
    KeyIndex *order = ct_malloc((size_t)D * sizeof *order, "the TTT plan's document order");
    for (int64_t d = 0; d < D; d++) order[d] = (KeyIndex){p->docs[d].predictions, d};
    qsort(order, (size_t)D, sizeof *order, by_key_then_index);
    p->num_batches = (D + batch_size - 1) / batch_size;
    p->batch_docs = ct_malloc((size_t)D * sizeof *p->batch_docs, "the TTT plan's batches");
    p->batch_first = ct_malloc((size_t)(p->num_batches + 1) * sizeof *p->batch_first, "the TTT plan's batches");
    for (int64_t j = 0; j < D; j++) {
        p->batch_docs[j] = order[j].index;
        p->docs[order[j].index].batch = j / batch_size;
        p->docs[order[j].index].slot = j % batch_size;
    }
    for (int64_t b = 0; b <= p->num_batches; b++) p->batch_first[b] = b * batch_size < D ? b * batch_size : D;
    free(order);

    /* the queue: longest document descending, ties by batch index ascending */
    KeyIndex *q = ct_malloc((size_t)p->num_batches * sizeof *q, "the TTT plan's queue");
    for (int64_t b = 0; b < p->num_batches; b++) q[b] = (KeyIndex){-batch_longest(p, b), b};
    qsort(q, (size_t)p->num_batches, sizeof *q, by_key_then_index);
    p->queue = ct_malloc((size_t)p->num_batches * sizeof *p->queue, "the TTT plan's queue");
    for (int64_t i = 0; i < p->num_batches; i++) p->queue[i] = q[i].index;
    free(q);

    /* phases: b_k documents for step k; segment k ends where the queue's running count reaches b_k */
    p->prefix_docs = prefix_docs < D ? prefix_docs : D;
    p->num_phases = p->prefix_docs > 0 ? (int)num_phases : 0;
    p->phase_docs = ct_malloc((size_t)p->num_phases * sizeof *p->phase_docs, "the TTT plan's phases");
    p->segment_end = ct_malloc((size_t)(p->num_phases + 1) * sizeof *p->segment_end, "the TTT plan's segments");
    int64_t at = 0, scored = 0; /* queue entries taken, their documents */
    for (int k = 0; k < p->num_phases; k++) {
        /* (prefix <= D and K < 2^31 keep the product inside int64 for any split that fits memory) */
        p->phase_docs[k] = p->prefix_docs * (k + 1) / num_phases;
        while (scored < p->phase_docs[k]) scored += batch_size_of(p, p->queue[at++]);
        p->segment_end[k] = at;
    }
    p->segment_end[p->num_phases] = p->num_batches;
    return 0;
}

void ttt_plan_free(TttPlan *p) {
    free(p->docs);
    free(p->batch_docs);
    free(p->batch_first);
    free(p->queue);
    free(p->phase_docs);
    free(p->segment_end);
    memset(p, 0, sizeof *p);
}

int64_t ttt_plan_phase_docs(const TttPlan *p, int k, int64_t *out) {
    if (k < 0 || k >= p->num_phases) return 0;
    /* the batches of segments 0..k, then their documents in (batch, slot) order: shortest first */
    unsigned char *scored = ct_calloc((size_t)p->num_batches, 1, "the TTT plan's scored batches");
    for (int64_t i = 0; i < p->segment_end[k]; i++) scored[p->queue[i]] = 1;
    int64_t m = 0;
    for (int64_t b = 0; b < p->num_batches && m < p->phase_docs[k]; b++)
        for (int64_t j = p->batch_first[b]; scored[b] && j < p->batch_first[b + 1] && m < p->phase_docs[k]; j++)
            out[m++] = p->batch_docs[j];
    free(scored);
    return m;
}

int64_t ttt_doc_chunks(int64_t predictions, int64_t chunk) {
    return predictions > 0 && chunk > 0 ? (predictions + chunk - 1) / chunk : 0;
}

void ttt_chunk_window(int64_t predictions, int64_t c, int64_t chunk, int64_t ctx, int64_t *win_start,
                      int64_t *win_len, int64_t *scored_from, int64_t *scored_len) {
    const int64_t from = c * chunk, end = from + chunk < predictions ? from + chunk : predictions;
    const int64_t w = end - ctx > 0 ? end - ctx : 0;
    *win_start = w;
    *win_len = end - w;
    *scored_from = from - w;
    *scored_len = end - from;
}

/* The estimated cost of batch b (ttt_plan.h, "Ranks"): per chunk step, the documents that still
 * have that chunk times the step's window (its longest document's) times 3 when it trains. */
static int64_t batch_cost(const TttPlan *p, int64_t b, int64_t chunk, int64_t ctx) {
    const int64_t last = p->batch_first[b + 1], longest = batch_longest(p, b);
    const int64_t steps = ttt_doc_chunks(longest, chunk);
    int64_t cost = 0, active = p->batch_first[b]; /* slots before `active` have finished */
    for (int64_t c = 0; c < steps; c++) {
        while (ttt_doc_chunks(p->docs[p->batch_docs[active]].predictions, chunk) <= c) active++;
        int64_t win_start, win_len, scored_from, scored_len;
        ttt_chunk_window(longest, c, chunk, ctx, &win_start, &win_len, &scored_from, &scored_len);
        cost += (last - active) * win_len * (c + 1 < steps ? 3 : 1);
    }
    return cost;
}

void ttt_plan_assign(const TttPlan *p, int world, int64_t chunk, int64_t ctx, int *rank_of) {
    if (world < 1) world = 1;
    int64_t *load = ct_malloc((size_t)world * sizeof *load, "the TTT plan's rank loads");
    for (int s = 0; s <= p->num_phases; s++) {
        /* each segment is shared out afresh: the ranks meet at its end */
        for (int r = 0; r < world; r++) load[r] = 0;
        for (int64_t i = s ? p->segment_end[s - 1] : 0; i < p->segment_end[s]; i++) {
            int best = 0;
            for (int r = 1; r < world; r++)
                if (load[r] < load[best]) best = r;
            rank_of[i] = best;
            load[best] += batch_cost(p, p->queue[i], chunk, ctx);
        }
    }
    free(load);
}

int64_t ttt_global_chunks(int64_t stream_tokens, int64_t chunk_tokens) {
    const int64_t targets = stream_tokens - 1;
    return targets > 0 && chunk_tokens > 0 ? (targets + chunk_tokens - 1) / chunk_tokens : 0;
}

int64_t ttt_global_rows(int64_t stream_tokens, int64_t chunk_tokens, int64_t seq_len, int64_t i) {
    const int64_t n = ttt_global_chunks(stream_tokens, chunk_tokens);
    if (i < 0 || i + 1 >= n || seq_len < 1) return 0; /* the last chunk is scored, never trained on */
    const int64_t targets = stream_tokens - 1, from = i * chunk_tokens;
    const int64_t end = from + chunk_tokens < targets ? from + chunk_tokens : targets;
    return (end - from) / seq_len;
}

double ttt_global_lr(int64_t i, int64_t n, double lr, double warmup_start_lr, int64_t warmup_chunks) {
    int64_t w = warmup_chunks < n - 1 ? warmup_chunks : n - 1;
    if (w < 0) w = 0;
    /* the record's expressions in its order of operations, so the doubles are its bits */
    if (i < w) {
        const double t = (double)i / (double)(w - 1 > 1 ? w - 1 : 1);
        return warmup_start_lr + (lr - warmup_start_lr) * t;
    }
    const int64_t decay = n - 1 - w > 1 ? n - 1 - w : 1;
    return lr * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)(i - w) / (double)decay));
}
