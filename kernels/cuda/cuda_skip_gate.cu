/* cuda_skip_gate.cu — the backward of the gated U-Net skip x_in = lerp(w * skip, x, sigmoid(gate))
 * (the pair of cpu_skip_gate.c; see cuda_skip_gate.h). Its forward is fused into the block-input
 * norm (cuda_rmsnorm.cu, skip_gate_value): w * skip and g are remade here the way it makes them.
 * Column-reduction layout of cuda_common.cuh for dw and dgate; V = 4 channels per thread where
 * row_vector_width allows, else 1, with a thread's rows those of the 1-wide layout, so the partials
 * are the same sums in the same order either way. Templated on the residual stream's element
 * type S (fp32 or bf16, residual_dtype) with the stream helpers' rounding points. */
#include "cuda_common.cuh"
#include "cuda_skip_gate.h"

template <typename S, int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    skip_gate_backward_kernel(S *dx, S *dskip, double *partials, const S *dout, const S *x, const S *skip,
                              const float *w, const float *gate, int N, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc_w[V], acc_g[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc_w[e] = acc_g[e] = 0.0;
    if (c < C) {
        const F32V<V> wv = ld_control<S, V>(w + c), z = ld_control<S, V>(gate + c);
        F32V<V> g, om, sg; /* g, 1 - g, g (1 - g) */
#pragma unroll
        for (int e = 0; e < V; e++) {
            g.v[e] = round_stream<S>(sigmoid_f32(z.v[e]));
            om.v[e] = __fsub_rn(1.0f, g.v[e]);
            sg.v[e] = __fmul_rn(g.v[e], om.v[e]);
        }
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const F32V<V> d = ld_stream<S, V>(dout + i), xv = ld_stream<S, V>(x + i), sk = ld_stream<S, V>(skip + i);
            F32V<V> gx, gs;
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float t = round_stream<S>(__fmul_rn(om.v[e], d.v[e])); /* d(w * skip) */
                const float start = round_stream<S>(__fmul_rn(wv.v[e], sk.v[e]));
                gx.v[e] = __fmul_rn(g.v[e], d.v[e]);
                gs.v[e] = __fmul_rn(wv.v[e], t);
                acc_w[e] += (double)t * (double)sk.v[e];
                acc_g[e] += (double)__fmul_rn(sg.v[e], d.v[e]) * (double)__fsub_rn(xv.v[e], start);
            }
            st_stream<S, V>(dx + i, gx); /* after dout's load: in place is fine */
            st_stream<S, V>(dskip + i, gs);
        }
    }
    colsum_block_reduce_v<V>(acc_w, sh);
    colsum_block_reduce_v<V>(acc_g, sh);
    if (threadIdx.y == 0 && c < C) {
        double *pw = partials + (size_t)blockIdx.y * C, *pg = partials + ((size_t)gridDim.y + blockIdx.y) * C;
#pragma unroll
        for (int e = 0; e < V; e++) {
            pw[c + e] = acc_w[e];
            pg[c + e] = acc_g[e];
        }
    }
}

template <typename S, int V>
static void launch_skip_gate_backward(const CudaSkipGateBackward *a, unsigned chunks, cudaStream_t stream) {
    S *dx = stream_ptr<S>(a->dx), *dskip = stream_ptr<S>(a->dskip);
    const S *dout = stream_ptr<S>(a->dout), *x = stream_ptr<S>(a->x), *skip = stream_ptr<S>(a->skip);
    const float *w = a->w, *gate = a->gate;
    const int N = a->N, C = a->C;
    double *partials = a->partials;
    skip_gate_backward_kernel<S, V><<<dim3(ct_blocks((size_t)C, 32 * V), chunks), dim3(32, COLSUM_TY), 0, stream>>>(
        dx, dskip, partials, dout, x, skip, w, gate, N, C);
}

extern "C" int cuda_skip_gate_backward(const CudaSkipGateBackward *a, cudaStream_t stream) {
    const int N = a->N, C = a->C;
    if (N <= 0) return 0;
    if (a->dskip == a->dout || a->dskip == a->x || a->dskip == a->skip || a->dskip == a->dx)
        return ct_fail("skip_gate_backward: dskip must not alias dx, dout, x or skip");
    const unsigned chunks = (unsigned)colsum_chunks(N);
    const int V = row_vector_width(C, {a->dx, a->dskip, a->dout, a->x, a->skip, a->w, a->gate});
#define LAUNCH(S, V) launch_skip_gate_backward<S, V>(a, chunks, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("skip_gate_backward", stream);
    if (colsum_finish(a->dw, a->partials, (int)chunks, C, stream) != 0) return -1;
    return colsum_finish(a->dgate, a->partials + (size_t)chunks * C, (int)chunks, C, stream);
}
