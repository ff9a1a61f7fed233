/* cuda_residual_mix.cu — the backward of the residual mix out = mix[0]*x + mix[1]*x0 (the pair of
 * cpu_residual_mix.c; see cuda_residual_mix.h). Its forward is fused into the block-input norm
 * (cuda_mix_norm_forward, cuda_rmsnorm.cu). Column-reduction layout of cuda_common.cuh for dmix;
 * V = 4 channels per thread where row_vector_width allows, else 1, with a thread's rows those of
 * the 1-wide layout, so the partials are the same sums in the same order either way. The kernel
 * is templated on the residual stream's element type S (fp32 or bf16, residual_dtype), whose
 * rounding points (mix rounded to bf16 first, dx and dx0 once where stored) are the helpers of
 * cuda_common.cuh: the bf16 stream's bits without a second kernel, fp32's unchanged. */
#include "cuda_common.cuh"
#include "cuda_residual_mix.h"

template <typename S, int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    residual_mix_backward_kernel(S *dx, int dx_accumulate, S *dx0, double *partials, const S *dout, const S *x,
                                 const S *x0, const float *mix, int N, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc_x[V], acc_x0[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc_x[e] = acc_x0[e] = 0.0;
    if (c < C) {
        const F32V<V> m0 = ld_control<S, V>(mix + c), m1 = ld_control<S, V>(mix + C + c);
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const F32V<V> d = ld_stream<S, V>(dout + i), xv = ld_stream<S, V>(x + i), zv = ld_stream<S, V>(x0 + i);
            F32V<V> g = dx_accumulate ? ld_stream<S, V>(dx + i) : F32V<V>{}, g0 = ld_stream<S, V>(dx0 + i);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float t = __fmul_rn(m0.v[e], d.v[e]);
                g.v[e] = dx_accumulate ? __fadd_rn(g.v[e], t) : t;
                g0.v[e] = __fadd_rn(g0.v[e], __fmul_rn(m1.v[e], d.v[e]));
                acc_x[e] += (double)d.v[e] * (double)xv.v[e];
                acc_x0[e] += (double)d.v[e] * (double)zv.v[e];
            }
            st_stream<S, V>(dx + i, g);
            st_stream<S, V>(dx0 + i, g0);
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

template <typename S, int V>
static void launch_residual_mix_backward(const CudaResidualMixBackward *a, unsigned chunks, cudaStream_t stream) {
    S *dx = stream_ptr<S>(a->dx), *dx0 = stream_ptr<S>(a->dx0);
    const S *dout = stream_ptr<S>(a->dout), *x = stream_ptr<S>(a->x), *x0 = stream_ptr<S>(a->x0);
    const float *mix = a->mix;
    const int dx_accumulate = a->dx_accumulate, N = a->N, C = a->C;
    double *partials = a->partials;
    residual_mix_backward_kernel<S, V><<<dim3(ct_blocks((size_t)C, 32 * V), chunks), dim3(32, COLSUM_TY), 0, stream>>>(
        dx, dx_accumulate, dx0, partials, dout, x, x0, mix, N, C);
}

extern "C" int cuda_residual_mix_backward(const CudaResidualMixBackward *a, cudaStream_t stream) {
    const int N = a->N, C = a->C;
    if (N <= 0) return 0;
    const unsigned chunks = (unsigned)colsum_chunks(N);
    const int V = row_vector_width(C, {a->dx, a->dx0, a->dout, a->x, a->x0, a->mix});
#define LAUNCH(S, V) launch_residual_mix_backward<S, V>(a, chunks, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("residual_mix_backward", stream);
    return colsum_finish(a->dmix, a->partials, (int)chunks, 2 * C, stream);
}
