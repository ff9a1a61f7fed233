/* bench_loader.c — what reading training tokens costs with the checks that stop a run on
 * changed or damaged data (docs/data-format.md, "Identity"): the same tokens read through
 * token_reader_read in micro-batch spans from a file whose chunks carry Fletcher32 (what
 * ctrain's converters write) and from one without, the file cached in memory (the read path's
 * CPU cost, not the disk's), and the cost of the stat() each read makes. Reported per
 * optimizer step of parameter-golf's batch (524,288 tokens in 8 micro-batches of 65,536 + 1).
 * Usage: bench_loader [MTOKENS (default 32)] [DIR (default $TMPDIR or /tmp)]. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data.h"

enum { SPAN = 65537, STEP_READS = 8, PASSES = 3 };

/* The tokens as ctrain writes them, but without the Fletcher32 filter. */
static int write_plain(const char *path, const uint16_t *tokens, int64_t n) {
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims = (hsize_t)n, chunk = CT_DATA_CHUNK_TOKENS;
    hid_t space = H5Screate_simple(1, &dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    hid_t dset = H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = dset >= 0 && H5Dwrite(dset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens) >= 0 ? 0 : -1;
    hid_t aspace = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(dset, "vocab_size", H5T_STD_I64LE, aspace, H5P_DEFAULT, H5P_DEFAULT);
    int64_t vocab = 1024;
    if (attr < 0 || H5Awrite(attr, H5T_NATIVE_INT64, &vocab) < 0) rc = -1;
    H5Aclose(attr), H5Sclose(aspace), H5Dclose(dset), H5Pclose(dcpl), H5Sclose(space), H5Fclose(file);
    return rc;
}

/* Best of PASSES: ns per token reading the whole file in SPAN-token reads. */
static double read_ns_per_token(const char *path, uint32_t *buf) {
    TokenSet set;
    if (data_open_set(path, &set) != 0) {
        ct_print_error();
        exit(1);
    }
    double best = 1e30;
    for (int pass = 0; pass < PASSES; pass++) {
        TokenReader *r;
        token_reader_open(&r, &set);
        double t = ct_now_ms();
        int64_t n = set.files[0].num_tokens;
        for (int64_t pos = 0; pos + SPAN <= n; pos += SPAN)
            if (token_reader_read(r, 0, pos, SPAN, buf) != 0) {
                ct_print_error();
                exit(1);
            }
        t = ct_now_ms() - t;
        token_reader_close(r);
        double ns = 1e6 * t / (double)(n / SPAN * SPAN);
        if (ns < best) best = ns;
    }
    data_free_set(&set);
    return best;
}

int main(int argc, char **argv) {
    const int64_t n = (int64_t)(argc > 1 ? atof(argv[1]) : 32.0) * 1000000;
    const char *base = argc > 2 ? argv[2] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char checked[1100], plain[1100];
    snprintf(checked, sizeof checked, "%s/ctrain-bench-loader-%d-fletcher.h5", base, (int)getpid());
    snprintf(plain, sizeof plain, "%s/ctrain-bench-loader-%d-plain.h5", base, (int)getpid());
    uint16_t *tokens = ct_malloc((size_t)n * sizeof *tokens, "tokens");
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tokens[i] = (uint16_t)(x % 1024);
    }
    TokenWriter *w;
    if (token_writer_create(&w, checked, 2, 1024, -1, "bench") != 0 || token_writer_append(w, tokens, n) != 0 ||
        token_writer_close(w) != 0 || write_plain(plain, tokens, n) != 0) {
        ct_print_error();
        return 1;
    }
    free(tokens);
    uint32_t *buf = ct_malloc((size_t)SPAN * sizeof *buf, "read buffer");
    read_ns_per_token(plain, buf); /* both files into the page cache */
    read_ns_per_token(checked, buf);
    const double ns_plain = read_ns_per_token(plain, buf), ns_checked = read_ns_per_token(checked, buf);
    struct stat st;
    double t = ct_now_ms();
    for (int i = 0; i < 100000; i++) stat(checked, &st);
    const double stat_us = (ct_now_ms() - t) * 1e3 / 100000;
    const double step_tokens = (double)STEP_READS * SPAN;
    printf("read %lld tokens in spans of %d: %.3f ns/token without Fletcher32, %.3f ns/token with it\n", (long long)n,
           SPAN, ns_plain, ns_checked);
    printf("stat() of the file: %.2f us (one per read)\n", stat_us);
    printf("per optimizer step of %.0f tokens (%d reads): reading %.3f ms without the checks' costs, + %.3f ms for "
           "Fletcher32, + %.4f ms for the stats\n",
           step_tokens, STEP_READS, step_tokens * ns_plain / 1e6, step_tokens * (ns_checked - ns_plain) / 1e6,
           STEP_READS * stat_us / 1e3);
    printf("BENCH loader_read_ns_per_token_plain %.3f\n", ns_plain);
    printf("BENCH loader_read_ns_per_token_fletcher32 %.3f\n", ns_checked);
    printf("BENCH loader_checks_ms_per_golf_step %.4f\n",
           step_tokens * (ns_checked - ns_plain) / 1e6 + STEP_READS * stat_us / 1e3);
    unlink(checked);
    unlink(plain);
    free(buf);
    return 0;
}
