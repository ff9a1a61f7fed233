/* cuda_rope.cu — fused QK-norm + RoPE + gain, forward and backward (see cuda_rope.h, and
 * cpu_attention.h for the math; the pair of cpu_rope.c). A warp owns ROPE_ROWS_PER_WARP consecutive
 * (token, head) vectors and issues all their loads before any reduction, so enough bytes are in
 * flight to keep the memory busy (one vector of 64 fp32 per warp left it at ~1.3 TB/s on an H100).
 * Lane l holds the pairs i = l, l+32, ... of the hd/2 pairs of a head (PAIRS of them, a template
 * parameter: hd <= 256), so the rotation needs no data exchange and the two dot products are one
 * warp butterfly each. With full RoPE (rope_dims = hd) pair i is the rotated (i, i + hd/2). With
 * partial RoPE (the record's rope_dims < hd; kernels instantiated with PARTIAL, so the full-RoPE
 * ones are the code they were before it) the first rope_dims/2 pairs are the rotated (i, i +
 * rope_dims/2) and the others split the unrotated tail [rope_dims, hd) in two halves the same
 * way, (rope_dims + j, rope_dims + j + (hd - rope_dims)/2): every element in exactly one pair.
 * The element-wise fp32 operations are the CPU op's, with explicit roundings.
 * dgain: per-(token, head) partials, then the fixed-order column reduction over tokens. The c_q/c_k
 * output (in) and the input gradients (din, din_bf16) may be column blocks of wider rows (the
 * backend keeps c_q, c_k and c_v's outputs side by side, one product for the three): `ld` elements
 * per token; the other tensors are whole [B*T, heads*hd]. */
#include <float.h>

#include "cuda_common.cuh"
#include "cuda_rope.h"

enum { ROPE_THREADS = 256, ROPE_WARPS = ROPE_THREADS / 32, ROPE_ROWS_PER_WARP = 4, ROPE_MAX_PAIRS = 4 };

/* The calling warp's first row of the [B*T*n_heads, head_dim] tensors (row = token * n_heads + head). */
static __device__ __forceinline__ size_t rope_first_row() {
    return ((size_t)blockIdx.x * ROPE_WARPS + (threadIdx.x >> 5)) * ROPE_ROWS_PER_WARP;
}

/* Element offset of row w (= token * n_heads + head) in a tensor of ld elements per token. */
static __device__ __forceinline__ size_t rope_row_offset(size_t w, int n_heads, int head_dim, size_t ld) {
    return (w / (size_t)n_heads) * ld + (w % (size_t)n_heads) * (size_t)head_dim;
}

/* The RoPE table row and head of row w. */
static __device__ __forceinline__ void rope_place(size_t w, int T, int n_heads, int *t, int *h) {
    *h = (int)(w % (size_t)n_heads);
    *t = (int)((w / (size_t)n_heads) % (size_t)T);
}

/* The two elements of pair i < hd/2 = half, rhalf = rope_dims/2 (half when not PARTIAL): the
 * rotated (i, i + rhalf) for i < rhalf, else (i + rhalf, i + half), the unrotated tail's halves. */
template <bool PARTIAL>
static __device__ __forceinline__ int pair_first(int i, int rhalf) {
    return PARTIAL && i >= rhalf ? i + rhalf : i;
}
template <bool PARTIAL>
static __device__ __forceinline__ int pair_second(int i, int rhalf, int half) {
    return PARTIAL && i >= rhalf ? i + half : i + rhalf;
}

/* The lane's pairs of row x (fp32 or bf16) into x1, x2 (0 past the hd/2 pairs, or for a row past
 * the end). */
template <int PAIRS, bool PARTIAL, typename T>
static __device__ __forceinline__ void load_pairs(float (&x1)[PAIRS], float (&x2)[PAIRS], const T *x, bool valid,
                                                  int half, int rhalf) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
        const int i = lane + 32 * k;
        x1[k] = valid && i < half ? as_f32(x[pair_first<PARTIAL>(i, rhalf)]) : 0.0f;
        x2[k] = valid && i < half ? as_f32(x[pair_second<PARTIAL>(i, rhalf, half)]) : 0.0f;
    }
}

/* r = 1/sqrt(mean(x^2) + eps) of a row loaded by load_pairs, the same bits in every lane. The
 * whole warp calls. */
