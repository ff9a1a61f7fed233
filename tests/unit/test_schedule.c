/* test_schedule.c — the lr warmdown and Muon momentum warmup (src/model/schedule.h) against
 * hand-computed values of train_gpt.py's formulas. */
#include "harness.h"
#include "schedule.h"

static void lr_scale_iteration_based(void) {
    /* warmdown_iters <= 0: no warmdown at all. */
    CHECK(lr_scale(99, 100, 0, 0, 0) == 1.0, "warmdown 0");
    CHECK(lr_scale(99, 100, -5, 0, 0) == 1.0, "warmdown < 0");
    /* iterations 100, warmdown 20: window [80, 100), (100 - step) / 20. */
    CHECK(lr_scale(0, 100, 20, 0, 0) == 1.0, "step 0");
    CHECK(lr_scale(79, 100, 20, 0, 0) == 1.0, "step 79 (before window)");
    CHECK(lr_scale(80, 100, 20, 0, 0) == 1.0, "step 80 (window start, 20/20)");
    CHECK(lr_scale(90, 100, 20, 0, 0) == 0.5, "step 90");
    CHECK(lr_scale(99, 100, 20, 0, 0) == 1.0 / 20.0, "step 99");
    /* train_gpt.py returns 1.0 at step == iterations (outside [start, iterations)). */
    CHECK(lr_scale(100, 100, 20, 0, 0) == 1.0, "step 100");
    /* warmdown longer than the run: the window starts at 0 and the ramp starts below 1. */
    CHECK(lr_scale(0, 10, 20, 0, 0) == 0.5, "long warmdown step 0");
    CHECK(lr_scale(5, 10, 20, 0, 0) == 0.25, "long warmdown step 5");
    /* elapsed_ms is ignored without a wallclock cap. */
    CHECK(lr_scale(90, 100, 20, 1e9, -1) == 0.5, "negative cap means no cap");
}

static void lr_scale_wallclock_based(void) {
    /* Cap 1000 ms, warmdown 10 steps. At step 50 after 900 ms: 18 ms/step, warmdown 180 ms,
     * 100 ms remaining -> 100/180. */
    CHECK(lr_scale(50, 1000, 10, 900, 1000) == 100.0 / 180.0, "inside warmdown: %.17g",
          lr_scale(50, 1000, 10, 900, 1000));
    CHECK(lr_scale(50, 1000, 10, 500, 1000) == 1.0, "before warmdown");
    /* 820 ms: 16.4 ms/step, warmdown 164 ms < 180 ms remaining -> still 1. */
    CHECK(lr_scale(50, 1000, 10, 820, 1000) == 1.0, "just before warmdown");
    CHECK(lr_scale(50, 1000, 10, 1200, 1000) == 0.0, "past the cap");
    /* Step 0: step_ms = elapsed / 1; nothing elapsed means warmdown_ms 0 < remaining -> 1. */
    CHECK(lr_scale(0, 1000, 10, 0, 1000) == 1.0, "step 0");
    /* remaining 0 <= warmdown 0: 0 / max(0, 1e-9) = 0. */
    CHECK(lr_scale(0, 1000, 10, 1000, 1000) == 0.0, "step 0 at the cap");
    /* The iteration count plays no part with a cap. */
    CHECK(lr_scale(50, 10, 10, 900, 1000) == 100.0 / 180.0, "iterations ignored");
}

/* The 1.0611 record's lr_mul(frac) with warmdown_frac 0.85 and min_lr 0.1, in double as written:
 * 1 - 0.85 = 0.15000000000000002, so frac 3/20 = 0.15 is still before the warmdown and
 * 4/20 = 0.2 is the first step in it; the floor holds from (1 - frac)/0.85 < 0.1, frac > 0.915. */
