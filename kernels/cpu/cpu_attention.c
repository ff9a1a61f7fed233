/* cpu_attention.c — causal grouped-query attention (forward and backward) for the CPU backend:
 * per-(batch, head) cblas_sgemm on strided views of the token-major q/k/v, a row-blocked causal
 * mask, fp32 softmax, and P recomputed in the backward from saved row statistics. See
 * cpu_attention.h for the layouts, the memory trade-off and the determinism guarantees. */
#include "cpu_attention.h"
#include "cpu_vecmath.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Shapes and the strides of the per-(b, h) views into the token-major buffers. */
typedef struct {
    int B, T, n_heads, n_kv_heads, head_dim;
    int group;        /* query heads per kv head */
    int rows;         /* query rows per block: min(CPU_ATTENTION_ROW_BLOCK, T) */
    int n_blocks;     /* row blocks per sequence */
    size_t q_stride;  /* floats between consecutive tokens of q, y, dq, dy: H*hd */
    size_t kv_stride; /* ... of k, v, dk, dv: KV*hd */
    float scale;      /* 1/sqrt(hd) */
} AttnDims;

static AttnDims attn_dims(int B, int T, int n_heads, int n_kv_heads, int head_dim) {
    assert(B > 0 && T > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0);
    assert(n_heads % n_kv_heads == 0);
    AttnDims d;
    d.B = B;
    d.T = T;
    d.n_heads = n_heads;
    d.n_kv_heads = n_kv_heads;
    d.head_dim = head_dim;
    d.group = n_heads / n_kv_heads;
    d.rows = T < CPU_ATTENTION_ROW_BLOCK ? T : CPU_ATTENTION_ROW_BLOCK;
    d.n_blocks = (T + d.rows - 1) / d.rows;
    d.q_stride = (size_t)n_heads * head_dim;
    d.kv_stride = (size_t)n_kv_heads * head_dim;
    d.scale = 1.0f / sqrtf((float)head_dim);
    return d;
}

/* One score tile: the rows of a query block against every key it may see. */
static size_t tile_floats(const AttnDims *d) { return (size_t)d->rows * d->T; }

static size_t gqa_partial_floats(const AttnDims *d) {
    return d->group > 1 ? (size_t)d->B * d->n_heads * d->T * d->head_dim : 0;
}

size_t cpu_attention_stats_floats(int B, int T, int n_heads) { return (size_t)2 * B * n_heads * T; }

size_t cpu_attention_forward_scratch_floats(int B, int T, int n_heads, int n_kv_heads,
                                            int head_dim, int n_threads) {
    AttnDims d = attn_dims(B, T, n_heads, n_kv_heads, head_dim);
    return (size_t)(n_threads > 0 ? n_threads : 1) * tile_floats(&d);
}

size_t cpu_attention_backward_scratch_floats(int B, int T, int n_heads, int n_kv_heads,
                                             int head_dim, int n_threads) {
    AttnDims d = attn_dims(B, T, n_heads, n_kv_heads, head_dim);
    return 2 * gqa_partial_floats(&d) + (size_t)(n_threads > 0 ? n_threads : 1) * 2 * tile_floats(&d);
}

/* Worker threads: the current OpenMP count, capped by how many per-thread slices fit. */
static int threads_fitting(size_t available, size_t per_thread) {
    size_t fit = available / per_thread;
    assert(fit >= 1 && "attention scratch smaller than one thread's share");
    int n = omp_get_max_threads();
    return (size_t)n > fit ? (int)fit : n;
}

/* Called first inside each worker. With a team of one the region is inactive, so the OpenMP
 * build of OpenBLAS would otherwise size its own thread team from the outer setting; forcing
 * this implicit task's thread count to 1 keeps every sgemm single-threaded (same kernel, same
 * bits) in every case. The setting ends with the parallel region. */
static void keep_blas_single_threaded(void) { omp_set_num_threads(1); }

/* scores[rows, n_keys] = scale * Q[t0 : t0+rows] . K[0 : n_keys]^T for one (b, h). The forward
 * and the backward call this with identical arguments, so both see the same bits. */
static void block_scores(float *scores, const float *q_bh, const float *k_bg, int t0, int rows,
                         int n_keys, const AttnDims *d) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_keys, d->head_dim, d->scale,
                q_bh + (size_t)t0 * d->q_stride, (int)d->q_stride, k_bg, (int)d->kv_stride, 0.0f,
                scores, n_keys);
}

/* In-place causal softmax of a score tile (row r is position t0 + r and sees keys 0..t0+r);
 * masked entries become exactly 0 so that the following P V product can use the whole tile.
 * Writes (row max, 1/row sum) per row to stats when non-NULL. */
