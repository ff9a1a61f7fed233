/* cuda_smear_bos.cu — the 1.0611 record's SmearGate with the BOS mask, forward and backward (see
 * cuda_smear_bos.h; the pair of cpu_smear_bos.c). One warp per token row, as cuda_head_gate.cu:
 * every lane sums the gate's logit itself (the same bits in every lane; the window is small) and
 * moves channels lane + 32k. The backward's per-token pass also leaves the two terms of the
 * parameter gradients (in double, as the CPU forms them); their sums over tokens run one thread
 * per (sum, chunk of CUDA_COLSUM_ROWS tokens) in token order, and a finishing kernel adds the
 * chunks in chunk order: no atomics, the same bits every run. */
#include "cuda_common.cuh"
#include "cuda_smear_bos.h"

enum { SB_THREADS = 256, SB_WARPS = SB_THREADS / 32, SB_SUM_THREADS = 64 };

/* Whether token n (row-major over rows of T) takes the previous token's embedding. */
static __device__ __forceinline__ int smears(size_t n, int T, const int32_t *ids, long long bos_id) {
    return n % (size_t)T != 0 && (long long)ids[n] != bos_id;
}

/* sigmoid(w . e[:window]), the logit summed in double in channel order (the CPU's) */
static __device__ __forceinline__ float gate_sigmoid(const float *e, const float *w, int window) {
    double z = 0.0;
    for (int k = 0; k < window; k++) z += (double)w[k] * (double)e[k];
    return sigmoid_f32((float)z);
}

static __global__ void __launch_bounds__(SB_THREADS)
    smear_bos_forward_kernel(float *out, const float *e, const int32_t *ids, const float *w, const float *lambda,
                             int T, int C, int window, long long bos_id, size_t rows) {
    const size_t n = (size_t)blockIdx.x * SB_WARPS + (threadIdx.x >> 5);
    if (n >= rows) return;
    const int lane = threadIdx.x & 31;
    const size_t row = n * (size_t)C;
    if (!smears(n, T, ids, bos_id)) {
        for (int c = lane; c < C; c += 32) out[row + c] = e[row + c];
        return;
    }
    const float g = __fmul_rn(lambda[0], gate_sigmoid(e + row, w, window));
    for (int c = lane; c < C; c += 32) out[row + c] = __fadd_rn(e[row + c], __fmul_rn(g, e[row - C + c]));
}

extern "C" int cuda_smear_bos_forward(float *out, const float *e, const int32_t *ids, const float *w,
                                      const float *lambda, int B, int T, int C, int window, int64_t bos_id,
                                      cudaStream_t stream) {
    const size_t rows = (size_t)B * T;
    if (rows == 0 || C <= 0) return 0;
    if (out == e) return ct_fail("smear_bos_forward: out must not alias e");
    if (window < 1 || window > C) return ct_fail("smear_bos_forward: a window of %d channels outside [1, %d]", window, C);
    smear_bos_forward_kernel<<<ct_blocks(rows, SB_WARPS), SB_THREADS, 0, stream>>>(out, e, ids, w, lambda, T, C,
                                                                                    window, (long long)bos_id, rows);
    CT_LAUNCHED("smear_bos_forward", stream);
    return 0;
}

extern "C" size_t cuda_smear_bos_backward_scratch_doubles(int B, int T, int window) {
    return 2 * (size_t)B * T + cuda_colsum_doubles(B * T, window + 1, 1);
}

/* de_t += dout_t + m_{t+1} g_{t+1} dout_{t+1}, then += dz_t w (first W channels, smearing tokens),
 * dz_t = (float)(lambda s_t (1 - s_t) p_t), p_t = e_{t-1} . dout_t (double); terms[2t] gets
 * lambda s_t (1 - s_t) p_t, terms[2t+1] s_t p_t (dw's and dlambda's), 0 where t does not smear. */
