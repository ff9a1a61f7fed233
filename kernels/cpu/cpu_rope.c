/* cpu_rope.c — the fused QK-norm + RoPE + gain op (forward and backward) of the CPU backend; see
 * cpu_attention.h for the math and the conventions. The pair of cuda_rope.cu; the RoPE tables
 * both backends use are in kernels/rope_tables.c. */
#include "cpu_attention.h"

#include <assert.h>
#include <float.h>
#include <math.h>

/* 1/RMS of one head vector; fp32 like F.rms_norm on fp32 input with eps=None (FLT_EPSILON). */
static inline float head_inv_rms(const float *x, int head_dim) {
    return 1.0f / sqrtf(cpu_attn_dot(x, x, head_dim) / (float)head_dim + FLT_EPSILON);
}

void cpu_qk_norm_rope_forward(float *out, const float *in, const float *gain,
                              const float *cos_table, const float *sin_table,
                              int B, int T, int n_heads, int head_dim, int rope_dims) {
    assert(B > 0 && T > 0 && n_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
    assert(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim);
    const int half = rope_dims / 2;
    const size_t row_floats = (size_t)n_heads * head_dim;
    const long n_tokens = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < n_tokens; n++) {
        const float *cos_t = cos_table + (size_t)(n % T) * half;
        const float *sin_t = sin_table + (size_t)(n % T) * half;
        for (int h = 0; h < n_heads; h++) {
            const float *x = in + (size_t)n * row_floats + (size_t)h * head_dim;
            float *o = out + (size_t)n * row_floats + (size_t)h * head_dim;
            float r = head_inv_rms(x, head_dim);
            float g = gain ? gain[h] : 1.0f;
            for (int i = 0; i < half; i++) {
                float u1 = x[i] * r, u2 = x[i + half] * r;
                o[i] = (u1 * cos_t[i] + u2 * sin_t[i]) * g;
                o[i + half] = (u2 * cos_t[i] - u1 * sin_t[i]) * g;
            }
            for (int d = rope_dims; d < head_dim; d++) o[d] = x[d] * r * g; /* partial RoPE: not rotated */
        }
    }
}

size_t cpu_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads) {
    return (size_t)B * T * n_heads;
}

/* Backward through out = g * R u, u = x * r (R: the per-position rotation, orthogonal). With
 * a = R^T dout:  dgain += <dout, R u> = <a, u>,  du = g a,  dx = r * (du - u * <du, u> / hd).
 * a and u go through small stack arrays so that every loop vectorises. */
void cpu_qk_norm_rope_backward(float *din, float *dgain, const float *dout, const float *in,
                               const float *gain, const float *cos_table, const float *sin_table,
                               int B, int T, int n_heads, int head_dim, int rope_dims, float *scratch) {
    assert(B > 0 && T > 0 && n_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
    assert(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim);
    assert(head_dim <= CPU_QK_NORM_MAX_HEAD_DIM);
    assert(!dgain || (gain && scratch));
    const int half = rope_dims / 2;
    const size_t row_floats = (size_t)n_heads * head_dim;
    const long n_tokens = (long)B * T;
    float *dgain_partial = scratch; /* [n_tokens, n_heads] */
#pragma omp parallel for schedule(static)
    for (long n = 0; n < n_tokens; n++) {
        const float *cos_t = cos_table + (size_t)(n % T) * half;
        const float *sin_t = sin_table + (size_t)(n % T) * half;
        float a[CPU_QK_NORM_MAX_HEAD_DIM], u[CPU_QK_NORM_MAX_HEAD_DIM];
        for (int h = 0; h < n_heads; h++) {
            size_t offset = (size_t)n * row_floats + (size_t)h * head_dim;
            const float *x = in + offset, *go = dout + offset;
            float *dx = din + offset;
            float r = head_inv_rms(x, head_dim);
            float g = gain ? gain[h] : 1.0f;
            for (int i = 0; i < half; i++) {
                float c = cos_t[i], s = sin_t[i];
                u[i] = x[i] * r;
                u[i + half] = x[i + half] * r;
                a[i] = go[i] * c - go[i + half] * s;
                a[i + half] = go[i] * s + go[i + half] * c;
            }
            for (int d = rope_dims; d < head_dim; d++) { /* partial RoPE: identity there */
                u[d] = x[d] * r;
                a[d] = go[d];
            }
            float a_dot_u = cpu_attn_dot(a, u, head_dim);
            float mean_du_u = g * a_dot_u / (float)head_dim;
            for (int d = 0; d < head_dim; d++) dx[d] += r * (g * a[d] - u[d] * mean_du_u);
            if (dgain) dgain_partial[(size_t)n * n_heads + h] = a_dot_u;
        }
    }
    if (!dgain) return;
    /* Fixed token order and a double accumulator: the sum runs over up to ~1e6 tokens and must
     * not depend on how the loop above was split between threads. */
    for (int h = 0; h < n_heads; h++) {
        double sum = 0.0;
        for (long n = 0; n < n_tokens; n++) sum += dgain_partial[(size_t)n * n_heads + h];
        dgain[h] += (float)sum;
    }
}
