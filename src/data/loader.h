/* loader.h — the deterministic global token stream and each rank's micro-batches.
 *
 * Generalises train_gpt.py's TokenStream + DistributedTokenLoader: the files of the split are
 * one stream (sorted path order, wrapping around at the end). Each micro-step consumes
 * span * world_size tokens, span = local_tokens + 1, and rank r takes [r*span, (r+1)*span);
 * inputs are span[0..local_tokens) and targets span[1..local_tokens], both viewed as
 * [local_tokens / seq_len, seq_len]. Because every optimizer step consumes
 * grad_accum_slots * span tokens whatever the world size, slot s = micro_step * world + rank
 * of step k always holds the same tokens: the cursor is global, so a run can be resumed on any
 * world size that divides grad_accum_slots.
 *
 * A background thread reads the next micro-batch (chunked HDF5 hyperslab reads) while the
 * current one trains. */
#ifndef CT_LOADER_H
#define CT_LOADER_H

#include <pthread.h>
#include <stdint.h>

#include "data.h"

/* Where the stream stands; saved in checkpoints (/loader/train). Canonical form: position is
 * always < the file's token count (a cursor at the end of a file points at the next file). */
typedef struct {
    int64_t file_index;    /* file the next token comes from */
    int64_t position;      /* token index inside that file */
    int64_t stream_tokens; /* tokens taken from the stream since training began (not wrapped) */
} LoaderCursor;

typedef struct {
    const TokenSet *set;
    TokenReader *reader;
    int rank, world_size;
    int64_t local_tokens, span;

    LoaderCursor cursor; /* start of the next micro-step not yet handed out by loader_next */

    /* prefetch: `ready` holds the micro-batch for `cursor` once has_ready is set */
    int prefetch;
    uint32_t *ready, *current;
    int has_ready, stop, failed;
    char error[1024];
    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
} Loader;

/* The cursor of a fresh run. */
LoaderCursor loader_cursor_start(void);

/* Cursor after taking n more tokens from `at` (wrapping). Fails if the set is empty. */
int loader_cursor_advance(const TokenSet *set, LoaderCursor at, int64_t n, LoaderCursor *out);

/* Check a saved cursor against the set (indices in range, stream_tokens consistent with the
 * file position); the message says what disagrees. */
int loader_cursor_check(const TokenSet *set, const LoaderCursor *cursor);

/* Read n tokens of the stream starting at `at` (wrapping around the end) into out. */
int loader_read_stream(TokenReader *reader, const TokenSet *set, LoaderCursor at, int64_t n, uint32_t *out);

/* local_tokens = train_batch_tokens / grad_accum_slots; must be a multiple of seq_len (checked
 * by config_validate). prefetch: 1 to read ahead in a background thread. */
int loader_init(Loader *loader, const TokenSet *set, int rank, int world_size, int64_t local_tokens,
                LoaderCursor start, int prefetch);

/* This rank's span (local_tokens + 1 tokens) of the next micro-step; valid until the next call.
 * inputs = tokens[0 .. local_tokens), targets = tokens[1 .. local_tokens]. */
int loader_next(Loader *loader, const uint32_t **tokens);

/* The cursor of the next micro-step not yet returned (what a checkpoint saves). */
LoaderCursor loader_cursor(const Loader *loader);

void loader_free(Loader *loader);

#endif
