/* loader.c — global token stream cursor arithmetic, stream reads with wrap-around, and the
 * per-rank micro-batch loader with its prefetch thread (see loader.h for the contract). */
#include "loader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

LoaderCursor loader_cursor_start(void) {
    LoaderCursor c = {0, 0, 0};
    return c;
}

int loader_cursor_advance(const TokenSet *set, LoaderCursor at, int64_t n, LoaderCursor *out) {
    if (set->num_files <= 0 || set->total_tokens <= 0)
        return ct_fail("token set '%s' holds no tokens", set->pattern ? set->pattern : "?");
    if (n < 0) return ct_fail("cannot move the token stream backwards (%lld tokens)", (long long)n);
    at.stream_tokens += n;
    n %= set->total_tokens; /* whole passes over the data land where they started */
    while (n > 0) {
        int64_t avail = set->files[at.file_index].num_tokens - at.position;
        int64_t k = n < avail ? n : avail;
        at.position += k;
        n -= k;
        if (at.position == set->files[at.file_index].num_tokens) {
            at.file_index = (at.file_index + 1) % set->num_files;
            at.position = 0;
        }
    }
    *out = at;
    return 0;
}

int loader_cursor_check(const TokenSet *set, const LoaderCursor *c) {
    if (c->file_index < 0 || c->file_index >= set->num_files)
        return ct_fail("loader cursor file_index %lld is outside the %d files of '%s'", (long long)c->file_index,
                       set->num_files, set->pattern);
    const TokenFileInfo *f = &set->files[c->file_index];
    if (c->position < 0 || c->position >= f->num_tokens)
        return ct_fail("loader cursor position %lld is outside file '%s' (%lld tokens)", (long long)c->position,
                       f->path, (long long)f->num_tokens);
    if (c->stream_tokens < 0) return ct_fail("loader cursor stream_tokens %lld is negative", (long long)c->stream_tokens);
    LoaderCursor expect = {0, 0, 0};
    if (loader_cursor_advance(set, loader_cursor_start(), c->stream_tokens, &expect) != 0) return -1;
    if (expect.file_index != c->file_index || expect.position != c->position)
        return ct_fail("loader cursor (file %lld, position %lld) does not match stream_tokens %lld, which lands "
                       "at (file %lld, position %lld) of '%s'; the data files differ from those of the run",
                       (long long)c->file_index, (long long)c->position, (long long)c->stream_tokens,
                       (long long)expect.file_index, (long long)expect.position, set->pattern);
    return 0;
}

int loader_read_stream(TokenReader *reader, const TokenSet *set, LoaderCursor at, int64_t n, uint32_t *out) {
    while (n > 0) {
        const TokenFileInfo *f = &set->files[at.file_index];
        int64_t avail = f->num_tokens - at.position;
        int64_t k = n < avail ? n : avail;
        if (token_reader_read(reader, (int)at.file_index, at.position, k, out) != 0) return -1;
        out += k;
        n -= k;
        if (loader_cursor_advance(set, at, k, &at) != 0) return -1;
    }
    return 0;
}

/* Read this rank's span of the micro-step that starts at `step_start`. */
static int read_span(Loader *L, LoaderCursor step_start, uint32_t *out) {
    LoaderCursor mine;
    if (loader_cursor_advance(L->set, step_start, (int64_t)L->rank * L->span, &mine) != 0) return -1;
    return loader_read_stream(L->reader, L->set, mine, L->span, out);
}

static int64_t micro_step_tokens(const Loader *L) { return L->span * L->world_size; }

/* Prefetch thread: whenever `ready` is empty, fill it with the micro-batch at the cursor. */
static void *prefetch_main(void *arg) {
    Loader *L = arg;
    pthread_mutex_lock(&L->mutex);
    for (;;) {
        while (!L->stop && (L->has_ready || L->failed)) pthread_cond_wait(&L->cond, &L->mutex);
        if (L->stop) break;
        LoaderCursor at = L->cursor;
        uint32_t *dst = L->ready;
        pthread_mutex_unlock(&L->mutex);
        int rc = read_span(L, at, dst);
        pthread_mutex_lock(&L->mutex);
        if (rc != 0) {
            snprintf(L->error, sizeof L->error, "%s", ct_error());
            L->failed = 1;
        } else {
            L->has_ready = 1;
        }
        pthread_cond_broadcast(&L->cond);
    }
    pthread_mutex_unlock(&L->mutex);
    return NULL;
}

int loader_init(Loader *L, const TokenSet *set, int rank, int world_size, int64_t local_tokens,
                LoaderCursor start, int prefetch) {
    memset(L, 0, sizeof *L);
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return ct_fail("loader: rank %d is outside world size %d", rank, world_size);
    if (local_tokens < 1) return ct_fail("loader: %lld tokens per micro-batch", (long long)local_tokens);
    if (loader_cursor_check(set, &start) != 0) return -1;
    L->set = set;
    L->rank = rank;
    L->world_size = world_size;
    L->local_tokens = local_tokens;
    L->span = local_tokens + 1;
    L->cursor = start;
    if (token_reader_open(&L->reader, set) != 0) return -1;
    L->ready = ct_malloc((size_t)L->span * sizeof(uint32_t), "loader buffer");
    L->current = ct_malloc((size_t)L->span * sizeof(uint32_t), "loader buffer");
    L->prefetch = prefetch;
    if (prefetch) {
        pthread_mutex_init(&L->mutex, NULL);
        pthread_cond_init(&L->cond, NULL);
        if (pthread_create(&L->thread, NULL, prefetch_main, L) != 0) {
            loader_free(L);
            return ct_fail("loader: cannot start the prefetch thread");
        }
    }
    return 0;
}

int loader_next(Loader *L, const uint32_t **tokens) {
    if (!L->prefetch) {
        if (read_span(L, L->cursor, L->current) != 0) return -1;
    } else {
        pthread_mutex_lock(&L->mutex);
        while (!L->has_ready && !L->failed) pthread_cond_wait(&L->cond, &L->mutex);
        if (L->failed) {
            pthread_mutex_unlock(&L->mutex);
            return ct_fail("%s", L->error);
        }
        uint32_t *t = L->current;
        L->current = L->ready;
        L->ready = t;
        L->has_ready = 0;
    }
    LoaderCursor next;
    int rc = loader_cursor_advance(L->set, L->cursor, micro_step_tokens(L), &next);
    if (rc == 0) L->cursor = next;
    if (L->prefetch) {
        pthread_cond_broadcast(&L->cond); /* the cursor moved: read the following micro-batch */
        pthread_mutex_unlock(&L->mutex);
    }
    if (rc != 0) return -1;
    *tokens = L->current;
    return 0;
}

LoaderCursor loader_cursor(const Loader *L) { return L->cursor; }

void loader_free(Loader *L) {
    if (L->prefetch && L->thread) {
        pthread_mutex_lock(&L->mutex);
        L->stop = 1;
        pthread_cond_broadcast(&L->cond);
        pthread_mutex_unlock(&L->mutex);
        pthread_join(L->thread, NULL);
        pthread_mutex_destroy(&L->mutex);
        pthread_cond_destroy(&L->cond);
    }
    if (L->reader) token_reader_close(L->reader);
    free(L->ready);
    free(L->current);
    memset(L, 0, sizeof *L);
}
