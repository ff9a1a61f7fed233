/* cpu_attention.h — CPU (fp32, OpenBLAS + OpenMP) attention ops of the baseline GPT: QK-norm +
 * RoPE + q_gain, and causal grouped-query attention, as forward/backward pairs (llm.c style).
 *
 * Conventions shared by every op here:
 *   - fp32, explicit buffers and shape ints; no allocation inside. Ops that need working memory
 *     take `scratch` and a companion *_scratch_floats() function says how many floats it needs.
 *   - Forward outputs are written with '=' (every element). Backward functions ACCUMULATE (+=)
 *     into every gradient buffer, parameter grads (dgain) included; the caller zeroes them.
 *   - Activations are token-major: row n = b*T + t. q is [B*T, H*hd], k and v are [B*T, KV*hd]
 *     with the heads of one token contiguous (exactly what c_q / c_k / c_v produce), and the
 *     attention output y is [B*T, H*hd] in the same layout, ready for the proj linear.
 *   - Results are deterministic and bitwise identical for any OpenMP thread count: every output
 *     element is produced by one task whose arithmetic does not depend on which thread runs
 *     it (cblas_sgemm is kept single-threaded inside the tasks), and every cross-task
 *     reduction is summed in a fixed order afterwards. Across machines the last bits may differ:
 *     OpenBLAS picks its sgemm kernels by CPU model.
 *   - Preconditions (head_dim even and > 0, n_heads divisible by n_kv_heads, enough scratch)
 *     are programming errors and are checked with assert().
 *
 * Model mapping (train_gpt.py, CausalSelfAttention.forward):
 *   q = cpu_qk_norm_rope_forward(c_q(x), q_gain)    F.rms_norm -> apply_rotary_emb -> * q_gain
 *   k = cpu_qk_norm_rope_forward(c_k(x), NULL)      F.rms_norm -> apply_rotary_emb
 *   y = cpu_attention_forward(q, k, v)              F.scaled_dot_product_attention(is_causal,
 *                                                   enable_gqa), then transpose/reshape */
#ifndef CT_CPU_ATTENTION_H
#define CT_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "rope_tables.h" /* the RoPE tables (cpu_rope_tables_init), shared with the CUDA backend */

/* ---- QK-norm + RoPE + gain (fused, per token and head) -------------------------------------
 * For each token n (position t = n % T) and head h, with x = in[n, h*hd : (h+1)*hd]:
 *   r = 1 / sqrt(mean(x^2) + FLT_EPSILON)              F.rms_norm(x, (hd,)), eps=None, fp32
 *   u = x * r;  u1 = u[:rd/2], u2 = u[rd/2:rd], u3 = u[rd:]   (rd = rope_dims, even, <= hd)
 *   out = gain[h] * cat(u1*cos_t + u2*sin_t, -u1*sin_t + u2*cos_t, u3)   (half-split RoPE on
 *   the first rd dims: the record's partial RoPE; rd = hd is train_gpt.py's full RoPE)
 * cos/sin tables: [T, rd/2] (cpu_rope_tables_init with rd as its head_dim).
 * in, out: [B*T, n_heads*head_dim]; must not alias (backward needs `in`).
 * gain: [n_heads] (q_gain), or NULL for no gain (k).
 * Nothing is saved for backward: r is recomputed from `in`, which costs one pass over hd.
 * head_dim <= CPU_QK_NORM_MAX_HEAD_DIM (the backward keeps two head vectors on the stack). */
#define CPU_QK_NORM_MAX_HEAD_DIM 1024

void cpu_qk_norm_rope_forward(float *out, const float *in, const float *gain,
                              const float *cos_table, const float *sin_table,
                              int B, int T, int n_heads, int head_dim, int rope_dims);

/* Scratch for the backward: one dgain partial per (token, head) [B*T, n_heads], so that dgain
 * is summed over tokens in a fixed order whatever the thread count. */
size_t cpu_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads);

