/* launch_check_cmd.c — `ctrain launch-check`: a one-second check of a multi-rank launch, meant as the
 * first step of an sbatch script. Every rank starts and finds its rank/node/local rank (rank 0
 * prints the rank map), rank 0's random blob reaches every rank through the KVS broadcast, and
 * the collectives return the exact expected values, bit for bit on every rank. Any failure
 * names the rank; a rank that dies or hangs ends the job after --timeout seconds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "dist.h"
#include "dist_nccl.h"
#include "train.h"

#ifdef CT_HAVE_MPI
#define HAVE_MPI 1
#else
#define HAVE_MPI 0
#endif

static void usage(FILE *out) {
    fprintf(out,
            "usage: ctrain launch-check [--timeout S] [--no-mpi | --nccl]\n"
            "\n"
            "Checks a multi-rank launch: rank discovery (rank 0 prints the rank map), the KVS\n"
            "broadcast of a random blob from rank 0, and exact, bitwise-identical sums across ranks.\n"
            "Run it first in an sbatch script:  srun --mpi=pmi2 ctrain launch-check\n"
            "Also works under MPICH's mpiexec, and plainly (one rank).\n"
            "\n"
            "options:\n"
            "  --timeout S     seconds to wait for the other ranks at each step before ending the\n"
            "                  whole job with a message naming the rank and the step (default 60)\n"
            "  --no-mpi        check Slurm's libpmi2 and its KVS alone (no MPI, no GPU)\n"
            "  --nccl          check the path GPU jobs use: libpmi2, each rank's own GPU (chosen and\n"
            "                  checked as training does), the NCCL communicator made from an id sent\n"
            "                  through the KVS, exact sums over NCCL on host and device buffers, and\n"
            "                  device broadcasts from every rank (the Muon updates' path)\n"
            "  --hang-rank R   (testing) rank R stops after start-up and waits forever\n"
            "  --gpu-id ID     (testing, with --no-mpi) run the GPU placement check with ID as every\n"
            "                  rank's GPU, no CUDA needed: two ranks with one ID must fail\n"
            "\n"
            "prints \"launch-check: N ranks on M nodes OK\" on rank 0 and exits 0; exits 1 otherwise.\n");
}

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void fill_random(unsigned char *p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    /* No entropy source: still different per run, which is all the check needs. */
    uint64_t x = (uint64_t)time(NULL) * 6364136223846793005ULL + (uint64_t)getpid();
    for (; got < n; got++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        p[got] = (unsigned char)(x >> 56);
    }
}

/* Exact sums: small multiples of 1/4 are exact in float, so the result is known. Inexact sums:
 * the expected bits are the rank-order sum 0..W-1, which is what dist_allreduce promises. */
static float exact_f32(int rank, size_t i) { return (float)((rank + 1) * (int)(i % 97 + 1)) * 0.25f; }
static float inexact_f32(int rank, size_t i) { return 1.0f / (float)((size_t)rank * 131 + i + 3); }
static double inexact_f64(int rank, size_t i) { return 1.0 / ((double)rank * 7.25 + (double)i + 1.5); }

/* Returns the first failing index, or -1. */
static long check_sums(const DistInfo *d, size_t n) {
    float *a = ct_malloc(n * sizeof *a, "launch-check");
    float *b = ct_malloc(n * sizeof *b, "launch-check");
    double *c = ct_malloc(n * sizeof *c, "launch-check");
    for (size_t i = 0; i < n; i++) {
        a[i] = exact_f32(d->rank, i);
        b[i] = inexact_f32(d->rank, i);
        c[i] = inexact_f64(d->rank, i);
    }
    if (dist_allreduce_sum_f32(d, a, n) < 0 || dist_allreduce_sum_f32(d, b, n) < 0 ||
        dist_allreduce_sum_f64(d, c, n) < 0)
        dist_abort(d, CT_EXIT_FAILURE, ct_error());
    long bad = -1;
    const int W = d->world_size;
    for (size_t i = 0; i < n && bad < 0; i++) {
        float ea = 0.25f * (float)((int)(i % 97 + 1) * W * (W + 1) / 2);
        float eb = inexact_f32(0, i);
        double ec = inexact_f64(0, i);
        for (int r = 1; r < W; r++) {
            eb += inexact_f32(r, i);
            ec += inexact_f64(r, i);
        }
        if (memcmp(&a[i], &ea, sizeof ea) || memcmp(&b[i], &eb, sizeof eb) || memcmp(&c[i], &ec, sizeof ec)) {
            fprintf(stderr, "launch-check: rank %d (%s): allreduce of %zu elements wrong at %zu: got %.9g %.9g %.17g, "
                            "expected %.9g %.9g %.17g\n",
                    d->rank, d->host, n, i, a[i], b[i], c[i], ea, eb, ec);
            bad = (long)i;
        }
    }
    free(a);
    free(b);
    free(c);
    return bad;
}

