/* cuda_attention_bwd.cu — the backward of the tensor-core causal GQA flash attention, optionally
 * within segments (packed documents): the dq kernel (query tiles, also makes D = rowsum(dy * y))
 * and the dk/dv kernel (key tiles, the GQA sum in head order), deterministic without atomics.
 * The scheme and shared helpers are in cuda_attention_common.cuh; the forward is
 * cuda_attention_fwd.cu. */
#include "cuda_attention_common.cuh"

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
                                 size_t ldv, const bf16 *y, const float *lse, const int32_t *seg, int T, int H,
                                 int KV, float scale, float scale_log2) {
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
    const int starts[2] = {seg_start_of(seg, b, T, rows[0]), seg_start_of(seg, b, T, rows[1])};
    /* key tiles from the block's smallest segment start (its first row's), as in the forward */
    const int kt0 = seg_start_of(seg, b, T, q0) / KT;
    const int n_tiles = (min(q0 + ATT_ROWS, T) - 1) / KT + 1 - kt0;

    auto stage_kv = [&](int it, int stage) {
        stage_kv_tile<HD>(Ks, Vs, k, v, ldk, ldv, (size_t)g * HD, b, kt0 + it, stage, T);
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
    for (int it = 0; it < n_tiles; it++) {
        const int stage = it & 1;
        pipeline_advance(it, n_tiles, stage_kv);
        __syncthreads();
        if (it == 0) { /* the first copies (q, dy, y tiles) have landed */
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
        const int k0 = (kt0 + it) * KT;
        const bool masked = k0 + KT > q0 || seg != nullptr;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = k0 + 8 * j + frag_col(e);
                const bool out = key > rows[e >> 1] || key < starts[e >> 1];
                const float p = masked && out ? 0.0f : exp2f(s[j][e] * scale_log2 - lse2[e >> 1]);
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
                                  const bf16 *v, size_t ldv, const float *lse, const float *D, const int32_t *seg,
                                  int T, int H, int KV, float scale, float scale_log2) {
    using C = AttCfg<HD>;
    constexpr int KT = C::KT, NT = C::NT;
    CT_DYNAMIC_SMEM(smem);
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);
    bf16 *Vs = Ks + ATT_ROWS * C::LD;
    bf16 *Qs = Vs + ATT_ROWS * C::LD; /* [2][KT * LD] */
    bf16 *dYs = Qs + 2 * KT * C::LD;  /* [2][KT * LD] */
    float *lse_s = reinterpret_cast<float *>(dYs + 2 * KT * C::LD); /* [2][KT], log2 domain */
    float *D_s = lse_s + 2 * KT;                                     /* [2][KT] */
    int *seg_s = reinterpret_cast<int *>(D_s + 2 * KT);              /* [2][KT] segment starts */
    const int k0 = blockIdx.x * ATT_ROWS, g = blockIdx.y, b = blockIdx.z;
    const int group = H / KV;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int keys[2] = {k0 + warp * 16 + (lane >> 2), k0 + warp * 16 + (lane >> 2) + 8};
    const int qt0 = k0 / KT;                 /* queries before k0 see none of the block's keys */
    /* nor do queries from the end of the segment of the block's last key on (T without segments) */
    const int q_end = seg_end_of(seg, b, T, min(k0 + ATT_ROWS, T) - 1);
    const int per_head = (q_end - 1) / KT + 1 - qt0;
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
            if (seg) seg_s[stage * KT + i] = t < T ? seg[(size_t)b * T + t] : 0;
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
        const int *seg_t = seg_s + stage * KT;
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
        /* some query of the tile precedes some key, or segments may mask some pairs */
        const bool masked = qs < k0 + ATT_ROWS || seg != nullptr;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = 8 * j + frag_col(e);
                const bool out = qs + c < keys[e >> 1] || (seg != nullptr && seg_t[c] > keys[e >> 1]);
                const float p = masked && out ? 0.0f : exp2f(st[j][e] * scale_log2 - lse_t[c]);
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

template <int HD>
static size_t dq_smem() {
    return (size_t)(3 * ATT_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16) + ATT_ROWS * sizeof(float);
}
template <int HD>
static size_t dkv_smem() {
    return (size_t)(2 * ATT_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16) +
           4 * AttCfg<HD>::KT * sizeof(float) + 2 * AttCfg<HD>::KT * sizeof(int);
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
        t->dq, D, dy, q, k, v, ldv, host_as_bf(t->y), t->lse, s->seg_start, T, H, KV, scale, scale_log2);
    CT_LAUNCHED("attention_backward_dq", stream);
    attention_backward_dkv_kernel<HD><<<grid_kv, ATT_THREADS, smem_kv, stream>>>(
        t->dk, host_as_bf(t->dv), dy, q, k, v, ldv, t->lse, D, s->seg_start, T, H, KV, scale, scale_log2);
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
