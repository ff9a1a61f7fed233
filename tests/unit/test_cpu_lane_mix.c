/* test_cpu_lane_mix.c — reference tests of the parallel lanes' block end (kernels/cpu/cpu_lane_mix.c,
 * issue 56), as tests/refcheck.h describes (test_cpu_ops.c's bounds): fp32 forward vs a double
 * reference, every gradient (both lanes, both branch outputs, both scales, the two resid and four
 * post lambdas) vs central finite differences of L = sum(out0 * R0) + sum(out1 * R1), the +=
 * semantics of the backward, in-place outputs, and the same bits with 1 and 3 OpenMP threads.
 * CT_TEST_VERBOSE=1 prints every measured error. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_ops.h"
#include "harness.h"
#include "refcheck.h"

static int verbose;

enum { N = 7, C = 19 }; /* two channel blocks, the second ragged */
enum { NC = N * C };

/* the op's inputs, as double, in one place so each can be perturbed */
typedef struct {
    double *l0, *l1, *ao, *mo, *as, *ms, *resid, *post;
    const double *R0, *R1;
} LaneRef;

static void lane_ref(const LaneRef *p, double *out0, double *out1) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)n * C + c;
            const double a = p->as[c] * p->ao[i], m = p->ms[c] * p->mo[i];
            out0[i] = p->resid[0] * p->l0[i] + p->post[0] * a + p->post[2] * m;
            out1[i] = p->resid[1] * p->l1[i] + p->post[1] * a + p->post[3] * m;
        }
}

static double lane_loss(const double *unused, void *ctx) {
    (void)unused;
    const LaneRef *p = ctx;
    double *o0 = ref_new_doubles(NC), *o1 = ref_new_doubles(NC), L = 0;
    lane_ref(p, o0, o1);
    for (size_t i = 0; i < NC; i++) L += o0[i] * p->R0[i] + o1[i] * p->R1[i];
    free(o0), free(o1);
    return L;
}

/* the op's fp32 inputs and gradient buffers */
typedef struct {
    float *l0, *l1, *ao, *mo, *as, *ms, *resid, *post, *R0, *R1;
    float *dl0, *dl1, *dao, *dmo, *das, *dms, *dresid, *dpost;
} LaneBufs;

static float *zeros(size_t n) { return ct_calloc(n, sizeof(float), "test buffer"); }

static LaneBufs lane_bufs(uint64_t seed) {
    uint64_t rng = seed;
    LaneBufs b;
    b.l0 = ref_random_floats(NC, -1, 1, &rng), b.l1 = ref_random_floats(NC, -1, 1, &rng);
    b.ao = ref_random_floats(NC, -1, 1, &rng), b.mo = ref_random_floats(NC, -1, 1, &rng);
    b.as = ref_random_floats(C, 0.2, 1.5, &rng), b.ms = ref_random_floats(C, 0.2, 1.5, &rng);
    b.resid = ref_random_floats(2, 0.8, 1.3, &rng), b.post = ref_random_floats(4, 0.5, 1.5, &rng);
    b.R0 = ref_random_floats(NC, -1, 1, &rng), b.R1 = ref_random_floats(NC, -1, 1, &rng);
    b.dl0 = zeros(NC), b.dl1 = zeros(NC), b.dao = zeros(NC), b.dmo = zeros(NC);
    b.das = zeros(C), b.dms = zeros(C), b.dresid = zeros(2), b.dpost = zeros(4);
    return b;
}

