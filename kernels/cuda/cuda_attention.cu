/* cuda_attention.cu — causal grouped-query flash attention on tensor cores, forward and backward
 * (see cuda_attention.h; the pair of cpu_attention.c). bf16 q, k, v, y, dy; fp32 accumulation,
 * softmax and gradients; mma.sync m16n8k16 with ldmatrix and cp.async (cuda_mma.cuh), so it runs
 * on sm_80 and sm_90.
 *
 * Contents, in order:
 *   AttCfg, load_tile_async .. stat_index   tile shapes, copies and mma fragment helpers
 *   attention_forward_kernel                "forward"
 *   tile_row_dots, attention_backward_dq_kernel, attention_backward_dkv_kernel   "backward"
 *   cuda_attention_supported/_forward/_backward_scratch_floats/_backward, launch_*   "launchers"
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

/* ---- forward ---- */

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, size_t ldv, int T,
                             int H, int KV, float scale_log2) {
    using C = AttCfg<HD>;
    constexpr int KT = C::KT, NT = C::NT, MT = C::FWD_MT, ROWS = C::FWD_ROWS;
    CT_DYNAMIC_SMEM(smem);
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *Ks = Qs + ROWS * C::LD;   /* [2][KT * LD] */
    bf16 *Vs = Ks + 2 * KT * C::LD; /* [2][KT * LD] */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ROWS;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    /* warp w's m16 tile i: rows [q0 + 16 (w MT + i), + 16); this lane's two rows of it */
    int rows[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++) {
        rows[i][0] = q0 + 16 * (warp * MT + i) + (lane >> 2);
        rows[i][1] = rows[i][0] + 8;
    }
    const int n_tiles = (min(q0 + ROWS, T) - 1) / KT + 1; /* key tiles up to the last query */

    auto stage_kv = [&](int t, int stage) {
        stage_kv_tile<HD>(Ks, Vs, k, v, ldk, ldv, (size_t)g * HD, b, t, stage, T);
    };
    load_tile_async<HD, ROWS>(Qs, q, ldq, (size_t)h * HD, b, q0, T);
    stage_kv(0, 0);
    cp_async_commit();

    bf16x2 qf[MT][C::KSTEPS][4];
    float o[MT][C::HD_NT][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++) {
        zero_frags(o[i]);
        m[i][0] = m[i][1] = -INFINITY;
        l[i][0] = l[i][1] = 0.0f;
    }
    for (int kt = 0; kt < n_tiles; kt++) {
        const int stage = kt & 1;
        pipeline_advance(kt, n_tiles, stage_kv);
        __syncthreads();
        if (kt == 0)
#pragma unroll
            for (int i = 0; i < MT; i++) load_a_frags<HD>(qf[i], Qs, 16 * (warp * MT + i));
        float s[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; i++) zero_frags(s[i]);
        mma_rows_dot_mt<HD, NT, MT>(s, qf, Ks + stage * KT * C::LD);
        const int k0 = kt * KT;
        const bool masked = k0 + KT > q0; /* the tile crosses the diagonal: some key > some query */
#pragma unroll
        for (int i = 0; i < MT; i++) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + 8 * j + frag_col(e);
                    s[i][j][e] = masked && key > rows[i][e >> 1] ? -INFINITY : s[i][j][e] * scale_log2;
                }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < NT; j++) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(CT_FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(CT_FULL_MASK, mx, 2));
                const float m_new = fmaxf(m[i][r], mx); /* finite: every row sees key 0 in tile 0 */
                const float corr = exp2f(m[i][r] - m_new);
                m[i][r] = m_new;
                l[i][r] *= corr;
#pragma unroll
                for (int d = 0; d < C::HD_NT; d++) {
                    o[i][d][2 * r] *= corr;
                    o[i][d][2 * r + 1] *= corr;
                }
#pragma unroll
                for (int j = 0; j < NT; j++)
#pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; e++) {
                        s[i][j][e] = exp2f(s[i][j][e] - m_new);
                        l[i][r] += s[i][j][e];
                    }
            }
        }
        mma_p_rows_mt<HD, NT, MT>(o, s, Vs + stage * KT * C::LD);
        __syncthreads(); /* the next iteration's copy overwrites this stage */
    }
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[i][r] += __shfl_xor_sync(CT_FULL_MASK, l[i][r], 1);
            l[i][r] += __shfl_xor_sync(CT_FULL_MASK, l[i][r], 2);
            if (rows[i][r] < T) {
                const float inv = 1.0f / l[i][r];
                bf16 *dst = y + ((size_t)b * T + rows[i][r]) * ldq + (size_t)h * HD + frag_col(0);
#pragma unroll
                for (int d = 0; d < C::HD_NT; d++)
                    *reinterpret_cast<bf16x2 *>(dst + 8 * d) =
                        pack_bf16x2(o[i][d][2 * r] * inv, o[i][d][2 * r + 1] * inv);
                if (lse && (lane & 3) == 0)
                    lse[stat_index(b, H, h, T, rows[i][r])] = (m[i][r] + log2f(l[i][r])) * ATT_LN2;
            }
        }
}

/* ---- backward ---- */

/* D[r] = sum_d dy[r,d] * y[r,d] (fp32 of the bf16 values) for the ATT_ROWS rows of a block's dy
 * and y tiles in shared memory, into D_s and, for rows below T, the D of [B,H,T] that the dk/dv
 * kernel reads. Made by the dq kernel, which owns each query row once and has dy's tile already,
 * so D costs no pass of its own. Each lane takes 8 consecutive elements (one 16-byte load of
 * each), a row is HD/8 consecutive lanes; fixed order: the lane's 8 products in element order,
 * then a butterfly over the row's lanes. All threads call. */
template <int HD>
static __device__ __forceinline__ void tile_row_dots(float *D_s, float *D, const bf16 *dYs, const bf16 *Ys, int b,
                                                     int H, int h, int T, int q0) {
    using C = AttCfg<HD>;
    constexpr int LANES = HD / 8, ROWS_PER_PASS = ATT_THREADS / LANES;
    const int sub = threadIdx.x % LANES;
#pragma unroll
    for (int pass = 0; pass < ATT_ROWS / ROWS_PER_PASS; pass++) {
        const int r = pass * ROWS_PER_PASS + threadIdx.x / LANES;
        const Bf16V<8> a = ld_vec<8>(dYs + r * C::LD + 8 * sub), c = ld_vec<8>(Ys + r * C::LD + 8 * sub);
        float acc = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc = fmaf(from_bf16(a.v[e]), from_bf16(c.v[e]), acc);
#pragma unroll
        for (int o = LANES / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(CT_FULL_MASK, acc, o);
        if (sub == 0) {
            D_s[r] = acc;
            if (q0 + r < T) D[stat_index(b, H, h, T, q0 + r)] = acc;
        }
    }
}

/* At ptxas's default register budget for 128 threads (168) the head_dim 64 instance spills 8
 * bytes; a minimum of 2 blocks per SM lets it take the 220-226 registers it needs (sm_80 / sm_90,
 * docs/cuda.md's register table). */
#ifndef CT_ATT_DQ_MIN_BLOCKS
#define CT_ATT_DQ_MIN_BLOCKS 2
#endif

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS, CT_ATT_DQ_MIN_BLOCKS)
    attention_backward_dq_kernel(float *dq, float *D, const bf16 *dy, const bf16 *q, const bf16 *k, const bf16 *v,
                                 size_t ldv, const bf16 *y, const float *lse, int T, int H, int KV, float scale,
                                 float scale_log2) {
    using C = AttCfg<HD>;
    constexpr int KT = C::KT, NT = C::NT;
    CT_DYNAMIC_SMEM(smem);
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);
    bf16 *dYs = Qs + ATT_ROWS * C::LD;
    bf16 *Ys = dYs + ATT_ROWS * C::LD;
    bf16 *Ks = Ys + ATT_ROWS * C::LD; /* [2][KT * LD] */
    bf16 *Vs = Ks + 2 * KT * C::LD;   /* [2][KT * LD] */
    float *D_s = reinterpret_cast<float *>(Vs + 2 * KT * C::LD); /* [ATT_ROWS] */
    const int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_ROWS;
    const int h = blockIdx.y, b = blockIdx.z, g = h / (H / KV);
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int rows[2] = {q0 + warp * 16 + (lane >> 2), q0 + warp * 16 + (lane >> 2) + 8};
    const int n_tiles = (min(q0 + ATT_ROWS, T) - 1) / KT + 1;

    auto stage_kv = [&](int t, int stage) {
        stage_kv_tile<HD>(Ks, Vs, k, v, ldk, ldv, (size_t)g * HD, b, t, stage, T);
    };
    load_tile_async<HD, ATT_ROWS>(Qs, q, ldq, (size_t)h * HD, b, q0, T);
    load_tile_async<HD, ATT_ROWS>(dYs, dy, ldq, (size_t)h * HD, b, q0, T);
    load_tile_async<HD, ATT_ROWS>(Ys, y, ldq, (size_t)h * HD, b, q0, T);
    stage_kv(0, 0);
    cp_async_commit();

    float lse2[2], Dr[2]; /* rows past T read row T-1's lse and D = 0 (zero tiles): finite, never stored */
