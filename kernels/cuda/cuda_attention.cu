/* cuda_attention.cu — causal grouped-query flash attention, forward and backward, fp32 (see
 * cuda_ops.h). Written for obviousness first: SIMT fp32 arithmetic, no tensor cores.
 *
 * Layout and work split
 *  - q, y, dq, dy: [B*T, H*hd]; k, v, dk, dv: [B*T, KV*hd]; lse, D: [B, H, T].
 *  - A block has 128 threads = 64 rows (queries in the forward and dq kernels, keys in the dk/dv
 *    kernel) x 2 threads; thread `part` (0/1) owns channels [part*hd/2, (part+1)*hd/2) of its
 *    row in registers. A full dot product is the two halves' sequential fmaf chains added with
 *    one __shfl_xor (both threads get the identical sum: fp addition is commutative). Every
 *    kernel computes a score as ((own half + other half) * scale) with the same helper
 *    (pair_score), so the backward's P = exp(s - lse) uses scores bitwise equal to the forward's.
 *  - The other operand's 64-row tile sits in shared memory, each row stored as
 *    [half 0][4 floats padding][half 1] so the two halves of a broadcast read hit different banks.
 *  - Shuffles happen in block-uniform loops only (every lane executes them); causal masking and
 *    rows past T are per-thread predicates around the arithmetic that follows.
 *
 * Forward: block = (64-query tile, head, batch); loops over the key tiles up to the diagonal;
 *   per chunk of 16 keys: scores, chunk max, rescale (online softmax), accumulate P V.
 *   Writes y, optionally bf16(y), and lse = m + log(l).
 * Backward (deterministic, no atomics):
 *   1. D[b,h,t] = sum_d dy * y (one warp per row).
 *   2. dq kernel, block = (query tile, head, batch): loops over key tiles up to the diagonal,
 *      dq += scale * sum_j P_ij (dP_ij - D_i) k_j with dP_ij = dy_i . v_j.
 *   3. dk/dv kernel, block = (key tile, kv head, batch): loops over the group's query heads in
 *      head order and over the query tiles from the diagonal on, dv += P^T dy and
 *      dk += scale * dS^T q, so the GQA sum over query heads is a fixed-order register sum. */
#include "cuda_common.cuh"

enum { ATT_ROWS = 64, ATT_THREADS = 128, ATT_CHUNK = 16 };

template <int HD>
struct AttShape {
    static constexpr int HALF = HD / 2;
    static constexpr int STRIDE = HD + 4;       /* floats per shared-memory row */
    static constexpr int PART_OFFSET = HALF + 4; /* where half 1 starts in a row */
    static constexpr int VEC = HD / 4;           /* float4s per row */
};

/* Sequential fmaf chain over one half: a in registers, b in shared memory (16-byte aligned). */
template <int HALF>
static __device__ __forceinline__ float dot_half(const float (&a)[HALF], const float *b) {
    float acc = 0.0f;
#pragma unroll
    for (int d = 0; d < HALF; d += 4) {
        const float4 t = *reinterpret_cast<const float4 *>(b + d);
        acc = fmaf(a[d], t.x, acc);
        acc = fmaf(a[d + 1], t.y, acc);
        acc = fmaf(a[d + 2], t.z, acc);
        acc = fmaf(a[d + 3], t.w, acc);
    }
    return acc;
}

/* Both threads of a row pair get the full dot product, bitwise identical. */
static __device__ __forceinline__ float pair_sum(float partial) {
    return partial + __shfl_xor_sync(CT_FULL_MASK, partial, 1);
}

template <int HALF>
static __device__ __forceinline__ void load_half(float (&dst)[HALF], const float *src) {
#pragma unroll
    for (int d = 0; d < HALF; d += 4) {
        const float4 t = *reinterpret_cast<const float4 *>(src + d);
        dst[d] = t.x;
        dst[d + 1] = t.y;
        dst[d + 2] = t.z;
        dst[d + 3] = t.w;
    }
}

/* Load rows [row0, row0 + 64) of one head (column offset col0, row stride ld floats, rows of
 * batch b start at base + b*T*ld) into a padded shared tile; rows >= T are zero. */
template <int HD>
static __device__ __forceinline__ void load_tile(float *tile, const float *base, size_t ld, size_t col0, int b,
                                                 int row0, int T) {
    using S = AttShape<HD>;
    for (int idx = threadIdx.x; idx < ATT_ROWS * S::VEC; idx += ATT_THREADS) {
        const int rr = idx / S::VEC, cc = idx % S::VEC;
        const int row = row0 + rr;
        float4 val = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row < T) val = *reinterpret_cast<const float4 *>(base + ((size_t)b * T + row) * ld + col0 + 4 * cc);
        const int col = 4 * cc + (4 * cc >= S::HALF ? 4 : 0);
        *reinterpret_cast<float4 *>(tile + rr * S::STRIDE + col) = val;
    }
}

