/* test_caseops.c — what ctrain reads of the 1.0611 record's CaseOps data: a data file's
 * /bytes_per_token (src/data/byte_counts.c, token_writer.c; the per-token byte sidecar) written
 * and read back, checked when a file is opened, and refused when malformed; the two shard-name
 * rules of the sidecar (shard_bin.c); and the CaseOps transform (caseops.c) on hand-made text:
 * each operator, an operator split across writes, escapes, malformed samples, encoding followed
 * by decoding giving the text back, and hand-written cases' expected encodings. */
#include <hdf5.h>
#include <unistd.h>

#include "common.h"
#include "data.h"
#include "harness.h"
#include "shard_bin.h"
#include "tokenizer.h"

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

/* A data file of n tokens (id i % 50) with byte counts (i * 7) % 23, or with `counts` of them
 * when counts != n (the writer must then refuse to finish). */
static int write_file(const char *path, int64_t n, int64_t counts) {
    TokenWriter *w;
    if (token_writer_create(&w, path, 2, 50, 1, "caseops test") != 0) return -1;
    uint16_t *tok = malloc((size_t)n * sizeof *tok), *cnt = malloc((size_t)(counts > n ? counts : n) * sizeof *cnt);
    for (int64_t i = 0; i < n; i++) tok[i] = (uint16_t)(i % 50);
    for (int64_t i = 0; i < counts; i++) cnt[i] = (uint16_t)((i * 7) % 23);
    /* in two uneven pieces each, interleaved as shard_bin_convert does */
    const int64_t half = n / 3;
    int rc = token_writer_append_byte_counts(w, cnt, half) != 0 || token_writer_append(w, tok, half) != 0 ||
             token_writer_append_byte_counts(w, cnt + half, counts - half) != 0 ||
             token_writer_append(w, tok + half, n - half) != 0;
    free(tok);
    free(cnt);
    if (rc) {
        token_writer_abort(w);
        return -1;
    }
    return token_writer_close(w);
}

static void byte_counts_round_trip(void) {
    const int64_t n = CT_DATA_CHUNK_TOKENS + 999; /* two chunks */
    CHECK(write_file(test_path("bc_a.h5"), n, n) == 0, "write: %s", ct_error());
    CHECK(write_file(test_path("bc_b.h5"), 300, 300) == 0, "write: %s", ct_error());
    TokenSet set;
    CHECK(data_open_set(test_path("bc_*.h5"), &set) == 0, "open: %s", ct_error());
    const int flags = set.files[0].has_byte_counts && set.files[1].has_byte_counts && set.any_byte_counts;
    uint16_t *counts = NULL;
    const int64_t want = n + 100; /* across the file boundary */
    int rc = data_read_byte_counts(&set, want, &counts);
    data_free_set(&set);
    CHECK(flags, "has_byte_counts not set");
    CHECK(rc == 0, "read: %s", ct_error());
    int64_t bad = -1;
    for (int64_t i = 0; i < want && bad < 0; i++) {
        const int64_t in_file = i < n ? i : i - n;
        if (counts[i] != (uint16_t)((in_file * 7) % 23)) bad = i;
    }
    free(counts);
    CHECK(bad < 0, "count %lld differs", (long long)bad);
}

static void writer_refuses_count_mismatch(void) {
    ct_error_clear();
    CHECK(write_file(test_path("bc_short.h5"), 500, 499) != 0, "a file with 499 counts for 500 tokens was written");
    CHECK(error_has("499 byte counts were written for 500 tokens"), "%s", ct_error());
    CHECK(access(test_path("bc_short.h5"), F_OK) != 0 && access(test_path("bc_short.h5.tmp"), F_OK) != 0, "a file was left behind");
}