#pragma unroll
    for (int r = 0; r < 2; r++) lse2[r] = lse[stat_index(b, H, h, T, min(rows[r], T - 1))] * ATT_LOG2E;
    bf16x2 qf[C::KSTEPS][4], df[C::KSTEPS][4];
    float acc[C::HD_NT][4];
    zero_frags(acc);
    for (int kt = 0; kt < n_tiles; kt++) {
        const int stage = kt & 1;
        pipeline_advance(kt, n_tiles, stage_kv);
        __syncthreads();
        if (kt == 0) { /* the first copies (q, dy, y tiles) have landed */
            load_a_frags<HD>(qf, Qs, warp * 16);
            load_a_frags<HD>(df, dYs, warp * 16);
            tile_row_dots<HD>(D_s, D, dYs, Ys, b, H, h, T, q0);
            __syncthreads();
#pragma unroll
            for (int r = 0; r < 2; r++) Dr[r] = D_s[warp * 16 + (lane >> 2) + 8 * r];
        }
        const bf16 *Kt = Ks + stage * KT * C::LD, *Vt = Vs + stage * KT * C::LD;
        float s[NT][4], dp[NT][4];
        zero_frags(s);
        zero_frags(dp);
        mma_rows_dot<HD, NT>(s, qf, Kt);
        mma_rows_dot<HD, NT>(dp, df, Vt);
        const int k0 = kt * KT;
        const bool masked = k0 + KT > q0;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + frag_col(e);
                const float p = masked && key > rows[e >> 1] ? 0.0f : exp2f(s[j][e] * scale_log2 - lse2[e >> 1]);
                s[j][e] = p * (dp[j][e] - Dr[e >> 1]);
            }
        mma_p_rows<HD, NT>(acc, s, Kt); /* dq += dS K */
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (rows[r] < T) store_row_frags(dq + ((size_t)b * T + rows[r]) * ldq + (size_t)h * HD, acc, r, scale);
}

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(float *dk, bf16 *dv, const bf16 *dy, const bf16 *q, const bf16 *k,
                                  const bf16 *v, size_t ldv, const float *lse, const float *D, int T, int H, int KV,
                                  float scale, float scale_log2) {
    using C = AttCfg<HD>;
    constexpr int KT = C::KT, NT = C::NT;
    CT_DYNAMIC_SMEM(smem);
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + ATT_ROWS * C::LD;
    bf16 *Qs = Vs + ATT_ROWS * C::LD; /* [2][KT * LD] */
    bf16 *dYs = Qs + 2 * KT * C::LD;  /* [2][KT * LD] */
    float *lse_s = reinterpret_cast<float *>(dYs + 2 * KT * C::LD); /* [2][KT], log2 domain */
    float *D_s = lse_s + 2 * KT;                                     /* [2][KT] */
    const int k0 = blockIdx.x * ATT_ROWS, g = blockIdx.y, b = blockIdx.z;
    const int group = H / KV;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int keys[2] = {k0 + warp * 16 + (lane >> 2), k0 + warp * 16 + (lane >> 2) + 8};
    const int qt0 = k0 / KT;                 /* queries before k0 see none of the block's keys */
    const int per_head = (T - 1) / KT + 1 - qt0;
    const int n_iter = group * per_head;     /* (query head, query tile) pairs, head-major */

    /* Stage the Q, dy tiles and row statistics of iteration `it` (all threads; copies committed
     * by the caller, statistics written directly: rows past T get lse = +inf, so P = 0). */
    auto stage_queries = [&](int it, int stage) {
        const int h = g * group + it / per_head, qs = (qt0 + it % per_head) * KT;
        load_tile_async<HD, KT>(Qs + stage * KT * C::LD, q, ldq, (size_t)h * HD, b, qs, T);
        load_tile_async<HD, KT>(dYs + stage * KT * C::LD, dy, ldq, (size_t)h * HD, b, qs, T);
        for (int i = threadIdx.x; i < KT; i += ATT_THREADS) {
            const int t = qs + i;
            lse_s[stage * KT + i] = t < T ? lse[stat_index(b, H, h, T, t)] * ATT_LOG2E : INFINITY;
            D_s[stage * KT + i] = t < T ? D[stat_index(b, H, h, T, t)] : 0.0f;
        }
    };

    load_tile_async<HD, ATT_ROWS>(Ks, k, ldk, (size_t)g * HD, b, k0, T);
    load_tile_async<HD, ATT_ROWS>(Vs, v, ldv, (size_t)g * HD, b, k0, T);
    stage_queries(0, 0);
    cp_async_commit();

    float dka[C::HD_NT][4], dva[C::HD_NT][4];
    zero_frags(dka);
    zero_frags(dva);
    /* The warp's K and V fragments (A operands of S^T and dP^T) are read from shared memory once
     * and kept in registers where they fit (head_dim <= 64: 32 registers, within the 2 blocks
     * per SM the kernel runs at anyway); head_dim 128 reads them again every iteration. */
    constexpr bool KEEP_KV = HD <= 64;
    bf16x2 kf[C::KSTEPS][4], vf[C::KSTEPS][4];
    for (int it = 0; it < n_iter; it++) {
        const int stage = it & 1;
        pipeline_advance(it, n_iter, stage_queries);
        __syncthreads();
        const bf16 *Qt = Qs + stage * KT * C::LD, *dYt = dYs + stage * KT * C::LD;
        const float *lse_t = lse_s + stage * KT, *D_t = D_s + stage * KT;
        const int qs = (qt0 + it % per_head) * KT;
        float st[NT][4], dpt[NT][4];
        zero_frags(st);
        zero_frags(dpt);
        if (it == 0 || !KEEP_KV) { /* the block's K and V tiles have landed with iteration 0's copies */
            load_a_frags<HD>(kf, Ks, warp * 16);
            load_a_frags<HD>(vf, Vs, warp * 16);
        }
        mma_rows_dot<HD, NT>(st, kf, Qt);  /* S^T = K Q^T */
        mma_rows_dot<HD, NT>(dpt, vf, dYt); /* dP^T = V dy^T */
        const bool masked = qs < k0 + ATT_ROWS; /* some query of the tile precedes some key */
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * j + frag_col(e);
                const float p =
                    masked && qs + c < keys[e >> 1] ? 0.0f : exp2f(st[j][e] * scale_log2 - lse_t[c]);
                st[j][e] = p;
                dpt[j][e] = p * (dpt[j][e] - D_t[c]);
            }
        mma_p_rows<HD, NT>(dva, st, dYt); /* dV += P^T dy */
        mma_p_rows<HD, NT>(dka, dpt, Qt); /* dK += dS^T Q */
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        if (keys[r] < T) {
            const size_t row = (size_t)b * T + keys[r], col = (size_t)g * HD;
            store_row_frags(dk + row * ldk + col, dka, r, scale);
            store_row_frags_bf16(dv + row * ldv + col, dva, r);
        }
}

