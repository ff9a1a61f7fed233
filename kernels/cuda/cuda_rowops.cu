/* cuda_rowops.cu — RMSNorm, residual mix, scaled residual add and relu^2 (forward/backward),
 * plus the fused block-input and add+norm forwards (see cuda_ops.h).
 *
 * Row kernels use one warp per row (8 rows per 256-thread block); each lane walks the channels
 * 4 at a time (16-byte accesses, c = 4*lane, 4*lane+128, ...; one at a time where a row is not
 * a multiple of 4 or a buffer not 16-byte aligned), so loads are coalesced and wide, and row
 * sums go through a warp butterfly in double (fixed order). Element-wise arithmetic spells out the CPU op's fp32 roundings with
 * __fmul_rn/__fadd_rn, so nvcc cannot contract them into FMAs: given the same inputs the
 * element-wise results are the CPU's bits (row sums in double may round differently in the last
 * bit of the double, which almost never reaches the fp32 result).
 *
 * Parameter gradients (dscale, dmix) use the column-reduction layout of cuda_common.cuh:
 * blocks of 32 channels x COLSUM_TY row lanes over CUDA_COLSUM_ROWS-token chunks. */
#include <initializer_list>

#include "cuda_common.cuh"

enum { ROW_THREADS = 256, ROWS_PER_BLOCK = ROW_THREADS / 32 };

static __device__ __forceinline__ float rstd_from_sumsq(double sum_sq, int C, float eps) {
    return (float)(1.0 / sqrt(sum_sq / C + (double)eps));
}

/* Rows are walked V channels at a time (ld_vec/st_vec, cuda_common.cuh): 16-byte fp32 accesses
 * when V = 4 (rows of C % 4 == 0 channels in 16-byte aligned buffers: every row the backend
 * has), so a warp moves 512 bytes per instruction; V = 1 otherwise. Lane l handles channels
 * V*l + 32*V*k. */
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
/* 4 when every row of C channels in these buffers (NULL ones ignored) can take V = 4 accesses. */
static int row_vector_width(int C, std::initializer_list<const void *> buffers) {
    if (C % 4 != 0) return 1;
    for (const void *p : buffers)
        if (p && !aligned16(p)) return 1;
    return 4;
}

/* Second pass of the fused norm forwards, after the first wrote the row v and summed its
 * squares into ss (per lane): r = rstd of the row (warp sum), dst = bf16(v * r), rstd[row] = r. */
template <int V>
static __device__ __forceinline__ void norm_row_to_bf16(__nv_bfloat16 *dst, float *rstd, const float *v, double ss,
                                                        int row, int lane, int C, float eps) {
    ss = warp_sum_d(ss);
    const float r = rstd_from_sumsq(ss, C, eps);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_vec<V>(v + c);
        Bf16V<V> y;
#pragma unroll
        for (int e = 0; e < V; e++) y.v[e] = to_bf16(__fmul_rn(a.v[e], r));
        st_vec<V>(dst + c, y);
    }
    if (lane == 0) rstd[row] = r;
}

/* Launch KERNEL<4> or KERNEL<1> over N rows, one warp per row. */
#define LAUNCH_ROWS(kernel, V, N, stream, ...)                                                     \
    do {                                                                                           \
        if ((V) == 4)                                                                              \
            kernel<4><<<ct_blocks((size_t)(N), ROWS_PER_BLOCK), ROW_THREADS, 0, (stream)>>>(__VA_ARGS__); \
        else                                                                                       \
            kernel<1><<<ct_blocks((size_t)(N), ROWS_PER_BLOCK), ROW_THREADS, 0, (stream)>>>(__VA_ARGS__); \
    } while (0)

/* ---- RMSNorm ---- */

template <int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_forward_kernel(float *out, __nv_bfloat16 *out_bf16, float *rstd, const float *x, int N, int C, float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together */
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_vec<V>(x + base + c);
#pragma unroll
        for (int e = 0; e < V; e++) ss += (double)a.v[e] * (double)a.v[e];
    }
    ss = warp_sum_d(ss);
    const float r = rstd_from_sumsq(ss, C, eps);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_vec<V>(x + base + c);
        F32V<V> y;
        Bf16V<V> y16;
#pragma unroll
        for (int e = 0; e < V; e++) {
            y.v[e] = __fmul_rn(a.v[e], r);
            y16.v[e] = to_bf16(y.v[e]);
        }
        if (out) st_vec<V>(out + base + c, y);
        if (out_bf16) st_vec<V>(out_bf16 + base + c, y16);
    }
    if (rstd && lane == 0) rstd[row] = r;
}

