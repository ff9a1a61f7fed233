/* cuda_logits.cu — output logits, tanh softcap and cross-entropy, fused and chunked over tokens
 * (see cuda_logits.h; the pair of cpu_logits.c). Per chunk: one bf16 GEMM gives the fp32 logits z
 * [rows, V]; one block per row does softcap, max, sum of exponentials (double, fixed tree), the
 * loss and, when training, the bf16 gradient dz; two bf16 GEMMs give dx and dW. Only chunk x V
 * logits exist at a time. The row arithmetic is logits_ce's (cpu_logits.c) with explicit fp32
 * roundings. The head adapter (lowrank) adds one GEMM into z before the row kernel and two from
 * dz after it, as cpu_logits.c's shared body. */
#include "cuda_common.cuh"
#include "cuda_gemm.h"
#include "cuda_logits.h"

enum { CE_THREADS = 256 };

extern "C" size_t cuda_logits_z_floats(int chunk, int V) { return (size_t)chunk * V; }
extern "C" size_t cuda_logits_dz_elems(int chunk, int V) { return (size_t)chunk * V; }

template <bool GRAD>
static __global__ void __launch_bounds__(CE_THREADS)
    softcap_ce_kernel(float *z, __nv_bfloat16 *dz, float *losses, const int32_t *targets, int V, float softcap,
                      float grad_scale) {
    __shared__ double sum_scratch[CE_THREADS / 32];
    __shared__ float max_scratch[CE_THREADS / 32];
    const int row = blockIdx.x;
    float *zr = z + (size_t)row * V;
    const int target = targets[row];

    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += CE_THREADS) {
        const float t = tanhf(__fdiv_rn(zr[j], softcap));
        zr[j] = t; /* the row now holds tanh(z / softcap) */
        mx = fmaxf(mx, __fmul_rn(softcap, t));
    }
    mx = block_max<CE_THREADS>(mx, max_scratch); /* its barriers also publish the tanh row */
    double se = 0.0;
    for (int j = threadIdx.x; j < V; j += CE_THREADS) se += (double)expf(__fsub_rn(__fmul_rn(softcap, zr[j]), mx));
    se = block_sum_d<CE_THREADS>(se, sum_scratch);
    if (threadIdx.x == 0) {
        const double loss = (double)mx + log(se) - (double)__fmul_rn(softcap, zr[target]);
        losses[row] = (float)loss;
    }
    if (GRAD) {
        const float inv_sum = (float)(1.0 / se);
        __nv_bfloat16 *dzr = dz + (size_t)row * V;
        for (int j = threadIdx.x; j < V; j += CE_THREADS) {
            const float t = zr[j];
            const float prob = __fmul_rn(expf(__fsub_rn(__fmul_rn(softcap, t), mx)), inv_sum);
            const float ds = j == target ? __fsub_rn(prob, 1.0f) : prob;
            dzr[j] = to_bf16(__fmul_rn(__fmul_rn(grad_scale, ds), __fsub_rn(1.0f, __fmul_rn(t, t))));
        }
    }
}

