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

/* u = x * r and a = R^T dout of one head vector (R: the rotation of its position; identity past
 * rope_dims). */
static inline void rotate_back(float *a, float *u, const float *x, const float *go, float r, const float *cos_t,
                               const float *sin_t, int half, int rope_dims, int head_dim) {
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
}

/* cpu_qk_norm_rope_track_magnitudes' state: off (NULL) but in the test that sets it */
static const float *track_grads;
static double *track_mag;

void cpu_qk_norm_rope_track_magnitudes(const float *grads, double *mag) {
    track_grads = grads;
    track_mag = mag;
}

/* The sums of |a_d u_d| over tokens and head dims, each head's gain gradient's terms (in double,
 * serial: test support only), into track_mag at dgain's index in track_grads. */
static void add_magnitudes(const float *dgain, const float *dout, const float *in, const float *cos_table,
                           const float *sin_table, int T, long n_tokens, int n_heads, int head_dim, int rope_dims) {
    const int half = rope_dims / 2;
    float a[CPU_QK_NORM_MAX_HEAD_DIM], u[CPU_QK_NORM_MAX_HEAD_DIM];
    for (int h = 0; h < n_heads; h++) {
        double m = 0;
        for (long n = 0; n < n_tokens; n++) {
            const size_t offset = ((size_t)n * n_heads + h) * head_dim;
            rotate_back(a, u, in + offset, dout + offset, head_inv_rms(in + offset, head_dim),
                        cos_table + (size_t)(n % T) * half, sin_table + (size_t)(n % T) * half, half, rope_dims,
                        head_dim);
            for (int d = 0; d < head_dim; d++) m += fabs((double)a[d] * u[d]);
        }
        track_mag[dgain + h - track_grads] += m;
    }
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
            rotate_back(a, u, x, go, r, cos_t, sin_t, half, rope_dims, head_dim);
            float a_dot_u = cpu_attn_dot(a, u, head_dim);
            float mean_du_u = g * a_dot_u / (float)head_dim;
            for (int d = 0; d < head_dim; d++) dx[d] += r * (g * a[d] - u[d] * mean_du_u);
            if (dgain) dgain_partial[(size_t)n * n_heads + h] = a_dot_u;
        }
    }
    if (!dgain) return;
    if (track_mag) add_magnitudes(dgain, dout, in, cos_table, sin_table, T, n_tokens, n_heads, head_dim, rope_dims);
    /* Fixed token order and a double accumulator: the sum runs over up to ~1e6 tokens and must
     * not depend on how the loop above was split between threads. */
    for (int h = 0; h < n_heads; h++) {
        double sum = 0.0;
        for (long n = 0; n < n_tokens; n++) sum += dgain_partial[(size_t)n * n_heads + h];
        dgain[h] += (float)sum;
    }
}
