/* packing.c — a packed row's segments (packing.h): one pass, each token either starts a new
 * segment (row start, a BOS, or max_doc_len tokens into its document's current chunk) or
 * continues the previous token's. */
#include "packing.h"

void packing_segments(const int32_t *ids, int64_t n, int64_t bos_id, int64_t max_doc_len, int32_t *seg_start) {
    int64_t start = 0;
    for (int64_t t = 0; t < n; t++) {
        /* a BOS starts a document; a chunk that reached max_doc_len starts the next chunk */
        if (t == 0 || (bos_id >= 0 && ids[t] == bos_id) || t - start >= max_doc_len) start = t;
        seg_start[t] = (int32_t)start;
    }
}