extern "C" int cuda_rmsnorm_forward(float *out, ct_bf16 *out_bf16, float *rstd, const float *x, int N, int C,
                                    float eps, cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {out, out_bf16, x});
    LAUNCH_ROWS(rmsnorm_forward_kernel, V, N, stream, out, host_as_bf(out_bf16), rstd, x, N, C, eps);
    CT_LAUNCHED("rmsnorm_forward", stream);
    return 0;
}

template <int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_backward_kernel(float *dx, const float *dout, const float *x, const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    double dot = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> d = ld_vec<V>(dout + base + c), a = ld_vec<V>(x + base + c);
#pragma unroll
        for (int e = 0; e < V; e++) dot += (double)d.v[e] * (double)a.v[e];
    }
    dot = warp_sum_d(dot);
    const float r = rstd[row];
    const float x_coeff = (float)((double)r * r * r * dot / C);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> d = ld_vec<V>(dout + base + c), a = ld_vec<V>(x + base + c);
        F32V<V> g = ld_vec<V>(dx + base + c);
#pragma unroll
        for (int e = 0; e < V; e++)
            g.v[e] = __fadd_rn(g.v[e], __fsub_rn(__fmul_rn(r, d.v[e]), __fmul_rn(x_coeff, a.v[e])));
        st_vec<V>(dx + base + c, g);
    }
}

extern "C" int cuda_rmsnorm_backward(float *dx, const float *dout, const float *x, const float *rstd, int N, int C,
                                     cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {dx, dout, x});
    LAUNCH_ROWS(rmsnorm_backward_kernel, V, N, stream, dx, dout, x, rstd, N, C);
    CT_LAUNCHED("rmsnorm_backward", stream);
    return 0;
}

/* ---- fused forwards ---- */

template <int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    mix_norm_forward_kernel(float *x_in, float *xm, float *rstd, __nv_bfloat16 *a_bf16, const float *x,
                            const float *skip, const float *skip_w, const float *x0, const float *mix, int N, int C,
                            float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        F32V<V> xi = ld_vec<V>(x + base + c);
        const F32V<V> z = ld_vec<V>(x0 + base + c), m0 = ld_vec<V>(mix + c), m1 = ld_vec<V>(mix + C + c);
        if (skip) {
            const F32V<V> sk = ld_vec<V>(skip + base + c), sw = ld_vec<V>(skip_w + c);
#pragma unroll
            for (int e = 0; e < V; e++) xi.v[e] = __fadd_rn(xi.v[e], __fmul_rn(sw.v[e], sk.v[e]));
            st_vec<V>(x_in + base + c, xi);
        }
        F32V<V> m;
#pragma unroll
        for (int e = 0; e < V; e++) {
            m.v[e] = __fadd_rn(__fmul_rn(m0.v[e], xi.v[e]), __fmul_rn(m1.v[e], z.v[e]));
            ss += (double)m.v[e] * (double)m.v[e];
        }
        st_vec<V>(xm + base + c, m);
    }
    norm_row_to_bf16<V>(a_bf16 + base, rstd, xm + base, ss, row, lane, C, eps);
}

extern "C" int cuda_mix_norm_forward(float *x_in, float *xm, float *rstd, ct_bf16 *a_bf16, const float *x,
                                     const float *skip, const float *skip_w, const float *x0, const float *mix, int N,
                                     int C, float eps, cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {x_in, xm, a_bf16, x, skip, skip_w, x0, mix});
    LAUNCH_ROWS(mix_norm_forward_kernel, V, N, stream, x_in, xm, rstd, host_as_bf(a_bf16), x, skip, skip_w, x0, mix,
                N, C, eps);
    CT_LAUNCHED("mix_norm_forward", stream);
    return 0;
}

template <int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    add_norm_forward_kernel(float *x1, float *rstd, __nv_bfloat16 *m_bf16, const float *xm,
                            const __nv_bfloat16 *branch, const float *scale, int N, int C, float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_vec<V>(xm + base + c), sc = ld_vec<V>(scale + c);
        const Bf16V<V> b = ld_vec<V>(branch + base + c);
        F32V<V> v;
#pragma unroll
        for (int e = 0; e < V; e++) {
            v.v[e] = __fadd_rn(a.v[e], __fmul_rn(sc.v[e], from_bf16(b.v[e])));
            ss += (double)v.v[e] * (double)v.v[e];
        }
        st_vec<V>(x1 + base + c, v);
    }
    norm_row_to_bf16<V>(m_bf16 + base, rstd, x1 + base, ss, row, lane, C, eps);
}

