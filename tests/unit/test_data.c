/* test_data.c — HDF5 token files (src/data/: data.c, data_file.c, token_reader.c, token_writer.c,
 * tokenizer_tables.c): writer/reader round trips, set resolution, tokenizer tables, the HDF5
 * lock under a concurrent reader, and every kind of bad input (files made with the C writer or
 * with raw HDF5 calls, as other tools would make them). */
#include <hdf5.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data.h"
#include "harness.h"
#include "shard_bin.h"
#include "tokenizer.h"

/* ---- helpers ---- */

/* Deterministic pseudo-random tokens below vocab. */
static uint32_t token_at(int64_t i, int64_t vocab) { return (uint32_t)((i * 2654435761u + 12345) % (uint64_t)vocab); }

/* Write n tokens (token_at) with the C writer, appending in uneven pieces so that appends
 * straddle the writer's chunk buffer. Returns 0 on success. */
static int write_tokens(const char *path, int token_bytes, int64_t vocab, int64_t n, int64_t first) {
    TokenWriter *w;
    if (token_writer_create(&w, path, token_bytes, vocab, -1, "test tokenizer") != 0) return -1;
    const int64_t piece = 333331;
    void *buf = malloc((size_t)piece * 4);
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < piece ? n - done : piece;
        for (int64_t i = 0; i < k; i++) {
            uint32_t v = token_at(first + done + i, vocab);
            if (token_bytes == 2) ((uint16_t *)buf)[i] = (uint16_t)v;
            else ((uint32_t *)buf)[i] = v;
        }
        if (token_writer_append(w, buf, k) != 0) {
            free(buf);
            token_writer_abort(w);
            return -1;
        }
        done += k;
    }
    free(buf);
    return token_writer_close(w);
}

/* A scalar int64 attribute, as h5py writes a Python int. */
static void write_i64_attribute(hid_t obj, const char *name, int64_t value) {
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(obj, name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &value);
    H5Aclose(attr);
    H5Sclose(scalar);
}

/* A /tokens dataset of any type and shape made with raw HDF5 calls, as another tool would;
 * data is in the file type's layout; vocab_size < 0 leaves the attribute out. */
#define write_raw(path, type, rank, dims, data, vocab_size) \
    write_raw_converted(path, type, type, rank, dims, data, vocab_size)
static void write_raw_converted(const char *path, hid_t type, hid_t mem_type, int rank, const hsize_t *dims,
                                const void *data, int64_t vocab_size) {
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(rank, dims, NULL);
    hid_t dset = H5Dcreate2(file, "tokens", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (data) H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (vocab_size >= 0) write_i64_attribute(dset, "vocab_size", vocab_size);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
}

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

/* Open a one-file set expecting failure whose message contains both needles. */
#define CHECK_OPEN_FAILS(pattern, needle1, needle2)                                                   \
    do {                                                                                              \
        TokenSet set_;                                                                                \
        ct_error_clear();                                                                             \
        CHECK(data_open_set((pattern), &set_) != 0, "data_open_set(%s) succeeded", (pattern));        \
        CHECK(error_has(needle1) && error_has(needle2), "message lacks '%s'/'%s': %s", (needle1),      \
              (needle2), ct_error());                                                                 \
    } while (0)

/* ---- round trips ---- */

static void check_reads(const TokenSet *set, int64_t vocab, int64_t n, int *failed) {
    TokenReader *reader;
    *failed = 1;
    if (token_reader_open(&reader, set) != 0) return;
    const int64_t chunk = CT_DATA_CHUNK_TOKENS;
    /* start, length: file start, crossing one and two chunk boundaries, the last tokens */
    int64_t ranges[][2] = {{0, 10}, {chunk - 7, 20}, {chunk - 3, chunk + 9}, {n - 5, 5}, {n - 1, 1}, {0, n},
                           {12345, 1}};
    uint32_t *buf = malloc((size_t)n * sizeof(uint32_t));
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        int64_t pos = ranges[r][0], len = ranges[r][1];
        if (token_reader_read(reader, 0, pos, len, buf) != 0) goto out;
        for (int64_t i = 0; i < len; i++)
            if (buf[i] != token_at(pos + i, vocab)) goto out;
    }
    if (token_reader_read(reader, 0, n, 0, buf) != 0) goto out; /* empty read at the very end */
    *failed = 0;
out:
    free(buf);
    token_reader_close(reader);
}

static void roundtrip(int token_bytes, int64_t vocab) {
    const int64_t n = 2 * CT_DATA_CHUNK_TOKENS + 4321; /* three chunks, the last partial */
    char name[64];
    snprintf(name, sizeof name, "roundtrip%d.h5", token_bytes * 8);
    const char *path = test_path(name);
    CHECK(write_tokens(path, token_bytes, vocab, n, 0) == 0, "write: %s", ct_error());
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!test_file_exists(tmp), "temporary file %s left behind", tmp);

    TokenFileInfo info;
    CHECK(data_file_info(path, &info) == 0, "info: %s", ct_error());
    int ok = info.num_tokens == n && info.vocab_size == vocab && info.bos_id == -1 &&
             info.token_bytes == token_bytes && !info.has_luts && !strcmp(info.tokenizer, "test tokenizer");
    data_free_file_info(&info);
    CHECK(ok, "metadata does not round-trip");

    TokenSet set;
    CHECK(data_open_set(path, &set) == 0, "open: %s", ct_error());
    int failed;
    check_reads(&set, vocab, n, &failed);
    int checked = data_check_tokens(&set);
    data_free_set(&set);
    CHECK(!failed, "token values differ after a round trip (%s)", ct_error());
    CHECK(checked == 0, "check_tokens: %s", ct_error());
}