/* ---- launchers ---- */

extern "C" int cuda_attention_supported(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

static int check_shape(int T, int H, int KV, int hd, int ld_v, const void *v) {
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

template <int HD>
static size_t forward_smem() {
    return (size_t)(AttCfg<HD>::FWD_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16);
}
template <int HD>
static size_t dq_smem() {
    return (size_t)(3 * ATT_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16) + ATT_ROWS * sizeof(float);
}
template <int HD>
static size_t dkv_smem() {
    return (size_t)(2 * ATT_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16) +
           4 * AttCfg<HD>::KT * sizeof(float);
}

template <int HD>
static int launch_forward(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                          const CudaAttentionShape *s, cudaStream_t stream) {
    const size_t smem = forward_smem<HD>();
    CT_CUDA_TRY(cudaFuncSetAttribute(attention_forward_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem),
                "attention_forward: cudaFuncSetAttribute");
    const float scale_log2 = ATT_LOG2E / sqrtf((float)HD);
    dim3 grid(ct_blocks((size_t)s->T, AttCfg<HD>::FWD_ROWS), (unsigned)s->n_heads, (unsigned)s->B);
    attention_forward_kernel<HD><<<grid, ATT_THREADS, smem, stream>>>(y, lse, q, k, v, (size_t)s->ld_v, s->T,
                                                                      s->n_heads, s->n_kv_heads, scale_log2);
    CT_LAUNCHED("attention_forward", stream);
    return 0;
}

extern "C" int cuda_attention_forward(ct_bf16 *y, float *lse, const ct_bf16 *q, const ct_bf16 *k, const ct_bf16 *v,
                                      const CudaAttentionShape *shape, cudaStream_t stream) {
    const CudaAttentionShape *s = shape;
    if (s->B <= 0) return 0;
    if (check_shape(s->T, s->n_heads, s->n_kv_heads, s->head_dim, s->ld_v, v) != 0) return -1;
    bf16 *yb = host_as_bf(y);
    const bf16 *qb = host_as_bf(q), *kb = host_as_bf(k), *vb = host_as_bf(v);
    if (s->head_dim == 64) return launch_forward<64>(yb, lse, qb, kb, vb, s, stream);
    if (s->head_dim == 128) return launch_forward<128>(yb, lse, qb, kb, vb, s, stream);
    return launch_forward<32>(yb, lse, qb, kb, vb, s, stream);
}

extern "C" size_t cuda_attention_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

template <int HD>
static int launch_backward(const CudaAttentionBackward *t, const CudaAttentionShape *s, cudaStream_t stream) {
    const float scale = 1.0f / sqrtf((float)HD), scale_log2 = ATT_LOG2E / sqrtf((float)HD);
    const size_t smem_q = dq_smem<HD>(), smem_kv = dkv_smem<HD>();
    CT_CUDA_TRY(cudaFuncSetAttribute(attention_backward_dq_kernel<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem_q),
                "attention_backward_dq: cudaFuncSetAttribute");
    CT_CUDA_TRY(cudaFuncSetAttribute(attention_backward_dkv_kernel<HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv),
                "attention_backward_dkv: cudaFuncSetAttribute");
    const int T = s->T, H = s->n_heads, KV = s->n_kv_heads;
    const size_t ldv = (size_t)s->ld_v;
    const bf16 *dy = host_as_bf(t->dy), *q = host_as_bf(t->q), *k = host_as_bf(t->k), *v = host_as_bf(t->v);
    float *D = t->scratch;
    dim3 grid_q(ct_blocks((size_t)T, ATT_ROWS), (unsigned)H, (unsigned)s->B);
    dim3 grid_kv(ct_blocks((size_t)T, ATT_ROWS), (unsigned)KV, (unsigned)s->B);
    /* the dq kernel also makes D, which the dk/dv kernel reads: launched first, same stream */
    attention_backward_dq_kernel<HD><<<grid_q, ATT_THREADS, smem_q, stream>>>(
        t->dq, D, dy, q, k, v, ldv, host_as_bf(t->y), t->lse, T, H, KV, scale, scale_log2);
    CT_LAUNCHED("attention_backward_dq", stream);
    attention_backward_dkv_kernel<HD><<<grid_kv, ATT_THREADS, smem_kv, stream>>>(
        t->dk, host_as_bf(t->dv), dy, q, k, v, ldv, t->lse, D, T, H, KV, scale, scale_log2);
    CT_LAUNCHED("attention_backward_dkv", stream);
    return 0;
}

extern "C" int cuda_attention_backward(const CudaAttentionBackward *t, const CudaAttentionShape *shape,
                                       cudaStream_t stream) {
    const CudaAttentionShape *s = shape;
    if (s->B <= 0) return 0;
    if (check_shape(s->T, s->n_heads, s->n_kv_heads, s->head_dim, s->ld_v, t->v) != 0) return -1;
    if (((uintptr_t)t->dv & 3) != 0) return ct_fail("cuda attention: dv must be 4-byte aligned (bf16 pairs)");
    if (s->head_dim == 64) return launch_backward<64>(t, s, stream);
    if (s->head_dim == 128) return launch_backward<128>(t, s, stream);
    return launch_backward<32>(t, s, stream);
}
