/* test_cpu_smear_bos.c — reference tests of the 1.0611 record's SmearGate with the BOS mask
 * (kernels/cpu/cpu_smear_bos.c, issue 56), as tests/refcheck.h describes (test_cpu_ops.c's
 * bounds): fp32 forward vs a double reference, backward (de, dw, dlambda) vs central finite
 * differences of L = sum(out * R), the += semantics of the backward, the mask (a BOS at a row's
 * start, in its middle, and a row whose first token is not BOS), and the same bits with 1 and 3
 * OpenMP threads. CT_TEST_VERBOSE=1 prints every measured error. */
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


enum { B = 3, T = 7, C = 10, W = 4, BOS = 1 };

/* Row 0 starts with BOS and has another at t = 4; row 1 starts mid-document (no BOS at t = 0)
 * and has one at t = 2; row 2 has none. */
static const int32_t IDS[B * T] = {BOS, 5, 6, 7, BOS, 8, 9, /**/ 3, 4, BOS, 2, 5, 5, 0, /**/ 6, 2, 3, 4, 5, 6, 7};

typedef struct {
    const double *e, *w, *lambda, *R;
    const int32_t *ids;
} SmearRef;

/* out_t = e_t + [t > 0 and id_t != BOS] lambda sigmoid(w . e_t[:W]) e_{t-1}, in double */
static void smear_ref(const SmearRef *p, double *out) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t n = (size_t)b * T + t, row = n * C;
            double g = 0;
            if (t > 0 && p->ids[n] != BOS) {
                double z = 0;
                for (int k = 0; k < W; k++) z += p->w[k] * p->e[row + k];
                g = p->lambda[0] / (1.0 + exp(-z));
            }
            for (int c = 0; c < C; c++) out[row + c] = p->e[row + c] + (g != 0 ? g * p->e[row - C + c] : 0.0);
        }
}

static double smear_loss(const double *unused, void *ctx) {
    (void)unused;
    const SmearRef *p = ctx;
    const size_t n = (size_t)B * T * C;
    double *out = ref_new_doubles(n), L = 0;
    smear_ref(p, out);
    for (size_t i = 0; i < n; i++) L += out[i] * p->R[i];
    free(out);
    return L;
}

static void forward_and_gradients_match_reference(void) {
    uint64_t rng = 561;
    const size_t n = (size_t)B * T * C;
    float *e = ref_random_floats(n, -1, 1, &rng), *w = ref_random_floats(W, -1, 1, &rng);
    float lambda[1] = {0.7f}, *R = ref_random_floats(n, -1, 1, &rng), *out = ref_new_floats(n);
    float *de = ref_new_floats(n), *dw = ref_new_floats(W), dl[1] = {0};
    memset(de, 0, n * sizeof(float));
    memset(dw, 0, W * sizeof(float));
    ref_poison(out, n);
    cpu_smear_bos_forward(out, e, IDS, w, lambda, B, T, C, W, BOS);
    double *e_d = ref_doubles_of(e, n), *w_d = ref_doubles_of(w, W), l_d[1] = {lambda[0]};
    double *R_d = ref_doubles_of(R, n), *ref = ref_new_doubles(n);
    SmearRef p = {e_d, w_d, l_d, R_d, IDS};
    smear_ref(&p, ref);
    CHECK_ERR("smear bos forward", ref_rel_err(out, ref, n), FORWARD_TOL);
    /* the mask: positions 0 of every row and the BOS positions are their embedding, bit for bit */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const size_t at = ((size_t)b * T + t) * C;
            const int kept = t == 0 || IDS[b * T + t] == BOS;
            CHECK(kept == !memcmp(out + at, e + at, C * sizeof(float)), "row %d position %d: %s", b, t,
                  kept ? "mixed where it must not be" : "not mixed");
        }
    cpu_smear_bos_backward(de, dw, dl, R, e, IDS, w, lambda, B, T, C, W, BOS);
    double *num_e = ref_new_doubles(n), num_w[W], num_l[1];
    ref_numgrad(smear_loss, e_d, n, &p, FD_STEP, num_e);
    ref_numgrad(smear_loss, w_d, W, &p, FD_STEP, num_w);
    ref_numgrad(smear_loss, l_d, 1, &p, FD_STEP, num_l);
    CHECK_ERR("smear bos de vs FD", ref_rel_err(de, num_e, n), GRADIENT_TOL);
    CHECK_ERR("smear bos dw vs FD", ref_rel_err(dw, num_w, W), GRADIENT_TOL);
    CHECK_ERR("smear bos dlambda vs FD", ref_rel_err(dl, num_l, 1), GRADIENT_TOL);
    /* every output accumulates */
    float *de_once = ref_copy_floats(de, n), *dw_once = ref_copy_floats(dw, W), dl_once[1] = {dl[0]};
    cpu_smear_bos_backward(de, dw, dl, R, e, IDS, w, lambda, B, T, C, W, BOS);
    CHECK_ERR("smear bos de accumulates", ref_doubling_err(de_once, de, n), ACCUMULATE_TOL);
    CHECK_ERR("smear bos dw accumulates", ref_doubling_err(dw_once, dw, W), ACCUMULATE_TOL);
    CHECK_ERR("smear bos dlambda accumulates", ref_doubling_err(dl_once, dl, 1), ACCUMULATE_TOL);
    free(e), free(w), free(R), free(out), free(de), free(dw), free(e_d), free(w_d), free(R_d), free(ref);
    free(num_e), free(de_once), free(dw_once);
}

