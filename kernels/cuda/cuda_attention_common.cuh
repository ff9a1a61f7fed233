/* cuda_attention_common.cuh — what the attention forward (cuda_attention_fwd.cu) and backward
 * (cuda_attention_bwd.cu) kernels share: tile shapes, shared-memory copies, mma fragment helpers,
 * the segment (document) mask helpers and the host-side shape check. Causal grouped-query flash
 * attention on tensor cores (see cuda_attention.h; the pair of cpu_attention.c). bf16 q, k, v, y,
 * dy; fp32 accumulation, softmax and gradients; mma.sync m16n8k16 with ldmatrix and cp.async
 * (cuda_mma.cuh), so it runs on sm_80 and sm_90.
 *
 * Work split (the FlashAttention-2 scheme, made deterministic)
 *  - A block is 4 warps and owns 64 rows: queries (dq kernel) or keys (dk/dv kernel); each warp
 *    owns 16 of them and holds their accumulators in registers as mma fragments. The forward's
 *    blocks own 128 query rows for head_dim <= 64, two m16 tiles per warp (FWD_MT), so each K/V
 *    fragment read from shared memory feeds two products (FlashAttention-2's 128-row tiles).
 *  - The block loops over tiles of the other operand (KT rows: 64, or 32 for head_dim 128 to keep
 *    the accumulators in registers), double-buffered in shared memory by cp.async: the copy of
 *    tile i+1 runs while tile i is multiplied. Shared rows are padded by 16 bytes so the 8 rows
 *    one ldmatrix reads fall in different banks.
 *  - Scores S = Q K^T (fp32 fragments) are scaled into the log2 domain, masked (key > query) on
 *    the tiles that cross the diagonal, and turned into P with exp2f; P (rounded to bf16) goes
 *    straight from the score fragments into the A operand of the next product (the m16n8 C
 *    layout of two adjacent key tiles is the m16k16 A layout), so no score reaches shared memory.
 *  - Forward: online softmax (running max and sum per row; the sum's quad reduction once at the
 *    end), writes y (bf16) and lse = ln(sum exp(scaled scores)) [B,H,T].
 *  - Backward, no atomics, fixed order everywhere:
 *      dq kernel (query tiles): first D = rowsum(dy * y) of its rows (kept for the dk/dv kernel),
 *        then P = exp2(S log2e/sqrt(hd) - lse log2e), dP = dy V^T,
 *        dS = P (dP - D), dq = dS K over the key tiles in order;
 *      dk/dv kernel (key tiles of one kv head): the transposed products, dV = P^T dy and
 *        dK = dS^T Q, over the group's query heads in head order and their query tiles in order,
 *        so the GQA sum is a fixed-order register sum.
 *    Both kernels recompute S (FlashAttention-2 computes it once and adds dq with atomics, whose
 *    order varies from run to run): 7 instead of 5 products, the price of run-to-run equal bits.
 *  - Blocks of the forward and dq kernels take query tiles longest first (the last tiles see the
 *    most keys), which evens out the causal triangle's work across the machine. */
#ifndef CT_CUDA_ATTENTION_COMMON_CUH
#define CT_CUDA_ATTENTION_COMMON_CUH

#include "cuda_attention.h"
#include "cuda_mma.cuh"

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2 0.6931471805599453f

enum { ATT_WARPS = 4, ATT_THREADS = 32 * ATT_WARPS, ATT_ROWS = 16 * ATT_WARPS };

typedef __nv_bfloat16 bf16;

/* m16 tiles per warp in the forward for head_dim <= 64 (1 is the layout of the other kernels; a
 * build with -DCT_ATT_FWD_MT=1 times it against 2) */
#ifndef CT_ATT_FWD_MT
#define CT_ATT_FWD_MT 2
#endif

template <int HD>
struct AttCfg {
    static constexpr int LD = HD + 8;             /* bf16 per shared row (16 bytes of padding) */
    static constexpr int CHUNKS = HD / 8;         /* 16-byte pieces per row */
    static constexpr int KT = HD >= 128 ? 32 : 64; /* rows of the looped-over operand per tile */
    static constexpr int NT = KT / 8;             /* n8 score tiles per KT */
    static constexpr int KSTEPS = HD / 16;        /* k16 steps over head_dim */
    static constexpr int HD_NT = HD / 8;          /* n8 tiles over head_dim */
    /* m16 row tiles per warp in the forward: two where the accumulators still fit in registers,
     * so every K and V fragment read from shared memory (ldmatrix) feeds two products instead of
     * one — with one tile per warp the forward reads shared memory twice as fast as its products
     * consume it. Each row's arithmetic is the same either way (same bits). */
    static constexpr int FWD_MT = HD >= 128 ? 1 : CT_ATT_FWD_MT;
    static constexpr int FWD_ROWS = 16 * ATT_WARPS * FWD_MT; /* query rows per forward block */
};

