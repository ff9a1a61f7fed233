/* golf_gptq.c — GPTQ, round to nearest, LQER and the gates' int8 rule (golf_gptq.h). float32
 * arithmetic in the order the record's PyTorch does it (each product rounded before its
 * subtraction: the build has -ffp-contract=off), double only for the rows' standard deviation
 * (as torch's CPU std accumulates); LAPACK for the factorizations (cpu_lapack.h), cpu_sgemm for
 * the block update, so the result bits do not depend on the thread count. */
#include "golf_gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_lapack.h"
#include "cpu_ops.h"
#include "golf_quant.h"

static float clampf(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* q = clamp(round_half_even(w / s), -range, range); 0 where s is 0 (see golf_gptq.h) */
static int8_t quant_level(float w, float s, int range) {
    if (s == 0) return 0;
    return (int8_t)clampf(nearbyintf(w / s), (float)-range, (float)range);
}

void golf_gptq_row_scales(uint16_t *scale, const float *w, int rows, int cols, float clip_sigmas, int clip_range) {
    for (int r = 0; r < rows; r++) {
        const float *row = w + (size_t)r * cols;
        double mean = 0, ss = 0;
        for (int c = 0; c < cols; c++) mean += row[c];
        mean /= cols;
        for (int c = 0; c < cols; c++) ss += (row[c] - mean) * (row[c] - mean);
        const float std = (float)sqrt(ss / (cols > 1 ? cols - 1 : 1));
        float s = clip_sigmas * std / (float)clip_range;
        if (!(s >= 1e-10f)) s = 1e-10f; /* clamp_min (a NaN std also lands here) */
        scale[r] = golf_half_from_float(s);
    }
}

void golf_round_nearest(int8_t *q, const float *w, const uint16_t *scale, int rows, int cols, int clip_range) {
    for (int r = 0; r < rows; r++) {
        const float s = golf_half_to_float(scale[r]);
        for (int c = 0; c < cols; c++) q[(size_t)r * cols + c] = quant_level(w[(size_t)r * cols + c], s, clip_range);
    }
}

void golf_dequantize_rows(float *w, const int8_t *q, const uint16_t *scale, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const float s = golf_half_to_float(scale[r]);
        for (int c = 0; c < cols; c++) w[(size_t)r * cols + c] = (float)q[(size_t)r * cols + c] * s;
    }
}

/* Steps 1-3 of golf_gptq.h: h (cols x cols) damped and permuted into u, which becomes the upper
 * Cholesky factor of its inverse; perm[j] = the original column at position j; dead[c] = 1
 * where column c never fired. */
static int gptq_factor(float *u, int *perm, unsigned char *dead, const float *h, int cols, float damp,
                       const char *name) {
    float *diag = ct_malloc((size_t)cols * sizeof *diag, "GPTQ Hessian diagonal");
    double sum = 0;
    for (int c = 0; c < cols; c++) {
        diag[c] = h[(size_t)c * cols + c];
        dead[c] = diag[c] == 0;
        if (dead[c]) diag[c] = 1;
        sum += diag[c];
    }
    const float add = damp * (float)(sum / cols);
    for (int c = 0; c < cols; c++) diag[c] += add;
    if (!isfinite(add)) {
        free(diag);
        return ct_fail("%s: the Hessian's diagonal is not finite", name);
    }
    /* largest diagonal first, ties by index (qsort is not stable): a bottom-up merge sort */
    for (int c = 0; c < cols; c++) perm[c] = c;
    for (int width = 1; width < cols; width *= 2) {
        int *tmp = ct_malloc((size_t)cols * sizeof *tmp, "GPTQ column order");
        for (int lo = 0; lo < cols; lo += 2 * width) {
            int mid = lo + width < cols ? lo + width : cols, hi = lo + 2 * width < cols ? lo + 2 * width : cols;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = diag[perm[j]] > diag[perm[i]] ? perm[j++] : perm[i++];
            while (i < mid) tmp[k++] = perm[i++];
            while (j < hi) tmp[k++] = perm[j++];
        }
        memcpy(perm, tmp, (size_t)cols * sizeof *perm);
        free(tmp);
    }
    for (int i = 0; i < cols; i++)
        for (int j = 0; j < cols; j++) {
            const int a = perm[i], b = perm[j];
            float v = a == b ? diag[a] : h[(size_t)a * cols + b];
            if (!isfinite(v)) {
                free(diag);
                return ct_fail("%s: the Hessian's element [%d][%d] is not finite", name, a, b);
            }
            u[(size_t)i * cols + j] = v;
        }
    free(diag);
    if (cpu_spd_inverse(u, cols) != 0 || cpu_cholesky_upper(u, cols) != 0)
        return ct_fail_prefix("%s: the damped Hessian (%d x %d)", name, cols, cols);
    return 0;
}

