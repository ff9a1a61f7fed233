/* test_golf_pergroup.c — the gptq-pergroup artifact (src/infer/golf_pergroup.c): the L1
 * nearest-neighbour row order on a hand-computed case (ties, and the extremes of int8); a
 * two-block model with a tensor of every rule written as gptq-pergroup and read back to exactly
 * gptq-brotli's weights, the same bytes twice, lrzip's temporary files gone; damaged, truncated,
 * foreign and other-model files refused naming the file with the weights untouched; no lrzip on
 * PATH a clear error with nothing written. Needs Debian's lrzip (skipped without it).
 * tests/cli/test_golf_gptq.sh reads the file with a Python reader written from the docs. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "golf_artifact.h"
#include "golf_artifact_internal.h"
#include "golf_gptq.h"
#include "golf_hessians.h"
#include "harness.h"
#include "test_spec.h"

static void l1_sort_by_hand(void) {
    /* from row 0: rows 2 and 5 tie at 1 (the lower, 2, wins); from 2: row 4 at 1; from 4: row 5
     * at 3; from 5: row 3 (265) before row 1 (266); |127 - (-128)| terms count in full */
    const int8_t m[6 * 3] = {0, 0, 0, 127, -128, 10, 1, 0, 0, 126, -128, 10, 1, 1, 0, 0, 0, -1};
    const uint16_t want[6] = {0, 2, 4, 5, 3, 1};
    uint16_t order[6] = {9, 9, 9, 9, 9, 9};
    golf_l1_sort_rows(m, 6, 3, order);
    for (int i = 0; i < 6; i++) CHECK(order[i] == want[i], "order[%d] = %u, expected %u", i, order[i], want[i]);
    /* one row; two equal rows keep their order */
    const int8_t same[2 * 2] = {5, -5, 5, -5};
    golf_l1_sort_rows(same, 1, 2, order);
    CHECK(order[0] == 0, "one row: %u", order[0]);
    golf_l1_sort_rows(same, 2, 2, order);
    CHECK(order[0] == 0 && order[1] == 1, "equal rows: %u %u", order[0], order[1]);
}

/* ---- a two-block model with a tensor of every rule ---- */

enum { NP = 14 };
static ParamInfo params[NP];
static ModelSpec spec;
static float *weights;
static GolfHessians hess;

