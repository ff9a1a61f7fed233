/* test_ttt_plan.c — the test-time-training plan (src/infer/ttt_plan.c) against plans worked out
 * by hand: documents at every BOS (consecutive ones, one at the split's end), the batches and the
 * longest-first queue with its tie rule, the phases' segments and the global steps' documents,
 * chunk windows, the ranks' longest-processing-time shares, the global step's chunks, rows and
 * learning rates, and every refusal naming the file, the key and the value; then random splits
 * checked against each rule one by one. */
#include <math.h>
#include <string.h>

#include "common.h"
#include "harness.h"
#include "ttt_plan.h"

enum { BOS = 1 };

/* The hand example: 11 documents of these predictions, in split order. Its split:
 *   d:      0  1  2   3   4   5   6   7   8   9   10
 *   P:      4  1  7   3   3   7   2   5   1   7   3      (sum 43; the split has 44 tokens)
 *   start:  0  4  5  12  15  18  25  27  32  33  40
 * d's slice is its BOS and P - 1 other tokens, closed by the next document's BOS (d1 and d8 are a
 * BOS followed at once by the next one: consecutive BOS); d10 runs to the end: 40 + 3 = 43. */
static const int64_t HAND_P[11] = {4, 1, 7, 3, 3, 7, 2, 5, 1, 7, 3};
static const int64_t HAND_START[11] = {0, 4, 5, 12, 15, 18, 25, 27, 32, 33, 40};
enum { HAND_DOCS = 11, HAND_N = 44 };

/* A split of documents with predictions P[0..docs): each a BOS then P - 1 other tokens (values
 * 2..6, never BOS), the last document one more (it has no next BOS to close it). Returns n. */
static int64_t make_split(const int64_t *P, int docs, uint32_t *tokens) {
    int64_t n = 0;
    for (int d = 0; d < docs; d++) {
        tokens[n++] = BOS;
        for (int64_t j = 1; j < P[d] + (d + 1 == docs); j++, n++) tokens[n] = (uint32_t)(2 + n % 5);
    }
    return n;
}

static int build_hand(TttPlan *p, int64_t batch, int64_t prefix, int64_t phases) {
    uint32_t tokens[HAND_N];
    const int64_t n = make_split(HAND_P, HAND_DOCS, tokens);
    if (n != HAND_N) return -1;
    return ttt_plan_build(p, tokens, n, BOS, batch, prefix, phases, "hand.h5");
}

/* Compare int64 arrays, naming the first difference. */
#define CHECK_ARRAY(what, got, want, count)                                                              \
    for (int64_t i_ = 0; i_ < (int64_t)(count); i_++)                                                    \
    CHECK((got)[i_] == (want)[i_], "%s[%lld] = %lld, expected %lld", what, (long long)i_, (long long)(got)[i_], \
          (long long)(want)[i_])

/* Sorted by (P, split index): P 1: d1 d8 | 2: d6 | 3: d3 d4 d10 | 4: d0 | 5: d7 | 7: d2 d5 d9.
 * Cut in threes from the shortest: B0 = [d1 d8 d6] (longest 2), B1 = [d3 d4 d10] (3),
 * B2 = [d0 d7 d2] (7), B3 = [d5 d9] (7). The queue, longest first: B2 and B3 tie at 7 and go in
 * batch order (B2 first, not the reverse of the batches), then B1, then B0. */
static void hand_documents_batches_queue(void) {
    TttPlan p;
    CHECK(build_hand(&p, 3, 0, 1) == 0, "%s", ct_error());
    const int64_t batch_docs[11] = {1, 8, 6, 3, 4, 10, 0, 7, 2, 5, 9}, batch_first[5] = {0, 3, 6, 9, 11};
    const int64_t queue[4] = {2, 3, 1, 0};
    /* each document's (batch, slot), from batch_docs above */
    const int64_t batch[11] = {2, 0, 2, 1, 1, 3, 0, 2, 0, 3, 1}, slot[11] = {0, 0, 2, 0, 1, 0, 2, 1, 1, 1, 2};
    const int64_t docs = p.num_docs, batches_n = p.num_batches;
    const int ok = docs == 11 && batches_n == 4;
    int64_t starts[11], preds[11], batches[11], slots[11], bd[11], bf[5], qu[4];
    for (int d = 0; ok && d < 11; d++)
        starts[d] = p.docs[d].start, preds[d] = p.docs[d].predictions, batches[d] = p.docs[d].batch,
        slots[d] = p.docs[d].slot, bd[d] = p.batch_docs[d];
    if (ok) memcpy(bf, p.batch_first, sizeof bf), memcpy(qu, p.queue, sizeof qu);
    ttt_plan_free(&p);
    CHECK(ok, "documents %lld, batches %lld: expected 11 and 4", (long long)docs, (long long)batches_n);
    CHECK_ARRAY("start", starts, HAND_START, 11);
    CHECK_ARRAY("predictions", preds, HAND_P, 11);
    CHECK_ARRAY("batch_docs", bd, batch_docs, 11);
    CHECK_ARRAY("batch_first", bf, batch_first, 5);
    CHECK_ARRAY("batch", batches, batch, 11);
    CHECK_ARRAY("slot", slots, slot, 11);
    CHECK_ARRAY("queue", qu, queue, 4);
}

