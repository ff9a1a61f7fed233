/* cuda_rmsnorm.h — RMSNorm and the fused ops that begin or end with one (cuda_rmsnorm.cu):
 * the block-input mix + norm and add + norm forwards and their backwards, the pair of
 * cpu_rmsnorm.c (the fused ones are checked against the CPU ops they fuse; cuda_rmsnorm.cu
 * lists them).
 * C-callable; the conventions of every CUDA op are in cuda_ops.h.
 *
 * The residual stream's tensors (x, x_in, xm, x0, skip, x_out, x1, and the gradients along it:
 * dx, dx_in, dx0) are `void *` of the element type `dtype` (CT_F32 or CT_BF16, residual_dtype),
 * one type for all of an op's stream tensors; the other tensors have the types they are
 * declared with. With CT_BF16 the ops follow train_gpt.py's bf16 stream, rounding where it
 * rounds: the control tensors (mix, attn_scale/scale, mlp_scale, skip_w) are rounded to bf16
 * before use, the arithmetic is fp32, and every stream value is rounded once where it is
 * stored, and where an op recomputes a stored value instead of reading it (x_in, xm, x1, and a
 * norm backward's g = dx + the norm's input gradient, stored in dx or carried on by a fused
 * op): the values below are then those rounded ones. With CT_F32 the ops are the fp32 ops,
 * bitwise. */
