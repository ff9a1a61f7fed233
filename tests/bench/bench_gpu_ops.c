/* bench_gpu_ops.c — times the CUDA ops of the op table (tests/unit/gpu_op_table.h, the same rows
 * test_gpu_ops checks) and sets each against its floor: the bytes it must move at the memory's
 * rate and the FLOPs it must do at the matrix units' rate, whichever is longer.
 * Usage: bench_gpu_ops [--repeats N] [--seqs B] [--bandwidth GB/s] [--rate TFLOP/s] [case ...]
 *   repeats   timed runs per case, after one warm-up; the median is reported (default 20)
 *   seqs      sequences of 1024 tokens in a micro-batch for the rows that scale with it (8)
 *   bandwidth the memory rate of the floor, GB/s (default 3000: an H100 80GB HBM3's ~3.35 TB/s
 *             peak as reached by copies, docs/performance.md's "3 TB/s")
 *   rate      the matrix rate of the floor, TFLOP/s (default 790: cuBLAS bf16 on random
 *             operands measured on that H100, docs/performance.md)
 *   case      cases to time by name (any row, e.g. rmsnorm_fwd_ragged); default: the CASE_BENCH
 *             rows, the baseline model's shapes (dim 512, 8/4 heads of 64, MLP 1024, vocab 1024)
 * Bytes: inputs read once, outputs written once, accumulated buffers read and written (scratch
 * not counted). FLOPs: 2 per multiply-add of the products a perfect kernel needs (attention:
 * forward 4*hd*P, backward 8*hd*P with P = B*H*T(T+1)/2 visible pairs). Times are the median of
 * the repeats measured with CUDA events. Lines "BENCH name value" are machine-readable
 * (gpu_<case>_ms, _gbps, _tflops, _of_floor). Without a device, or built without CUDA, it prints
 * SKIP and exits 0. */
#include "unit/gpu_op_table.h"

#ifndef CT_HAVE_CUDA
int main(void) {
    printf("SKIP bench_gpu_ops: this build has no CUDA (nvcc was not found)\n");
    return 0;
}
#else

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void die_case(const char *name, const char *what) {
    fprintf(stderr, "bench_gpu_ops: %s: %s: %s\n", name, what, ct_error());
    exit(1);
}

/* Median milliseconds of the case's CUDA op over `repeats` runs after one warm-up. */
static double time_case(OpRun *r, const char *name, int repeats) {
    static cudaEvent_t ev0, ev1;
    if (!ev0) cudaEventCreate(&ev0), cudaEventCreate(&ev1);
    op_reset(r);
    if (r->c->op->gpu(r) != 0 || !dev_sync_ok()) die_case(name, "warm-up");
    float *ms = malloc((size_t)repeats * sizeof(float));
    for (int k = 0; k < repeats; k++) {
        cudaEventRecord(ev0, 0);
        if (r->c->op->gpu(r) != 0) die_case(name, "run");
        cudaEventRecord(ev1, 0);
        cudaEventSynchronize(ev1);
        cudaEventElapsedTime(&ms[k], ev0, ev1);
    }
    if (!dev_sync_ok()) die_case(name, "run");
    qsort(ms, (size_t)repeats, sizeof(float), cmp_float);
    const double med = ms[repeats / 2];
    free(ms);
    return med;
}

static int selected(const OpCase *c, char **names, int n_names) {
    if (n_names == 0) return (c->flags & CASE_BENCH) != 0;
    char name[128];
    op_case_name(c, name, sizeof name);
    for (int i = 0; i < n_names; i++)
        if (strcmp(names[i], name) == 0) return 1;
    return 0;
}

static double option(int argc, char **argv, int *i, const char *flag) {
    char *end = NULL;
    const double v = *i + 1 < argc ? strtod(argv[*i + 1], &end) : 0;
    if (!end || *end || !(v > 0)) {
        fprintf(stderr, "bench_gpu_ops: %s needs a positive number\n", flag);
        exit(2);
    }
    ++*i;
    return v;
}

