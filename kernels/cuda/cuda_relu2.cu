/* cuda_relu2.cu — relu^2, forward and backward (the pair of cpu_relu2.c; see cuda_relu2.h).
 * bf16 in and out (the fc product writes u as bf16, its only other consumer is this op's
 * backward; h and du feed products). Eight elements (16 bytes) per thread and step where every
 * buffer is 16-byte aligned, so each warp moves 512-byte lines; the rest one by one. */
#include "cuda_common.cuh"
#include "cuda_relu2.h"

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

/* h (optional) gets relu(u)^2 in the same pass: the backward's weight gradient needs it and the
 * forward does not keep it, so remaking it here saves a pass over u. Uniform branch on h. */
static __global__ void relu2_backward_kernel(__nv_bfloat16 *du, __nv_bfloat16 *h, const __nv_bfloat16 *dh,
                                             const __nv_bfloat16 *u, size_t n, size_t n_vec) {
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n_vec; i += stride) {
        const Bf16V<8> a = ld_vec<8>(u + 8 * i), d = ld_vec<8>(dh + 8 * i);
        Bf16V<8> g, y;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            g.v[e] = to_bf16(relu2_grad(from_bf16(a.v[e]), from_bf16(d.v[e])));
            y.v[e] = to_bf16(relu2_value(from_bf16(a.v[e])));
        }
        st_vec<8>(du + 8 * i, g);
        if (h) st_vec<8>(h + 8 * i, y);
    }
    for (size_t i = 8 * n_vec + first; i < n; i += stride) {
        const float a = from_bf16(u[i]);
        du[i] = to_bf16(relu2_grad(a, from_bf16(dh[i])));
        if (h) h[i] = to_bf16(relu2_value(a));
    }
}

extern "C" int cuda_relu2_backward(ct_bf16 *du, ct_bf16 *h, const ct_bf16 *dh, const ct_bf16 *u, size_t n,
                                   cudaStream_t stream) {
    if (n == 0) return 0;
    if (h && (h == du || h == dh || h == u)) return ct_fail("relu2_backward: h must not alias du, dh or u");
    const size_t n_vec = aligned16(du) && aligned16(dh) && aligned16(u) && (!h || aligned16(h)) ? n / 8 : 0;
    relu2_backward_kernel<<<ct_grid_1d(n_vec ? n_vec : n, 256), 256, 0, stream>>>(host_as_bf(du), host_as_bf(h),
                                                                                  host_as_bf(dh), host_as_bf(u), n,
                                                                                  n_vec);
    CT_LAUNCHED("relu2_backward", stream);
    return 0;
}
