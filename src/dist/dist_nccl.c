/* dist_nccl.c — NCCL for GPU jobs (dist_nccl.h): the communicator, the polled waits that turn a
 * dead rank or a hung collective into an error naming rank, host and operation, the host-value
 * collectives of dist.h over NCCL (values gathered, then reduced in rank order on the host, so
 * they equal the MPI path's bits), the device sum for the Muon updates, and the gradient
 * reducer. The communicator is non-blocking (ncclConfig_t.blocking = 0): only that way can
 * creation be given a timeout and aborted, and every NCCL call then returns ncclInProgress until
 * NCCL's own thread has queued it, which `settle` waits for.
 *
 * Contents, in order (with NCCL; without it, the same entry points failing or doing nothing):
 *   pause_briefly .. not_up                 errors, timeouts and the polled waits
 *   nccl_log_to_stderr, pin_determinism     NCCL's environment before the communicator exists
 *   dist_nccl_init, dist_nccl_stack         the communicator (with a timeout) and its version line
 *   run_collective, host_allgather, dist_nccl_sum/_max_i32/_bcast/_barrier   host-value collectives
 *   dist_nccl_allreduce_device, dist_nccl_check_device_broadcast/_sum        device sums and checks
 *   DistGradReducer, dist_grad_reducer_*    the gradient reducer (buckets started as stages end)
 *   dist_nccl_finalize                      teardown */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"
#include "dist_nccl.h"

#ifdef CT_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

/* Staging for the host-value collectives: plenty for loss sums, flags and verdicts; larger
 * buffers go through it in chunks. */
enum { STAGE_BYTES = 1 << 20 };

/* A wait that outlives the job's timeout by this much means NCCL itself stopped answering (an
 * abort that hangs): the watchdog then ends the process. */
#define BACKSTOP_S 60.0

static struct {
    ncclComm_t comm;
    int up;
    int rank, world;
    char host[256];
    double timeout_s;      /* collective_timeout (0 = wait forever) */
    cudaStream_t stream;   /* host-value collectives */
    cudaEvent_t done;
    unsigned char *d_stage, *h_stage; /* STAGE_BYTES each (h_stage pinned) */
} g;

int dist_nccl_compiled(void) { return 1; }

