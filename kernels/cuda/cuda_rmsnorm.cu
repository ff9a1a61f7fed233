/* cuda_rmsnorm.cu — RMSNorm forward/backward (the pair of cpu_rmsnorm.c), plus the fused ops
 * that begin or end with an RMSNorm: the block-input (mix + norm) and add + norm forwards and
 * their backwards, which recompute the norms' inputs xm and x1 from the block input instead of
 * keeping them (see cuda_rmsnorm.h; docs/cuda.md, "Memory plan"). tests/unit/test_gpu_ops.c (gpu_ops_rowops.h)
 * checks each fused op against the CPU ops it fuses:
 *   cuda_mix_norm_forward, cuda_out_mix_norm_forward  cpu_scaled_add_forward (skip, block output)
 *                                                     + cpu_residual_mix_forward + cpu_rmsnorm_forward
 *   cuda_add_norm_forward                             cpu_scaled_add_forward + cpu_rmsnorm_forward
 *   cuda_norm_mix_backward                            cpu_rmsnorm_backward + cpu_residual_mix_backward
 *   cuda_add_norm_backward                            cpu_rmsnorm_backward (+ cpu_scaled_add_backward)
 * and bitwise against the unfused CUDA ops (cuda_residual_mix.cu, cuda_scaled_add.cu) that the
 * fused backwards fall back to where the device lacks their shared memory.
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
 * blocks of 32 channels x COLSUM_TY row lanes over CUDA_COLSUM_ROWS-token chunks.
 *
 * The kernels are templated on the residual stream's element type S (fp32 or bf16,
 * residual_dtype) besides V: the stream tensors are S, and cuda_common.cuh's stream helpers put
 * the bf16 roundings where cuda_rmsnorm.h says (control tensors rounded first, each stream
 * value once where stored, and where a stored value is recomputed: xm, x1, x_in, x_out, and a
 * backward's g before a fused op uses it). One kernel body per op thus gives both streams' bits,
 * fp32's unchanged (every helper is the identity there), and keeps the fused ops bitwise their
 * fallbacks in either type.
 *
 * Contents (the "----" sections below, in order): RMSNorm forward and backward; fused forwards
 * (the block output, the gated skip's skip_gate_value, the block input mix_norm and out_mix_norm,
 * add_norm); the block-input backward (norm + residual mix); the MLP-norm backward (+ the
 * attention residual's). */
#include "cuda_common.cuh"
#include "cuda_residual_mix.h"
#include "cuda_rmsnorm.h"
#include "cuda_scaled_add.h"

enum { ROW_THREADS = 256, ROWS_PER_BLOCK = ROW_THREADS / 32 };

static __device__ __forceinline__ float rstd_from_sumsq(double sum_sq, int C, float eps) {
    return (float)(1.0 / sqrt(sum_sq / C + (double)eps));
}

/* Second pass of mix_norm_forward, after the first wrote the row v and summed its
 * squares into ss (per lane): r = rstd of the row (warp sum), dst = bf16((v * r) * out_scale),
 * rstd[row] = r. out_scale: ln_scale's factor, 1 without it (x * 1 = x: the same bits). */
template <typename S, int V>
static __device__ __forceinline__ void norm_row_to_bf16(__nv_bfloat16 *dst, float *rstd, const S *v, double ss,
                                                        int row, int lane, int C, float eps, float out_scale) {
    ss = warp_sum_d(ss);
    const float r = rstd_from_sumsq(ss, C, eps);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_stream<S, V>(v + c);
        Bf16V<V> y;
#pragma unroll
        for (int e = 0; e < V; e++) y.v[e] = to_bf16(__fmul_rn(__fmul_rn(a.v[e], r), out_scale));
        st_vec<V>(dst + c, y);
    }
    if (lane == 0) rstd[row] = r;
}

/* xm = mix[0] * x_in + mix[1] * x0, the block-input mix, V channels: one definition for the
 * forward that makes xm and the backwards that recompute it instead of keeping it. */
template <int V>
static __device__ __forceinline__ F32V<V> mix_value(const F32V<V> &m0, const F32V<V> &m1, const F32V<V> &x_in,
                                                    const F32V<V> &x0) {
    F32V<V> y;
#pragma unroll
    for (int e = 0; e < V; e++) y.v[e] = __fadd_rn(__fmul_rn(m0.v[e], x_in.v[e]), __fmul_rn(m1.v[e], x0.v[e]));
    return y;
}

/* Launch KERNEL<S, V> over N rows, one warp per row (S and V as CT_STREAM_DISPATCH gives them). */
#define LAUNCH_ROWS(kernel, S, V, N, stream, ...)                                                  \
    kernel<S, V><<<ct_blocks((size_t)(N), ROWS_PER_BLOCK), ROW_THREADS, 0, (stream)>>>(__VA_ARGS__)

