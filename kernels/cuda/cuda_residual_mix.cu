/* cuda_residual_mix.cu — the backward of the residual mix out = mix[0]*x + mix[1]*x0 (the pair of
 * cpu_residual_mix.c; see cuda_residual_mix.h). Its forward is fused into the block-input norm
 * (cuda_mix_norm_forward, cuda_rmsnorm.cu). Column-reduction layout of cuda_common.cuh for dmix;
 * V = 4 channels per thread where row_vector_width allows, else 1, with a thread's rows those of
 * the 1-wide layout, so the partials are the same sums in the same order either way. */
#include "cuda_common.cuh"
#include "cuda_residual_mix.h"

template <int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    residual_mix_backward_kernel(float *dx, int dx_accumulate, float *dx0, double *partials, const float *dout,
                                 const float *x, const float *x0, const float *mix, int N, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc_x[V], acc_x0[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc_x[e] = acc_x0[e] = 0.0;
    if (c < C) {
        const F32V<V> m0 = ld_vec<V>(mix + c), m1 = ld_vec<V>(mix + C + c);
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const F32V<V> d = ld_vec<V>(dout + i), xv = ld_vec<V>(x + i), zv = ld_vec<V>(x0 + i);
            F32V<V> g = dx_accumulate ? ld_vec<V>(dx + i) : F32V<V>{}, g0 = ld_vec<V>(dx0 + i);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float t = __fmul_rn(m0.v[e], d.v[e]);
                g.v[e] = dx_accumulate ? __fadd_rn(g.v[e], t) : t;
                g0.v[e] = __fadd_rn(g0.v[e], __fmul_rn(m1.v[e], d.v[e]));
                acc_x[e] += (double)d.v[e] * (double)xv.v[e];
                acc_x0[e] += (double)d.v[e] * (double)zv.v[e];
            }
            st_vec<V>(dx + i, g);
            st_vec<V>(dx0 + i, g0);
        }
    }
    colsum_block_reduce_v<V>(acc_x, sh);
    colsum_block_reduce_v<V>(acc_x0, sh);
    if (threadIdx.y == 0 && c < C) {
        double *p = partials + (size_t)blockIdx.y * 2 * C;
#pragma unroll
        for (int e = 0; e < V; e++) {
            p[c + e] = acc_x[e];
            p[C + c + e] = acc_x0[e];
        }
    }
}

extern "C" int cuda_residual_mix_backward(const CudaResidualMixBackward *a, cudaStream_t stream) {
    float *dx = a->dx, *dx0 = a->dx0, *dmix = a->dmix;
    const int dx_accumulate = a->dx_accumulate;
    const float *dout = a->dout, *x = a->x, *x0 = a->x0, *mix = a->mix;
    const int N = a->N, C = a->C;
    double *partials = a->partials;
    if (N <= 0) return 0;
    const dim3 block(32, COLSUM_TY);
    const unsigned chunks = (unsigned)colsum_chunks(N);
    if (row_vector_width(C, {dx, dx0, dout, x, x0, mix}) == 4)
        residual_mix_backward_kernel<4><<<dim3(ct_blocks((size_t)C, 32 * 4), chunks), block, 0, stream>>>(
            dx, dx_accumulate, dx0, partials, dout, x, x0, mix, N, C);
    else
        residual_mix_backward_kernel<1><<<dim3(ct_blocks((size_t)C, 32), chunks), block, 0, stream>>>(
            dx, dx_accumulate, dx0, partials, dout, x, x0, mix, N, C);
    CT_LAUNCHED("residual_mix_backward", stream);
    return colsum_finish(dmix, partials, colsum_chunks(N), 2 * C, stream);
}