/* Score of a row pair, ((own half + other half) * scale); every lane must call (shuffle). */
template <int HALF>
static __device__ __forceinline__ float pair_score(const float (&a)[HALF], const float *b_half, float scale) {
    return pair_sum(dot_half<HALF>(a, b_half)) * scale;
}

/* acc[d] = fmaf(a, x[d], acc[d]) over one half, x in shared memory (16-byte aligned). */
template <int HALF>
static __device__ __forceinline__ void axpy_half(float (&acc)[HALF], float a, const float *x) {
#pragma unroll
    for (int d = 0; d < HALF; d += 4) {
        const float4 t = *reinterpret_cast<const float4 *>(x + d);
        acc[d] = fmaf(a, t.x, acc[d]);
        acc[d + 1] = fmaf(a, t.y, acc[d + 1]);
        acc[d + 2] = fmaf(a, t.z, acc[d + 2]);
        acc[d + 3] = fmaf(a, t.w, acc[d + 3]);
    }
}

/* Where one thread of a 64-row x 2-thread block works. Block = (row tile, head, batch): the rows
 * are queries of query head `head` in the forward and dq kernels, keys of kv head `head` in the
 * dk/dv kernel. Whether the row exists is att_active(th), computed where it is used: as a bool
 * member it changed nvcc's machine code. */
struct AttThread {
    int tile0;       /* first row of the block's tile */
    int head, b;     /* blockIdx.y, blockIdx.z */
    int part;        /* the half of the row's channels this thread owns */
    int row;         /* this thread's query (or key) position */
    int T;           /* sequence length */
    size_t ldq, ldk; /* row strides of q, y, dq, dy and of k, v, dk, dv */
};

template <int HD>
static __device__ __forceinline__ AttThread att_thread(int T, int H, int KV) {
    AttThread th;
    th.tile0 = blockIdx.x * ATT_ROWS;
    th.head = blockIdx.y;
    th.b = blockIdx.z;
    th.part = threadIdx.x & 1;
    th.row = th.tile0 + (threadIdx.x >> 1);
    th.T = T;
    th.ldq = (size_t)H * HD;
    th.ldk = (size_t)KV * HD;
    return th;
}

/* Whether the thread's row exists; a thread past T only takes part in the shuffles and barriers. */
static __device__ __forceinline__ bool att_active(const AttThread &th) { return th.row < th.T; }

/* The thread's row, or row 0 for a thread past T: its loads stay in bounds (it stores nothing). */
static __device__ __forceinline__ int clamped_row(const AttThread &th) { return att_active(th) ? th.row : 0; }

/* Offset of the thread's half of its clamped row in a [B*T, ld] tensor, head `head`. */
template <int HD>
static __device__ __forceinline__ size_t half_row_offset(const AttThread &th, size_t ld, int head) {
    return ((size_t)th.b * th.T + clamped_row(th)) * ld + (size_t)head * HD + th.part * (HD / 2);
}

/* Index of (b, h, t) in the [B, H, T] row statistics lse and D. */
static __device__ __forceinline__ size_t stat_index(int b, int H, int h, int T, int t) {
    return ((size_t)b * H + h) * T + t;
}

/* How many keys of the tile at k0 the thread's query sees (causal mask; 0 past T). */
static __device__ __forceinline__ int visible_keys(const AttThread &th, int k0) {
    return att_active(th) ? max(0, min(ATT_ROWS, th.row - k0 + 1)) : 0;
}

/* The thread's half of row 0 of a padded shared tile. */
template <int HD>
static __device__ __forceinline__ const float *tile_half(const float *tile, const AttThread &th) {
    return tile + th.part * AttShape<HD>::PART_OFFSET;
}

/* Key tile k0 (keys and values of the kv head that query head th.head reads) into shared
 * memory, between barriers: every thread calls, and the previous tile is no longer read when it
 * is overwritten. */
template <int HD>
static __device__ __forceinline__ void stage_kv_tile(float *Ks, float *Vs, const float *k, const float *v,
                                                     const AttThread &th, int H, int KV, int k0) {
    const int g = th.head / (H / KV);
    __syncthreads();
    load_tile<HD>(Ks, k, th.ldk, (size_t)g * HD, th.b, k0, th.T);
    load_tile<HD>(Vs, v, th.ldk, (size_t)g * HD, th.b, k0, th.T);
    __syncthreads();
}