/* ---- RMSNorm ---- */

template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_forward_kernel(float *out, __nv_bfloat16 *out_bf16, float *rstd, const S *x, int N, int C, float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return; /* the whole warp leaves together */
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_stream<S, V>(x + base + c);
#pragma unroll
        for (int e = 0; e < V; e++) ss += (double)a.v[e] * (double)a.v[e];
    }
    ss = warp_sum_d(ss);
    const float r = rstd_from_sumsq(ss, C, eps);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> a = ld_stream<S, V>(x + base + c);
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

extern "C" int cuda_rmsnorm_forward(float *out, ct_bf16 *out_bf16, float *rstd, const void *x, int N, int C,
                                    float eps, int dtype, cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {out, out_bf16, x});
#define LAUNCH(S, V) \
    LAUNCH_ROWS(rmsnorm_forward_kernel, S, V, N, stream, out, host_as_bf(out_bf16), rstd, stream_ptr<S>(x), N, C, eps)
    CT_STREAM_DISPATCH(dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("rmsnorm_forward", stream);
    return 0;
}

/* The input x of a norm whose backward norm_backward_row computes, V channels: stored
 * (NORM_X), or the block-input mix xm = mix[0] * x_in + mix[1] * x0 recomputed (NORM_MIX: x is
 * x_in), or the MLP norm's input x1 = xm + scale * branch recomputed (NORM_MIX_ADD). The
 * backend keeps neither xm nor x1 (docs/cuda.md, "Memory plan"): on a stream of type S both are
 * rounded as the forwards stored them, mix and scale as the forwards rounded them. Besides the
 * value, the parts it was made from (those of MODE; the others stay zero), for the callers' own
 * sums: each is loaded once. */
enum { NORM_X, NORM_MIX, NORM_MIX_ADD };
template <int V>
struct NormInput {
    F32V<V> value;              /* x, xm or x1 */
    F32V<V> x_in, x0, m0, m1;   /* NORM_MIX, NORM_MIX_ADD */
    F32V<V> xm, scale;          /* xm: NORM_MIX, NORM_MIX_ADD; scale: NORM_MIX_ADD */
    Bf16V<V> branch;            /* NORM_MIX_ADD */
};
template <typename S, int V, int MODE>
static __device__ __forceinline__ NormInput<V> norm_input(const S *x, const S *x0, const float *mix,
                                                          const __nv_bfloat16 *branch, const float *scale, size_t i,
                                                          int c, int C) {
    NormInput<V> in{}; /* the parts MODE does not use stay zero (and unused) */
    if (MODE == NORM_X) {
        in.value = ld_stream<S, V>(x + i);
        return in;
    }
    in.x_in = ld_stream<S, V>(x + i), in.x0 = ld_stream<S, V>(x0 + i);
    in.m0 = ld_control<S, V>(mix + c), in.m1 = ld_control<S, V>(mix + C + c);
    in.xm = round_stream_v<S, V>(mix_value<V>(in.m0, in.m1, in.x_in, in.x0));
    if (MODE == NORM_MIX) {
        in.value = in.xm;
        return in;
    }
    in.scale = ld_control<S, V>(scale + c), in.branch = ld_vec<V>(branch + i);
    in.value = add_scaled_stream<S, V>(in.xm, in.scale, in.branch);
    return in;
}

/* The row dot sum(dout * x) of a norm's backward, x as norm_input gives it: each lane over its
 * channels, then the warp butterfly (fixed order). */
template <typename S, int V, int MODE>
static __device__ __forceinline__ double norm_row_dot(const float *dout, const S *x, const S *x0, const float *mix,
                                                      const __nv_bfloat16 *branch, const float *scale, size_t base,
                                                      int lane, int C) {
    double dot = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> d = ld_vec<V>(dout + base + c);
        const F32V<V> a = norm_input<S, V, MODE>(x, x0, mix, branch, scale, base + c, c, C).value;
#pragma unroll
        for (int e = 0; e < V; e++) dot += (double)d.v[e] * (double)a.v[e];
    }
    return warp_sum_d(dot);
}

/* The backward of one row's norm, one warp, x as norm_input gives it: g = dx + rstd*dout -
 * x*rstd^3*mean(dout*x), elementwise g + (rstd * dout - x_coeff * x), rounded as a stream value
 * of type S is stored. The lane's V-channel groups go in order to out(c, k, g, in) — c the first
 * channel, k the group's index within the lane, in the norm input's parts — which stores g or
 * carries it on: a fused op thus uses the g that its fallback stores and reads back. One
 * definition for the row kernels and the fused ones, so all compute the same bits. */
