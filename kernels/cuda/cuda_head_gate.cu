/* cuda_head_gate.cu — the sparse attention head-output gate, forward and backward (see
 * cuda_head_gate.h; the pair of cpu_head_gate.c). The forward and the backward's dy/dz pass give
 * one warp to each (token, head): every lane sums the gate's logit itself, in the CPU's channel
 * order (the same bits in every lane, window is small), and moves elements lane + 32k of the
 * head. The logit's sigmoid is 1 / (1 + e) with e = exp in double rounded once to fp32, the
 * correctly rounded value glibc's expf gives on the CPU side (as cuda_smear.cu). dw's sum over
 * tokens: one thread per (head, channel) sums a chunk of CUDA_COLSUM_ROWS tokens in order in
 * double, and colsum_finish adds the chunks in order: no atomics, the same bits every run. */
#include "cuda_common.cuh"
#include "cuda_head_gate.h"

enum { GATE_THREADS = 256, GATE_WARPS = GATE_THREADS / 32, GATE_MAX_ELEMS = 4, GATE_DW_THREADS = 128 };

/* sigmoid(scale * sum_k w[k] n[k]), the CPU op's fp32 operations in its order */
static __device__ __forceinline__ float gate_value(const float *w, const __nv_bfloat16 *n, int window, float scale) {
    float z = 0.0f;
    for (int k = 0; k < window; k++) z = __fadd_rn(z, __fmul_rn(w[k], from_bf16(n[k])));
    const float e = (float)exp(-(double)__fmul_rn(scale, z));
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
}

template <int E>
static __global__ void __launch_bounds__(GATE_THREADS)
    head_gate_forward_kernel(float *g, __nv_bfloat16 *out, const __nv_bfloat16 *y, const __nv_bfloat16 *n,
                             const float *w, int n_heads, int hd, int window, float scale, size_t rows) {
    const size_t row = (size_t)blockIdx.x * GATE_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int lane = threadIdx.x & 31, h = (int)(row % (size_t)n_heads);
    const size_t t = row / (size_t)n_heads, D = (size_t)n_heads * hd;
    const float gate = gate_value(w + (size_t)h * window, n + t * D, window, scale);
    if (lane == 0) g[row] = gate;
    const size_t o = row * (size_t)hd;
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int d = lane + 32 * k;
        if (d < hd) out[o + d] = to_bf16(__fmul_rn(gate, from_bf16(y[o + d])));
    }
}

template <int E>
static __global__ void __launch_bounds__(GATE_THREADS)
    head_gate_backward_kernel(float *dy, __nv_bfloat16 *dy_bf16, float *dz, const float *dout,
                              const __nv_bfloat16 *y, const float *g, int hd, float scale, size_t rows) {
    const size_t row = (size_t)blockIdx.x * GATE_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31;
    const size_t o = row * (size_t)hd;
    float go[E], s = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int d = lane + 32 * k;
        go[k] = d < hd ? dout[o + d] : 0.0f;
        s = __fadd_rn(s, __fmul_rn(d < hd ? from_bf16(y[o + d]) : 0.0f, go[k]));
    }
    const float dg = warp_sum(s); /* every lane has read its dout before any writes dy */
    const float gate = g[row];
    if (lane == 0) dz[row] = __fmul_rn(__fmul_rn(__fmul_rn(scale, gate), __fsub_rn(1.0f, gate)), dg);
#pragma unroll
    for (int k = 0; k < E; k++) {
        const int d = lane + 32 * k;
        if (d < hd) {
            const float v = __fmul_rn(gate, go[k]);
            if (dy) dy[o + d] = v;
            if (dy_bf16) dy_bf16[o + d] = to_bf16(v);
        }
    }
}

/* partials[chunk][h*window + k] = sum over the chunk's tokens, in order, of dz[t,h] n[t,k] */
static __global__ void head_gate_dw_partial_kernel(double *partials, const float *dz, const __nv_bfloat16 *n, int N,
                                                   int n_heads, int hd, int window) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x, width = n_heads * window;
    if (j >= width) return;
    const int h = j / window, k = j % window;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    const size_t D = (size_t)n_heads * hd;
    double acc = 0.0;
    for (int r = r0; r < r1; r++) acc += (double)dz[(size_t)r * n_heads + h] * (double)from_bf16(n[(size_t)r * D + k]);
    partials[(size_t)blockIdx.y * width + j] = acc;
}

static __global__ void head_gate_input_backward_kernel(float *dn, const float *dz, const float *w, int n_heads, int hd,
                                                       int window, size_t count) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / (size_t)window;
        const int k = (int)(i % (size_t)window);
        float s = 0.0f;
        for (int h = 0; h < n_heads; h++) s = __fadd_rn(s, __fmul_rn(dz[t * n_heads + h], w[(size_t)h * window + k]));
        float *p = dn + t * (size_t)n_heads * hd + k;
        *p = __fadd_rn(*p, s);
    }
}

