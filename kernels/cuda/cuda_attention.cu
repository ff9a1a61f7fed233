/* cuda_attention.cu — causal grouped-query flash attention, forward and backward, fp32 (see
 * cuda_ops.h). Written for obviousness first: SIMT fp32 arithmetic, no tensor cores.
 *
 * Layout and work split
 *  - q, y, dq, dy: [B*T, H*hd]; k, v, dk, dv: [B*T, KV*hd]; lse, D: [B, H, T].
 *  - A block has 128 threads = 64 rows (queries in the forward and dq kernels, keys in the dk/dv
 *    kernel) x 2 threads; thread `part` (0/1) owns channels [part*hd/2, (part+1)*hd/2) of its
 *    row in registers. A full dot product is the two halves' sequential fmaf chains added with
 *    one __shfl_xor (both threads get the identical sum: fp addition is commutative). Every
 *    kernel computes a score as ((own half + other half) * scale) with the same helper, so the
 *    backward's P = exp(s - lse) uses scores bitwise equal to the forward's.
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

/* ---- forward ---- */

template <int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(float *y, __nv_bfloat16 *y_bf16, float *lse, const float *q, const float *k,
                             const float *v, int T, int H, int KV, float scale) {
    using S = AttShape<HD>;
    constexpr int HALF = S::HALF;
    __shared__ __align__(16) float Ks[ATT_ROWS * S::STRIDE];
    __shared__ __align__(16) float Vs[ATT_ROWS * S::STRIDE];
    const int q0 = blockIdx.x * ATT_ROWS, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (H / KV);
    const int part = threadIdx.x & 1;
    const int qi = q0 + (threadIdx.x >> 1);
    const bool active = qi < T;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;

    float qv[HALF], o[HALF];
    load_half<HALF>(qv, q + ((size_t)b * T + (active ? qi : 0)) * ldq + (size_t)h * HD + part * HALF);
#pragma unroll
    for (int d = 0; d < HALF; d++) o[d] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int q_last = min(q0 + ATT_ROWS, T) - 1; /* last query of the block */
    for (int k0 = 0; k0 <= q_last; k0 += ATT_ROWS) {
        __syncthreads(); /* the previous tile is no longer read */
        load_tile<HD>(Ks, k, ldk, (size_t)g * HD, b, k0, T);
        load_tile<HD>(Vs, v, ldk, (size_t)g * HD, b, k0, T);
        __syncthreads();
        const int n_valid = active ? max(0, min(ATT_ROWS, qi - k0 + 1)) : 0; /* keys this query sees */
        const int n_tile = min(ATT_ROWS, q_last - k0 + 1);                  /* block-uniform */
        const float *k_half = Ks + part * S::PART_OFFSET;
        const float *v_half = Vs + part * S::PART_OFFSET;
        for (int c0 = 0; c0 < n_tile; c0 += ATT_CHUNK) {
            float s[ATT_CHUNK];
            float chunk_max = -INFINITY;
#pragma unroll
            for (int jj = 0; jj < ATT_CHUNK; jj++) {
                const int j = c0 + jj; /* < ATT_ROWS: ATT_ROWS is a multiple of ATT_CHUNK */
                const float full = pair_sum(dot_half<HALF>(qv, k_half + j * S::STRIDE));
                s[jj] = j < n_valid ? full * scale : -INFINITY;
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
                    const float *vr = v_half + (c0 + jj) * S::STRIDE;
#pragma unroll
                    for (int d = 0; d < HALF; d += 4) {
                        const float4 t = *reinterpret_cast<const float4 *>(vr + d);
                        o[d] = fmaf(p, t.x, o[d]);
                        o[d + 1] = fmaf(p, t.y, o[d + 1]);
                        o[d + 2] = fmaf(p, t.z, o[d + 2]);
                        o[d + 3] = fmaf(p, t.w, o[d + 3]);
                    }
                }
                m = m_new;
            }
        }
    }
    if (active) {
        const size_t off = ((size_t)b * T + qi) * ldq + (size_t)h * HD + part * HALF;
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
        if (lse && part == 0) lse[((size_t)b * H + h) * T + qi] = m + logf(l);
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
    const int q0 = blockIdx.x * ATT_ROWS, h = blockIdx.y, b = blockIdx.z;
    const int g = h / (H / KV);
    const int part = threadIdx.x & 1;
    const int qi = q0 + (threadIdx.x >> 1);
    const bool active = qi < T;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const size_t row_off = ((size_t)b * T + (active ? qi : 0)) * ldq + (size_t)h * HD + part * HALF;

    float qv[HALF], dov[HALF], acc[HALF];
    load_half<HALF>(qv, q + row_off);
    load_half<HALF>(dov, dy + row_off);
#pragma unroll
    for (int d = 0; d < HALF; d++) acc[d] = 0.0f;
    const size_t stat = ((size_t)b * H + h) * T + (active ? qi : 0);
    const float lse_i = lse[stat], D_i = D[stat];

    const int q_last = min(q0 + ATT_ROWS, T) - 1;
    for (int k0 = 0; k0 <= q_last; k0 += ATT_ROWS) {
        __syncthreads();
        load_tile<HD>(Ks, k, ldk, (size_t)g * HD, b, k0, T);
        load_tile<HD>(Vs, v, ldk, (size_t)g * HD, b, k0, T);
        __syncthreads();
        const int n_valid = active ? max(0, min(ATT_ROWS, qi - k0 + 1)) : 0;
        const int n_tile = min(ATT_ROWS, q_last - k0 + 1);
        const float *k_half = Ks + part * S::PART_OFFSET;
        const float *v_half = Vs + part * S::PART_OFFSET;
        for (int j = 0; j < n_tile; j++) {
            const float s = pair_sum(dot_half<HALF>(qv, k_half + j * S::STRIDE)) * scale;
            const float dp = pair_sum(dot_half<HALF>(dov, v_half + j * S::STRIDE));
            if (j < n_valid) {
                const float p = expf(s - lse_i);
                const float ds = p * (dp - D_i);
                const float *kr = k_half + j * S::STRIDE;
#pragma unroll
                for (int d = 0; d < HALF; d += 4) {
                    const float4 t = *reinterpret_cast<const float4 *>(kr + d);
                    acc[d] = fmaf(ds, t.x, acc[d]);
                    acc[d + 1] = fmaf(ds, t.y, acc[d + 1]);
                    acc[d + 2] = fmaf(ds, t.z, acc[d + 2]);
                    acc[d + 3] = fmaf(ds, t.w, acc[d + 3]);
                }
            }
        }
    }
    if (active) {
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
    const int k0 = blockIdx.x * ATT_ROWS, g = blockIdx.y, b = blockIdx.z;
    const int group = H / KV;
    const int part = threadIdx.x & 1;
    const int kj = k0 + (threadIdx.x >> 1);
    const bool active = kj < T;
    const size_t ldq = (size_t)H * HD, ldk = (size_t)KV * HD;
    const size_t row_off = ((size_t)b * T + (active ? kj : 0)) * ldk + (size_t)g * HD + part * HALF;

    float kv[HALF], vv[HALF], dk_acc[HALF], dv_acc[HALF];
    load_half<HALF>(kv, k + row_off);
    load_half<HALF>(vv, v + row_off);
#pragma unroll
    for (int d = 0; d < HALF; d++) {
        dk_acc[d] = 0.0f;
        dv_acc[d] = 0.0f;
    }
    const float *q_half = Qs + part * S::PART_OFFSET;
    const float *dy_half = dYs + part * S::PART_OFFSET;

    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        /* queries before k0 see none of this tile's keys: start at the diagonal tile */
        for (int q0 = k0; q0 < T; q0 += ATT_ROWS) {
            __syncthreads();
            load_tile<HD>(Qs, q, ldq, (size_t)h * HD, b, q0, T);
            load_tile<HD>(dYs, dy, ldq, (size_t)h * HD, b, q0, T);
            for (int i = threadIdx.x; i < ATT_ROWS; i += ATT_THREADS) {
                const int row = q0 + i;
                const size_t stat = ((size_t)b * H + h) * T + row;
                lse_s[i] = row < T ? lse[stat] : 0.0f;
                D_s[i] = row < T ? D[stat] : 0.0f;
            }
            __syncthreads();
            const int n_q = min(ATT_ROWS, T - q0); /* block-uniform */
            for (int i = 0; i < n_q; i++) {
                const float s = pair_sum(dot_half<HALF>(kv, q_half + i * S::STRIDE)) * scale;
                const float dp = pair_sum(dot_half<HALF>(vv, dy_half + i * S::STRIDE));
                if (active && q0 + i >= kj) {
                    const float p = expf(s - lse_s[i]);
                    const float ds = p * (dp - D_s[i]);
                    const float *qr = q_half + i * S::STRIDE;
                    const float *dyr = dy_half + i * S::STRIDE;
#pragma unroll
                    for (int d = 0; d < HALF; d += 4) {
                        const float4 tq = *reinterpret_cast<const float4 *>(qr + d);
                        const float4 ty = *reinterpret_cast<const float4 *>(dyr + d);
                        dv_acc[d] = fmaf(p, ty.x, dv_acc[d]);
                        dv_acc[d + 1] = fmaf(p, ty.y, dv_acc[d + 1]);
                        dv_acc[d + 2] = fmaf(p, ty.z, dv_acc[d + 2]);
                        dv_acc[d + 3] = fmaf(p, ty.w, dv_acc[d + 3]);
                        dk_acc[d] = fmaf(ds, tq.x, dk_acc[d]);
                        dk_acc[d + 1] = fmaf(ds, tq.y, dk_acc[d + 1]);
                        dk_acc[d + 2] = fmaf(ds, tq.z, dk_acc[d + 2]);
                        dk_acc[d + 3] = fmaf(ds, tq.w, dk_acc[d + 3]);
                    }
                }
            }
        }
    }
    if (active) {
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
