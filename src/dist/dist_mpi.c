/* dist_mpi.c — the CPU backend's collectives over MPI (MPICH), and rank discovery when MPI is
 * used: MPICH bootstraps over the launcher's PMI inside MPI_Init (see dist.c).
 *
 * The float/double sum is deterministic by construction instead of MPI_Allreduce, whose
 * summation order depends on the algorithm MPICH picks (message size, rank count, tuning):
 *   1. split the buffer into W chunks; MPI_Alltoallv sends chunk c of every rank to rank c;
 *   2. rank c sums its chunk over ranks in order 0, 1, ..., W-1 (one fixed order);
 *   3. a second MPI_Alltoallv sends every reduced chunk back to everyone (an allgather).
 * Each element is summed once, by one rank, in rank order, so all ranks hold the same bits and
 * a rerun with the same world size gives the same bits. Traffic is 2(W-1)/W of the buffer per
 * rank, the same as a ring allreduce. Step 3 is not MPI_Allgatherv: MPICH 4.0's large-message
 * allgatherv (a pipelined ring) took 2.9 s for 16 MB with 4 ranks on 2 cores, against 18 ms
 * for the alltoallv, when ranks outnumber cores as in the tests. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"

#ifdef CT_HAVE_MPI
#include <mpi.h>

static MPI_Comm comm = MPI_COMM_NULL; /* a private copy of MPI_COMM_WORLD */
static int mpi_up, thread_multiple, finalizing;
static void *scratch; /* receive buffer of the reduce-scatter, grown once, kept */
static size_t scratch_bytes;
static int *counts, *displs; /* 4 x W ints: send counts/displs, recv counts/displs */

/* Elements per round of the reduce-scatter: bounds the scratch buffer and keeps MPI's int
 * counts in range whatever n is. */
#define ROUND_ELEMS ((size_t)1 << 24)

static int mpi_fail(const DistInfo *d, const char *what, int rc) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return ct_fail("rank %d (%s): %s failed: %s", d->rank, d->host, what, s);
}

int dist_mpi_active(void) { return mpi_up; }
int dist_mpi_can_abort_async(void) { return mpi_up && thread_multiple && !finalizing; }

typedef struct {
    int leader; /* lowest world rank on this rank's node */
    int local_rank;
    char host[48];
} NodeRecord;

