/* schedule.c — train_gpt.py's lr_mul (both records' forms) and Muon momentum warmup (schedule.h). */
#include "schedule.h"

/* Python's max(a, b) / min(a, b) keep the first argument unless the second is strictly
 * greater / smaller; spelled out so NaN and -0.0 behave as in train_gpt.py. */
static double py_max(double a, double b) { return b > a ? b : a; }
static double py_min(double a, double b) { return b < a ? b : a; }

double lr_scale(int64_t step, int64_t iterations, int64_t warmdown_iters, double elapsed_ms,
                double max_wallclock_ms) {
    if (warmdown_iters <= 0) return 1.0;
    if (!(max_wallclock_ms > 0)) {
        const int64_t warmdown_start =
            iterations - warmdown_iters > 0 ? iterations - warmdown_iters : 0;
        if (warmdown_start <= step && step < iterations)
            return py_max((double)(iterations - step) / (double)warmdown_iters, 0.0);
        return 1.0;
    }
    const double step_ms = elapsed_ms / (double)(step > 1 ? step : 1);
    const double warmdown_ms = (double)warmdown_iters * step_ms;
    const double remaining_ms = py_max(max_wallclock_ms - elapsed_ms, 0.0);
    return remaining_ms <= warmdown_ms ? remaining_ms / py_max(warmdown_ms, 1e-9) : 1.0;
}

double progress_steps(int64_t step, int64_t iterations) {
    return (double)step / (double)(iterations > 1 ? iterations : 1);
}

double progress_wallclock(double elapsed_ms, double budget_ms) { return elapsed_ms / py_max(budget_ms, 1e-9); }

double lr_scale_frac(double frac, double warmdown_frac, double min_lr) {
    if (warmdown_frac <= 0) return 1.0;
    if (frac >= 1.0 - warmdown_frac) return py_max((1.0 - frac) / warmdown_frac, min_lr);
    return 1.0;
}

double muon_momentum_at(int64_t step, double warmup_start, double momentum, int64_t warmup_steps) {
    const double frac = warmup_steps > 0 ? py_min((double)step / (double)warmup_steps, 1.0) : 1.0;
    return (1.0 - frac) * warmup_start + frac * momentum;
}
