/* cpu_attention.c — causal grouped-query attention (forward and backward) for the CPU backend:
 * per-(batch, head) cblas_sgemm on strided views of the token-major q/k/v, a row-blocked causal
 * (optionally segment, i.e. document) mask, fp32 softmax, and P recomputed in the backward from
 * saved row statistics. See cpu_attention.h for the layouts, the memory trade-off and the
 * determinism guarantees. */
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

/* One query block's view of the keys: the block is rows t0 .. t0+rows-1 of sequence b and
 * multiplies against keys k0 .. t0+rows-1 only (n_keys of them). k0 is 0 for plain causal
 * attention, and the block's smallest segment start otherwise (segments are contiguous, so it
 * is the first row's): keys before it are masked for every row of the block, and skipping them
 * is what makes a long row of short documents cost about what its documents cost. */
typedef struct {
    const int32_t *seg; /* seg_start of sequence b ([T]), or NULL: causal over the whole row */
    int t0, rows, k0, n_keys;
} AttnBlock;

static AttnBlock attn_block(const int32_t *seg_start, int b, int t0, const AttnDims *d) {
    AttnBlock blk;
    blk.seg = seg_start ? seg_start + (size_t)b * d->T : NULL;
    blk.t0 = t0;
    blk.rows = d->T - t0 < d->rows ? d->T - t0 : d->rows;
    blk.k0 = blk.seg ? blk.seg[t0] : 0;
    assert(blk.k0 >= 0 && blk.k0 <= t0);
    blk.n_keys = t0 + blk.rows - blk.k0;
    return blk;
}

/* Row r of the block sees tile columns lo .. hi-1 (keys k0+lo .. t0+r). */
static int block_row_lo(const AttnBlock *blk, int r) {
    if (!blk->seg) return 0;
    int t = blk->t0 + r, start = blk->seg[t];
    assert(start >= blk->k0 && start <= t);
    return start - blk->k0;
}
static int block_row_hi(const AttnBlock *blk, int r) { return blk->t0 + r + 1 - blk->k0; }

/* Zero a row's masked columns [0, lo) and [hi, n_keys), so products may use the whole tile. */
static void zero_masked(float *p, int lo, int hi, int n_keys) {
    if (lo > 0) memset(p, 0, (size_t)lo * sizeof(float));
    memset(p + hi, 0, (size_t)(n_keys - hi) * sizeof(float));
}

/* scores[rows, n_keys] = scale * Q[t0 : t0+rows] . K[k0 : k0+n_keys]^T for one (b, h). The
 * forward and the backward call this with identical arguments, so both see the same bits. */
static void block_scores(float *scores, const float *q_bh, const float *k_bg, const AttnBlock *blk,
                         const AttnDims *d) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blk->rows, blk->n_keys, d->head_dim, d->scale,
                q_bh + (size_t)blk->t0 * d->q_stride, (int)d->q_stride, k_bg + (size_t)blk->k0 * d->kv_stride,
                (int)d->kv_stride, 0.0f, scores, blk->n_keys);
}

/* In-place masked softmax of a score tile (row r is position t0 + r and sees tile columns
 * lo .. hi-1); masked entries become exactly 0 so that the following P V product can use the
 * whole tile. Writes (row max, 1/row sum) per row to stats when non-NULL. */
static void block_softmax(float *tile, float *stats, const AttnBlock *blk) {
    const int t0 = blk->t0, n_keys = blk->n_keys;
    for (int r = 0; r < blk->rows; r++) {
        float *p = tile + (size_t)r * n_keys;
        int lo = block_row_lo(blk, r), hi = block_row_hi(blk, r);
        float row_max = cpu_attn_max(p + lo, hi - lo);
        for (int s = lo; s < hi; s++) p[s] = vec_expf(p[s] - row_max);
        float inv_sum = 1.0f / cpu_attn_sum(p + lo, hi - lo);
        for (int s = lo; s < hi; s++) p[s] *= inv_sum;
        zero_masked(p, lo, hi, n_keys);
        if (stats) {
            stats[2 * (size_t)(t0 + r)] = row_max;
            stats[2 * (size_t)(t0 + r) + 1] = inv_sum;
        }
    }
}

/* The backward's P from recomputed scores: exp(s - max) * inv_sum is evaluated with the same
 * fp32 operations as block_softmax, so it equals the forward's P bit for bit. */
