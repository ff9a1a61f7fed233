/* cuda_ops.h — the CUDA math ops of ctrain (kernels/cuda/cuda_*.cu), C-callable, llm.c style. Each op
 * mirrors a CPU op of kernels/cpu/cpu_ops.h / cpu_attention.h / cpu_optim.h (same math, same layout)
 * and is tested against it in tests/unit/test_gpu_*.c. docs/cuda.md has the overview.
 *
 * Conventions (the CPU ones, plus the precision policy):
 *  - Activations are row-major [N, C] device buffers, N = tokens (B*T); shapes are explicit ints,
 *    offsets are computed in size_t. Every pointer here is a DEVICE pointer unless it says host.
 *  - No op allocates. Scratch is passed in; a companion ..._floats() / ..._doubles() says how much.
 *  - Forward ops WRITE (=) their outputs. Backward ops ACCUMULATE (+=) into every fp32 gradient
 *    buffer, as the CPU ops do; the caller zeroes them. Exception, by the precision policy: a
 *    gradient whose only consumer is a bf16 matrix product is produced directly as bf16 (the
 *    `*_bf16` outputs) and those are WRITTEN (=) with this op's contribution, rounded once.
 *  - Precision: fp32 master weights, optimizer state and residual stream; matrix products take
 *    bf16 inputs and accumulate in fp32 (cuBLAS, CUBLAS_COMPUTE_32F); norms, RoPE, attention
 *    (softmax included), softcap, cross-entropy and every reduction are fp32 or double.
 *  - Determinism: no floating-point atomics anywhere. Reductions over rows of a row run in one
 *    warp/block in a fixed tree; parameter-gradient reductions over tokens write fixed-shape
 *    per-chunk partials (CUDA_COLSUM_ROWS tokens each, in double) that a second kernel adds in
 *    chunk order. Launch shapes depend on the problem shape only. With the same GPU model,
 *    shapes and inputs every op gives the same bits on every run.
 *  - All ops run on the given stream and return 0, or -1 after ct_fail() naming the kernel and
 *    the CUDA error (launch errors are caught with cudaGetLastError after every launch; with
 *    cuda_set_debug_sync(1) every launch is also synchronised so asynchronous faults name their
 *    kernel). Shapes are trusted (checked by the backend at creation), token ids too (checked on
 *    the host before they are uploaded).
 *  - ct_bf16 is the storage of one bfloat16 (__nv_bfloat16 on the device), round-to-nearest-even
 *    from fp32. */
#ifndef CT_CUDA_OPS_H
#define CT_CUDA_OPS_H

#ifdef CT_HAVE_CUDA

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t ct_bf16;

/* ---- infrastructure (cuda_common.cu) --------------------------------------------------------- */

/* 1: synchronise the stream after every launch so an asynchronous fault is reported with the
 * kernel's name (slow; for debugging). Also enabled by the environment variable
 * CT_CUDA_DEBUG_SYNC=1 at the first launch. */
void cuda_set_debug_sync(int on);
/* Whether launches are synchronised (cuda_set_debug_sync, or CT_CUDA_DEBUG_SYNC=1): work that
 * cannot be synchronised, such as a stream capture, is then better not attempted. */
int cuda_debug_sync_on(void);
/* After a kernel launch: cudaGetLastError (and the debug synchronisation); -1 + ct_fail naming
 * `kernel` on failure. Used by every launcher; exported for the backend's own launches. */
int cuda_check_launch(const char *kernel, cudaStream_t stream);
/* Check a CUDA runtime call's status: 0, or -1 + ct_fail("<what>: <error string>"). */
int cuda_check(cudaError_t status, const char *what);
/* Same for cuBLAS. */
int cuda_check_cublas(cublasStatus_t status, const char *what);

/* A trivial kernel: fails when the binary has no kernel image for the device (e.g. a GPU newer
 * than the compiled archs), with a message naming the archs built. */
int cuda_probe_kernels(cudaStream_t stream);