/* ---- forward ---- */

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(float *y, __nv_bfloat16 *y_bf16, float *lse, const float *q, const float *k,
                             const float *v, int T, int H, int KV, float scale) {
    using S = AttShape<HD>;
    constexpr int HALF = S::HALF;
    __shared__ __align__(16) float Ks[ATT_ROWS * S::STRIDE];
    __shared__ __align__(16) float Vs[ATT_ROWS * S::STRIDE];
    const AttThread th = att_thread<HD>(T, H, KV);

    float qv[HALF], o[HALF];
    load_half<HALF>(qv, q + half_row_offset<HD>(th, th.ldq, th.head));
#pragma unroll
    for (int d = 0; d < HALF; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int q_last = min(th.tile0 + ATT_ROWS, T) - 1; /* last query of the block */
    for (int k0 = 0; k0 <= q_last; k0 += ATT_ROWS) {
        stage_kv_tile<HD>(Ks, Vs, k, v, th, H, KV, k0);
        const int n_valid = visible_keys(th, k0);
        const int n_tile = min(ATT_ROWS, q_last - k0 + 1); /* block-uniform */
        const float *k_half = tile_half<HD>(Ks, th), *v_half = tile_half<HD>(Vs, th);
        for (int c0 = 0; c0 < n_tile; c0 += ATT_CHUNK) {
            float s[ATT_CHUNK];
            float chunk_max = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < ATT_CHUNK; jj++) {
                const int j = c0 + jj; /* < ATT_ROWS: ATT_ROWS is a multiple of ATT_CHUNK */
                const float score = pair_score<HALF>(qv, k_half + j * S::STRIDE, scale); /* all lanes shuffle */
                s[jj] = j < n_valid ? score : -INFINITY;
                chunk_max = fmaxf(chunk_max, s[jj]);
            }
            if (chunk_max > -INFINITY) {
                const float m_new = fmaxf(m, chunk_max);
                const float corr = expf(m - m_new); /* 0 on the first visible chunk (m = -inf) */
                l *= corr;
#pragma unroll
                for (int d = 0; d < HALF; d++) o[d] *= corr;
#pragma unroll
                for (int jj = 0; jj < ATT_CHUNK; jj++) {
                    const float p = expf(s[jj] - m_new); /* 0 for masked keys */
                    l += p;
                    axpy_half<HALF>(o, p, v_half + (c0 + jj) * S::STRIDE);
                }
                m = m_new;
            }
        }
    }
    if (att_active(th)) {
        const size_t off = half_row_offset<HD>(th, th.ldq, th.head);
#pragma unroll
        for (int d = 0; d < HALF; d += 4) {
            float4 t;
            t.x = o[d] / l;
            t.y = o[d + 1] / l;
            t.z = o[d + 2] / l;
            t.w = o[d + 3] / l;
            *reinterpret_cast<float4 *>(y + off + d) = t;
            if (y_bf16) {
                y_bf16[off + d] = to_bf16(t.x);
                y_bf16[off + d + 1] = to_bf16(t.y);
                y_bf16[off + d + 2] = to_bf16(t.z);
                y_bf16[off + d + 3] = to_bf16(t.w);
            }
        }
        if (lse && th.part == 0) lse[stat_index(th.b, H, th.head, T, th.row)] = m + logf(l);
    }
}

extern "C" int cuda_attention_supported(int head_dim) { return head_dim == 32 || head_dim == 64; }

static int check_shape(int T, int H, int KV, int hd) {
    if (!cuda_attention_supported(hd))
        return ct_fail("cuda attention: head_dim %d is not supported (the kernels are built for 32 and 64)", hd);
    if (KV <= 0 || H % KV != 0) return ct_fail("cuda attention: num_heads %d is not a multiple of num_kv_heads %d", H, KV);
    if (T <= 0) return ct_fail("cuda attention: sequence length %d", T);
    return 0;
}