/* The mask matters: another BOS id (none of the tokens) mixes the BOS positions too, and the
 * result differs there and only there; lambda = 0 (the record's init) is the identity and gives
 * w no gradient. */
static void mask_and_zero_lambda(void) {
    uint64_t rng = 562;
    const size_t n = (size_t)B * T * C;
    float *e = ref_random_floats(n, -1, 1, &rng), *w = ref_random_floats(W, -1, 1, &rng);
    float lambda[1] = {0.5f}, *R = ref_random_floats(n, -1, 1, &rng);
    float *a = ref_new_floats(n), *b = ref_new_floats(n);
    cpu_smear_bos_forward(a, e, IDS, w, lambda, B, T, C, W, BOS);
    cpu_smear_bos_forward(b, e, IDS, w, lambda, B, T, C, W, 99);
    for (int r = 0; r < B; r++)
        for (int t = 1; t < T; t++) {
            const size_t at = ((size_t)r * T + t) * C;
            const int differs = memcmp(a + at, b + at, C * sizeof(float)) != 0;
            CHECK(differs == (IDS[r * T + t] == BOS), "row %d position %d: the BOS id %s the output", r, t,
                  differs ? "changed" : "did not change");
        }
    lambda[0] = 0;
    cpu_smear_bos_forward(a, e, IDS, w, lambda, B, T, C, W, BOS);
    CHECK(!memcmp(a, e, n * sizeof(float)), "lambda = 0 is not the identity");
    float *de = ref_new_floats(n), dw[W] = {0}, dl[1] = {0};
    memset(de, 0, n * sizeof(float));
    cpu_smear_bos_backward(de, dw, dl, R, e, IDS, w, lambda, B, T, C, W, BOS);
    for (int k = 0; k < W; k++) CHECK(dw[k] == 0, "dw[%d] = %g with lambda = 0", k, (double)dw[k]);
    CHECK(dl[0] != 0, "dlambda is 0 at lambda = 0");
    CHECK(!memcmp(de, R, n * sizeof(float)), "de is not dout with lambda = 0");
    free(e), free(w), free(R), free(a), free(b), free(de);
}

/* The same bits with 1 and 3 threads, on a shape whose window spans two of the backward's
 * accumulator chunks (70 > 64). */
static void thread_count_gives_same_bits(void) {
    uint64_t rng = 563;
    enum { B2 = 2, T2 = 9, C2 = 80, W2 = 70 };
    const size_t n = (size_t)B2 * T2 * C2;
    int32_t ids[B2 * T2];
    for (int i = 0; i < B2 * T2; i++) ids[i] = i % 5 == 3 ? BOS : 2 + i % 7;
    float *e = ref_random_floats(n, -1, 1, &rng), *w = ref_random_floats(W2, -0.2, 0.2, &rng);
    float lambda[1] = {0.3f}, *R = ref_random_floats(n, -1, 1, &rng);
    float *res[2][4];
    const int threads[2] = {1, 3};
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(threads[k]);
        res[k][0] = ref_new_floats(n), res[k][1] = ref_new_floats(n), res[k][2] = ref_new_floats(W2);
        res[k][3] = ref_new_floats(1);
        memset(res[k][1], 0, n * sizeof(float));
        memset(res[k][2], 0, W2 * sizeof(float));
        res[k][3][0] = 0;
        cpu_smear_bos_forward(res[k][0], e, ids, w, lambda, B2, T2, C2, W2, BOS);
        cpu_smear_bos_backward(res[k][1], res[k][2], res[k][3], R, e, ids, w, lambda, B2, T2, C2, W2, BOS);
    }
    omp_set_num_threads(2);
    const size_t sizes[4] = {n, n, W2, 1};
    for (int j = 0; j < 4; j++)
        CHECK(memcmp(res[0][j], res[1][j], sizes[j] * sizeof(float)) == 0, "output %d differs between 1 and 3 threads",
              j);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 4; j++) free(res[k][j]);
    free(e), free(w), free(R);
}

int main(void) {
    verbose = getenv("CT_TEST_VERBOSE") != NULL;
    RUN(forward_and_gradients_match_reference);
    RUN(mask_and_zero_lambda);
    RUN(thread_count_gives_same_bits);
    TEST_EXIT();
}
