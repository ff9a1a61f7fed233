/* schedule.h — train_gpt.py's learning-rate warmdown (and the 1.0611 record's warmdown_frac
 * form) and Muon momentum warmup: pure functions of the step (and wall clock), shared by the
 * training loop and every backend. */
#ifndef CT_SCHEDULE_H
#define CT_SCHEDULE_H

#include <stdint.h>

/* train_gpt.py lr_mul(step, elapsed_ms): 1 outside the warmdown, then a linear ramp to 0.
 * Without a wallclock cap (max_wallclock_ms <= 0, train_gpt's None) the warmdown is the last
 * warmdown_iters of iterations; with one it is the last warmdown_iters * (average ms per step so
 * far) milliseconds before the cap. warmdown_iters <= 0 disables it. */
double lr_scale(int64_t step, int64_t iterations, int64_t warmdown_iters, double elapsed_ms,
                double max_wallclock_ms);

/* The 1.0611 record's progress, in [0, 1) while training runs (double, as written there):
 * step / max(iterations, 1) (progress_clock = steps), or elapsed_ms / max(budget_ms, 1e-9)
 * (progress_clock = wallclock; budget_ms = 1000 * max_wallclock_seconds - 1000 *
 * gptq_reserve_seconds). */
double progress_steps(int64_t step, int64_t iterations);
double progress_wallclock(double elapsed_ms, double budget_ms);

/* The record's lr_mul(frac): 1 if warmdown_frac <= 0 or frac < 1 - warmdown_frac, else
 * max((1 - frac) / warmdown_frac, min_lr), in double exactly as written there (so
 * 1 - 0.85 = 0.15000000000000002: frac 0.15 is still before the warmdown). */
double lr_scale_frac(double frac, double warmdown_frac, double min_lr);

/* Muon momentum at a step as the training loop sets it: frac = min(step / warmup_steps, 1)
 * (1 if warmup_steps <= 0); (1 - frac) * warmup_start + frac * momentum. */
double muon_momentum_at(int64_t step, double warmup_start, double momentum, int64_t warmup_steps);

#endif