static void block_softmax(float *tile, float *stats, int t0, int rows, int n_keys) {
    for (int r = 0; r < rows; r++) {
        float *p = tile + (size_t)r * n_keys;
        int visible = t0 + r + 1;
        float row_max = cpu_attn_max(p, visible);
        for (int s = 0; s < visible; s++) p[s] = vec_expf(p[s] - row_max);
        float inv_sum = 1.0f / cpu_attn_sum(p, visible);
        for (int s = 0; s < visible; s++) p[s] *= inv_sum;
        memset(p + visible, 0, (size_t)(n_keys - visible) * sizeof(float));
        if (stats) {
            stats[2 * (size_t)(t0 + r)] = row_max;
            stats[2 * (size_t)(t0 + r) + 1] = inv_sum;
        }
    }
}

/* The backward's P from recomputed scores: exp(s - max) * inv_sum is evaluated with the same
 * fp32 operations as block_softmax, so it equals the forward's P bit for bit. */
static void block_probs_from_stats(float *tile, const float *stats, int t0, int rows, int n_keys) {
    for (int r = 0; r < rows; r++) {
        float *p = tile + (size_t)r * n_keys;
        int visible = t0 + r + 1;
        float row_max = stats[2 * (size_t)(t0 + r)], inv_sum = stats[2 * (size_t)(t0 + r) + 1];
        for (int s = 0; s < visible; s++) p[s] = vec_expf(p[s] - row_max) * inv_sum;
        memset(p + visible, 0, (size_t)(n_keys - visible) * sizeof(float));
    }
}

/* Softmax backward in place of dP: dS = P * (dP - sum_s P dP), masked entries exactly 0.
 * (The 1/sqrt(hd) of the scores is applied later, as the alpha of the dQ and dK products.) */
static void block_softmax_backward(float *dprobs, const float *probs, int t0, int rows, int n_keys) {
    for (int r = 0; r < rows; r++) {
        const float *p = probs + (size_t)r * n_keys;
        float *dp = dprobs + (size_t)r * n_keys;
        int visible = t0 + r + 1;
        float p_dot_dp = cpu_attn_dot(p, dp, visible);
        for (int s = 0; s < visible; s++) dp[s] = p[s] * (dp[s] - p_dot_dp);
        memset(dp + visible, 0, (size_t)(n_keys - visible) * sizeof(float));
    }
}

void cpu_attention_forward(float *y, float *stats, const float *q, const float *k, const float *v,
                           int B, int T, int n_heads, int n_kv_heads, int head_dim,
                           float *scratch, size_t scratch_floats) {
    const AttnDims d = attn_dims(B, T, n_heads, n_kv_heads, head_dim);
    const size_t tile = tile_floats(&d);
    const int n_threads = threads_fitting(scratch_floats, tile);
    /* Forward blocks are independent (no reduction across them), so the task is one query
     * block of one (b, h): finer tasks balance the uneven causal blocks across threads. */
    const long n_tasks = (long)B * n_heads * d.n_blocks;
#pragma omp parallel num_threads(n_threads)
    {
        keep_blas_single_threaded();
        float *scores = scratch + (size_t)omp_get_thread_num() * tile;
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < n_tasks; task++) {
            int block = (int)(task % d.n_blocks);
            int h = (int)(task / d.n_blocks % n_heads);
            int b = (int)(task / d.n_blocks / n_heads);
            int kv_head = h / d.group;
            int t0 = block * d.rows;
            int rows = T - t0 < d.rows ? T - t0 : d.rows;
            int n_keys = t0 + rows;
            const float *q_bh = q + (size_t)b * T * d.q_stride + (size_t)h * head_dim;
            const float *k_bg = k + (size_t)b * T * d.kv_stride + (size_t)kv_head * head_dim;
            const float *v_bg = v + (size_t)b * T * d.kv_stride + (size_t)kv_head * head_dim;
            float *y_bh = y + (size_t)b * T * d.q_stride + (size_t)h * head_dim;
            float *stats_bh = stats ? stats + 2 * ((size_t)b * n_heads + h) * T : NULL;

            block_scores(scores, q_bh, k_bg, t0, rows, n_keys, &d);
            block_softmax(scores, stats_bh, t0, rows, n_keys);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, n_keys, 1.0f,
                        scores, n_keys, v_bg, (int)d.kv_stride, 0.0f,
                        y_bh + (size_t)t0 * d.q_stride, (int)d.q_stride);
        }
    }
}