template <int PAIRS>
static __device__ __forceinline__ float pairs_rstd(const float (&x1)[PAIRS], const float (&x2)[PAIRS], int head_dim) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < PAIRS; k++) ss += x1[k] * x1[k] + x2[k] * x2[k];
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / (float)head_dim + FLT_EPSILON);
}

template <int PAIRS, bool PARTIAL>
static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_forward_kernel(float *out, __nv_bfloat16 *out_bf16, const __nv_bfloat16 *in, const float *gain,
                                const float *cos_table, const float *sin_table, int T, int n_heads, int head_dim,
                                int rope_dims, size_t ld_in, size_t rows) {
    constexpr int R = ROPE_ROWS_PER_WARP;
    const size_t w0 = rope_first_row();
    if (w0 >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, half = head_dim / 2;
    const int rhalf = PARTIAL ? rope_dims / 2 : half;
    float x1[R][PAIRS], x2[R][PAIRS];
#pragma unroll
    for (int r = 0; r < R; r++)
        load_pairs<PAIRS, PARTIAL>(x1[r], x2[r],
                                   in + rope_row_offset(w0 + r < rows ? w0 + r : w0, n_heads, head_dim, ld_in),
                                   w0 + r < rows, half, rhalf);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t w = w0 + r;
        const float rs = pairs_rstd<PAIRS>(x1[r], x2[r], head_dim);
        if (w >= rows) continue; /* warp-uniform */
        int t, h;
        rope_place(w, T, n_heads, &t, &h);
        const float g = gain ? gain[h] : 1.0f;
        const float *cos_t = cos_table + (size_t)t * rhalf, *sin_t = sin_table + (size_t)t * rhalf;
        const size_t o = w * head_dim;
#pragma unroll
        for (int k = 0; k < PAIRS; k++) {
            const int i = lane + 32 * k;
            if (i < half) {
                float r1, r2;
                if (!PARTIAL || i < rhalf) {
                    const float c = cos_t[i], s = sin_t[i];
                    const float u1 = __fmul_rn(x1[r][k], rs), u2 = __fmul_rn(x2[r][k], rs);
                    r1 = __fmul_rn(__fadd_rn(__fmul_rn(u1, c), __fmul_rn(u2, s)), g);
                    r2 = __fmul_rn(__fsub_rn(__fmul_rn(u2, c), __fmul_rn(u1, s)), g);
                } else { /* partial RoPE's unrotated tail: x * r * g */
                    r1 = __fmul_rn(__fmul_rn(x1[r][k], rs), g);
                    r2 = __fmul_rn(__fmul_rn(x2[r][k], rs), g);
                }
                const int e1 = pair_first<PARTIAL>(i, rhalf), e2 = pair_second<PARTIAL>(i, rhalf, half);
                if (out) {
                    out[o + e1] = r1;
                    out[o + e2] = r2;
                }
                if (out_bf16) {
                    out_bf16[o + e1] = to_bf16(r1);
                    out_bf16[o + e2] = to_bf16(r2);
                }
            }
        }
    }
}

static int check_head_dim(int head_dim, int rope_dims) {
    if (head_dim % 2 != 0 || head_dim > 2 * 32 * ROPE_MAX_PAIRS)
        return ct_fail("qk_norm_rope: head_dim %d must be even and at most %d", head_dim, 2 * 32 * ROPE_MAX_PAIRS);
    if (rope_dims <= 0 || rope_dims % 2 != 0 || rope_dims > head_dim)
        return ct_fail("qk_norm_rope: rope_dims %d must be even and in [2, head_dim %d]", rope_dims, head_dim);
    return 0;
}

static int check_ld(int ld, int n_heads, int head_dim) {
    if (ld < n_heads * head_dim)
        return ct_fail("qk_norm_rope: a row stride of %d elements is below the %d x %d of a token's heads", ld, n_heads,
                       head_dim);
    return 0;
}

static unsigned rope_blocks(size_t rows) { return ct_blocks(rows, ROPE_WARPS * ROPE_ROWS_PER_WARP); }

/* One instantiation per PAIRS (from head_dim) and PARTIAL (rope_dims < head_dim). */
template <bool PARTIAL>
static void launch_rope_forward(unsigned blocks, cudaStream_t stream, float *out, __nv_bfloat16 *ob,
                                const __nv_bfloat16 *in, const float *gain, const float *cos_table,
                                const float *sin_table, int T, int n_heads, int head_dim, int rope_dims, size_t ld_in,
                                size_t rows) {
    if (head_dim <= 64)
        qk_norm_rope_forward_kernel<1, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            out, ob, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld_in, rows);
    else if (head_dim <= 128)
        qk_norm_rope_forward_kernel<2, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            out, ob, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld_in, rows);
    else
        qk_norm_rope_forward_kernel<4, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            out, ob, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld_in, rows);
}