/* out[i] = bf16(in[i]) / out[i] = float(in[i]). */
int cuda_f32_to_bf16(ct_bf16 *out, const float *in, size_t n, cudaStream_t stream);
int cuda_bf16_to_f32(float *out, const ct_bf16 *in, size_t n, cudaStream_t stream);
/* y[i] += x[i]. */
int cuda_add_inplace(float *y, const float *x, size_t n, cudaStream_t stream);

/* Fixed-order sums in double over n floats: a grid whose shape depends only on n writes one
 * partial per block (tree-reduced), then one block adds the partials in a fixed tree.
 * *out (device) = sum x[i] (cuda_sum) or sum x[i]^2 (cuda_sumsq). partials: cuda_reduce_doubles(n)
 * doubles. */
size_t cuda_reduce_doubles(size_t n);
int cuda_sum(double *out, const float *x, size_t n, double *partials, cudaStream_t stream);
int cuda_sumsq(double *out, const float *x, size_t n, double *partials, cudaStream_t stream);

/* Parameter-gradient reduction over tokens. Ops that produce one take `partials` of
 * cuda_colsum_doubles(N, C, n_sums) doubles: chunk k of CUDA_COLSUM_ROWS tokens writes
 * partials[k][s*C + c] (its tokens summed in a fixed order, in double); cuda_colsum_finish then
 * does g[s*C + c] += (float)(sum over chunks in order). */
#define CUDA_COLSUM_ROWS 256
size_t cuda_colsum_doubles(int N, int C, int n_sums);
/* g[c] += sum_n a[n,c] * b[n,c] (b NULL: * 1), fixed order. */
int cuda_colsum(float *g, const float *a, const float *b, int N, int C, double *partials, cudaStream_t stream);

/* ---- matrix products (cuda_gemm.cu) ---------------------------------------------------------- */

enum { CT_F32 = 0, CT_BF16 = 1 };

/* Row-major C[M,N] = alpha * op(A) @ op(B) + beta * C with op(A) [M,K] and op(B) [K,N]
 * (trans_a: A is stored [K,M]; trans_b: B is stored [N,K]), cublasGemmEx with
 * CUBLAS_COMPUTE_32F. Types: A and B both CT_BF16 (fp32 accumulation; C CT_F32 or CT_BF16) or
 * both CT_F32 (true fp32, no TF32; C CT_F32). beta 0 overwrites C. The handle's stream is used
 * (cuda_blas_create sets it). Deterministic for a given GPU model, shapes and handle setup. */
int cuda_gemm(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
              int a_type, int lda, const void *B, int b_type, int ldb, float beta, void *C, int c_type, int ldc);
/* `batch` such products at once (cublasGemmStridedBatchedEx): product b reads A + b*stride_a,
 * B + b*stride_b and writes C + b*stride_c (strides in elements). For many small products of
 * one shape (Muon's Newton–Schulz), where one launch per product would cost more than the
 * arithmetic. Deterministic like cuda_gemm for a given batch count. */
int cuda_gemm_batched(cublasHandle_t handle, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                      int a_type, int lda, long long stride_a, const void *B, int b_type, int ldb, long long stride_b,
                      float beta, void *C, int c_type, int ldc, long long stride_c, int batch);

/* A cuBLAS handle bound to `stream`, with `workspace` (device, workspace_bytes, e.g. 32 MiB) as
 * its only workspace (so cuBLAS allocates nothing later) and reduced-precision split-K
 * reductions disallowed. */
int cuda_blas_create(cublasHandle_t *out, cudaStream_t stream, void *workspace, size_t workspace_bytes);

/* linear without bias, torch layout W [out, in]: out [N,out] = x [N,in] @ W^T (bf16), out_type
 * CT_F32 or CT_BF16 (the fp32 accumulator rounded once: for outputs that only feed products). */
int cuda_linear_forward(cublasHandle_t handle, void *out, int out_type, const ct_bf16 *x, const ct_bf16 *W, int N,
                        int in_features, int out_features);