template <typename S, int V, int MODE, typename Out>
static __device__ __forceinline__ void norm_backward_row(const S *dx, const float *dout, const S *x, const S *x0,
                                                         const float *mix, const __nv_bfloat16 *branch,
                                                         const float *scale, float r, size_t base, int lane, int C,
                                                         Out &&out) {
    const double dot = norm_row_dot<S, V, MODE>(dout, x, x0, mix, branch, scale, base, lane, C);
    const float x_coeff = (float)((double)r * r * r * dot / C);
    int k = 0;
    for (int c = V * lane; c < C; c += 32 * V, k++) {
        const F32V<V> d = ld_vec<V>(dout + base + c);
        const NormInput<V> in = norm_input<S, V, MODE>(x, x0, mix, branch, scale, base + c, c, C);
        F32V<V> g = ld_stream<S, V>(dx + base + c);
#pragma unroll
        for (int e = 0; e < V; e++)
            g.v[e] = __fadd_rn(g.v[e], __fsub_rn(__fmul_rn(r, d.v[e]), __fmul_rn(x_coeff, in.value.v[e])));
        out(c, k, round_stream_v<S, V>(g), in);
    }
}

/* renorm = bf16((xm * r2) * s): the c_q/c_k/c_v input (xm's own norm, times ln_scale's factor s),
 * written again while xm is in hand */
template <int V>
static __device__ __forceinline__ void store_renorm(__nv_bfloat16 *renorm, const F32V<V> &xm, float r2, float s) {
    Bf16V<V> y;
#pragma unroll
    for (int e = 0; e < V; e++) y.v[e] = to_bf16(__fmul_rn(__fmul_rn(xm.v[e], r2), s));
    st_vec<V>(renorm, y);
}

/* dx += the norm's input gradient, x as norm_input gives it; NORM_MIX_ADD with renorm also
 * writes renorm = bf16(xm * renorm_rstd[row]). One warp per row. */
template <typename S, int V, int MODE>
static __device__ __forceinline__ void rmsnorm_backward_row(S *dx, const float *dout, const S *x, const S *x0,
                                                            const float *mix, const float *rstd,
                                                            const __nv_bfloat16 *branch, const float *scale,
                                                            __nv_bfloat16 *renorm, const float *renorm_rstd,
                                                            float renorm_scale, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    const float r2 = MODE == NORM_MIX_ADD && renorm ? renorm_rstd[row] : 0.0f;
    norm_backward_row<S, V, MODE>(dx, dout, x, x0, mix, branch, scale, rstd[row], base, lane, C,
                                  [&](int c, int, const F32V<V> &g, const NormInput<V> &in) {
                                      st_stream<S, V>(dx + base + c, g);
                                      if (MODE == NORM_MIX_ADD && renorm)
                                          store_renorm<V>(renorm + base + c, in.xm, r2, renorm_scale);
                                  });
}

template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_backward_plain(S *dx, const float *dout, const S *x, const float *rstd, int N, int C) {
    rmsnorm_backward_row<S, V, NORM_X>(dx, dout, x, NULL, NULL, rstd, NULL, NULL, NULL, NULL, 1.0f, N, C);
}
template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_backward_mix(S *dx, const float *dout, const S *x_in, const S *x0, const float *mix, const float *rstd,
                         int N, int C) {
    rmsnorm_backward_row<S, V, NORM_MIX>(dx, dout, x_in, x0, mix, rstd, NULL, NULL, NULL, NULL, 1.0f, N, C);
}
template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    rmsnorm_backward_mix_add(S *dx, const float *dout, const S *x_in, const S *x0, const float *mix,
                             const float *rstd, const __nv_bfloat16 *branch, const float *scale,
                             __nv_bfloat16 *renorm, const float *renorm_rstd, float renorm_scale, int N, int C) {
    rmsnorm_backward_row<S, V, NORM_MIX_ADD>(dx, dout, x_in, x0, mix, rstd, branch, scale, renorm, renorm_rstd,
                                             renorm_scale, N, C);
}

extern "C" int cuda_rmsnorm_backward(void *dx, const float *dout, const void *x, const float *rstd, int N, int C,
                                     int dtype, cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {dx, dout, x});
#define LAUNCH(S, V) \
    LAUNCH_ROWS(rmsnorm_backward_plain, S, V, N, stream, stream_ptr<S>(dx), dout, stream_ptr<S>(x), rstd, N, C)
    CT_STREAM_DISPATCH(dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("rmsnorm_backward", stream);
    return 0;
}

/* ---- fused forwards ---- */

/* CudaBlockOutput with device pointers, its stream tensors of type S; x_out NULL: the block input
 * x is given instead. */