extern "C" int cuda_add_norm_forward(float *x1, float *rstd, ct_bf16 *m_bf16, const float *xm, const ct_bf16 *branch,
                                     const float *scale, int N, int C, float eps, cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {x1, m_bf16, xm, branch, scale});
    LAUNCH_ROWS(add_norm_forward_kernel, V, N, stream, x1, rstd, host_as_bf(m_bf16), xm, host_as_bf(branch), scale, N,
                C, eps);
    CT_LAUNCHED("add_norm_forward", stream);
    return 0;
}

/* ---- scaled residual add ---- */

template <int V>
static __global__ void scaled_add_forward_kernel(float *out, const float *x, const __nv_bfloat16 *branch,
                                                 const float *scale, size_t n, int C) {
    for (size_t i = V * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < n; i += V * (size_t)gridDim.x * blockDim.x) {
        const F32V<V> a = ld_vec<V>(x + i), sc = ld_vec<V>(scale + i % (size_t)C); /* C % V == 0: one row */
        const Bf16V<V> b = ld_vec<V>(branch + i);
        F32V<V> y;
#pragma unroll
        for (int e = 0; e < V; e++) y.v[e] = __fadd_rn(a.v[e], __fmul_rn(sc.v[e], from_bf16(b.v[e])));
        st_vec<V>(out + i, y);
    }
}

extern "C" int cuda_scaled_add_forward(float *out, const float *x, const ct_bf16 *branch, const float *scale, int N,
                                       int C, cudaStream_t stream) {
    const size_t n = (size_t)N * C;
    if (n == 0) return 0;
    if (row_vector_width(C, {out, x, branch, scale}) == 4)
        scaled_add_forward_kernel<4><<<ct_grid_1d(n / 4, 256), 256, 0, stream>>>(out, x, host_as_bf(branch), scale, n,
                                                                                 C);
    else
        scaled_add_forward_kernel<1><<<ct_grid_1d(n, 256), 256, 0, stream>>>(out, x, host_as_bf(branch), scale, n, C);
    CT_LAUNCHED("scaled_add_forward", stream);
    return 0;
}

template <typename BranchT>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    scaled_add_backward_kernel(float *dx, float *dbranch, __nv_bfloat16 *dbranch_bf16, double *partials,
                               const float *dout, const BranchT *branch, const float *scale, int N, int C) {
    __shared__ double sh[COLSUM_TY][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc = 0.0;
    if (c < C) {
        const float s = scale[c];
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const float d = dout[i];
            if (dx) dx[i] = __fadd_rn(dx[i], d);
            const float v = __fmul_rn(s, d);
            if (dbranch) dbranch[i] = __fadd_rn(dbranch[i], v);
            if (dbranch_bf16) dbranch_bf16[i] = to_bf16(v);
            acc += (double)d * (double)as_f32(branch[i]);
        }
    }
    const double total = colsum_block_reduce(acc, sh);
    if (threadIdx.y == 0 && c < C) partials[(size_t)blockIdx.y * C + c] = total;
}

extern "C" int cuda_scaled_add_backward(float *dx, float *dbranch, ct_bf16 *dbranch_bf16, float *dscale,
                                        const float *dout, const float *branch, const ct_bf16 *branch_bf16,
                                        const float *scale, int N, int C, double *partials, cudaStream_t stream) {
    if (N <= 0) return 0;
    if ((branch == NULL) == (branch_bf16 == NULL))
        return ct_fail("scaled_add_backward: exactly one of the fp32 and bf16 branches must be given");
    dim3 grid(ct_blocks((size_t)C, 32), (unsigned)colsum_chunks(N)), block(32, COLSUM_TY);
    if (branch)
        scaled_add_backward_kernel<float><<<grid, block, 0, stream>>>(dx, dbranch, host_as_bf(dbranch_bf16), partials,
                                                                      dout, branch, scale, N, C);
    else
        scaled_add_backward_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(
            dx, dbranch, host_as_bf(dbranch_bf16), partials, dout, host_as_bf(branch_bf16), scale, N, C);
    CT_LAUNCHED("scaled_add_backward", stream);
    return colsum_finish(dscale, partials, colsum_chunks(N), C, stream);
}

/* ---- residual mix backward ---- */

