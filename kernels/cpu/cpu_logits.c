/* cpu_logits.c — output logits (x @ W^T), tanh softcap and cross-entropy, fused and processed
 * in chunks of tokens so the [N,V] logits never exist at once. One function trains (losses and
 * gradients in one pass over each chunk), one validates (losses only); their low-rank variants
 * add test-time training's head adapter (s * h B^T) to the logits. All four share one body, and
 * without the adapter that body runs exactly the plain functions' operations. */
#include <math.h>
#include <stddef.h>

#include "common.h"
#include "cpu_ops.h"
#include "cpu_vecmath.h"

static int check_arguments(const int32_t *targets, int N, int V, float softcap, int chunk,
                           const CpuLogitsLowRank *lowrank) {
    if (!(softcap > 0.0f)) return ct_fail("logits: softcap must be positive, got %g", (double)softcap);
    if (lowrank && (lowrank->r < 1 || !lowrank->h || !lowrank->B))
        return ct_fail("logits: the low-rank head term needs h, B and a rank of at least 1, got rank %d%s%s",
                       lowrank->r, lowrank->h ? "" : ", h NULL", lowrank->B ? "" : ", B NULL");
    if (chunk < 1) return ct_fail("logits: chunk must be at least 1 token, got %d", chunk);
    for (int n = 0; n < N; n++)
        if (targets[n] < 0 || targets[n] >= V)
            return ct_fail("logits: target id %d at position %d is outside the vocabulary [0, %d)",
                           (int)targets[n], n, V);
    return 0;
}

/* Softcapped logit from the stored tanh value; one expression so both passes agree bit for bit. */
static inline float capped(float softcap, float tanh_value) { return softcap * tanh_value; }

/* Lanes of the per-row reductions: the max and the sum of exponentials are taken in ROW_LANES
 * interleaved partial results (element j goes to lane j % ROW_LANES), combined in lane order at
 * the end. The order is fixed by the code, not by threads, and lets GCC vectorize the loops. */
enum { ROW_LANES = 8 };

/* One row: raw logits z[V] in, cross-entropy against `target` out. The row is overwritten with
 * tanh(z/softcap); with grad_scale != 0 it is then overwritten again with
 * d(grad_scale * loss)/dz = grad_scale * (softmax(s) - onehot(target)) * (1 - tanh^2). */
static double softcap_ce_row(float *row, int V, int target, float softcap, int want_grad, float grad_scale) {
    for (int j = 0; j < V; j++) row[j] = vec_tanhf(row[j] / softcap);
    /* max_j softcap * t_j = softcap * max_j t_j: multiplying by a positive constant is monotone,
     * rounding included. A NaN never wins a comparison, but it still poisons the sum below. */
    const int whole = V - V % ROW_LANES;
    float lane_max[ROW_LANES];
    for (int k = 0; k < ROW_LANES; k++) lane_max[k] = -INFINITY;
    for (int j = 0; j < whole; j += ROW_LANES)
        for (int k = 0; k < ROW_LANES; k++) lane_max[k] = row[j + k] > lane_max[k] ? row[j + k] : lane_max[k];
    float max_t = -INFINITY;
    for (int k = 0; k < ROW_LANES; k++) max_t = lane_max[k] > max_t ? lane_max[k] : max_t;
    for (int j = whole; j < V; j++) max_t = row[j] > max_t ? row[j] : max_t;
    const float max_s = capped(softcap, max_t);
    double lane_sum[ROW_LANES] = {0};
    for (int j = 0; j < whole; j += ROW_LANES)
        for (int k = 0; k < ROW_LANES; k++) lane_sum[k] += vec_expf(capped(softcap, row[j + k]) - max_s);
    double sum_exp = 0.0;
    for (int k = 0; k < ROW_LANES; k++) sum_exp += lane_sum[k];
    for (int j = whole; j < V; j++) sum_exp += vec_expf(capped(softcap, row[j]) - max_s);
    const double loss = (double)max_s + log(sum_exp) - (double)capped(softcap, row[target]);
    if (want_grad) {
        /* Recompute the exponentials rather than keep a second row: they are cheap next to the
         * C*V multiply-adds per row of the three matrix products. */
        const float inv_sum = (float)(1.0 / sum_exp);
        const float t_target = row[target];
        for (int j = 0; j < V; j++) {
            const float t = row[j];
            const float prob = vec_expf(capped(softcap, t) - max_s) * inv_sum;
            row[j] = grad_scale * prob * (1.0f - t * t);
        }
        const float prob_target = vec_expf(capped(softcap, t_target) - max_s) * inv_sum;
        row[target] = grad_scale * (prob_target - 1.0f) * (1.0f - t_target * t_target);
    }
    return loss;
}

/* Shared body. losses may be NULL only without gradients (each row's loss is then parked in
 * the first element of its own scratch row, which is no longer needed). lowrank NULL: the plain
 * op; otherwise its term joins the logits before the softcap and its gradients follow dx's. */