static void pause_briefly(double waited_ms) {
    /* short sleeps first (a collective usually ends within microseconds of the GPU work),
     * longer ones once it is clearly waiting for another rank */
    struct timespec ts = {0, waited_ms < 10 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

static const char *last_error(void) {
    const char *e = g.comm ? ncclGetLastError(g.comm) : NULL;
    return e && *e ? e : "no detail from NCCL; run with NCCL_DEBUG=WARN for its log";
}

/* After a failure: abort the communicator (every later NCCL call fails fast) and name it. */
static int fail_nccl(const char *what, ncclResult_t r) {
    ct_fail("rank %d (%s): NCCL %s failed: %s (%s)", g.rank, g.host, what, ncclGetErrorString(r), last_error());
    if (g.comm) ncclCommAbort(g.comm);
    g.comm = NULL;
    g.up = 0;
    return -1;
}

/* setting: the key or bound that gave the timeout, for the message */
static int fail_timeout(const char *what, double waited_s, const char *setting) {
    ct_fail("rank %d (%s): timed out after %.0f s in %s (NCCL): another rank died, hangs or cannot reach this "
            "one (%s)",
            g.rank, g.host, waited_s, what, setting);
    if (g.comm) ncclCommAbort(g.comm);
    g.comm = NULL;
    g.up = 0;
    return -1;
}

static int check_async(const char *what) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(g.comm, &state);
    if (r != ncclSuccess) return fail_nccl(what, r);
    if (state != ncclSuccess && state != ncclInProgress) return fail_nccl(what, state);
    return state == ncclInProgress ? 1 : 0;
}

/* The one waiting loop of this file: poll(ctx, what) returns 0 when done, 1 while not yet, -1
 * after failing with a message; past timeout_s (> 0) the communicator is aborted and the wait
 * fails naming `setting`. The watchdog backs the wait (and an abort that hangs). */
static int poll_until(int (*poll)(void *ctx, const char *what), void *ctx, double timeout_s, const char *what,
                      const char *setting) {
    const double t0 = ct_now_ms();
    dist_watchdog_arm(timeout_s > 0 ? timeout_s + BACKSTOP_S : 0, "%s (NCCL)", what);
    int rc;
    while ((rc = poll(ctx, what)) > 0) {
        double waited = ct_now_ms() - t0;
        if (timeout_s > 0 && waited > 1000.0 * timeout_s) {
            rc = fail_timeout(what, waited / 1000.0, setting);
            break;
        }
        pause_briefly(waited);
    }
    dist_watchdog_disarm();
    return rc;
}

static int poll_queued(void *ctx, const char *what) {
    (void)ctx;
    return check_async(what);
}

/* Wait until NCCL has finished queuing a call that returned r (ncclInProgress on a
 * non-blocking communicator). */
static int settle(ncclResult_t r, double timeout_s, const char *what, const char *setting) {
    if (r == ncclSuccess) return 0;
    if (r != ncclInProgress) return fail_nccl(what, r);
    return poll_until(poll_queued, NULL, timeout_s, what, setting);
}

static char g_collective_setting[64]; /* "collective_timeout = 600" */

/* The GPU has passed the event, or not yet; NCCL's error state is watched meanwhile. */
static int poll_event(void *ctx, const char *what) {
    cudaError_t e = cudaEventQuery(*(cudaEvent_t *)ctx);
    if (e == cudaSuccess) return 0;
    if (e != cudaErrorNotReady)
        return ct_fail("rank %d (%s): %s: CUDA error while waiting: %s", g.rank, g.host, what, cudaGetErrorString(e));
    return check_async(what) < 0 ? -1 : 1;
}

/* Wait until the GPU has passed event ev, within collective_timeout. */
static int wait_event(cudaEvent_t ev, const char *what) {
    return poll_until(poll_event, &ev, g.timeout_s, what, g_collective_setting);
}

static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    return ct_fail("rank %d (%s): %s: %s", g.rank, g.host, what, cudaGetErrorString(e));
}

static int not_up(const char *what) {
    return ct_fail("rank %d (%s): %s: no NCCL communicator (it failed or was closed)", g.rank, g.host, what);
}

/* NCCL writes its log (NCCL_DEBUG=WARN: the reason of a failure) to stdout, which ranks other
 * than 0 send to /dev/null: send it to stderr unless the user chose a file. Before the first
 * NCCL call, like the settings below. */
static void nccl_log_to_stderr(void) {
    if (!getenv("NCCL_DEBUG_FILE")) setenv("NCCL_DEBUG_FILE", "/dev/stderr", 0);
}

/* NCCL reads most of its settings once per process: set before the first NCCL call. A value
 * the user exported wins (they chose it; docs/slurm.md says what it costs). */
static void pin_determinism(char *note, size_t cap) {
    static const char *const vars[] = {"NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE"};
    size_t n = 0;
    note[0] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v) setenv(vars[i], "0", 0);
        else if (strcmp(v, "0") != 0 && n < cap)
            n += (size_t)snprintf(note + n, cap - n, "%s%s=%s", n ? ", " : "", vars[i], v);
    }
}

