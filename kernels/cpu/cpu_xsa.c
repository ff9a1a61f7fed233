/* cpu_xsa.c — exclusive self attention (XSA, the record's _xsa_efficient), forward and
 * backward: each query head's attention output loses its component along its own position's
 * value vector (of the head's KV group),
 *   out = y - (y . vn) vn,   vn = v / max(||v||, 1e-12)   (F.normalize). */
#include <math.h>
#include <stddef.h>

#include "cpu_attention.h"
#include "cpu_ops.h"

#define XSA_NORM_EPS 1e-12f

void cpu_xsa_forward(float *out, const float *y, const float *v, int N, int n_heads, int n_kv_heads, int head_dim) {
    const int group = n_heads / n_kv_heads;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < n_heads; h++) {
            const float *vv = v + ((size_t)n * n_kv_heads + h / group) * head_dim;
            const float *yy = y + ((size_t)n * n_heads + h) * head_dim;
            float *o = out + ((size_t)n * n_heads + h) * head_dim;
            const float norm = fmaxf(sqrtf(cpu_attn_dot(vv, vv, head_dim)), XSA_NORM_EPS);
            float vn[CPU_QK_NORM_MAX_HEAD_DIM];
            for (int d = 0; d < head_dim; d++) vn[d] = vv[d] / norm;
            const float c = cpu_attn_dot(yy, vn, head_dim);
            for (int d = 0; d < head_dim; d++) o[d] = yy[d] - c * vn[d];
        }
    }
}

/* With P = I - vn vn^T:  dy += P dout;  dvn = -sum over the group's heads of ((y.vn) dout +
 * (dout.vn) y);  dv += (dvn - (dvn.vn) vn) / ||v|| (dvn / eps where the norm was clamped). */
void cpu_xsa_backward(float *dy, float *dv, const float *dout, const float *y, const float *v, int N, int n_heads,
                      int n_kv_heads, int head_dim) {
    const int group = n_heads / n_kv_heads;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        for (int j = 0; j < n_kv_heads; j++) {
            const float *vv = v + ((size_t)n * n_kv_heads + j) * head_dim;
            float *dvv = dv + ((size_t)n * n_kv_heads + j) * head_dim;
            const float raw = sqrtf(cpu_attn_dot(vv, vv, head_dim));
            const float norm = fmaxf(raw, XSA_NORM_EPS);
            float vn[CPU_QK_NORM_MAX_HEAD_DIM], dvn[CPU_QK_NORM_MAX_HEAD_DIM] = {0};
            for (int d = 0; d < head_dim; d++) vn[d] = vv[d] / norm;
            for (int h = j * group; h < (j + 1) * group; h++) {
                const size_t at = ((size_t)n * n_heads + h) * head_dim;
                const float *yy = y + at, *go = dout + at;
                float *dyy = dy + at;
                const float c = cpu_attn_dot(yy, vn, head_dim), e = cpu_attn_dot(go, vn, head_dim);
                for (int d = 0; d < head_dim; d++) {
                    dyy[d] += go[d] - e * vn[d];
                    dvn[d] -= c * go[d] + e * yy[d];
                }
            }
            if (raw > XSA_NORM_EPS) {
                const float f = cpu_attn_dot(dvn, vn, head_dim);
                for (int d = 0; d < head_dim; d++) dvv[d] += (dvn[d] - f * vn[d]) / norm;
            } else {
                for (int d = 0; d < head_dim; d++) dvv[d] += dvn[d] / norm;
            }
        }
    }
}