static int check_gate_shape(const char *op, const CudaHeadGateShape *s) {
    if (s->head_dim <= 0 || s->head_dim > 32 * GATE_MAX_ELEMS)
        return ct_fail("%s: head_dim %d must be in [1, %d]", op, s->head_dim, 32 * GATE_MAX_ELEMS);
    if (s->n_heads <= 0 || s->window < 1 || s->window > s->n_heads * s->head_dim)
        return ct_fail("%s: a window of %d channels outside [1, %d x %d]", op, s->window, s->n_heads, s->head_dim);
    return 0;
}

extern "C" int cuda_head_gate_forward(float *g, ct_bf16 *out_bf16, const ct_bf16 *y_bf16, const ct_bf16 *n_bf16,
                                      const float *w, const CudaHeadGateShape *shape, cudaStream_t stream) {
    const CudaHeadGateShape s = *shape;
    if (check_gate_shape("head_gate_forward", &s) != 0) return -1;
    const size_t rows = (size_t)s.N * s.n_heads;
    if (rows == 0) return 0;
    __nv_bfloat16 *out = host_as_bf(out_bf16);
    const __nv_bfloat16 *y = host_as_bf(y_bf16), *n = host_as_bf(n_bf16);
    const unsigned blocks = ct_blocks(rows, GATE_WARPS);
    if (s.head_dim <= 32)
        head_gate_forward_kernel<1><<<blocks, GATE_THREADS, 0, stream>>>(g, out, y, n, w, s.n_heads, s.head_dim,
                                                                         s.window, s.scale, rows);
    else if (s.head_dim <= 64)
        head_gate_forward_kernel<2><<<blocks, GATE_THREADS, 0, stream>>>(g, out, y, n, w, s.n_heads, s.head_dim,
                                                                         s.window, s.scale, rows);
    else
        head_gate_forward_kernel<4><<<blocks, GATE_THREADS, 0, stream>>>(g, out, y, n, w, s.n_heads, s.head_dim,
                                                                         s.window, s.scale, rows);
    CT_LAUNCHED("head_gate_forward", stream);
    return 0;
}

extern "C" size_t cuda_head_gate_backward_partials_doubles(int N, int n_heads, int window) {
    return cuda_colsum_doubles(N, n_heads * window, 1);
}

extern "C" int cuda_head_gate_backward(float *dy, ct_bf16 *dy_bf16, float *dz, float *dw, const float *dout,
                                       const ct_bf16 *y_bf16, const float *g, const ct_bf16 *n_bf16,
                                       const CudaHeadGateShape *shape, double *partials, cudaStream_t stream) {
    const CudaHeadGateShape s = *shape;
    if (check_gate_shape("head_gate_backward", &s) != 0) return -1;
    const size_t rows = (size_t)s.N * s.n_heads;
    if (rows == 0) return 0;
    __nv_bfloat16 *dyb = host_as_bf(dy_bf16);
    const __nv_bfloat16 *y = host_as_bf(y_bf16), *n = host_as_bf(n_bf16);
    const unsigned blocks = ct_blocks(rows, GATE_WARPS);
    if (s.head_dim <= 32)
        head_gate_backward_kernel<1><<<blocks, GATE_THREADS, 0, stream>>>(dy, dyb, dz, dout, y, g, s.head_dim, s.scale,
                                                                          rows);
    else if (s.head_dim <= 64)
        head_gate_backward_kernel<2><<<blocks, GATE_THREADS, 0, stream>>>(dy, dyb, dz, dout, y, g, s.head_dim, s.scale,
                                                                          rows);
    else
        head_gate_backward_kernel<4><<<blocks, GATE_THREADS, 0, stream>>>(dy, dyb, dz, dout, y, g, s.head_dim, s.scale,
                                                                          rows);
    CT_LAUNCHED("head_gate_backward", stream);
    const int width = s.n_heads * s.window;
    const dim3 grid(ct_blocks((size_t)width, GATE_DW_THREADS), (unsigned)colsum_chunks(s.N));
    head_gate_dw_partial_kernel<<<grid, GATE_DW_THREADS, 0, stream>>>(partials, dz, n, s.N, s.n_heads, s.head_dim,
                                                                      s.window);
    CT_LAUNCHED("head_gate_dw_partial", stream);
    return colsum_finish(dw, partials, colsum_chunks(s.N), width, stream);
}

extern "C" int cuda_head_gate_input_backward(float *dn, const float *dz, const float *w, const CudaHeadGateShape *shape,
                                             cudaStream_t stream) {
    const CudaHeadGateShape s = *shape;
    if (check_gate_shape("head_gate_input_backward", &s) != 0) return -1;
    const size_t count = (size_t)s.N * s.window;
    if (count == 0) return 0;
    head_gate_input_backward_kernel<<<ct_grid_1d(count, 256), 256, 0, stream>>>(dn, dz, w, s.n_heads, s.head_dim,
                                                                                 s.window, count);
    CT_LAUNCHED("head_gate_input_backward", stream);
    return 0;
}
