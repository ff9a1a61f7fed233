/* config_frontier.c — validation of the 1.0611 record's schedule and optimizer keys
 * (warmdown_frac, min_lr, progress_clock, gptq_reserve_seconds, embed_wd, muon_polar_express;
 * issue 56): config_validate calls it; a file of its own keeps config.c below 600 lines. */
#include "config.h"

#include <string.h>

#include "common.h"

#define REQUIRE(cond, ...)                        \
    do {                                          \
        if (!(cond)) return ct_fail(__VA_ARGS__); \
    } while (0)

int config_validate_schedule_optim(const Config *c) {
    REQUIRE(c->warmdown_frac >= 0 && c->warmdown_frac <= 1,
            "warmdown_frac = %g: expected in [0, 1] (the fraction of progress the warmdown takes; 0 = warmdown_iters)",
            c->warmdown_frac);
    REQUIRE(c->min_lr >= 0 && c->min_lr <= 1,
            "min_lr = %g: expected in [0, 1] (a floor of the LR multiplier, not an LR)", c->min_lr);
    REQUIRE(c->min_lr == 0 || c->warmdown_frac > 0,
            "min_lr = %g needs warmdown_frac > 0: the floor belongs to warmdown_frac's warmdown (warmdown_frac = 0 "
            "uses warmdown_iters, which has none)",
            c->min_lr);
    REQUIRE(!strcmp(c->progress_clock, "steps") || !strcmp(c->progress_clock, "wallclock"),
            "progress_clock = '%s': expected steps or wallclock", c->progress_clock);
    REQUIRE(strcmp(c->progress_clock, "wallclock") || c->max_wallclock_seconds > 0,
            "progress_clock = wallclock needs max_wallclock_seconds > 0 (got %g): the wall-clock progress is "
            "train_time over that budget",
            c->max_wallclock_seconds);
    REQUIRE(strcmp(c->progress_clock, "wallclock") || c->warmdown_frac > 0 || c->num_loops > 0,
            "progress_clock = wallclock needs warmdown_frac > 0 or num_loops > 0 (got %g and %lld): the progress "
            "drives warmdown_frac's warmdown and the looping switch; warmdown_iters' form keeps its own time-based "
            "warmdown under max_wallclock_seconds",
            c->warmdown_frac, (long long)c->num_loops);
    REQUIRE(c->gptq_reserve_seconds >= 0, "gptq_reserve_seconds = %g: expected >= 0 (0 = none)",
            c->gptq_reserve_seconds);
    REQUIRE(c->gptq_reserve_seconds == 0 || c->gptq_reserve_seconds < c->max_wallclock_seconds,
            "gptq_reserve_seconds = %g: expected below max_wallclock_seconds = %g (it is taken off that budget; "
            "0 without one)",
            c->gptq_reserve_seconds, c->max_wallclock_seconds);
    enum { POLAR_EXPRESS_STEPS = 5 }; /* the triples of kernels/ns5.h (a layer config may not include) */
    REQUIRE(c->embed_wd >= 0 || c->embed_wd == -1,
            "embed_wd = %g: expected >= 0, or -1 (the token-embedding group follows adam_wd)", c->embed_wd);
    REQUIRE(!c->muon_polar_express || c->muon_backend_steps <= POLAR_EXPRESS_STEPS,
            "muon_backend_steps = %lld: expected <= %d with muon_polar_express = 1 (Polar Express has %d "
            "coefficient triples, one per iteration)",
            (long long)c->muon_backend_steps, POLAR_EXPRESS_STEPS, POLAR_EXPRESS_STEPS);
    return 0;
}
