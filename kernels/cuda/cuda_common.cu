/* cuda_common.cu — error checking, conversions, element-wise helpers and the fixed-order
 * reductions shared by the CUDA backend (see cuda_common.h). cuda_add_inplace adds along the
 * residual stream, so its kernel is templated on the stream's element type (fp32 or bf16,
 * cuda_common.cuh). */
#include <stdlib.h>

#include "cuda_common.cuh"

#define CT_STR_(...) #__VA_ARGS__
#define CT_STR(...) CT_STR_(__VA_ARGS__)
#ifdef __CUDA_ARCH_LIST__
#define CT_ARCHS_TEXT "compute capabilities " CT_STR(__CUDA_ARCH_LIST__)
#else
#define CT_ARCHS_TEXT "(unknown)"
#endif

static int debug_sync = -1; /* -1: not read from the environment yet */

extern "C" void cuda_set_debug_sync(int on) { debug_sync = on ? 1 : 0; }

extern "C" int cuda_check(cudaError_t status, const char *what) {
    if (status == cudaSuccess) return 0;
    return ct_fail("%s: %s (%s)", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

extern "C" int cuda_check_cublas(cublasStatus_t status, const char *what) {
    if (status == CUBLAS_STATUS_SUCCESS) return 0;
    return ct_fail("%s: cuBLAS error %s (%d)", what, cublasGetStatusString(status), (int)status);
}

extern "C" int cuda_debug_sync_on(void) {
    if (debug_sync < 0) {
        const char *env = getenv("CT_CUDA_DEBUG_SYNC");
        debug_sync = env && env[0] == '1';
    }
    return debug_sync;
}

extern "C" int cuda_check_launch(const char *kernel, cudaStream_t stream) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return ct_fail("CUDA kernel %s: launch failed: %s (%s)", kernel, cudaGetErrorString(e), cudaGetErrorName(e));
    if (cuda_debug_sync_on()) {
        e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess)
            return ct_fail("CUDA kernel %s: failed while running: %s (%s)", kernel, cudaGetErrorString(e),
                           cudaGetErrorName(e));
    }
    return 0;
}

static __global__ void probe_kernel(int *out) {
    if (out) *out = 1;
}