/* dx [N,in] (+= when dx_accumulate, else =) dout @ W, dx_type CT_F32 or CT_BF16 (written only);
 * dW [out,in] (fp32) += dout^T @ x. dout, x and W bf16. dx or dW may be NULL (skipped). */
int cuda_linear_backward(cublasHandle_t handle, void *dx, int dx_type, int dx_accumulate, float *dW,
                         const ct_bf16 *dout, const ct_bf16 *x, const ct_bf16 *W, int N, int in_features,
                         int out_features);

/* ---- token embedding (cuda_embedding.cu) ----------------------------------------------------- */

/* out [N,C] = wte[ids[n], :]; ids [N] int32 (device), already checked to be in [0, V). */
int cuda_embedding_forward(float *out, const int32_t *ids, const float *wte, int N, int C, cudaStream_t stream);

/* Host: the segmented-reduction index of one micro-batch, a counting sort of the token ids:
 * rows[0..*num_rows) the distinct ids in increasing order, positions[starts[r] .. starts[r+1]) the
 * token positions holding rows[r], in increasing order. ids [N] host, in [0, V). starts needs
 * V + 1 entries (it is used as the counting array), rows V, positions N. */
void cuda_embedding_index(const int32_t *ids, int N, int V, int32_t *rows, int32_t *starts, int32_t *positions,
                          int *num_rows);
/* dwte [V,C] += scatter of dout [N,C] by the index above (device copies of rows, starts,
 * positions): one block owns a (row, channel range) of dwte and adds that row's tokens in token
 * order, in fp32 — no atomics, and bitwise cpu_embedding_backward's order. */
int cuda_embedding_backward(float *dwte, const float *dout, const int32_t *rows, const int32_t *starts,
                            const int32_t *positions, int num_rows, int C, cudaStream_t stream);

/* ---- row ops: RMSNorm, residual mix, scaled add, relu^2 (cuda_rowops.cu) ------------------------ */

/* RMSNorm without weight, per row of C: r = 1/sqrt(mean(x^2) + eps) (row sum in double, as the
 * CPU op), y = x * r. out (fp32) and/or out_bf16 receive y (either may be NULL), rstd [N] r
 * (may be NULL). out may equal x. */
int cuda_rmsnorm_forward(float *out, ct_bf16 *out_bf16, float *rstd, const float *x, int N, int C, float eps,
                         cudaStream_t stream);
/* dx [N,C] += rstd * dout - x * rstd^3 * mean(dout * x) (the CPU formula, row dot in double). */
int cuda_rmsnorm_backward(float *dx, const float *dout, const float *x, const float *rstd, int N, int C,
                          cudaStream_t stream);

/* Block input, fused (= cpu_scaled_add_forward if skip, cpu_residual_mix_forward, cpu_rmsnorm_forward):
 *   x_in = skip ? x + skip_w * skip : x       (written to x_in only when skip != NULL)
 *   xm = mix[0] * x_in + mix[1] * x0;  rstd = 1/rms(xm);  a_bf16 = bf16(xm * rstd)
 * x, skip, x0, x_in, xm [N,C]; skip_w [C]; mix [2,C]. */
int cuda_mix_norm_forward(float *x_in, float *xm, float *rstd, ct_bf16 *a_bf16, const float *x, const float *skip,
                          const float *skip_w, const float *x0, const float *mix, int N, int C, float eps,
                          cudaStream_t stream);
/* The output of the block before, x_out = (xm + attn_scale * ao) + mlp_scale * mo, made as
 * cuda_scaled_add_forward(x_out, xm, ao, attn_scale, mo, mlp_scale) makes it. */
typedef struct {
    float *x_out;
    const float *xm;
    const ct_bf16 *ao, *mo;
    const float *attn_scale, *mlp_scale;
} CudaBlockOutput;
/* That op and cuda_mix_norm_forward on its result (x = prev->x_out), in one pass: writes
 * prev->x_out, and bitwise the two ops. prev->xm may be xm itself (the backend keeps one xm for
 * all blocks): each element is read before it is overwritten. */
