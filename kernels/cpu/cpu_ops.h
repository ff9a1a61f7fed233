/* cpu_ops.h — the CPU math ops of the model (fp32, OpenMP + OpenBLAS), llm.c style. The CPU
 * backend is the exact reference of ctrain, so these ops are written for determinism first.
 *
 * Conventions shared by every op here (kernels/README.md has the table of ops):
 *  - Activations are row-major [N, C] with N = tokens (B*T) and C the feature width. Shapes are
 *    passed explicitly as ints; offsets are computed in size_t.
 *  - No op allocates. Scratch memory, where an op needs any, is passed in by the caller.
 *  - Forward functions WRITE (=) their outputs. Backward functions ACCUMULATE (+=) into every
 *    gradient buffer they produce, input gradients and parameter gradients alike; the caller
 *    zeroes them. Residual branches, tied weights and micro-batch accumulation then just add.
 *  - Unless an op says otherwise, no output buffer may alias an input or another output.
 *  - Bitwise determinism independent of the OpenMP thread count: threads only ever split
 *    independent outputs; every reduction (over channels within a row, or over tokens for a
 *    parameter gradient) runs in one fixed order in one thread. Reductions over tokens are
 *    parallelised over blocks of CPU_CHANNEL_BLOCK channels, each block visiting tokens in order.
 *  - Per-row reductions (rmsnorm mean square, log-sum-exp) and parameter-gradient sums over
 *    tokens accumulate in double: it costs nothing next to the matrix products and makes the
 *    reference tighter. Element-wise math is fp32.
 *  - Matrix products go through cpu_sgemm (below), never cblas_sgemm directly: OpenBLAS's own
 *    threading changes result bits with the thread count (measured on 0.3.21: the split of the
 *    output between threads moves the kernel's edge tiles and its K blocking differs between its
 *    one-thread and threaded drivers), so cpu_sgemm fixes the split itself.
 *  - Functions that can fail on data (out-of-range token ids) return 0 / -1 with ct_fail()
 *    (base/common.h); the others return void and trust their shape arguments. */
#ifndef CT_CPU_OPS_H
#define CT_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "bigram_hash.h" /* cpu_bigram_hash, shared with the CUDA backend */

/* Width of the channel blocks that parameter-gradient reductions over tokens are split into:
 * one 64-byte cache line of floats, so two threads never write the same line. */
#define CPU_CHANNEL_BLOCK 16

/* ---- matrix product ---------------------------------------------------------------------- */

/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C, with op(A) [M,K] and op(B) [K,N]
 * (trans_a: A is stored [K,M]; trans_b: B is stored [N,K]). beta 0 overwrites C (what it held,
 * even NaN, is ignored), beta 1 accumulates. The output is cut into a grid of tiles chosen from
 * M and N alone (cpu_gemm.c says how) that OpenMP threads share; each tile is one
 * single-threaded cblas_sgemm call (OpenBLAS runs single-threaded inside a parallel region). The
 * bits therefore depend on the shapes only, never on the thread count. Call it from serial code: inside a caller's parallel region it is still
 * correct and deterministic but its tiles run on the calling thread only. */
void cpu_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
               const float *B, int ldb, float beta, float *C, int ldc);
/* Call once before the first product: with a pthreads build of OpenBLAS (a cluster module,
 * or Debian's default alternative) it makes OpenBLAS single-threaded, since every product
 * already runs inside our OpenMP loops. Nothing to do for the OpenMP build. */
void cpu_blas_prepare(void);
/* The same for a product the caller knows to be symmetric (M == N, e.g. X X^T, or A A with A
 * symmetric): C[M,M] = alpha * A[M,K] @ op(B) + beta * C, op(B) [K,M]. Only the tiles on and
 * below the diagonal are computed; the upper triangle is a copy, so C is exactly symmetric.
 * With beta != 0, C must be symmetric on entry too (its upper triangle is not read). */
void cpu_sgemm_symmetric(int trans_b, int M, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc);

/* ---- whole-buffer passes (cpu_buffer.c), threaded, element-wise ------------------------- */

/* x[0..n) = 0 */
void cpu_zero(float *x, size_t n);
/* dst[0..n) = src[0..n); the buffers may not overlap */
void cpu_copy(float *dst, const float *src, size_t n);
/* dst[i] += src[i] for i in [0, n) */
void cpu_add_into(float *dst, const float *src, size_t n);
/* x[i] *= s for i in [0, n) (ln_scale's factor on a norm output, or on its gradient) */
void cpu_scale(float *x, float s, size_t n);

/* ---- token embedding: out[n,:] = wte[ids[n],:] ---------------------------------------------- */