/* Prefix 7, 3 phases: b = floor(7 (k+1) / 3) = 2, 4, 7. The queue's running document count:
 * B2 3, B3 5, B1 8, B0 11; it first reaches 2 at position 0, 4 at 1, 7 at 2, so segment_end =
 * [1, 2, 3, 4]: one batch per segment. Step 0: segment 0's batches {B2} in (batch, slot) order
 * d0 d7 d2, the first 2: d0 d7. Step 1: {B2, B3}: d0 d7 d2 d5 d9, the first 4. Step 2: {B1, B2,
 * B3}: d3 d4 d10 d0 d7 d2 d5 d9, the first 7 (B1, scored last of the three, comes first: the
 * steps take the shortest). */
static void hand_phases_and_segments(void) {
    TttPlan p;
    CHECK(build_hand(&p, 3, 7, 3) == 0, "%s", ct_error());
    const int64_t phase_docs[3] = {2, 4, 7}, segment_end[4] = {1, 2, 3, 4};
    const int64_t step0[2] = {0, 7}, step1[4] = {0, 7, 2, 5}, step2[7] = {3, 4, 10, 0, 7, 2, 5};
    int64_t pd[3] = {0}, se[4] = {0}, s0[11] = {0}, s1[11] = {0}, s2[11] = {0}, m0 = -1, m1 = -1, m2 = -1;
    const int64_t prefix = p.prefix_docs;
    const int phases = p.num_phases;
    if (phases == 3) {
        memcpy(pd, p.phase_docs, sizeof pd), memcpy(se, p.segment_end, sizeof se);
        m0 = ttt_plan_phase_docs(&p, 0, s0), m1 = ttt_plan_phase_docs(&p, 1, s1), m2 = ttt_plan_phase_docs(&p, 2, s2);
    }
    ttt_plan_free(&p);
    CHECK(prefix == 7 && phases == 3, "prefix %lld, phases %d: expected 7 and 3", (long long)prefix, phases);
    CHECK_ARRAY("phase_docs", pd, phase_docs, 3);
    CHECK_ARRAY("segment_end", se, segment_end, 4);
    CHECK(m0 == 2 && m1 == 4 && m2 == 7, "step documents %lld %lld %lld: expected 2 4 7", (long long)m0,
          (long long)m1, (long long)m2);
    CHECK_ARRAY("step 0", s0, step0, 2);
    CHECK_ARRAY("step 1", s1, step1, 4);
    CHECK_ARRAY("step 2", s2, step2, 7);
}

/* Every token after the first BOS is the target of exactly one document (the slices' targets
 * start + 1 .. start + P tile [1, n)), so the predictions sum to n - 1; batch_docs is a
 * permutation and each document's (batch, slot) points back at it. */
static void every_target_once(void) {
    static const int64_t P[] = {1, 1, 5, 2, 1, 9, 3, 1, 1, 4, 2, 6, 1};
    enum { DOCS = sizeof P / sizeof P[0] };
    uint32_t tokens[64];
    const int64_t n = make_split(P, DOCS, tokens);
    TttPlan p;
    CHECK(ttt_plan_build(&p, tokens, n, BOS, 4, 5, 2, "cover.h5") == 0, "%s", ct_error());
    int cover[64] = {0}, seen[DOCS] = {0}, back = 1;
    int64_t sum = 0;
    for (int64_t d = 0; d < p.num_docs; d++) {
        sum += p.docs[d].predictions;
        for (int64_t t = p.docs[d].start + 1; t <= p.docs[d].start + p.docs[d].predictions && t < 64; t++) cover[t]++;
        back &= p.batch_docs[p.batch_first[p.docs[d].batch] + p.docs[d].slot] == d;
    }
    for (int64_t j = 0; j < p.num_docs; j++) seen[p.batch_docs[j]]++;
    const int64_t docs = p.num_docs;
    ttt_plan_free(&p);
    CHECK(docs == DOCS, "%lld documents, expected %d", (long long)docs, (int)DOCS);
    CHECK(sum == n - 1, "predictions sum to %lld, expected n - 1 = %lld", (long long)sum, (long long)(n - 1));
    CHECK(cover[0] == 0, "the first BOS is a target");
    for (int64_t t = 1; t < n; t++) CHECK(cover[t] == 1, "target %lld scored %d times", (long long)t, cover[t]);
    for (int d = 0; d < DOCS; d++) CHECK(seen[d] == 1, "document %d in %d batch slots", d, seen[d]);
    CHECK(back, "a document's (batch, slot) does not lead back to it");
}

/* A BOS as the split's last token starts no document (its predictions would be 0): it is the
 * previous document's last target. Two BOS in a row: a document of one prediction (the BOS). */
