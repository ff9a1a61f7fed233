/* cuda_rope.cu — fused QK-norm + RoPE + gain, forward and backward (see cuda_ops.h and
 * cpu_attention.h for the math). One warp per (token, head) vector; lane l holds the RoPE pairs
 * (i, i + hd/2) for i = l, l+32, ... (hd <= 256), so the rotation needs no data exchange and the
 * two dot products are one warp butterfly each. The element-wise fp32 operations are the CPU
 * op's, with explicit roundings. dgain: per-(token, head) partials, then the fixed-order column
 * reduction over tokens. */
#include <float.h>

#include "cuda_common.cuh"

enum { ROPE_THREADS = 256, ROPE_WARPS = ROPE_THREADS / 32, ROPE_MAX_PAIRS = 4 };

/* The calling warp's row of the [B*T*n_heads, head_dim] tensors: token * n_heads + head. */
static __device__ __forceinline__ size_t rope_row() { return (size_t)blockIdx.x * ROPE_WARPS + (threadIdx.x >> 5); }

/* Row w's vector: head h at position t; the lane holds the pairs (i, i + half) for i = lane,
 * lane + 32, ... Filled only after the kernel's w < rows check: a warp past the end divides nothing. */
struct RopeVec {
    int lane, half, h, t;
};

static __device__ __forceinline__ RopeVec rope_vec(size_t w, int T, int n_heads, int head_dim) {
    RopeVec v;
    v.lane = threadIdx.x & 31;
    v.half = head_dim / 2;
    const size_t n = w / (size_t)n_heads;
    v.h = (int)(w % (size_t)n_heads);
    v.t = (int)(n % (size_t)T);
    return v;
}

/* The lane's pairs of vector x into x1, x2 (0 past half) and r = 1/sqrt(mean(x^2) + eps), the
 * same bits in every lane. The whole warp calls. */
static __device__ __forceinline__ float load_pairs_rstd(float (&x1)[ROPE_MAX_PAIRS], float (&x2)[ROPE_MAX_PAIRS],
                                                        const float *x, const RopeVec &v, int head_dim) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
        const int i = v.lane + 32 * k;
        x1[k] = i < v.half ? x[i] : 0.0f;
        x2[k] = i < v.half ? x[i + v.half] : 0.0f;
        ss += x1[k] * x1[k] + x2[k] * x2[k];
    }
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / (float)head_dim + FLT_EPSILON);
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_forward_kernel(float *out, __nv_bfloat16 *out_bf16, const float *in, const float *gain,
                                const float *cos_table, const float *sin_table, int T, int n_heads, int head_dim,
                                size_t rows) {
    const size_t w = rope_row();
    if (w >= rows) return; /* the whole warp leaves together */
    const RopeVec v = rope_vec(w, T, n_heads, head_dim);
    const size_t o = w * head_dim;
    float x1[ROPE_MAX_PAIRS], x2[ROPE_MAX_PAIRS];
    const float r = load_pairs_rstd(x1, x2, in + w * head_dim, v, head_dim);
    const float g = gain ? gain[v.h] : 1.0f;
    const float *cos_t = cos_table + (size_t)v.t * v.half, *sin_t = sin_table + (size_t)v.t * v.half;
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
        const int i = v.lane + 32 * k;
        if (i < v.half) {
            const float c = cos_t[i], s = sin_t[i];
            const float u1 = __fmul_rn(x1[k], r), u2 = __fmul_rn(x2[k], r);
            const float r1 = __fmul_rn(__fadd_rn(__fmul_rn(u1, c), __fmul_rn(u2, s)), g);
            const float r2 = __fmul_rn(__fsub_rn(__fmul_rn(u2, c), __fmul_rn(u1, s)), g);
            if (out) {
                out[o + i] = r1;
                out[o + i + v.half] = r2;
            }
            if (out_bf16) {
                out_bf16[o + i] = to_bf16(r1);
                out_bf16[o + i + v.half] = to_bf16(r2);
            }
        }
    }
}

extern "C" int cuda_qk_norm_rope_forward(float *out, ct_bf16 *out_bf16, const float *in, const float *gain, const float *cos_table,
                                         const float *sin_table, int B, int T, int n_heads, int head_dim,
                                         cudaStream_t stream) {
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (head_dim % 2 != 0 || head_dim > 2 * 32 * ROPE_MAX_PAIRS)
        return ct_fail("qk_norm_rope: head_dim %d must be even and at most %d", head_dim, 2 * 32 * ROPE_MAX_PAIRS);
    qk_norm_rope_forward_kernel<<<ct_blocks(rows, ROPE_WARPS), ROPE_THREADS, 0, stream>>>(
        out, host_as_bf(out_bf16), in, gain, cos_table, sin_table, T, n_heads, head_dim, rows);
    CT_LAUNCHED("qk_norm_rope_forward", stream);
    return 0;
}