/* Rows [row0, row0 + ROWS) of the head at column col0 of a [B*T, ld] bf16 tensor, batch b, into a
 * shared tile (LD per row); rows >= T are zero-filled. All threads call; the caller commits. */
template <int HD, int ROWS>
static __device__ __forceinline__ void load_tile_async(bf16 *tile, const bf16 *src, size_t ld, size_t col0, int b,
                                                       int row0, int T) {
    using C = AttCfg<HD>;
    for (int i = threadIdx.x; i < ROWS * C::CHUNKS; i += ATT_THREADS) {
        const int r = i / C::CHUNKS, c = i % C::CHUNKS;
        const int row = row0 + r;
        const bool valid = row < T;
        const bf16 *g = src + ((size_t)b * T + (valid ? row : 0)) * ld + col0 + 8 * c;
        cp_async_16(tile + r * C::LD + 8 * c, g, valid);
    }
}

/* A fragments of the 16 rows [r0, r0 + 16) of a shared tile, all of head_dim. */
template <int HD>
static __device__ __forceinline__ void load_a_frags(bf16x2 (&f)[AttCfg<HD>::KSTEPS][4], const bf16 *tile, int r0) {
    using C = AttCfg<HD>;
    const int lane = threadIdx.x & 31;
    const bf16 *base = tile + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * C::LD + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < C::KSTEPS; kk++) ldsm_x4(f[kk], base + kk * 16);
}

/* acc[i] (16 x NT*8) += A_i B^T for the warp's MT m16 tiles (A fragments a[i]) with B the first
 * NT*8 rows of shared tile b: the dot products of the rows with NT*8 rows of the other operand,
 * over head_dim in order. Each B fragment is read once for all MT tiles. */
template <int HD, int NT, int MT>
static __device__ __forceinline__ void mma_rows_dot_mt(float (&acc)[MT][NT][4],
                                                       const bf16x2 (&a)[MT][AttCfg<HD>::KSTEPS][4], const bf16 *b) {
    using C = AttCfg<HD>;
    const int lane = threadIdx.x & 31;
    const bf16 *base = b + ((lane & 7) + (lane >> 4) * 8) * C::LD + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < C::KSTEPS; kk++) {
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            bf16x2 r[4];
            ldsm_x4(r, base + np * 16 * C::LD + kk * 16);
            const bf16x2 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
            for (int i = 0; i < MT; i++) {
                mma_16816(acc[i][2 * np], a[i][kk], b0);
                mma_16816(acc[i][2 * np + 1], a[i][kk], b1);
            }
        }
    }
}
/* The same for one m16 tile (the backward kernels). */
template <int HD, int NT>
static __device__ __forceinline__ void mma_rows_dot(float (&acc)[NT][4], const bf16x2 (&a)[AttCfg<HD>::KSTEPS][4],
                                                    const bf16 *b) {
    mma_rows_dot_mt<HD, NT, 1>(reinterpret_cast<float(&)[1][NT][4]>(acc),
                               reinterpret_cast<const bf16x2(&)[1][AttCfg<HD>::KSTEPS][4]>(a), b);
}

/* acc[i] (16 x head_dim) += P_i B for the warp's MT m16 tiles: P_i the tile's 16 x NT*8 score
 * fragments (rounded to bf16 here), B the first NT*8 rows of shared tile b, summed over those
 * rows in order. Each B fragment is read once for all MT tiles. */
template <int HD, int NT, int MT>
static __device__ __forceinline__ void mma_p_rows_mt(float (&acc)[MT][AttCfg<HD>::HD_NT][4],
                                                     const float (&p)[MT][NT][4], const bf16 *b) {
    using C = AttCfg<HD>;
    const int lane = threadIdx.x & 31;
    const bf16 *base = b + ((lane & 7) + ((lane >> 3) & 1) * 8) * C::LD + (lane >> 4) * 8;
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        bf16x2 a[MT][4];
#pragma unroll
        for (int i = 0; i < MT; i++) {
            a[i][0] = pack_bf16x2(p[i][2 * kk][0], p[i][2 * kk][1]);
            a[i][1] = pack_bf16x2(p[i][2 * kk][2], p[i][2 * kk][3]);
            a[i][2] = pack_bf16x2(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
            a[i][3] = pack_bf16x2(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < HD / 16; np++) {
            bf16x2 r[4];
            ldsm_x4_trans(r, base + kk * 16 * C::LD + np * 16);
            const bf16x2 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
            for (int i = 0; i < MT; i++) {
                mma_16816(acc[i][2 * np], a[i], b0);
                mma_16816(acc[i][2 * np + 1], a[i], b1);
            }
        }
    }
}
/* The same for one m16 tile (the backward kernels). */
template <int HD, int NT>
static __device__ __forceinline__ void mma_p_rows(float (&acc)[AttCfg<HD>::HD_NT][4], const float (&p)[NT][4],
                                                  const bf16 *b) {
    mma_p_rows_mt<HD, NT, 1>(reinterpret_cast<float(&)[1][AttCfg<HD>::HD_NT][4]>(acc),
                             reinterpret_cast<const float(&)[1][NT][4]>(p), b);
}

template <int N>
static __device__ __forceinline__ void zero_frags(float (&f)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) f[i][0] = f[i][1] = f[i][2] = f[i][3] = 0.0f;
}

