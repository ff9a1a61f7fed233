/* cuda_rope.cu — fused QK-norm + RoPE + gain, forward and backward (see cuda_rope.h, and
 * cpu_attention.h for the math; the pair of cpu_rope.c). A warp owns ROPE_ROWS_PER_WARP consecutive
 * (token, head) vectors and issues all their loads before any reduction, so enough bytes are in
 * flight to keep the memory busy (one vector of 64 fp32 per warp left it at ~1.3 TB/s on an H100).
 * Lane l holds the RoPE pairs (i, i + hd/2) for i = l, l+32, ... (PAIRS of them, a template
 * parameter: hd <= 256), so the rotation needs no data exchange and the two dot products are one
 * warp butterfly each. The element-wise fp32 operations are the CPU op's, with explicit roundings.
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

/* The lane's pairs of row x (fp32 or bf16) into x1, x2 (0 past half, or for a row past the end). */
template <int PAIRS, typename T>
static __device__ __forceinline__ void load_pairs(float (&x1)[PAIRS], float (&x2)[PAIRS], const T *x, bool valid,
                                                  int half) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int k = 0; k < PAIRS; k++) {
        const int i = lane + 32 * k;
        x1[k] = valid && i < half ? as_f32(x[i]) : 0.0f;
        x2[k] = valid && i < half ? as_f32(x[i + half]) : 0.0f;
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

template <int PAIRS>
static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_forward_kernel(float *out, __nv_bfloat16 *out_bf16, const __nv_bfloat16 *in, const float *gain,
                                const float *cos_table, const float *sin_table, int T, int n_heads, int head_dim,
                                size_t ld_in, size_t rows) {
    constexpr int R = ROPE_ROWS_PER_WARP;
    const size_t w0 = rope_first_row();
    if (w0 >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, half = head_dim / 2;
    float x1[R][PAIRS], x2[R][PAIRS];
#pragma unroll
    for (int r = 0; r < R; r++)
        load_pairs<PAIRS>(x1[r], x2[r], in + rope_row_offset(w0 + r < rows ? w0 + r : w0, n_heads, head_dim, ld_in),
                          w0 + r < rows, half);
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t w = w0 + r;
        const float rs = pairs_rstd<PAIRS>(x1[r], x2[r], head_dim);
        if (w >= rows) continue; /* warp-uniform */
        int t, h;
        rope_place(w, T, n_heads, &t, &h);
        const float g = gain ? gain[h] : 1.0f;
        const float *cos_t = cos_table + (size_t)t * half, *sin_t = sin_table + (size_t)t * half;
        const size_t o = w * head_dim;
#pragma unroll
        for (int k = 0; k < PAIRS; k++) {
            const int i = lane + 32 * k;
            if (i < half) {
                const float c = cos_t[i], s = sin_t[i];
                const float u1 = __fmul_rn(x1[r][k], rs), u2 = __fmul_rn(x2[r][k], rs);
                const float r1 = __fmul_rn(__fadd_rn(__fmul_rn(u1, c), __fmul_rn(u2, s)), g);
                const float r2 = __fmul_rn(__fsub_rn(__fmul_rn(u2, c), __fmul_rn(u1, s)), g);
                if (out) {
                    out[o + i] = r1;
                    out[o + i + half] = r2;
                }
                if (out_bf16) {
                    out_bf16[o + i] = to_bf16(r1);
                    out_bf16[o + i + half] = to_bf16(r2);
                }
            }
        }
    }
}

static int check_head_dim(int head_dim) {
    if (head_dim % 2 != 0 || head_dim > 2 * 32 * ROPE_MAX_PAIRS)
        return ct_fail("qk_norm_rope: head_dim %d must be even and at most %d", head_dim, 2 * 32 * ROPE_MAX_PAIRS);
    return 0;
}

static int check_ld(int ld, int n_heads, int head_dim) {
    if (ld < n_heads * head_dim)
        return ct_fail("qk_norm_rope: a row stride of %d elements is below the %d x %d of a token's heads", ld, n_heads,
                       head_dim);
    return 0;
}

static unsigned rope_blocks(size_t rows) { return ct_blocks(rows, ROPE_WARPS * ROPE_ROWS_PER_WARP); }

extern "C" int cuda_qk_norm_rope_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *in_bf16, const float *gain,
                                         const float *cos_table, const float *sin_table, int B, int T, int n_heads,
                                         int head_dim, int ld_in, cudaStream_t stream) {
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (check_head_dim(head_dim) != 0 || check_ld(ld_in, n_heads, head_dim) != 0) return -1;
    __nv_bfloat16 *ob = host_as_bf(out_bf16);
    const __nv_bfloat16 *in = host_as_bf(in_bf16);
    const unsigned blocks = rope_blocks(rows);
    if (head_dim <= 64)
        qk_norm_rope_forward_kernel<1><<<blocks, ROPE_THREADS, 0, stream>>>(out, ob, in, gain, cos_table, sin_table, T,
                                                                           n_heads, head_dim, (size_t)ld_in, rows);
    else if (head_dim <= 128)
        qk_norm_rope_forward_kernel<2><<<blocks, ROPE_THREADS, 0, stream>>>(out, ob, in, gain, cos_table, sin_table, T,
                                                                           n_heads, head_dim, (size_t)ld_in, rows);
    else
        qk_norm_rope_forward_kernel<4><<<blocks, ROPE_THREADS, 0, stream>>>(out, ob, in, gain, cos_table, sin_table, T,
                                                                           n_heads, head_dim, (size_t)ld_in, rows);
    CT_LAUNCHED("qk_norm_rope_forward", stream);
    return 0;
}