extern "C" int cuda_probe_kernels(cudaStream_t stream) {
    probe_kernel<<<1, 1, 0, stream>>>(nullptr);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e == cudaSuccess) return 0;
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
        return ct_fail("device = cuda: this build has CUDA kernels for %s only, which cannot run on this GPU (%s); "
                       "rebuild with CUDA_ARCHS set for it",
                       CT_ARCHS_TEXT, cudaGetErrorString(e));
    return ct_fail("device = cuda: a test kernel failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- elementwise helpers ---- */

static __global__ void f32_to_bf16_kernel(__nv_bfloat16 *out, const float *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_bf16(in[i]);
}
static __global__ void bf16_to_f32_kernel(float *out, const __nv_bfloat16 *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_bf16(in[i]);
}
/* S: the residual stream's element type (cuda_common.cuh, "the residual stream's storage"): the
 * sum in fp32, rounded once where stored. */
template <typename S>
static __global__ void add_inplace_kernel(S *y, const S *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        F32V<1> v = ld_stream<S, 1>(y + i);
        v.v[0] = v.v[0] + ld_stream<S, 1>(x + i).v[0];
        st_stream<S, 1>(y + i, v);
    }
}
static __global__ void round_bf16_inplace_kernel(float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = round_stream<__nv_bfloat16>(x[i]);
}
static __global__ void scale_inplace_kernel(float *x, float s, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

extern "C" int cuda_f32_to_bf16(ct_bf16 *out, const float *in, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    f32_to_bf16_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(host_as_bf(out), in, n);
    CT_LAUNCHED("f32_to_bf16", stream);
    return 0;
}

extern "C" int cuda_bf16_to_f32(float *out, const ct_bf16 *in, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    bf16_to_f32_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(out, host_as_bf(in), n);
    CT_LAUNCHED("bf16_to_f32", stream);
    return 0;
}

extern "C" int cuda_add_inplace(void *y, const void *x, size_t n, int dtype, cudaStream_t stream) {
    if (n == 0) return 0;
    if (dtype == CT_BF16)
        add_inplace_kernel<__nv_bfloat16><<<ct_grid_1d(n, 256), 256, 0, stream>>>(stream_ptr<__nv_bfloat16>(y),
                                                                                  stream_ptr<__nv_bfloat16>(x), n);
    else
        add_inplace_kernel<float><<<ct_grid_1d(n, 256), 256, 0, stream>>>(stream_ptr<float>(y), stream_ptr<float>(x), n);
    CT_LAUNCHED("add_inplace", stream);
    return 0;
}

extern "C" int cuda_round_bf16_inplace(float *x, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    round_bf16_inplace_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(x, n);
    CT_LAUNCHED("round_bf16_inplace", stream);
    return 0;
}

extern "C" int cuda_scale_inplace(float *x, float s, size_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    scale_inplace_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(x, s, n);
    CT_LAUNCHED("scale_inplace", stream);
    return 0;
}

/* ---- fixed-order sums ---- */

enum { REDUCE_THREADS = 256, REDUCE_MAX_BLOCKS = 1024, REDUCE_MIN_PER_BLOCK = 4096 };

static unsigned reduce_blocks(size_t n) {
    size_t b = (n + REDUCE_MIN_PER_BLOCK - 1) / REDUCE_MIN_PER_BLOCK;
    if (b > REDUCE_MAX_BLOCKS) b = REDUCE_MAX_BLOCKS;
    return (unsigned)(b ? b : 1);
}

extern "C" size_t cuda_reduce_doubles(size_t n) { return reduce_blocks(n); }

template <bool SQUARE>
static __global__ void __launch_bounds__(REDUCE_THREADS) reduce_partial_kernel(double *partials, const float *x,
                                                                                size_t n) {
    __shared__ double scratch[REDUCE_THREADS / 32];
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * REDUCE_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * REDUCE_THREADS) {
        const double v = x[i];
        acc += SQUARE ? v * v : v;
    }
    acc = block_sum_d<REDUCE_THREADS>(acc, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

static __global__ void __launch_bounds__(REDUCE_THREADS) reduce_finish_kernel(double *out, const double *partials,
                                                                               int n) {
    __shared__ double scratch[REDUCE_THREADS / 32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += REDUCE_THREADS) acc += partials[i];
    acc = block_sum_d<REDUCE_THREADS>(acc, scratch);
    if (threadIdx.x == 0) *out = acc;
}

template <bool SQUARE>
static int reduce(double *out, const float *x, size_t n, double *partials, cudaStream_t stream, const char *name) {
    const unsigned blocks = reduce_blocks(n);
    reduce_partial_kernel<SQUARE><<<blocks, REDUCE_THREADS, 0, stream>>>(partials, x, n);
    CT_LAUNCHED(name, stream);
    reduce_finish_kernel<<<1, REDUCE_THREADS, 0, stream>>>(out, partials, (int)blocks);
    CT_LAUNCHED("reduce_finish", stream);
    return 0;
}

extern "C" int cuda_sum(double *out, const float *x, size_t n, double *partials, cudaStream_t stream) {
    return reduce<false>(out, x, n, partials, stream, "reduce_sum");
}

extern "C" int cuda_sumsq(double *out, const float *x, size_t n, double *partials, cudaStream_t stream) {
    return reduce<true>(out, x, n, partials, stream, "reduce_sumsq");
}

/* ---- column sums ---- */

extern "C" size_t cuda_colsum_doubles(int N, int C, int n_sums) {
    return (size_t)colsum_chunks(N) * (size_t)n_sums * (size_t)C;
}

static __global__ void __launch_bounds__(32 * COLSUM_TY) colsum_partial_kernel(double *partials, const float *a,
                                                                                const float *b, int N, int C) {
    __shared__ double sh[COLSUM_TY][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * CUDA_COLSUM_ROWS;
    const int r1 = min(N, r0 + CUDA_COLSUM_ROWS);
    double acc = 0.0;
    if (c < C) {
        for (int r = r0 + (int)threadIdx.y; r < r1; r += COLSUM_TY) {
            const size_t i = (size_t)r * C + c;
            acc += b ? (double)a[i] * (double)b[i] : (double)a[i];
        }
    }
    const double total = colsum_block_reduce(acc, sh);
    if (threadIdx.y == 0 && c < C) partials[(size_t)blockIdx.y * C + c] = total;
}

static __global__ void colsum_finish_kernel(float *g, const double *partials, int n_chunks, int width) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= width) return;
    double total = 0.0;
    for (int k = 0; k < n_chunks; k++) total += partials[(size_t)k * width + j];
    g[j] = g[j] + (float)total;
}

int colsum_finish(float *g, const double *partials, int n_chunks, int width, cudaStream_t stream) {
    colsum_finish_kernel<<<ct_blocks((size_t)width, 128), 128, 0, stream>>>(g, partials, n_chunks, width);
    CT_LAUNCHED("colsum_finish", stream);
    return 0;
}

extern "C" int cuda_colsum(float *g, const float *a, const float *b, int N, int C, double *partials,
                           cudaStream_t stream) {
    if (N <= 0 || C <= 0) return 0;
    dim3 grid(ct_blocks((size_t)C, 32), (unsigned)colsum_chunks(N)), block(32, COLSUM_TY);
    colsum_partial_kernel<<<grid, block, 0, stream>>>(partials, a, b, N, C);
    CT_LAUNCHED("colsum_partial", stream);
    return colsum_finish(g, partials, colsum_chunks(N), C, stream);
}