/* ids [N] int32, wte [V,C], out [N,C]. Returns -1 (ct_error names the position) if an id is
 * outside [0, V); nothing is written then. */
int cpu_embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int V, int C);
/* dwte [V,C] += scatter of dout [N,C] by ids (ids already checked by cpu_embedding_forward). Each
 * element of dwte receives its tokens' contributions in token order. */
void cpu_embedding_backward(float *dwte, const float *dout, const int32_t *ids, int N, int C);

/* ---- RMSNorm without weight: y = x / sqrt(mean(x^2) + eps), per row of C ----------------- */

/* x, out [N,C]; rstd [N] receives 1/sqrt(mean(x^2)+eps) per row for the backward (NULL: not
 * saved). out may equal x. Generic over rows: per-head q/k norm is N*heads rows of head_dim.
 * train_gpt.py uses F.rms_norm(eps=None), which for fp32 is eps = FLT_EPSILON. */
void cpu_rmsnorm_forward(float *out, float *rstd, const float *x, int N, int C, float eps);
/* dx [N,C] += d/dx given dout [N,C], the forward INPUT x and the saved rstd:
 * dx = rstd * (dout - y * mean(dout * y)) with y = x * rstd. */
void cpu_rmsnorm_backward(float *dx, const float *dout, const float *x, const float *rstd, int N, int C);

/* ---- linear without bias, torch layout W [out_features, in_features] --------------------- */

/* out [N,out_features] = x [N,in_features] @ W^T. */
void cpu_linear_forward(float *out, const float *x, const float *W, int N, int in_features, int out_features);
/* dx [N,in] += dout @ W;  dW [out,in] += dout^T @ x (dW NULL: not computed, test-time training's
 * adapter-only backward). Needs the forward input x. */
void cpu_linear_backward(float *dx, float *dW, const float *dout, const float *x, const float *W, int N,
                     int in_features, int out_features);

/* ---- low-rank adapters (cpu_lora.c): test-time training's per-document LoRA --------------- */
/* A LoRA beside a linear layer of in -> out features: out += s * (x A^T) B^T, A [r,in], B [out,r]
 * (docs/model.md, "Test-time training"). One call is one document's rows: every document has its
 * own A and B. */

/* h [N,r] = x [N,in] A^T (written); out [N,out] += s * h B^T. */
void cpu_lora_forward(float *out, float *h, const float *x, const float *A, const float *B, float s, int N, int in,
                      int r, int out_features);
/* Given dout [N,out] = dL/d(out) and the forward's x and h: dh [N,r] = s * dout B (written, the
 * caller's scratch); dB [out,r] += s * dout^T h; then cpu_lora_backward_h. */
void cpu_lora_backward(float *dx, float *dA, float *dB, float *dh, const float *dout, const float *x, const float *h,
                       const float *A, const float *B, float s, int N, int in, int r, int out_features);
/* The part through h = x A^T given dh [N,r] = dL/dh: dA [r,in] += dh^T x; dx [N,in] += dh A
 * (dx NULL: not wanted). */
void cpu_lora_backward_h(float *dx, float *dA, const float *dh, const float *x, const float *A, int N, int in, int r);

/* ---- the MLP activation: h = leaky_relu(u, slope)^2 (relu(u)^2 at slope 0) ---------------- */
/* leaky_relu(u, s) = u for u > 0, s*u otherwise (mlp_negative_slope). Slope 0 runs relu^2's own
 * loops, bit for bit those before the slope existed. */

/* u, h [N,C]; h may equal u (but the backward needs u). h = u*u for u > 0, else (s*u)*(s*u). */
void cpu_relu2_forward(float *h, const float *u, int N, int C, float slope);
/* du [N,C] += (2*u)*dh for u > 0, else (k*u)*dh with k = cpu_relu2_negative_grad_coeff(slope)
 * (relu^2 at slope 0: 0). */
void cpu_relu2_backward(float *du, const float *dh, const float *u, int N, int C, float slope);
/* d/du of (s*u)^2 over u: k = 2*s^2 (in double, rounded to fp32 once), the CUDA op's too. */
float cpu_relu2_negative_grad_coeff(float slope);

/* ---- residual mix (Block input): out = mix[0,c] * x + mix[1,c] * x0 ---------------------- */

/* x, x0, out [N,C]; mix [2,C] (row 0 scales x, row 1 scales x0). out may equal x or x0. */
void cpu_residual_mix_forward(float *out, const float *x, const float *x0, const float *mix, int N, int C);
/* dx += mix[0]*dout; dx0 += mix[1]*dout; dmix[0,c] += sum_n dout*x; dmix[1,c] += sum_n dout*x0. */
void cpu_residual_mix_backward(float *dx, float *dx0, float *dmix, const float *dout, const float *x,
                           const float *x0, const float *mix, int N, int C);

