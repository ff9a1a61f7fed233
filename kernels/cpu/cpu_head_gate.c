/* cpu_head_gate.c — the sparse attention head-output gate (the 1.0611 record's SparseGate),
 * forward and backward: each head's attention output (after XSA) times a sigmoid of a small
 * linear map of the attention's input n (the normed, ln-scaled tensor that feeds c_q/c_k/c_v),
 *   g[t,h] = sigmoid(scale * sum_{k<W} w[h,k] n[t,k]),   out[t,h,:] = g[t,h] y[t,h,:].
 * The backward is split in two because its input gradient dn joins d a_in, which the c_q/c_k/c_v
 * backward makes only after the attention backward that needs dy: cpu_head_gate_backward keeps
 * dz = d(logit) per token and head, cpu_head_gate_input_backward adds dz w into dn later. */
#include <math.h>
#include <stddef.h>

#include "cpu_attention.h"

void cpu_head_gate_forward(float *out, float *g, const float *y, const float *n, const float *w, int N, int n_heads,
                           int head_dim, int window, float scale) {
    const size_t D = (size_t)n_heads * head_dim;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *nn = n + (size_t)t * D;
        for (int h = 0; h < n_heads; h++) {
            float z = 0;
            for (int k = 0; k < window; k++) z += w[(size_t)h * window + k] * nn[k];
            const float gate = 1.0f / (1.0f + expf(-scale * z));
            g[(size_t)t * n_heads + h] = gate;
            const size_t at = (size_t)t * D + (size_t)h * head_dim;
            for (int d = 0; d < head_dim; d++) out[at + d] = gate * y[at + d];
        }
    }
}

/* dy = g dout (written; dy may equal dout), dz[t,h] = scale g (1-g) sum_d y dout (written), and
 * dw[h,k] += sum_t dz[t,h] n[t,k] (double, token order: the same bits for any thread count). */
void cpu_head_gate_backward(float *dy, float *dz, float *dw, const float *dout, const float *y, const float *g,
                            const float *n, int N, int n_heads, int head_dim, int window, float scale) {
    const size_t D = (size_t)n_heads * head_dim;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        for (int h = 0; h < n_heads; h++) {
            const size_t at = (size_t)t * D + (size_t)h * head_dim;
            const float gate = g[(size_t)t * n_heads + h];
            const float dg = cpu_attn_dot(y + at, dout + at, head_dim);
            dz[(size_t)t * n_heads + h] = scale * gate * (1.0f - gate) * dg;
            for (int d = 0; d < head_dim; d++) dy[at + d] = gate * dout[at + d];
        }
    }
    /* one (head, channel) pair per iteration: the pairs are few (heads * window), each a sum
     * over every token */
#pragma omp parallel for schedule(static)
    for (int hk = 0; hk < n_heads * window; hk++) {
        const int h = hk / window, k = hk % window;
        double sum = 0;
        for (int t = 0; t < N; t++) sum += (double)dz[(size_t)t * n_heads + h] * n[(size_t)t * D + k];
        dw[hk] += (float)sum;
    }
}

/* dn[t,k] += sum_h dz[t,h] w[h,k] for k < window (dn rows of n_heads*head_dim). */
void cpu_head_gate_input_backward(float *dn, const float *dz, const float *w, int N, int n_heads, int head_dim,
                                  int window) {
    const size_t D = (size_t)n_heads * head_dim;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        for (int k = 0; k < window; k++) {
            float s = 0;
            for (int h = 0; h < n_heads; h++) s += dz[(size_t)t * n_heads + h] * w[(size_t)h * window + k];
            dn[(size_t)t * D + k] += s;
        }
    }
}