int dist_nccl_init(DistInfo *d, int device, double timeout_s, char *detail, size_t cap) {
    g.rank = d->rank;
    g.world = d->world_size;
    snprintf(g.host, sizeof g.host, "%s", d->host);
    g.timeout_s = d->op_timeout_s;
    snprintf(g_collective_setting, sizeof g_collective_setting, "collective_timeout = %.0f", g.timeout_s);
    char user_set[200];
    nccl_log_to_stderr();
    pin_determinism(user_set, sizeof user_set);
    int version = 0;
    ncclGetVersion(&version);
    /* NCCL before 2.30 ignores NCCL_MULTI_RANK_GPU_ENABLE and fails with "Duplicate GPU" */
    if (d->gpu_shared && version < 23000)
        return ct_fail("rank %d (%s): ranks share this GPU (%s=1), which needs NCCL >= 2.30, but this process "
                       "loaded NCCL %d.%d.%d: put a newer libnccl.so.2 first on LD_LIBRARY_PATH "
                       "(scripts/build-nccl.sh builds one)",
                       d->rank, d->host, CT_MULTI_RANK_GPU_VAR, version / 10000, version / 100 % 100, version % 100);
    if (cuda_ok(cudaSetDevice(device), "cudaSetDevice for NCCL") != 0) return -1;

    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r;
    if (d->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) return fail_nccl("ncclGetUniqueId", r);
    /* through the PMI2 KVS directly (dist.c dispatches to this file, so it does not call back) */
    if (d->world_size > 1) {
        if (!dist_pmi2_active())
            return ct_fail("rank %d (%s): %d GPU ranks need the PMI2 key-value store to exchange the NCCL id: start "
                           "them with srun --mpi=pmi2",
                           d->rank, d->host, d->world_size);
        if (dist_pmi2_kvs_broadcast(d, "ct!nccl.id", &id, sizeof id, 0, timeout_s) != 0)
            return ct_fail_prefix("rank %d (%s): sending the NCCL id", d->rank, d->host);
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    char what[96], setting[64];
    snprintf(what, sizeof what, "creating the communicator of %d ranks (ncclCommInitRankConfig)", d->world_size);
    snprintf(setting, sizeof setting, "the start-up timeout, %.0f s", timeout_s);
    dist_watchdog_arm(timeout_s > 0 ? timeout_s + BACKSTOP_S : 0, "%s", what); /* the call itself may block */
    r = ncclCommInitRankConfig(&g.comm, d->world_size, id, d->rank, &config);
    dist_watchdog_disarm();
    if (settle(r, timeout_s, what, setting) != 0) return -1;
    g.up = 1;

    if (cuda_ok(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking), "NCCL stream") != 0 ||
        cuda_ok(cudaEventCreateWithFlags(&g.done, cudaEventDisableTiming), "NCCL event") != 0 ||
        cuda_ok(cudaMalloc((void **)&g.d_stage, STAGE_BYTES), "NCCL staging buffer") != 0 ||
        cuda_ok(cudaMallocHost((void **)&g.h_stage, STAGE_BYTES), "NCCL staging buffer (host)") != 0)
        return -1;
    d->nccl = 1;
    int n = snprintf(detail, cap, "NCCL %d.%d.%d, %d rank%s, ", version / 10000, version / 100 % 100, version % 100,
                     d->world_size, d->world_size == 1 ? "" : "s");
    if (n >= 0 && (size_t)n < cap)
        snprintf(detail + n, cap - (size_t)n, user_set[0] ? "%s from the environment: not bitwise reproducible"
                                                         : "NVLS and CollNet off (bitwise reproducible)%s",
                 user_set);
    return 0;
}

void dist_nccl_stack(char *buf, size_t cap) {
    int version = 0;
    ncclGetVersion(&version);
    const char *algo = getenv("NCCL_ALGO"), *proto = getenv("NCCL_PROTO");
    snprintf(buf, cap, "nccl=%d.%d.%d; nccl_algo=%.60s; nccl_proto=%.60s", version / 10000, version / 100 % 100,
             version % 100, algo && *algo ? algo : "(tuner)", proto && *proto ? proto : "(tuner)");
}

/* Settle a collective just queued on `stream` (r: what the call returned), then wait until it,
 * and everything queued before it there, is done. */
static int run_collective(ncclResult_t r, cudaStream_t stream, const char *what) {
    if (settle(r, g.timeout_s, what, g_collective_setting) != 0) return -1;
    if (cuda_ok(cudaEventRecord(g.done, stream), what) != 0) return -1;
    return wait_event(g.done, what);
}

