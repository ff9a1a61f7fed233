/* sample.c — text from a model (`ctrain sample`): each next token is drawn from the
 * softcapped logits at the end of the context (the last train_seq_len tokens), after
 * temperature and top-k, with a seeded generator so that the same seed gives the same text.
 * Every token runs the model over a full window (no key/value cache): simple and exact to the
 * trained model, and fast enough for the short samples this is for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "infer.h"

/* splitmix64: a small generator with good statistics, the same sequence on every machine */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int compare_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Draw a token from logits (modified in place). */
static uint32_t draw(float *logits, int vocab, const SampleOptions *o, uint64_t *rng, float *work) {
    int best = 0;
    for (int v = 1; v < vocab; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0 || o->top_k == 1) return (uint32_t)best;
    float cut = -INFINITY;
    if (o->top_k > 1 && o->top_k < vocab) { /* keep the k largest (and any equal to the k-th) */
        memcpy(work, logits, (size_t)vocab * sizeof(float));
        qsort(work, (size_t)vocab, sizeof(float), compare_desc);
        cut = work[o->top_k - 1];
    }
    double total = 0;
    double *p = (double *)work; /* vocab doubles: the caller gave room */
    for (int v = 0; v < vocab; v++) {
        p[v] = logits[v] < cut ? 0.0 : exp(((double)logits[v] - logits[best]) / o->temperature);
        total += p[v];
    }
    double u = (double)(next_random(rng) >> 11) * 0x1.0p-53 * total, acc = 0;
    for (int v = 0; v < vocab; v++) {
        acc += p[v];
        if (p[v] > 0 && u < acc) return (uint32_t)v;
    }
    return (uint32_t)best;
}

int sample_tokens(Backend *b, const uint32_t *prompt, int64_t prompt_len, const SampleOptions *o,
                  void (*emit)(void *ctx, uint32_t token), void *ctx) {
    if (!b->position_logits)
        return ct_fail("sampling is not available on device %s yet; use device cpu", b->name);
    if (prompt_len < 1) return ct_fail("the prompt is empty: give at least one token");
    const int T = b->seq_len, vocab = b->state->spec.vocab;
    int64_t cap = prompt_len + o->num_tokens;
    uint32_t *seq = ct_malloc((size_t)cap * sizeof(uint32_t), "sample tokens");
    uint32_t *window = ct_calloc((size_t)T, sizeof(uint32_t), "sample window");
    float *logits = ct_malloc((size_t)vocab * sizeof(float), "logits");
    float *work = ct_malloc((size_t)vocab * sizeof(double), "sampling scratch");
    memcpy(seq, prompt, (size_t)prompt_len * sizeof(uint32_t));
    uint64_t rng = o->seed;
    int rc = 0;
    for (int64_t len = prompt_len; len < cap; len++) {
        int64_t start = len > T ? len - T : 0;
        int n = (int)(len - start);
        memcpy(window, seq + start, (size_t)n * sizeof(uint32_t));
        memset(window + n, 0, (size_t)(T - n) * sizeof(uint32_t)); /* after the position: unused */
        if ((rc = b->position_logits(b, window, n - 1, logits)) != 0) break;
        seq[len] = draw(logits, vocab, o, &rng, work);
        emit(ctx, seq[len]);
    }
    free(work);
    free(logits);
    free(window);
    free(seq);
    return rc;
}