static __global__ void __launch_bounds__(32 * COLSUM_TY)
    residual_mix_backward_kernel(float *dx, int dx_accumulate, float *dx0, double *partials, const float *dout,
                                 const float *x, const float *x0, const float *mix, int N, int C) {
    __shared__ double sh[COLSUM_TY][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc_x = 0.0, acc_x0 = 0.0;
    if (c < C) {
        const float m0 = mix[c], m1 = mix[C + c];
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const float d = dout[i];
            const float g = __fmul_rn(m0, d);
            dx[i] = dx_accumulate ? __fadd_rn(dx[i], g) : g;
            dx0[i] = __fadd_rn(dx0[i], __fmul_rn(m1, d));
            acc_x += (double)d * (double)x[i];
            acc_x0 += (double)d * (double)x0[i];
        }
    }
    const double total_x = colsum_block_reduce(acc_x, sh);
    const double total_x0 = colsum_block_reduce(acc_x0, sh);
    if (threadIdx.y == 0 && c < C) {
        double *p = partials + (size_t)blockIdx.y * 2 * C;
        p[c] = total_x;
        p[C + c] = total_x0;
    }
}

extern "C" int cuda_residual_mix_backward(float *dx, int dx_accumulate, float *dx0, float *dmix, const float *dout,
                                          const float *x, const float *x0, const float *mix, int N, int C,
                                          double *partials, cudaStream_t stream) {
    if (N <= 0) return 0;
    dim3 grid(ct_blocks((size_t)C, 32), (unsigned)colsum_chunks(N)), block(32, COLSUM_TY);
    residual_mix_backward_kernel<<<grid, block, 0, stream>>>(dx, dx_accumulate, dx0, partials, dout, x, x0, mix,
                                                             N, C);
    CT_LAUNCHED("residual_mix_backward", stream);
    return colsum_finish(dmix, partials, colsum_chunks(N), 2 * C, stream);
}

/* ---- relu^2 ----
 * bf16 in and out (the fc product writes u as bf16, its only other consumer is this op's
 * backward; h and du feed products). Eight elements (16 bytes) per thread and step where every
 * buffer is 16-byte aligned, so each warp moves 512-byte lines; the rest one by one. */

static __device__ __forceinline__ float relu2_value(float x) { return x > 0.0f ? __fmul_rn(x, x) : 0.0f; }
/* cpu_relu2_backward's (2u * dh), fp32 */
static __device__ __forceinline__ float relu2_grad(float x, float dh) { return x > 0.0f ? __fmul_rn(2.0f * x, dh) : 0.0f; }

static __global__ void relu2_forward_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *u, size_t n, size_t n_vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const Bf16V<8> a = ld_vec<8>(u + 8 * i);
        Bf16V<8> y;
#pragma unroll
        for (int e = 0; e < 8; e++) y.v[e] = to_bf16(relu2_value(from_bf16(a.v[e])));
        st_vec<8>(h + 8 * i, y);
    }
    for (size_t i = 8 * n_vec + first; i < n; i += stride) h[i] = to_bf16(relu2_value(from_bf16(u[i])));
}

extern "C" int cuda_relu2_forward(ct_bf16 *h, const ct_bf16 *u, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    const size_t n_vec = aligned16(h) && aligned16(u) ? n / 8 : 0;
    relu2_forward_kernel<<<ct_grid_1d(n_vec ? n_vec : n, 256), 256, 0, stream>>>(host_as_bf(h), host_as_bf(u), n,
                                                                                 n_vec);
    CT_LAUNCHED("relu2_forward", stream);
    return 0;
}

static __global__ void relu2_backward_kernel(__nv_bfloat16 *du, const __nv_bfloat16 *dh, const __nv_bfloat16 *u,
                                             size_t n, size_t n_vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const Bf16V<8> a = ld_vec<8>(u + 8 * i), d = ld_vec<8>(dh + 8 * i);
        Bf16V<8> g;
#pragma unroll
        for (int e = 0; e < 8; e++) g.v[e] = to_bf16(relu2_grad(from_bf16(a.v[e]), from_bf16(d.v[e])));
        st_vec<8>(du + 8 * i, g);
    }
    for (size_t i = 8 * n_vec + first; i < n; i += stride) du[i] = to_bf16(relu2_grad(from_bf16(u[i]), from_bf16(dh[i])));
}

extern "C" int cuda_relu2_backward(ct_bf16 *du, const ct_bf16 *dh, const ct_bf16 *u, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    const size_t n_vec = aligned16(du) && aligned16(dh) && aligned16(u) ? n / 8 : 0;
    relu2_backward_kernel<<<ct_grid_1d(n_vec ? n_vec : n, 256), 256, 0, stream>>>(host_as_bf(du), host_as_bf(dh),
                                                                                  host_as_bf(u), n, n_vec);
    CT_LAUNCHED("relu2_backward", stream);
    return 0;
}