static void split_edges(void) {
    TttPlan p;
    const uint32_t ends_bos[] = {BOS, 5, 6, BOS, 4, BOS};
    CHECK(ttt_plan_build(&p, ends_bos, 6, BOS, 2, 0, 1, "e.h5") == 0, "%s", ct_error());
    const int64_t d1 = p.num_docs, s1 = p.docs[1].start, p1 = p.docs[1].predictions, p0 = p.docs[0].predictions;
    ttt_plan_free(&p);
    CHECK(d1 == 2 && p0 == 3 && s1 == 3 && p1 == 2, "docs %lld, P0 %lld, start1 %lld, P1 %lld: expected 2, 3, 3, 2",
          (long long)d1, (long long)p0, (long long)s1, (long long)p1);
    const uint32_t two[] = {BOS, BOS};
    CHECK(ttt_plan_build(&p, two, 2, BOS, 2, 0, 1, "two.h5") == 0, "%s", ct_error());
    const int64_t d2 = p.num_docs, p2 = p.docs[0].predictions;
    ttt_plan_free(&p);
    CHECK(d2 == 1 && p2 == 1, "[BOS BOS]: %lld documents of %lld predictions, expected 1 of 1", (long long)d2,
          (long long)p2);
    const uint32_t three[] = {BOS, BOS, BOS, 9};
    CHECK(ttt_plan_build(&p, three, 4, BOS, 8, 0, 1, "three.h5") == 0, "%s", ct_error());
    const int64_t d3 = p.num_docs, a = p.docs[0].predictions, b = p.docs[1].predictions, c = p.docs[2].predictions;
    ttt_plan_free(&p);
    CHECK(d3 == 3 && a == 1 && b == 1 && c == 1, "[BOS BOS BOS 9]: %lld documents (%lld %lld %lld), expected 3 of 1",
          (long long)d3, (long long)a, (long long)b, (long long)c);
}

/* One window: (start, length, scored from, scored length). */
static int window_is(int64_t P, int64_t c, int64_t C, int64_t E, int64_t ws, int64_t wl, int64_t sf, int64_t sl) {
    int64_t a = -1, b = -1, x = -1, y = -1;
    ttt_chunk_window(P, c, C, E, &a, &b, &x, &y);
    return a == ws && b == wl && x == sf && y == sl;
}

/* P = 23, C = 4, E = 10: 6 chunks. Chunk c predicts [4c, min(4c + 4, 23)); its window ends
 * there and starts E = 10 earlier (at 0 while that is negative):
 *   c 0: [0, 4)   window [0, 4)   scores window positions [0, 4)   (shorter than E)
 *   c 1: [4, 8)   window [0, 8)   scores [4, 8)                    (shorter than E)
 *   c 2: [8, 12)  window [2, 12)  scores [6, 10)
 *   c 5: [20, 23) window [13, 23) scores [7, 10)                    (the last, 3 predictions)
 * C = E = 5, P = 12: windows [0,5) [5,10) [7,12), scoring [0,5) [0,5) [3,5). P = 1: one chunk,
 * window [0, 1). And for many shapes the scored positions tile [0, P) once, each inside its
 * window, the window at most E long. */
static void chunk_windows(void) {
    CHECK(ttt_doc_chunks(23, 4) == 6 && ttt_doc_chunks(24, 4) == 6 && ttt_doc_chunks(25, 4) == 7 &&
              ttt_doc_chunks(1, 48) == 1 && ttt_doc_chunks(48, 48) == 1 && ttt_doc_chunks(49, 48) == 2,
          "ttt_doc_chunks");
    CHECK(window_is(23, 0, 4, 10, 0, 4, 0, 4), "first chunk");
    CHECK(window_is(23, 1, 4, 10, 0, 8, 4, 4), "a window shorter than E");
    CHECK(window_is(23, 2, 4, 10, 2, 10, 6, 4), "a middle chunk");
    CHECK(window_is(23, 5, 4, 10, 13, 10, 7, 3), "the last chunk");
    CHECK(ttt_doc_chunks(12, 5) == 3, "C = E chunks");
    CHECK(window_is(12, 0, 5, 5, 0, 5, 0, 5) && window_is(12, 1, 5, 5, 5, 5, 0, 5) && window_is(12, 2, 5, 5, 7, 5, 3, 2),
          "C = E");
    CHECK(window_is(1, 0, 4, 10, 0, 1, 0, 1), "a one-prediction document");
    for (int64_t P = 1; P <= 40; P++)
        for (int64_t C = 1; C <= 9; C++)
            for (int64_t E = C; E <= 12; E++) {
                int64_t next = 0;
                for (int64_t c = 0; c < ttt_doc_chunks(P, C); c++) {
                    int64_t ws, wl, sf, sl;
                    ttt_chunk_window(P, c, C, E, &ws, &wl, &sf, &sl);
                    CHECK(ws + sf == next && sl >= 1 && sl <= C && sf + sl == wl && wl <= E && ws >= 0 && ws + wl <= P,
                          "P %lld C %lld E %lld chunk %lld: window [%lld, +%lld) scores [%lld, +%lld), next %lld",
                          (long long)P, (long long)C, (long long)E, (long long)c, (long long)ws, (long long)wl,
                          (long long)sf, (long long)sl, (long long)next);
                    next = ws + sf + sl;
                }
                CHECK(next == P, "P %lld C %lld E %lld: chunks end at %lld", (long long)P, (long long)C, (long long)E,
                      (long long)next);
            }
}