static void roundtrip_uint16(void) { roundtrip(2, 1024); }
static void roundtrip_uint32(void) { roundtrip(4, 100000); }

static void reader_rejects_out_of_range(void) {
    const char *path = test_path("range.h5");
    CHECK(write_tokens(path, 2, 50, 100, 0) == 0, "write: %s", ct_error());
    TokenSet set;
    CHECK(data_open_set(path, &set) == 0, "open: %s", ct_error());
    TokenReader *reader;
    token_reader_open(&reader, &set);
    uint32_t buf[8];
    int past_end = token_reader_read(reader, 0, 98, 3, buf);
    int past_end_ok = past_end != 0 && error_has("range.h5") && error_has("[98, 101)") && error_has("100 tokens");
    int negative = token_reader_read(reader, 0, -1, 1, buf);
    int bad_file = token_reader_read(reader, 1, 0, 1, buf);
    token_reader_close(reader);
    data_free_set(&set);
    CHECK(past_end_ok, "read past the end: rc %d, message: %s", past_end, ct_error());
    CHECK(negative != 0 && bad_file != 0, "negative position or file index accepted");
}

/* A file shorter than a chunk is one chunk of its own length (no 2 MiB chunk on disk). */
static void small_file_is_one_short_chunk(void) {
    const char *path = test_path("small.h5");
    CHECK(write_tokens(path, 2, 256, 1000, 0) == 0, "write: %s", ct_error());
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t dset = H5Dopen2(file, "tokens", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(dset);
    hsize_t chunk = 0;
    int layout = H5Pget_layout(dcpl);
    H5Pget_chunk(dcpl, 1, &chunk);
    H5Pclose(dcpl);
    H5Dclose(dset);
    H5Fclose(file);
    CHECK(layout == H5D_CHUNKED && chunk == 1000, "layout %d chunk %llu", layout, (unsigned long long)chunk);
    struct stat st;
    stat(path, &st);
    CHECK(st.st_size < 64 * 1024, "a 1000-token file takes %lld bytes", (long long)st.st_size);
}

/* ---- sets ---- */

static void set_is_sorted_and_concatenated(void) {
    const char *dir = test_path("set");
    CHECK(ct_mkdir_p(dir) == 0, "%s", ct_error());
    /* Written out of order; byte-wise order is A < B < a10 < a9 (not numeric, not locale). */
    const char *names[] = {"a9.h5", "A.h5", "a10.h5", "B.h5"};
    const char *sorted[] = {"A.h5", "B.h5", "a10.h5", "a9.h5"};
    int64_t sizes[] = {10, 20, 30, 40};
    char path[700], pattern[700];
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        CHECK(write_tokens(path, 2, 1000, sizes[i], 1000 * i) == 0, "write: %s", ct_error());
    }
    snprintf(path, sizeof path, "%s/ignored.txt", dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    snprintf(pattern, sizeof pattern, "%s/*.h5", dir);
    TokenSet set;
    CHECK(data_open_set(pattern, &set) == 0, "open: %s", ct_error());
    int order_ok = set.num_files == 4 && set.total_tokens == 100 && set.vocab_size == 1000 && !set.has_luts;
    for (int i = 0; i < set.num_files && order_ok; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, sorted[i]);
        order_ok = !strcmp(set.files[i].path, path);
    }
    /* The second file in order (B.h5) was written with first = 1000 * 3. */
    TokenReader *reader;
    token_reader_open(&reader, &set);
    uint32_t buf[20];
    int read_ok = token_reader_read(reader, 1, 0, 20, buf) == 0;
    for (int i = 0; i < 20 && read_ok; i++) read_ok = buf[i] == token_at(3000 + i, 1000);
    token_reader_close(reader);
    data_free_set(&set);
    CHECK(order_ok, "files not in byte-wise sorted order or totals wrong");
    CHECK(read_ok, "reading the second file of the set: %s", ct_error());
}

static void empty_glob_names_pattern(void) {
    char pattern[700];
    snprintf(pattern, sizeof pattern, "%s/nothing_here_*.h5", test_tmpdir());
    CHECK_OPEN_FAILS(pattern, "no files match", "nothing_here_*.h5");
    snprintf(pattern, sizeof pattern, "%s/no_such_dir/*.h5", test_tmpdir());
    CHECK_OPEN_FAILS(pattern, "no_such_dir/*.h5", "does not exist");
}

