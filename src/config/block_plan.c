/* block_plan.c — the block run order, its U-Net skip pairing and its parallel runs
 * (block_plan.h), computed from the configuration's numbers alone. */
#include "block_plan.h"

#include <stdio.h>
#include <stdlib.h>

#include "common.h"

/* The run list's block indices into blocks (NULL: count only); its length. */
static int run_list(const BlockPlanSettings *s, int looped, int *blocks) {
    int n = 0;
    const int loops = looped ? s->num_loops : 0;
    for (int b = 0; b < s->num_layers; b++) {
        if (blocks) blocks[n] = b;
        n++;
        if (b == s->loop_end)
            for (int k = 0; k < loops; k++)
                for (int r = s->loop_start; r <= s->loop_end; r++) {
                    if (blocks) blocks[n] = r;
                    n++;
                }
    }
    return n;
}

int block_plan_skip_rows(const BlockPlanSettings *s) {
    const int n = run_list(s, 1, NULL), enc = n / 2;
    return enc < n - enc ? enc : n - enc;
}

int block_plan_build(BlockPlan *p, const BlockPlanSettings *s, int looped) {
    p->num_runs = run_list(s, looped, NULL);
    p->num_encoder = p->num_runs / 2;
    p->runs = ct_calloc((size_t)p->num_runs, sizeof *p->runs, "block plan");
    int *blocks = ct_calloc((size_t)p->num_runs, sizeof *blocks, "block plan");
    run_list(s, looped, blocks);
    const int rows = block_plan_skip_rows(s);
    int *stack = ct_calloc((size_t)p->num_runs, sizeof *stack, "block plan"), depth = 0;
    p->first_parallel = p->num_runs;
    for (int i = 0; i < p->num_runs; i++) {
        BlockRun *r = &p->runs[i];
        r->block = blocks[i];
        r->decoder = i >= p->num_encoder;
        r->skip_row = r->skip_source = -1;
        if (!r->decoder) {
            stack[depth++] = i;
            continue;
        }
        const int j = i - p->num_encoder;
        if (j < rows && depth > 0) {
            r->skip_row = j;
            r->skip_source = stack[--depth];
        }
        r->parallel = s->parallel_start_layer > 0 && r->block >= s->parallel_start_layer;
        if (r->parallel && p->first_parallel == p->num_runs) p->first_parallel = i;
    }
    free(stack);
    free(blocks);
    return 0;
}

void block_plan_free(BlockPlan *p) {
    free(p->runs);
    p->runs = NULL;
    p->num_runs = p->num_encoder = 0;
}

/* The first sequential decoder run after a parallel one, or -1. */
static int sequential_after_parallel(const BlockPlan *p) {
    for (int i = p->first_parallel; i < p->num_runs; i++)
        if (!p->runs[i].parallel) return i;
    return -1;
}

int block_plan_check(const BlockPlanSettings *s) {
    if (s->num_loops < 0) return ct_fail("num_loops = %d: expected >= 0 (0 = no depth recurrence)", s->num_loops);
    if (s->loop_start < 0 || s->loop_start > s->loop_end)
        return ct_fail("loop_start = %d, loop_end = %d: expected 0 <= loop_start <= loop_end (the blocks that run "
                       "again, both ends included)", s->loop_start, s->loop_end);
    if (s->loop_end >= s->num_layers)
        return ct_fail("loop_end = %d: expected below num_layers = %d (block indices start at 0)", s->loop_end,
                       s->num_layers);
    if (s->parallel_start_layer < 0 || s->parallel_start_layer >= s->num_layers)
        return ct_fail("parallel_start_layer = %d: expected 0 (off) or a block index below num_layers = %d",
                       s->parallel_start_layer, s->num_layers);
    for (int looped = 0; looped <= (s->num_loops > 0); looped++) {
        BlockPlan p;
        block_plan_build(&p, s, looped);
        const int bad = sequential_after_parallel(&p);
        char plan[512];
        block_plan_describe(&p, plan, sizeof plan);
        const int block = bad >= 0 ? p.runs[bad].block : -1;
        block_plan_free(&p);
        if (bad >= 0)
            return ct_fail("parallel_start_layer = %d: the %s plan (%s) runs block %d as one lane after a parallel "
                           "block; every decoder block after the first parallel one must be parallel too (raise "
                           "parallel_start_layer above loop_end = %d, or move the loop)",
                           s->parallel_start_layer, looped ? "looped" : "plain", plan, block, s->loop_end);
    }
    return 0;
}

/* snprintf at buf + *n, keeping *n the length the text would have (cut at cap). */
static void append(char *buf, size_t cap, size_t *n, const char *text, int value) {
    const size_t at = *n < cap ? *n : cap;
    const int k = value >= 0 ? snprintf(buf + at, cap - at, "%s%d", text, value) : snprintf(buf + at, cap - at, "%s", text);
    if (k > 0) *n += (size_t)k;
}

void block_plan_describe(const BlockPlan *p, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    append(buf, cap, &n, "encoder:[", -1);
    for (int i = 0; i < p->num_encoder; i++) append(buf, cap, &n, i ? "," : "", p->runs[i].block);
    append(buf, cap, &n, "] decoder:[", -1);
    for (int i = p->num_encoder; i < p->num_runs; i++) append(buf, cap, &n, i > p->num_encoder ? "," : "", p->runs[i].block);
    append(buf, cap, &n, "]", -1);
}
