/* cuda_lane_mix.cu — the end of a parallel block, forward and backward (the pair of
 * cpu_lane_mix.c; see cuda_lane_mix.h). The backward's per-channel and per-block sums use the
 * column-reduction layout of cuda_common.cuh: eight sums per channel and chunk (the two scales',
 * then the six lambdas'); colsum_finish adds the scales' chunks, lane_lambdas_finish_kernel each
 * lambda's chunks and channels in a fixed order. V = 4 channels per thread where
 * row_vector_width allows, else 1, with the same sums in the same order either way. Templated on
 * the lanes' element type S (fp32 or bf16) with the stream helpers' rounding points. */
#include "cuda_common.cuh"
#include "cuda_lane_mix.h"

/* The six lambdas as the stream of type S sees them: resid 0, 1, post 0..3. */
template <typename S>
struct LaneLambdas {
    float r[2], p[4];
};
template <typename S>
static __device__ __forceinline__ LaneLambdas<S> ld_lambdas(const float *resid, const float *post) {
    LaneLambdas<S> L;
    for (int j = 0; j < 2; j++) L.r[j] = round_stream<S>(resid[j]);
    for (int j = 0; j < 4; j++) L.p[j] = round_stream<S>(post[j]);
    return L;
}
/* w0 * x0 + w1 * x1 + w2 * x2, each product and sum rounded as the stream's tensors are */
template <typename S>
static __device__ __forceinline__ float lane_sum(float w0, float x0, float w1, float x1, float w2, float x2) {
    const float s = round_stream<S>(__fadd_rn(round_stream<S>(__fmul_rn(w0, x0)), round_stream<S>(__fmul_rn(w1, x1))));
    return round_stream<S>(__fadd_rn(s, round_stream<S>(__fmul_rn(w2, x2))));
}

template <typename S, int V>
static __global__ void lane_mix_forward_kernel(S *out0, S *out1, const S *l0, const S *l1, const __nv_bfloat16 *ao,
                                               const __nv_bfloat16 *mo, const float *attn_scale,
                                               const float *mlp_scale, const float *resid, const float *post, int N,
                                               int C) {
    const LaneLambdas<S> L = ld_lambdas<S>(resid, post);
    const size_t groups = (size_t)N * C / V;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        const size_t i = g * V;
        const int c = (int)(i % (size_t)C);
        const F32V<V> x0 = ld_stream<S, V>(l0 + i), x1 = ld_stream<S, V>(l1 + i);
        const F32V<V> sa = ld_control<S, V>(attn_scale + c), sm = ld_control<S, V>(mlp_scale + c);
        const Bf16V<V> ha = ld_vec<V>(ao + i), hm = ld_vec<V>(mo + i);
        F32V<V> y0, y1;
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float a = round_stream<S>(__fmul_rn(sa.v[e], from_bf16(ha.v[e])));
            const float m = round_stream<S>(__fmul_rn(sm.v[e], from_bf16(hm.v[e])));
            y0.v[e] = lane_sum<S>(L.r[0], x0.v[e], L.p[0], a, L.p[2], m);
            y1.v[e] = lane_sum<S>(L.r[1], x1.v[e], L.p[1], a, L.p[3], m);
        }
        st_stream<S, V>(out0 + i, y0); /* after every load of element i: in place is fine */
        st_stream<S, V>(out1 + i, y1);
    }
}

enum { LANE_SUMS = 8 }; /* dattn_scale, dmlp_scale, dresid 0..1, dpost 0..3 */

