/* ttt_plan.h — what the score-first test-time-training evaluation (issue 57, docs/model.md
 * "Test-time training") does, in which order and on which rank, computed from the validation
 * tokens and the keys alone: pure functions, no backend, the same on every rank. ttt_eval.c runs
 * the plan.
 *
 * Documents. A document starts at every BOS of the split (the split as val_load trims it). Its
 * slice runs from its BOS up to and including the next document's BOS (the last: to the end of
 * the split), so its predictions = slice length - 1 and every token after the first BOS is the
 * target of exactly one document. The split must start with BOS (else tokens before the first
 * one would never be scored). A BOS that is the split's last token starts no document.
 *
 * Batches and queue. Documents sorted by predictions, ascending (ties: split order), cut into
 * batches of ttt_batch_size from the shortest; a batch's slots are its documents in that order.
 * The queue scores the batches longest first: by their longest document's predictions,
 * descending (ties: batch index ascending).
 *
 * Phases. prefix = min(documents, phased_ttt_prefix_docs), K = phased_ttt_num_phases; with
 * prefix > 0 global step k (0-based, k < K) trains on b_k = floor(prefix * (k + 1) / K)
 * documents. Segment k of the queue ends at the first queue position where the cumulative
 * document count reaches b_k (a segment may be empty when one batch passes two boundaries); the
 * global step k runs after segment k is scored; segment K is the rest. Step k's documents: those
 * of segments 0..k, in ascending (batch, slot) order (shortest first), the first b_k of them.
 * With prefix 0 there is one segment and no global step. With fewer documents than phases some
 * b_k are 0 (config_validate refuses K > phased_ttt_prefix_docs, not K > documents): their
 * segments are empty and their steps have no documents.
 *
 * Chunks. Document d's predictions are scored in chunks of C = ttt_chunk_size: chunk c predicts
 * positions [cC, e_c), e_c = min((c + 1) C, P); its forward window is the document's tokens
 * [w_c, e_c) as inputs (targets: the next tokens), w_c = max(0, e_c - E), E = ttt_eval_seq_len
 * (>= C); the window's positions [cC - w_c, e_c - w_c) are scored. Every chunk but the last is
 * then trained on (those same C positions); the last is scored only.
 *
 * Ranks. Each segment's batches are shared out by longest-processing-time: in queue order each
 * goes to the rank with the least estimated cost so far in that segment (ties: the lowest rank),
 * cost = sum over its chunk steps c (one per chunk of its longest document) of rows x window
 * length x (3 when trained, else 1): rows = its documents that have a chunk c, window length =
 * its longest document's chunk-c window (the step's forward length), trained unless c is the
 * longest document's last chunk. The plan itself does not depend on the world size; only this
 * assignment does. */
#ifndef CT_TTT_PLAN_H
#define CT_TTT_PLAN_H

#include <stdint.h>

typedef struct {
    int64_t start;       /* split position of the document's BOS */
    int64_t predictions; /* targets it scores: its slice's length - 1 (>= 1) */
    int64_t batch, slot; /* its batch and its place there */
} TttDoc;

typedef struct {
    int64_t num_docs;
    TttDoc *docs;          /* [num_docs], split order */
    int64_t num_batches;
    int64_t *batch_docs;   /* [num_docs]: document indices by batch, then slot */
    int64_t *batch_first;  /* [num_batches + 1]: batch b is batch_docs[batch_first[b] .. batch_first[b + 1]) */
    int64_t *queue;        /* [num_batches]: batch indices in scoring order */
    int64_t prefix_docs;   /* min(documents, phased_ttt_prefix_docs) */
    int num_phases;        /* global steps: phased_ttt_num_phases, 0 when prefix_docs is 0 */
    int64_t *phase_docs;   /* [num_phases]: b_k */
    int64_t *segment_end;  /* [num_phases + 1]: segment k is queue positions [segment_end[k-1] (0 for k = 0),
                            * segment_end[k]); segment_end[num_phases] = num_batches */
} TttPlan;

/* The plan of tokens[0..n) (the trimmed split); `what` names it in messages (the file). Fails,
 * naming what and the value, when bos_id < 0, the split does not start with BOS, there is no
 * document, batch_size < 1, prefix_docs < 0, or num_phases < 1 (or above INT_MAX). On failure
 * *p is empty (all zero; ttt_plan_free is harmless on it). */
int ttt_plan_build(TttPlan *p, const uint32_t *tokens, int64_t n, int64_t bos_id, int64_t batch_size,
                   int64_t prefix_docs, int64_t num_phases, const char *what);
void ttt_plan_free(TttPlan *p);

/* Global step k's documents (k < num_phases): writes phase_docs[k] document indices to out, in
 * ascending (batch, slot) order; returns their count. */
int64_t ttt_plan_phase_docs(const TttPlan *p, int k, int64_t *out);

/* The chunks of a document of `predictions` targets: ceil(predictions / chunk). */
int64_t ttt_doc_chunks(int64_t predictions, int64_t chunk);
/* Chunk c's window (document offsets): inputs [*win_start, *win_start + *win_len); it scores
 * window positions [*scored_from, *scored_from + *scored_len). ctx = E >= chunk. */
void ttt_chunk_window(int64_t predictions, int64_t c, int64_t chunk, int64_t ctx, int64_t *win_start,
                      int64_t *win_len, int64_t *scored_from, int64_t *scored_len);

/* The rank that scores each queue position (rank_of[num_batches]), by the LPT rule above. */
void ttt_plan_assign(const TttPlan *p, int world, int64_t chunk, int64_t ctx, int *rank_of);

/* The global step's schedule over a stream of `stream_tokens` tokens (the step's documents'
 * slices joined, each with its closing BOS): N = stream_tokens - 1 targets in chunks of
 * chunk_tokens, n = ceil(N / chunk_tokens) of them (returned by ttt_global_chunks); every chunk
 * but the last is trained on, as floor(its targets / seq_len) rows of seq_len tokens (chunk i's
 * row j starts at stream position i * chunk_tokens + j * seq_len), in optimizer steps of
 * batch_seqs rows. */
int64_t ttt_global_chunks(int64_t stream_tokens, int64_t chunk_tokens);
/* Chunk i's rows: floor(its targets / seq_len) for i < n - 1; 0 for the last chunk (not trained
 * on) and for i outside [0, n). */
int64_t ttt_global_rows(int64_t stream_tokens, int64_t chunk_tokens, int64_t seq_len, int64_t i);
/* Chunk i's learning rate (of n chunks in all), the record's rule: w = min(warmup_chunks, n - 1)
 * (not below 0); chunk i < w: warmup_start_lr + (lr - warmup_start_lr) * i / max(w - 1, 1);
 * else lr * 0.5 * (1 + cos(pi * (i - w) / max(n - 1 - w, 1))). */
double ttt_global_lr(int64_t i, int64_t n, double lr, double warmup_start_lr, int64_t warmup_chunks);

#endif
