/* test_packing.c — packed rows' segments (src/model/packing.c) against segments written out by
 * hand: BOS at the row's start, in the middle, absent; documents longer than max_doc_len cut
 * from their start; max_doc_len 1; and the same rows read as one world-1 slot sequence or as
 * the slots of two ranks give the same segments per slot (the loader's slot rule). */
#include <string.h>

#include "common.h"
#include "harness.h"
#include "packing.h"

enum { BOS = 7 };

/* The segments of ids[0..n) against the starts the test expects. */
static void check(const char *what, const int32_t *ids, int n, int64_t max_doc_len, const int32_t *expect) {
    int32_t got[64];
    memset(got, 0xff, sizeof got);
    packing_segments(ids, n, BOS, max_doc_len, got);
    for (int t = 0; t < n; t++)
        CHECK(got[t] == expect[t], "%s: position %d: segment start %d, expected %d", what, t, got[t], expect[t]);
}

static void bos_at_start(void) {
    const int32_t ids[] = {BOS, 3, 4, 5, BOS, 6, 2};
    const int32_t want[] = {0, 0, 0, 0, 4, 4, 4};
    check("BOS at 0", ids, 7, 100, want);
}

static void bos_mid_row(void) {
    /* the row starts mid-document: positions 0..2 are one segment, the BOS at 3 starts another */
    const int32_t ids[] = {1, 2, 3, BOS, 4, 5, BOS, BOS, 9};
    const int32_t want[] = {0, 0, 0, 3, 3, 3, 6, 7, 7};
    check("BOS mid-row", ids, 9, 100, want);
}

static void no_bos(void) {
    const int32_t ids[] = {1, 2, 3, 4, 5, 6};
    const int32_t want[] = {0, 0, 0, 0, 0, 0};
    check("no BOS", ids, 6, 100, want);
    /* bos_id -1: no token starts a document, only max_doc_len cuts */
    int32_t got[6];
    packing_segments(ids, 6, -1, 4, got);
    const int32_t cut[] = {0, 0, 0, 0, 4, 4};
    for (int t = 0; t < 6; t++) CHECK(got[t] == cut[t], "bos_id -1: position %d: %d, expected %d", t, got[t], cut[t]);
}

static void long_documents_chunked(void) {
    /* max_doc_len 3: the row's first document (from 0) is cut at 3, 6; the BOS at 7 restarts
     * the count, its document cut at 10 */
    const int32_t ids[] = {1, 2, 3, 4, 5, 6, 8, BOS, 1, 2, 3, 4, 5};
    const int32_t want[] = {0, 0, 0, 3, 3, 3, 6, 7, 7, 7, 10, 10, 10};
    check("max_doc_len 3", ids, 13, 3, want);
    /* a document exactly max_doc_len long is one segment; the next BOS starts the next */
    const int32_t ids2[] = {BOS, 1, 2, BOS, 1, 2};
    const int32_t want2[] = {0, 0, 0, 3, 3, 3};
    check("documents of max_doc_len", ids2, 6, 3, want2);
}

static void max_doc_len_one(void) {
    const int32_t ids[] = {BOS, 1, 2, BOS, 3};
    const int32_t want[] = {0, 1, 2, 3, 4};
    check("max_doc_len 1", ids, 5, 1, want);
}

/* ctrain's loader gives slot s of a step the stream's tokens [s*(R+1), s*(R+1)+R] whatever the
 * world size (loader.h); the segments of a slot depend on its tokens only, so world 1 (slots
 * read one after another) and world 2 (rank r takes slots r, r+2, ...) see the same ones. */
static void slots_same_for_any_world(void) {
    enum { R = 8, SLOTS = 4, SPAN = R + 1 };
    int32_t stream[SLOTS * SPAN];
    for (int i = 0; i < SLOTS * SPAN; i++) stream[i] = (i * 5 + 3) % 11 == 0 ? BOS : 1 + (i * 7) % 5;
    int32_t world1[SLOTS][R], world2[SLOTS][R];
    for (int s = 0; s < SLOTS; s++) packing_segments(stream + s * SPAN, R, BOS, 5, world1[s]);
    for (int micro = 0; micro < SLOTS / 2; micro++)
        for (int rank = 0; rank < 2; rank++) {
            const int slot = micro * 2 + rank;
            packing_segments(stream + slot * SPAN, R, BOS, 5, world2[slot]);
        }
    int cuts = 0;
    for (int s = 0; s < SLOTS; s++)
        for (int t = 0; t < R; t++) {
            CHECK(world1[s][t] == world2[s][t], "slot %d position %d: %d vs %d", s, t, world1[s][t], world2[s][t]);
            cuts += t > 0 && world1[s][t] == t;
        }
    CHECK(cuts > 0, "the stream has no cut inside a row: the test checks nothing");
}

int main(void) {
    RUN(bos_at_start);
    RUN(bos_mid_row);
    RUN(no_bos);
    RUN(long_documents_chunked);
    RUN(max_doc_len_one);
    RUN(slots_same_for_any_world);
    TEST_EXIT();
}
