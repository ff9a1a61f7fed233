/* block_plan.h — the order in which the model's blocks run, as the configuration asks for it: one
 * plan that both backends walk (forward in order, backward in reverse), so depth recurrence, the
 * U-Net skips and parallel residual lanes are decided here once, not in each backend.
 *
 * The plan's run list, for L = num_layers blocks:
 *   plain (num_loops = 0, or before looping switches on):  0, 1, ..., L-1
 *   looped: [0 .. loop_start-1] + (num_loops + 1) x [loop_start .. loop_end] + [loop_end+1 .. L-1]
 * (the 1.0611 record: L 11, loop 3..5, num_loops 2 -> 0,1,2,3,4,5,3,4,5,3,4,5,6,7,8,9,10).
 * Its first floor(n/2) runs are the encoder, the rest the decoder (the record's
 * encoder:[0,1,2,3,4,5,3,4] decoder:[5,3,4,5,6,7,8,9,10]). Every encoder run pushes its output on
 * the skip stack; decoder run j pops the newest when j < skip_rows and the stack is not empty,
 * and adds it through skip_weights row j (and skip_gates row j). skip_rows = min(encoder runs,
 * decoder runs) of the looped list (so the rows exist before looping starts; the plain list
 * uses the first ones). A decoder run whose block index is >= parallel_start_layer (> 0) runs
 * as two lanes (docs/model.md, "Parallel residual lanes"); once one does, every later one must.
 * A repeated block reuses its weights, ln_scale and XSA flag: everything is by block index. */
#ifndef CT_BLOCK_PLAN_H
#define CT_BLOCK_PLAN_H

#include <stddef.h>

typedef struct {
    int block;       /* whose weights run here */
    int decoder;     /* 0: encoder half (pushes its output as a skip), 1: decoder half */
    int skip_row;    /* decoder: the skip_weights / skip_gates row it adds through; -1: none */
    int skip_source; /* decoder: the run whose output it adds; -1: none */
    int parallel;    /* decoder: runs as two lanes */
} BlockRun;

typedef struct {
    int num_runs, num_encoder; /* runs [0, num_encoder) are the encoder */
    int first_parallel;        /* the first parallel run; num_runs when none */
    BlockRun *runs;
} BlockPlan;

/* The settings a plan is made from (the configuration keys of the same names). */
typedef struct {
    int num_layers, num_loops, loop_start, loop_end, parallel_start_layer;
} BlockPlanSettings;

/* The skip rows both plans share: min(encoder runs, decoder runs) of the looped list. */
int block_plan_skip_rows(const BlockPlanSettings *s);
/* Check the settings: 0 <= loop_start <= loop_end < num_layers, num_loops >= 0,
 * 0 <= parallel_start_layer < num_layers, and (looped and plain) no sequential decoder run after
 * a parallel one. Returns -1 with ct_fail naming the key(s), the values and what was expected. */
int block_plan_check(const BlockPlanSettings *s);
/* The plain (looped = 0) or looped plan; settings already checked. block_plan_free frees it. */
int block_plan_build(BlockPlan *plan, const BlockPlanSettings *s, int looped);
void block_plan_free(BlockPlan *plan);
/* "encoder:[0,1,2,3,4] decoder:[5,6,7,8,9,10]" (the record's log format), into buf. */
void block_plan_describe(const BlockPlan *plan, char *buf, size_t cap);

#endif
