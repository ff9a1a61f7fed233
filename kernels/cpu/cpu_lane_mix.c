/* cpu_lane_mix.c — the end of a parallel block (docs/model.md, "Parallel residual lanes"): both
 * lanes take both branches' outputs through the block's lambdas,
 *   A = attn_scale * ao,  M = mlp_scale * mo,
 *   out0 = resid[0] * l0 + post[0] * A + post[2] * M,
 *   out1 = resid[1] * l1 + post[1] * A + post[3] * M,
 * evaluated left to right in fp32 as the record's tensors are; forward and backward (to both
 * lanes, both branch outputs, both per-channel scales and the six lambdas). */
#include <math.h>
#include <stddef.h>

#include "cpu_lane_mix.h"
#include "cpu_ops.h"

/* cpu_lane_mix_track_magnitudes' state: off (NULL) but in the test that sets it */
static const float *track_grads;
static double *track_mag;

void cpu_lane_mix_track_magnitudes(const float *grads, double *mag) {
    track_grads = grads;
    track_mag = mag;
}

/* The sums of |term| of the six lambdas' gradients (as the backward's sums, in double, serial:
 * test support only) into track_mag at each lambda's index in track_grads. */
static void add_magnitudes(float *dresid, float *dpost, const float *d0, const float *d1, const float *l0,
                           const float *l1, const float *ao, const float *mo, const float *attn_scale,
                           const float *mlp_scale, int N, int C) {
    double m[6] = {0};
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)n * C + c;
            const float a = attn_scale[c] * ao[i], mm = mlp_scale[c] * mo[i];
            const double g0 = d0[i], g1 = d1[i];
            m[0] += fabs(g0 * l0[i]);
            m[1] += fabs(g1 * l1[i]);
            m[2] += fabs(g0 * a);
            m[3] += fabs(g1 * a);
            m[4] += fabs(g0 * mm);
            m[5] += fabs(g1 * mm);
        }
    for (int j = 0; j < 6; j++) {
        const ptrdiff_t k = (j < 2 ? dresid + j : dpost + (j - 2)) - track_grads;
        track_mag[k] += m[j];
    }
}

void cpu_lane_mix_forward(float *out0, float *out1, const float *l0, const float *l1, const float *ao, const float *mo,
                          const float *attn_scale, const float *mlp_scale, const float *resid, const float *post, int N,
                          int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const size_t i = row + c;
            const float a = attn_scale[c] * ao[i], m = mlp_scale[c] * mo[i];
            const float v0 = resid[0] * l0[i] + post[0] * a + post[2] * m;
            const float v1 = resid[1] * l1[i] + post[1] * a + post[3] * m;
            out0[i] = v0; /* after both reads: out0 may be l0, out1 may be l1 */
            out1[i] = v1;
        }
    }
}

void cpu_lane_mix_backward(float *dl0, float *dl1, float *dao, float *dmo, float *dattn_scale, float *dmlp_scale,
                           float *dresid, float *dpost, const float *d0, const float *d1, const float *l0,
                           const float *l1, const float *ao, const float *mo, const float *attn_scale,
                           const float *mlp_scale, const float *resid, const float *post, int N, int C) {
    /* input gradients, rows to threads: dA = post[0] d0 + post[1] d1, dM = post[2] d0 + post[3] d1 */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const size_t i = row + c;
            dl0[i] += resid[0] * d0[i];
            dl1[i] += resid[1] * d1[i];
            dao[i] += attn_scale[c] * (post[0] * d0[i] + post[1] * d1[i]);
            dmo[i] += mlp_scale[c] * (post[2] * d0[i] + post[3] * d1[i]);
        }
    }
    /* the scales' gradients per channel and the lambdas' over every element: channel blocks to
     * threads, each summing its tokens in order in double; the ordered section then adds the
     * blocks' lambda partials in block order, so no thread count changes a bit */
    double lam[6] = {0}; /* resid 0, 1; post 0..3 */
    const int blocks = (C + CPU_CHANNEL_BLOCK - 1) / CPU_CHANNEL_BLOCK;
#pragma omp parallel for schedule(static) ordered
    for (int b = 0; b < blocks; b++) {
        const int c0 = b * CPU_CHANNEL_BLOCK;
        const int width = C - c0 < CPU_CHANNEL_BLOCK ? C - c0 : CPU_CHANNEL_BLOCK;
        double sa[CPU_CHANNEL_BLOCK] = {0}, sm[CPU_CHANNEL_BLOCK] = {0}, part[6] = {0};
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C + c0;
            for (int k = 0; k < width; k++) {
                const size_t i = row + k;
                const float a = attn_scale[c0 + k] * ao[i], m = mlp_scale[c0 + k] * mo[i];
                const double g0 = d0[i], g1 = d1[i];
                sa[k] += (double)(post[0] * d0[i] + post[1] * d1[i]) * ao[i];
                sm[k] += (double)(post[2] * d0[i] + post[3] * d1[i]) * mo[i];
                part[0] += g0 * l0[i];
                part[1] += g1 * l1[i];
                part[2] += g0 * a;
                part[3] += g1 * a;
                part[4] += g0 * m;
                part[5] += g1 * m;
            }
        }
        for (int k = 0; k < width; k++) {
            dattn_scale[c0 + k] += (float)sa[k];
            dmlp_scale[c0 + k] += (float)sm[k];
        }
#pragma omp ordered
        for (int j = 0; j < 6; j++) lam[j] += part[j];
    }
    if (track_mag) add_magnitudes(dresid, dpost, d0, d1, l0, l1, ao, mo, attn_scale, mlp_scale, N, C);
    dresid[0] += (float)lam[0];
    dresid[1] += (float)lam[1];
    for (int j = 0; j < 4; j++) dpost[j] += (float)lam[2 + j];
}