int cuda_out_mix_norm_forward(const CudaBlockOutput *prev, float *x_in, float *xm, float *rstd, ct_bf16 *a_bf16,
                              const float *skip, const float *skip_w, const float *x0, const float *mix, int N, int C,
                              float eps, cudaStream_t stream);
/* Attention residual + MLP norm, fused (= cpu_scaled_add_forward, cpu_rmsnorm_forward):
 *   x1 = xm + scale * branch;  rstd = 1/rms(x1);  m_bf16 = bf16(x1 * rstd).
 * branch bf16 (the attention projection's output, as a product's output under autocast). x1 is
 * written only when not NULL: the backend does not keep it (cuda_add_norm_backward and
 * cuda_scaled_add_forward recompute it, to the same bits). */
int cuda_add_norm_forward(float *x1, float *rstd, ct_bf16 *m_bf16, const float *xm, const ct_bf16 *branch,
                          const float *scale, int N, int C, float eps, cudaStream_t stream);
/* cuda_rmsnorm_backward of that norm, its input recomputed as the forwards made it: dx +=
 * rmsnorm_backward(dout, x1 = xm + scale * branch, rstd) with xm = mix[0] * x_in + mix[1] * x0
 * (the backend keeps neither xm nor x1). When renorm is given (with renorm_rstd [N]), also
 * renorm = bf16(xm * renorm_rstd): xm's own norm, the attention's input a_bf16 of
 * cuda_mix_norm_forward, recomputed to the same bits while xm is in hand. When dbranch is given
 * (with dscale [C] and partials: cuda_colsum_doubles(N, C, 1)), also the backward of x1's
 * residual add on the updated dx, as cuda_scaled_add_backward(NULL, NULL, dbranch, dscale, dx,
 * NULL, branch, scale) would do it next, bitwise, in the same pass: dbranch = bf16(scale * dx)
 * (WRITTEN), dscale += sum_n dx * branch (where the device lacks the 8 C bytes of shared memory
 * per row lane the fused kernel needs, the two ops run one after the other). */
int cuda_add_norm_backward(float *dx, ct_bf16 *renorm, ct_bf16 *dbranch, float *dscale, const float *dout,
                           const float *x_in, const float *x0, const float *mix, const ct_bf16 *branch,
                           const float *scale, const float *rstd, const float *renorm_rstd, int N, int C,
                           double *partials, cudaStream_t stream);
/* out = (x + inner_scale[c] * inner) + scale[c] * branch (out may equal x), branches bf16 (the
 * attention and MLP projections' outputs); inner and inner_scale may be NULL (out = x +
 * scale * branch). The block output x1 + mlp_scale * mo from xm, without a stored x1. */
int cuda_scaled_add_forward(float *out, const float *x, const ct_bf16 *inner, const float *inner_scale,
                            const ct_bf16 *branch, const float *scale, int N, int C, cudaStream_t stream);
/* Backward of out = x + scale * branch given dout: dx += dout (dx may be NULL: the caller keeps
 * dout as dx), dbranch = scale * dout (fp32, WRITTEN, may be NULL), dbranch_bf16 =
 * bf16(scale * dout) (may be NULL), dscale [C] += sum_n dout * branch (partials:
 * cuda_colsum_doubles(N, C, 1)). The branch is fp32 (branch) or bf16 (branch_bf16): exactly one
 * of them is given. */
int cuda_scaled_add_backward(float *dx, float *dbranch, ct_bf16 *dbranch_bf16, float *dscale, const float *dout,
                             const float *branch, const ct_bf16 *branch_bf16, const float *scale, int N, int C,
                             double *partials, cudaStream_t stream);
/* Backward of out = mix[0]*x + mix[1]*x0: dx (+= when dx_accumulate, else =) mix[0]*dout (the
 * backend writes: the block's input gradient starts here); dx0 += mix[1]*dout;
 * dmix [2,C] += (sum_n dout*x ; sum_n dout*x0) (partials: cuda_colsum_doubles(N, C, 2)). */
