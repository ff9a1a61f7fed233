/* cuda_optim.cu — Adam, Muon (momentum, Newton–Schulz on cuBLAS, scale, apply), SGD and global-norm
 * clipping on the device (see cuda_optim.h; the CPU versions are kernels/cpu/cpu_optim*.c). The
 * element-wise lines spell out the CPU's fp32 roundings (__fmul_rn/__fadd_rn, fmaf where the
 * CPU uses fmaf) so nvcc cannot contract them differently; their scalars come from the host,
 * computed as the CPU computes them. Nothing here synchronises with the host: norms stay on the
 * device and the kernels that need them read them there. */
#include <math.h>

#include "ns5.h"
#include "cuda_common.cuh"
#include "cuda_gemm.h"
#include "cuda_optim.h"

/* ---- Adam ---- */

static __global__ void adam_kernel(float *p, __nv_bfloat16 *p_bf16, const float *g, float *m, float *v, size_t n,
                                   float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                                   float bc2_sqrt, float eps, float neg_step_size) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float grad = g[i];
        const float m_new = fmaf(grad, one_minus_beta1, __fmul_rn(m[i], beta1));
        const float v_new = fmaf(__fmul_rn(one_minus_beta2, grad), grad, __fmul_rn(v[i], beta2));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v_new), bc2_sqrt), eps);
        const float p_new = __fadd_rn(p[i], __fdiv_rn(__fmul_rn(neg_step_size, m_new), denom));
        m[i] = m_new;
        v[i] = v_new;
        p[i] = p_new;
        if (p_bf16) p_bf16[i] = to_bf16(p_new);
    }
}

extern "C" int cuda_adam_step(float *p, ct_bf16 *p_bf16, const float *g, float *m, float *v, size_t n,
                              const CudaAdamHyper *h, cudaStream_t stream) {
    const double lr = h->lr, beta1 = h->beta1, beta2 = h->beta2, eps = h->eps;
    const int64_t step = h->step;
    if (n == 0) return 0;
    if (step < 1) return ct_fail("cuda adam: step must be >= 1, got %lld", (long long)step);
    /* cpu_adam_step's scalars, in the same double expressions and fp32 roundings */
    const double bias_correction1 = 1.0 - pow(beta1, (double)step);
    const double bias_correction2 = 1.0 - pow(beta2, (double)step);
    const double step_size = lr / bias_correction1;
    adam_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(p, host_as_bf(p_bf16), g, m, v, n, (float)beta1,
                                                        (float)(1.0 - beta1), (float)beta2, (float)(1.0 - beta2),
                                                        (float)sqrt(bias_correction2), (float)eps, (float)(-step_size));
    CT_LAUNCHED("adam_step", stream);
    return 0;
}

/* ---- SGD ---- */

/* cpu_sgd_step's line: the momentum line is an explicit product then add (two roundings, as
 * the CPU's buf[i] * momentum_f + d, which GCC does not contract: -ffp-contract=off), the two
 * alpha adds fmaf as torch's. */
static __global__ void sgd_kernel(float *p, __nv_bfloat16 *p_bf16, float *buf, const float *g, size_t n, float wd,
                                  float momentum, float neg_lr, int decay, int use_momentum, int first) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float d = decay ? fmaf(p[i], wd, g[i]) : g[i];
        if (use_momentum) {
            d = first ? d : __fadd_rn(__fmul_rn(buf[i], momentum), d);
            buf[i] = d;
        }
        const float p_new = fmaf(d, neg_lr, p[i]);
        p[i] = p_new;
        if (p_bf16) p_bf16[i] = to_bf16(p_new);
    }
}

extern "C" int cuda_sgd_step(float *p, ct_bf16 *p_bf16, float *buf, const float *g, size_t n, double lr,
                             double momentum, double wd, int first, cudaStream_t stream) {
    if (n == 0) return 0;
    if (!p || !g || (momentum != 0.0 && !buf))
        return ct_fail("cuda sgd: p and g are required, and buf with momentum %g", momentum);
    /* cpu_sgd_step's scalars: the same (float) casts of the doubles */
    sgd_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(p, host_as_bf(p_bf16), buf, g, n, (float)wd, (float)momentum,
                                                       (float)(-lr), wd != 0.0, momentum != 0.0, first);
    CT_LAUNCHED("sgd_step", stream);
    return 0;
}