/* The same on the host-value stream. */
static int run_host_collective(ncclResult_t r, const char *what) { return run_collective(r, g.stream, what); }

/* Every rank's `bytes` bytes into all[rank * bytes ...], through the staging buffers. */
static int host_allgather(const void *mine, size_t bytes, unsigned char *all, const char *what) {
    if (!g.up) return not_up(what);
    const size_t chunk = STAGE_BYTES / 2 / (size_t)g.world;
    if (chunk == 0) return ct_fail("rank %d (%s): %s: %d ranks are more than the staging buffer serves", g.rank, g.host,
                                   what, g.world);
    unsigned char *d_send = g.d_stage, *d_recv = g.d_stage + STAGE_BYTES / 2;
    unsigned char *h_send = g.h_stage, *h_recv = g.h_stage + STAGE_BYTES / 2;
    for (size_t off = 0; off < bytes; off += chunk) {
        const size_t len = bytes - off < chunk ? bytes - off : chunk;
        memcpy(h_send, (const unsigned char *)mine + off, len);
        if (cuda_ok(cudaMemcpyAsync(d_send, h_send, len, cudaMemcpyHostToDevice, g.stream), what) != 0) return -1;
        if (run_host_collective(ncclAllGather(d_send, d_recv, len, ncclUint8, g.comm, g.stream), what) != 0) return -1;
        if (cuda_ok(cudaMemcpyAsync(h_recv, d_recv, len * (size_t)g.world, cudaMemcpyDeviceToHost, g.stream), what) != 0 ||
            cuda_ok(cudaStreamSynchronize(g.stream), what) != 0)
            return -1;
        for (int r = 0; r < g.world; r++) memcpy(all + (size_t)r * bytes + off, h_recv + (size_t)r * len, len);
    }
    return 0;
}

int dist_nccl_sum(const DistInfo *d, void *buf, size_t n, int is_f64) {
    const size_t elem = is_f64 ? sizeof(double) : sizeof(float);
    unsigned char *all = ct_malloc(n * elem * (size_t)d->world_size, "NCCL sum");
    char what[96];
    snprintf(what, sizeof what, "dist_allreduce_sum_%s (%zu values)", is_f64 ? "f64" : "f32", n);
    int rc = host_allgather(buf, n * elem, all, what);
    if (rc == 0) {
        /* element i summed in rank order 0..W-1, as the MPI path does */
        for (size_t i = 0; i < n; i++) {
            if (is_f64) {
                double s = ((const double *)all)[i];
                for (int r = 1; r < d->world_size; r++) s += ((const double *)(all + (size_t)r * n * elem))[i];
                ((double *)buf)[i] = s;
            } else {
                float s = ((const float *)all)[i];
                for (int r = 1; r < d->world_size; r++) s += ((const float *)(all + (size_t)r * n * elem))[i];
                ((float *)buf)[i] = s;
            }
        }
    }
    free(all);
    return rc;
}

int dist_nccl_max_i32(const DistInfo *d, int *v) {
    int *all = ct_malloc(sizeof(int) * (size_t)d->world_size, "NCCL max");
    int rc = host_allgather(v, sizeof *v, (unsigned char *)all, "dist_allreduce_max_i32");
    if (rc == 0)
        for (int r = 0; r < d->world_size; r++)
            if (all[r] > *v) *v = all[r];
    free(all);
    return rc;
}

int dist_nccl_bcast(const DistInfo *d, void *buf, size_t bytes, int root) {
    char what[96];
    snprintf(what, sizeof what, "dist_bcast (%zu bytes from rank %d)", bytes, root);
    if (!g.up) return not_up(what);
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        const size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        if (d->rank == root) {
            memcpy(g.h_stage, (unsigned char *)buf + off, len);
            if (cuda_ok(cudaMemcpyAsync(g.d_stage, g.h_stage, len, cudaMemcpyHostToDevice, g.stream), what) != 0)
                return -1;
        }
        if (run_host_collective(ncclBroadcast(g.d_stage, g.d_stage, len, ncclUint8, root, g.comm, g.stream), what) != 0)
            return -1;
        if (d->rank != root) {
            if (cuda_ok(cudaMemcpyAsync(g.h_stage, g.d_stage, len, cudaMemcpyDeviceToHost, g.stream), what) != 0 ||
                cuda_ok(cudaStreamSynchronize(g.stream), what) != 0)
                return -1;
            memcpy((unsigned char *)buf + off, g.h_stage, len);
        }
    }
    return 0;
}