static void lr_scale_warmdown_frac(void) {
    CHECK(1.0 - 0.85 == 0.15000000000000002, "the edge itself: 1 - 0.85 = %.17g", 1.0 - 0.85);
    CHECK(lr_scale_frac(progress_steps(3, 20), 0.85, 0.1) == 1.0, "step 3 of 20 (0.15 < 0.15000000000000002)");
    CHECK(lr_scale_frac(progress_steps(4, 20), 0.85, 0.1) == (1.0 - 0.2) / 0.85, "step 4 of 20: %.17g",
          lr_scale_frac(progress_steps(4, 20), 0.85, 0.1));
    CHECK(lr_scale_frac(0.15000000000000002, 0.85, 0.1) == (1.0 - 0.15000000000000002) / 0.85, "at the edge");
    CHECK(lr_scale_frac(0.0, 0.85, 0.1) == 1.0, "start");
    CHECK(lr_scale_frac(progress_steps(18, 20), 0.85, 0.1) == (1.0 - 0.9) / 0.85,
          "step 18 of 20 above the floor: %.17g", lr_scale_frac(progress_steps(18, 20), 0.85, 0.1));
    CHECK(lr_scale_frac(progress_steps(19, 20), 0.85, 0.1) == 0.1, "step 19 of 20 at the floor: %.17g",
          lr_scale_frac(progress_steps(19, 20), 0.85, 0.1));
    CHECK(lr_scale_frac(1.0, 0.85, 0.1) == 0.1, "progress 1 at the floor");
    CHECK(lr_scale_frac(1.2, 0.85, 0.0) == 0.0, "past the end without a floor: max(negative, 0) = 0");
    CHECK(lr_scale_frac(0.95, 0.85, 0.0) == (1.0 - 0.95) / 0.85, "no floor");
    /* warmdown_frac 0 (or below): no warmdown, min_lr unused */
    CHECK(lr_scale_frac(0.99, 0.0, 0.5) == 1.0, "warmdown_frac 0");
    CHECK(lr_scale_frac(0.99, -1.0, 0.5) == 1.0, "warmdown_frac < 0");
    /* warmdown_frac 1: the ramp from the first step */
    CHECK(lr_scale_frac(0.0, 1.0, 0.0) == 1.0 && lr_scale_frac(0.25, 1.0, 0.0) == 0.75, "warmdown_frac 1");
    /* progress: step / max(iterations, 1); wall clock: elapsed / max(budget, 1e-9) */
    CHECK(progress_steps(5, 0) == 5.0 && progress_steps(0, 0) == 0.0, "iterations 0 counts as 1");
    CHECK(progress_steps(7, 20) == 7.0 / 20.0 && progress_steps(7, 20) >= 0.35, "7/20 >= 0.35");
    /* the record's budget: 600 s less the 0.5 s reserve */
    const double budget = 1000.0 * 600 - 1000.0 * 0.5;
    CHECK(budget == 599500.0, "budget %.17g", budget);
    CHECK(progress_wallclock(89925.0, budget) == 89925.0 / 599500.0, "wall-clock progress");
    CHECK(lr_scale_frac(progress_wallclock(89925.0, budget), 0.85, 0.1) == 1.0, "89.925 s: 0.15 exactly, not yet");
    CHECK(lr_scale_frac(progress_wallclock(89926.0, budget), 0.85, 0.1) < 1.0, "89.926 s: warmdown");
    CHECK(progress_wallclock(5.0, 0.0) == 5.0 / 1e-9, "budget 0 divides by 1e-9");
}

static void muon_momentum_schedule(void) {
    CHECK(muon_momentum_at(0, 0.85, 0.95, 500) == 0.85, "step 0");
    CHECK_CLOSE(muon_momentum_at(250, 0.85, 0.95, 500), 0.90, 1e-15);
    CHECK_CLOSE(muon_momentum_at(100, 0.85, 0.95, 500), 0.8 * 0.85 + 0.2 * 0.95, 1e-15);
    CHECK(muon_momentum_at(500, 0.85, 0.95, 500) == 0.95, "end of warmup");
    CHECK(muon_momentum_at(10000, 0.85, 0.95, 500) == 0.95, "after warmup");
    CHECK(muon_momentum_at(0, 0.85, 0.95, 0) == 0.95, "no warmup");
    CHECK(muon_momentum_at(3, 0.85, 0.95, -1) == 0.95, "negative warmup");
}

int main(void) {
    RUN(lr_scale_iteration_based);
    RUN(lr_scale_wallclock_based);
    RUN(lr_scale_warmdown_frac);
    RUN(muon_momentum_schedule);
    TEST_EXIT();
}
