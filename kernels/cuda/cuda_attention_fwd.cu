/* cuda_attention_fwd.cu — the forward of the tensor-core causal GQA flash attention, optionally
 * within segments (packed documents): online softmax over key tiles, y (bf16) and lse out. The
 * scheme, shared helpers and segment helpers are in cuda_attention_common.cuh; the backward is
 * cuda_attention_bwd.cu. */
#include "cuda_attention_common.cuh"

/* ---- forward ---- */

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(bf16 *y, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, size_t ldv,
                             const int32_t *seg, int T, int H, int KV, float scale_log2) {
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
    int rows[MT][2], starts[MT][2]; /* and their segment starts (0 without segments) */
#pragma unroll
    for (int i = 0; i < MT; i++) {
        rows[i][0] = q0 + 16 * (warp * MT + i) + (lane >> 2);
        rows[i][1] = rows[i][0] + 8;
        starts[i][0] = seg_start_of(seg, b, T, rows[i][0]);
        starts[i][1] = seg_start_of(seg, b, T, rows[i][1]);
    }
    /* key tiles from the one holding the block's smallest segment start (its first row's) up
     * to the last query: the tiles before it are masked for every row of the block */
    const int kt0 = seg_start_of(seg, b, T, q0) / KT;
    const int n_tiles = (min(q0 + ROWS, T) - 1) / KT + 1 - kt0;

    auto stage_kv = [&](int it, int stage) {
        stage_kv_tile<HD>(Ks, Vs, k, v, ldk, ldv, (size_t)g * HD, b, kt0 + it, stage, T);
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
    for (int it = 0; it < n_tiles; it++) {
        const int stage = it & 1;
        pipeline_advance(it, n_tiles, stage_kv);
        __syncthreads();
        if (it == 0)
#pragma unroll
            for (int i = 0; i < MT; i++) load_a_frags<HD>(qf[i], Qs, 16 * (warp * MT + i));
        float s[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; i++) zero_frags(s[i]);
        mma_rows_dot_mt<HD, NT, MT>(s, qf, Ks + stage * KT * C::LD);
        const int k0 = (kt0 + it) * KT;
        /* the tile crosses the diagonal (some key > some query), or segments may mask some keys */
        const bool masked = k0 + KT > q0 || seg != nullptr;
#pragma unroll
        for (int i = 0; i < MT; i++) {
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = k0 + 8 * j + frag_col(e);
                    s[i][j][e] = masked && (key > rows[i][e >> 1] || key < starts[i][e >> 1]) ? -INFINITY
                                                                                             : s[i][j][e] * scale_log2;
                }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < NT; j++) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(CT_FULL_MASK, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(CT_FULL_MASK, mx, 2));
                /* m_new is -inf only while a row has seen no key of its segment yet (its segment
                 * starts in a later tile than the block's first); exponents are then taken against
                 * 0 so that P = 0 and corr = 0 (not NaN). Without segments m_new is finite from
                 * the first tile (every row sees key 0), and m_ref = m_new: the same bits. */
                const float m_new = fmaxf(m[i][r], mx);
                const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
                const float corr = exp2f(m[i][r] - m_ref);
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
                        s[i][j][e] = exp2f(s[i][j][e] - m_ref);
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


/* ---- launcher ---- */

extern "C" int cuda_attention_supported(int head_dim) { return head_dim == 32 || head_dim == 64 || head_dim == 128; }

template <int HD>
static size_t forward_smem() {
    return (size_t)(AttCfg<HD>::FWD_ROWS + 4 * AttCfg<HD>::KT) * AttCfg<HD>::LD * sizeof(bf16);
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
    attention_forward_kernel<HD><<<grid, ATT_THREADS, smem, stream>>>(
        y, lse, q, k, v, (size_t)s->ld_v, s->seg_start, s->T, s->n_heads, s->n_kv_heads, scale_log2);
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