int dist_nccl_barrier(const DistInfo *d) {
    char all_flags[1024];
    unsigned char *all = d->world_size <= (int)sizeof all_flags ? (unsigned char *)all_flags
                                                                : ct_malloc((size_t)d->world_size, "NCCL barrier");
    unsigned char one = 1;
    int rc = host_allgather(&one, 1, all, "dist_barrier");
    if (all != (unsigned char *)all_flags) free(all);
    return rc;
}

int dist_nccl_allreduce_device(const DistInfo *d, float *buf, size_t n, void *stream, const char *what) {
    (void)d;
    if (!g.up) return not_up(what);
    cudaStream_t s = (cudaStream_t)stream;
    return run_collective(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, g.comm, s), s, what);
}

int dist_nccl_broadcast_device(const DistInfo *d, float *const *bufs, const size_t *counts, const int *roots,
                               int count, void *stream, const char *what) {
    if (!g.up) return not_up(what);
    cudaStream_t s = (cudaStream_t)stream;
    for (int i = 0; i < count; i++)
        if (roots[i] < 0 || roots[i] >= d->world_size)
            return ct_fail("%s: part %d is rank %d's, but the job has %d ranks", what, i, roots[i], d->world_size);
    /* One broadcast after another, not one ncclGroupStart/End group: on an H100 with NCCL 2.30.7
     * (two ranks sharing the GPU) a group of broadcasts from different roots delivered nothing,
     * every part NaN where the other rank's bits belonged, while the same broadcasts one by one
     * were exact (docs/cuda.md, "What ran where"). Each is settled before the next is queued, as
     * a non-blocking communicator asks; they run in order on `s`, and only the last is waited for. */
    for (int i = 0; i < count; i++) {
        ncclResult_t rs = ncclBroadcast(bufs[i], bufs[i], counts[i], ncclFloat, roots[i], g.comm, s);
        if (i + 1 < count) {
            if (settle(rs, g.timeout_s, what, g_collective_setting) != 0) return -1;
        } else if (run_collective(rs, s, what) != 0)
            return -1;
    }
    return 0;
}

/* the value launch-check's broadcast puts at element i of part j (its root's) */
static float broadcast_check_value(size_t j, size_t i) { return (float)((j + 1) * 1000 + i % 997) * 0.5f; }

long dist_nccl_check_device_broadcast(const DistInfo *d, size_t n) {
    const int W = d->world_size, parts = W + 1;
    const size_t total = n * (size_t)parts;
    float *h = ct_malloc(total * sizeof *h, "launch-check broadcast"), *dev = NULL;
    float **bufs = ct_malloc((size_t)parts * sizeof *bufs, "launch-check broadcast");
    size_t *counts = ct_malloc((size_t)parts * sizeof *counts, "launch-check broadcast");
    int *roots = ct_malloc((size_t)parts * sizeof *roots, "launch-check broadcast");
    for (int j = 0; j < parts; j++)
        for (size_t i = 0; i < n; i++)
            h[(size_t)j * n + i] = j % W == d->rank ? broadcast_check_value((size_t)j, i) : NAN;
    long bad = -2;
    if (cuda_ok(cudaMalloc((void **)&dev, total * sizeof *dev), "launch-check broadcast buffer") == 0 &&
        cuda_ok(cudaMemcpyAsync(dev, h, total * sizeof *h, cudaMemcpyHostToDevice, g.stream),
                "launch-check broadcast upload") == 0) {
        for (int j = 0; j < parts; j++) {
            bufs[j] = dev + (size_t)j * n;
            counts[j] = n;
            roots[j] = j % W;
        }
        if (dist_nccl_broadcast_device(d, bufs, counts, roots, parts, g.stream,
                                       "launch-check broadcast (ncclBroadcast)") == 0 &&
            cuda_ok(cudaMemcpyAsync(h, dev, total * sizeof *h, cudaMemcpyDeviceToHost, g.stream),
                    "launch-check broadcast download") == 0 &&
            cuda_ok(cudaStreamSynchronize(g.stream), "launch-check broadcast download") == 0) {
            bad = -1;
            for (size_t k = 0; k < total && bad == -1; k++) {
                const float want = broadcast_check_value(k / n, k % n);
                if (memcmp(&h[k], &want, sizeof want) != 0) bad = (long)k;
            }
        }
    }
    if (dev) cudaFree(dev);
    free(roots);
    free(counts);
    free(bufs);
    free(h);
    return bad;
}