/* /tokens (n uint16 zeros, vocab 50) and a /bytes_per_token of the given type and length. */
static void write_raw(const char *path, int64_t n, hid_t counts_type, int64_t counts_len, int64_t value) {
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims = (hsize_t)n, cdims = (hsize_t)counts_len;
    hid_t space = H5Screate_simple(1, &dims, NULL), cspace = H5Screate_simple(1, &cdims, NULL);
    hid_t dset = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    uint16_t *zeros = calloc((size_t)n, sizeof *zeros);
    H5Dwrite(dset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros);
    free(zeros);
    hid_t scalar = H5Screate(H5S_SCALAR);
    int64_t vocab = 50;
    hid_t attr = H5Acreate2(dset, "vocab_size", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &vocab);
    H5Aclose(attr);
    H5Sclose(scalar);
    hid_t counts = H5Dcreate2(file, "bytes_per_token", counts_type, cspace, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (H5Tget_class(counts_type) == H5T_INTEGER) {
        int64_t *v = malloc((size_t)counts_len * sizeof *v);
        for (int64_t i = 0; i < counts_len; i++) v[i] = i == counts_len - 1 ? value : 1;
        H5Dwrite(counts, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        free(v);
    }
    H5Dclose(counts);
    H5Dclose(dset);
    H5Sclose(space);
    H5Sclose(cspace);
    H5Fclose(file);
}

static void malformed_byte_counts_refused(void) {
    TokenSet set;
    write_raw(test_path("bcw_len.h5"), 100, H5T_STD_U16LE, 99, 1);
    ct_error_clear();
    CHECK(data_open_set(test_path("bcw_len.h5"), &set) != 0, "a count short accepted");
    CHECK(error_has("bcw_len.h5': /bytes_per_token has 99 entries but /tokens has 100 tokens"), "%s", ct_error());
    write_raw(test_path("bcw_float.h5"), 100, H5T_IEEE_F32LE, 100, 1);
    ct_error_clear();
    CHECK(data_open_set(test_path("bcw_float.h5"), &set) != 0, "float counts accepted");
    CHECK(error_has("bcw_float.h5': /bytes_per_token has dtype") && error_has("expected uint16"), "%s", ct_error());
    /* an int32 count from h5py is read; one above 65535 is refused when read, naming it */
    write_raw(test_path("bcw_big.h5"), 100, H5T_STD_I32LE, 100, 70000);
    CHECK(data_open_set(test_path("bcw_big.h5"), &set) == 0, "int32 counts refused: %s", ct_error());
    uint16_t *counts = NULL;
    ct_error_clear();
    int rc = data_read_byte_counts(&set, 100, &counts);
    data_free_set(&set);
    free(counts);
    CHECK(rc != 0 && error_has("/bytes_per_token[99] is 70000, expected a byte count 0 .. 65535"), "%s", ct_error());
}

static void split_with_some_counts_refused(void) {
    CHECK(write_file(test_path("bcm_a.h5"), 200, 200) == 0, "write: %s", ct_error());
    TokenWriter *w;
    uint16_t tok[200] = {0};
    CHECK(token_writer_create(&w, test_path("bcm_b.h5"), 2, 50, 1, "") == 0 && token_writer_append(w, tok, 200) == 0 &&
              token_writer_close(w) == 0,
          "write: %s", ct_error());
    TokenSet set;
    CHECK(data_open_set(test_path("bcm_*.h5"), &set) == 0, "open: %s", ct_error());
    uint16_t *counts = NULL;
    ct_error_clear();
    int rc = data_read_byte_counts(&set, 300, &counts);
    data_free_set(&set);
    free(counts);
    CHECK(rc != 0 && error_has("bcm_b.h5' has no /bytes_per_token, but other files of '") && error_has("bcm_*.h5' do"), "%s",
          ct_error());
}

static void sidecars_paired_by_name(void) {
    char *paths[] = {"d/fineweb_val_bytes_000000.bin", "d/fineweb_train_000000.bin", "d/fineweb_val_000000.bin",
                     "d/wiki_bytes_000.bin"};
    char **tokens = NULL, **sidecars = NULL;
    int n = 0;
    CHECK(shard_bin_pair_sidecars(paths, 4, &tokens, &sidecars, &n) == 0, "%s", ct_error());
    /* the train shard alone, the val shard with its sidecar, and a byte-level shard whose name
     * merely holds _bytes_ (no partner given) imported as tokens */
    int ok = n == 3 && strcmp(tokens[0], paths[1]) == 0 && !sidecars[0] && strcmp(tokens[1], paths[2]) == 0 &&
             sidecars[1] == paths[0] && tokens[2] == paths[3] && !sidecars[2];
    free(tokens);
    free(sidecars);
    CHECK(ok, "pairing wrong (%d token shards)", n);
    char *lone[] = {"d/fineweb_val_bytes_000001.bin", "d/fineweb_val_000000.bin"};
    ct_error_clear();
    CHECK(shard_bin_pair_sidecars(lone, 2, &tokens, &sidecars, &n) != 0, "a sidecar without its shard accepted");
    CHECK(error_has("'d/fineweb_val_bytes_000001.bin' is a CaseOps byte sidecar") &&
              error_has("its token shard 'd/fineweb_val_000001.bin' is not among the shards given"),
          "%s", ct_error());
}

/* ---- the decoder ---- */

#define TITLE "\xEE\x80\x81"
#define ALLCAPS "\xEE\x80\x82"
#define CAPNEXT "\xEE\x80\x83"
#define ESC "\xEE\x80\x84"

typedef struct {
    char buf[512];
    size_t len;
} Text;

static void append(void *ctx, const char *s, size_t n) {
    Text *t = ctx;
    if (t->len + n < sizeof t->buf) memcpy(t->buf + t->len, s, n), t->len += n;
    t->buf[t->len] = '\0';
}

/* The decoded text of in, written `step` bytes at a time (0: all at once). */
static const char *decode(const char *in, size_t step, Text *out) {
    out->len = 0;
    out->buf[0] = '\0';
    CaseOpsDecoder *d = caseops_decoder_create(append, out);
    const size_t n = strlen(in);
    for (size_t at = 0; at < n; at += step ? step : n) caseops_decoder_write(d, in + at, step && n - at > step ? step : n - at);
    caseops_decoder_finish(d);
    caseops_decoder_free(d);
    return out->buf;
}

#define CHECK_DECODES(in, want)                                                                           \
    do {                                                                                                  \
        Text t_;                                                                                          \
        for (size_t step_ = 0; step_ <= 4; step_++)                                                       \
            CHECK(strcmp(decode((in), step_, &t_), (want)) == 0, "'%s' in writes of %zu: '%s', want '%s'", \
                  #in, step_, t_.buf, (want));                                                            \
    } while (0)

static void decoder_restores_capitals(void) {
    CHECK_DECODES(TITLE "the " ALLCAPS "nasa launch", "The NASA launch");
    CHECK_DECODES(TITLE "mc" CAPNEXT "donald and i" CAPNEXT "phone", "McDonald and iPhone");
    CHECK_DECODES(ALLCAPS "usa, " ALLCAPS "uk" TITLE "x", "USA, UKX"); /* TITLE mid-word: lenient, capital */
    CHECK_DECODES("caf\xC3\xA9 " TITLE "z\xC3\xBCrich", "caf\xC3\xA9 Z\xC3\xBCrich"); /* non-ASCII passes */
    CHECK_DECODES("no operators at all", "no operators at all");
}

static void decoder_escapes_and_malformed(void) {
    /* an operator character of the original text, escaped; ESC before a letter: that letter as is */
    CHECK_DECODES("a" ESC TITLE "b " ESC "x", "a" TITLE "b x");
    /* operators with no letter to act on are dropped: before a digit, a space, at the end */
    CHECK_DECODES(TITLE "1 " ALLCAPS " a" CAPNEXT, "1  a");
    CHECK_DECODES("end" ESC, "end");
    /* bytes that begin like an operator but are another character pass through */
    CHECK_DECODES("\xEE\x80\x80 \xEE\x81\x81", "\xEE\x80\x80 \xEE\x81\x81");
    CHECK_DECODES("x\xEE", "x\xEE");
}

static void encoder_writes_operators_and_round_trips(void) {
    char *e = caseops_encode("The NASA McDonald iPhone I x" ESC "y");
    const char *want = TITLE "the " ALLCAPS "nasa " TITLE "mc" CAPNEXT "donald i" CAPNEXT "phone " TITLE "i x" ESC ESC "y";
    const int same = strcmp(e, want) == 0;
    free(e);
    CHECK(same, "encoding differs");
    const char *texts[] = {"", "plain words", "ALL CAPS LINE, then Title Case", "mIxEd CaSe aBC", "A b C",
                           "caf\xC3\xA9 \xC3\x89lan Z\xC3\xBCrich", TITLE ALLCAPS "x" CAPNEXT ESC, "\xEE\x80"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        char *enc = caseops_encode(texts[i]);
        Text t;
        const int ok = strcmp(decode(enc, 0, &t), texts[i]) == 0;
        free(enc);
        CHECK(ok, "text %zu does not round-trip: '%s'", i, t.buf);
    }
}

/* The transform of hand-written cases, each worked out from the record's description of
 * lossless_caps_caseops_v1 (over maximal runs of ASCII letters: a lower-case word stays; a word
 * of two or more letters, all capitals: ALLCAPS + lower case; otherwise TITLE when the first
 * letter is a capital, then lower case with CAPNEXT before each later capital; an operator
 * character of the text: ESC before it). */
static void encoder_hand_written_cases(void) {
    static const char *const cases[][2] = {
        {"Title Case Words", TITLE "title " TITLE "case " TITLE "words"},
        {"ALL CAPS HERE", ALLCAPS "all " ALLCAPS "caps " ALLCAPS "here"},
        {"mIxEd", "m" CAPNEXT "ix" CAPNEXT "ed"},
        {"McDONALD", TITLE "mc" CAPNEXT "d" CAPNEXT "o" CAPNEXT "n" CAPNEXT "a" CAPNEXT "l" CAPNEXT "d"},
        {"iPhone", "i" CAPNEXT "phone"},
        {"A I x", TITLE "a " TITLE "i x"},                  /* one capital alone: TITLE, not ALLCAPS */
        {"B2B", TITLE "b2" TITLE "b"},                      /* digits end a word */
        {"COVID-19, NASA's", ALLCAPS "covid-19, " ALLCAPS "nasa's"},
        {"(Hello)!WORLD?", "(" TITLE "hello)!" ALLCAPS "world?"},
        {"x3Y", "x3" TITLE "y"},
        {"Ã" "COLE", "Ã" ALLCAPS "cole"},     /* a non-ASCII capital is not a letter here */
        {"a" TITLE "b", "a" ESC TITLE "b"},                 /* operator characters in the text */
        {ESC ALLCAPS CAPNEXT, ESC ESC ESC ALLCAPS ESC CAPNEXT},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = caseops_encode(cases[i][0]);
        const int same = strcmp(got, cases[i][1]) == 0;
        CHECK(same, "case %zu ('%s'): encoded '%s', want '%s'", i, cases[i][0], got, cases[i][1]);
        free(got);
    }
}

static void caseops_tokenizer_detected(void) {
    char *text[6] = {"<unk>", "<s>", TITLE, ALLCAPS, CAPNEXT, ESC};
    uint8_t type[6] = {2, 3, 1, 1, 1, 1};
    TokenPieces p = {.vocab_size = 6, .text = text, .type = type};
    CHECK(caseops_pieces(&p), "all four operators not seen");
    text[4] = "x";
    CHECK(!caseops_pieces(&p), "three operators taken for CaseOps");
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(byte_counts_round_trip);
    RUN(writer_refuses_count_mismatch);
    RUN(malformed_byte_counts_refused);
    RUN(split_with_some_counts_refused);
    RUN(sidecars_paired_by_name);
    RUN(decoder_restores_capitals);
    RUN(decoder_escapes_and_malformed);
    RUN(encoder_writes_operators_and_round_trips);
    RUN(encoder_hand_written_cases);
    RUN(caseops_tokenizer_detected);
    TEST_EXIT();
}