template <typename S>
struct BlockOut {
    S *x_out;
    const S *xm;
    const float *attn_scale, *mlp_scale;
    const __nv_bfloat16 *ao, *mo;
};

/* The block output x_out = (xm + attn_scale * ao) + mlp_scale * mo, V channels at i (channel
 * c): scaled_add_forward_kernel's two adds, the inner x1 and x_out rounded as it rounds them. */
template <typename S, int V>
static __device__ __forceinline__ F32V<V> block_output(const BlockOut<S> &p, size_t i, int c) {
    const F32V<V> x1 =
        add_scaled_stream<S, V>(ld_stream<S, V>(p.xm + i), ld_control<S, V>(p.attn_scale + c), ld_vec<V>(p.ao + i));
    return add_scaled_stream<S, V>(x1, ld_control<S, V>(p.mlp_scale + c), ld_vec<V>(p.mo + i));
}

/* The gated skip (skip_gates_enabled) on the stream value x, V channels at channel c: lerp(w *
 * skip, x, g), g = sigmoid(skip_gate) (cpu_skip_gate_forward), with the bf16 stream's roundings
 * of train_gpt.py's `torch.lerp(w.to(bf16) * skip, x, sigmoid(gate.to(bf16)))`: w and the gate
 * rounded first, w * skip and g rounded as the bf16 tensors they are, the lerp once; its backward
 * (cuda_skip_gate.cu) remakes w * skip and g through the same helper's parts. */
template <typename S, int V>
static __device__ __forceinline__ F32V<V> skip_gate_value(const F32V<V> &x, const F32V<V> &skip, const float *skip_w,
                                                          const float *skip_gate, int c) {
    const F32V<V> w = ld_control<S, V>(skip_w + c), z = ld_control<S, V>(skip_gate + c);
    F32V<V> y;
#pragma unroll
    for (int e = 0; e < V; e++) {
        const float start = round_stream<S>(__fmul_rn(w.v[e], skip.v[e])), g = round_stream<S>(sigmoid_f32(z.v[e]));
        y.v[e] = lerp_f32(start, x.v[e], g);
    }
    return round_stream_v<S, V>(y);
}

/* The block input: x (or, with prev.x_out, the block before's output, made and written here)
 * plus the skip, the mix and its norm. In place on the backend's one xm buffer: prev.xm may be
 * xm, each element is read by the lane that then overwrites it. x_out, x_in and xm are used
 * further as they are stored (rounded, on a bf16 stream), so the norm is that of the stored xm. */
template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    mix_norm_forward_kernel(S *x_in, S *xm, float *rstd, __nv_bfloat16 *a_bf16, const S *x, const BlockOut<S> prev,
                            const S *skip, const float *skip_w, const float *skip_gate, const S *x0, const float *mix,
                            int N, int C, float eps, float out_scale) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        F32V<V> xi;
        if (prev.x_out) {
            xi = block_output<S, V>(prev, base + c, c);
            st_stream<S, V>(prev.x_out + base + c, xi);
        } else {
            xi = ld_stream<S, V>(x + base + c);
        }
        const F32V<V> z = ld_stream<S, V>(x0 + base + c), m0 = ld_control<S, V>(mix + c),
                      m1 = ld_control<S, V>(mix + C + c);
        if (skip && skip_gate) {
            xi = skip_gate_value<S, V>(xi, ld_stream<S, V>(skip + base + c), skip_w, skip_gate, c);
            st_stream<S, V>(x_in + base + c, xi);
        } else if (skip) {
            const F32V<V> sk = ld_stream<S, V>(skip + base + c), sw = ld_control<S, V>(skip_w + c);
#pragma unroll
            for (int e = 0; e < V; e++) xi.v[e] = __fadd_rn(xi.v[e], __fmul_rn(sw.v[e], sk.v[e]));
            xi = round_stream_v<S, V>(xi);
            st_stream<S, V>(x_in + base + c, xi);
        }
        const F32V<V> m = round_stream_v<S, V>(mix_value<V>(m0, m1, xi, z));
#pragma unroll
        for (int e = 0; e < V; e++) ss += (double)m.v[e] * (double)m.v[e];
        st_stream<S, V>(xm + base + c, m);
    }
    norm_row_to_bf16<S, V>(a_bf16 + base, rstd, xm + base, ss, row, lane, C, eps, out_scale);
}

/* Both block-input forwards: prev is the block before's output (cuda_out_mix_norm_forward) or
 * NULL (cuda_mix_norm_forward: a->x is the block input). */