/* The hand example with prefix 7 and 7 phases: b = 1..7. The running count is 3 after B2, 5
 * after B3, 8 after B1: b = 1, 2, 3 are all reached at position 0 (segment_end 1, 1, 1: segments
 * 1 and 2 are empty), 4 and 5 at position 1 (2, 2), 6 and 7 at position 2 (3, 3); the rest, B0,
 * is segment 7. Step 1 (b = 2): segments 0..1 = {B2}: d0 d7. */
static void segments_when_a_batch_passes_two_boundaries(void) {
    TttPlan p;
    CHECK(build_hand(&p, 3, 7, 7) == 0, "%s", ct_error());
    const int64_t segment_end[8] = {1, 1, 1, 2, 2, 3, 3, 4}, phase_docs[7] = {1, 2, 3, 4, 5, 6, 7};
    int64_t se[8] = {0}, pd[7] = {0}, step1[11] = {0}, m = -1;
    const int phases = p.num_phases;
    if (phases == 7) {
        memcpy(se, p.segment_end, sizeof se), memcpy(pd, p.phase_docs, sizeof pd);
        m = ttt_plan_phase_docs(&p, 1, step1);
    }
    ttt_plan_free(&p);
    CHECK(phases == 7, "%d phases", phases);
    CHECK_ARRAY("segment_end", se, segment_end, 8);
    CHECK_ARRAY("phase_docs", pd, phase_docs, 7);
    CHECK(m == 2 && step1[0] == 0 && step1[1] == 7, "step 1: %lld documents", (long long)m);
}

/* Prefix 0: no phase, one segment (the whole queue). Prefix 100 > 11 documents, 2 phases: the
 * prefix is clamped to 11, b = 5, 11: segment_end 2 (after B2 B3, 5 documents), 4, and the last
 * segment is empty; step 1 takes every document, in (batch, slot) order. */
static void prefix_zero_and_above_documents(void) {
    TttPlan p;
    CHECK(build_hand(&p, 3, 0, 3) == 0, "%s", ct_error());
    const int phases0 = p.num_phases;
    const int64_t prefix0 = p.prefix_docs, end0 = p.segment_end[0];
    ttt_plan_free(&p);
    CHECK(phases0 == 0 && prefix0 == 0 && end0 == 4, "prefix 0: %d phases, prefix %lld, segment_end[0] %lld",
          phases0, (long long)prefix0, (long long)end0);
    CHECK(build_hand(&p, 3, 100, 2) == 0, "%s", ct_error());
    const int64_t all[11] = {1, 8, 6, 3, 4, 10, 0, 7, 2, 5, 9}, segment_end[3] = {2, 4, 4}, phase_docs[2] = {5, 11};
    int64_t se[3] = {0}, pd[2] = {0}, step1[11] = {0}, m = -1;
    const int phases = p.num_phases;
    const int64_t prefix = p.prefix_docs;
    if (phases == 2) {
        memcpy(se, p.segment_end, sizeof se), memcpy(pd, p.phase_docs, sizeof pd);
        m = ttt_plan_phase_docs(&p, 1, step1);
    }
    ttt_plan_free(&p);
    CHECK(phases == 2 && prefix == 11, "prefix 100: %d phases, prefix %lld: expected 2 and 11", phases,
          (long long)prefix);
    CHECK_ARRAY("segment_end", se, segment_end, 3);
    CHECK_ARRAY("phase_docs", pd, phase_docs, 2);
    CHECK(m == 11, "step 1: %lld documents", (long long)m);
    CHECK_ARRAY("step 1", step1, all, 11);
}

/* The hand batches' costs at C = 2, E = 4 (rows x window x 3 while the longest document has a
 * later chunk, x 1 at its last):
 *   B2 [P 4 5 7]: 4 steps; rows 3 3 2 1 (d0 has 2 chunks, d7 3, d2 4), windows 2 4 4 4:
 *                 3*2*3 + 3*4*3 + 2*4*3 + 1*4*1 = 18 + 36 + 24 + 4 = 82
 *   B3 [P 7 7]:   2*2*3 + 2*4*3 + 2*4*3 + 2*4*1 = 68
 *   B1 [P 3 3 3]: 2 steps: 3*2*3 + 3*3*1 = 27
 *   B0 [P 1 1 2]: 1 step: 3*2*1 = 6
 * Queue B2 B3 B1 B0, prefix 0 (one segment). 2 ranks: B2 -> 0 (tie: lowest), B3 -> 1, B1 -> 1
 * (68 < 82), B0 -> 0 (82 < 95). 3 ranks: B2 -> 0, B3 -> 1, B1 -> 2, B0 -> 2 (27 least). 1 rank:
 * everything on rank 0. With prefix 7 and 3 phases each segment holds one batch and the loads
 * restart per segment: all on rank 0 at 2 ranks.
 * A second split weighs the trained steps: documents P = 3 5 3 4, one per batch, C = 1, E = 100
 * (window c + 1 at chunk c): cost = 3 (1 + ... + (P - 1)) + P = 35, 22, 12, 12 for P = 5, 4, 3,
 * 3, in queue order B3 B2 B0 B1 (the two P = 3 tie: batch order). 2 ranks: 35 -> 0, 22 -> 1,
 * 12 -> 1 (34), 12 -> 1 (34 < 35). Were trained steps weighed 1 (15, 10, 6, 6) or the window
 * taken as E, the last would go to rank 0. */
