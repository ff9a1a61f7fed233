/* cpu_smear_bos.c — the 1.0611 record's SmearGate, forward and backward: on the raw embedding
 * e (before its RMSNorm) each position t >= 1 of a sequence adds a gated copy of the previous
 * position's (unsmeared) embedding, except where its own token is the data's BOS:
 *   s_t = sigmoid(sum_{k<W} w[k] e_t[k]),  g_t = lambda s_t,  m_t = [id_t != bos],
 *   out_t = e_t + m_t g_t e_{t-1}  (t >= 1),  out_0 = e_0,
 * over B sequences of T positions (docs/model.md, "SmearGate with the BOS mask"). Unlike
 * cpu_smear.c (the 1.1248 record's per-channel gate after the norm) the gate is one scalar per
 * token, read from the token's own first W channels. */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

/* Whether position n (row-major over B rows of T) takes the previous position's embedding. */
static inline int smears(long n, int T, const int32_t *ids, int64_t bos_id) {
    return n % T != 0 && (int64_t)ids[n] != bos_id;
}

/* sigmoid of the gate's logit, the logit summed in double (a per-row reduction, cpu_ops.h) */
static inline float gate_sigmoid(const float *e, const float *w, int window) {
    double z = 0;
    for (int k = 0; k < window; k++) z += (double)w[k] * (double)e[k];
    return 1.0f / (1.0f + expf(-(float)z));
}

/* p = e_{t-1} . dout_t in double (the gate's share of the gradient) */
static inline double prev_dot(const float *prev, const float *dout, int C) {
    double p = 0;
    for (int c = 0; c < C; c++) p += (double)prev[c] * (double)dout[c];
    return p;
}

void cpu_smear_bos_forward(float *out, const float *e, const int32_t *ids, const float *w, const float *lambda,
                           int B, int T, int C, int window, int64_t bos_id) {
    const long N = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        if (!smears(n, T, ids, bos_id)) {
            for (int c = 0; c < C; c++) out[row + c] = e[row + c];
            continue;
        }
        const float g = lambda[0] * gate_sigmoid(e + row, w, window);
        for (int c = 0; c < C; c++) out[row + c] = e[row + c] + g * e[row - C + c];
    }
}

void cpu_smear_bos_backward(float *de, float *dw, float *dlambda, const float *dout, const float *e,
                            const int32_t *ids, const float *w, const float *lambda, int B, int T, int C, int window,
                            int64_t bos_id) {
    const long N = (long)B * T;
    const float lam = lambda[0];
    /* de_t += dout_t + m_{t+1} g_{t+1} dout_{t+1} (t feeds t+1 as its previous) + the gate path
     * m_t lambda s_t (1 - s_t) p_t w (first W channels), p_t = e_{t-1} . dout_t */
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        const size_t row = (size_t)n * C;
        const int next = n % T != T - 1 && smears(n + 1, T, ids, bos_id);
        const float g_next = next ? lam * gate_sigmoid(e + row + C, w, window) : 0.0f;
        for (int c = 0; c < C; c++) de[row + c] += dout[row + c] + (next ? g_next * dout[row + C + c] : 0.0f);
        if (smears(n, T, ids, bos_id)) {
            const float s = gate_sigmoid(e + row, w, window);
            const float dz = (float)((double)(lam * s * (1.0f - s)) * prev_dot(e + row - C, dout + row, C));
            for (int k = 0; k < window; k++) de[row + k] += dz * w[k];
        }
    }
    /* dlambda = sum_t m_t s_t p_t, dw[k] = sum_t m_t lambda s_t (1 - s_t) p_t e_t[k]: tokens in
     * order, double accumulators (the same bits for any thread count), the window in chunks so
     * the accumulators stay on the stack (one pass over the tokens per chunk; one at W = 12) */
    enum { CHUNK = 64 };
    for (int k0 = 0; k0 < window; k0 += CHUNK) {
        const int width = window - k0 < CHUNK ? window - k0 : CHUNK;
        double sum_l = 0, sum_w[CHUNK] = {0};
        for (long n = 0; n < N; n++) {
            if (!smears(n, T, ids, bos_id)) continue;
            const size_t row = (size_t)n * C;
            const float s = gate_sigmoid(e + row, w, window);
            const double p = prev_dot(e + row - C, dout + row, C);
            sum_l += (double)s * p;
            const double dz = (double)(lam * s * (1.0f - s)) * p;
            for (int k = 0; k < width; k++) sum_w[k] += dz * (double)e[row + k0 + k];
        }
        if (k0 == 0) dlambda[0] += (float)sum_l;
        for (int k = 0; k < width; k++) dw[k0 + k] += (float)sum_w[k];
    }
}