static void lane_bufs_free(LaneBufs *b) {
    float *all[] = {b->l0, b->l1, b->ao,  b->mo,  b->as,  b->ms,  b->resid,  b->post,  b->R0,
                    b->R1, b->dl0, b->dl1, b->dao, b->dmo, b->das, b->dms, b->dresid, b->dpost};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

static void backward(LaneBufs *b) {
    cpu_lane_mix_backward(b->dl0, b->dl1, b->dao, b->dmo, b->das, b->dms, b->dresid, b->dpost, b->R0, b->R1, b->l0,
                          b->l1, b->ao, b->mo, b->as, b->ms, b->resid, b->post, N, C);
}

static void forward_and_gradients_match_reference(void) {
    LaneBufs b = lane_bufs(571);
    float *out0 = ref_new_floats(NC), *out1 = ref_new_floats(NC);
    ref_poison(out0, NC);
    ref_poison(out1, NC);
    cpu_lane_mix_forward(out0, out1, b.l0, b.l1, b.ao, b.mo, b.as, b.ms, b.resid, b.post, N, C);
    LaneRef p = {ref_doubles_of(b.l0, NC), ref_doubles_of(b.l1, NC), ref_doubles_of(b.ao, NC),
                 ref_doubles_of(b.mo, NC), ref_doubles_of(b.as, C),  ref_doubles_of(b.ms, C),
                 ref_doubles_of(b.resid, 2), ref_doubles_of(b.post, 4), ref_doubles_of(b.R0, NC),
                 ref_doubles_of(b.R1, NC)};
    double *ref0 = ref_new_doubles(NC), *ref1 = ref_new_doubles(NC);
    lane_ref(&p, ref0, ref1);
    CHECK_ERR("lane mix forward, lane 0", ref_rel_err(out0, ref0, NC), FORWARD_TOL);
    CHECK_ERR("lane mix forward, lane 1", ref_rel_err(out1, ref1, NC), FORWARD_TOL);
    backward(&b);
    /* every gradient against finite differences of the double reference */
    struct {
        const char *label;
        double *x;
        size_t n;
        const float *grad;
    } g[] = {{"dl0 vs FD", p.l0, NC, b.dl0},          {"dl1 vs FD", p.l1, NC, b.dl1},
             {"dao vs FD", p.ao, NC, b.dao},          {"dmo vs FD", p.mo, NC, b.dmo},
             {"dattn_scale vs FD", p.as, C, b.das},   {"dmlp_scale vs FD", p.ms, C, b.dms},
             {"dresid vs FD", p.resid, 2, b.dresid},  {"dpost vs FD", p.post, 4, b.dpost}};
    for (size_t k = 0; k < sizeof g / sizeof *g; k++) {
        double *num = ref_new_doubles(g[k].n);
        ref_numgrad(lane_loss, g[k].x, g[k].n, &p, FD_STEP, num);
        CHECK_ERR(g[k].label, ref_rel_err(g[k].grad, num, g[k].n), GRADIENT_TOL);
        /* and element by element for the lambdas, each its own sum */
        if (g[k].n <= 4)
            for (size_t i = 0; i < g[k].n; i++)
                CHECK(fabs(g[k].grad[i] - num[i]) <= GRADIENT_TOL * fabs(num[i]) + 1e-6, "%s[%zu]: %g vs %g",
                      g[k].label, i, (double)g[k].grad[i], num[i]);
        free(num);
    }
    /* every output accumulates */
    float *once[8] = {ref_copy_floats(b.dl0, NC), ref_copy_floats(b.dl1, NC), ref_copy_floats(b.dao, NC),
                      ref_copy_floats(b.dmo, NC), ref_copy_floats(b.das, C),  ref_copy_floats(b.dms, C),
                      ref_copy_floats(b.dresid, 2), ref_copy_floats(b.dpost, 4)};
    const float *twice[8] = {b.dl0, b.dl1, b.dao, b.dmo, b.das, b.dms, b.dresid, b.dpost};
    const size_t sizes[8] = {NC, NC, NC, NC, C, C, 2, 4};
    backward(&b);
    for (int k = 0; k < 8; k++) {
        CHECK_ERR("lane mix backward accumulates", ref_doubling_err(once[k], twice[k], sizes[k]), ACCUMULATE_TOL);
        free(once[k]);
    }
    double *pd[] = {p.l0, p.l1, p.ao, p.mo, p.as, p.ms, p.resid, p.post};
    for (size_t k = 0; k < sizeof pd / sizeof *pd; k++) free(pd[k]);
    free((void *)p.R0), free((void *)p.R1), free(ref0), free(ref1), free(out0), free(out1);
    lane_bufs_free(&b);
}

/* out0 = l0 and out1 = l1 in place give the bits of separate outputs; at the record's init
 * (resid 1.1, post 1) both lanes get the same branch sum. */
static void in_place_and_init(void) {
    LaneBufs b = lane_bufs(572);
    float *out0 = ref_new_floats(NC), *out1 = ref_new_floats(NC);
    cpu_lane_mix_forward(out0, out1, b.l0, b.l1, b.ao, b.mo, b.as, b.ms, b.resid, b.post, N, C);
    cpu_lane_mix_forward(b.l0, b.l1, b.l0, b.l1, b.ao, b.mo, b.as, b.ms, b.resid, b.post, N, C);
    CHECK(!memcmp(out0, b.l0, NC * sizeof(float)) && !memcmp(out1, b.l1, NC * sizeof(float)),
          "in-place lanes differ from separate outputs");
    const float resid[2] = {1.1f, 1.1f}, post[4] = {1, 1, 1, 1};
    memcpy(b.l1, b.l0, NC * sizeof(float));
    cpu_lane_mix_forward(out0, out1, b.l0, b.l1, b.ao, b.mo, b.as, b.ms, resid, post, N, C);
    CHECK(!memcmp(out0, out1, NC * sizeof(float)), "equal lanes at init give different outputs");
    free(out0), free(out1);
    lane_bufs_free(&b);
}

/* The same bits with 1 and 3 threads, on a shape of several channel blocks. */
static void thread_count_gives_same_bits(void) {
    enum { N2 = 33, C2 = 80 };
    const size_t n = (size_t)N2 * C2;
    uint64_t rng = 573;
    float *in[6], *as = ref_random_floats(C2, 0.2, 1.5, &rng), *ms = ref_random_floats(C2, 0.2, 1.5, &rng);
    for (int k = 0; k < 6; k++) in[k] = ref_random_floats(n, -1, 1, &rng); /* l0 l1 ao mo d0 d1 */
    const float resid[2] = {1.05f, 0.93f}, post[4] = {0.7f, 1.2f, 0.9f, 1.1f};
    const size_t sizes[8] = {n, n, n, n, C2, C2, 2, 4};
    float *res[2][10];
    const int threads[2] = {1, 3};
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(threads[t]);
        for (int j = 0; j < 8; j++) res[t][j] = zeros(sizes[j]);
        res[t][8] = ref_new_floats(n), res[t][9] = ref_new_floats(n);
        cpu_lane_mix_forward(res[t][8], res[t][9], in[0], in[1], in[2], in[3], as, ms, resid, post, N2, C2);
        cpu_lane_mix_backward(res[t][0], res[t][1], res[t][2], res[t][3], res[t][4], res[t][5], res[t][6], res[t][7],
                              in[4], in[5], in[0], in[1], in[2], in[3], as, ms, resid, post, N2, C2);
    }
    omp_set_num_threads(2);
    for (int j = 0; j < 10; j++)
        CHECK(!memcmp(res[0][j], res[1][j], (j < 8 ? sizes[j] : n) * sizeof(float)),
              "output %d differs between 1 and 3 threads", j);
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 10; j++) free(res[t][j]);
    for (int k = 0; k < 6; k++) free(in[k]);
    free(as), free(ms);
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") != NULL;
    RUN(forward_and_gradients_match_reference);
    RUN(in_place_and_init);
    RUN(thread_count_gives_same_bits);
    TEST_EXIT();
}