extern "C" size_t cuda_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

extern "C" size_t cuda_qk_norm_rope_backward_partials_doubles(int B, int T, int n_heads) {
    return cuda_colsum_doubles(B * T, n_heads, 1);
}

template <int PAIRS>
static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_backward_kernel(float *din, __nv_bfloat16 *din_bf16, float *dgain_partial, const float *dout,
                                 const __nv_bfloat16 *in, const float *gain, const float *cos_table,
                                 const float *sin_table, int T, int n_heads, int head_dim, size_t ld, size_t rows) {
    constexpr int R = ROPE_ROWS_PER_WARP;
    const size_t w0 = rope_first_row();
    if (w0 >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31, half = head_dim / 2;
    float x1[R][PAIRS], x2[R][PAIRS], g1[R][PAIRS], g2[R][PAIRS];
#pragma unroll
    for (int r = 0; r < R; r++) {
        load_pairs<PAIRS>(x1[r], x2[r], in + rope_row_offset(w0 + r < rows ? w0 + r : w0, n_heads, head_dim, ld),
                          w0 + r < rows, half);
        load_pairs<PAIRS>(g1[r], g2[r], dout + (w0 + r) * head_dim, w0 + r < rows, half);
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const size_t w = w0 + r;
        const float rs = pairs_rstd<PAIRS>(x1[r], x2[r], head_dim);
        int t, h;
        rope_place(w < rows ? w : w0, T, n_heads, &t, &h);
        const float g = gain ? gain[h] : 1.0f;
        const float *cos_t = cos_table + (size_t)t * half, *sin_t = sin_table + (size_t)t * half;
        float a1[PAIRS], a2[PAIRS], a_dot_u = 0.0f;
#pragma unroll
        for (int k = 0; k < PAIRS; k++) {
            const int i = lane + 32 * k;
            a1[k] = a2[k] = 0.0f;
            if (i < half) {
                const float c = cos_t[i], s = sin_t[i];
                /* a = R^T dout */
                a1[k] = __fsub_rn(__fmul_rn(g1[r][k], c), __fmul_rn(g2[r][k], s));
                a2[k] = __fadd_rn(__fmul_rn(g1[r][k], s), __fmul_rn(g2[r][k], c));
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
                const size_t j = rope_row_offset(w, n_heads, head_dim, ld) + i;
                if (din) {
                    din[j] = __fadd_rn(din[j], d1);
                    din[j + half] = __fadd_rn(din[j + half], d2);
                }
                if (din_bf16) {
                    din_bf16[j] = to_bf16(d1);
                    din_bf16[j + half] = to_bf16(d2);
                }
            }
        }
        if (dgain_partial && lane == 0) dgain_partial[w] = a_dot_u;
    }
}

extern "C" int cuda_qk_norm_rope_backward(float *din, ct_bf16 *din_bf16, float *dgain, const float *dout,
                                          const ct_bf16 *in_bf16, const float *gain, const float *cos_table,
                                          const float *sin_table, int B, int T, int n_heads, int head_dim, int ld,
                                          float *scratch, double *partials, cudaStream_t stream) {
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (check_head_dim(head_dim) != 0 || check_ld(ld, n_heads, head_dim) != 0) return -1;
    if (dgain && (!gain || !scratch || !partials))
        return ct_fail("qk_norm_rope_backward: dgain needs gain, scratch and partials");
    __nv_bfloat16 *db = host_as_bf(din_bf16);
    const __nv_bfloat16 *in = host_as_bf(in_bf16);
    float *part = dgain ? scratch : nullptr;
    const unsigned blocks = rope_blocks(rows);
    if (head_dim <= 64)
        qk_norm_rope_backward_kernel<1><<<blocks, ROPE_THREADS, 0, stream>>>(din, db, part, dout, in, gain, cos_table,
                                                                            sin_table, T, n_heads, head_dim,
                                                                            (size_t)ld, rows);
    else if (head_dim <= 128)
        qk_norm_rope_backward_kernel<2><<<blocks, ROPE_THREADS, 0, stream>>>(din, db, part, dout, in, gain, cos_table,
                                                                            sin_table, T, n_heads, head_dim,
                                                                            (size_t)ld, rows);
    else
        qk_norm_rope_backward_kernel<4><<<blocks, ROPE_THREADS, 0, stream>>>(din, db, part, dout, in, gain, cos_table,
                                                                            sin_table, T, n_heads, head_dim,
                                                                            (size_t)ld, rows);
    CT_LAUNCHED("qk_norm_rope_backward", stream);
    /* scratch is [B*T, heads] row-major: dgain[h] += sum over tokens, fixed order */
    if (dgain) return cuda_colsum(dgain, scratch, NULL, B * T, n_heads, partials, stream);
    return 0;
}
