/* test_gpu_embedding.c — the CUDA token embedding (cuda_embedding.cu) against the CPU op: the
 * gather is a copy (bitwise equal), and the scatter-add backward adds each id's tokens in token
 * order in fp32 exactly as cpu_embedding_backward does, so it must be BITWISE equal to the CPU
 * result (no tolerance), including repeated ids and accumulation into a non-zero gradient.
 * The host-side index (counting sort) is checked without a GPU. Rules in test_gpu.h. */
#include "test_gpu.h"

#ifndef CT_HAVE_CUDA
GPU_TEST_MAIN_WITHOUT_CUDA()
#else

#include "cpu_ops.h"

enum { V = 97, N = 3001, C = 160 };

static int32_t *random_ids(int n, int vocab, uint64_t *rng, int skewed) {
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) {
        double u = ref_rand01(rng);
        if (skewed) u = u * u * u; /* a few very frequent ids, like real text */
        ids[i] = (int32_t)(u * vocab);
        if (ids[i] >= vocab) ids[i] = vocab - 1;
    }
    return ids;
}

/* Runs on the host only: no GPU needed. */
static void index_is_a_stable_counting_sort(void) {
    uint64_t rng = 11;
    int32_t *ids = random_ids(N, V, &rng, 1);
    int32_t *rows = malloc(V * sizeof(int32_t)), *starts = malloc((V + 1) * sizeof(int32_t));
    int32_t *pos = malloc(N * sizeof(int32_t));
    int num_rows = -1;
    cuda_embedding_index(ids, N, V, rows, starts, pos, &num_rows);
    int distinct = 0, seen[V] = {0};
    for (int i = 0; i < N; i++) distinct += !seen[ids[i]]++;
    CHECK(num_rows == distinct, "num_rows %d, expected %d distinct ids", num_rows, distinct);
    CHECK(starts[0] == 0 && starts[num_rows] == N, "starts[0] %d, starts[end] %d", starts[0], starts[num_rows]);
    for (int r = 0; r < num_rows; r++) {
        CHECK(r == 0 || rows[r] > rows[r - 1], "rows not increasing at %d", r);
        CHECK(starts[r + 1] - starts[r] == seen[rows[r]], "row %d: %d positions, expected %d", rows[r],
              starts[r + 1] - starts[r], seen[rows[r]]);
        for (int i = starts[r]; i < starts[r + 1]; i++) {
            CHECK(ids[pos[i]] == rows[r], "position %d has id %d, listed under %d", pos[i], ids[pos[i]], rows[r]);
            CHECK(i == starts[r] || pos[i] > pos[i - 1], "positions of id %d not in token order", rows[r]);
        }
    }
    free(ids), free(rows), free(starts), free(pos);
}

static void forward_is_a_copy(void) {
    REQUIRE_GPU();
    uint64_t rng = 12;
    int32_t *ids = random_ids(N, V, &rng, 0);
    float *wte = random_host((size_t)V * C, -1, 1, &rng);
    float *ref = malloc((size_t)N * C * sizeof(float));
    CHECK(cpu_embedding_forward(ref, ids, wte, N, V, C) == 0, "cpu cpu_embedding_forward failed");
    int32_t *d_ids = dev_upload(ids, N * sizeof(int32_t));
    float *d_wte = dev_floats(wte, (size_t)V * C), *d_out = dev_nan((size_t)N * C);
    CHECK_CUDA_OK(cuda_embedding_forward(d_out, d_ids, d_wte, N, C, 0));
    float *out = host_from_dev(d_out, (size_t)N * C);
    CHECK(memcmp(out, ref, (size_t)N * C * sizeof(float)) == 0, "gather differs from the CPU op");
}

static void backward_bitwise_equals_cpu(void) {
    REQUIRE_GPU();
    for (int skewed = 0; skewed < 2; skewed++) {
        uint64_t rng = 13 + (uint64_t)skewed;
        int32_t *ids = random_ids(N, V, &rng, skewed);
        float *dout = random_host((size_t)N * C, -1, 1, &rng);
        float *g0 = random_host((size_t)V * C, -1, 1, &rng);
        float *ref = copy_host(g0, (size_t)V * C);
        cpu_embedding_backward(ref, dout, ids, N, C);
        int32_t *rows = malloc(V * sizeof(int32_t)), *starts = malloc((V + 1) * sizeof(int32_t));
        int32_t *pos = malloc(N * sizeof(int32_t));
        int num_rows = 0;
        cuda_embedding_index(ids, N, V, rows, starts, pos, &num_rows);
        int32_t *d_rows = dev_upload(rows, V * sizeof(int32_t)), *d_starts = dev_upload(starts, (V + 1) * sizeof(int32_t));
        int32_t *d_pos = dev_upload(pos, N * sizeof(int32_t));
        float *d_dout = dev_floats(dout, (size_t)N * C), *d_g = dev_floats(g0, (size_t)V * C);
        CHECK_CUDA_OK(cuda_embedding_backward(d_g, d_dout, d_rows, d_starts, d_pos, num_rows, C, 0));
        float *got = host_from_dev(d_g, (size_t)V * C);
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)V * C; i++) bad += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
        if (gpu_verbose()) fprintf(stderr, "  embedding backward (%s ids): %zu differing elements\n",
                                   skewed ? "skewed" : "uniform", bad);
        CHECK(bad == 0, "%zu gradient elements differ from the CPU op (expected bitwise equality)", bad);
    }
}

int main(void) {
    RUN(index_is_a_stable_counting_sort);
    RUN(forward_is_a_copy);
    RUN(backward_bitwise_equals_cpu);
    TEST_EXIT();
}

#endif