long dist_nccl_check_device_sum(const DistInfo *d, size_t n) {
    float *h = ct_malloc(n * sizeof *h, "launch-check device sum"), *dev = NULL;
    for (size_t i = 0; i < n; i++) h[i] = (float)((d->rank + 1) * (int)(i % 97 + 1)) * 0.25f;
    long bad = -2;
    if (cuda_ok(cudaMalloc((void **)&dev, n * sizeof *dev), "launch-check device buffer") == 0 &&
        /* on the stream the sum runs on: a pageable cudaMemcpy may return before the copy has
         * landed, and g.stream does not wait for the default stream */
        cuda_ok(cudaMemcpyAsync(dev, h, n * sizeof *h, cudaMemcpyHostToDevice, g.stream), "launch-check upload") == 0 &&
        dist_nccl_allreduce_device(d, dev, n, g.stream, "launch-check device sum (ncclAllReduce)") == 0 &&
        cuda_ok(cudaMemcpyAsync(h, dev, n * sizeof *h, cudaMemcpyDeviceToHost, g.stream), "launch-check download") == 0 &&
        cuda_ok(cudaStreamSynchronize(g.stream), "launch-check download") == 0) {
        bad = -1;
        const int W = d->world_size;
        for (size_t i = 0; i < n && bad == -1; i++) {
            const float want = 0.25f * (float)((int)(i % 97 + 1) * W * (W + 1) / 2);
            if (memcmp(&h[i], &want, sizeof want) != 0) bad = (long)i;
        }
    }
    if (dev) cudaFree(dev);
    free(h);
    return bad;
}

/* ---- the gradient reducer ---- */

struct DistGradReducer {
    DistBucketPlan plan; /* a copy of the caller's buckets and stage table */
    float *grads;
    cudaStream_t compute, comm;
    cudaEvent_t *stage_done; /* [num_stages]: recorded on compute, waited for by comm */
    cudaEvent_t reduced;
    int next;                /* first bucket not started in this step */
};