extern "C" int cuda_qk_norm_rope_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *in_bf16, const float *gain,
                                         const CudaRopeShape *shape, cudaStream_t stream) {
    const int B = shape->B, T = shape->T, n_heads = shape->n_heads, head_dim = shape->head_dim;
    const int rope_dims = shape->rope_dims, ld_in = shape->ld;
    const float *cos_table = shape->cos_table, *sin_table = shape->sin_table;
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (check_head_dim(head_dim, rope_dims) != 0 || check_ld(ld_in, n_heads, head_dim) != 0) return -1;
    __nv_bfloat16 *ob = host_as_bf(out_bf16);
    const __nv_bfloat16 *in = host_as_bf(in_bf16);
    const unsigned blocks = rope_blocks(rows);
    if (rope_dims < head_dim)
        launch_rope_forward<true>(blocks, stream, out, ob, in, gain, cos_table, sin_table, T, n_heads, head_dim,
                                  rope_dims, (size_t)ld_in, rows);
    else
        launch_rope_forward<false>(blocks, stream, out, ob, in, gain, cos_table, sin_table, T, n_heads, head_dim,
                                   rope_dims, (size_t)ld_in, rows);
    CT_LAUNCHED("qk_norm_rope_forward", stream);
    return 0;
}

extern "C" size_t cuda_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

extern "C" size_t cuda_qk_norm_rope_backward_partials_doubles(int B, int T, int n_heads) {
    return cuda_colsum_doubles(B * T, n_heads, 1);
}