static int logits_ce(cublasHandle_t handle, float *dx, float *dW, const CudaLogitsLowRank *lowrank, float *losses,
                     const ct_bf16 *x, const ct_bf16 *W, const int32_t *targets, int N, int C, int V, float softcap,
                     float grad_scale, float *z, ct_bf16 *dz, int chunk, cudaStream_t stream) {
    if (!(softcap > 0.0f)) return ct_fail("cuda logits: softcap must be positive, got %g", (double)softcap);
    if (chunk < 1) return ct_fail("cuda logits: chunk must be at least 1 token, got %d", chunk);
    if (lowrank && (!lowrank->h || !lowrank->B || lowrank->r < 1))
        return ct_fail("cuda logits: the low-rank head needs h, B and r >= 1 (h %p, B %p, r %d)",
                       (const void *)lowrank->h, (const void *)lowrank->B, lowrank->r);
    const bool grad = dz != NULL;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int rows = N - n0 < chunk ? N - n0 : chunk;
        const ct_bf16 *xc = x + (size_t)n0 * C;
        /* z[rows,V] = x W^T */
        if (cuda_gemm(handle, 0, 1, rows, V, C, 1.0f, xc, CT_BF16, C, W, CT_BF16, C, 0.0f, z, CT_F32, V) != 0)
            return ct_fail_prefix("logits forward");
        const ct_bf16 *hc = lowrank ? lowrank->h + (size_t)n0 * lowrank->r : NULL;
        /* z[rows,V] += s * h B^T, before the softcap */
        if (lowrank && cuda_gemm(handle, 0, 1, rows, V, lowrank->r, lowrank->s, hc, CT_BF16, lowrank->r, lowrank->B,
                                 CT_BF16, lowrank->r, 1.0f, z, CT_F32, V) != 0)
            return ct_fail_prefix("logits forward (low-rank head)");
        if (grad)
            softcap_ce_kernel<true><<<rows, CE_THREADS, 0, stream>>>(z, host_as_bf(dz), losses + n0, targets + n0, V,
                                                                     softcap, grad_scale);
        else
            softcap_ce_kernel<false><<<rows, CE_THREADS, 0, stream>>>(z, nullptr, losses + n0, targets + n0, V,
                                                                      softcap, 0.0f);
        CT_LAUNCHED("softcap_cross_entropy", stream);
        if (grad) {
            /* dx[rows,C] += dz W;  dW[V,C] += dz^T x */
            if (cuda_gemm(handle, 0, 0, rows, C, V, 1.0f, dz, CT_BF16, V, W, CT_BF16, C, 1.0f, dx + (size_t)n0 * C,
                          CT_F32, C) != 0)
                return ct_fail_prefix("logits backward (input gradient)");
            if (dW &&
                cuda_gemm(handle, 1, 0, V, C, rows, 1.0f, dz, CT_BF16, V, xc, CT_BF16, C, 1.0f, dW, CT_F32, C) != 0)
                return ct_fail_prefix("logits backward (weight gradient)");
            if (lowrank) {
                /* dh[rows,r] += s * dz B;  dB[V,r] += s * dz^T h */
                const int r = lowrank->r;
                if (lowrank->dh && cuda_gemm(handle, 0, 0, rows, r, V, lowrank->s, dz, CT_BF16, V, lowrank->B,
                                             CT_BF16, r, 1.0f, lowrank->dh + (size_t)n0 * r, CT_F32, r) != 0)
                    return ct_fail_prefix("logits backward (low-rank head, dh)");
                if (lowrank->dB && cuda_gemm(handle, 1, 0, V, r, rows, lowrank->s, dz, CT_BF16, V, hc, CT_BF16, r,
                                             1.0f, lowrank->dB, CT_F32, r) != 0)
                    return ct_fail_prefix("logits backward (low-rank head, dB)");
            }
        }
    }
    return 0;
}

extern "C" int cuda_logits_ce_lowrank_forward_backward(cublasHandle_t handle, const CudaLogits *a,
                                                       const CudaLogitsLowRank *lowrank, float *dx, float *dW,
                                                       float loss_weight, ct_bf16 *dz_scratch, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    if (!dz_scratch || !dx) return ct_fail("cuda logits: training needs dx and the dz scratch");
    const float grad_scale = (float)((double)loss_weight / a->N);
    return logits_ce(handle, dx, dW, lowrank, a->losses, a->x, a->W, a->targets, a->N, a->C, a->V, a->softcap,
                     grad_scale, a->z_scratch, dz_scratch, a->chunk, stream);
}

extern "C" int cuda_logits_ce_lowrank_forward(cublasHandle_t handle, const CudaLogits *a,
                                              const CudaLogitsLowRank *lowrank, cudaStream_t stream) {
    if (a->N <= 0) return 0;
    return logits_ce(handle, NULL, NULL, lowrank, a->losses, a->x, a->W, a->targets, a->N, a->C, a->V, a->softcap,
                     0.0f, a->z_scratch, NULL, a->chunk, stream);
}

extern "C" int cuda_logits_ce_forward_backward(cublasHandle_t handle, const CudaLogits *a, float *dx, float *dW,
                                               float loss_weight, ct_bf16 *dz_scratch, cudaStream_t stream) {
    if (a->N > 0 && !dW) return ct_fail("cuda logits: training needs dW (the low-rank form may skip it)");
    return cuda_logits_ce_lowrank_forward_backward(handle, a, NULL, dx, dW, loss_weight, dz_scratch, stream);
}

extern "C" int cuda_logits_ce_forward(cublasHandle_t handle, const CudaLogits *a, cudaStream_t stream) {
    return cuda_logits_ce_lowrank_forward(handle, a, NULL, stream);
}