template <typename S, int V>
static void launch_mix_norm(const CudaMixNorm *a, const CudaBlockOutput *prev, cudaStream_t stream) {
    S *x_in = stream_ptr<S>(a->x_in), *xm = stream_ptr<S>(a->xm);
    float *rstd = a->rstd;
    __nv_bfloat16 *a_bf16 = host_as_bf(a->a_bf16);
    const S *x = prev ? nullptr : stream_ptr<S>(a->x), *skip = stream_ptr<S>(a->skip), *x0 = stream_ptr<S>(a->x0);
    const float *skip_w = a->skip_w, *skip_gate = a->skip ? a->skip_gate : nullptr, *mix = a->mix;
    const int N = a->N, C = a->C;
    const float eps = a->eps, out_scale = a->out_scale;
    BlockOut<S> p = {};
    if (prev)
        p = BlockOut<S>{stream_ptr<S>(prev->x_out), stream_ptr<S>(prev->xm), prev->attn_scale, prev->mlp_scale,
                        host_as_bf(prev->ao), host_as_bf(prev->mo)};
    LAUNCH_ROWS(mix_norm_forward_kernel, S, V, N, stream, x_in, xm, rstd, a_bf16, x, p, skip, skip_w, skip_gate, x0,
                mix, N, C, eps, out_scale);
}
static int mix_norm(const CudaMixNorm *a, const CudaBlockOutput *prev, int V, const char *name, cudaStream_t stream) {
#define LAUNCH(S, V) launch_mix_norm<S, V>(a, prev, stream)
    CT_STREAM_DISPATCH(a->dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED(name, stream);
    return 0;
}

extern "C" int cuda_mix_norm_forward(const CudaMixNorm *a, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    const int V =
        row_vector_width(a->C, {a->x_in, a->xm, a->a_bf16, a->x, a->skip, a->skip_w, a->skip_gate, a->x0, a->mix});
    return mix_norm(a, NULL, V, "mix_norm_forward", stream);
}

extern "C" int cuda_out_mix_norm_forward(const CudaBlockOutput *prev, const CudaMixNorm *a, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    if (!prev || !prev->x_out || !prev->xm || !prev->ao || !prev->mo || !prev->attn_scale || !prev->mlp_scale)
        return ct_fail("out_mix_norm_forward: the block before's output needs x_out, xm, ao, mo and both scales");
    const int V = row_vector_width(a->C, {a->x_in, a->xm, a->a_bf16, a->skip, a->skip_w, a->skip_gate, a->x0, a->mix,
                                          prev->x_out,
                                          prev->xm, prev->ao, prev->mo, prev->attn_scale, prev->mlp_scale});
    return mix_norm(a, prev, V, "out_mix_norm_forward", stream);
}

/* x1 = xm + scale * branch is written only when x1 != NULL (the backend recomputes it where
 * it is needed: cuda_add_norm_backward, cuda_scaled_add_forward's inner branch), so the second
 * pass recomputes it rather than reading it back; the norm is that of x1 as stored (rounded, on
 * a bf16 stream). */
template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    add_norm_forward_kernel(S *x1, float *rstd, __nv_bfloat16 *m_bf16, const S *xm, const __nv_bfloat16 *branch,
                            const float *scale, int N, int C, float eps, float out_scale) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t base = (size_t)row * C;
    double ss = 0.0;
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> v = add_scaled_stream<S, V>(ld_stream<S, V>(xm + base + c), ld_control<S, V>(scale + c),
                                                  ld_vec<V>(branch + base + c));
#pragma unroll
        for (int e = 0; e < V; e++) ss += (double)v.v[e] * (double)v.v[e];
        if (x1) st_stream<S, V>(x1 + base + c, v);
    }
    ss = warp_sum_d(ss);
    const float r = rstd_from_sumsq(ss, C, eps);
    for (int c = V * lane; c < C; c += 32 * V) {
        const F32V<V> v = add_scaled_stream<S, V>(ld_stream<S, V>(xm + base + c), ld_control<S, V>(scale + c),
                                                  ld_vec<V>(branch + base + c));
        Bf16V<V> y;
#pragma unroll
        for (int e = 0; e < V; e++) y.v[e] = to_bf16(__fmul_rn(__fmul_rn(v.v[e], r), out_scale));
        st_vec<V>(m_bf16 + base + c, y);
    }
    if (lane == 0) rstd[row] = r;
}

extern "C" int cuda_add_norm_forward(void *x1, float *rstd, ct_bf16 *m_bf16, const void *xm, const ct_bf16 *branch,
                                     const float *scale, int N, int C, float eps, float out_scale, int dtype,
                                     cudaStream_t stream) {
    if (N <= 0) return 0;
    const int V = row_vector_width(C, {x1, m_bf16, xm, branch, scale});
#define LAUNCH(S, V)                                                                                         \
    LAUNCH_ROWS(add_norm_forward_kernel, S, V, N, stream, stream_ptr<S>(x1), rstd, host_as_bf(m_bf16), stream_ptr<S>(xm), \
                host_as_bf(branch), scale, N, C, eps, out_scale)
    CT_STREAM_DISPATCH(dtype, V, LAUNCH);
#undef LAUNCH
    CT_LAUNCHED("add_norm_forward", stream);
    return 0;
}

