/* cpu_weights.h — element-wise passes over whole weight buffers around the optimizer step, for
 * the record's optimizer additions (docs/model.md, "Weight decay" and "Weight averaging"):
 * decoupled weight decay, the EMA of the weights and SWA's running sum. New beside cpu_optim.h
 * (Adam, Muon, clipping) because they are not optimizers of their own: the decay runs before an
 * optimizer's update, the averages after the step.
 *
 * Reference semantics: torch 1.13's fp32 CPU kernels for the ops the record's train_gpt.py
 * calls (`p.mul_(1 - lr*wd)`, `ema.mul_(d).add_(w, alpha=1-d)`, `swa.add_(w)`): each Python
 * float scalar is rounded to fp32 where torch hands it to an fp32 kernel, and `add_` with alpha
 * is one fused multiply-add as torch's vectorized CPU kernel computes it (vec::fmadd; see
 * cpu_optim.c on cpu_adam_step for the measurement behind that).
 *
 * Every function gives the same bits whatever the OpenMP thread count (each element is
 * computed on its own). Sizes and pointers are checked with assert(). */
#ifndef CT_CPU_WEIGHTS_H
#define CT_CPU_WEIGHTS_H

#include <stddef.h>

/* Decoupled weight decay, torch.optim.AdamW's and the record's Muon's `p.mul_(1 - lr*wd)`:
 * p[i] *= (float)factor over n elements, factor = 1 - lr*wd computed in double by the caller. */
void cpu_weight_decay(float *p, size_t n, double factor);

/* One EMA step, `ema.mul_(d).add_(w, alpha=1 - d)`:
 * ema[i] = fmaf(w[i], (float)(1 - decay), ema[i] * (float)decay). */
void cpu_ema_update(float *ema, const float *w, size_t n, double decay);

/* SWA's running sum: sum[i] += w[i] (`swa.add_(w)`), or sum[i] = w[i] when start is set (the
 * first snapshot is a copy, as train_gpt.py's clone, which keeps a -0.0 that 0 + -0.0 would
 * not). */
void cpu_swa_add(float *sum, const float *w, size_t n, int start);

#endif
