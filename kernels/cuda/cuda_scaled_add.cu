/* cuda_scaled_add.cu — the scaled residual add out = x + scale * branch, forward (with an optional
 * inner branch: the block output from xm) and backward (the pair of cpu_scaled_add.c; see
 * cuda_scaled_add.h). Element-wise arithmetic spells out the CPU op's fp32 roundings with
 * __fmul_rn/__fadd_rn (add_scaled, cuda_common.cuh); dscale uses the column-reduction layout of
 * cuda_common.cuh. x, out, dx and dout are the residual stream: the kernels are templated on its
 * element type S (fp32 or bf16, residual_dtype) and round where cuda_common.cuh's stream helpers
 * say (scales rounded to bf16 first, the inner x1 as cuda_add_norm_forward stores it, each stored
 * value once), so one kernel gives the bf16 stream's bits and, with S = float, the fp32 ones. */
#include "cuda_common.cuh"
#include "cuda_scaled_add.h"

template <typename S, int V>
static __global__ void scaled_add_forward_kernel(S *out, const S *x, const __nv_bfloat16 *inner,
                                                 const float *inner_scale, const __nv_bfloat16 *branch,
                                                 const float *scale, size_t n, int C) {
    for (size_t i = V * ((size_t)blockIdx.x * blockDim.x + threadIdx.x); i < n; i += V * (size_t)gridDim.x * blockDim.x) {
        const size_t c = i % (size_t)C; /* C % V == 0: the V elements are in one row */
        F32V<V> a = ld_stream<S, V>(x + i);
        if (inner) a = add_scaled_stream<S, V>(a, ld_control<S, V>(inner_scale + c), ld_vec<V>(inner + i));
        st_stream<S, V>(out + i, add_scaled<V>(a, ld_control<S, V>(scale + c), ld_vec<V>(branch + i)));
    }
}

template <typename S, int V>
static void launch_scaled_add_forward(void *out, const void *x, const ct_bf16 *inner, const float *inner_scale,
                                      const ct_bf16 *branch, const float *scale, size_t n, int C,
                                      cudaStream_t stream) {
    scaled_add_forward_kernel<S, V><<<ct_grid_1d(n / V, 256), 256, 0, stream>>>(
        stream_ptr<S>(out), stream_ptr<S>(x), host_as_bf(inner), inner_scale, host_as_bf(branch), scale, n, C);
}

extern "C" int cuda_scaled_add_forward(void *out, const void *x, const ct_bf16 *inner, const float *inner_scale,
                                       const ct_bf16 *branch, const float *scale, int N, int C, int dtype,
                                       cudaStream_t stream) {
    const size_t n = (size_t)N * C;
    if (n == 0) return 0;
    if ((inner == NULL) != (inner_scale == NULL))
        return ct_fail("scaled_add_forward: inner and inner_scale go together");
    const int V = row_vector_width(C, {out, x, inner, inner_scale, branch, scale});
#define LAUNCH(S, V) launch_scaled_add_forward<S, V>(out, x, inner, inner_scale, branch, scale, n, C, stream)
    CT_STREAM_DISPATCH(dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("scaled_add_forward", stream);
    return 0;
}

/* The two column-reduction backwards move V = 4 channels per thread (16-byte fp32 accesses) where
 * row_vector_width allows, else 1; a thread's rows are those of the 1-wide layout (r0 + ty + 8j),
 * so the parameter-gradient partials are the same sums in the same order either way. */
template <typename S, typename BranchT, int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    scaled_add_backward_kernel(S *dx, float *dbranch, __nv_bfloat16 *dbranch_bf16, double *partials, const S *dout,
                               const BranchT *branch, const float *scale, int N, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0.0;
    if (c < C) {
        const F32V<V> s = ld_control<S, V>(scale + c);
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const F32V<V> d = ld_stream<S, V>(dout + i);
            const auto b = ld_vec<V>(branch + i);
            F32V<V> v;
#pragma unroll
            for (int e = 0; e < V; e++) {
                v.v[e] = __fmul_rn(s.v[e], d.v[e]);
                acc[e] += (double)d.v[e] * (double)as_f32(b.v[e]);
            }
            if (dx) {
                F32V<V> g = ld_stream<S, V>(dx + i);
#pragma unroll
                for (int e = 0; e < V; e++) g.v[e] = __fadd_rn(g.v[e], d.v[e]);
                st_stream<S, V>(dx + i, g);
            }
            if (dbranch) st_vec<V>(dbranch + i, v);
            if (dbranch_bf16) {
                Bf16V<V> h;
#pragma unroll
                for (int e = 0; e < V; e++) h.v[e] = to_bf16(v.v[e]);
                st_vec<V>(dbranch_bf16 + i, h);
            }
        }
    }
    colsum_block_reduce_v<V>(acc, sh);
    if (threadIdx.y == 0 && c < C) {
#pragma unroll
        for (int e = 0; e < V; e++) partials[(size_t)blockIdx.y * C + c + e] = acc[e];
    }
}

template <typename S, int V>
static void launch_scaled_add_backward(const CudaScaledAddBackward *a, unsigned chunks, cudaStream_t stream) {
    S *dx = stream_ptr<S>(a->dx);
    float *dbranch = a->dbranch;
    __nv_bfloat16 *dbranch_bf16 = host_as_bf(a->dbranch_bf16);
    double *partials = a->partials;
    const S *dout = stream_ptr<S>(a->dout);
    const float *branch = a->branch, *scale = a->scale;
    const __nv_bfloat16 *branch_bf16 = host_as_bf(a->branch_bf16);
    const int N = a->N, C = a->C;
    const dim3 grid(ct_blocks((size_t)C, 32 * V), chunks), block(32, COLSUM_TY);
    if (branch)
        scaled_add_backward_kernel<S, float, V><<<grid, block, 0, stream>>>(dx, dbranch, dbranch_bf16, partials, dout,
                                                                            branch, scale, N, C);
    else
        scaled_add_backward_kernel<S, __nv_bfloat16, V><<<grid, block, 0, stream>>>(
            dx, dbranch, dbranch_bf16, partials, dout, branch_bf16, scale, N, C);
}

extern "C" int cuda_scaled_add_backward(const CudaScaledAddBackward *a, cudaStream_t stream) {
    const int N = a->N, C = a->C;
    if (N <= 0) return 0;
    if ((a->branch == NULL) == (a->branch_bf16 == NULL))
        return ct_fail("scaled_add_backward: exactly one of the fp32 and bf16 branches must be given");
    const int V = row_vector_width(C, {a->dx, a->dbranch, a->dbranch_bf16, a->dout, a->branch, a->branch_bf16, a->scale});
    const unsigned chunks = (unsigned)colsum_chunks(N);
#define LAUNCH(S, V) launch_scaled_add_backward<S, V>(a, chunks, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("scaled_add_backward", stream);
    return colsum_finish(a->dscale, a->partials, (int)chunks, C, stream);
}