#ifndef CT_CUDA_RMSNORM_H
#define CT_CUDA_RMSNORM_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RMSNorm without weight, per row of C: r = 1/sqrt(mean(x^2) + eps) (row sum in double, as the
 * CPU op), y = x * r. x of type dtype (the final norm reads the stream's last output); out
 * (fp32) and/or out_bf16 receive y (either may be NULL), rstd [N] r (may be NULL). out may
 * equal x (dtype CT_F32). */
int cuda_rmsnorm_forward(float *out, ct_bf16 *out_bf16, float *rstd, const void *x, int N, int C, float eps,
                         int dtype, cudaStream_t stream);
/* dx [N,C] += rstd * dout - x * rstd^3 * mean(dout * x) (the CPU formula, row dot in double);
 * dx and x of type dtype (CT_BF16: dx's sum rounded once), dout fp32. */
int cuda_rmsnorm_backward(void *dx, const float *dout, const void *x, const float *rstd, int N, int C, int dtype,
                          cudaStream_t stream);

/* Block input, fused (= cpu_scaled_add_forward if skip, cpu_residual_mix_forward, cpu_rmsnorm_forward,
 * then cpu_scale by out_scale), its tensors and shape in a CudaMixNorm:
 *   x_in = skip ? x + skip_w * skip : x       (written to x_in only when skip != NULL)
 *   (with skip_gate: x_in = lerp(skip_w * skip, x, sigmoid(skip_gate)), cpu_skip_gate_forward)
 *   xm = mix[0] * x_in + mix[1] * x0;  rstd = 1/rms(xm);  a_bf16 = bf16((xm * rstd) * out_scale)
 * x, skip, x0, x_in, xm [N,C]; skip_w [C]; mix [2,C]. out_scale: ln_scale's factor of the block,
 * 1 without it (the same bits as no factor: x * 1 = x). */
typedef struct {
    void *x_in;                 /* written only with a skip (may be NULL without one) */
    void *xm;                   /* written */
    float *rstd;                /* written */
    ct_bf16 *a_bf16;            /* written */
    const void *x;              /* the residual stream (NULL for cuda_out_mix_norm_forward, which makes it) */
    const void *skip;           /* the U-Net skip; NULL without one */
    const float *skip_w;        /* its weights; NULL without one */
    const float *skip_gate;     /* skip_gates' row (skip_gates_enabled): the lerp; NULL: the add */
    const void *x0;
    const float *mix;
    int N, C;
    float eps, out_scale;
    int dtype;                  /* the stream tensors' type (also those of a CudaBlockOutput with it) */
} CudaMixNorm;
int cuda_mix_norm_forward(const CudaMixNorm *a, cudaStream_t stream);
/* The output of the block before, x_out = (xm + attn_scale * ao) + mlp_scale * mo, made as
 * cuda_scaled_add_forward(x_out, xm, ao, attn_scale, mo, mlp_scale) makes it. */
typedef struct {
    void *x_out;                /* of the CudaMixNorm's dtype, as xm */
    const void *xm;
    const ct_bf16 *ao, *mo;
    const float *attn_scale, *mlp_scale;
} CudaBlockOutput;
/* That op and cuda_mix_norm_forward on its result (x = prev->x_out; a->x unused), in one pass: writes
 * prev->x_out, and bitwise the two ops. prev->xm may be xm itself (the backend keeps one xm for
 * all blocks): each element is read before it is overwritten. */
int cuda_out_mix_norm_forward(const CudaBlockOutput *prev, const CudaMixNorm *a, cudaStream_t stream);
/* Attention residual + MLP norm, fused (= cpu_scaled_add_forward, cpu_rmsnorm_forward, cpu_scale):
 *   x1 = xm + scale * branch;  rstd = 1/rms(x1);  m_bf16 = bf16((x1 * rstd) * out_scale)
 * (out_scale as in cuda_mix_norm_forward).
 * branch bf16 (the attention projection's output, as a product's output under autocast). x1 is
 * written only when not NULL: the backend does not keep it (cuda_add_norm_backward and
 * cuda_scaled_add_forward recompute it, to the same bits). */
int cuda_add_norm_forward(void *x1, float *rstd, ct_bf16 *m_bf16, const void *xm, const ct_bf16 *branch,
                          const float *scale, int N, int C, float eps, float out_scale, int dtype,
                          cudaStream_t stream);
/* cuda_rmsnorm_backward of that norm (a CudaAddNormBackward's tensors and shape), its input
 * recomputed as the forwards made it: dx +=
 * rmsnorm_backward(dout, x1 = xm + scale * branch, rstd) with xm = mix[0] * x_in + mix[1] * x0
 * (the backend keeps neither xm nor x1). When renorm is given (with renorm_rstd [N]), also
 * renorm = bf16((xm * renorm_rstd) * renorm_scale): xm's own norm, the attention's input a_bf16
 * of cuda_mix_norm_forward (with its out_scale), recomputed to the same bits while xm is in hand. When dbranch is given
 * (with dscale [C] and partials: cuda_colsum_doubles(N, C, 1)), also the backward of x1's
 * residual add on the updated dx, as cuda_scaled_add_backward(NULL, NULL, dbranch, dscale, dx,
 * NULL, branch, scale) would do it next, bitwise, in the same pass: dbranch = bf16(scale * dx)
 * (WRITTEN), dscale += sum_n dx * branch (where the device lacks the 8 C bytes of shared memory
 * per row lane the fused kernel needs, the two ops run one after the other). */
typedef struct {
    void *dx;                     /* += */
    const float *dout, *rstd;     /* the norm's output gradient and rstd */
    const void *x_in, *x0;        /* xm, remade */
    const float *mix;
    const ct_bf16 *branch;        /* x1 = xm + scale * branch, remade */
    const float *scale;
    ct_bf16 *renorm;              /* optional, with renorm_rstd and renorm_scale */
    const float *renorm_rstd;
    float renorm_scale;
    ct_bf16 *dbranch;             /* optional, with dscale and partials */
    float *dscale;
    double *partials;
    int N, C;
    int dtype; /* dx, x_in, x0 */
} CudaAddNormBackward;
int cuda_add_norm_backward(const CudaAddNormBackward *a, cudaStream_t stream);
/* The block input's backward (a CudaNormMixBackward's tensors and shape), fused: the attention
 * norm's (cuda_rmsnorm_backward with its input
 * xm = mix[0] * x_in + mix[1] * x0 recomputed) giving g = dx + rmsnorm_backward(dout, xm, rstd),
 * then the residual mix's (cuda_residual_mix_backward with dx_accumulate = 0) on g: dx_in =
 * mix[0] * g (WRITTEN), dx0 += mix[1] * g, dmix [2,C] += (sum_n g*x_in ; sum_n g*x0) (partials:
 * cuda_colsum_doubles(N, C, 2)). Bitwise those two ops; dx's contents are undefined afterwards
 * (where the device lacks the shared memory the fused kernel needs, 16 C bytes per row lane,
 * the two ops run and leave g there). */
typedef struct {
    void *dx_in;                  /* written */
    void *dx0;                    /* += */
    float *dmix;                  /* += */
    void *dx;                     /* the residual stream's gradient: read, then undefined */
    const float *dout, *rstd;     /* the attention norm's output gradient and rstd */
    const void *x_in, *x0;        /* xm, remade */
    const float *mix;
    double *partials;
    int N, C;
    int dtype; /* dx_in, dx0, dx, x_in, x0 */
} CudaNormMixBackward;
int cuda_norm_mix_backward(const CudaNormMixBackward *a, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