/* dK/dV partials of the group's query heads, summed in head order: dk[b,t,g] += sum_j part_j. */
static void reduce_gqa_partials(float *dk, float *dv, const float *dk_partial,
                                const float *dv_partial, const AttnDims *d, int n_threads) {
    const long n_tokens = (long)d->B * d->T;
    const int hd = d->head_dim;
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (long n = 0; n < n_tokens; n++) {
        long b = n / d->T, t = n % d->T;
        for (int g = 0; g < d->n_kv_heads; g++) {
            float *dk_row = dk + (size_t)n * d->kv_stride + (size_t)g * hd;
            float *dv_row = dv + (size_t)n * d->kv_stride + (size_t)g * hd;
            for (int i = 0; i < hd; i++) {
                float sum_k = 0.0f, sum_v = 0.0f;
                for (int j = 0; j < d->group; j++) {
                    int h = g * d->group + j;
                    size_t at = (((size_t)b * d->n_heads + h) * d->T + t) * hd + i;
                    sum_k += dk_partial[at];
                    sum_v += dv_partial[at];
                }
                dk_row[i] += sum_k;
                dv_row[i] += sum_v;
            }
        }
    }
}

void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dy, const float *q,
                            const float *k, const float *v, const float *stats, int B, int T,
                            int n_heads, int n_kv_heads, int head_dim, float *scratch,
                            size_t scratch_floats) {
    const AttnDims d = attn_dims(B, T, n_heads, n_kv_heads, head_dim);
    const size_t tile = tile_floats(&d);
    const size_t partial_floats = gqa_partial_floats(&d);
    assert(scratch_floats >= 2 * partial_floats);
    float *dk_partial = scratch, *dv_partial = scratch + partial_floats;
    float *tiles = scratch + 2 * partial_floats;
    const int n_threads = threads_fitting(scratch_floats - 2 * partial_floats, 2 * tile);
    /* The task is a whole (b, h): its query blocks all add into the same dK/dV rows, and doing
     * them in order inside one task keeps that sum deterministic. */
    const long n_tasks = (long)B * n_heads;
#pragma omp parallel num_threads(n_threads)
    {
        keep_blas_single_threaded();
        float *probs = tiles + (size_t)omp_get_thread_num() * 2 * tile;
        float *dprobs = probs + tile;
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < n_tasks; task++) {
            int h = (int)(task % n_heads), b = (int)(task / n_heads);
            int kv_head = h / d.group;
            size_t q_off = (size_t)b * T * d.q_stride + (size_t)h * head_dim;
            size_t kv_off = (size_t)b * T * d.kv_stride + (size_t)kv_head * head_dim;
            const float *q_bh = q + q_off, *dy_bh = dy + q_off;
            const float *k_bg = k + kv_off, *v_bg = v + kv_off;
            float *dq_bh = dq + q_off;
            const float *stats_bh = stats + 2 * ((size_t)b * n_heads + h) * T;
            /* Without GQA this task is the only writer of its dK/dV columns and accumulates
             * straight into them; with GQA it fills its own zeroed [T, hd] partial. */
            float *dk_target, *dv_target;
            int target_ld;
            if (d.group == 1) {
                dk_target = dk + kv_off;
                dv_target = dv + kv_off;
                target_ld = (int)d.kv_stride;
            } else {
                size_t part_off = ((size_t)b * n_heads + h) * T * head_dim;
                dk_target = dk_partial + part_off;
                dv_target = dv_partial + part_off;
                target_ld = head_dim;
                memset(dk_target, 0, (size_t)T * head_dim * sizeof(float));
                memset(dv_target, 0, (size_t)T * head_dim * sizeof(float));
            }
            for (int t0 = 0; t0 < T; t0 += d.rows) {
                int rows = T - t0 < d.rows ? T - t0 : d.rows;
                int n_keys = t0 + rows;
                const float *q_blk = q_bh + (size_t)t0 * d.q_stride;
                const float *dy_blk = dy_bh + (size_t)t0 * d.q_stride;

                block_scores(probs, q_bh, k_bg, t0, rows, n_keys, &d);
                block_probs_from_stats(probs, stats_bh, t0, rows, n_keys);
                /* dP = dY V^T;  dV += P^T dY */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_keys, head_dim, 1.0f,
                            dy_blk, (int)d.q_stride, v_bg, (int)d.kv_stride, 0.0f, dprobs, n_keys);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_keys, head_dim, rows, 1.0f,
                            probs, n_keys, dy_blk, (int)d.q_stride, 1.0f, dv_target, target_ld);
                block_softmax_backward(dprobs, probs, t0, rows, n_keys);
                /* dQ += scale dS K;  dK += scale dS^T Q */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, n_keys,
                            d.scale, dprobs, n_keys, k_bg, (int)d.kv_stride, 1.0f,
                            dq_bh + (size_t)t0 * d.q_stride, (int)d.q_stride);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_keys, head_dim, rows,
                            d.scale, dprobs, n_keys, q_blk, (int)d.q_stride, 1.0f, dk_target,
                            target_ld);
            }
        }
    }
    if (d.group > 1) reduce_gqa_partials(dk, dv, dk_partial, dv_partial, &d, omp_get_max_threads());
}