extern "C" int cuda_attention_forward(float *y, ct_bf16 *y_bf16, float *lse, const float *q, const float *k,
                                      const float *v, int B, int T, int n_heads, int n_kv_heads, int head_dim,
                                      cudaStream_t stream) {
    if (B <= 0) return 0;
    if (check_shape(T, n_heads, n_kv_heads, head_dim) != 0) return -1;
    const float scale = 1.0f / sqrtf((float)head_dim);
    dim3 grid(ct_blocks((size_t)T, ATT_ROWS), (unsigned)n_heads, (unsigned)B);
    if (head_dim == 64)
        attention_forward_kernel<64><<<grid, ATT_THREADS, 0, stream>>>(y, host_as_bf(y_bf16), lse, q, k, v, T,
                                                                       n_heads, n_kv_heads, scale);
    else
        attention_forward_kernel<32><<<grid, ATT_THREADS, 0, stream>>>(y, host_as_bf(y_bf16), lse, q, k, v, T,
                                                                       n_heads, n_kv_heads, scale);
    CT_LAUNCHED("attention_forward", stream);
    return 0;
}

/* ---- backward ---- */

extern "C" size_t cuda_attention_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

enum { DOT_THREADS = 256, DOT_WARPS = DOT_THREADS / 32 };

/* D[b,h,t] = sum_d dy[b,t,h,d] * y[b,t,h,d]: one warp per (token, head). */
static __global__ void __launch_bounds__(DOT_THREADS)
    attention_rowdot_kernel(float *D, const float *dy, const float *y, int T, int H, int hd, size_t rows) {
    const size_t w = (size_t)blockIdx.x * DOT_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (w >= rows) return;
    const float *a = dy + w * hd, *c = y + w * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc = fmaf(a[d], c[d], acc);
    acc = warp_sum(acc);
    const size_t n = w / (size_t)H;
    const int h = (int)(w % (size_t)H);
    const size_t b = n / (size_t)T, t = n % (size_t)T;
    if (lane == 0) D[(b * H + h) * T + t] = acc;
}

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dq_kernel(float *dq, const float *dy, const float *q, const float *k, const float *v,
                                 const float *lse, const float *D, int T, int H, int KV, float scale) {
    using S = AttShape<HD>;
    constexpr int HALF = S::HALF;
    __shared__ __align__(16) float Ks[ATT_ROWS * S::STRIDE];
    __shared__ __align__(16) float Vs[ATT_ROWS * S::STRIDE];
    const AttThread th = att_thread<HD>(T, H, KV);
    const size_t row_off = half_row_offset<HD>(th, th.ldq, th.head);

    float qv[HALF], dov[HALF], acc[HALF];
    load_half<HALF>(qv, q + row_off);
    load_half<HALF>(dov, dy + row_off);
#pragma unroll
    for (int d = 0; d < HALF; d++) acc[d] = 0.0f;
    const size_t stat = stat_index(th.b, H, th.head, T, clamped_row(th));
    const float lse_i = lse[stat], D_i = D[stat];

    const int q_last = min(th.tile0 + ATT_ROWS, T) - 1;
    for (int k0 = 0; k0 <= q_last; k0 += ATT_ROWS) {
        stage_kv_tile<HD>(Ks, Vs, k, v, th, H, KV, k0);
        const int n_valid = visible_keys(th, k0);
        const int n_tile = min(ATT_ROWS, q_last - k0 + 1);
        const float *k_half = tile_half<HD>(Ks, th), *v_half = tile_half<HD>(Vs, th);
        for (int j = 0; j < n_tile; j++) {
            const float s = pair_score<HALF>(qv, k_half + j * S::STRIDE, scale);
            const float dp = pair_sum(dot_half<HALF>(dov, v_half + j * S::STRIDE));
            if (j < n_valid) {
                const float p = expf(s - lse_i);
                const float ds = p * (dp - D_i);
                axpy_half<HALF>(acc, ds, k_half + j * S::STRIDE);
            }
        }
    }
    if (att_active(th)) {
        float *dst = dq + row_off;
#pragma unroll
        for (int d = 0; d < HALF; d++) dst[d] = dst[d] + acc[d] * scale;
    }
}

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_backward_dkv_kernel(float *dk, float *dv, const float *dy, const float *q, const float *k,
                                  const float *v, const float *lse, const float *D, int T, int H, int KV,
                                  float scale) {
    using S = AttShape<HD>;
    constexpr int HALF = S::HALF;
    __shared__ __align__(16) float Qs[ATT_ROWS * S::STRIDE];
    __shared__ __align__(16) float dYs[ATT_ROWS * S::STRIDE];
    __shared__ float lse_s[ATT_ROWS], D_s[ATT_ROWS];
    const AttThread th = att_thread<HD>(T, H, KV);
    const int k0 = th.tile0, g = th.head, b = th.b, kj = th.row; /* key tile, kv head, batch, key */
    const int group = H / KV;
    const size_t row_off = half_row_offset<HD>(th, th.ldk, g);

    float kv[HALF], vv[HALF], dk_acc[HALF], dv_acc[HALF];
    load_half<HALF>(kv, k + row_off);
    load_half<HALF>(vv, v + row_off);
#pragma unroll
    for (int d = 0; d < HALF; d++) {
        dk_acc[d] = 0.0f;
        dv_acc[d] = 0.0f;
    }
    const float *q_half = tile_half<HD>(Qs, th), *dy_half = tile_half<HD>(dYs, th);

    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        /* queries before k0 see none of this tile's keys: start at the diagonal tile */
        for (int q0 = k0; q0 < T; q0 += ATT_ROWS) {
            __syncthreads();
            load_tile<HD>(Qs, q, th.ldq, (size_t)h * HD, b, q0, T);
            load_tile<HD>(dYs, dy, th.ldq, (size_t)h * HD, b, q0, T);
            for (int i = threadIdx.x; i < ATT_ROWS; i += ATT_THREADS) {
                const int row = q0 + i;
                const size_t stat = stat_index(b, H, h, T, row);
                lse_s[i] = row < T ? lse[stat] : 0.0f;
                D_s[i] = row < T ? D[stat] : 0.0f;
            }
            __syncthreads();
            const int n_q = min(ATT_ROWS, T - q0); /* block-uniform */
            for (int i = 0; i < n_q; i++) {
                const float s = pair_score<HALF>(kv, q_half + i * S::STRIDE, scale);
                const float dp = pair_sum(dot_half<HALF>(vv, dy_half + i * S::STRIDE));
                if (att_active(th) && q0 + i >= kj) {
                    const float p = expf(s - lse_s[i]);
                    const float ds = p * (dp - D_s[i]);
                    axpy_half<HALF>(dv_acc, p, dy_half + i * S::STRIDE);
                    axpy_half<HALF>(dk_acc, ds, q_half + i * S::STRIDE);
                }
            }
        }
    }
    if (att_active(th)) {
        float *dkr = dk + row_off, *dvr = dv + row_off;
#pragma unroll
        for (int d = 0; d < HALF; d++) {
            dkr[d] = dkr[d] + dk_acc[d] * scale;
            dvr[d] = dvr[d] + dv_acc[d];
        }
    }
}

