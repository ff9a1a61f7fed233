/* cpu_optim.h — optimizer math of the CPU backend (fp32): Newton–Schulz orthogonalisation and
 * Muon, Adam, SGD, global gradient-norm clipping, plus the lr / momentum schedules shared with
 * the CUDA backend.
 *
 * Reference semantics: openai/parameter-golf train_gpt.py (zeropower_via_newtonschulz5, Muon,
 * lr_mul, the Muon momentum warmup in the training loop) and torch 1.13's torch.optim.Adam,
 * torch.optim.SGD and torch.nn.utils.clip_grad_norm_. Where torch does fp32 arithmetic we do the same fp32 operations
 * in the same order (see each function); train_gpt.py runs Newton–Schulz in bf16, we run it in
 * fp32, so that one matches the algorithm, not the bits.
 *
 * Determinism: every function here gives the same bits for the same inputs whatever the OpenMP
 * thread count. Reductions use a fixed summation order in double; matrix products are cut into
 * tiles whose shape depends only on the matrix sizes, and each tile is one single-threaded
 * cblas_sgemm call (see cpu_optim_ns.c for why OpenBLAS's own threading is not used).
 *
 * Matrices are row-major, dense (leading dimension = number of columns). Arguments are checked
 * with assert(): passing a negative size or a NULL buffer is a programming error, not a runtime
 * condition, so nothing here returns an error code. */
#ifndef CT_CPU_OPTIM_H
#define CT_CPU_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "ns5.h"

/* ---- Newton–Schulz ------------------------------------------------------------------------ */

/* Floats of scratch cpu_newton_schulz5 needs for a rows x cols matrix: 2*m*n + 2*m*m with
 * m = min(rows, cols), n = max(rows, cols). */
size_t cpu_newton_schulz5_scratch_floats(int rows, int cols);

/* X = zeropower_via_newtonschulz5(G, steps) in fp32:
 *   X = G / (||G||_F + 1e-7); if rows > cols work on X^T (so the Gram matrix is the small one);
 *   steps times: A = X X^T; B = b*A + c*(A A); X = a*X + B X; transpose back.
 * G and X are rows x cols and may be the same buffer (G is read completely before X is written).
 * scratch holds cpu_newton_schulz5_scratch_floats(rows, cols) floats. steps >= 0. */
void cpu_newton_schulz5(const float *G, float *X, int rows, int cols, int steps, float *scratch);

/* cpu_newton_schulz5 with the coefficients of ns5.h's ns_coefficients: polar_express = 1 runs
 * ns_iterations(1, steps) iterations, iteration k with Polar Express's triple k; 0 is
 * cpu_newton_schulz5 itself (same bits). */
void cpu_newton_schulz(const float *G, float *X, int rows, int cols, int steps, int polar_express, float *scratch);

/* MuonEq-R, in place on a rows x cols matrix: each row divided by max(||row||_2, 1e-7f), the
 * norm's square summed in double as cpu_sumsq_fixed_order sums a row (eight interleaved lanes,
 * lane k taking the elements k mod 8 in order, combined ((0+1)+(2+3))+((4+5)+(6+7)); rows of
 * up to 16384 elements), its square root rounded to fp32, the division in fp32. */
void cpu_muon_row_normalize(float *u, int rows, int cols);

/* ---- Muon ----------------------------------------------------------------------------------- */

/* Floats of scratch cpu_muon_compute_update needs (that of cpu_newton_schulz5). */
size_t cpu_muon_scratch_floats(int rows, int cols);

/* The per-rank half of Muon.step for one matrix parameter of shape rows x cols:
 *   buf = momentum*buf + grad                         (buf.mul_(momentum).add_(grad))
 *   u   = nesterov ? grad + momentum*buf : buf         (grad.add(buf, alpha=momentum))
 *   u   = cpu_muon_row_normalize(u)                    (flags & CT_MUON_ROW_NORMALIZE)
 *   update = cpu_newton_schulz(u, ns_steps, flags & CT_MUON_POLAR_EXPRESS) * sqrt(max(1, rows/cols))
 * momentum_buf (rows*cols, zero at the first step) is updated in place; update receives
 * rows*cols floats and may not alias grad or momentum_buf. momentum is rounded to fp32 as torch
 * does with a Python float scalar. scratch: cpu_muon_scratch_floats(rows, cols) floats. */
void cpu_muon_compute_update(const float *grad, float *momentum_buf, float *update, int rows, int cols,
                         double momentum, int nesterov, int ns_steps, int flags, float *scratch);

/* Only the momentum line of cpu_muon_compute_update (buf = momentum*buf + grad, same bits), for
 * ranks that do not compute this matrix's update under Muon sharding but must keep the
 * buffer every checkpoint saves. */
void cpu_muon_momentum_advance(const float *grad, float *momentum_buf, size_t n, double momentum);

/* The all-ranks half: p -= lr * update over n elements (p.add_(update, alpha=-lr); torch's
 * kernel fuses that multiply-add, so this uses fmaf). */
void cpu_muon_apply_update(float *p, const float *update, size_t n, double lr);

/* ---- Adam ----------------------------------------------------------------------------------- */

/* One torch.optim.Adam step (no weight decay, no amsgrad, not maximize) over n elements:
 *   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g;
 *   p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
 * step is the step count after incrementing, so 1 on the first call. The scalars (bias
 * corrections, step size) are computed in double like torch's Python code and rounded to fp32
 * where torch hands them to an fp32 kernel; the element-wise fp32 operations follow torch 1.13's
 * _single_tensor_adam on CPU (the _multi_tensor_adam CPU path runs the same kernels), see
 * cpu_optim.c. m and v start at zero. */
void cpu_adam_step(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1,
               double beta2, double eps, int64_t step);

/* ---- gradient clipping ---------------------------------------------------------------------- */

/* Sum of x[i]^2 accumulated in double, in an order fixed by n alone (blocks whose size depends
 * only on n, eight interleaved partial sums per block, blocks added in index order). */
double cpu_sumsq_fixed_order(const float *x, size_t n);

/* L2 norm of all the tensors together, as if concatenated: sqrt of the sum, in tensor order, of
 * cpu_sumsq_fixed_order of each tensor. */
double cpu_grad_global_norm(const float *const *grads, const size_t *counts, int n_tensors);

/* torch 1.13 clip_grad_norm_'s coefficient, in its fp32 operations:
 *   clamp(max_norm / (float(total_norm) + 1e-6), max=1)
 * where Python's `max_norm / tensor` is tensor.reciprocal() * max_norm. NaN stays NaN. */
float cpu_clip_grad_coef(double total_norm, double max_norm);

/* torch.nn.utils.clip_grad_norm_(params, max_norm) for the 2-norm: scales every gradient by
 * cpu_clip_grad_coef (also when it is 1, which changes nothing) and returns the total norm. */
double cpu_clip_grad_norm(float *const *grads, const size_t *counts, int n_tensors, double max_norm);

/* ---- SGD ------------------------------------------------------------------------------------ */

/* One torch.optim.SGD step (dampening 0, not nesterov) over n elements, in torch's fp32
 * operations: d = g + wd * p (wd 0: d = g); with momentum != 0, buf = d at the first step
 * (first = 1), else buf = momentum * buf + d, and d = buf; p -= lr * d. buf may be NULL when
 * momentum is 0. Test-time training's global step (momentum 0.9) and its SGD adapters. */
void cpu_sgd_step(float *p, float *buf, const float *g, size_t n, double lr, double momentum, double wd, int first);

#endif