/* ---- block-input backward: attention norm + residual mix, fused ----
 * cuda_rmsnorm_backward of the attention norm, whose input xm is recomputed from x_in and x0,
 * then cuda_residual_mix_backward of xm = mix[0] x_in + mix[1] x0 on its result g, without
 * writing g: one block per CUDA_COLSUM_ROWS-row chunk, warp w = the column reductions' row lane
 * ty (rows r0 + w + 8j), one row at a time as the row kernels walk it (same dot, same g), and
 * each lane's share of the dmix sums kept per warp in shared memory, then added over the warps
 * in ty order: the two kernels' bits, with three passes over [N, C] fewer (g is neither written
 * nor read back, xm not read). A warp's accumulators are laid out lane-fastest (channel
 * V*lane + 32*V*k + e in slot (k*V + e)*32 + lane), so its 32 lanes touch 32 consecutive doubles
 * (no bank conflicts). Needs 8 warps x 2 x C doubles of shared memory (C rounded up to 32*V;
 * 64 KiB at C = 512); where the device has less the two kernels run instead. */

static_assert(ROWS_PER_BLOCK == COLSUM_TY, "norm_mix_backward: a warp per column-reduction row lane");

static __host__ __device__ __forceinline__ int norm_mix_padded(int C, int V) { return (C + 32 * V - 1) / (32 * V) * (32 * V); }
static size_t norm_mix_smem(int C, int V) {
    return (size_t)ROWS_PER_BLOCK * 2 * (size_t)norm_mix_padded(C, V) * sizeof(double);
}

/* The per-warp column accumulators of the fused row + column-reduction kernels (this one and
 * add_norm_scale_backward): warp w's S sums of channel c = V*lane + 32*V*k + e live at
 * acc[(w*S + s)*cpad + (k*V + e)*32 + lane], lane-fastest, so a warp's 32 lanes touch 32
 * consecutive doubles. Returns the calling lane's slot of sum 0, channel V*lane (sum s at
 * + s*cpad, channel + 32*V*k + e at + (k*V + e)*32), zeroed. */
template <int V, int S>
static __device__ __forceinline__ double *warp_acc_init(double *acc, int C) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, cpad = norm_mix_padded(C, V);
    double *mine = acc + (size_t)warp * S * cpad + lane;
    for (int s = 0; s < S; s++)
        for (int k = 0; V * lane + 32 * V * k < C; k++)
#pragma unroll
            for (int e = 0; e < V; e++) mine[s * cpad + (k * V + e) * 32] = 0.0;
    return mine;
}
/* After the rows: partials[s*C + c] = sum s of channel c over the warps, added in warp (= row
 * lane ty) order from 0.0, as colsum_block_reduce_v adds its row lanes. All threads call. */
template <int V, int S>
static __device__ __forceinline__ void warp_acc_finish(double *partials, const double *acc, int C) {
    __syncthreads();
    const int cpad = norm_mix_padded(C, V);
    for (int c = threadIdx.x; c < C; c += ROW_THREADS) {
        const int k = c / (32 * V), lane_c = c % (32 * V) / V, e = c % V;
        const size_t slot = (size_t)(k * V + e) * 32 + lane_c;
#pragma unroll
        for (int s = 0; s < S; s++) {
            double sum = 0.0;
#pragma unroll
            for (int w = 0; w < ROWS_PER_BLOCK; w++) sum += acc[((size_t)w * S + s) * cpad + slot];
            partials[(size_t)s * C + c] = sum;
        }
    }
}