extern "C" int cuda_attention_backward(float *dq, float *dk, float *dv, const float *dy, const float *q,
                                       const float *k, const float *v, const float *y, const float *lse, int B, int T,
                                       int n_heads, int n_kv_heads, int head_dim, float *scratch,
                                       cudaStream_t stream) {
    if (B <= 0) return 0;
    if (check_shape(T, n_heads, n_kv_heads, head_dim) != 0) return -1;
    const float scale = 1.0f / sqrtf((float)head_dim);
    float *D = scratch;
    const size_t rows = (size_t)B * T * n_heads;
    attention_rowdot_kernel<<<ct_blocks(rows, DOT_WARPS), DOT_THREADS, 0, stream>>>(D, dy, y, T, n_heads, head_dim,
                                                                                     rows);
    CT_LAUNCHED("attention_backward_rowdot", stream);
    dim3 grid_q(ct_blocks((size_t)T, ATT_ROWS), (unsigned)n_heads, (unsigned)B);
    dim3 grid_kv(ct_blocks((size_t)T, ATT_ROWS), (unsigned)n_kv_heads, (unsigned)B);
    if (head_dim == 64) {
        attention_backward_dq_kernel<64><<<grid_q, ATT_THREADS, 0, stream>>>(dq, dy, q, k, v, lse, D, T, n_heads,
                                                                             n_kv_heads, scale);
        CT_LAUNCHED("attention_backward_dq", stream);
        attention_backward_dkv_kernel<64><<<grid_kv, ATT_THREADS, 0, stream>>>(dk, dv, dy, q, k, v, lse, D, T,
                                                                               n_heads, n_kv_heads, scale);
        CT_LAUNCHED("attention_backward_dkv", stream);
    } else {
        attention_backward_dq_kernel<32><<<grid_q, ATT_THREADS, 0, stream>>>(dq, dy, q, k, v, lse, D, T, n_heads,
                                                                             n_kv_heads, scale);
        CT_LAUNCHED("attention_backward_dq", stream);
        attention_backward_dkv_kernel<32><<<grid_kv, ATT_THREADS, 0, stream>>>(dk, dv, dy, q, k, v, lse, D, T,
                                                                               n_heads, n_kv_heads, scale);
        CT_LAUNCHED("attention_backward_dkv", stream);
    }
    return 0;
}