/* ---- scaled residual add: out = x + scale[c] * branch ------------------------------------ */
/* Used for attn_scale, mlp_scale and the U-net skip_weights[i] (x + skip_weights[i] * skip). */

/* x, branch, out [N,C]; scale [C]. out may equal x (in-place residual update). */
void cpu_scaled_add_forward(float *out, const float *x, const float *branch, const float *scale, int N, int C);
/* dx += dout; dbranch += scale*dout; dscale[c] += sum_n dout*branch. dx may be NULL when the
 * caller keeps dout itself as the gradient of x (it is identical), which saves a pass. */
void cpu_scaled_add_backward(float *dx, float *dbranch, float *dscale, const float *dout,
                         const float *branch, const float *scale, int N, int C);

/* ---- gated U-Net skip (cpu_skip_gate.c): out = lerp(w[c]*skip, x, sigmoid(gate[c])) ------- */
/* skip_gates_enabled: out = s*x + (1-s)*w*skip with s = sigmoid(gate[c]), evaluated as
 * cpu_lerp. x, skip, out [N,C]; w (skip_weights row), gate (skip_gates row) [C]. out may equal x. */

/* torch.lerp's fp32 evaluation: start + weight*(end - start) for weight < 0.5, else
 * end - (end - start)*(1 - weight) (exact at weight 0 and 1). */
float cpu_lerp(float start, float end, float weight);
void cpu_skip_gate_forward(float *out, const float *x, const float *skip, const float *w, const float *gate, int N,
                           int C);
/* dx += s*dout; dskip += w*((1-s)*dout); dw[c] += sum_n ((1-s)*dout)*skip;
 * dgate[c] += sum_n (s(1-s)*dout)*(x - w*skip) (token sums in double, token order). Needs the
 * forward's x and skip. */
void cpu_skip_gate_backward(float *dx, float *dskip, float *dw, float *dgate, const float *dout, const float *x,
                            const float *skip, const float *w, const float *gate, int N, int C);

/* ---- parallel residual lanes (cpu_lane_mix.c): the end of a parallel block ---------------- */
/* A = attn_scale[c]*ao, M = mlp_scale[c]*mo;  out0 = resid[0]*l0 + post[0]*A + post[2]*M;
 * out1 = resid[1]*l1 + post[1]*A + post[3]*M (fp32, left to right). l0, l1, ao, mo, out0, out1
 * [N,C]; attn_scale, mlp_scale [C]; resid [2] (the block's parallel_resid_lambdas row: lane 0,
 * lane 1); post [4] (its parallel_post_lambdas [2,2]: attention to lane 0, to lane 1, MLP to
 * lane 0, to lane 1). out0 may equal l0 and out1 l1. */
void cpu_lane_mix_forward(float *out0, float *out1, const float *l0, const float *l1, const float *ao, const float *mo,
                          const float *attn_scale, const float *mlp_scale, const float *resid, const float *post, int N,
                          int C);
/* Given d0 = dL/dout0, d1 = dL/dout1: dl0 += resid[0]*d0; dl1 += resid[1]*d1;
 * dao += attn_scale*(post[0]*d0 + post[1]*d1); dmo += mlp_scale*(post[2]*d0 + post[3]*d1);
 * dattn_scale[c], dmlp_scale[c] += those branch gradients times ao, mo summed over tokens;
 * dresid[2], dpost[4] += their sums over every element (double; channel blocks in order, tokens
 * in order within one: the same bits for any thread count). Needs the forward's inputs. */
void cpu_lane_mix_backward(float *dl0, float *dl1, float *dao, float *dmo, float *dattn_scale, float *dmlp_scale,
                           float *dresid, float *dpost, const float *d0, const float *d1, const float *l0,
                           const float *l1, const float *ao, const float *mo, const float *attn_scale,
                           const float *mlp_scale, const float *resid, const float *post, int N, int C);

/* ---- SmearGate (cpu_smear.c): out[b,t] = (1-g) x[b,t] + g x[b,t-1], g = sigmoid(gate) ------ */

/* x, out [B*T, C] (B sequences of T positions; x[b,-1] = 0); gate [C]. */
void cpu_smear_forward(float *out, const float *x, const float *gate, int B, int T, int C);
/* dx [B*T,C] += d/dx; dgate [C] += sum over tokens (double, token order). Needs the forward input. */
void cpu_smear_backward(float *dx, float *dgate, const float *dout, const float *x, const float *gate, int B, int T,
                        int C);

/* ---- SmearGate with the BOS mask (cpu_smear_bos.c), the 1.0611 record's ------------------- */