extern "C" size_t cuda_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

extern "C" size_t cuda_qk_norm_rope_backward_partials_doubles(int B, int T, int n_heads) {
    return cuda_colsum_doubles(B * T, n_heads, 1);
}

static __global__ void __launch_bounds__(ROPE_THREADS)
    qk_norm_rope_backward_kernel(float *din, __nv_bfloat16 *din_bf16, float *dgain_partial, const float *dout,
                                 const float *in, const float *gain, const float *cos_table, const float *sin_table,
                                 int T, int n_heads, int head_dim, size_t rows) {
    const size_t w = rope_row();
    if (w >= rows) return; /* the whole warp leaves together */
    const RopeVec v = rope_vec(w, T, n_heads, head_dim);
    const float *go = dout + w * head_dim;
    const float *cos_t = cos_table + (size_t)v.t * v.half, *sin_t = sin_table + (size_t)v.t * v.half;
    float x1[ROPE_MAX_PAIRS], x2[ROPE_MAX_PAIRS], a1[ROPE_MAX_PAIRS], a2[ROPE_MAX_PAIRS];
    const float r = load_pairs_rstd(x1, x2, in + w * head_dim, v, head_dim);
    const float g = gain ? gain[v.h] : 1.0f;
    float a_dot_u = 0.0f;
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
        const int i = v.lane + 32 * k;
        if (i < v.half) {
            const float c = cos_t[i], s = sin_t[i];
            const float g1 = go[i], g2 = go[i + v.half];
            /* a = R^T dout */
            a1[k] = __fsub_rn(__fmul_rn(g1, c), __fmul_rn(g2, s));
            a2[k] = __fadd_rn(__fmul_rn(g1, s), __fmul_rn(g2, c));
            x1[k] = __fmul_rn(x1[k], r); /* from here on x holds u = x * r */
            x2[k] = __fmul_rn(x2[k], r);
            a_dot_u += a1[k] * x1[k] + a2[k] * x2[k];
        }
    }
    a_dot_u = warp_sum(a_dot_u);
    /* The fp32 quotient g*a_dot_u / hd, computed in double and rounded once: that is exactly the
     * correctly rounded fp32 division (53 >= 2*24 + 2 bits), without the fp32 division's slow-path
     * call, which made ptxas spill on sm_80. */
    const float mean_du_u = (float)((double)__fmul_rn(g, a_dot_u) / (double)head_dim);
#pragma unroll
    for (int k = 0; k < ROPE_MAX_PAIRS; k++) {
        const int i = v.lane + 32 * k;
        if (i < v.half) {
            const float d1 = __fmul_rn(r, __fsub_rn(__fmul_rn(g, a1[k]), __fmul_rn(x1[k], mean_du_u)));
            const float d2 = __fmul_rn(r, __fsub_rn(__fmul_rn(g, a2[k]), __fmul_rn(x2[k], mean_du_u)));
            const size_t j = w * head_dim + i;
            if (din) {
                din[j] = __fadd_rn(din[j], d1);
                din[j + v.half] = __fadd_rn(din[j + v.half], d2);
            }
            if (din_bf16) {
                din_bf16[j] = to_bf16(d1);
                din_bf16[j + v.half] = to_bf16(d2);
            }
        }
    }
    if (dgain_partial && v.lane == 0) dgain_partial[w] = a_dot_u;
}

extern "C" int cuda_qk_norm_rope_backward(float *din, ct_bf16 *din_bf16, float *dgain, const float *dout,
                                          const float *in, const float *gain, const float *cos_table,
                                          const float *sin_table, int B, int T, int n_heads, int head_dim,
                                          float *scratch, double *partials, cudaStream_t stream) {
    const size_t rows = (size_t)B * T * n_heads;
    if (rows == 0) return 0;
    if (head_dim % 2 != 0 || head_dim > 2 * 32 * ROPE_MAX_PAIRS)
        return ct_fail("qk_norm_rope: head_dim %d must be even and at most %d", head_dim, 2 * 32 * ROPE_MAX_PAIRS);
    if (dgain && (!gain || !scratch || !partials))
        return ct_fail("qk_norm_rope_backward: dgain needs gain, scratch and partials");
    qk_norm_rope_backward_kernel<<<ct_blocks(rows, ROPE_WARPS), ROPE_THREADS, 0, stream>>>(
        din, host_as_bf(din_bf16), dgain ? scratch : nullptr, dout, in, gain, cos_table, sin_table, T, n_heads,
        head_dim, rows);
    CT_LAUNCHED("qk_norm_rope_backward", stream);
    /* scratch is [B*T, heads] row-major: dgain[h] += sum over tokens, fixed order */
    if (dgain) return cuda_colsum(dgain, scratch, NULL, B * T, n_heads, partials, stream);
    return 0;
}