static void lpt_assignment(void) {
    TttPlan p;
    CHECK(build_hand(&p, 3, 0, 1) == 0, "%s", ct_error());
    int r1[4] = {-1, -1, -1, -1}, r2[4] = {-1, -1, -1, -1}, r3[4] = {-1, -1, -1, -1}, r8[4] = {-1, -1, -1, -1};
    ttt_plan_assign(&p, 1, 2, 4, r1);
    ttt_plan_assign(&p, 2, 2, 4, r2);
    ttt_plan_assign(&p, 3, 2, 4, r3);
    ttt_plan_assign(&p, 8, 2, 4, r8);
    ttt_plan_free(&p);
    const int64_t w1[4] = {0, 0, 0, 0}, w2[4] = {0, 1, 1, 0}, w3[4] = {0, 1, 2, 2}, w8[4] = {0, 1, 2, 3};
    CHECK_ARRAY("1 rank", r1, w1, 4);
    CHECK_ARRAY("2 ranks", r2, w2, 4);
    CHECK_ARRAY("3 ranks", r3, w3, 4);
    CHECK_ARRAY("8 ranks", r8, w8, 4);
    CHECK(build_hand(&p, 3, 7, 3) == 0, "%s", ct_error());
    int rs[4] = {-1, -1, -1, -1};
    ttt_plan_assign(&p, 2, 2, 4, rs);
    ttt_plan_free(&p);
    CHECK_ARRAY("2 ranks, a batch per segment", rs, w1, 4);
    static const int64_t P[4] = {3, 5, 3, 4};
    uint32_t tokens[16];
    const int64_t n = make_split(P, 4, tokens);
    CHECK(ttt_plan_build(&p, tokens, n, BOS, 1, 0, 1, "weights.h5") == 0, "%s", ct_error());
    int64_t queue[4] = {-1, -1, -1, -1};
    if (p.num_batches == 4) memcpy(queue, p.queue, sizeof queue);
    int rw[4] = {-1, -1, -1, -1};
    ttt_plan_assign(&p, 2, 1, 100, rw);
    ttt_plan_free(&p);
    const int64_t wq[4] = {3, 2, 0, 1}, ww[4] = {0, 1, 1, 1};
    CHECK_ARRAY("queue of single documents", queue, wq, 4);
    CHECK_ARRAY("2 ranks, trained steps weighed 3", rw, ww, 4);
}

/* The plan is the same bits built twice (ttt_plan_build has no world size: every rank builds it
 * alone), and at every world size the assignment puts each queue position on one rank in range,
 * the same one when assigned again. */