template <int PAIRS, bool PARTIAL>
static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_backward_kernel(float *din, __nv_bfloat16 *din_bf16, float *dgain_partial, const float *dout,
                                 const __nv_bfloat16 *in, const float *gain, const float *cos_table,
                                 const float *sin_table, int T, int n_heads, int head_dim, int rope_dims, size_t ld,
                                 size_t rows) {
    constexpr int R = ROPE_ROWS_PER_WARP;
    const size_t w0 = rope_first_row();
    if (w0 >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, half = head_dim / 2;
    const int rhalf = PARTIAL ? rope_dims / 2 : half;
    float x1[R][PAIRS], x2[R][PAIRS], g1[R][PAIRS], g2[R][PAIRS];
#pragma unroll
    for (int r = 0; r < R; r++) {
        load_pairs<PAIRS, PARTIAL>(x1[r], x2[r],
                                   in + rope_row_offset(w0 + r < rows ? w0 + r : w0, n_heads, head_dim, ld),
                                   w0 + r < rows, half, rhalf);
        load_pairs<PAIRS, PARTIAL>(g1[r], g2[r], dout + (w0 + r) * head_dim, w0 + r < rows, half, rhalf);
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t w = w0 + r;
        const float rs = pairs_rstd<PAIRS>(x1[r], x2[r], head_dim);
        int t, h;
        rope_place(w < rows ? w : w0, T, n_heads, &t, &h);
        const float g = gain ? gain[h] : 1.0f;
        const float *cos_t = cos_table + (size_t)t * rhalf, *sin_t = sin_table + (size_t)t * rhalf;
        float a1[PAIRS], a2[PAIRS], a_dot_u = 0.0f;
#pragma unroll
        for (int k = 0; k < PAIRS; k++) {
            const int i = lane + 32 * k;
            a1[k] = a2[k] = 0.0f;
            if (i < half) {
                /* a = R^T dout (the identity on partial RoPE's unrotated tail) */
                if (!PARTIAL || i < rhalf) {
                    const float c = cos_t[i], s = sin_t[i];
                    a1[k] = __fsub_rn(__fmul_rn(g1[r][k], c), __fmul_rn(g2[r][k], s));
                    a2[k] = __fadd_rn(__fmul_rn(g1[r][k], s), __fmul_rn(g2[r][k], c));
                } else {
                    a1[k] = g1[r][k];
                    a2[k] = g2[r][k];
                }
                x1[r][k] = __fmul_rn(x1[r][k], rs); /* from here on x holds u = x * r */
                x2[r][k] = __fmul_rn(x2[r][k], rs);
                a_dot_u += a1[k] * x1[r][k] + a2[k] * x2[r][k];
            }
        }
        a_dot_u = warp_sum(a_dot_u);
        if (w >= rows) continue; /* warp-uniform, after the warp's last shuffle of this row */
        /* The fp32 quotient g*a_dot_u / hd, computed in double and rounded once: that is exactly
         * the correctly rounded fp32 division (53 >= 2*24 + 2 bits), without the fp32 division's
         * slow-path call, which made ptxas spill on sm_80. */
        const float mean_du_u = (float)((double)__fmul_rn(g, a_dot_u) / (double)head_dim);
#pragma unroll
        for (int k = 0; k < PAIRS; k++) {
            const int i = lane + 32 * k;
            if (i < half) {
                const float d1 = __fmul_rn(rs, __fsub_rn(__fmul_rn(g, a1[k]), __fmul_rn(x1[r][k], mean_du_u)));
                const float d2 = __fmul_rn(rs, __fsub_rn(__fmul_rn(g, a2[k]), __fmul_rn(x2[r][k], mean_du_u)));
                const size_t row = rope_row_offset(w, n_heads, head_dim, ld);
                const size_t j = row + pair_first<PARTIAL>(i, rhalf), j2 = row + pair_second<PARTIAL>(i, rhalf, half);
                if (din) {
                    din[j] = __fadd_rn(din[j], d1);
                    din[j2] = __fadd_rn(din[j2], d2);
                }
                if (din_bf16) {
                    din_bf16[j] = to_bf16(d1);
                    din_bf16[j2] = to_bf16(d2);
                }
            }
        }
        if (dgain_partial && lane == 0) dgain_partial[w] = a_dot_u;
    }
}

template <bool PARTIAL>
static void launch_rope_backward(unsigned blocks, cudaStream_t stream, float *din, __nv_bfloat16 *db, float *part,
                                 const float *dout, const __nv_bfloat16 *in, const float *gain, const float *cos_table,
                                 const float *sin_table, int T, int n_heads, int head_dim, int rope_dims, size_t ld,
                                 size_t rows) {
    if (head_dim <= 64)
        qk_norm_rope_backward_kernel<1, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            din, db, part, dout, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld, rows);
    else if (head_dim <= 128)
        qk_norm_rope_backward_kernel<2, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            din, db, part, dout, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld, rows);
    else
        qk_norm_rope_backward_kernel<4, PARTIAL><<<blocks, ROPE_THREADS, 0, stream>>>(
            din, db, part, dout, in, gain, cos_table, sin_table, T, n_heads, head_dim, rope_dims, ld, rows);
}

extern "C" int cuda_qk_norm_rope_backward(float *din, ct_bf16 *din_bf16, float *dgain, const float *dout,
                                          const ct_bf16 *in_bf16, const float *gain, const CudaRopeShape *shape,
                                          float *scratch, double *partials, cudaStream_t stream) {
    const int B = shape->B, T = shape->T, n_heads = shape->n_heads, head_dim = shape->head_dim;
    const int rope_dims = shape->rope_dims, ld = shape->ld;
    const float *cos_table = shape->cos_table, *sin_table = shape->sin_table;
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (check_head_dim(head_dim, rope_dims) != 0 || check_ld(ld, n_heads, head_dim) != 0) return -1;
    if (dgain && (!gain || !scratch || !partials))
        return ct_fail("qk_norm_rope_backward: dgain needs gain, scratch and partials");
    __nv_bfloat16 *db = host_as_bf(din_bf16);
    const __nv_bfloat16 *in = host_as_bf(in_bf16);
    float *part = dgain ? scratch : nullptr;
    const unsigned blocks = rope_blocks(rows);
    if (rope_dims < head_dim)
        launch_rope_backward<true>(blocks, stream, din, db, part, dout, in, gain, cos_table, sin_table, T, n_heads,
                                   head_dim, rope_dims, (size_t)ld, rows);
    else
        launch_rope_backward<false>(blocks, stream, din, db, part, dout, in, gain, cos_table, sin_table, T, n_heads,
                                    head_dim, rope_dims, (size_t)ld, rows);
    CT_LAUNCHED("qk_norm_rope_backward", stream);
    /* scratch is [B*T, heads] row-major: dgain[h] += sum over tokens, fixed order */
    if (dgain) return cuda_colsum(dgain, scratch, NULL, B * T, n_heads, partials, stream);
    return 0;
}
