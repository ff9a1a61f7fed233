/* schedule.h — train_gpt.py's learning-rate warmdown and Muon momentum warmup: pure functions of
 * the step (and wall clock), shared by the training loop and every backend. */
#ifndef CT_SCHEDULE_H
#define CT_SCHEDULE_H

#include <stdint.h>

/* train_gpt.py lr_mul(step, elapsed_ms): 1 outside the warmdown, then a linear ramp to 0.
 * Without a wallclock cap (max_wallclock_ms <= 0, train_gpt's None) the warmdown is the last
 * warmdown_iters of iterations; with one it is the last warmdown_iters * (average ms per step so
 * far) milliseconds before the cap. warmdown_iters <= 0 disables it. */
double lr_scale(int64_t step, int64_t iterations, int64_t warmdown_iters, double elapsed_ms,
                double max_wallclock_ms);

/* Muon momentum at a step as the training loop sets it: frac = min(step / warmup_steps, 1)
 * (1 if warmup_steps <= 0); (1 - frac) * warmup_start + frac * momentum. */
double muon_momentum_at(int64_t step, double warmup_start, double momentum, int64_t warmup_steps);

#endif
