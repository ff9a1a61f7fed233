/* packing.h — the segments of a packed row (doc_packing, docs/model.md "Document packing"):
 * which earlier positions each token of a row may attend to. Both backends compute them from
 * the row's token ids with this one function, so their attention sees the same documents. */
#ifndef CT_PACKING_H
#define CT_PACKING_H

#include <stdint.h>

/* ids: n tokens of one row (positions 0 .. n-1). A segment starts at position 0, at every
 * token equal to bos_id (none when bos_id < 0), and every max_doc_len tokens after a
 * document's start (max_doc_len >= 1: a document of L tokens is cut into chunks of
 * max_doc_len from its first token, the last chunk shorter). seg_start[t] gets the first
 * position of t's segment (0 .. t): t attends to keys seg_start[t] .. t (cpu_attention.h). */
void packing_segments(const int32_t *ids, int64_t n, int64_t bos_id, int64_t max_doc_len, int32_t *seg_start);

#endif