static void missing_and_non_hdf5_files(void) {
    CHECK_OPEN_FAILS(test_path("missing.h5"), "missing.h5", "No such file");
    const char *text = test_path("text.h5");
    FILE *f = fopen(text, "w");
    fputs("not hdf5\n", f);
    fclose(f);
    CHECK_OPEN_FAILS(text, "text.h5", "not an HDF5 file");
    /* An llm.c shard given by mistake gets a hint to convert it. */
    const char *bin = test_path("shard.bin");
    int32_t header[CT_SHARD_HEADER_BYTES / 4] = {CT_SHARD_MAGIC, CT_SHARD_VERSION, 0};
    f = fopen(bin, "wb");
    fwrite(header, sizeof header, 1, f);
    fclose(f);
    CHECK_OPEN_FAILS(bin, "shard.bin", "import-bin");
    CHECK_OPEN_FAILS(test_tmpdir(), "is a directory", "*.h5");
}

static void vocab_disagreement_names_both_files(void) {
    const char *dir = test_path("vocab");
    ct_mkdir_p(dir);
    char a[700], b[700], pattern[700];
    snprintf(a, sizeof a, "%s/a.h5", dir);
    snprintf(b, sizeof b, "%s/b.h5", dir);
    CHECK(write_tokens(a, 2, 1024, 10, 0) == 0, "%s", ct_error());
    CHECK(write_tokens(b, 2, 2048, 10, 0) == 0, "%s", ct_error());
    snprintf(pattern, sizeof pattern, "%s/*.h5", dir);
    CHECK_OPEN_FAILS(pattern, "a.h5' has 1024", "b.h5' has 2048");
}

/* ---- bad /tokens datasets made with raw HDF5 calls ---- */

static void wrong_dtypes_rejected(void) {
    hsize_t n = 4;
    float floats[4] = {1, 2, 3, 4};
    int8_t small[4] = {1, 2, 3, 4};
    int32_t signed32[4] = {1, 2, 3, 4};
    const char *p = test_path("float.h5");
    write_raw(p, H5T_IEEE_F32LE, 1, &n, floats, 10);
    CHECK_OPEN_FAILS(p, "float.h5", "dtype float32");
    p = test_path("int8.h5");
    write_raw(p, H5T_STD_I8LE, 1, &n, small, 10);
    CHECK_OPEN_FAILS(p, "int8.h5", "dtype int8");
    p = test_path("int32.h5");
    write_raw(p, H5T_STD_I32LE, 1, &n, signed32, 10);
    CHECK_OPEN_FAILS(p, "int32.h5", "dtype int32, expected uint16");
}

static void big_endian_tokens_accepted(void) {
    hsize_t n = 3;
    uint16_t v[3] = {7, 300, 65535};
    const char *p = test_path("be.h5");
    write_raw_converted(p, H5T_STD_U16BE, H5T_NATIVE_UINT16, 1, &n, v, 65536);
    TokenSet set;
    CHECK(data_open_set(p, &set) == 0, "%s", ct_error());
    TokenReader *r;
    token_reader_open(&r, &set);
    uint32_t out[3] = {0};
    int rc = token_reader_read(r, 0, 0, 3, out);
    token_reader_close(r);
    data_free_set(&set);
    CHECK(rc == 0 && out[0] == 7 && out[1] == 300 && out[2] == 65535, "read %u %u %u", out[0], out[1], out[2]);
}