template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    norm_mix_backward_kernel(S *dx_in, S *dx0, double *partials, const S *dx, const float *dout, const S *x_in,
                             const S *x0, const float *mix, const float *rstd, int N, int C) {
    CT_DYNAMIC_SMEM(smem);
    double *acc = reinterpret_cast<double *>(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double *acc_x = warp_acc_init<V, 2>(acc, C), *acc_x0 = acc_x + norm_mix_padded(C, V);
    const int r0 = blockIdx.x * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    for (int row = r0 + warp; row < r1; row += ROWS_PER_BLOCK) {
        const size_t base = (size_t)row * C;
        /* g is the norm's input gradient (rounded as the fallback stores it); the mix's backward
         * takes it on at once */
        norm_backward_row<S, V, NORM_MIX>(dx, dout, x_in, x0, mix, NULL, NULL, rstd[row], base, lane, C,
                                          [&](int c, int k, const F32V<V> &g, const NormInput<V> &in) {
                                              double *ax = acc_x + k * 32 * V, *ax0 = acc_x0 + k * 32 * V;
                                              F32V<V> gi, g0 = ld_stream<S, V>(dx0 + base + c);
#pragma unroll
                                              for (int e = 0; e < V; e++) {
                                                  gi.v[e] = __fmul_rn(in.m0.v[e], g.v[e]);
                                                  g0.v[e] = __fadd_rn(g0.v[e], __fmul_rn(in.m1.v[e], g.v[e]));
                                                  ax[e * 32] += (double)g.v[e] * (double)in.x_in.v[e];
                                                  ax0[e * 32] += (double)g.v[e] * (double)in.x0.v[e];
                                              }
                                              st_stream<S, V>(dx_in + base + c, gi);
                                              st_stream<S, V>(dx0 + base + c, g0);
                                          });
    }
    warp_acc_finish<V, 2>(partials + (size_t)blockIdx.x * 2 * C, acc, C);
}

/* Whether a fused kernel can take this C here: the shared memory it asks for must be granted
 * (cudaFuncSetAttribute fails beyond the device's per-block maximum; that error is cleared so
 * that it does not surface at the next launch check). */
template <typename Kernel>
static bool smem_fits(Kernel kernel, size_t smem) {
    if (smem <= INT32_MAX &&
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) == cudaSuccess)
        return true;
    (void)cudaGetLastError();
    return false;
}

template <typename S, int V>
static int norm_mix_backward(const CudaNormMixBackward *a, cudaStream_t stream) {
    S *dx_in = stream_ptr<S>(a->dx_in), *dx0 = stream_ptr<S>(a->dx0), *dx = stream_ptr<S>(a->dx);
    const S *x_in = stream_ptr<S>(a->x_in), *x0 = stream_ptr<S>(a->x0);
    const float *dout = a->dout, *mix = a->mix, *rstd = a->rstd;
    const int N = a->N, C = a->C;
    double *partials = a->partials;
    const unsigned chunks = (unsigned)colsum_chunks(N);
    const size_t smem = norm_mix_smem(C, V);
    if (smem_fits(norm_mix_backward_kernel<S, V>, smem)) {
        norm_mix_backward_kernel<S, V><<<chunks, ROW_THREADS, smem, stream>>>(dx_in, dx0, partials, dx, dout, x_in, x0,
                                                                              mix, rstd, N, C);
        CT_LAUNCHED("norm_mix_backward", stream);
        return colsum_finish(a->dmix, partials, (int)chunks, 2 * C, stream);
    }
    /* the two kernels: g in place in dx, then the mix backward on it */
    LAUNCH_ROWS(rmsnorm_backward_mix, S, V, N, stream, dx, dout, x_in, x0, mix, rstd, N, C);
    CT_LAUNCHED("rmsnorm_backward (mix)", stream);
    const CudaResidualMixBackward mix_backward = {a->dx_in, 0, a->dx0, a->dmix, a->dx, a->x_in, a->x0, a->mix,
                                                  partials, N, C, a->dtype};
    return cuda_residual_mix_backward(&mix_backward, stream);
}

extern "C" int cuda_norm_mix_backward(const CudaNormMixBackward *a, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    const int V = row_vector_width(a->C, {a->dx_in, a->dx0, a->dx, a->dout, a->x_in, a->x0, a->mix});
    int rc = -1;
#define RUN(S, V) rc = norm_mix_backward<S, V>(a, stream)
    CT_STREAM_DISPATCH(a->dtype, V, RUN);
#undef RUN
    return rc;
}

/* ---- MLP-norm backward + the attention residual's, fused ----
 * cuda_add_norm_backward's row pass (dx += the MLP norm's input gradient, x1 recomputed), then,
 * on the updated row, cuda_scaled_add_backward's for x1 = xm + scale * branch: dbranch_bf16 =
 * bf16(scale * dx), dscale partials += dx * branch. The layout of norm_mix_backward: one block
 * per CUDA_COLSUM_ROWS-row chunk, warp w = the column reduction's row lane ty, the per-lane
 * sums kept per warp in shared memory (lane-fastest) and added over the warps in ty order, so
 * the bits are those of the two kernels; dx and branch are not read a second time. */

static size_t add_norm_scale_smem(int C, int V) {
    return (size_t)ROWS_PER_BLOCK * (size_t)norm_mix_padded(C, V) * sizeof(double);
}

