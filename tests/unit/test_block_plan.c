/* test_block_plan.c — the block run order (src/config/block_plan.c) against plans written out by
 * hand: today's U-Net (each decoder block adds the mirror encoder block's output), the 1.0611
 * record's looped plan with its logged encoder/decoder lists and the skip pairing that its LIFO
 * stack gives (decoder run : block <- encoder run : block, worked out in the notes), the
 * same model before looping switches on, parallel runs, and every bad setting named. */
#include "block_plan.h"
#include "common.h"
#include "harness.h"

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

/* Plan p's decoder runs as "block<-source_block" items ("5<-4 6<-3 10"), into buf. */
static const char *pairs(const BlockPlan *p, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = p->num_encoder; i < p->num_runs && n < cap; i++) {
        const BlockRun *r = &p->runs[i];
        if (r->skip_source >= 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s%d<-%d@%d", n ? " " : "", r->block,
                                  p->runs[r->skip_source].block, r->skip_source);
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%d", n ? " " : "", r->block);
    }
    return buf;
}

static void plain_unet(void) {
    const BlockPlanSettings s = {.num_layers = 9};
    CHECK(block_plan_check(&s) == 0, "%s", ct_error());
    CHECK(block_plan_skip_rows(&s) == 4, "skip rows %d", block_plan_skip_rows(&s));
    BlockPlan p;
    block_plan_build(&p, &s, 0);
    char text[256], pr[256];
    block_plan_describe(&p, text, sizeof text);
    pairs(&p, pr, sizeof pr);
    int rows_ok = 1;
    for (int i = p.num_encoder; i < p.num_runs; i++) rows_ok &= p.runs[i].skip_row == (i - 4 < 4 ? i - 4 : -1);
    const int parallel = p.first_parallel;
    block_plan_free(&p);
    CHECK(strcmp(text, "encoder:[0,1,2,3] decoder:[4,5,6,7,8]") == 0, "%s", text);
    CHECK(strcmp(pr, "4<-3@3 5<-2@2 6<-1@1 7<-0@0 8") == 0, "%s", pr);
    CHECK(rows_ok, "skip rows are not the decoder index");
    CHECK(parallel == 9, "a parallel run without parallel_start_layer");
}

static void record_looped_and_before(void) {
    const BlockPlanSettings s = {.num_layers = 11, .num_loops = 2, .loop_start = 3, .loop_end = 5,
                                 .parallel_start_layer = 8};
    CHECK(block_plan_check(&s) == 0, "%s", ct_error());
    CHECK(block_plan_skip_rows(&s) == 8, "skip rows %d", block_plan_skip_rows(&s));
    BlockPlan p;
    char text[256], pr[256];
    block_plan_build(&p, &s, 1);
    block_plan_describe(&p, text, sizeof text);
    pairs(&p, pr, sizeof pr);
    int parallel_ok = p.first_parallel == 14;
    for (int i = 0; i < p.num_runs; i++) parallel_ok &= p.runs[i].parallel == (i >= 14);
    block_plan_free(&p);
    CHECK(strcmp(text, "encoder:[0,1,2,3,4,5,3,4] decoder:[5,3,4,5,6,7,8,9,10]") == 0, "%s", text);
    CHECK(strcmp(pr, "5<-4@7 3<-3@6 4<-5@5 5<-4@4 6<-3@3 7<-2@2 8<-1@1 9<-0@0 10") == 0, "%s", pr);
    CHECK(parallel_ok, "parallel runs are not decoder blocks 8, 9, 10");
    block_plan_build(&p, &s, 0);
    block_plan_describe(&p, text, sizeof text);
    pairs(&p, pr, sizeof pr);
    block_plan_free(&p);
    CHECK(strcmp(text, "encoder:[0,1,2,3,4] decoder:[5,6,7,8,9,10]") == 0, "%s", text);
    CHECK(strcmp(pr, "5<-4@4 6<-3@3 7<-2@2 8<-1@1 9<-0@0 10") == 0, "%s", pr);
}

static void small_plans(void) {
    const BlockPlanSettings one = {.num_layers = 1};
    BlockPlan p;
    char text[64];
    block_plan_build(&p, &one, 0);
    block_plan_describe(&p, text, sizeof text);
    const int runs = p.num_runs, skip = p.runs[0].skip_source;
    block_plan_free(&p);
    CHECK(strcmp(text, "encoder:[] decoder:[0]") == 0 && runs == 1 && skip == -1, "%s", text);
    /* looping the whole of a 2-block model once: 0,1,0,1 */
    const BlockPlanSettings all = {.num_layers = 2, .num_loops = 1, .loop_start = 0, .loop_end = 1};
    CHECK(block_plan_check(&all) == 0, "%s", ct_error());
    block_plan_build(&p, &all, 1);
    char pr[64];
    block_plan_describe(&p, text, sizeof text);
    pairs(&p, pr, sizeof pr);
    block_plan_free(&p);
    CHECK(strcmp(text, "encoder:[0,1] decoder:[0,1]") == 0, "%s", text);
    CHECK(strcmp(pr, "0<-1@1 1<-0@0") == 0, "%s", pr);
    /* a description cut short stays a terminated string */
    block_plan_build(&p, &all, 1);
    char tiny[8];
    block_plan_describe(&p, tiny, sizeof tiny);
    block_plan_free(&p);
    CHECK(strcmp(tiny, "encoder") == 0, "'%s'", tiny);
}

static void bad_settings_named(void) {
    const struct {
        BlockPlanSettings s;
        const char *needle;
    } bad[] = {
        {{.num_layers = 11, .num_loops = -1}, "num_loops = -1: expected >= 0"},
        {{.num_layers = 11, .num_loops = 2, .loop_start = 5, .loop_end = 3},
         "loop_start = 5, loop_end = 3: expected 0 <= loop_start <= loop_end"},
        {{.num_layers = 11, .num_loops = 2, .loop_start = 3, .loop_end = 11}, "loop_end = 11: expected below num_layers = 11"},
        {{.num_layers = 11, .parallel_start_layer = 11}, "parallel_start_layer = 11: expected 0 (off) or a block index below num_layers = 11"},
        {{.num_layers = 11, .num_loops = 2, .loop_start = 3, .loop_end = 5, .parallel_start_layer = 5},
         "parallel_start_layer = 5: the looped plan (encoder:[0,1,2,3,4,5,3,4] decoder:[5,3,4,5,6,7,8,9,10]) runs block 3 "
         "as one lane after a parallel block"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_error_clear();
        CHECK(block_plan_check(&bad[i].s) != 0, "case %zu accepted", i);
        CHECK(error_has(bad[i].needle), "case %zu: %s", i, ct_error());
    }
    /* the plain plan of a parallel model is fine: blocks only grow there */
    const BlockPlanSettings ok = {.num_layers = 11, .parallel_start_layer = 5};
    CHECK(block_plan_check(&ok) == 0, "%s", ct_error());
}

int main(void) {
    RUN(plain_unet);
    RUN(record_looped_and_before);
    RUN(small_plans);
    RUN(bad_settings_named);
    TEST_EXIT();
}