static uint64_t rng = 7;
static float noise(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

static void make_model(int fc_rows) {
    const TestTensor t[NP] = {{"tok_emb.weight", 2, {300, 256}},
                              {"blocks.0.attn.c_q.weight", 2, {288, 256}},
                              {"blocks.0.attn.c_k.weight", 2, {288, 256}},
                              {"blocks.0.attn.attn_gate_w", 2, {4, 12}},
                              {"blocks.0.attn_scale", 1, {256}},
                              {"blocks.0.mlp.fc.weight", 2, {fc_rows, 256}},
                              {"blocks.0.mlp.proj.weight", 2, {256, fc_rows}},
                              {"blocks.1.attn.c_q.weight", 2, {288, 256}},
                              {"blocks.1.attn.c_k.weight", 2, {288, 256}},
                              {"blocks.1.attn.attn_gate_w", 2, {4, 12}},
                              {"blocks.1.attn_scale", 1, {256}},
                              {"blocks.1.mlp.fc.weight", 2, {fc_rows, 256}},
                              {"blocks.1.mlp.proj.weight", 2, {256, fc_rows}},
                              {"bigram.embed.weight", 2, {300, 256}}};
    test_spec_from_table(&spec, params, t, NP);
    const size_t offset = spec.total_floats;
    free(weights);
    weights = malloc(offset * sizeof(float));
    /* rows of a few shared patterns plus noise: something for the row order to find */
    for (size_t i = 0; i < offset; i++) weights[i] = 0.08f * noise() + 0.05f * (float)((i / 256) % 3) * noise();
}

/* diagonally dominant Hessians for every wanted parameter but the bigram table's (rounded) */
static void make_hessians(void) {
    golf_hessians_alloc(&spec, &hess);
    free(hess.h[NP - 1]);
    hess.h[NP - 1] = NULL;
    for (int i = 0; i < NP; i++) {
        int shares;
        if (!hess.h[i] || (golf_hessian_wanted(&spec, i, &shares) && shares >= 0)) continue;
        const int n = (int)params[i].shape[1];
        for (int r = 0; r < n; r++)
            for (int c = 0; c < n; c++)
                hess.h[i][(size_t)r * n + c] = r == c ? 1.0f + (float)(r % 5) : (abs(r - c) == 1 ? 0.3f : 0.0f);
    }
    hess.batches = 1, hess.tokens = 100;
}

static GolfGptqOptions options(void) {
    return (GolfGptqOptions){6, 7, 12.85f, 11.5f, 13.0f, 14.0f, 1, 1, 4, 3, 4, 1, 64, (const float *const *)hess.h};
}

static int have_lrzip(void) { return system("command -v lrzip >/dev/null 2>&1") == 0; }

static unsigned char *slurp(const char *path, size_t *len) {
    unsigned char *b = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f) ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/* entries in dir besides . and .. */
static int entries_in(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return d ? n : -1;
}

static void round_trip_equals_brotli(void) {
    if (golf_format_available(GOLF_GPTQ_PERGROUP) != 0) SKIP("built without libbrotli");
    if (!have_lrzip()) SKIP("no lrzip on PATH (apt-get install lrzip)");
    make_model(512);
    make_hessians();
    const GolfGptqOptions o = options();
    /* lrzip's files in a temporary directory of their own, under this one: empty afterwards */
    const char *tmp = test_path("tmp");
    CHECK(mkdir(tmp, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", tmp, strerror(errno));
    setenv("TMPDIR", tmp, 1);
    const char *br = test_path("a.br"), *pg = test_path("a.pgrp"), *again = test_path("b.pgrp");
    GolfStats gb, gp;
    CHECK(golf_write(&spec, weights, GOLF_GPTQ_BROTLI, &o, br, &gb) == 0, "%s", ct_error());
    CHECK(golf_write(&spec, weights, GOLF_GPTQ_PERGROUP, &o, pg, &gp) == 0, "%s", ct_error());
    CHECK(gp.num_gptq == gb.num_gptq && gp.num_lqer == 3 && gp.raw_bytes == gb.raw_bytes && gp.file_bytes > 44,
          "stats: %lld GPTQ, %lld LQER, raw %lld vs %lld", (long long)gp.num_gptq, (long long)gp.num_lqer,
          (long long)gp.raw_bytes, (long long)gb.raw_bytes);
    float *a = malloc(spec.total_floats * sizeof(float)), *b = malloc(spec.total_floats * sizeof(float));
    for (size_t i = 0; i < spec.total_floats; i++) a[i] = 1.0f, b[i] = 2.0f;
    CHECK(golf_read(&spec, GOLF_GPTQ_BROTLI, br, a) == 0, "%s", ct_error());
    CHECK(golf_read(&spec, GOLF_GPTQ_PERGROUP, pg, b) == 0, "%s", ct_error());
    CHECK(!memcmp(a, b, spec.total_floats * sizeof(float)), "gptq-pergroup's weights differ from gptq-brotli's");
    CHECK(entries_in(tmp) == 0, "%d entries left in %s", entries_in(tmp), tmp);
    /* the same weights: the same bytes (lrzip's output depends on its input only) */
    CHECK(golf_write(&spec, weights, GOLF_GPTQ_PERGROUP, &o, again, &gp) == 0, "%s", ct_error());
    size_t la, lb;
    unsigned char *fa = slurp(pg, &la), *fb = slurp(again, &lb);
    CHECK(fa && fb && la > 44 && la == lb && !memcmp(fa, fb, la), "two artifacts of the same weights differ");
    CHECK(fa && !memcmp(fa, "CTPG", 4), "no magic");
    free(fa), free(fb), free(a), free(b);
    unsetenv("TMPDIR");
    golf_hessians_free(&hess);
}

/* golf_read of path fails naming it and want; the weights are untouched */
static int read_fails(const char *path, const char *want) {
    float *back = malloc(spec.total_floats * sizeof(float));
    for (size_t i = 0; i < spec.total_floats; i++) back[i] = 7.0f;
    int failed = golf_read(&spec, GOLF_GPTQ_PERGROUP, path, back) != 0 && strstr(ct_error(), path) &&
                 strstr(ct_error(), want);
    for (size_t i = 0; i < spec.total_floats; i++) failed = failed && back[i] == 7.0f;
    free(back);
    return failed;
}

static void damaged_artifacts(void) {
    if (golf_format_available(GOLF_GPTQ_PERGROUP) != 0) SKIP("built without libbrotli");
    if (!have_lrzip()) SKIP("no lrzip on PATH (apt-get install lrzip)");
    make_model(512);
    make_hessians();
    const GolfGptqOptions o = options();
    const char *good = test_path("good.pgrp"), *bad = test_path("bad.pgrp");
    GolfStats g;
    CHECK(golf_write(&spec, weights, GOLF_GPTQ_PERGROUP, &o, good, &g) == 0, "%s", ct_error());
    size_t len;
    unsigned char *b = slurp(good, &len);
    CHECK(b && len == (size_t)g.file_bytes, "reading %s", good);
    if (!b) return;
    CHECK(write_file(bad, b, len - 1) == 0 && read_fails(bad, "truncated"), "truncated: %s", ct_error());
    CHECK(write_file(bad, "hello", 5) == 0 && read_fails(bad, "not a gptq-pergroup artifact"), "5 bytes: %s",
          ct_error());
    CHECK(write_file(bad, b + 4, len - 4) == 0 && read_fails(bad, "not a gptq-pergroup artifact"), "no magic: %s",
          ct_error());
    /* a flipped bit in the length table and in the middle of each stream that has bytes */
    int caught = 0, tried = 0;
    size_t at = 8, stream_start = 44;
    for (int k = 0; k <= 9; k++) {
        size_t where = at;
        if (k > 0) {
            const size_t n = b[8 + 4 * (k - 1)] | (size_t)b[9 + 4 * (k - 1)] << 8 | (size_t)b[10 + 4 * (k - 1)] << 16 |
                             (size_t)b[11 + 4 * (k - 1)] << 24;
            where = stream_start + n / 2;
            stream_start += n;
            if (!n) continue;
        }
        b[where] ^= 0x04;
        caught += write_file(bad, b, len) == 0 && read_fails(bad, bad);
        b[where] ^= 0x04;
        tried++;
    }
    CHECK(tried >= 7 && caught == tried, "%d of %d flipped bits read back without an error (last: %s)",
          tried - caught, tried, ct_error());
    /* another model's: the same names, mlp.fc of another size */
    make_model(320);
    CHECK(read_fails(good, "not the gptq artifact of this model"), "other model: %s", ct_error());
    make_model(512);
    /* no lrzip on PATH: says what to install, writes nothing */
    const char *none = test_path("none.pgrp");
    char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    setenv("PATH", "/nonexistent", 1);
    const int refused = golf_write(&spec, weights, GOLF_GPTQ_PERGROUP, &o, none, &g) != 0 &&
                        strstr(ct_error(), "apt-get install lrzip") && strstr(ct_error(), none);
    if (path) setenv("PATH", path, 1), free(path);
    CHECK(refused, "no lrzip: %s", ct_error());
    FILE *f = fopen(none, "rb");
    CHECK(!f, "%s written without lrzip", none);
    if (f) fclose(f);
    free(b);
    golf_hessians_free(&hess);
}

int main(void) {
    RUN(l1_sort_by_hand);
    RUN(round_trip_equals_brotli);
    RUN(damaged_artifacts);
    TEST_EXIT();
}
