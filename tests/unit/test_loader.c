/* test_loader.c — the global token stream: per-rank slicing as train_gpt.py's
 * DistributedTokenLoader, identical tokens per (step, slot) for world sizes 1, 2, 4, 8,
 * across file boundaries and wrap-around, with and without prefetch, and cursor
 * save/restore onto a different world size. Token values are their global stream index, so
 * the expected tokens of every slot are computed independently of the loader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data.h"
#include "harness.h"
#include "loader.h"

/* Three files of uneven length; a step of 8 slots * (24 + 1) = 200 tokens crosses file
 * boundaries often and wraps around the 517-token stream within a few steps. */
static const int64_t file_sizes[] = {131, 257, 129};
enum { NUM_FILES = 3, SLOTS = 8, LOCAL = 24, SPAN = LOCAL + 1, STEPS = 7 };
static const int64_t TOTAL = 131 + 257 + 129;
static char pattern[600];

static int make_files(void) {
    if (pattern[0]) return 0;
    int64_t next = 0;
    for (int f = 0; f < NUM_FILES; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s/part_%02d.h5", test_tmpdir(), f);
        TokenWriter *w;
        if (token_writer_create(&w, path, 4, 1 << 20, -1, "test indices") != 0) return -1;
        uint32_t *buf = malloc((size_t)file_sizes[f] * 4);
        for (int64_t i = 0; i < file_sizes[f]; i++) buf[i] = (uint32_t)next++;
        int rc = token_writer_append(w, buf, file_sizes[f]);
        free(buf);
        if (rc != 0 || token_writer_close(w) != 0) return -1;
    }
    snprintf(pattern, sizeof pattern, "%s/part_*.h5", test_tmpdir());
    return 0;
}

/* Token j of slot `slot` of optimizer step `step`: stream index (step*SLOTS + slot)*SPAN + j. */
static uint32_t expected_token(int64_t step, int slot, int64_t j) {
    return (uint32_t)(((step * SLOTS + slot) * SPAN + j) % TOTAL);
}

/* Run `steps` optimizer steps from `start` with `world` ranks (one Loader each, as W processes
 * would); check every rank's span against the oracle; return the cursor after the last step. */
static int run_world(int world, int64_t first_step, int64_t steps, LoaderCursor start, int prefetch,
                     LoaderCursor *end, char *why, size_t why_cap) {
    TokenSet set;
    if (data_open_set(pattern, &set) != 0) {
        snprintf(why, why_cap, "open: %s", ct_error());
        return -1;
    }
    Loader *ranks = calloc((size_t)world, sizeof(Loader));
    int rc = 0;
    for (int r = 0; r < world && rc == 0; r++) rc = loader_init(&ranks[r], &set, r, world, LOCAL, start, prefetch);
    if (rc != 0) snprintf(why, why_cap, "init: %s", ct_error());
    int accum = SLOTS / world;
    for (int64_t step = first_step; rc == 0 && step < first_step + steps; step++) {
        for (int m = 0; m < accum && rc == 0; m++) {
            for (int r = 0; r < world && rc == 0; r++) {
                const uint32_t *tok;
                if (loader_next(&ranks[r], &tok) != 0) {
                    snprintf(why, why_cap, "next: %s", ct_error());
                    rc = -1;
                    break;
                }
                int slot = m * world + r;
                for (int64_t j = 0; j < SPAN; j++) {
                    if (tok[j] != expected_token(step, slot, j)) {
                        snprintf(why, why_cap, "world %d step %lld slot %d token %lld: got %u expected %u", world,
                                 (long long)step, slot, (long long)j, tok[j], expected_token(step, slot, j));
                        rc = -1;
                        break;
                    }
                }
            }
        }
    }
    if (rc == 0) {
        *end = loader_cursor(&ranks[0]);
        for (int r = 1; r < world; r++) {
            LoaderCursor c = loader_cursor(&ranks[r]);
            if (memcmp(&c, end, sizeof c) != 0) {
                snprintf(why, why_cap, "rank %d's cursor differs from rank 0's", r);
                rc = -1;
            }
        }
    }
    for (int r = 0; r < world; r++) loader_free(&ranks[r]);
    free(ranks);
    data_free_set(&set);
    return rc;
}

static void same_tokens_per_slot_for_every_world_size(void) {
    CHECK(make_files() == 0, "make files: %s", ct_error());
    char why[512];
    LoaderCursor end1, end;
    CHECK(run_world(1, 0, STEPS, loader_cursor_start(), 0, &end1, why, sizeof why) == 0, "%s", why);
    const int worlds[] = {2, 4, 8};
    for (int i = 0; i < 3; i++) {
        for (int prefetch = 0; prefetch <= 1; prefetch++) {
            CHECK(run_world(worlds[i], 0, STEPS, loader_cursor_start(), prefetch, &end, why, sizeof why) == 0, "%s",
                  why);
            CHECK(memcmp(&end, &end1, sizeof end) == 0, "world %d ends at a different cursor", worlds[i]);
        }
    }
    /* 7 steps * 200 tokens = 1400 = 2 wraps of 517 + 366: file 1 (starts at 131), position 235 */
    CHECK(end1.stream_tokens == STEPS * SLOTS * SPAN, "stream_tokens %lld", (long long)end1.stream_tokens);
    CHECK(end1.file_index == 1 && end1.position == 366 - 131, "cursor (%lld, %lld)", (long long)end1.file_index,
          (long long)end1.position);
}

static void resume_on_another_world_size(void) {
    CHECK(make_files() == 0, "make files: %s", ct_error());
    char why[512];
    const int pairs[][2] = {{4, 2}, {2, 8}, {1, 4}, {8, 1}};
    for (int i = 0; i < 4; i++) {
        LoaderCursor mid, end;
        CHECK(run_world(pairs[i][0], 0, 3, loader_cursor_start(), 1, &mid, why, sizeof why) == 0, "%s", why);
        CHECK(run_world(pairs[i][1], 3, STEPS - 3, mid, 1, &end, why, sizeof why) == 0, "%d -> %d: %s", pairs[i][0],
              pairs[i][1], why);
    }
}

static void cursor_arithmetic_and_checks(void) {
    CHECK(make_files() == 0, "make files: %s", ct_error());
    TokenSet set;
    CHECK(data_open_set(pattern, &set) == 0, "%s", ct_error());
    LoaderCursor c;
    CHECK(loader_cursor_advance(&set, loader_cursor_start(), 131, &c) == 0, "%s", ct_error());
    CHECK(c.file_index == 1 && c.position == 0, "end of file 0 must be canonicalised to (1, 0)");
    CHECK(loader_cursor_advance(&set, loader_cursor_start(), TOTAL, &c) == 0 && c.file_index == 0 &&
              c.position == 0 && c.stream_tokens == TOTAL,
          "a full pass wraps to the start");
    CHECK(loader_cursor_check(&set, &c) == 0, "%s", ct_error());
    LoaderCursor bad = {2, 500, 0};
    CHECK(loader_cursor_check(&set, &bad) != 0 && strstr(ct_error(), "position 500"), "%s", ct_error());
    LoaderCursor inconsistent = {1, 5, 7};
    CHECK(loader_cursor_check(&set, &inconsistent) != 0 && strstr(ct_error(), "stream_tokens"), "%s", ct_error());
    data_free_set(&set);
}

int main(void) {
    RUN(same_tokens_per_slot_for_every_world_size);
    RUN(resume_on_another_world_size);
    RUN(cursor_arithmetic_and_checks);
    TEST_EXIT();
}