static int logits_ce(float *dx, float *dW, const CpuLogitsLowRank *lowrank, float *losses, double *loss_sum,
                     const float *x, const float *W, const int32_t *targets, int N, int C, int V, float softcap,
                     int want_grad, float grad_scale, float *scratch, int chunk) {
    if (check_arguments(targets, N, V, softcap, chunk, lowrank)) return -1;
    double sum = 0.0;
    for (int n0 = 0; n0 < N; n0 += chunk) {
        const int rows = N - n0 < chunk ? N - n0 : chunk;
        const float *x_chunk = x + (size_t)n0 * C;
        cpu_sgemm(0, 1, rows, V, C, 1.0f, x_chunk, C, W, C, 0.0f, scratch, V); /* z = x W^T */
        const float *h_chunk = NULL;
        if (lowrank) {
            /* z += s * h B^T. With B all zero the product is +-0 and adding it leaves every z
             * as it was (a -0 may become +0, which tanh and the loss do not tell apart). */
            const int r = lowrank->r;
            h_chunk = lowrank->h + (size_t)n0 * r;
            cpu_sgemm(0, 1, rows, V, r, lowrank->s, h_chunk, r, lowrank->B, r, 1.0f, scratch, V);
        }
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < rows; i++) {
            float *row = scratch + (size_t)i * V;
            const float loss = (float)softcap_ce_row(row, V, targets[n0 + i], softcap, want_grad, grad_scale);
            if (losses) losses[n0 + i] = loss;
            else row[0] = loss;
        }
        /* The mean is summed in token order, in one thread. */
        for (int i = 0; i < rows; i++) sum += losses ? losses[n0 + i] : scratch[(size_t)i * V];
        if (want_grad) {
            /* scratch now holds dz [rows,V]: dx += dz @ W, dW += dz^T @ x. */
            cpu_sgemm(0, 0, rows, C, V, 1.0f, scratch, V, W, C, 1.0f, dx + (size_t)n0 * C, C);
            if (dW) cpu_sgemm(1, 0, V, C, rows, 1.0f, scratch, V, x_chunk, C, 1.0f, dW, C);
            if (lowrank) {
                /* dh += s * dz @ B, dB += s * dz^T @ h */
                const int r = lowrank->r;
                if (lowrank->dh)
                    cpu_sgemm(0, 0, rows, r, V, lowrank->s, scratch, V, lowrank->B, r, 1.0f,
                              lowrank->dh + (size_t)n0 * r, r);
                if (lowrank->dB)
                    cpu_sgemm(1, 0, V, r, rows, lowrank->s, scratch, V, h_chunk, r, 1.0f, lowrank->dB, r);
            }
        }
    }
    *loss_sum = sum;
    return 0;
}

int cpu_logits_ce_lowrank_forward_backward(float *dx, float *dW, const CpuLogitsLowRank *lowrank, float *losses,
                                           double *mean_loss, const float *x, const float *W, const int32_t *targets,
                                           int N, int C, int V, float softcap, float loss_weight, float *scratch,
                                           int chunk) {
    if (!losses) return ct_fail("logits: the per-token loss buffer is required when training");
    if (N <= 0) {
        *mean_loss = 0.0;
        return 0;
    }
    double loss_sum = 0.0;
    /* d(loss_weight * mean)/d loss[n] = loss_weight / N for every token. */
    const float grad_scale = (float)((double)loss_weight / N);
    if (logits_ce(dx, dW, lowrank, losses, &loss_sum, x, W, targets, N, C, V, softcap, 1, grad_scale, scratch,
                  chunk))
        return -1;
    *mean_loss = loss_sum / N;
    return 0;
}

int cpu_logits_ce_lowrank_forward(float *losses, double *loss_sum, const float *x, const float *W,
                                  const CpuLogitsLowRank *lowrank, const int32_t *targets, int N, int C, int V,
                                  float softcap, float *scratch, int chunk) {
    return logits_ce(NULL, NULL, lowrank, losses, loss_sum, x, W, targets, N, C, V, softcap, 0, 0.0f, scratch,
                     chunk);
}

int cpu_logits_ce_forward_backward(float *dx, float *dW, float *losses, double *mean_loss, const float *x,
                               const float *W, const int32_t *targets, int N, int C, int V, float softcap,
                               float loss_weight, float *scratch, int chunk) {
    return cpu_logits_ce_lowrank_forward_backward(dx, dW, NULL, losses, mean_loss, x, W, targets, N, C, V, softcap,
                                                  loss_weight, scratch, chunk);
}

int cpu_logits_ce_forward(float *losses, double *loss_sum, const float *x, const float *W, const int32_t *targets,
                      int N, int C, int V, float softcap, float *scratch, int chunk) {
    return cpu_logits_ce_lowrank_forward(losses, loss_sum, x, W, NULL, targets, N, C, V, softcap, scratch, chunk);
}