int main(int argc, char **argv) {
    int repeats = 20, seqs = 8;
    double bandwidth = 3000, rate = 790;
    char **names = malloc((size_t)argc * sizeof(char *));
    int n_names = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0) repeats = (int)option(argc, argv, &i, "--repeats");
        else if (strcmp(argv[i], "--seqs") == 0) seqs = (int)option(argc, argv, &i, "--seqs");
        else if (strcmp(argv[i], "--bandwidth") == 0) bandwidth = option(argc, argv, &i, "--bandwidth");
        else if (strcmp(argv[i], "--rate") == 0) rate = option(argc, argv, &i, "--rate");
        else if (argv[i][0] == '-') {
            fprintf(stderr,
                    "usage: bench_gpu_ops [--repeats N] [--seqs B] [--bandwidth GB/s] [--rate TFLOP/s] [case ...]\n");
            return 2;
        } else names[n_names++] = argv[i];
    }
    for (int i = 0; i < n_names; i++) {
        int known = 0;
        char name[128];
        for (size_t k = 0; k < gpu_op_count && !known; k++) {
            op_case_name(&gpu_op_cases[k], name, sizeof name);
            known = strcmp(name, names[i]) == 0;
        }
        if (!known) {
            fprintf(stderr, "bench_gpu_ops: no case '%s' in tests/unit/gpu_op_table.h\n", names[i]);
            return 2;
        }
    }
    if (!gpu_available()) {
        printf("SKIP bench_gpu_ops: no CUDA device\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("== CUDA op benchmarks on %s (sm_%d%d), %d sequences of %d tokens where a shape scales with them, "
           "median of %d; floor: bytes at %.0f GB/s, FLOPs at %.0f TFLOP/s\n",
           prop.name, prop.major, prop.minor, seqs, T_SEQ, repeats, bandwidth, rate);
    printf("  %-40s %9s %9s %9s %9s %9s\n", "case", "ms", "GB/s", "TFLOP/s", "floor ms", "of floor");
    for (size_t k = 0; k < gpu_op_count; k++) {
        const OpCase *c = &gpu_op_cases[k];
        if (!selected(c, names, n_names) || !c->op->gpu) continue;
        char name[128];
        op_case_name(c, name, sizeof name);
        int d[OP_MAX_DIMS];
        memcpy(d, c->d, sizeof d);
        if (c->per_seq) d[0] = c->per_seq * seqs;
        OpRun *r = calloc(1, sizeof *r);
        harness_case_failed = 0;
        op_setup(r, c, d, 1);
        if (harness_case_failed) {
            fprintf(stderr, "bench_gpu_ops: %s: setting up: %s\n", name, harness_message);
            return 1;
        }
        const double ms = time_case(r, name, repeats);
        const double bytes = op_bytes(r), flops = c->op->flops ? c->op->flops(d) : 0;
        const double floor_ms = fmax(bytes / (bandwidth * 1e9), flops / (rate * 1e12)) * 1e3;
        const double gbps = bytes / ms * 1e-6, tflops = flops / ms * 1e-9;
        printf("  %-40s %9.3f %9.1f ", name, ms, gbps);
        if (flops > 0) printf("%9.2f", tflops);
        else printf("%9s", "-");
        printf(" %9.3f %8.0f%%\n", floor_ms, 100 * floor_ms / ms);
        printf("BENCH gpu_%s_ms %.4f\n", name, ms);
        printf("BENCH gpu_%s_gbps %.1f\n", name, gbps);
        if (flops > 0) printf("BENCH gpu_%s_tflops %.3f\n", name, tflops);
        printf("BENCH gpu_%s_of_floor %.3f\n", name, floor_ms / ms);
        fflush(stdout);
        op_free(r);
        free(r);
    }
    free(names);
    return 0;
}

#endif