int dist_grad_reducer_create(DistGradReducer **out, const DistInfo *d, const DistBucketPlan *plan, float *grads,
                             void *stream) {
    *out = NULL;
    if (!d->nccl || !g.up) return not_up("creating the gradient reducer");
    DistGradReducer *r = ct_calloc(1, sizeof *r, "gradient reducer");
    r->plan = *plan;
    r->plan.buckets = ct_malloc((size_t)plan->num_buckets * sizeof *plan->buckets, "gradient reducer buckets");
    memcpy(r->plan.buckets, plan->buckets, (size_t)plan->num_buckets * sizeof *plan->buckets);
    r->plan.stage_first = ct_malloc((size_t)(plan->num_stages + 1) * sizeof *plan->stage_first, "gradient reducer");
    memcpy(r->plan.stage_first, plan->stage_first, (size_t)(plan->num_stages + 1) * sizeof *plan->stage_first);
    r->stage_done = ct_calloc((size_t)plan->num_stages, sizeof *r->stage_done, "gradient reducer events");
    r->grads = grads;
    r->compute = (cudaStream_t)stream;
    *out = r;
    /* the highest priority: a bucket's sum starts as soon as its stage is done instead of queuing
     * behind the rest of the backward, which would keep the other ranks waiting */
    int least = 0, greatest = 0;
    cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (cuda_ok(cudaStreamCreateWithPriority(&r->comm, cudaStreamNonBlocking, greatest), "gradient reduction stream") != 0 ||
        cuda_ok(cudaEventCreateWithFlags(&r->reduced, cudaEventDisableTiming), "gradient reduction event") != 0)
        return -1;
    for (int s = 0; s < plan->num_stages; s++)
        if (cuda_ok(cudaEventCreateWithFlags(&r->stage_done[s], cudaEventDisableTiming), "gradient stage event") != 0)
            return -1;
    return 0;
}

/* Start buckets [first, end) once the compute stream has passed `after` (stage events). */
static int start_buckets(DistGradReducer *r, int first, int end, cudaEvent_t after) {
    if (first >= end) return 0;
    char what[128];
    snprintf(what, sizeof what, "reducing gradient buckets %d..%d of %d", first, end - 1, r->plan.num_buckets);
    if (!g.up) return not_up(what);
    if (cuda_ok(cudaEventRecord(after, r->compute), what) != 0 ||
        cuda_ok(cudaStreamWaitEvent(r->comm, after, 0), what) != 0)
        return -1;
    /* one group per stage: the same calls grouped the same way every step, so NCCL makes the
     * same algorithm and channel choices (and sums in the same order) every step */
    ncclResult_t rs = ncclGroupStart();
    if (rs != ncclSuccess) return fail_nccl(what, rs);
    for (int b = first; b < end; b++) {
        const DistBucket *k = &r->plan.buckets[b];
        float *p = r->grads + k->offset;
        rs = ncclAllReduce(p, p, k->count, ncclFloat, ncclSum, g.comm, r->comm);
        if (rs != ncclSuccess && rs != ncclInProgress) {
            ncclGroupEnd();
            return fail_nccl(what, rs);
        }
    }
    if (settle(ncclGroupEnd(), g.timeout_s, what, g_collective_setting) != 0) return -1;
    r->next = end;
    return 0;
}

int dist_grad_reducer_stage(void *ctx, int stage) {
    DistGradReducer *r = ctx;
    int first, count;
    dist_bucket_plan_ready(&r->plan, stage, &first, &count);
    if (count == 0) return 0;
    if (first != r->next)
        return ct_fail("rank %d (%s): gradient buckets out of order: stage %d completes buckets from %d, but %d is "
                       "next (stages reported out of order?)",
                       g.rank, g.host, stage, first, r->next);
    return start_buckets(r, first, first + count, r->stage_done[stage]);
}

int dist_grad_reducer_finish(DistGradReducer *r) {
    const int num_stages = r->plan.num_stages;
    if (r->next < r->plan.num_buckets &&
        start_buckets(r, r->next, r->plan.num_buckets, r->stage_done[num_stages - 1]) != 0)
        return -1;
    r->next = 0;
    char what[96];
    snprintf(what, sizeof what, "reducing the gradients (%d buckets, %zu floats)", r->plan.num_buckets,
             r->plan.total_floats);
    if (cuda_ok(cudaEventRecord(r->reduced, r->comm), what) != 0) return -1;
    if (wait_event(r->reduced, what) != 0) return -1;
    return cuda_ok(cudaStreamWaitEvent(r->compute, r->reduced, 0), what);
}

void dist_grad_reducer_free(DistGradReducer *r) {
    if (!r) return;
    for (int s = 0; s < r->plan.num_stages; s++)
        if (r->stage_done[s]) cudaEventDestroy(r->stage_done[s]);
    if (r->reduced) cudaEventDestroy(r->reduced);
    if (r->comm) cudaStreamDestroy(r->comm);
    free(r->stage_done);
    dist_bucket_plan_free(&r->plan);
    free(r);
}