template <typename S, int V>
static __global__ void __launch_bounds__(ROW_THREADS)
    add_norm_scale_backward_kernel(S *dx, __nv_bfloat16 *renorm, __nv_bfloat16 *dbranch, double *partials,
                                   const float *dout, const S *x_in, const S *x0, const float *mix,
                                   const __nv_bfloat16 *branch, const float *scale, const float *rstd,
                                   const float *renorm_rstd, float renorm_scale, int N, int C) {
    CT_DYNAMIC_SMEM(smem);
    double *acc = reinterpret_cast<double *>(smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double *acc_s = warp_acc_init<V, 1>(acc, C);
    const int r0 = blockIdx.x * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    for (int row = r0 + warp; row < r1; row += ROWS_PER_BLOCK) {
        const size_t base = (size_t)row * C;
        const float r2 = renorm ? renorm_rstd[row] : 0.0f;
        /* g is dL/dx1 (rounded as stored); x1 = xm + scale * branch's backward takes it on at once */
        norm_backward_row<S, V, NORM_MIX_ADD>(dx, dout, x_in, x0, mix, branch, scale, rstd[row], base, lane, C,
                                              [&](int c, int k, const F32V<V> &g, const NormInput<V> &in) {
                                                  double *as = acc_s + k * 32 * V;
                                                  Bf16V<V> h;
#pragma unroll
                                                  for (int e = 0; e < V; e++) {
                                                      h.v[e] = to_bf16(__fmul_rn(in.scale.v[e], g.v[e]));
                                                      as[e * 32] += (double)g.v[e] * (double)as_f32(in.branch.v[e]);
                                                  }
                                                  st_stream<S, V>(dx + base + c, g);
                                                  st_vec<V>(dbranch + base + c, h);
                                                  if (renorm)
                                                      store_renorm<V>(renorm + base + c, in.xm, r2, renorm_scale);
                                              });
    }
    warp_acc_finish<V, 1>(partials + (size_t)blockIdx.x * C, acc, C);
}

template <typename S, int V>
static int add_norm_backward(const CudaAddNormBackward *a, cudaStream_t stream) {
    S *dx = stream_ptr<S>(a->dx);
    __nv_bfloat16 *renorm = host_as_bf(a->renorm), *dbranch = host_as_bf(a->dbranch);
    const float *dout = a->dout, *mix = a->mix, *scale = a->scale, *rstd = a->rstd, *renorm_rstd = a->renorm_rstd;
    const S *x_in = stream_ptr<S>(a->x_in), *x0 = stream_ptr<S>(a->x0);
    const __nv_bfloat16 *branch = host_as_bf(a->branch);
    const float renorm_scale = a->renorm_scale;
    const int N = a->N, C = a->C;
    double *partials = a->partials;
    if (dbranch) {
        const unsigned chunks = (unsigned)colsum_chunks(N);
        const size_t smem = add_norm_scale_smem(C, V);
        if (smem_fits(add_norm_scale_backward_kernel<S, V>, smem)) {
            add_norm_scale_backward_kernel<S, V><<<chunks, ROW_THREADS, smem, stream>>>(
                dx, renorm, dbranch, partials, dout, x_in, x0, mix, branch, scale, rstd, renorm_rstd, renorm_scale, N,
                C);
            CT_LAUNCHED("add_norm_scale_backward", stream);
            return colsum_finish(a->dscale, partials, (int)chunks, C, stream);
        }
    }
    LAUNCH_ROWS(rmsnorm_backward_mix_add, S, V, N, stream, dx, dout, x_in, x0, mix, rstd, branch, scale, renorm,
                renorm_rstd, renorm_scale, N, C);
    CT_LAUNCHED("add_norm_backward", stream);
    /* the residual's backward as its own pass where the fused kernel does not fit */
    if (dbranch) {
        const CudaScaledAddBackward residual = {NULL, NULL, a->dbranch, a->dscale, a->dx, NULL, a->branch,
                                                a->scale, partials, N, C, a->dtype};
        return cuda_scaled_add_backward(&residual, stream);
    }
    return 0;
}

extern "C" int cuda_add_norm_backward(const CudaAddNormBackward *a, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    if ((a->renorm == NULL) != (a->renorm_rstd == NULL))
        return ct_fail("add_norm_backward: renorm and renorm_rstd go together");
    if ((a->dbranch == NULL) != (a->dscale == NULL) || (a->dbranch && !a->partials))
        return ct_fail("add_norm_backward: dbranch, dscale and partials go together");
    const int V = row_vector_width(a->C, {a->dx, a->renorm, a->dbranch, a->dout, a->x_in, a->x0, a->mix, a->branch,
                                          a->scale});
    int rc = -1;
#define RUN(S, V) rc = add_norm_backward<S, V>(a, stream)
    CT_STREAM_DISPATCH(a->dtype, V, RUN);
#undef RUN
    return rc;
}