template <typename S, int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    lane_mix_backward_kernel(S *dl0, S *dl1, __nv_bfloat16 *dao, __nv_bfloat16 *dmo, double *partials, const S *d0,
                             const S *d1, const S *l0, const S *l1, const __nv_bfloat16 *ao, const __nv_bfloat16 *mo,
                             const float *attn_scale, const float *mlp_scale, const float *resid, const float *post,
                             int N, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc[LANE_SUMS][V];
#pragma unroll
    for (int s = 0; s < LANE_SUMS; s++)
#pragma unroll
        for (int e = 0; e < V; e++) acc[s][e] = 0.0;
    if (c < C) {
        const LaneLambdas<S> L = ld_lambdas<S>(resid, post);
        const F32V<V> sa = ld_control<S, V>(attn_scale + c), sm = ld_control<S, V>(mlp_scale + c);
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const F32V<V> g0 = ld_stream<S, V>(d0 + i), g1 = ld_stream<S, V>(d1 + i);
            const F32V<V> x0 = ld_stream<S, V>(l0 + i), x1 = ld_stream<S, V>(l1 + i);
            const Bf16V<V> ha = ld_vec<V>(ao + i), hm = ld_vec<V>(mo + i);
            F32V<V> o0, o1;
            Bf16V<V> oa, om;
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float av = from_bf16(ha.v[e]), mv = from_bf16(hm.v[e]);
                const float a = round_stream<S>(__fmul_rn(sa.v[e], av)), m = round_stream<S>(__fmul_rn(sm.v[e], mv));
                const float da = round_stream<S>(__fadd_rn(round_stream<S>(__fmul_rn(L.p[0], g0.v[e])),
                                                           round_stream<S>(__fmul_rn(L.p[1], g1.v[e]))));
                const float dm = round_stream<S>(__fadd_rn(round_stream<S>(__fmul_rn(L.p[2], g0.v[e])),
                                                           round_stream<S>(__fmul_rn(L.p[3], g1.v[e]))));
                o0.v[e] = __fmul_rn(L.r[0], g0.v[e]);
                o1.v[e] = __fmul_rn(L.r[1], g1.v[e]);
                oa.v[e] = to_bf16(__fmul_rn(sa.v[e], da));
                om.v[e] = to_bf16(__fmul_rn(sm.v[e], dm));
                acc[0][e] += (double)da * (double)av;
                acc[1][e] += (double)dm * (double)mv;
                acc[2][e] += (double)g0.v[e] * (double)x0.v[e];
                acc[3][e] += (double)g1.v[e] * (double)x1.v[e];
                acc[4][e] += (double)g0.v[e] * (double)a;
                acc[5][e] += (double)g1.v[e] * (double)a;
                acc[6][e] += (double)g0.v[e] * (double)m;
                acc[7][e] += (double)g1.v[e] * (double)m;
            }
            st_stream<S, V>(dl0 + i, o0); /* after the loads: dl0 may be d0, dl1 d1 */
            st_stream<S, V>(dl1 + i, o1);
            st_vec<V>(dao + i, oa);
            st_vec<V>(dmo + i, om);
        }
    }
#pragma unroll
    for (int s = 0; s < LANE_SUMS; s++) colsum_block_reduce_v<V>(acc[s], sh);
    if (threadIdx.y == 0 && c < C)
#pragma unroll
        for (int s = 0; s < LANE_SUMS; s++) {
            double *p = partials + ((size_t)s * gridDim.y + blockIdx.y) * C;
#pragma unroll
            for (int e = 0; e < V; e++) p[c + e] = acc[s][e];
        }
}

/* Thread j < 6 adds lambda j's partials (sum 2 + j of the layout), chunks in order and each
 * chunk's channels in order, into dresid[j] (j < 2) or dpost[j - 2]. */
static __global__ void lane_lambdas_finish_kernel(float *dresid, float *dpost, const double *partials, int n_chunks,
                                                  int C) {
    const int j = threadIdx.x;
    if (j >= 6) return;
    const double *p = partials + (size_t)(2 + j) * n_chunks * C;
    double total = 0.0;
    for (size_t k = 0; k < (size_t)n_chunks * C; k++) total += p[k];
    float *g = j < 2 ? dresid + j : dpost + (j - 2);
    *g = *g + (float)total;
}

template <typename S, int V>
static void launch_lane_mix_forward(const CudaLaneMixForward *a, cudaStream_t stream) {
    S *out0 = stream_ptr<S>(a->out0), *out1 = stream_ptr<S>(a->out1);
    const S *l0 = stream_ptr<S>(a->l0), *l1 = stream_ptr<S>(a->l1);
    const __nv_bfloat16 *ao = host_as_bf(a->ao), *mo = host_as_bf(a->mo);
    const float *attn_scale = a->attn_scale, *mlp_scale = a->mlp_scale, *resid = a->resid, *post = a->post;
    const int N = a->N, C = a->C;
    lane_mix_forward_kernel<S, V><<<ct_grid_1d((size_t)N * C / V, 256), 256, 0, stream>>>(
        out0, out1, l0, l1, ao, mo, attn_scale, mlp_scale, resid, post, N, C);
}

extern "C" int cuda_lane_mix_forward(const CudaLaneMixForward *a, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    if (a->out0 == a->out1) return ct_fail("lane_mix_forward: out0 and out1 must differ");
    const int V = row_vector_width(a->C, {a->out0, a->out1, a->l0, a->l1, a->ao, a->mo, a->attn_scale, a->mlp_scale});
#define LAUNCH(S, V) launch_lane_mix_forward<S, V>(a, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("lane_mix_forward", stream);
    return 0;
}