/* ---- Muon ---- */

static __global__ void muon_momentum_kernel(float *u, float *buf, const float *g, size_t n, float mu, int nesterov) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float grad = g[i];
        const float b = __fadd_rn(__fmul_rn(buf[i], mu), grad);
        buf[i] = b;
        u[i] = nesterov ? fmaf(b, mu, grad) : b;
    }
}

/* A matrix whose update another rank computes: only its momentum moves (the same operations as
 * muon_momentum_kernel's buf line), and its gradient slot becomes +0, this rank's share of the
 * sum that combines the updates. */
static __global__ void muon_momentum_advance_kernel(float *g, float *buf, size_t n, float mu) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        buf[i] = __fadd_rn(__fmul_rn(buf[i], mu), g[i]);
        g[i] = 0.0f;
    }
}

extern "C" int cuda_muon_momentum_advance(float *grad, float *momentum_buf, size_t n, double momentum,
                                          cudaStream_t stream) {
    if (n == 0) return 0;
    muon_momentum_advance_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(grad, momentum_buf, n, (float)momentum);
    CT_LAUNCHED("muon_momentum_advance", stream);
    return 0;
}

template <typename T>
static __device__ __forceinline__ T convert_to(float x);
template <>
__device__ __forceinline__ float convert_to<float>(float x) {
    return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 convert_to<__nv_bfloat16>(float x) {
    return to_bf16(x);
}
static __device__ __forceinline__ float convert_from(float x) { return x; }
static __device__ __forceinline__ float convert_from(__nv_bfloat16 x) { return from_bf16(x); }

/* value -> value / divisor (when norm_sq) -> value * scale (when apply_scale), converted.
 * divisor = (float)sqrt(*norm_sq) + NS5_EPS, cpu_newton_schulz5's fp32 expression. */
static __device__ __forceinline__ float ns_transform(float x, const double *norm_sq, float scale, int apply_scale) {
    if (norm_sq) x = __fdiv_rn(x, __fadd_rn((float)sqrt(*norm_sq), NS5_EPS));
    if (apply_scale) x = __fmul_rn(x, scale);
    return x;
}

/* dst[i] = transform(src[i]) over n elements. */
template <typename TI, typename TO>
static __global__ void ns_copy_kernel(TO *dst, const TI *src, size_t n, const double *norm_sq, float scale,
                                      int apply_scale) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = convert_to<TO>(ns_transform(convert_from(src[i]), norm_sq, scale, apply_scale));
}

/* dst [c x r] = transform(src [r x c])^T through 32 x 32 shared tiles; block (32, 8). */
template <typename TI, typename TO>
static __global__ void ns_transpose_kernel(TO *dst, const TI *src, int r, int c, const double *norm_sq, float scale,
                                           int apply_scale) {
    __shared__ float tile[32][33];
    const int j0 = blockIdx.x * 32, i0 = blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int i = i0 + k, j = j0 + threadIdx.x;
        if (i < r && j < c) tile[k][threadIdx.x] = convert_from(src[(size_t)i * c + j]);
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        const int j = j0 + k, i = i0 + threadIdx.x;
        if (i < r && j < c)
            dst[(size_t)j * r + i] = convert_to<TO>(ns_transform(tile[threadIdx.x][k], norm_sq, scale, apply_scale));
    }
}

/* dst = transform(src), transposed when `transpose` (src is r x c). */
template <typename TI, typename TO>
static int ns_convert(TO *dst, const TI *src, int r, int c, int transpose, const double *norm_sq, float scale,
                      int apply_scale, cudaStream_t stream) {
    if (transpose) {
        dim3 grid(ct_blocks((size_t)c, 32), ct_blocks((size_t)r, 32)), block(32, 8);
        ns_transpose_kernel<TI, TO><<<grid, block, 0, stream>>>(dst, src, r, c, norm_sq, scale, apply_scale);
        CT_LAUNCHED("muon_transpose", stream);
    } else {
        const size_t n = (size_t)r * c;
        ns_copy_kernel<TI, TO><<<ct_grid_1d(n, 256), 256, 0, stream>>>(dst, src, n, norm_sq, scale, apply_scale);
        CT_LAUNCHED("muon_convert", stream);
    }
    return 0;
}