int dist_mpi_init(DistInfo *d, int expected_world) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return ct_fail("dist_init: MPI is already initialised in this process");
    char expected[32] = "all";
    if (expected_world > 0) snprintf(expected, sizeof expected, "all %d", expected_world);
    dist_watchdog_arm(d->timeout_s, "MPI_Init (MPICH connecting to %s ranks over PMI)", expected);
    /* THREAD_MULTIPLE so that the watchdog thread may call MPI_Abort while the main thread
     * waits inside a collective; only the main thread communicates otherwise. */
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    dist_watchdog_disarm();
    if (rc != MPI_SUCCESS) return ct_fail("MPI_Init_thread failed (MPI error %d)", rc);
    mpi_up = 1;
    thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm)) != MPI_SUCCESS) return mpi_fail(d, "MPI_Comm_dup", rc);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &d->rank);
    MPI_Comm_size(comm, &d->world_size);
    dist_watchdog_identity(d->rank, d->host);
    if (expected_world > 0 && d->world_size != expected_world)
        return ct_fail("rank %d (%s): MPI_COMM_WORLD has %d ranks but the launcher started %d (PMI_SIZE): MPICH "
                       "did not bootstrap over the launcher's PMI (an MPI built for another process manager?)",
                       d->rank, d->host, d->world_size, expected_world);

    /* Ranks sharing memory = ranks on one node; MPICH takes this from PMI_process_mapping. */
    MPI_Comm local;
    if ((rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local)) != MPI_SUCCESS)
        return mpi_fail(d, "MPI_Comm_split_type", rc);
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_size);
    int leader = d->rank;
    rc = MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local);
    MPI_Comm_free(&local);
    if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Allreduce (node leader)", rc);

    /* One gather gives node indices (ordered by each node's lowest rank) and the rank map. */
    NodeRecord me;
    memset(&me, 0, sizeof me);
    me.leader = leader;
    me.local_rank = d->local_rank;
    DistEntry tmp;
    dist_entry_set(&tmp, d->rank, d->local_rank, d->host);
    memcpy(me.host, tmp.host, sizeof me.host);
    NodeRecord *all = ct_malloc((size_t)d->world_size * sizeof *all, "rank records");
    dist_watchdog_arm(d->timeout_s, "MPI_Allgather of host names in dist_init (waiting for all %d ranks)",
                      d->world_size);
    rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm);
    dist_watchdog_disarm();
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(d, "MPI_Allgather (host names)", rc);
    }
    int *node_of_rank = ct_malloc((size_t)d->world_size * sizeof *node_of_rank, "node ids");
    for (int r = 0; r < d->world_size; r++) node_of_rank[r] = all[r].leader;
    int lr, ls;
    rc = dist_layout_from_nodes(node_of_rank, d->world_size, d->rank, &lr, &ls, &d->node_index, &d->num_nodes);
    free(node_of_rank);
    if (rc < 0 || lr != d->local_rank || ls != d->local_size) {
        free(all);
        return ct_fail("rank %d (%s): inconsistent node layout from MPI_Comm_split_type", d->rank, d->host);
    }
    if (d->rank == 0) {
        DistEntry *map = ct_malloc((size_t)d->world_size * sizeof *map, "rank map");
        for (int r = 0; r < d->world_size; r++) {
            all[r].host[sizeof all[r].host - 1] = '\0';
            dist_entry_set(&map[r], r, all[r].local_rank, all[r].host);
        }
        dist_store_rank_map(map, d->world_size);
    }
    free(all);
    counts = ct_malloc(4 * (size_t)d->world_size * sizeof *counts, "alltoallv counts");
    displs = counts + 2 * d->world_size;
    return 0;
}

static void sum_into_f32(void *acc, const void *src, size_t n) {
    float *a = acc;
    const float *s = src;
    for (size_t i = 0; i < n; i++) a[i] += s[i];
}

static void sum_into_f64(void *acc, const void *src, size_t n) {
    double *a = acc;
    const double *s = src;
    for (size_t i = 0; i < n; i++) a[i] += s[i];
}

int dist_mpi_allreduce_sum(const DistInfo *d, void *buf, size_t n, int is_f64) {
    const int W = d->world_size;
    const size_t esize = is_f64 ? sizeof(double) : sizeof(float);
    MPI_Datatype type = is_f64 ? MPI_DOUBLE : MPI_FLOAT;
    void (*sum_into)(void *, const void *, size_t) = is_f64 ? sum_into_f64 : sum_into_f32;
    int *scount = counts, *rcount = counts + W, *sdispl = displs, *rdispl = displs + W;
    /* A round receives W pieces of at most ceil(len / W) elements. */
    size_t need = ((n < ROUND_ELEMS ? n : ROUND_ELEMS) + (size_t)W) * esize;
    if (scratch_bytes < need) {
        free(scratch);
        scratch = ct_malloc(need, "allreduce scratch");
        scratch_bytes = need;
    }
    char *base = buf;
    for (size_t done = 0; done < n;) {
        size_t len = n - done < ROUND_ELEMS ? n - done : ROUND_ELEMS;
        char *seg = base + done * esize;
        /* Chunk c = elements [len*c/W, len*(c+1)/W) of this round. */
        size_t my_lo = len * (size_t)d->rank / (size_t)W, my_hi = len * ((size_t)d->rank + 1) / (size_t)W;
        int mine = (int)(my_hi - my_lo);
        for (int c = 0; c < W; c++) {
            size_t lo = len * (size_t)c / (size_t)W, hi = len * ((size_t)c + 1) / (size_t)W;
            scount[c] = (int)(hi - lo);
            sdispl[c] = (int)lo;
            rcount[c] = mine;
            rdispl[c] = c * mine;
        }
        int rc = MPI_Alltoallv(seg, scount, sdispl, type, scratch, rcount, rdispl, type, comm);
        if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Alltoallv (allreduce)", rc);
        /* Fixed order: rank 0's piece (already in place), + rank 1's, + rank 2's, ... */
        for (int r = 1; r < W; r++)
            sum_into(scratch, (char *)scratch + (size_t)r * (size_t)mine * esize, (size_t)mine);
        /* Send the reduced chunk to everyone: the same piece to each, received at chunk offsets. */
        for (int c = 0; c < W; c++) {
            rcount[c] = scount[c];
            rdispl[c] = sdispl[c];
            scount[c] = mine;
            sdispl[c] = 0;
        }
        rc = MPI_Alltoallv(scratch, scount, sdispl, type, seg, rcount, rdispl, type, comm);
        if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Alltoallv (allgather of the reduced chunks)", rc);
        done += len;
    }
    return 0;
}

