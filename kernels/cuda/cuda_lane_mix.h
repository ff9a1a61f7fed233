/* cuda_lane_mix.h — the end of a parallel block (parallel residual lanes, issue 56;
 * cuda_lane_mix.cu), the pair of cpu_lane_mix.c: both lanes take both branches' outputs through
 * the block's lambdas; and the final lane mean. C-callable; the conventions of every CUDA op are
 * in cuda_ops.h. The CUDA step (backend_cuda_blocks.c) runs them for each parallel run.
 *
 * The lanes (l0, l1, out0, out1, d0, d1, dl0, dl1) are residual-stream tensors of type `dtype`;
 * the branch outputs ao, mo (attn.proj's and mlp.proj's, before their scales) bf16, as the
 * products give them. With CT_BF16 the rounding points are train_gpt.py's bf16 tensors: the
 * scales and lambdas rounded to bf16 first, and every product and sum rounded, in the order
 * cpu_lane_mix_forward evaluates; with CT_F32 the CPU op's fp32 operations exactly. */
#ifndef CT_CUDA_LANE_MIX_H
#define CT_CUDA_LANE_MIX_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A = attn_scale*ao, M = mlp_scale*mo; out0 = resid[0]*l0 + post[0]*A + post[2]*M, out1 =
 * resid[1]*l1 + post[1]*A + post[3]*M (WRITTEN; out0 may be l0, out1 l1). resid [2], post [4]
 * (device: the block's rows of parallel_resid_lambdas, parallel_post_lambdas). */
typedef struct {
    void *out0, *out1;
    const void *l0, *l1;
    const ct_bf16 *ao, *mo;
    const float *attn_scale, *mlp_scale, *resid, *post;
    int N, C;
    int dtype; /* the lanes' */
} CudaLaneMixForward;
int cuda_lane_mix_forward(const CudaLaneMixForward *a, cudaStream_t stream);

/* Backward given d0, d1 = dL/d(out0, out1): dl0 = resid[0]*d0, dl1 = resid[1]*d1 (WRITTEN, the
 * mix's share of the lanes' gradients: the attention's reaches dl0 through the residual mix's
 * backward with dx_accumulate; dl0 may be d0, dl1 d1: in place); dao_bf16 = bf16(attn_scale *
 * dA), dmo_bf16 = bf16(mlp_scale * dM) (WRITTEN) with dA = post[0]*d0 + post[1]*d1, dM =
 * post[2]*d0 + post[3]*d1; dattn_scale[c] += sum_n dA*ao, dmlp_scale[c] += sum_n dM*mo; dresid
 * [2] += sums of d0*l0, d1*l1; dpost [4] += sums of d0*A, d1*A, d0*M, d1*M (double: per chunk and
 * channel as cuda_colsum_doubles lays out, then the chunks in order, for the lambdas each
 * chunk's channels in order; partials: cuda_colsum_doubles(N, C, 8)). */
typedef struct {
    void *dl0, *dl1;
    ct_bf16 *dao_bf16, *dmo_bf16;
    float *dattn_scale, *dmlp_scale, *dresid, *dpost;
    const void *d0, *d1, *l0, *l1;
    const ct_bf16 *ao, *mo;
    const float *attn_scale, *mlp_scale, *resid, *post;
    double *partials;
    int N, C;
    int dtype;
} CudaLaneMixBackward;
int cuda_lane_mix_backward(const CudaLaneMixBackward *a, cudaStream_t stream);

/* The final hidden state of parallel_final = mean: out = bf16?((l0 + l1)) * 0.5 (the sum rounded
 * as the stream's tensors are; the halving is exact), cpu's copy, add, scale by 0.5. Its backward:
 * d0 = d1 = 0.5 * dout (WRITTEN; d0 may be dout). All of type dtype, n elements. */
int cuda_lane_mean_forward(void *out, const void *l0, const void *l1, size_t n, int dtype, cudaStream_t stream);
int cuda_lane_mean_backward(void *d0, void *d1, const void *dout, size_t n, int dtype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