int launch_check_main(int argc, char **argv) {
    double timeout = 60;
    int no_mpi = 0, nccl = 0, hang_rank = -1;
    const char *gpu_id = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return CT_EXIT_OK;
        } else if (!strcmp(a, "--timeout") && i + 1 < argc) {
            if (ct_parse_double(argv[++i], &timeout) < 0 || timeout <= 0) {
                fprintf(stderr, "ctrain: error: launch-check: --timeout '%s': expected seconds > 0\n", argv[i]);
                return CT_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--hang-rank") && i + 1 < argc) {
            int64_t v;
            if (ct_parse_int64(argv[++i], &v) < 0 || v < 0 || v > 1 << 30) {
                fprintf(stderr, "ctrain: error: launch-check: --hang-rank '%s': expected a rank >= 0\n", argv[i]);
                return CT_EXIT_USAGE;
            }
            hang_rank = (int)v;
        } else if (!strcmp(a, "--no-mpi")) {
            no_mpi = 1;
        } else if (!strcmp(a, "--gpu-id") && i + 1 < argc) {
            gpu_id = argv[++i];
        } else if (!strcmp(a, "--nccl")) {
            nccl = no_mpi = 1;
        } else {
            fprintf(stderr, "ctrain: error: launch-check: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return CT_EXIT_USAGE;
        }
    }

    DistInfo d;
    if (dist_init(&d, HAVE_MPI && !no_mpi, timeout) < 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    d.op_timeout_s = timeout;
    if (gpu_id && dist_check_gpu_placement(&d, gpu_id, "given with --gpu-id") != 0)
        dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    char nccl_note[600] = "";
    if (nccl) {
        Config cfg;
        config_init(&cfg);
        int rc = config_set(&cfg, "device", "cuda", CT_SOURCE_COMMAND_LINE, "launch-check");
        if (rc == 0) rc = train_nccl_connect(&cfg, &d, nccl_note, sizeof nccl_note);
        config_free(&cfg);
        if (rc != 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    }

    if (d.rank == 0) {
        char map[8192];
        dist_rank_map(&d, map, sizeof map);
        printf("%s\n", map);
        printf("launch-check: launcher %s%s, %d ranks on %d nodes, timeout %g s\n", d.launcher,
               d.mpi ? " + MPI" : d.nccl ? " + NCCL" : "", d.world_size, d.num_nodes, timeout);
        if (nccl_note[0]) printf("launch-check: %s\n", nccl_note);
        fflush(stdout);
    }
    if (d.rank == hang_rank) {
        fprintf(stderr, "launch-check: rank %d (%s) hangs now as asked by --hang-rank (pid %d)\n", d.rank, d.host,
                (int)getpid());
        fflush(stderr);
        for (;;) pause();
    }

    /* 1. KVS broadcast: every rank must end up with rank 0's bytes. */
    unsigned char blob[128];
    memset(blob, 0, sizeof blob);
    if (d.rank == 0) fill_random(blob, sizeof blob);
    if (dist_kvs_broadcast(&d, "ct.launch-check.blob", blob, sizeof blob, 0, timeout) < 0)
        dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    uint64_t mine = fnv1a(blob, sizeof blob), root = mine;
    if (dist_bcast(&d, &root, sizeof root, 0) < 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    int bad = 0;
    if (mine != root) {
        fprintf(stderr, "launch-check: rank %d (%s): the KVS broadcast delivered other bytes than rank 0 sent\n",
                d.rank, d.host);
        bad = 1;
    }

    /* 2. Sums (MPI, or NCCL on a GPU job), uneven and tiny chunks; over NCCL also the device
     * sum the gradients use, in a size that takes several of NCCL's chunks */
    if (d.mpi || d.nccl || d.world_size == 1) {
        if (check_sums(&d, 1037) >= 0 || check_sums(&d, 3) >= 0) bad = 1;
    }
    if (d.nccl) {
        long at = dist_nccl_check_device_sum(&d, (size_t)3 << 20);
        if (at == -2) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
        if (at >= 0) {
            fprintf(stderr, "launch-check: rank %d (%s): NCCL device sum wrong at element %ld\n", d.rank, d.host, at);
            bad = 1;
        }
        /* the Muon updates' path: parts broadcast from their ranks, bit for bit */
        at = dist_nccl_check_device_broadcast(&d, (size_t)1 << 18);
        if (at == -2) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
        if (at >= 0) {
            fprintf(stderr, "launch-check: rank %d (%s): NCCL broadcast wrong at element %ld\n", d.rank, d.host, at);
            bad = 1;
        }
    } else if (!d.mpi && d.world_size > 1 && d.rank == 0) {
        printf("launch-check: sums skipped (neither MPI nor NCCL in this process: add --nccl for the GPU path)\n");
    }
    /* a batch script that forgot srun: the job's other tasks never started, so this is no
     * launch of the job (ctrain train would train alone, with the warning dist_init printed) */
    if (d.tasks_not_started > 1) {
        fprintf(stderr, "launch-check: SLURM_NTASKS=%d but this process was not started by srun: 1 of %d tasks "
                        "runs (start it with srun --mpi=pmi2 ...)\n", d.tasks_not_started, d.tasks_not_started);
        bad = 1;
    }
    int top = d.rank;
    if (dist_allreduce_max_i32(&d, &top) < 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    if (top != d.world_size - 1) {
        fprintf(stderr, "launch-check: rank %d (%s): max of the ranks is %d, expected %d\n", d.rank, d.host, top,
                d.world_size - 1);
        bad = 1;
    }
    if (dist_barrier(&d) < 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());

    /* Everyone learns the highest failing rank, so every rank exits with the same status. */
    int failing = bad ? d.rank + 1 : 0;
    if (dist_allreduce_max_i32(&d, &failing) < 0) dist_abort(&d, CT_EXIT_FAILURE, ct_error());
    if (d.rank == 0) {
        if (failing)
            fprintf(stderr, "ctrain: error: launch-check failed on rank %d (and maybe others; messages above)\n",
                    failing - 1);
        else
            printf("launch-check: %d ranks on %d nodes OK\n", d.world_size, d.num_nodes);
        fflush(stdout);
    }
    dist_finalize(&d);
    return failing ? CT_EXIT_FAILURE : CT_EXIT_OK;
}
