/* cuda_optim.h — the optimizers on the device: Adam, Muon, SGD, global-norm clipping (cuda_optim.cu),
 * the pair of cpu_optim.c and cpu_optim_ns.c.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_OPTIM_H
#define CT_CUDA_OPTIM_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cpu_adam_step's fp32 operations, element by element (explicit roundings, no contraction other than
 * the CPU's two fmaf), so from the same inputs p, m, v are bitwise the CPU's. The double
 * scalars (bias corrections, step size) are computed on the host exactly as adam_step does.
 * p_bf16 (may be NULL) receives bf16(new p) (the matrix-product shadow of the weight). */
typedef struct {
    double lr, beta1, beta2, eps;
    int64_t step; /* Adam steps taken, this one included (>= 1) */
} CudaAdamHyper;
int cuda_adam_step(float *p, ct_bf16 *p_bf16, const float *g, float *m, float *v, size_t n, const CudaAdamHyper *h,
                   cudaStream_t stream);

/* One torch.optim.SGD step, cpu_sgd_step's fp32 operations element by element (the same two
 * fmaf, no other contraction), so from the same inputs p and buf are bitwise the CPU's: d = g
 * (+ wd * p, fused, when wd != 0); with momentum != 0 buf = d at the first step (first = 1), else
 * buf = momentum * buf + d, and d = buf; p = fmaf(d, -lr, p). buf may be NULL when momentum is
 * 0; p_bf16 (may be NULL) receives bf16(new p), as cuda_adam_step's. Test-time training's global
 * step and its SGD adapters. */
int cuda_sgd_step(float *p, ct_bf16 *p_bf16, float *buf, const float *g, size_t n, double lr, double momentum,
                  double wd, int first, cudaStream_t stream);

/* Muon's update of one rows x cols matrix, cpu_muon_compute_update's semantics:
 *   buf = buf*mu + g; u = nesterov ? g + mu*buf : buf        (bitwise the CPU's lines)
 *   u = cuda_muon_row_normalize(u)                           (flags & CT_MUON_ROW_NORMALIZE)
 *   X = u / (||u||_F + 1e-7) (norm in double, fixed order), transposed when rows > cols
 *   ns_steps x: A = X X^T; B = b*A + c*A A; X = a*X + B X   (cuBLAS; bf16 operands and results
 *                                                          (a, b, c: ns5.h's ns_coefficients,
 *                                                          Polar Express's with
 *                                                          flags & CT_MUON_POLAR_EXPRESS)
 *                                                          with fp32 accumulation as train_gpt.py,
 *                                                          or fp32 throughout when ns_fp32)
 *   update (fp32 [rows,cols]) = X (transposed back) * sqrt(max(1, rows/cols))
 * update may be grad itself (every element of grad is read before that element of update is
 * written): the backend puts each update in its gradient's place, where one sum across ranks
 * combines the sharded updates. */
typedef struct {
    float *update;
    const float *grad;
    float *momentum_buf;
    int rows, cols;
} CudaMuonMatrix;
/* The update of `count` matrices whose smaller and larger sides are the same (a [1024, 512]
 * and a [512, 1024] matrix may share a batch): the momentum lines and normalisation per
 * matrix, the Newton–Schulz products of all of them batched (one cuda_gemm_batched per
 * product), each result scaled into its update. A matrix's result depends on the batch count
 * (cuBLAS may choose another kernel), not on the other members' values.
 * scratch: cuda_muon_scratch_bytes(rows, cols, count) bytes (16-byte aligned), for either
 * precision; partials: cuda_reduce_doubles(largest rows*cols) + 1 doubles. */
size_t cuda_muon_scratch_bytes(int rows, int cols, int count);
int cuda_muon_update_batch(cublasHandle_t handle, const CudaMuonMatrix *mats, int count, double momentum,
                           int nesterov, int ns_steps, int flags, int ns_fp32, void *scratch, double *partials,
                           cudaStream_t stream);
/* One matrix: cuda_muon_update_batch with count 1 (scratch: cuda_muon_scratch_bytes(rows, cols, 1)). */
int cuda_muon_update(cublasHandle_t handle, const CudaMuonMatrix *matrix, double momentum, int nesterov, int ns_steps,
                     int flags, int ns_fp32, void *scratch, double *partials, cudaStream_t stream);
/* MuonEq-R in place on a rows x cols fp32 matrix, bitwise cpu_muon_row_normalize, for rows of at
 * most CUDA_MUON_ROW_NORM_MAX_COLS elements (where the CPU's fixed-order sum is one block of eight
 * lanes; the backend refuses longer rows at creation). */
#define CUDA_MUON_ROW_NORM_MAX_COLS 16384
int cuda_muon_row_normalize(float *u, int rows, int cols, cudaStream_t stream);
/* For a matrix whose update another rank computes (sharded Muon): buf = buf*mu + g, bitwise
 * cpu_muon_momentum_advance, then g = +0. */
int cuda_muon_momentum_advance(float *grad, float *momentum_buf, size_t n, double momentum, cudaStream_t stream);
/* p = fmaf(update, -lr, p) (cpu_muon_apply_update); p_bf16 (may be NULL) = bf16(new p). */
int cuda_muon_apply(float *p, ct_bf16 *p_bf16, const float *update, size_t n, double lr, cudaStream_t stream);

/* Global-norm clipping over one contiguous gradient buffer of n floats: norm = sqrt(fixed-order
 * double sum of squares) into *norm (device double), coef = cpu_clip_grad_coef(norm, max_norm)
 * computed on the device in the CPU's fp32 operations, g *= coef. partials:
 * cuda_reduce_doubles(n) + 1 doubles. */
int cuda_clip_grad_norm(float *g, size_t n, double max_norm, double *norm, double *partials, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
