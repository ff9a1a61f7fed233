/* cpu_optim.c — Adam, SGD, global gradient-norm clipping, the fixed-order sum of squares they
 * and Newton–Schulz use, for the CPU backend (fp32).
 * Newton–Schulz and Muon live in cpu_optim_ns.c. */
#include "cpu_optim.h"

#include <assert.h>
#include <math.h>

enum { PARALLEL_MIN_ELEMS = 1 << 15 };

/* ---- fixed-order sum of squares ---- */

/* Blocks are at least SUMSQ_MIN_BLOCK long (so the thread team has enough work per block) and
 * there are at most SUMSQ_MAX_BLOCKS of them (so the partial sums fit on the stack); the block
 * length is a function of n only, which is what makes the result thread-count independent. */
enum { SUMSQ_LANES = 8, SUMSQ_MIN_BLOCK = 1 << 14, SUMSQ_MAX_BLOCKS = 1024 };

/* Eight interleaved double accumulators: independent dependency chains keep the adder busy
 * (and let the compiler use SIMD) while the order of every addition stays fixed. */
static double block_sumsq(const float *x, size_t n) {
    double lane[SUMSQ_LANES] = {0};
    size_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int k = 0; k < SUMSQ_LANES; k++) lane[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++) lane[k] += (double)x[i] * (double)x[i];
    const double low = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    const double high = (lane[4] + lane[5]) + (lane[6] + lane[7]);
    return low + high;
}

double cpu_sumsq_fixed_order(const float *x, size_t n) {
    assert(x || n == 0);
    size_t block = (n + SUMSQ_MAX_BLOCKS - 1) / SUMSQ_MAX_BLOCKS;
    if (block < SUMSQ_MIN_BLOCK) block = SUMSQ_MIN_BLOCK;
    const size_t n_blocks = (n + block - 1) / block;
    double partial[SUMSQ_MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (n_blocks > 1)
    for (size_t b = 0; b < n_blocks; b++) {
        const size_t start = b * block;
        partial[b] = block_sumsq(x + start, n - start < block ? n - start : block);
    }
    double total = 0.0;
    for (size_t b = 0; b < n_blocks; b++) total += partial[b];
    return total;
}

/* ---- Adam ---- */

/* Mirrors torch 1.13 _single_tensor_adam (torch/optim/adam.py, the capturable=False branch; the
 * default on CPU since foreach=None means False there) with fp32 tensors on a CPU with AVX2,
 * operation by operation:
 *   exp_avg.mul_(beta1)                    m = m * beta1f
 *   .add_(grad, alpha=1-beta1)             m = fma(g, (1-beta1)f, m)        add_kernel: vec::fmadd
 *   exp_avg_sq.mul_(beta2)                 v = v * beta2f
 *   .addcmul_(grad, grad, value=1-beta2)   v = fma((1-beta2)f * g, g, v)   see below
 *   bias_correction1 = 1 - beta1 ** step   (double)
 *   bias_correction2 = 1 - beta2 ** step   (double)
 *   step_size = lr / bias_correction1      (double)
 *   denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
 *                                          d = sqrtf(v) / bc2_sqrtf + epsf
 *   param.addcdiv_(exp_avg, denom, value=-step_size)
 *                                          p = p + ((-step_size)f * m) / d
 * where xf is the Python double x rounded to fp32, as torch does before an fp32 kernel uses a
 * scalar. _multi_tensor_adam (foreach=True) runs the same kernels on CPU in the same order.
 * The two fused multiply-adds are what torch's AVX2 kernels compute: add_ with alpha is an
 * explicit vec::fmadd, and addcmul's `self + value * t1 * t2` is contracted into one by the
 * compiler. Checked against Debian 12's torch 1.13 (pytorch-1.13.1+dfsg, CPU capability AVX2):
 * m, v and p bit-identical over 3 steps (lr changing per step) on 100003 elements, single-tensor
 * and foreach; with v computed unfused, 17% of v and 1.3% of p differed. fmaf is correctly
 * rounded with or without FMA hardware, so this stays machine independent. (train_gpt.py's
 * fused=True CUDA kernel is a different code path; it is not what this mirrors.) */
void cpu_adam_step(float *p, const float *g, float *m, float *v, size_t n, double lr, double beta1,
               double beta2, double eps, int64_t step) {
    assert(((p && g && m && v) || n == 0) && step >= 1);
    const double bias_correction1 = 1.0 - pow(beta1, (double)step);
    const double bias_correction2 = 1.0 - pow(beta2, (double)step);
    const double step_size = lr / bias_correction1;
    const float beta1_f = (float)beta1, one_minus_beta1_f = (float)(1.0 - beta1);
    const float beta2_f = (float)beta2, one_minus_beta2_f = (float)(1.0 - beta2);
    const float bc2_sqrt_f = (float)sqrt(bias_correction2);
    const float eps_f = (float)eps;
    const float neg_step_size_f = (float)(-step_size);

#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        const float grad = g[i];
        const float m_new = fmaf(grad, one_minus_beta1_f, m[i] * beta1_f);
        const float v_new = fmaf(one_minus_beta2_f * grad, grad, v[i] * beta2_f);
        const float denom = sqrtf(v_new) / bc2_sqrt_f + eps_f;
        m[i] = m_new;
        v[i] = v_new;
        p[i] = p[i] + neg_step_size_f * m_new / denom;
    }
}

