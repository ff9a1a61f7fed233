/* cuda_smear.cu — the record's SmearGate, forward and backward (see cuda_smear.h; the pair of
 * cpu_smear.c). Both kernels use the column-reduction layout of cuda_common.cuh (blocks of 32
 * channel lanes x COLSUM_TY row lanes over a chunk of CUDA_COLSUM_ROWS tokens; V = 4 channels per
 * thread where row_vector_width allows, else 1, a thread's rows those of the 1-wide layout), so
 * each thread computes its channels' gates once and the backward's dgate partials come out of the
 * same pass in the fixed order of the other parameter-gradient sums.
 * The element-wise fp32 operations are the CPU op's, with explicit roundings; the gate is
 * cuda_common.cuh's sigmoid_f32 (glibc expf's correctly rounded value). */
#include "cuda_common.cuh"
#include "cuda_smear.h"

template <int V>
static __device__ __forceinline__ void smear_gates(F32V<V> &g, F32V<V> &one_minus_g, const float *gate, int c) {
#pragma unroll
    for (int e = 0; e < V; e++) {
        g.v[e] = sigmoid_f32(gate[c + e]);
        one_minus_g.v[e] = __fsub_rn(1.0f, g.v[e]);
    }
}

template <int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    smear_forward_kernel(float *out, const float *x, const float *gate, int N, int T, int C) {
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    if (c >= C) return; /* no block-wide step follows */
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    F32V<V> g, omg;
    smear_gates<V>(g, omg, gate, c);
    for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
        const size_t i = (size_t)r * C + c;
        const F32V<V> xv = ld_vec<V>(x + i);
        const F32V<V> pv = r % T == 0 ? F32V<V>{} : ld_vec<V>(x + i - C);
        F32V<V> o;
#pragma unroll
        for (int e = 0; e < V; e++) o.v[e] = __fadd_rn(__fmul_rn(omg.v[e], xv.v[e]), __fmul_rn(g.v[e], pv.v[e]));
        st_vec<V>(out + i, o);
    }
}

extern "C" int cuda_smear_forward(float *out, const float *x, const float *gate, int B, int T, int C,
                                  cudaStream_t stream) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return 0;
    if (out == x) return ct_fail("smear_forward: out must not alias x");
    const dim3 block(32, COLSUM_TY);
    const unsigned chunks = (unsigned)colsum_chunks(N);
    if (row_vector_width(C, {out, x, gate}) == 4)
        smear_forward_kernel<4><<<dim3(ct_blocks((size_t)C, 32 * 4), chunks), block, 0, stream>>>(out, x, gate, N, T,
                                                                                                 C);
    else
        smear_forward_kernel<1><<<dim3(ct_blocks((size_t)C, 32), chunks), block, 0, stream>>>(out, x, gate, N, T, C);
    CT_LAUNCHED("smear_forward", stream);
    return 0;
}

extern "C" size_t cuda_smear_backward_partials_doubles(int B, int T, int C) { return cuda_colsum_doubles(B * T, C, 1); }

template <int V>
static __global__ void __launch_bounds__(32 * COLSUM_TY)
    smear_backward_kernel(float *dx, double *partials, const float *dout, const float *x, const float *gate, int N,
                          int T, int C) {
    __shared__ double sh[COLSUM_TY][32 * V];
    const int c = (blockIdx.x * 32 + threadIdx.x) * V;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc[V];
#pragma unroll
    for (int e = 0; e < V; e++) acc[e] = 0.0;
    if (c < C) {
        F32V<V> g, omg;
        smear_gates<V>(g, omg, gate, c);
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            const int t = r % T;
            const F32V<V> d = ld_vec<V>(dout + i), xv = ld_vec<V>(x + i);
            const F32V<V> nx = t == T - 1 ? F32V<V>{} : ld_vec<V>(dout + i + C);
            const F32V<V> pv = t == 0 ? F32V<V>{} : ld_vec<V>(x + i - C);
            F32V<V> gx = ld_vec<V>(dx + i);
#pragma unroll
            for (int e = 0; e < V; e++) {
                gx.v[e] = __fadd_rn(gx.v[e], __fadd_rn(__fmul_rn(omg.v[e], d.v[e]), __fmul_rn(g.v[e], nx.v[e])));
                acc[e] += (double)d.v[e] * (double)__fsub_rn(pv.v[e], xv.v[e]);
            }
            st_vec<V>(dx + i, gx);
        }
    }
    colsum_block_reduce_v<V>(acc, sh);
    if (threadIdx.y == 0 && c < C) {
#pragma unroll
        for (int e = 0; e < V; e++) partials[(size_t)blockIdx.y * C + c + e] = acc[e];
    }
}

/* dgate[c] += (float)((sum of the chunks' partials, in chunk order) * g * (1 - g)), the CPU's
 * product order, in double. */
static __global__ void smear_gate_finish_kernel(float *dgate, const double *partials, const float *gate, int n_chunks,
                                                int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double total = 0.0;
    for (int k = 0; k < n_chunks; k++) total += partials[(size_t)k * C + c];
    const float g = sigmoid_f32(gate[c]);
    dgate[c] = __fadd_rn(dgate[c], (float)(total * (double)g * (double)__fsub_rn(1.0f, g)));
}

extern "C" int cuda_smear_backward(float *dx, float *dgate, const float *dout, const float *x, const float *gate,
                                   int B, int T, int C, double *partials, cudaStream_t stream) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return 0;
    if (dx == dout) return ct_fail("smear_backward: dx must not alias dout");
    const dim3 block(32, COLSUM_TY);
    const unsigned chunks = (unsigned)colsum_chunks(N);
    if (row_vector_width(C, {dx, dout, x, gate}) == 4)
        smear_backward_kernel<4><<<dim3(ct_blocks((size_t)C, 32 * 4), chunks), block, 0, stream>>>(
            dx, partials, dout, x, gate, N, T, C);
    else
        smear_backward_kernel<1><<<dim3(ct_blocks((size_t)C, 32), chunks), block, 0, stream>>>(dx, partials, dout, x,
                                                                                              gate, N, T, C);
    CT_LAUNCHED("smear_backward", stream);
    smear_gate_finish_kernel<<<ct_blocks((size_t)C, 128), 128, 0, stream>>>(dgate, partials, gate, colsum_chunks(N),
                                                                            C);
    CT_LAUNCHED("smear_gate_finish", stream);
    return 0;
}