int cuda_residual_mix_backward(float *dx, int dx_accumulate, float *dx0, float *dmix, const float *dout, const float *x,
                               const float *x0, const float *mix, int N, int C, double *partials, cudaStream_t stream);
/* The block input's backward, fused: the attention norm's (cuda_rmsnorm_backward with its input
 * xm = mix[0] * x_in + mix[1] * x0 recomputed) giving g = dx + rmsnorm_backward(dout, xm, rstd),
 * then the residual mix's (cuda_residual_mix_backward with dx_accumulate = 0) on g: dx_in =
 * mix[0] * g (WRITTEN), dx0 += mix[1] * g, dmix [2,C] += (sum_n g*x_in ; sum_n g*x0) (partials:
 * cuda_colsum_doubles(N, C, 2)). Bitwise those two ops; dx's contents are undefined afterwards
 * (where the device lacks the shared memory the fused kernel needs, 16 C bytes per row lane,
 * the two ops run and leave g there). */
int cuda_norm_mix_backward(float *dx_in, float *dx0, float *dmix, float *dx, const float *dout, const float *x_in,
                           const float *x0, const float *mix, const float *rstd, int N, int C, double *partials,
                           cudaStream_t stream);
/* h = bf16(relu(u)^2) over n elements, u bf16 (the fc product's output). */
int cuda_relu2_forward(ct_bf16 *h, const ct_bf16 *u, size_t n, cudaStream_t stream);
/* du = bf16(2*relu(u)*dh) (WRITTEN: its only consumer is the fc product), dh and u bf16; du may
 * be dh (in place). h, when not NULL (and apart from du, dh and u), gets cuda_relu2_forward's
 * result in the same pass (the weight gradient's input, recomputed instead of kept). */
int cuda_relu2_backward(ct_bf16 *du, ct_bf16 *h, const ct_bf16 *dh, const ct_bf16 *u, size_t n, cudaStream_t stream);

/* ---- QK-norm + RoPE + gain (cuda_rope.cu) ----------------------------------------------------
 * cpu_qk_norm_rope_forward's math, one warp per (token, head): in, out [B*T, heads*hd]; gain
 * [heads] or NULL; cos/sin tables [T, hd/2] (cpu_rope_tables_init's, uploaded). hd even, <= 256.
 * in (c_q / c_k's output) is bf16, as a product's output under autocast; the math is fp32.
 * ld: elements per token of in (and of the backward's din, din_bf16), >= heads*hd: they may be
 * column blocks of wider rows (the backend's [c_q | c_k | c_v] outputs); heads*hd when whole. */
/* out (fp32) and/or out_bf16 receive the result, [B*T, heads*hd] (either may be NULL; the bf16
 * copy feeds the tensor-core attention). */
int cuda_qk_norm_rope_forward(float *out, ct_bf16 *out_bf16, const ct_bf16 *in, const float *gain,
                              const float *cos_table, const float *sin_table, int B, int T, int n_heads, int head_dim,
                              int ld, cudaStream_t stream);
/* Scratch of the backward: dgain partials [B*T, heads] floats + colsum doubles. */
size_t cuda_qk_norm_rope_backward_scratch_floats(int B, int T, int n_heads);
size_t cuda_qk_norm_rope_backward_partials_doubles(int B, int T, int n_heads);
/* din += gradient (fp32, may be NULL); din_bf16 = bf16(gradient) (may be NULL); both ld elements
 * per token, as in; dout [B*T, heads*hd]. dgain [heads] += sum over tokens of <R^T dout, u>
 * (NULL for k; needs scratch and partials then). */
int cuda_qk_norm_rope_backward(float *din, ct_bf16 *din_bf16, float *dgain, const float *dout, const ct_bf16 *in,
                               const float *gain, const float *cos_table, const float *sin_table, int B, int T,
                               int n_heads, int head_dim, int ld, float *scratch, double *partials,
                               cudaStream_t stream);