template <typename S, int V>
static void launch_lane_mix_backward(const CudaLaneMixBackward *a, unsigned chunks, cudaStream_t stream) {
    S *dl0 = stream_ptr<S>(a->dl0), *dl1 = stream_ptr<S>(a->dl1);
    __nv_bfloat16 *dao = host_as_bf(a->dao_bf16), *dmo = host_as_bf(a->dmo_bf16);
    const S *d0 = stream_ptr<S>(a->d0), *d1 = stream_ptr<S>(a->d1), *l0 = stream_ptr<S>(a->l0),
            *l1 = stream_ptr<S>(a->l1);
    const __nv_bfloat16 *ao = host_as_bf(a->ao), *mo = host_as_bf(a->mo);
    const float *attn_scale = a->attn_scale, *mlp_scale = a->mlp_scale, *resid = a->resid, *post = a->post;
    const int N = a->N, C = a->C;
    double *partials = a->partials;
    lane_mix_backward_kernel<S, V><<<dim3(ct_blocks((size_t)C, 32 * V), chunks), dim3(32, COLSUM_TY), 0, stream>>>(
        dl0, dl1, dao, dmo, partials, d0, d1, l0, l1, ao, mo, attn_scale, mlp_scale, resid, post, N, C);
}

extern "C" int cuda_lane_mix_backward(const CudaLaneMixBackward *a, cudaStream_t stream) {
    const int N = a->N, C = a->C;
    if (N <= 0) return 0;
    if (a->dl0 == a->dl1 || a->dl0 == a->d1 || a->dl1 == a->d0 || (const void *)a->dao_bf16 == (const void *)a->dmo_bf16)
        return ct_fail("lane_mix_backward: dl0 and dl1 (in place: on d0 and d1 only) and dao_bf16 and dmo_bf16 must "
                       "not alias each other");
    const unsigned chunks = (unsigned)colsum_chunks(N);
    const int V = row_vector_width(C, {a->dl0, a->dl1, a->dao_bf16, a->dmo_bf16, a->d0, a->d1, a->l0, a->l1, a->ao,
                                       a->mo, a->attn_scale, a->mlp_scale});
#define LAUNCH(S, V) launch_lane_mix_backward<S, V>(a, chunks, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("lane_mix_backward", stream);
    if (colsum_finish(a->dattn_scale, a->partials, (int)chunks, C, stream) != 0) return -1;
    if (colsum_finish(a->dmlp_scale, a->partials + (size_t)chunks * C, (int)chunks, C, stream) != 0) return -1;
    lane_lambdas_finish_kernel<<<1, 32, 0, stream>>>(a->dresid, a->dpost, a->partials, (int)chunks, C);
    CT_LAUNCHED("lane_lambdas_finish", stream);
    return 0;
}

/* The final lane mean and its backward, elementwise (one element per thread: no row layout). */
template <typename S>
static __global__ void lane_mean_forward_kernel(S *out, const S *l0, const S *l1, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        F32V<1> v;
        v.v[0] = round_stream<S>(__fadd_rn(ld_stream<S, 1>(l0 + i).v[0], ld_stream<S, 1>(l1 + i).v[0]));
        v.v[0] = __fmul_rn(v.v[0], 0.5f);
        st_stream<S, 1>(out + i, v);
    }
}
template <typename S>
static __global__ void lane_mean_backward_kernel(S *d0, S *d1, const S *dout, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        F32V<1> v;
        v.v[0] = __fmul_rn(ld_stream<S, 1>(dout + i).v[0], 0.5f);
        st_stream<S, 1>(d0 + i, v); /* after the load: d0 may be dout */
        st_stream<S, 1>(d1 + i, v);
    }
}

extern "C" int cuda_lane_mean_forward(void *out, const void *l0, const void *l1, size_t n, int dtype,
                                      cudaStream_t stream) {
    if (n == 0) return 0;
    if (dtype == CT_BF16)
        lane_mean_forward_kernel<__nv_bfloat16><<<ct_grid_1d(n, 256), 256, 0, stream>>>(
            stream_ptr<__nv_bfloat16>(out), stream_ptr<__nv_bfloat16>(l0), stream_ptr<__nv_bfloat16>(l1), n);
    else
        lane_mean_forward_kernel<float><<<ct_grid_1d(n, 256), 256, 0, stream>>>(stream_ptr<float>(out),
                                                                                stream_ptr<float>(l0),
                                                                                stream_ptr<float>(l1), n);
    CT_LAUNCHED("lane_mean_forward", stream);
    return 0;
}

extern "C" int cuda_lane_mean_backward(void *d0, void *d1, const void *dout, size_t n, int dtype,
                                       cudaStream_t stream) {
    if (n == 0) return 0;
    if (d1 == d0 || d1 == dout) return ct_fail("lane_mean_backward: d1 must differ from d0 and dout");
    if (dtype == CT_BF16)
        lane_mean_backward_kernel<__nv_bfloat16><<<ct_grid_1d(n, 256), 256, 0, stream>>>(
            stream_ptr<__nv_bfloat16>(d0), stream_ptr<__nv_bfloat16>(d1), stream_ptr<__nv_bfloat16>(dout), n);
    else
        lane_mean_backward_kernel<float><<<ct_grid_1d(n, 256), 256, 0, stream>>>(
            stream_ptr<float>(d0), stream_ptr<float>(d1), stream_ptr<float>(dout), n);
    CT_LAUNCHED("lane_mean_backward", stream);
    return 0;
}