int dist_mpi_max_i32(const DistInfo *d, int *v) {
    /* Max is exact and order-independent: MPI_Allreduce is fine here. */
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(d, "MPI_Allreduce (max)", rc);
}

int dist_mpi_bcast(const DistInfo *d, void *buf, size_t bytes, int root) {
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < bytes; off += piece) {
        int len = (int)(bytes - off < piece ? bytes - off : piece);
        int rc = MPI_Bcast((char *)buf + off, len, MPI_BYTE, root, comm);
        if (rc != MPI_SUCCESS) return mpi_fail(d, "MPI_Bcast", rc);
    }
    return 0;
}

int dist_mpi_barrier(const DistInfo *d) {
    int rc = MPI_Barrier(comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(d, "MPI_Barrier", rc);
}

void dist_mpi_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    /* On MPI_COMM_WORLD MPICH tells the process manager (slurmstepd's PMI server or hydra),
     * which kills every rank. On any other communicator (even a dup of the world) MPICH 4.0
     * sends abort messages to its members instead, which hung here when called from the
     * watchdog thread. */
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

void dist_mpi_finalize(const DistInfo *d) {
    (void)d;
    if (!mpi_up) return;
    finalizing = 1;
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    MPI_Finalize();
    mpi_up = 0;
    finalizing = 0;
    free(scratch);
    scratch = NULL;
    scratch_bytes = 0;
    free(counts);
    counts = displs = NULL;
}

#else /* !CT_HAVE_MPI */

int dist_mpi_active(void) { return 0; }
int dist_mpi_can_abort_async(void) { return 0; }

int dist_mpi_init(DistInfo *d, int expected_world) {
    return ct_fail("rank %d (%s): %d ranks need MPI for the CPU backend's collectives, but this ctrain was built "
                   "without MPI (install libmpich-dev or set MPI_HOME, then rebuild)",
                   d->rank, d->host, expected_world);
}

int dist_mpi_allreduce_sum(const DistInfo *d, void *buf, size_t n, int is_f64) {
    (void)buf, (void)n, (void)is_f64;
    return ct_fail("rank %d: allreduce: built without MPI", d->rank);
}

int dist_mpi_max_i32(const DistInfo *d, int *v) {
    (void)v;
    return ct_fail("rank %d: allreduce max: built without MPI", d->rank);
}

int dist_mpi_bcast(const DistInfo *d, void *buf, size_t bytes, int root) {
    (void)buf, (void)bytes, (void)root;
    return ct_fail("rank %d: bcast: built without MPI", d->rank);
}

int dist_mpi_barrier(const DistInfo *d) { return ct_fail("rank %d: barrier: built without MPI", d->rank); }

void dist_mpi_abort(int code) { _exit(code); }

void dist_mpi_finalize(const DistInfo *d) { (void)d; }

#endif