/* ---- causal GQA flash attention on tensor cores (cuda_attention.cu) ---------------------------
 * y[b,t,h,:] = sum_{s<=t} softmax_s(q[b,t,h,:].k[b,s,g,:] / sqrt(hd)) v[b,s,g,:], g = h/(H/KV),
 * q, y [B*T, H*hd]; k, v [B*T, KV*hd] (token-major, heads contiguous: what c_q/c_k/c_v give).
 * bf16 q, k, v, y and dy (products on tensor cores, fp32 accumulation); softmax, lse and the
 * gradients fp32. P and dS are rounded to bf16 where they enter a product (as in FlashAttention).
 * Tiles of 64 rows in shared memory, online softmax; no T x T matrix exists. Saved for the
 * backward: lse [B,H,T] (natural log-sum-exp of the scaled scores per query row).
 * v (and the backward's dv) may be a column block of wider rows (the backend's [c_q | c_k | c_v]
 * output): ld_v elements per token, a multiple of 8 and >= KV*hd, v 16-byte aligned; KV*hd when
 * whole. */
int cuda_attention_supported(int head_dim); /* 1 for head_dim 32, 64 and 128 */
/* y (bf16) written; lse (may be NULL for forward only) written. */
int cuda_attention_forward(ct_bf16 *y, float *lse, const ct_bf16 *q, const ct_bf16 *k, const ct_bf16 *v, int ld_v,
                           int B, int T, int n_heads, int n_kv_heads, int head_dim, cudaStream_t stream);
/* Scratch of the backward: D = rowsum(dy * y) [B,H,T] floats. */
size_t cuda_attention_backward_scratch_floats(int B, int T, int n_heads);
/* dq = dL/dq, dk = dL/dk (fp32) and dv = bf16(dL/dv) (ld_v elements per token, as v) given dy
 * (bf16), all WRITTEN (each is this op's alone in the backend; dv only feeds the c_v product).
 * P is recomputed from q, k and lse.
 * Deterministic without atomics: one kernel owns query rows (dq: loops over key tiles), one owns
 * key rows (dk, dv: loops over the group's query heads in head order and their query tiles: the
 * GQA reduction). y is the forward output (for D). */
int cuda_attention_backward(float *dq, float *dk, ct_bf16 *dv, const ct_bf16 *dy, const ct_bf16 *q, const ct_bf16 *k,
                            const ct_bf16 *v, int ld_v, const ct_bf16 *y, const float *lse, int B, int T, int n_heads,
                            int n_kv_heads, int head_dim, float *scratch, cudaStream_t stream);

/* ---- tied logits + softcap + cross-entropy, chunked (cuda_logits.cu) --------------------------
 * For chunks of `chunk` tokens: z = x @ W^T (bf16 x [N,C] and W [V,C], fp32 z [chunk,V] in
 * z_scratch), s = softcap*tanh(z/softcap), loss[n] = logsumexp(s) - s[target] (fp32 softmax with
 * max subtraction, row sums in double), as cpu_logits_ce_forward(_backward). Training also forms
 * dz = grad_scale * (softmax - onehot) * (1 - tanh^2), grad_scale = (float)(loss_weight / N),
 * as bf16 in dz_scratch [chunk,V], then dx [N,C] += dz @ W and dW [V,C] += dz^T @ x (fp32).
 * targets [N] device int32, checked on the host. losses [N] (fp32, written). The caller sums
 * the losses with cuda_sum. */
size_t cuda_logits_z_floats(int chunk, int V);     /* z_scratch */
size_t cuda_logits_dz_elems(int chunk, int V);     /* dz_scratch (bf16 elements) */
int cuda_logits_ce_forward_backward(cublasHandle_t handle, float *dx, float *dW, float *losses, const ct_bf16 *x,
                                    const ct_bf16 *W, const int32_t *targets, int N, int C, int V, float softcap,
                                    float loss_weight, float *z_scratch, ct_bf16 *dz_scratch, int chunk,
                                    cudaStream_t stream);
int cuda_logits_ce_forward(cublasHandle_t handle, float *losses, const ct_bf16 *x, const ct_bf16 *W,
                           const int32_t *targets, int N, int C, int V, float softcap, float *z_scratch, int chunk,
                           cudaStream_t stream);