/* ---- SGD ---- */

/* Mirrors torch 1.13 _single_tensor_sgd (torch/optim/sgd.py; dampening 0, not nesterov, not
 * maximize) with fp32 tensors on CPU, operation by operation:
 *   d_p = d_p.add(param, alpha=weight_decay)      d = fma(p, wdf, g)        (only if wd != 0)
 *   buf = torch.clone(d_p)                        b = d                     (first step)
 *   buf.mul_(momentum).add_(d_p, alpha=1)         b = b * muf + d           (later steps)
 *   d_p = buf                                                               (only if momentum != 0)
 *   param.add_(d_p, alpha=-lr)                    p = fma(d, (-lr)f, p)
 * add_ with alpha is the same kernel as in Adam above (vec::fmadd, hence fmaf); with alpha 1
 * fused or not is one exact add of the already rounded product, so the momentum line is two
 * roundings like cpu_muon_momentum_advance's. Checked against Debian 12's torch 1.13 (CPU
 * capability AVX2): p and buf bit-identical over 3 steps (lr changing per step) on 100003
 * elements, single-tensor and foreach, for (wd, momentum) = (0, 0.9), (0.01, 0.9), (0.5, 0),
 * (0, 0), (0.013, 0.37); with the two alpha adds unfused, 6% of p differed after one step.
 * Element-wise: the bits never depend on the thread count. */
void cpu_sgd_step(float *p, float *buf, const float *g, size_t n, double lr, double momentum, double wd, int first) {
    assert(((p && g) || n == 0) && (buf || momentum == 0.0 || n == 0));
    const float wd_f = (float)wd, momentum_f = (float)momentum, neg_lr_f = (float)(-lr);
    const int decay = wd != 0.0, use_momentum = momentum != 0.0;

#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
    for (size_t i = 0; i < n; i++) {
        float d = decay ? fmaf(p[i], wd_f, g[i]) : g[i];
        if (use_momentum) {
            d = first ? d : buf[i] * momentum_f + d;
            buf[i] = d;
        }
        p[i] = fmaf(d, neg_lr_f, p[i]);
    }
}

/* ---- gradient clipping ---- */

double cpu_grad_global_norm(const float *const *grads, const size_t *counts, int n_tensors) {
    assert((grads && counts) || n_tensors == 0);
    double total = 0.0;
    for (int t = 0; t < n_tensors; t++) total += cpu_sumsq_fixed_order(grads[t], counts[t]);
    return sqrt(total);
}

/* torch 1.13 torch/nn/utils/clip_grad.py (norm_type 2):
 *   total_norm = torch.norm(torch.stack([torch.norm(g) for g in grads]))   -> fp32 0-dim tensor
 *   clip_coef = max_norm / (total_norm + 1e-6)    -> (total_norm + 1e-6f).reciprocal() * max_normf
 *   clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
 * Our norm is summed in double (fixed order) and rounded to fp32 where torch's would be an fp32
 * tensor; from there the fp32 operations are torch's. */
float cpu_clip_grad_coef(double total_norm, double max_norm) {
    const float shifted = (float)total_norm + 1e-6f;
    const float coef = (1.0f / shifted) * (float)max_norm;
    return coef > 1.0f ? 1.0f : coef; /* a NaN coefficient stays NaN, as with torch.clamp */
}

double cpu_clip_grad_norm(float *const *grads, const size_t *counts, int n_tensors, double max_norm) {
    const double total_norm = cpu_grad_global_norm((const float *const *)grads, counts, n_tensors);
    const float coef = cpu_clip_grad_coef(total_norm, max_norm);
    for (int t = 0; t < n_tensors; t++) {
        float *g = grads[t];
        const size_t n = counts[t];
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN_ELEMS)
        for (size_t i = 0; i < n; i++) g[i] *= coef;
    }
    return total_norm;
}