static void block_probs_from_stats(float *tile, const float *stats, const AttnBlock *blk) {
    const int t0 = blk->t0, n_keys = blk->n_keys;
    for (int r = 0; r < blk->rows; r++) {
        float *p = tile + (size_t)r * n_keys;
        int lo = block_row_lo(blk, r), hi = block_row_hi(blk, r);
        float row_max = stats[2 * (size_t)(t0 + r)], inv_sum = stats[2 * (size_t)(t0 + r) + 1];
        for (int s = lo; s < hi; s++) p[s] = vec_expf(p[s] - row_max) * inv_sum;
        zero_masked(p, lo, hi, n_keys);
    }
}

/* Softmax backward in place of dP: dS = P * (dP - sum_s P dP), masked entries exactly 0.
 * (The 1/sqrt(hd) of the scores is applied later, as the alpha of the dQ and dK products.) */
static void block_softmax_backward(float *dprobs, const float *probs, const AttnBlock *blk) {
    const int n_keys = blk->n_keys;
    for (int r = 0; r < blk->rows; r++) {
        const float *p = probs + (size_t)r * n_keys;
        float *dp = dprobs + (size_t)r * n_keys;
        int lo = block_row_lo(blk, r), hi = block_row_hi(blk, r);
        float p_dot_dp = cpu_attn_dot(p + lo, dp + lo, hi - lo);
        for (int s = lo; s < hi; s++) dp[s] = p[s] * (dp[s] - p_dot_dp);
        zero_masked(dp, lo, hi, n_keys);
    }
}

void cpu_attention_forward(float *y, float *stats, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int B, int T, int n_heads, int n_kv_heads, int head_dim,
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
            const AttnBlock blk = attn_block(seg_start, b, block * d.rows, &d);
            const float *q_bh = q + (size_t)b * T * d.q_stride + (size_t)h * head_dim;
            const float *k_bg = k + (size_t)b * T * d.kv_stride + (size_t)kv_head * head_dim;
            const float *v_bg = v + (size_t)b * T * d.kv_stride + (size_t)kv_head * head_dim;
            float *y_bh = y + (size_t)b * T * d.q_stride + (size_t)h * head_dim;
            float *stats_bh = stats ? stats + 2 * ((size_t)b * n_heads + h) * T : NULL;

            block_scores(scores, q_bh, k_bg, &blk, &d);
            block_softmax(scores, stats_bh, &blk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blk.rows, head_dim, blk.n_keys, 1.0f,
                        scores, blk.n_keys, v_bg + (size_t)blk.k0 * d.kv_stride, (int)d.kv_stride, 0.0f,
                        y_bh + (size_t)blk.t0 * d.q_stride, (int)d.q_stride);
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
                            const float *k, const float *v, const int32_t *seg_start,
                            const float *stats, int B, int T,
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
                const AttnBlock blk = attn_block(seg_start, b, t0, &d);
                const int rows = blk.rows, n_keys = blk.n_keys;
                const float *q_blk = q_bh + (size_t)t0 * d.q_stride;
                const float *dy_blk = dy_bh + (size_t)t0 * d.q_stride;
                const float *k_blk = k_bg + (size_t)blk.k0 * d.kv_stride;
                const float *v_blk = v_bg + (size_t)blk.k0 * d.kv_stride;
                float *dk_blk = dk_target + (size_t)blk.k0 * target_ld;
                float *dv_blk = dv_target + (size_t)blk.k0 * target_ld;

                block_scores(probs, q_bh, k_bg, &blk, &d);
                block_probs_from_stats(probs, stats_bh, &blk);
                /* dP = dY V^T;  dV += P^T dY */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n_keys, head_dim, 1.0f,
                            dy_blk, (int)d.q_stride, v_blk, (int)d.kv_stride, 0.0f, dprobs, n_keys);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_keys, head_dim, rows, 1.0f,
                            probs, n_keys, dy_blk, (int)d.q_stride, 1.0f, dv_blk, target_ld);
                block_softmax_backward(dprobs, probs, &blk);
                /* dQ += scale dS K;  dK += scale dS^T Q */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, n_keys,
                            d.scale, dprobs, n_keys, k_blk, (int)d.kv_stride, 1.0f,
                            dq_bh + (size_t)t0 * d.q_stride, (int)d.q_stride);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n_keys, head_dim, rows,
                            d.scale, dprobs, n_keys, q_blk, (int)d.q_stride, 1.0f, dk_blk,
                            target_ld);
            }
        }
    }
    if (d.group > 1) reduce_gqa_partials(dk, dv, dk_partial, dv_partial, &d, omp_get_max_threads());
}