/* ---- optimizers (cuda_optim.cu) ---------------------------------------------------------------- */

/* cpu_adam_step's fp32 operations, element by element (explicit roundings, no contraction other than
 * the CPU's two fmaf), so from the same inputs p, m, v are bitwise the CPU's. The double
 * scalars (bias corrections, step size) are computed on the host exactly as adam_step does.
 * p_bf16 (may be NULL) receives bf16(new p) (the matrix-product shadow of the weight). */
int cuda_adam_step(float *p, ct_bf16 *p_bf16, const float *g, float *m, float *v, size_t n, double lr, double beta1,
                   double beta2, double eps, int64_t step, cudaStream_t stream);

/* Muon's update of one rows x cols matrix, cpu_muon_compute_update's semantics:
 *   buf = buf*mu + g; u = nesterov ? g + mu*buf : buf        (bitwise the CPU's lines)
 *   X = u / (||u||_F + 1e-7) (norm in double, fixed order), transposed when rows > cols
 *   ns_steps x: A = X X^T; B = b*A + c*A A; X = a*X + B X   (cuBLAS; bf16 operands and results
 *                                                          with fp32 accumulation as train_gpt.py,
 *                                                          or fp32 throughout when ns_fp32)
 *   update (fp32 [rows,cols]) = X (transposed back) * sqrt(max(1, rows/cols))
 * update may be grad itself (every element of grad is read before that element of update is
 * written): the backend puts each update in its gradient's place, where one sum across ranks
 * combines the sharded updates. */
typedef struct {
    float *update;
    const float *grad;
    float *momentum_buf;
    int rows, cols;
} CudaMuonMatrix;
/* The update of `count` matrices whose smaller and larger sides are the same (a [1024, 512]
 * and a [512, 1024] matrix may share a batch): the momentum lines and normalisation per
 * matrix, the Newton–Schulz products of all of them batched (one cuda_gemm_batched per
 * product), each result scaled into its update. A matrix's result depends on the batch count
 * (cuBLAS may choose another kernel), not on the other members' values.
 * scratch: cuda_muon_scratch_bytes(rows, cols, count) bytes (16-byte aligned), for either
 * precision; partials: cuda_reduce_doubles(largest rows*cols) + 1 doubles. */
size_t cuda_muon_scratch_bytes(int rows, int cols, int count);
int cuda_muon_update_batch(cublasHandle_t handle, const CudaMuonMatrix *mats, int count, double momentum,
                           int nesterov, int ns_steps, int ns_fp32, void *scratch, double *partials,
                           cudaStream_t stream);
/* One matrix: cuda_muon_update_batch with count 1 (scratch: cuda_muon_scratch_bytes(rows, cols, 1)). */
int cuda_muon_update(cublasHandle_t handle, float *update, const float *grad, float *momentum_buf, int rows, int cols,
                     double momentum, int nesterov, int ns_steps, int ns_fp32, void *scratch, double *partials,
                     cudaStream_t stream);
/* For a matrix whose update another rank computes (sharded Muon): buf = buf*mu + g, bitwise
 * cpu_muon_momentum_advance, then g = +0. */
int cuda_muon_momentum_advance(float *grad, float *momentum_buf, size_t n, double momentum, cudaStream_t stream);
/* p = fmaf(update, -lr, p) (cpu_muon_apply_update); p_bf16 (may be NULL) = bf16(new p). */
int cuda_muon_apply(float *p, ct_bf16 *p_bf16, const float *update, size_t n, double lr, cudaStream_t stream);

/* Global-norm clipping over one contiguous gradient buffer of n floats: norm = sqrt(fixed-order
 * double sum of squares) into *norm (device double), coef = cpu_clip_grad_coef(norm, max_norm)
 * computed on the device in the CPU's fp32 operations, g *= coef. partials:
 * cuda_reduce_doubles(n) + 1 doubles. */
int cuda_clip_grad_norm(float *g, size_t n, double max_norm, double *norm, double *partials, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* CT_HAVE_CUDA */
#endif