static size_t align256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

extern "C" size_t cuda_muon_scratch_bytes(int rows, int cols, int count) {
    const size_t m = (size_t)(rows < cols ? rows : cols), n = (size_t)(rows < cols ? cols : rows);
    /* two X buffers [count x m x n] and the Gram and polynomial matrices [count x m x m],
     * fp32-sized (bf16 uses the first half of each) */
    return 2 * align256((size_t)count * m * n * sizeof(float)) + 2 * align256((size_t)count * m * m * sizeof(float));
}

/* The Newton–Schulz iterations on `count` matrices X [m x n] (m <= n) of element type `type`,
 * stored one after the other; returns the buffer holding the results (one of x0 / x1). Each
 * product is one batched product over the count matrices. */
static void *ns_iterate(cublasHandle_t handle, void *x0, void *x1, void *gram, void *poly, int m, int n, int count,
                        int steps, int polar_express, int type, cudaStream_t stream, int *rc) {
    const size_t esize = type == CT_BF16 ? sizeof(__nv_bfloat16) : sizeof(float);
    const long long mn = (long long)m * n, mm = (long long)m * m;
    void *x_cur = x0, *x_next = x1;
    *rc = -1;
    steps = ns_iterations(polar_express, steps);
    for (int s = 0; s < steps; s++) {
        float a, b, c; /* ns5.h: the quintic's, or Polar Express's triple s */
        ns_coefficients(polar_express, s, &a, &b, &c);
        /* A = X X^T */
        if (cuda_gemm_batched(handle, 0, 1, m, m, n, 1.0f, x_cur, type, n, mn, x_cur, type, n, mn, 0.0f, gram, type, m,
                              mm, count) != 0)
            return x_cur;
        /* B = b*A + c*(A A): start from A, the product's beta applies b */
        if (cuda_check(cudaMemcpyAsync(poly, gram, (size_t)(count * mm) * esize, cudaMemcpyDeviceToDevice, stream),
                       "muon: copy of the Gram matrices") != 0)
            return x_cur;
        if (cuda_gemm_batched(handle, 0, 0, m, m, m, c, gram, type, m, mm, gram, type, m, mm, b, poly, type, m, mm,
                              count) != 0)
            return x_cur;
        /* X = a*X + B X */
        if (cuda_check(cudaMemcpyAsync(x_next, x_cur, (size_t)(count * mn) * esize, cudaMemcpyDeviceToDevice, stream),
                       "muon: copy of X") != 0)
            return x_cur;
        if (cuda_gemm_batched(handle, 0, 0, m, n, m, 1.0f, poly, type, m, mm, x_cur, type, n, mn, a, x_next, type, n,
                              mn, count) != 0)
            return x_cur;
        void *t = x_cur;
        x_cur = x_next;
        x_next = t;
    }
    *rc = 0;
    return x_cur;
}

/* MuonEq-R (cpu_muon_row_normalize, bitwise): 8 threads per row, thread k summing the squares
 * of the row's elements k mod 8 in order in double (the CPU's lane k), the lanes combined
 * ((0+1)+(2+3))+((4+5)+(6+7)) through shuffles within the 8; explicit roundings, no contraction. */
enum { ROW_NORM_LANES = 8 };
static __global__ void muon_row_normalize_kernel(float *u, int rows, int cols) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = t / ROW_NORM_LANES, k = t % ROW_NORM_LANES;
    float *row = u + (size_t)(r < rows ? r : 0) * cols;
    double lane = 0.0;
    if (r < rows)
        for (int j = k; j < cols; j += ROW_NORM_LANES)
            lane = __dadd_rn(lane, __dmul_rn((double)row[j], (double)row[j]));
    /* every thread of the warp takes part in the shuffles; groups of 8 never straddle a row */
    const double pair = __dadd_rn(lane, __shfl_xor_sync(0xffffffffu, lane, 1)); /* (0+1), (2+3), ... */
    const double quad = __dadd_rn(pair, __shfl_xor_sync(0xffffffffu, pair, 2)); /* (0+1)+(2+3), ... */
    const double sum = __dadd_rn(quad, __shfl_xor_sync(0xffffffffu, quad, 4));
    if (r >= rows) return;
    const float norm = (float)sqrt(sum);
    const float divisor = norm < NS_ROW_NORM_EPS ? NS_ROW_NORM_EPS : norm; /* clamp_min: NaN stays NaN */
    for (int j = k; j < cols; j += ROW_NORM_LANES) row[j] = __fdiv_rn(row[j], divisor);
}