/* din += d(out)/d(in)^T dout;  dgain[h] += sum over tokens and head dims of dout * out/gain[h].
 * gain and dgain may both be NULL (k). dgain may be NULL with a non-NULL gain (gain frozen).
 * scratch: cpu_qk_norm_rope_backward_scratch_floats() floats (unused when dgain is NULL). */
void cpu_qk_norm_rope_backward(float *din, float *dgain, const float *dout, const float *in,
                               const float *gain, const float *cos_table, const float *sin_table,
                               int B, int T, int n_heads, int head_dim, int rope_dims, float *scratch);

/* Test support (test_gpu_step's cancellation bounds): while mag is set (NULL: off, the default),
 * each cpu_qk_norm_rope_backward with a dgain also adds, for each head, the sum over tokens and
 * head dims of |term| of dgain's sum (|a_d u_d|, a = R^T dout, u the normalised input) into
 * mag[k], k the index of that head's dgain in grads (dgain must point into grads). Not
 * thread-safe: one backend at a time. */
void cpu_qk_norm_rope_track_magnitudes(const float *grads, double *mag);

/* ---- XSA, exclusive self attention (cpu_xsa.c) ------------------------------------------------
 * out = y - (y . vn) vn per token and query head, vn = v / max(||v||, 1e-12) the unit value
 * vector of the head's KV group at the same position. y, out [N, n_heads*hd] (may not alias);
 * v [N, n_kv_heads*hd]; hd <= CPU_QK_NORM_MAX_HEAD_DIM. The backward ACCUMULATES dy and dv. */
void cpu_xsa_forward(float *out, const float *y, const float *v, int N, int n_heads, int n_kv_heads, int head_dim);
void cpu_xsa_backward(float *dy, float *dv, const float *dout, const float *y, const float *v, int N, int n_heads,
                      int n_kv_heads, int head_dim);

/* ---- sparse attention head-output gate (cpu_head_gate.c) -------------------------------------
 * g[t,h] = sigmoid(scale * sum_{k<window} w[h,k] n[t,k]), out[t,h,:] = g[t,h] y[t,h,:]; y, out, n
 * [N, n_heads*hd] (out may equal y), g [N, n_heads], w [n_heads, window]. Backward: dy = g dout
 * (written, may equal dout), dz = scale g (1-g) (y . dout) [N, n_heads] (written), dw += dz^T n
 * (double, token order); the input's share dn[:, :window] += dz w comes apart
 * (cpu_head_gate_input_backward), when the caller's d n is ready for it. */
void cpu_head_gate_forward(float *out, float *g, const float *y, const float *n, const float *w, int N, int n_heads,
                           int head_dim, int window, float scale);
void cpu_head_gate_backward(float *dy, float *dz, float *dw, const float *dout, const float *y, const float *g,
                            const float *n, int N, int n_heads, int head_dim, int window, float scale);
void cpu_head_gate_input_backward(float *dn, const float *dz, const float *w, int N, int n_heads, int head_dim,
                                  int window);