/* out_t = e_t + m_t lambda sigmoid(w . e_t[:window]) e_{t-1} for t >= 1 of each of B sequences of
 * T positions, m_t = [ids[t] != bos_id]; out_0 = e_0. e, out [B*T, C] (out must not alias e);
 * w [window], lambda [1]. */
void cpu_smear_bos_forward(float *out, const float *e, const int32_t *ids, const float *w, const float *lambda,
                           int B, int T, int C, int window, int64_t bos_id);
/* de [B*T, C] += d/de (de must not alias dout); dw [window], dlambda [1] += their sums over
 * tokens (double, token order). Needs the forward's input e. */
void cpu_smear_bos_backward(float *de, float *dw, float *dlambda, const float *dout, const float *e,
                            const int32_t *ids, const float *w, const float *lambda, int B, int T, int C, int window,
                            int64_t bos_id);

/* ---- bigram hash embedding (cpu_bigram.c) ------------------------------------------------- */

/* The buckets of each position's token pair: cpu_bigram_hash in bigram_hash.h (included above),
 * shared with the CUDA backend. */
/* out[i] = x[i] + branch[i] * scale[0] over n elements (the branch's learned scalar scale). out
 * may equal x. */
void cpu_add_scalar_scaled_forward(float *out, const float *x, const float *branch, const float *scale, size_t n);
/* dbranch[i] += dout[i] * scale[0]; dscale[0] += sum_i dout[i] * branch[i] (double, index order). */
void cpu_add_scalar_scaled_backward(float *dbranch, float *dscale, const float *dout, const float *branch,
                                    const float *scale, size_t n);

/* ---- logits + softcap + cross-entropy, fused and chunked --------------------------------- */
/* For the final normed x [N,C] and the output matrix W [V,C] (tok_emb when tied, else lm_head):
 *   z = x @ W^T,  s = softcap * tanh(z / softcap),  loss[n] = logsumexp(s[n,:]) - s[n,target[n]].
 * The [N,V] logits never exist at once: tokens are processed in chunks of `chunk` rows through a
 * caller-given scratch of chunk*V floats. Softmax is fp32 with max subtraction; the row sum of
 * exponentials is accumulated in double, in 8 interleaved partial sums added in a fixed order;
 * tanh and exp are cpu_vecmath.h's. The result bits depend on `chunk` (it sets the matrix
 * shapes and the order in which dW's token partials are added) but never on the thread count.
 * Both return -1 (ct_error names the position) if a target is outside [0, V), or if
 * softcap <= 0 or chunk < 1; they check everything before writing anything. */

/* Training: one pass computes losses [N] (per token, fp32; required here), *mean_loss (their
 * mean over this micro-batch's N tokens, summed in double in token order) and ACCUMULATES the
 * gradients of loss_weight * mean_loss: dx [N,C] += and dW [V,C] +=. loss_weight is this
 * micro-batch's share of the step's loss (e.g. 1/grad_accum_steps). */
int cpu_logits_ce_forward_backward(float *dx, float *dW, float *losses, double *mean_loss, const float *x,
                               const float *W, const int32_t *targets, int N, int C, int V, float softcap,
                               float loss_weight, float *scratch, int chunk);
/* Validation: forward only. losses [N] gets the per-token losses (may be NULL); *loss_sum gets
 * their sum in double, in token order (the caller divides by its total token count). */
int cpu_logits_ce_forward(float *losses, double *loss_sum, const float *x, const float *W, const int32_t *targets,
                      int N, int C, int V, float softcap, float *scratch, int chunk);

/* The same with test-time training's head adapter (lowrank NULL: exactly the functions above):
 * z = x @ W^T + s * h @ B^T before the softcap, h [N,r] (the adapter's x A^T), B [V,r]. With B
 * all zero the losses are bit for bit those without it. The forward and backward also give
 * dh [N,r] += dL/dh (= s * dz B) and dB [V,r] += dL/dB (= s * dz^T h), each skipped when NULL;
 * dW may be NULL (not computed). Both return -1 also for a lowrank without h or B or with
 * r < 1. */
typedef struct {
    const float *h, *B;
    float s;
    int r;
    float *dh, *dB; /* backward only */
} CpuLogitsLowRank;
int cpu_logits_ce_lowrank_forward(float *losses, double *loss_sum, const float *x, const float *W,
                                  const CpuLogitsLowRank *lowrank, const int32_t *targets, int N, int C, int V,
                                  float softcap, float *scratch, int chunk);
int cpu_logits_ce_lowrank_forward_backward(float *dx, float *dW, const CpuLogitsLowRank *lowrank, float *losses,
                                           double *mean_loss, const float *x, const float *W, const int32_t *targets,
                                           int N, int C, int V, float softcap, float loss_weight, float *scratch,
                                           int chunk);

#endif