extern "C" int cuda_muon_row_normalize(float *u, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0 || cols > CUDA_MUON_ROW_NORM_MAX_COLS)
        return ct_fail("cuda muon row normalize: %d x %d (rows of 1 to %d elements)", rows, cols,
                       CUDA_MUON_ROW_NORM_MAX_COLS);
    const size_t threads = (size_t)rows * ROW_NORM_LANES;
    muon_row_normalize_kernel<<<ct_grid_1d(threads, 256), 256, 0, stream>>>(u, rows, cols);
    CT_LAUNCHED("muon_row_normalize", stream);
    return 0;
}

static int side_min(const CudaMuonMatrix *a) { return a->rows < a->cols ? a->rows : a->cols; }
static int side_max(const CudaMuonMatrix *a) { return a->rows < a->cols ? a->cols : a->rows; }

/* The momentum lines of matrix a, its norm, and X = u / (norm + eps) (transposed when tall) into
 * slot x of the batch, in the iteration's precision. */
template <typename TX>
static int muon_prepare(const CudaMuonMatrix *a, TX *x, double momentum, int nesterov, int flags, double *partials,
                        cudaStream_t stream) {
    const size_t n_el = (size_t)a->rows * a->cols;
    muon_momentum_kernel<<<ct_grid_1d(n_el, 256), 256, 0, stream>>>(a->update, a->momentum_buf, a->grad, n_el,
                                                                    (float)momentum, nesterov ? 1 : 0);
    CT_LAUNCHED("muon_momentum", stream);
    if ((flags & CT_MUON_ROW_NORMALIZE) && cuda_muon_row_normalize(a->update, a->rows, a->cols, stream) != 0)
        return -1;
    /* ||u||_F^2 in double, fixed order, kept on the device after the partials (read by the
     * conversion queued next, so one slot serves every matrix of the batch) */
    double *norm_sq = partials + cuda_reduce_doubles(n_el);
    if (cuda_sumsq(norm_sq, a->update, n_el, partials, stream) != 0) return -1;
    /* train_gpt.py: g = g.bfloat16() / (norm + eps) then .T; here the division is fp32 and the
     * result is rounded once */
    return ns_convert<float, TX>(x, a->update, a->rows, a->cols, a->rows > a->cols, norm_sq, 1.0f, 0, stream);
}

/* update = slot x transposed back when tall, times sqrt(rows / cols) when that is above 1. */
template <typename TX>
static int muon_finish(const CudaMuonMatrix *a, const TX *x, cudaStream_t stream) {
    const double aspect = (double)a->rows / (double)a->cols;
    const int apply_scale = aspect > 1.0;
    const float scale = apply_scale ? (float)pow(aspect, 0.5) : 1.0f;
    return ns_convert<TX, float>(a->update, x, side_min(a), side_max(a), a->rows > a->cols, NULL, scale, apply_scale,
                                 stream);
}

template <typename TX>
static int muon_batch(cublasHandle_t handle, const CudaMuonMatrix *mats, int count, double momentum, int nesterov,
                      int ns_steps, int flags, int type, void *scratch, double *partials, cudaStream_t stream) {
    const int m = side_min(&mats[0]), n = side_max(&mats[0]);
    const size_t mn = (size_t)m * n;
    char *base = (char *)scratch;
    TX *x0 = (TX *)base, *x1 = (TX *)(base + align256((size_t)count * mn * sizeof(float)));
    void *gram = base + 2 * align256((size_t)count * mn * sizeof(float));
    void *poly = (char *)gram + align256((size_t)count * m * m * sizeof(float));
    for (int k = 0; k < count; k++)
        if (muon_prepare<TX>(&mats[k], x0 + k * mn, momentum, nesterov, flags, partials, stream) != 0) return -1;
    int rc = 0;
    const TX *x = (const TX *)ns_iterate(handle, x0, x1, gram, poly, m, n, count, ns_steps,
                                         (flags & CT_MUON_POLAR_EXPRESS) != 0, type, stream, &rc);
    if (rc != 0)
        return ct_fail_prefix("muon Newton-Schulz (%s, %d matrices of %d x %d)", type == CT_BF16 ? "bf16" : "fp32",
                              count, m, n);
    for (int k = 0; k < count; k++)
        if (muon_finish<TX>(&mats[k], x + k * mn, stream) != 0) return -1;
    return 0;
}