static void plan_independent_of_world(void) {
    static const int64_t P[] = {3, 8, 1, 1, 12, 5, 5, 2, 9, 4, 7, 1, 6, 2, 10, 3, 3, 11};
    enum { DOCS = sizeof P / sizeof P[0] };
    uint32_t tokens[160];
    const int64_t n = make_split(P, DOCS, tokens);
    TttPlan a, b;
    CHECK(ttt_plan_build(&a, tokens, n, BOS, 4, 9, 3, "w.h5") == 0, "%s", ct_error());
    CHECK(ttt_plan_build(&b, tokens, n, BOS, 4, 9, 3, "w.h5") == 0, "%s", ct_error());
    int same = a.num_docs == b.num_docs && a.num_batches == b.num_batches && a.num_phases == b.num_phases &&
               !memcmp(a.docs, b.docs, (size_t)a.num_docs * sizeof *a.docs) &&
               !memcmp(a.batch_docs, b.batch_docs, (size_t)a.num_docs * sizeof(int64_t)) &&
               !memcmp(a.queue, b.queue, (size_t)a.num_batches * sizeof(int64_t)) &&
               !memcmp(a.segment_end, b.segment_end, (size_t)(a.num_phases + 1) * sizeof(int64_t));
    int in_range = 1, repeat = 1;
    for (int world = 1; world <= 9; world++) {
        int x[8], y[8];
        for (int i = 0; i < 8; i++) x[i] = y[i] = -1;
        ttt_plan_assign(&a, world, 3, 7, x);
        ttt_plan_assign(&b, world, 3, 7, y);
        for (int64_t i = 0; i < a.num_batches; i++) in_range &= x[i] >= 0 && x[i] < world, repeat &= x[i] == y[i];
    }
    const int64_t batches = a.num_batches;
    ttt_plan_free(&a);
    ttt_plan_free(&b);
    CHECK(batches == 5, "%lld batches, expected 5 (18 documents in fours)", (long long)batches);
    CHECK(same, "two builds of the same split differ");
    CHECK(in_range, "a queue position assigned outside [0, world)");
    CHECK(repeat, "the same assignment twice differs");
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static int64_t rnd(int64_t n) { /* xorshift64*, uniform enough in [0, n) for shapes */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (int64_t)((rng_state * 2685821657736338717ULL) >> 33) % n;
}

/* Batch b's cost by the rule, counted afresh: for each chunk step c of its longest document,
 * the documents with more than c chunks, times that document's chunk-c window, times 3 unless c
 * is its last chunk. */
static int64_t cost_by_rule(const TttPlan *p, int64_t b, int64_t C, int64_t E) {
    const int64_t first = p->batch_first[b], last = p->batch_first[b + 1];
    const int64_t longest = p->docs[p->batch_docs[last - 1]].predictions, steps = (longest + C - 1) / C;
    int64_t cost = 0;
    for (int64_t c = 0; c < steps; c++) {
        int64_t rows = 0;
        for (int64_t j = first; j < last; j++) rows += (p->docs[p->batch_docs[j]].predictions + C - 1) / C > c;
        const int64_t end = (c + 1) * C < longest ? (c + 1) * C : longest;
        cost += rows * (end < E ? end : E) * (c + 1 < steps ? 3 : 1);
    }
    return cost;
}

/* 300 random splits (1 to 40 documents of 1 to 30 predictions, random batch size, prefix,
 * phases, world, C and E) against the rules checked one by one: batches full but the last and
 * in (P, index) order; the queue a permutation, longest first, ties by index; each segment_end
 * the first queue position whose running count reaches b_k; each step's documents the first b_k
 * of its segments' in (batch, slot) order; each assignment a rank with the least load. */
static void random_splits_against_the_rules(void) {
    for (int trial = 0; trial < 300; trial++) {
        const int docs = 1 + (int)rnd(40);
        int64_t P[40];
        uint32_t tokens[40 * 30 + 2];
        for (int d = 0; d < docs; d++) P[d] = 1 + rnd(rnd(4) ? 8 : 30);
        const int64_t n = make_split(P, docs, tokens);
        const int64_t B = 1 + rnd(7), prefix = rnd(3) ? rnd(docs + 5) : 0, K = 1 + rnd(prefix > 0 ? prefix : 4);
        const int world = 1 + (int)rnd(5);
        const int64_t C = 1 + rnd(6), E = C + rnd(10);
        TttPlan p;
        CHECK(ttt_plan_build(&p, tokens, n, BOS, B, prefix, K, "random.h5") == 0, "trial %d: %s", trial, ct_error());
        char bad[200] = "";
        const int64_t nb = p.num_batches;
        if (p.num_docs != docs || nb != (docs + B - 1) / B) snprintf(bad, sizeof bad, "counts");
        for (int64_t b = 0; !bad[0] && b < nb; b++)
            if (p.batch_first[b + 1] - p.batch_first[b] != (b + 1 < nb ? B : docs - (nb - 1) * B))
                snprintf(bad, sizeof bad, "batch %lld's size", (long long)b);
        for (int64_t j = 0; !bad[0] && j < docs; j++) {
            const TttDoc *x = &p.docs[p.batch_docs[j]];
            if (x->predictions != P[p.batch_docs[j]] || x->batch != j / B || x->slot != j % B)
                snprintf(bad, sizeof bad, "document %lld", (long long)p.batch_docs[j]);
            if (j > 0) {
                const int64_t a = p.batch_docs[j - 1], c = p.batch_docs[j];
                if (P[a] > P[c] || (P[a] == P[c] && a > c)) snprintf(bad, sizeof bad, "order at %lld", (long long)j);
            }
        }
        int seen[40] = {0};
        for (int64_t i = 0; !bad[0] && i < nb; i++) {
            seen[p.queue[i]]++;
            if (i > 0) {
                const int64_t la = p.docs[p.batch_docs[p.batch_first[p.queue[i - 1] + 1] - 1]].predictions,
                              lb = p.docs[p.batch_docs[p.batch_first[p.queue[i] + 1] - 1]].predictions;
                if (la < lb || (la == lb && p.queue[i - 1] > p.queue[i])) snprintf(bad, sizeof bad, "queue at %lld", (long long)i);
            }
        }
        for (int64_t b = 0; !bad[0] && b < nb; b++)
            if (seen[b] != 1) snprintf(bad, sizeof bad, "batch %lld queued %d times", (long long)b, seen[b]);
        const int64_t pre = prefix < docs ? prefix : docs;
        if (!bad[0] && (p.prefix_docs != pre || p.num_phases != (pre > 0 ? K : 0) || p.segment_end[p.num_phases] != nb))
            snprintf(bad, sizeof bad, "prefix %lld, phases %d", (long long)p.prefix_docs, p.num_phases);
        for (int k = 0; !bad[0] && k < p.num_phases; k++) {
            const int64_t want = pre * (k + 1) / K;
            int64_t q = 0, running = 0;
            while (running < want) running += p.batch_first[p.queue[q] + 1] - p.batch_first[p.queue[q]], q++;
            if (p.phase_docs[k] != want || p.segment_end[k] != q) {
                snprintf(bad, sizeof bad, "phase %d: b %lld end %lld, expected %lld %lld", k, (long long)p.phase_docs[k],
                         (long long)p.segment_end[k], (long long)want, (long long)q);
                break;
            }
            int64_t got[40], expect[40], m = 0;
            for (int64_t j = 0; j < docs && m < want; j++) { /* (batch, slot) order = batch_docs order */
                int in = 0;
                for (int64_t i = 0; i < q; i++) in |= p.queue[i] == j / B;
                if (in) expect[m++] = p.batch_docs[j];
            }
            if (ttt_plan_phase_docs(&p, k, got) != want || memcmp(got, expect, (size_t)want * sizeof *got))
                snprintf(bad, sizeof bad, "step %d's documents", k);
        }
        int rank_of[40];
        ttt_plan_assign(&p, world, C, E, rank_of);
        for (int s = 0; !bad[0] && s <= p.num_phases; s++) {
            int64_t load[8] = {0};
            for (int64_t i = s ? p.segment_end[s - 1] : 0; i < p.segment_end[s]; i++) {
                const int r = rank_of[i];
                int least = 0;
                for (int x = 1; x < world; x++)
                    if (load[x] < load[least]) least = x;
                if (r != least) {
                    snprintf(bad, sizeof bad, "segment %d, queue %lld: rank %d, expected %d", s, (long long)i, r, least);
                    break;
                }
                load[r] += cost_by_rule(&p, p.queue[i], C, E);
            }
        }
        ttt_plan_free(&p);
        CHECK(!bad[0], "trial %d (%d documents, batch %lld, prefix %lld, %lld phases, world %d, C %lld, E %lld): %s",
              trial, docs, (long long)B, (long long)prefix, (long long)K, world, (long long)C, (long long)E, bad);
    }
}

static int error_has(const char *a, const char *b) { return strstr(ct_error(), a) && (!b || strstr(ct_error(), b)); }

/* Every refusal names the file or the key and the value; the plan is left empty (freeable). */
static void errors_name_file_key_value(void) {
    TttPlan p;
    const uint32_t ok[] = {BOS, 4, 5, BOS, 6}, late[] = {4, BOS, 5, 6}, lone[] = {BOS};
    CHECK(ttt_plan_build(&p, ok, 5, -1, 2, 0, 1, "val.h5") != 0 &&
              error_has("ttt_enabled = 1 needs the validation data's bos_id: 'val.h5' records none (-1)", NULL),
          "bos_id -1: %s", ct_error());
    CHECK(p.docs == NULL && p.num_docs == 0, "a failed build left a plan");
    ttt_plan_free(&p);
    CHECK(ttt_plan_build(&p, late, 4, BOS, 2, 0, 1, "val.h5") != 0 &&
              error_has("'val.h5' does not start with BOS (token 4 at position 0, bos_id 1)", NULL),
          "no BOS first: %s", ct_error());
    CHECK(ttt_plan_build(&p, ok, 5, 7, 2, 0, 1, "val.h5") != 0 && error_has("token 1 at position 0, bos_id 7", NULL),
          "another bos_id: %s", ct_error());
    CHECK(ttt_plan_build(&p, ok, 5, BOS, 0, 0, 1, "val.h5") != 0 && error_has("ttt_batch_size = 0", NULL),
          "batch 0: %s", ct_error());
    CHECK(ttt_plan_build(&p, ok, 5, BOS, 2, 3, 0, "val.h5") != 0 && error_has("phased_ttt_num_phases = 0", NULL),
          "phases 0: %s", ct_error());
    CHECK(ttt_plan_build(&p, ok, 5, BOS, 2, -1, 1, "val.h5") != 0 && error_has("phased_ttt_prefix_docs = -1", NULL),
          "prefix -1: %s", ct_error());
    CHECK(ttt_plan_build(&p, lone, 1, BOS, 2, 0, 1, "val.h5") != 0 && error_has("'val.h5' holds no document", NULL),
          "a lone BOS: %s", ct_error());
    CHECK(ttt_plan_build(&p, ok, 0, BOS, 2, 0, 1, "val.h5") != 0 && error_has("'val.h5' holds no validation tokens", NULL),
          "no tokens: %s", ct_error());
    CHECK(p.docs == NULL && p.queue == NULL && p.segment_end == NULL, "a failed build left arrays");
}

/* A stream of 101 tokens in chunks of 32: 100 targets, 4 chunks (32 32 32 4); rows of 8: 4, 4,
 * 4, and 0 for the last (never trained on). 97 tokens: 96 targets, 3 chunks, rows 4 4 0. Chunks
 * of 30 with rows of 8: floor(30 / 8) = 3. One chunk (n = 1): no rows at all. No target: no
 * chunk. */
static void global_chunks_and_rows(void) {
    CHECK(ttt_global_chunks(101, 32) == 4 && ttt_global_chunks(97, 32) == 3 && ttt_global_chunks(33, 32) == 1 &&
              ttt_global_chunks(34, 32) == 2 && ttt_global_chunks(20, 32) == 1 && ttt_global_chunks(1, 32) == 0 &&
              ttt_global_chunks(0, 32) == 0,
          "ttt_global_chunks");
    const int64_t r101[4] = {4, 4, 4, 0}, r97[3] = {4, 4, 0};
    int64_t g101[4], g97[3];
    for (int i = 0; i < 4; i++) g101[i] = ttt_global_rows(101, 32, 8, i);
    for (int i = 0; i < 3; i++) g97[i] = ttt_global_rows(97, 32, 8, i);
    CHECK_ARRAY("rows of 101 tokens", g101, r101, 4);
    CHECK_ARRAY("rows of 97 tokens", g97, r97, 3);
    CHECK(ttt_global_rows(101, 30, 8, 0) == 3 && ttt_global_rows(101, 30, 8, 2) == 3 && ttt_global_rows(101, 30, 8, 3) == 0,
          "chunks of 30, rows of 8");
    CHECK(ttt_global_rows(20, 32, 8, 0) == 0, "n = 1: the only chunk is the last");
    CHECK(ttt_global_rows(101, 32, 8, 4) == 0 && ttt_global_rows(101, 32, 8, -1) == 0, "outside [0, n)");
    CHECK(ttt_global_rows(34, 32, 8, 0) == 4 && ttt_global_rows(34, 32, 32, 0) == 1 && ttt_global_rows(34, 32, 33, 0) == 0,
          "one full chunk");
}

/* Chunk learning rates, worked by hand. No warmup, n = 5, lr 1e-3: lr * (1 + cos(pi i / 4)) / 2
 * = 1e-3, 8.5355339e-4, 5e-4, 1.4644661e-4, 0. Warmup of 3 from 1e-4, n = 6: i = 0, 1, 2 ->
 * 1e-4 + 9e-4 * i / 2 = 1e-4, 5.5e-4, 1e-3; then the cosine over n - 1 - 3 = 2: i = 3, 4, 5 ->
 * 1e-3, 5e-4, 0. Warmup 10 at n = 3 is cut to n - 1 = 2: 1e-4, then lr (the warmup's end), then
 * the cosine's start at i = 2: lr. n = 1: lr. */
static void global_learning_rates(void) {
    const double lr = 1e-3, ws = 1e-4;
    const double plain[5] = {1e-3, 8.5355339059327378e-4, 5e-4, 1.4644660940672624e-4, 0};
    for (int i = 0; i < 5; i++) {
        const double got = ttt_global_lr(i, 5, lr, 0, 0);
        CHECK(fabs(got - plain[i]) <= 1e-18, "no warmup, chunk %d: %.17g, expected %.17g", i, got, plain[i]);
    }
    CHECK(ttt_global_lr(0, 5, lr, 0, 0) == lr, "chunk 0 is exactly lr");
    const double warm[6] = {1e-4, 5.5e-4, 1e-3, 1e-3, 5e-4, 0};
    for (int i = 0; i < 6; i++) {
        const double got = ttt_global_lr(i, 6, lr, ws, 3);
        CHECK(fabs(got - warm[i]) <= 1e-18, "warmup 3, chunk %d: %.17g, expected %.17g", i, got, warm[i]);
    }
    CHECK(ttt_global_lr(0, 3, lr, ws, 10) == ws && fabs(ttt_global_lr(1, 3, lr, ws, 10) - lr) <= 1e-18 &&
              ttt_global_lr(2, 3, lr, ws, 10) == lr,
          "warmup cut to n - 1: %.17g %.17g %.17g", ttt_global_lr(0, 3, lr, ws, 10), ttt_global_lr(1, 3, lr, ws, 10),
          ttt_global_lr(2, 3, lr, ws, 10));
    CHECK(ttt_global_lr(0, 6, lr, ws, 1) == ws && ttt_global_lr(1, 6, lr, ws, 1) == lr, "warmup of one chunk");
    CHECK(ttt_global_lr(0, 1, lr, ws, 4) == lr, "n = 1: %.17g", ttt_global_lr(0, 1, lr, ws, 4));
}

int main(void) {
    RUN(hand_documents_batches_queue);
    RUN(hand_phases_and_segments);
    RUN(every_target_once);
    RUN(split_edges);
    RUN(chunk_windows);
    RUN(segments_when_a_batch_passes_two_boundaries);
    RUN(prefix_zero_and_above_documents);
    RUN(lpt_assignment);
    RUN(plan_independent_of_world);
    RUN(random_splits_against_the_rules);
    RUN(errors_name_file_key_value);
    RUN(global_chunks_and_rows);
    RUN(global_learning_rates);
    TEST_EXIT();
}