static __global__ void __launch_bounds__(SB_THREADS)
    smear_bos_backward_kernel(float *de, double *terms, const float *dout, const float *e, const int32_t *ids,
                              const float *w, const float *lambda, int T, int C, int window, long long bos_id,
                              size_t rows) {
    const size_t n = (size_t)blockIdx.x * SB_WARPS + (threadIdx.x >> 5);
    if (n >= rows) return; /* the whole warp leaves together */
    const int lane = threadIdx.x & 31;
    const size_t row = n * (size_t)C;
    const float lam = lambda[0];
    const int self = smears(n, T, ids, bos_id);
    const int next = n % (size_t)T != (size_t)T - 1 && smears(n + 1, T, ids, bos_id);
    const float g_next = next ? __fmul_rn(lam, gate_sigmoid(e + row + C, w, window)) : 0.0f;
    double p = 0.0;
    if (self) {
        for (int c = lane; c < C; c += 32) p += (double)e[row - C + c] * (double)dout[row + c];
        p = warp_sum_d(p);
    }
    float s = 0.0f, dz = 0.0f;
    double coef = 0.0;
    if (self) {
        s = gate_sigmoid(e + row, w, window);
        coef = (double)__fmul_rn(__fmul_rn(lam, s), __fsub_rn(1.0f, s)) * p;
        dz = (float)coef;
    }
    if (lane == 0) {
        terms[2 * n] = coef;
        terms[2 * n + 1] = self ? (double)s * p : 0.0;
    }
    for (int c = lane; c < C; c += 32) {
        const float d = next ? __fadd_rn(dout[row + c], __fmul_rn(g_next, dout[row + C + c])) : dout[row + c];
        float v = __fadd_rn(de[row + c], d);
        if (self && c < window) v = __fadd_rn(v, __fmul_rn(dz, w[c]));
        de[row + c] = v;
    }
}

/* partials[chunk][k] = sum over the chunk's tokens, in order, of terms[2t] e_t[k] (k < window),
 * and [window] of terms[2t+1] */
static __global__ void smear_bos_sum_kernel(double *partials, const double *terms, const float *e, int N, int C,
                                            int window) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k > window) return;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS, r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc = 0.0;
    if (k < window)
        for (int r = r0; r < r1; r++) acc += terms[2 * (size_t)r] * (double)e[(size_t)r * C + k];
    else
        for (int r = r0; r < r1; r++) acc += terms[2 * (size_t)r + 1];
    partials[(size_t)blockIdx.y * (window + 1) + k] = acc;
}

/* dw[k] += (float)(the chunks' partials added in chunk order); dlambda[0] the same from column window */
static __global__ void smear_bos_finish_kernel(float *dw, float *dlambda, const double *partials, int n_chunks,
                                               int window) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k > window) return;
    double total = 0.0;
    for (int j = 0; j < n_chunks; j++) total += partials[(size_t)j * (window + 1) + k];
    float *g = k < window ? dw + k : dlambda;
    *g = __fadd_rn(*g, (float)total);
}

extern "C" int cuda_smear_bos_backward(float *de, float *dw, float *dlambda, const float *dout, const float *e,
                                       const int32_t *ids, const float *w, const float *lambda, int B, int T, int C,
                                       int window, int64_t bos_id, double *scratch, cudaStream_t stream) {
    const size_t rows = (size_t)B * T;
    if (rows == 0 || C <= 0) return 0;
    if (de == dout) return ct_fail("smear_bos_backward: de must not alias dout");
    if (window < 1 || window > C)
        return ct_fail("smear_bos_backward: a window of %d channels outside [1, %d]", window, C);
    double *terms = scratch, *partials = scratch + 2 * rows;
    smear_bos_backward_kernel<<<ct_blocks(rows, SB_WARPS), SB_THREADS, 0, stream>>>(
        de, terms, dout, e, ids, w, lambda, T, C, window, (long long)bos_id, rows);
    CT_LAUNCHED("smear_bos_backward", stream);
    const int N = (int)rows, chunks = colsum_chunks(N);
    const dim3 grid(ct_blocks((size_t)window + 1, SB_SUM_THREADS), (unsigned)chunks);
    smear_bos_sum_kernel<<<grid, SB_SUM_THREADS, 0, stream>>>(partials, terms, e, N, C, window);
    CT_LAUNCHED("smear_bos_sum", stream);
    smear_bos_finish_kernel<<<ct_blocks((size_t)window + 1, SB_SUM_THREADS), SB_SUM_THREADS, 0, stream>>>(
        dw, dlambda, partials, chunks, window);
    CT_LAUNCHED("smear_bos_finish", stream);
    return 0;
}
