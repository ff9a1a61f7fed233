/* cuda_bigram.cu — the record's bigram hash embedding's own ops: the token-pair hash and the
 * scalar-scaled add of the branch, forward and backward (see cuda_bigram.h; the pair of
 * cpu_bigram.c). The hash is the CPU's integer arithmetic, so the buckets are the same; the add
 * spells out the CPU's fp32 roundings (__fmul_rn/__fadd_rn). dscale is one sum over every
 * element: per-block double partials of a grid-stride pass whose grid depends on n only (the
 * block count of cuda_sum, cuda_reduce_doubles), then one block adds them in a fixed tree. */
#include "cuda_bigram.h"
#include "cuda_common.cuh"

static __global__ void bigram_hash_kernel(int32_t *buckets, const int32_t *ids, int T, int32_t mod, size_t N) {
    for (size_t n = (size_t)blockIdx.x * blockDim.x + threadIdx.x; n < N; n += (size_t)gridDim.x * blockDim.x) {
        if (n % (size_t)T == 0) {
            buckets[n] = mod;
            continue;
        }
        /* torch's int32 products wrap: multiply as unsigned, then read the bits as signed */
        const int32_t a = (int32_t)(36313u * (uint32_t)ids[n]), b = (int32_t)(27191u * (uint32_t)ids[n - 1]);
        int32_t r = (a ^ b) % mod; /* C's remainder takes the dividend's sign; torch's the divisor's */
        if (r < 0) r += mod;
        buckets[n] = r;
    }
}

extern "C" int cuda_bigram_hash(int32_t *buckets, const int32_t *ids, int B, int T, int num_buckets,
                                cudaStream_t stream) {
    const size_t N = (size_t)B * T;
    if (N == 0) return 0;
    if (num_buckets < 2) return ct_fail("bigram_hash: %d buckets; at least 2 are needed", num_buckets);
    bigram_hash_kernel<<<ct_grid_1d(N, 256), 256, 0, stream>>>(buckets, ids, T, (int32_t)(num_buckets - 1), N);
    CT_LAUNCHED("bigram_hash", stream);
    return 0;
}

template <typename BranchT>
static __global__ void add_scalar_scaled_forward_kernel(float *out, const float *x, const BranchT *branch,
                                                        const float *scale, size_t n) {
    const float s = *scale;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = __fadd_rn(x[i], __fmul_rn(as_f32(branch[i]), s));
}

extern "C" int cuda_add_scalar_scaled_forward(float *out, const float *x, const float *branch,
                                              const ct_bf16 *branch_bf16, const float *scale, size_t n,
                                              cudaStream_t stream) {
    if (n == 0) return 0;
    if ((branch == NULL) == (branch_bf16 == NULL))
        return ct_fail("add_scalar_scaled_forward: exactly one of the fp32 and bf16 branches must be given");
    if (branch)
        add_scalar_scaled_forward_kernel<float><<<ct_grid_1d(n, 256), 256, 0, stream>>>(out, x, branch, scale, n);
    else
        add_scalar_scaled_forward_kernel<__nv_bfloat16><<<ct_grid_1d(n, 256), 256, 0, stream>>>(
            out, x, host_as_bf(branch_bf16), scale, n);
    CT_LAUNCHED("add_scalar_scaled_forward", stream);
    return 0;
}

extern "C" size_t cuda_add_scalar_scaled_backward_partials_doubles(size_t n) { return cuda_reduce_doubles(n); }

enum { SCALED_THREADS = 256 };

template <typename BranchT>
static __global__ void __launch_bounds__(SCALED_THREADS)
    add_scalar_scaled_backward_kernel(float *dbranch, __nv_bfloat16 *dbranch_bf16, double *partials,
                                      const float *dout, const BranchT *branch, const float *scale, size_t n) {
    __shared__ double scratch[SCALED_THREADS / 32];
    const float s = *scale;
    double acc = 0.0;
    for (size_t i = (size_t)blockIdx.x * SCALED_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * SCALED_THREADS) {
        const float d = dout[i], v = __fmul_rn(d, s);
        acc += (double)d * (double)as_f32(branch[i]);
        if (dbranch) dbranch[i] = __fadd_rn(dbranch[i], v);
        if (dbranch_bf16) dbranch_bf16[i] = to_bf16(v);
    }
    acc = block_sum_d<SCALED_THREADS>(acc, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

static __global__ void __launch_bounds__(SCALED_THREADS)
    add_scalar_scaled_finish_kernel(float *dscale, const double *partials, int n_partials) {
    __shared__ double scratch[SCALED_THREADS / 32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partials; i += SCALED_THREADS) acc += partials[i];
    acc = block_sum_d<SCALED_THREADS>(acc, scratch);
    if (threadIdx.x == 0) *dscale = __fadd_rn(*dscale, (float)acc);
}

extern "C" int cuda_add_scalar_scaled_backward(float *dbranch, ct_bf16 *dbranch_bf16, float *dscale,
                                               const float *dout, const float *branch, const ct_bf16 *branch_bf16,
                                               const float *scale, size_t n, double *partials, cudaStream_t stream) {
    if (n == 0) return 0;
    if ((branch == NULL) == (branch_bf16 == NULL))
        return ct_fail("add_scalar_scaled_backward: exactly one of the fp32 and bf16 branches must be given");
    const unsigned blocks = (unsigned)cuda_reduce_doubles(n);
    if (branch)
        add_scalar_scaled_backward_kernel<float><<<blocks, SCALED_THREADS, 0, stream>>>(
            dbranch, host_as_bf(dbranch_bf16), partials, dout, branch, scale, n);
    else
        add_scalar_scaled_backward_kernel<__nv_bfloat16><<<blocks, SCALED_THREADS, 0, stream>>>(
            dbranch, host_as_bf(dbranch_bf16), partials, dout, host_as_bf(branch_bf16), scale, n);
    CT_LAUNCHED("add_scalar_scaled_backward", stream);
    add_scalar_scaled_finish_kernel<<<1, SCALED_THREADS, 0, stream>>>(dscale, partials, (int)blocks);
    CT_LAUNCHED("add_scalar_scaled_finish", stream);
    return 0;
}
