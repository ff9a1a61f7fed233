/* cuda_relu2.cu — relu^2 and leaky relu^2 (mlp_negative_slope), forward and backward (the pair
 * of cpu_relu2.c; see cuda_relu2.h). bf16 in and out (the fc product writes u as bf16, its only
 * other consumer is this op's backward; h and du feed products). Eight elements (16 bytes) per
 * thread and step where every buffer is 16-byte aligned, so each warp moves 512-byte lines; the
 * rest one by one. The kernels are templated on LEAKY: slope 0 runs the relu^2 instantiation,
 * the kernels as they were before the slope (same bits); the leaky one spells out the CPU op's
 * fp32 products (s*u squared; (k*u)*dh with k = 2 s^2 as cpu_relu2_negative_grad_coeff rounds it). */
#include "cuda_common.cuh"
#include "cuda_relu2.h"

/* h = u^2 for u > 0, else 0 (relu^2) or (s*u)^2 (leaky) */
template <bool LEAKY>
static __device__ __forceinline__ float relu2_value(float x, float s) {
    if (!LEAKY) return x > 0.0f ? __fmul_rn(x, x) : 0.0f;
    const float l = __fmul_rn(s, x);
    return x > 0.0f ? __fmul_rn(x, x) : __fmul_rn(l, l);
}
/* cpu_relu2_backward's (2u * dh), fp32; for u <= 0 0 (relu^2) or (k*u) * dh (leaky) */
template <bool LEAKY>
static __device__ __forceinline__ float relu2_grad(float x, float dh, float k) {
    if (!LEAKY) return x > 0.0f ? __fmul_rn(2.0f * x, dh) : 0.0f;
    return x > 0.0f ? __fmul_rn(2.0f * x, dh) : __fmul_rn(__fmul_rn(k, x), dh);
}

template <bool LEAKY>
static __global__ void relu2_forward_kernel(__nv_bfloat16 *h, const __nv_bfloat16 *u, size_t n, size_t n_vec,
                                            float s) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const Bf16V<8> a = ld_vec<8>(u + 8 * i);
        Bf16V<8> y;
#pragma unroll
        for (int e = 0; e < 8; e++) y.v[e] = to_bf16(relu2_value<LEAKY>(from_bf16(a.v[e]), s));
        st_vec<8>(h + 8 * i, y);
    }
    for (size_t i = 8 * n_vec + first; i < n; i += stride) h[i] = to_bf16(relu2_value<LEAKY>(from_bf16(u[i]), s));
}

extern "C" int cuda_relu2_forward(ct_bf16 *h, const ct_bf16 *u, size_t n, float slope, cudaStream_t stream) {
    if (n == 0) return 0;
    const size_t n_vec = aligned16(h) && aligned16(u) ? n / 8 : 0;
    const unsigned grid = ct_grid_1d(n_vec ? n_vec : n, 256);
    if (slope == 0.0f)
        relu2_forward_kernel<false><<<grid, 256, 0, stream>>>(host_as_bf(h), host_as_bf(u), n, n_vec, 0.0f);
    else
        relu2_forward_kernel<true><<<grid, 256, 0, stream>>>(host_as_bf(h), host_as_bf(u), n, n_vec, slope);
    CT_LAUNCHED("relu2_forward", stream);
    return 0;
}

/* h (optional) gets relu(u)^2 in the same pass: the backward's weight gradient needs it and the
 * forward does not keep it, so remaking it here saves a pass over u. Uniform branch on h. */
template <bool LEAKY>
static __global__ void relu2_backward_kernel(__nv_bfloat16 *du, __nv_bfloat16 *h, const __nv_bfloat16 *dh,
                                             const __nv_bfloat16 *u, size_t n, size_t n_vec, float s, float k) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const Bf16V<8> a = ld_vec<8>(u + 8 * i), d = ld_vec<8>(dh + 8 * i);
        Bf16V<8> g, y;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            g.v[e] = to_bf16(relu2_grad<LEAKY>(from_bf16(a.v[e]), from_bf16(d.v[e]), k));
            y.v[e] = to_bf16(relu2_value<LEAKY>(from_bf16(a.v[e]), s));
        }
        st_vec<8>(du + 8 * i, g);
        if (h) st_vec<8>(h + 8 * i, y);
    }
    for (size_t i = 8 * n_vec + first; i < n; i += stride) {
        const float a = from_bf16(u[i]);
        du[i] = to_bf16(relu2_grad<LEAKY>(a, from_bf16(dh[i]), k));
        if (h) h[i] = to_bf16(relu2_value<LEAKY>(a, s));
    }
}

extern "C" int cuda_relu2_backward(ct_bf16 *du, ct_bf16 *h, const ct_bf16 *dh, const ct_bf16 *u, size_t n,
                                   float slope, cudaStream_t stream) {
    if (n == 0) return 0;
    if (h && (h == du || h == dh || h == u)) return ct_fail("relu2_backward: h must not alias du, dh or u");
    const size_t n_vec = aligned16(du) && aligned16(dh) && aligned16(u) && (!h || aligned16(h)) ? n / 8 : 0;
    const unsigned grid = ct_grid_1d(n_vec ? n_vec : n, 256);
    __nv_bfloat16 *d_du = host_as_bf(du), *d_h = host_as_bf(h);
    const __nv_bfloat16 *d_dh = host_as_bf(dh), *d_u = host_as_bf(u);
    if (slope == 0.0f) {
        relu2_backward_kernel<false><<<grid, 256, 0, stream>>>(d_du, d_h, d_dh, d_u, n, n_vec, 0.0f, 0.0f);
    } else {
        const float k = (float)(2.0 * (double)slope * (double)slope); /* cpu_relu2_negative_grad_coeff */
        relu2_backward_kernel<true><<<grid, 256, 0, stream>>>(d_du, d_h, d_dh, d_u, n, n_vec, slope, k);
    }
    CT_LAUNCHED("relu2_backward", stream);
    return 0;
}