/* ---- Causal grouped-query attention, optionally within segments (documents) -------------------
 * y[b,t,h,:] = sum_{s0<=s<=t} softmax_s(q[b,t,h,:] . k[b,s,g,:] / sqrt(hd)) v[b,s,g,:],
 * g = h / (n_heads / n_kv_heads), s0 = seg_start[b*T + t], or 0 when seg_start is NULL.
 *
 * Segments (packed documents, the record's flash_attn_varlen with cu_seqlens): seg_start is
 * [B*T] int32; for token n = b*T + t it holds the first position (0 .. t) of t's segment within
 * row b, and t attends to keys seg_start[n] .. t only. Segments are contiguous: seg_start[n] is
 * t (a segment starts) or seg_start[n-1]. NULL is causal attention over the whole row, bit for
 * bit what an all-zero seg_start gives. A query block multiplies only against keys from its
 * first row's segment start, so a row of T tokens cut into segments of <= S costs about
 * T * (S + CPU_ATTENTION_ROW_BLOCK) products per head, not T^2 / 2.
 *
 * Algorithm: OpenMP tasks over (b, h) — over (b, h, query block) in the forward, whose blocks
 * are independent — with cblas_sgemm single-threaded inside. The per-(b,h) Q/K/V/Y matrices
 * are strided views straight into the token-major buffers (leading dimension H*hd or KV*hd), so
 * no re-layout copies are made. Query rows are processed in blocks of CPU_ATTENTION_ROW_BLOCK;
 * a block whose last row is t only multiplies against keys 0..t, which skips most of the
 * masked upper triangle (about (1 + 64/T)/2 of the full T x T work is done). Softmax in fp32
 * with max subtraction; its exp is a vectorised polynomial (about 2 ulp), not libm's expf.
 *
 * Saved for backward: not P. The forward saves two floats per (b, h, t) row — the row max m
 * of the scaled scores and 1/sum(exp(s - m)) — and the backward recomputes the scores with the
 * identical sgemm call, so its P = exp(s - m) * inv_sum is bitwise the forward's P. Memory
 * saved: 2*B*H*T floats instead of B*H*T*T (for B=8, H=8, T=1024: 0.5 MiB instead of 256 MiB
 * per layer), paid for with one extra Q K^T product in backward (7 instead of 6 T x T x hd
 * products per fwd+bwd). */
#define CPU_ATTENTION_ROW_BLOCK 64

/* Floats in the softmax statistics buffer: [B, H, T, 2] = (row max, 1 / row sum). */
size_t cpu_attention_stats_floats(int B, int T, int n_heads);

/* Scratch for n_threads worker threads (pass omp_get_max_threads()). If an op is later handed
 * less scratch than its current thread count needs, it runs on fewer threads rather than
 * overflowing; the results are the same bits either way.
 *   forward:  n_threads * rows * T                         (one score/probability tile each)
 *   backward: n_threads * 2 * rows * T                      (P and dP tiles)
 *             + 2 * B*H*T*hd when n_kv_heads < n_heads     (per-query-head dK/dV partials,
 *             summed over each group in head order after the parallel loop: deterministic GQA
 *             reduction without atomics); rows = min(CPU_ATTENTION_ROW_BLOCK, T).
 * E.g. B=8, H=8, KV=4, T=1024, hd=64: 256 KiB per thread forward, 512 KiB per thread + 32 MiB
 * backward. */
size_t cpu_attention_forward_scratch_floats(int B, int T, int n_heads, int n_kv_heads,
                                            int head_dim, int n_threads);
size_t cpu_attention_backward_scratch_floats(int B, int T, int n_heads, int n_kv_heads,
                                             int head_dim, int n_threads);

/* y: [B*T, H*hd] (written). stats: [B, H, T, 2] for the backward, or NULL for a forward-only
 * (validation / inference) pass; y is bitwise the same either way. */
void cpu_attention_forward(float *y, float *stats, const float *q, const float *k, const float *v,
                           const int32_t *seg_start, int B, int T, int n_heads, int n_kv_heads, int head_dim,
                           float *scratch, size_t scratch_floats);

/* dq += dL/dq, dk += dL/dk, dv += dL/dv given dy = dL/dy. stats from cpu_attention_forward
 * on the same q, k, v and seg_start. dk/dv of a kv head accumulate the contributions of its
 * query heads. */
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dy, const float *q,
                            const float *k, const float *v, const int32_t *seg_start,
                            const float *stats, int B, int T,
                            int n_heads, int n_kv_heads, int head_dim, float *scratch,
                            size_t scratch_floats);

/* ---- internal: fp32 reductions shared by kernels/cpu/cpu_attn*.c (cpu_attn_vec.c) ----------------
 * Vectorised, and a fixed function of (x, n): the same bits on every thread. */
float cpu_attn_sum(const float *x, int n);
float cpu_attn_dot(const float *x, const float *y, int n);
float cpu_attn_max(const float *x, int n); /* -INFINITY for n = 0; NaNs are skipped */

#endif