static void bad_shapes_rejected(void) {
    hsize_t dims2[2] = {3, 4}, zero = 0;
    uint16_t grid[12] = {0};
    const char *p = test_path("twod.h5");
    write_raw(p, H5T_STD_U16LE, 2, dims2, grid, 10);
    CHECK_OPEN_FAILS(p, "twod.h5", "2 dimensions [3 x 4]");
    p = test_path("empty.h5");
    write_raw(p, H5T_STD_U16LE, 1, &zero, NULL, 10);
    CHECK_OPEN_FAILS(p, "empty.h5", "empty");
    /* /tokens missing, or a group */
    p = test_path("notokens.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "notokens.h5", "no /tokens dataset");
    p = test_path("group.h5");
    f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(H5Gcreate2(f, "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "group.h5", "is a group");
}

static void attribute_problems(void) {
    hsize_t n = 2;
    uint16_t v[2] = {1, 2};
    const char *p = test_path("novocab.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, -1);
    CHECK_OPEN_FAILS(p, "novocab.h5", "no vocab_size attribute");
    p = test_path("zerovocab.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, 0);
    CHECK_OPEN_FAILS(p, "zerovocab.h5", "vocab_size = 0");

    /* vocab_size as a string, and a bos_id outside the vocabulary */
    p = test_path("strvocab.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, -1);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT), d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    hid_t st = H5Tcopy(H5T_C_S1), scalar = H5Screate(H5S_SCALAR);
    H5Tset_size(st, 4);
    hid_t a = H5Acreate2(d, "vocab_size", st, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, "1024");
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "strvocab.h5", "vocab_size has type string");

    /* a uint64 beyond int64 is named as the file holds it (HDF5 would clamp it to INT64_MAX) */
    p = test_path("hugevocab.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, -1);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    uint64_t huge = UINT64_MAX;
    a = H5Acreate2(d, "vocab_size", H5T_STD_U64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_UINT64, &huge);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "hugevocab.h5", "attribute vocab_size is 18446744073709551615");

    p = test_path("badbos.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, 10);
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    d = H5Dopen2(f, "tokens", H5P_DEFAULT);
    int64_t bos = 10;
    a = H5Acreate2(d, "bos_id", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &bos);
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
    H5Sclose(scalar);
    H5Tclose(st);
    CHECK_OPEN_FAILS(p, "badbos.h5", "bos_id = 10");
}

/* Attributes on the root group (h5py's f.attrs) and a fixed-length tokenizer string. */
static void root_attributes_and_fixed_string(void) {
    hsize_t n = 2;
    uint16_t v[2] = {1, 2};
    const char *p = test_path("rootattrs.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, -1);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t scalar = H5Screate(H5S_SCALAR), st = H5Tcopy(H5T_C_S1);
    int32_t vocab = 300; /* int32 is fine too */
    hid_t a = H5Acreate2(f, "vocab_size", H5T_STD_I32LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT32, &vocab);
    H5Aclose(a);
    H5Tset_size(st, 6);
    H5Tset_strpad(st, H5T_STR_NULLPAD); /* as numpy's fixed bytes */
    a = H5Acreate2(f, "tokenizer", st, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, st, "sp300\0");
    H5Aclose(a);
    H5Tclose(st);
    H5Sclose(scalar);
    H5Fclose(f);
    TokenFileInfo info;
    CHECK(data_file_info(p, &info) == 0, "%s", ct_error());
    int ok = info.vocab_size == 300 && info.bos_id == -1 && !strcmp(info.tokenizer, "sp300");
    data_free_file_info(&info);
    CHECK(ok, "root attributes not read");
}

static void out_of_range_token_found_by_check(void) {
    hsize_t n = 6;
    uint16_t v[6] = {0, 1, 2, 3, 70, 5};
    const char *p = test_path("oor.h5");
    write_raw(p, H5T_STD_U16LE, 1, &n, v, 64);
    TokenSet set;
    CHECK(data_open_set(p, &set) == 0, "metadata alone should be fine: %s", ct_error());
    uint32_t max_token = 0;
    int rc = data_check_tokens(&set);
    int message_ok = error_has("oor.h5") && error_has("token 4 ") && error_has("is 70") && error_has("vocab_size 64");
    int scan = data_scan_tokens(&set, &max_token, NULL, NULL);
    data_free_set(&set);
    CHECK(rc != 0 && message_ok, "rc %d, message: %s", rc, ct_error());
    CHECK(scan != 0, "scan passed");
}

/* ---- writer ---- */

static void writer_rejects_bad_tokens_and_arguments(void) {
    const char *p = test_path("reject.h5");
    TokenWriter *w;
    CHECK(token_writer_create(&w, p, 2, 100, -1, "") == 0, "%s", ct_error());
    uint16_t good[3] = {1, 2, 3}, bad[3] = {4, 100, 5};
    CHECK(token_writer_append(w, good, 3) == 0, "%s", ct_error());
    int rc = token_writer_append(w, bad, 3);
    int message_ok = error_has("token 4 is 100") && error_has("vocab_size 100");
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    int tmp_during = test_file_exists(tmp), final_during = test_file_exists(p);
    token_writer_abort(w);
    CHECK(rc != 0 && message_ok, "rc %d: %s", rc, ct_error());
    CHECK(tmp_during && !final_during, "writing must go to .tmp (tmp %d, final %d)", tmp_during, final_during);
    CHECK(!test_file_exists(tmp) && !test_file_exists(p), "abort left a file behind");

    CHECK(token_writer_create(&w, p, 3, 100, -1, "") != 0, "token width 3 accepted");
    CHECK(token_writer_create(&w, p, 2, 70000, -1, "") != 0, "vocab 70000 accepted for uint16");
    CHECK(token_writer_create(&w, p, 2, 100, 100, "") != 0, "bos_id 100 accepted for vocab 100");
    /* a missing folder is made (as every writer does); one that cannot be made is an error */
    CHECK(token_writer_create(&w, test_path("new/dir/x.h5"), 2, 100, -1, "") == 0, "missing folder: %s", ct_error());
    token_writer_abort(w);
    CHECK(test_file_exists(test_path("new/dir")), "the folder was not made");
    FILE *blocker = fopen(test_path("plainfile"), "w");
    CHECK(blocker, "cannot create %s", test_path("plainfile"));
    fclose(blocker);
    CHECK(token_writer_create(&w, test_path("plainfile/x.h5"), 2, 100, -1, "") != 0 &&
              error_has("plainfile' exists but is not a directory"),
          "folder that cannot be made: %s", ct_error());
}

static void writer_refuses_empty_file(void) {
    const char *p = test_path("nothing.h5");
    TokenWriter *w;
    CHECK(token_writer_create(&w, p, 2, 100, -1, "") == 0, "%s", ct_error());
    CHECK(token_writer_close(w) != 0 && error_has("no tokens"), "closing an empty writer: %s", ct_error());
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(!test_file_exists(p) && !test_file_exists(tmp), "empty writer left a file");
}

/* ---- tokenizer tables ---- */

static int write_with_luts(const char *path, int64_t vocab, int variant) {
    TokenWriter *w;
    if (token_writer_create(&w, path, 2, vocab, 0, "sp") != 0) return -1;
    int16_t *bb = malloc((size_t)vocab * sizeof(int16_t));
    uint8_t *ls = malloc((size_t)vocab), *bt = malloc((size_t)vocab);
    for (int64_t i = 0; i < vocab; i++) {
        bb[i] = (int16_t)(i % 7 + variant);
        ls[i] = i % 3 == 0;
        bt[i] = i < 3;
    }
    uint16_t tokens[5] = {0, 1, 2, 3, 4};
    int rc = token_writer_set_luts(w, bb, ls, bt) == 0 && token_writer_append(w, tokens, 5) == 0 ? 0 : -1;
    free(bb);
    free(ls);
    free(bt);
    if (rc != 0) {
        token_writer_abort(w);
        return -1;
    }
    return token_writer_close(w);
}

static void luts_round_trip(void) {
    const char *dir = test_path("luts");
    ct_mkdir_p(dir);
    char a[700], b[700], pattern[700];
    snprintf(a, sizeof a, "%s/a.h5", dir);
    snprintf(b, sizeof b, "%s/b.h5", dir);
    CHECK(write_with_luts(a, 50, 0) == 0 && write_with_luts(b, 50, 0) == 0, "%s", ct_error());
    snprintf(pattern, sizeof pattern, "%s/*.h5", dir);
    TokenSet set;
    CHECK(data_open_set(pattern, &set) == 0, "%s", ct_error());
    int16_t *bb = NULL;
    uint8_t *ls = NULL, *bt = NULL;
    int rc = data_read_luts(&set, &bb, &ls, &bt);
    int ok = rc == 0 && set.has_luts && set.files[0].bos_id == 0;
    for (int i = 0; i < 50 && ok; i++) ok = bb[i] == i % 7 && ls[i] == (i % 3 == 0) && bt[i] == (i < 3);
    free(bb);
    free(ls);
    free(bt);
    data_free_set(&set);
    CHECK(ok, "tables differ after a round trip: %s", ct_error());

    CHECK(data_read_luts_file(a, 50, &bb, &ls, &bt) == 0, "%s", ct_error());
    free(bb);
    free(ls);
    free(bt);
    CHECK(data_read_luts_file(a, 60, &bb, &ls, &bt) != 0 && error_has("50 entries") && error_has("60"),
          "wrong vocab accepted: %s", ct_error());
}

static void luts_missing_or_different(void) {
    const char *dir = test_path("luts2");
    ct_mkdir_p(dir);
    char a[700], b[700], pattern[700];
    snprintf(a, sizeof a, "%s/a.h5", dir);
    snprintf(b, sizeof b, "%s/b.h5", dir);
    snprintf(pattern, sizeof pattern, "%s/*.h5", dir);
    CHECK(write_with_luts(a, 50, 0) == 0 && write_with_luts(b, 50, 1) == 0, "%s", ct_error());
    TokenSet set;
    int16_t *bb;
    uint8_t *ls, *bt;
    CHECK(data_open_set(pattern, &set) == 0, "%s", ct_error());
    int rc = data_read_luts(&set, &bb, &ls, &bt);
    data_free_set(&set);
    CHECK(rc != 0 && error_has("different /tokenizer tables") && error_has("a.h5") && error_has("b.h5"),
          "different tables accepted: %s", ct_error());

    CHECK(write_tokens(b, 2, 50, 5, 0) == 0, "%s", ct_error()); /* b.h5 now has no tables */
    CHECK(data_open_set(pattern, &set) == 0, "%s", ct_error());
    int has = set.has_luts;
    rc = data_read_luts(&set, &bb, &ls, &bt);
    data_free_set(&set);
    CHECK(!has && rc != 0 && error_has("b.h5' has no /tokenizer tables"), "missing tables: %s", ct_error());
}

static void luts_partial_or_wrong_length_rejected(void) {
    const char *p = test_path("partial.h5");
    CHECK(write_tokens(p, 2, 10, 5, 0) == 0, "%s", ct_error());
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t nine = 9;
    hid_t space = H5Screate_simple(1, &nine, NULL);
    H5Dclose(H5Dcreate2(g, "base_bytes", H5T_STD_I16LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Gclose(g);
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "partial.h5", "lacks /tokenizer/has_leading_space");
    f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    g = H5Gopen2(f, "tokenizer", H5P_DEFAULT);
    H5Dclose(H5Dcreate2(g, "has_leading_space", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Dclose(H5Dcreate2(g, "is_boundary_token", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Gclose(g);
    H5Sclose(space);
    H5Fclose(f);
    CHECK_OPEN_FAILS(p, "/tokenizer/base_bytes has 9 entries", "vocab_size = 10");
}

/* numpy bool arrays arrive as an 8-bit enum {FALSE, TRUE}; they must read as 0/1. */
static void luts_bool_enum_accepted(void) {
    const char *p = test_path("boolenum.h5");
    CHECK(write_tokens(p, 2, 4, 5, 0) == 0, "%s", ct_error());
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "tokenizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t n = 4;
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t boolean = H5Tenum_create(H5T_STD_I8LE);
    int8_t no = 0, yes = 1;
    H5Tenum_insert(boolean, "FALSE", &no);
    H5Tenum_insert(boolean, "TRUE", &yes);
    int16_t bb[4] = {1, 2, 3, 4};
    int8_t ls[4] = {1, 0, 1, 0}, bt[4] = {0, 0, 0, 1};
    hid_t d = H5Dcreate2(g, "base_bytes", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bb);
    H5Dclose(d);
    d = H5Dcreate2(g, "has_leading_space", boolean, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, boolean, H5S_ALL, H5S_ALL, H5P_DEFAULT, ls);
    H5Dclose(d);
    d = H5Dcreate2(g, "is_boundary_token", boolean, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, boolean, H5S_ALL, H5S_ALL, H5P_DEFAULT, bt);
    H5Dclose(d);
    H5Tclose(boolean);
    H5Sclose(space);
    H5Gclose(g);
    H5Fclose(f);
    int16_t *rb;
    uint8_t *rl, *rt;
    CHECK(data_read_luts_file(p, 4, &rb, &rl, &rt) == 0, "%s", ct_error());
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= rb[i] == bb[i] && rl[i] == ls[i] && rt[i] == bt[i];
    free(rb);
    free(rl);
    free(rt);
    CHECK(ok, "bool enum tables read wrongly");
}

/* ---- the HDF5 lock ---- */

typedef struct {
    const TokenSet *set;
    int64_t vocab;
    int errors;
} ReaderJob;

static void *reader_thread(void *arg) {
    ReaderJob *job = arg;
    TokenReader *r;
    token_reader_open(&r, job->set);
    uint32_t buf[4096];
    int64_t n = job->set->files[0].num_tokens;
    for (int iter = 0; iter < 400; iter++) {
        int64_t pos = (iter * 7919) % (n - 4096);
        if (token_reader_read(r, 0, pos, 4096, buf) != 0) {
            job->errors++;
            continue;
        }
        for (int i = 0; i < 4096; i++)
            if (buf[i] != token_at(pos + i, job->vocab)) {
                job->errors++;
                break;
            }
    }
    token_reader_close(r);
    return NULL;
}

/* A prefetch-style reader thread while the main thread writes other files. */
static void concurrent_read_and_write(void) {
    const char *p = test_path("concurrent.h5");
    CHECK(write_tokens(p, 2, 1000, 300000, 0) == 0, "%s", ct_error());
    TokenSet set;
    CHECK(data_open_set(p, &set) == 0, "%s", ct_error());
    ReaderJob job = {&set, 1000, 0};
    pthread_t thread;
    pthread_create(&thread, NULL, reader_thread, &job);
    int write_errors = 0;
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof name, "concurrent_w%d.h5", i);
        write_errors += write_tokens(test_path(name), 4, 5000, 50000, i) != 0;
    }
    pthread_join(thread, NULL);
    data_free_set(&set);
    CHECK(job.errors == 0 && write_errors == 0, "%d read errors, %d write errors: %s", job.errors, write_errors,
          ct_error());
}


/* ---- identity and storage ---- */

/* CRC-32 one bit at a time: an independent reference for the table-driven one. */
static uint32_t crc32_reference(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* The tokens of a file as little-endian bytes of its width, hashed by the reference. */
static uint32_t file_crc_reference(const TokenSet *set, int file) {
    const TokenFileInfo *f = &set->files[file];
    uint32_t *tokens = malloc((size_t)f->num_tokens * sizeof *tokens);
    TokenReader *reader;
    token_reader_open(&reader, set);
    int rc = token_reader_read(reader, file, 0, f->num_tokens, tokens);
    token_reader_close(reader);
    uint32_t crc = 0;
    for (int64_t i = 0; rc == 0 && i < f->num_tokens; i++) {
        unsigned char b[4] = {(unsigned char)tokens[i], (unsigned char)(tokens[i] >> 8),
                              (unsigned char)(tokens[i] >> 16), (unsigned char)(tokens[i] >> 24)};
        crc = crc32_reference(crc, b, (size_t)f->token_bytes);
    }
    free(tokens);
    return crc;
}

static void crc_helpers_agree(void) {
    CHECK(crc32_reference(0, (const unsigned char *)"123456789", 9) == 0xCBF43926u, "reference check value");
    uint32_t wide[1000];
    uint16_t narrow[1000];
    for (int i = 0; i < 1000; i++) {
        wide[i] = token_at(i, 60000);
        narrow[i] = (uint16_t)wide[i];
    }
    uint32_t a = data_crc32_tokens(0, wide, 1000, 2), b = data_crc32_packed(0, narrow, 1000, 2);
    uint32_t c = crc32_reference(0, (const unsigned char *)narrow, sizeof narrow); /* little-endian host */
    CHECK(a == b && b == c, "uint16: widened 0x%08x, packed 0x%08x, reference 0x%08x", a, b, c);
    a = data_crc32_tokens(0, wide, 1000, 4);
    b = data_crc32_packed(0, wide, 1000, 4);
    CHECK(a == b && b == crc32_reference(0, (const unsigned char *)wide, sizeof wide), "uint32 differs");
    /* chained in pieces = in one go, as the writer computes it chunk by chunk */
    CHECK(data_crc32_tokens(data_crc32_tokens(0, wide, 333, 4), wide + 333, 667, 4) == a, "chaining differs");
}

/* The writer stores tokens_crc32 of what it wrote; the scan checks it; a token changed in the
 * middle of a long file, where the sample checksum does not look, is caught by it. */
static void tokens_crc32_written_and_checked(void) {
    const int64_t n = CT_DATA_CHUNK_TOKENS + 77777;
    for (int width = 2; width <= 4; width += 2) {
        const char *path = test_path(width == 2 ? "crc16.h5" : "crc32.h5");
        CHECK(write_tokens(path, width, width == 2 ? 1024 : 100000, n, 5) == 0, "write: %s", ct_error());
        TokenSet set;
        CHECK(data_open_set(path, &set) == 0, "open: %s", ct_error());
        uint32_t want = file_crc_reference(&set, 0);
        CHECK(set.files[0].tokens_crc32 == (int64_t)want, "tokens_crc32 0x%llx, tokens give 0x%08x",
              (long long)set.files[0].tokens_crc32, want);
        CHECK(set.files[0].sample_crc32 == -1, "sample checksum computed before data_fingerprint");
        CHECK(data_check_tokens(&set) == 0, "scan of an intact file: %s", ct_error());
        CHECK(data_fingerprint(&set) == 0, "%s", ct_error());
        int64_t sample = set.files[0].sample_crc32;
        data_free_set(&set);

        hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t dset = H5Dopen2(file, "tokens", H5P_DEFAULT), space = H5Dget_space(dset);
        hsize_t at = (hsize_t)n / 2, one = 1;
        uint32_t value = token_at((int64_t)at + 5, 1024) ^ 1;
        hid_t mem = H5Screate_simple(1, &one, NULL);
        H5Sselect_hyperslab(space, H5S_SELECT_SET, &at, NULL, &one, NULL);
        H5Dwrite(dset, H5T_NATIVE_UINT32, mem, space, H5P_DEFAULT, &value);
        H5Sclose(mem);
        H5Sclose(space);
        H5Dclose(dset);
        H5Fclose(file);

        CHECK(data_open_set(path, &set) == 0, "open: %s", ct_error());
        CHECK(data_fingerprint(&set) == 0 && set.files[0].sample_crc32 == sample, "the middle moved the sample");
        int rc = data_check_tokens(&set);
        data_free_set(&set);
        CHECK(rc != 0 && error_has("do not match the file's tokens_crc32") && error_has(path),
              "changed file: %s", ct_error());
    }
    /* a file made by another tool has none, and a bad value is refused */
    const char *raw = test_path("nocrc.h5");
    uint16_t toks[5] = {1, 2, 3, 4, 5};
    hsize_t dims = 5;
    write_raw(raw, H5T_NATIVE_UINT16, 1, &dims, toks, 10);
    TokenFileInfo info;
    CHECK(data_file_info(raw, &info) == 0 && info.tokens_crc32 == -1, "no attribute: %s", ct_error());
    data_free_file_info(&info);
    hid_t file = H5Fopen(raw, H5F_ACC_RDWR, H5P_DEFAULT), dset = H5Dopen2(file, "tokens", H5P_DEFAULT);
    write_i64_attribute(dset, "tokens_crc32", -5);
    H5Dclose(dset);
    H5Fclose(file);
    CHECK(data_file_info(raw, &info) != 0 && error_has("tokens_crc32 = -5, expected a CRC-32"), "%s", ct_error());
}

/* The sample checksum: all tokens of a short file; the two ends of a long one. */
static void fingerprint_covers_both_ends(void) {
    const char *small = test_path("fp_small.h5"), *big = test_path("fp_big.h5");
    CHECK(write_tokens(small, 2, 1024, 1000, 0) == 0 && write_tokens(big, 2, 1024, 3 * CT_DATA_SAMPLE_TOKENS, 0) == 0,
          "%s", ct_error());
    TokenSet set;
    CHECK(data_open_set(small, &set) == 0 && data_fingerprint(&set) == 0, "%s", ct_error());
    CHECK(set.files[0].sample_crc32 == set.files[0].tokens_crc32, "a short file's sample is not its whole CRC");
    data_free_set(&set);
    CHECK(data_open_set(big, &set) == 0 && data_fingerprint(&set) == 0, "%s", ct_error());
    uint32_t *t = malloc((size_t)(3 * CT_DATA_SAMPLE_TOKENS) * sizeof *t);
    TokenReader *reader;
    token_reader_open(&reader, &set);
    CHECK(token_reader_read(reader, 0, 0, 3 * CT_DATA_SAMPLE_TOKENS, t) == 0, "%s", ct_error());
    token_reader_close(reader);
    uint32_t want = data_crc32_tokens(0, t, CT_DATA_SAMPLE_TOKENS, 2);
    want = data_crc32_tokens(want, t + 2 * CT_DATA_SAMPLE_TOKENS, CT_DATA_SAMPLE_TOKENS, 2);
    free(t);
    CHECK(set.files[0].sample_crc32 == (int64_t)want, "sample 0x%llx, first+last give 0x%08x",
          (long long)set.files[0].sample_crc32, want);
    data_free_set(&set);
}

/* A chunk the index lists nowhere (a writer that died before writing it), and one whose
 * address points past the end of the file (a damaged index). */
static void storage_check_finds_missing_and_outside_chunks(void) {
    const char *path = test_path("holes.h5");
    hsize_t dims = 3 * 1000, chunk = 1000;
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t space = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t dset = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    uint16_t toks[1000] = {0};
    hsize_t start = 0;
    hid_t mem = H5Screate_simple(1, &chunk, NULL);
    for (int c = 0; c < 3; c += 2) { /* chunks 0 and 2 only */
        start = (hsize_t)c * chunk;
        H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, NULL, &chunk, NULL);
        H5Dwrite(dset, H5T_NATIVE_UINT16, mem, space, H5P_DEFAULT, toks);
    }
    write_i64_attribute(dset, "vocab_size", 10);
    H5Sclose(mem);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Dclose(dset);
    H5Fclose(file);
    TokenSet set;
    CHECK(data_open_set(path, &set) == 0, "metadata alone is fine: %s", ct_error());
    int rc = data_check_storage(&set);
    data_free_set(&set);
    CHECK(rc != 0 && error_has("chunk of /tokens at token 1000 is not stored") && error_has("holes.h5"), "%s",
          ct_error());

    /* an intact file passes; then its first chunk's address, patched in the index, points
     * beyond the end */
    const char *moved = test_path("outside.h5");
    CHECK(write_tokens(moved, 2, 1024, 2 * CT_DATA_CHUNK_TOKENS, 0) == 0, "%s", ct_error());
    CHECK(data_open_set(moved, &set) == 0 && data_check_storage(&set) == 0, "intact file: %s", ct_error());
    data_free_set(&set);
    file = H5Fopen(moved, H5F_ACC_RDONLY, H5P_DEFAULT);
    dset = H5Dopen2(file, "tokens", H5P_DEFAULT);
    haddr_t addr = 0;
    hsize_t size = 0, zero = 0, fsize = 0;
    unsigned mask;
    H5Dget_chunk_info_by_coord(dset, &zero, &mask, &addr, &size);
    H5Fget_filesize(file, &fsize);
    H5Dclose(dset);
    H5Fclose(file);
    FILE *f = fopen(moved, "r+b");
    unsigned char *bytes = malloc((size_t)fsize);
    CHECK(f && fread(bytes, 1, (size_t)fsize, f) == (size_t)fsize, "read back");
    unsigned char want[8], patch[8];
    for (int b = 0; b < 8; b++) {
        want[b] = (unsigned char)((uint64_t)addr >> (8 * b));
        patch[b] = (unsigned char)((uint64_t)(fsize + 4096) >> (8 * b));
    }
    /* the 8 bytes may occur more than once in the metadata (the chunks carry Fletcher32, so the
     * index's keys hold sizes and masks too): the one to patch is the one the index reads back */
    int found = 0, patched = 0;
    for (hsize_t i = 0; i + 8 <= fsize && i < (hsize_t)addr && !patched; i++) {
        if (memcmp(bytes + i, want, 8)) continue;
        found++;
        fseek(f, (long)i, SEEK_SET);
        fwrite(patch, 1, 8, f);
        fflush(f);
        haddr_t now = HADDR_UNDEF;
        hid_t pf = H5Fopen(moved, H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t pd = pf >= 0 ? H5Dopen2(pf, "tokens", H5P_DEFAULT) : H5I_INVALID_HID;
        if (pd >= 0) H5Dget_chunk_info_by_coord(pd, &zero, &mask, &now, &size);
        if (pd >= 0) H5Dclose(pd);
        if (pf >= 0) H5Fclose(pf);
        patched = now == (haddr_t)(fsize + 4096);
        if (!patched) { /* not the index's pointer: put the bytes back */
            fseek(f, (long)i, SEEK_SET);
            fwrite(want, 1, 8, f);
            fflush(f);
        }
    }
    free(bytes);
    fclose(f);
    CHECK(patched, "no occurrence of the chunk address 0x%llx (%d found) is the index's pointer",
          (unsigned long long)addr, found);
    CHECK(data_open_set(moved, &set) == 0, "metadata alone is fine: %s", ct_error());
    rc = data_check_storage(&set);
    data_free_set(&set);
    CHECK(rc != 0 && error_has("chunk of /tokens at token 0 lies at bytes") && error_has("truncated or damaged"),
          "%s", ct_error());
}

int main(void) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    RUN(roundtrip_uint16);
    RUN(roundtrip_uint32);
    RUN(reader_rejects_out_of_range);
    RUN(small_file_is_one_short_chunk);
    RUN(set_is_sorted_and_concatenated);
    RUN(empty_glob_names_pattern);
    RUN(missing_and_non_hdf5_files);
    RUN(vocab_disagreement_names_both_files);
    RUN(wrong_dtypes_rejected);
    RUN(big_endian_tokens_accepted);
    RUN(bad_shapes_rejected);
    RUN(attribute_problems);
    RUN(root_attributes_and_fixed_string);
    RUN(out_of_range_token_found_by_check);
    RUN(writer_rejects_bad_tokens_and_arguments);
    RUN(writer_refuses_empty_file);
    RUN(luts_round_trip);
    RUN(luts_missing_or_different);
    RUN(luts_partial_or_wrong_length_rejected);
    RUN(luts_bool_enum_accepted);
    RUN(concurrent_read_and_write);
    RUN(crc_helpers_agree);
    RUN(tokens_crc32_written_and_checked);
    RUN(fingerprint_covers_both_ends);
    RUN(storage_check_finds_missing_and_outside_chunks);
    TEST_EXIT();
}