void dist_nccl_finalize(DistInfo *d) {
    if (g.comm) {
        /* flush what is queued, then free; abort if the other ranks are gone */
        ncclResult_t r = ncclCommFinalize(g.comm);
        char setting[64];
        snprintf(setting, sizeof setting, "the start-up timeout, %.0f s", d->timeout_s);
        if (settle(r, d->timeout_s, "closing the NCCL communicator (ncclCommFinalize)", setting) == 0 && g.comm) {
            dist_watchdog_arm(d->timeout_s > 0 ? d->timeout_s + BACKSTOP_S : 0, "ncclCommDestroy");
            ncclCommDestroy(g.comm);
            dist_watchdog_disarm();
        }
        g.comm = NULL;
    }
    if (g.d_stage) cudaFree(g.d_stage);
    if (g.h_stage) cudaFreeHost(g.h_stage);
    if (g.done) cudaEventDestroy(g.done);
    if (g.stream) cudaStreamDestroy(g.stream);
    memset(&g, 0, sizeof g);
    d->nccl = 0;
}

#else /* !CT_HAVE_NCCL */

int dist_nccl_compiled(void) { return 0; }

void dist_nccl_stack(char *buf, size_t cap) { snprintf(buf, cap, "nccl=(not built)"); }

static int no_nccl(void) {
    return ct_fail("this ctrain was built without NCCL (CUDA and NCCL headers were not found at build time: set "
                   "CUDA_HOME / NCCL_HOME and rebuild)");
}

int dist_nccl_init(DistInfo *d, int device, double timeout_s, char *detail, size_t cap) {
    (void)d, (void)device, (void)timeout_s;
    if (cap) detail[0] = '\0';
    return no_nccl();
}
int dist_nccl_allreduce_device(const DistInfo *d, float *buf, size_t n, void *stream, const char *what) {
    (void)d, (void)buf, (void)n, (void)stream, (void)what;
    return no_nccl();
}
int dist_nccl_broadcast_device(const DistInfo *d, float *const *bufs, const size_t *counts, const int *roots,
                               int count, void *stream, const char *what) {
    (void)d, (void)bufs, (void)counts, (void)roots, (void)count, (void)stream, (void)what;
    return no_nccl();
}
long dist_nccl_check_device_broadcast(const DistInfo *d, size_t n) {
    (void)d, (void)n;
    no_nccl();
    return -2;
}
long dist_nccl_check_device_sum(const DistInfo *d, size_t n) {
    (void)d, (void)n;
    no_nccl();
    return -2;
}
int dist_grad_reducer_create(DistGradReducer **out, const DistInfo *d, const DistBucketPlan *plan, float *grads,
                             void *stream) {
    (void)d, (void)plan, (void)grads, (void)stream;
    *out = NULL;
    return no_nccl();
}
int dist_grad_reducer_stage(void *ctx, int stage) {
    (void)ctx, (void)stage;
    return no_nccl();
}
int dist_grad_reducer_finish(DistGradReducer *r) {
    (void)r;
    return no_nccl();
}
void dist_grad_reducer_free(DistGradReducer *r) { (void)r; }
int dist_nccl_sum(const DistInfo *d, void *buf, size_t n, int is_f64) {
    (void)d, (void)buf, (void)n, (void)is_f64;
    return no_nccl();
}
int dist_nccl_max_i32(const DistInfo *d, int *v) {
    (void)d, (void)v;
    return no_nccl();
}
int dist_nccl_bcast(const DistInfo *d, void *buf, size_t bytes, int root) {
    (void)d, (void)buf, (void)bytes, (void)root;
    return no_nccl();
}
int dist_nccl_barrier(const DistInfo *d) {
    (void)d;
    return no_nccl();
}
void dist_nccl_finalize(DistInfo *d) { d->nccl = 0; }

#endif