int golf_gptq_quantize(int8_t *q, uint16_t *scale, const float *w, const float *h, int rows, int cols,
                       const GolfGptqSettings *gs, const char *name) {
    float *u = ct_malloc((size_t)cols * cols * sizeof *u, "GPTQ inverse Hessian factor");
    int *perm = ct_malloc((size_t)cols * sizeof *perm, "GPTQ column order");
    unsigned char *dead = ct_malloc((size_t)cols, "GPTQ dead columns");
    if (gptq_factor(u, perm, dead, h, cols, gs->damp, name) != 0) {
        free(u), free(perm), free(dead);
        return -1;
    }
    golf_gptq_row_scales(scale, w, rows, cols, gs->clip_sigmas, gs->clip_range);
    float *sf = ct_malloc((size_t)rows * sizeof *sf, "GPTQ scales");
    for (int r = 0; r < rows; r++) sf[r] = golf_half_to_float(scale[r]);
    /* the working weights transposed (a column of W is a contiguous row here), in GPTQ's order */
    float *wt = ct_malloc((size_t)cols * rows * sizeof *wt, "GPTQ working weights");
    for (int j = 0; j < cols; j++) {
        float *col = wt + (size_t)j * rows;
        for (int r = 0; r < rows; r++) col[r] = dead[perm[j]] ? 0.0f : w[(size_t)r * cols + perm[j]];
    }
    const int bs = gs->block_size > 0 ? gs->block_size : 128;
    float *err = ct_malloc((size_t)bs * rows * sizeof *err, "GPTQ block errors"); /* [bs][rows] */
    for (int i1 = 0; i1 < cols; i1 += bs) {
        const int nb = cols - i1 < bs ? cols - i1 : bs, i2 = i1 + nb;
        for (int j = 0; j < nb; j++) {
            const int c = i1 + j;
            const float d = u[(size_t)c * cols + c];
            float *wc = wt + (size_t)c * rows, *e = err + (size_t)j * rows;
            for (int r = 0; r < rows; r++) {
                const int8_t level = quant_level(wc[r], sf[r], gs->clip_range);
                q[(size_t)r * cols + perm[c]] = level;
                e[r] = (wc[r] - (float)level * sf[r]) / d;
            }
            for (int k = c + 1; k < i2; k++) {
                const float hk = u[(size_t)c * cols + k];
                float *wk = wt + (size_t)k * rows;
                for (int r = 0; r < rows; r++) wk[r] -= e[r] * hk;
            }
        }
        /* later columns (transposed) -= U[i1:i2, i2:]^T @ Err */
        if (i2 < cols)
            cpu_sgemm(1, 0, cols - i2, rows, nb, -1.0f, u + (size_t)i1 * cols + i2, cols, err, rows, 1.0f,
                      wt + (size_t)i2 * rows, rows);
    }
    free(err), free(wt), free(sf), free(u), free(perm), free(dead);
    return 0;
}

int golf_lqer_factors(float *a, float *b, const float *e, int rows, int cols, int rank) {
    const int k = rows < cols ? rows : cols, r = rank < k ? rank : k;
    float *work = ct_malloc((size_t)rows * cols * sizeof *work, "LQER error copy");
    float *s = ct_malloc((size_t)k * sizeof *s, "LQER singular values");
    float *uu = ct_malloc((size_t)rows * k * sizeof *uu, "LQER U");
    float *vt = ct_malloc((size_t)k * cols * sizeof *vt, "LQER V^T");
    memcpy(work, e, (size_t)rows * cols * sizeof *work);
    int rc = cpu_svd_thin(work, rows, cols, s, uu, vt);
    if (rc == 0) {
        for (int j = 0; j < r; j++) {
            const float *v = vt + (size_t)j * cols;
            int at = 0;
            for (int c = 1; c < cols; c++)
                if (fabsf(v[c]) > fabsf(v[at])) at = c;
            const float sign = v[at] < 0 ? -1.0f : 1.0f;
            for (int c = 0; c < cols; c++) b[(size_t)j * cols + c] = sign * v[c];
            for (int i = 0; i < rows; i++) a[(size_t)i * r + j] = (sign * uu[(size_t)i * k + j]) * s[j];
        }
    }
    free(work), free(s), free(uu), free(vt);
    return rc == 0 ? r : ct_fail_prefix("LQER of a %d x %d error", rows, cols);
}

static float amax(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* One scale for n values: float16(max(amax, 1e-10) / divisor), and their levels in [lo, hi]. */
static uint16_t pack_levels(int8_t *q, const float *x, size_t n, float divisor, int lo, int hi) {
    float m = amax(x, n);
    if (!(m >= 1e-10f)) m = 1e-10f;
    const uint16_t bits = golf_half_from_float(m / divisor);
    const float s = golf_half_to_float(bits);
    for (size_t i = 0; i < n; i++) q[i] = s == 0 ? 0 : (int8_t)clampf(nearbyintf(x[i] / s), (float)lo, (float)hi);
    return bits;
}

void golf_lqer_pack_asym(int8_t *qa, uint16_t *scale_a, int8_t *qb, uint16_t *scale_b, const float *a, int n_a,
                         const float *b, int n_b, int group) {
    *scale_a = pack_levels(qa, a, (size_t)n_a, 1.5f, -2, 1);
    for (int g = 0; g * group < n_b; g++)
        scale_b[g] = pack_levels(qb + (size_t)g * group, b + (size_t)g * group, (size_t)group, 7.5f, -8, 7);
}

void golf_lqer_pack_sym(int8_t *qa, uint16_t *scale_a, int8_t *qb, uint16_t *scale_b, const float *a,
                        const float *b, int rows, int r, int cols, int bits) {
    const int range = (1 << (bits - 1)) - 1;
    for (int i = 0; i < rows; i++)
        scale_a[i] = pack_levels(qa + (size_t)i * r, a + (size_t)i * r, (size_t)r, (float)range, -range, range);
    for (int j = 0; j < r; j++)
        scale_b[j] = pack_levels(qb + (size_t)j * cols, b + (size_t)j * cols, (size_t)cols, (float)range, -range, range);
}

void golf_int8_rows_absmax(int8_t *q, uint16_t *scale, const float *w, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        scale[r] = pack_levels(q + (size_t)r * cols, w + (size_t)r * cols, (size_t)cols, 127.0f, -127, 127);
}