/* Key tile t (keys [t*KT, t*KT + KT) of kv head column col0) into stage `stage` of the
 * double-buffered shared K and V tiles (forward and dq kernels). All threads call. */
template <int HD>
static __device__ __forceinline__ void stage_kv_tile(bf16 *Ks, bf16 *Vs, const bf16 *k, const bf16 *v, size_t ldk,
                                                     size_t ldv, size_t col0, int b, int t, int stage, int T) {
    constexpr int KT = AttCfg<HD>::KT;
    load_tile_async<HD, KT>(Ks + stage * KT * AttCfg<HD>::LD, k, ldk, col0, b, t * KT, T);
    load_tile_async<HD, KT>(Vs + stage * KT * AttCfg<HD>::LD, v, ldv, col0, b, t * KT, T);
}

/* One step of a double-buffered loop over n iterations: start the copies of iteration it + 1
 * (stage_next(it + 1, its stage)) and wait until iteration it's copies have landed. Every
 * thread calls; a barrier must follow before the tile is read. */
template <typename StageFn>
static __device__ __forceinline__ void pipeline_advance(int it, int n, StageFn &&stage_next) {
    if (it + 1 < n) {
        stage_next(it + 1, (it + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

/* The column (within an n8 tile) of fragment element e (0..3) of this lane: 2*(lane%4) + e%2. */
static __device__ __forceinline__ int frag_col(int e) { return 2 * (threadIdx.x & 3) + (e & 1); }

/* dst[8j + frag_col(e)] = scale * f[j][e] for the lane's row half (e = 2*half, 2*half+1), fp32. */
template <int N>
static __device__ __forceinline__ void store_row_frags(float *dst, const float (&f)[N][4], int half, float scale) {
#pragma unroll
    for (int j = 0; j < N; j++)
        *reinterpret_cast<float2 *>(dst + 8 * j + frag_col(0)) =
            make_float2(f[j][2 * half] * scale, f[j][2 * half + 1] * scale);
}

/* The same, rounded to bf16 (dv: its only consumer is the c_v product). */
template <int N>
static __device__ __forceinline__ void store_row_frags_bf16(bf16 *dst, const float (&f)[N][4], int half) {
#pragma unroll
    for (int j = 0; j < N; j++)
        *reinterpret_cast<bf16x2 *>(dst + 8 * j + frag_col(0)) = pack_bf16x2(f[j][2 * half], f[j][2 * half + 1]);
}

static __device__ __forceinline__ size_t stat_index(int b, int H, int h, int T, int t) {
    return ((size_t)b * H + h) * T + t;
}

/* ---- segments (packed documents) ----
 * seg_start [B*T] (device, or NULL: causal over the whole row): the first position of token t's
 * segment within its row; t sees keys seg_start[b*T + t] .. t. Segments are contiguous, so
 * seg_start is non-decreasing along a row. */

/* The segment start of row `row` of sequence b (rows past T read row T-1's: finite, never
 * stored); 0 without segments. */
static __device__ __forceinline__ int seg_start_of(const int32_t *seg, int b, int T, int row) {
    return seg ? seg[(size_t)b * T + min(row, T - 1)] : 0;
}

/* The end (exclusive) of the segment holding key `key` of sequence b: the first position after
 * key whose segment starts after key (seg_start is non-decreasing), T if none; T without
 * segments. A binary search of log2(T) reads, the same answer in every thread. */
static __device__ __forceinline__ int seg_end_of(const int32_t *seg, int b, int T, int key) {
    if (!seg) return T;
    const int32_t *s = seg + (size_t)b * T;
    int lo = key + 1, hi = T; /* the answer is in [lo, hi] */
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (s[mid] > key) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

static inline int check_shape(int T, int H, int KV, int hd, int ld_v, const void *v) {
    if (!cuda_attention_supported(hd))
        return ct_fail("cuda attention: head_dim %d is not supported (the kernels are built for 32, 64 and 128)", hd);
    if (KV <= 0 || H % KV != 0) return ct_fail("cuda attention: num_heads %d is not a multiple of num_kv_heads %d", H, KV);
    if (T <= 0) return ct_fail("cuda attention: sequence length %d", T);
    /* v's rows are copied in 16-byte pieces (cp.async) */
    if (ld_v < KV * hd || ld_v % 8 != 0 || ((uintptr_t)v & 15) != 0)
        return ct_fail("cuda attention: v's row stride %d must be a multiple of 8 elements, at least %d x %d, and v "
                       "16-byte aligned",
                       ld_v, KV, hd);
    return 0;
}

#endif