extern "C" int cuda_muon_update_batch(cublasHandle_t handle, const CudaMuonMatrix *mats, int count, double momentum,
                                      int nesterov, int ns_steps, int flags, int ns_fp32, void *scratch,
                                      double *partials, cudaStream_t stream) {
    if (count < 1) return ct_fail("cuda muon: a batch of %d matrices", count);
    if (ns_steps < 0) return ct_fail("cuda muon: ns_steps %d", ns_steps);
    for (int k = 0; k < count; k++) {
        const CudaMuonMatrix *a = &mats[k];
        if (a->rows <= 0 || a->cols <= 0) return ct_fail("cuda muon: bad shape %d x %d", a->rows, a->cols);
        if (side_min(a) != side_min(&mats[0]) || side_max(a) != side_max(&mats[0]))
            return ct_fail("cuda muon: a %d x %d matrix in a batch of %d x %d matrices", a->rows, a->cols,
                           mats[0].rows, mats[0].cols);
    }
    if (ns_fp32) return muon_batch<float>(handle, mats, count, momentum, nesterov, ns_steps, flags, CT_F32, scratch,
                                          partials, stream);
    return muon_batch<__nv_bfloat16>(handle, mats, count, momentum, nesterov, ns_steps, flags, CT_BF16, scratch,
                                     partials, stream);
}

extern "C" int cuda_muon_update(cublasHandle_t handle, const CudaMuonMatrix *matrix, double momentum, int nesterov,
                                int ns_steps, int flags, int ns_fp32, void *scratch, double *partials,
                                cudaStream_t stream) {
    return cuda_muon_update_batch(handle, matrix, 1, momentum, nesterov, ns_steps, flags, ns_fp32, scratch, partials,
                                  stream);
}

static __global__ void muon_apply_kernel(float *p, __nv_bfloat16 *p_bf16, const float *update, size_t n,
                                         float neg_lr) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float p_new = fmaf(update[i], neg_lr, p[i]);
        p[i] = p_new;
        if (p_bf16) p_bf16[i] = to_bf16(p_new);
    }
}

extern "C" int cuda_muon_apply(float *p, ct_bf16 *p_bf16, const float *update, size_t n, double lr,
                               cudaStream_t stream) {
    if (n == 0) return 0;
    muon_apply_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(p, host_as_bf(p_bf16), update, n, (float)-lr);
    CT_LAUNCHED("muon_apply", stream);
    return 0;
}

/* ---- clipping ---- */

static __global__ void clip_scale_kernel(float *g, size_t n, const double *sum_sq, double *norm, float max_norm) {
    const double total_norm = sqrt(*sum_sq);
    /* cpu_clip_grad_coef: clamp((1 / ((float)norm + 1e-6f)) * max_norm, max = 1); NaN stays NaN */
    const float shifted = __fadd_rn((float)total_norm, 1e-6f);
    float coef = __fmul_rn(__fdiv_rn(1.0f, shifted), max_norm);
    coef = coef > 1.0f ? 1.0f : coef;
    if (blockIdx.x == 0 && threadIdx.x == 0) *norm = total_norm;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] = __fmul_rn(g[i], coef);
}

extern "C" int cuda_clip_grad_norm(float *g, size_t n, double max_norm, double *norm, double *partials,
                                   cudaStream_t stream) {
    double *sum_sq = partials + cuda_reduce_doubles(n);
    if (cuda_sumsq(sum_sq, g, n, partials, stream) != 0) return -1;
    clip_scale_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(g, n, sum_sq, norm, (float)max_norm);
    CT_LAUNCHED("clip_grad_scale", stream);
    return 0;
}
