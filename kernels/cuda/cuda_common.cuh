/* cuda_common.cuh — device helpers shared by the kernels/cuda/cuda_*.cu files: bf16 conversion,
 * wide (vector) row accesses, deterministic warp/block reductions, launch checking. Private to
 * the CUDA sources; the C-callable declarations are in the family headers (cuda_<family>.h). */
#ifndef CT_CUDA_COMMON_CUH
#define CT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <initializer_list>

extern "C" {
#include "common.h"
}
#include "cuda_common.h"

#define CT_FULL_MASK 0xffffffffu

#ifndef CT_GPU_EMU /* the host emulator brings its own (tests/gpu_emu/shim/emu_mma.h) */
/* Dynamic shared memory of a kernel, for those that need more than the 48 KB static limit. */
#define CT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* Return -1 from the calling launcher if the launch failed (cuda_check_launch sets the message). */
#define CT_LAUNCHED(kernel, stream)                                                                \
    do {                                                                                           \
        if (cuda_check_launch((kernel), (stream)) != 0) return -1;                                 \
    } while (0)

#define CT_CUDA_TRY(call, what)                                                                    \
    do {                                                                                           \
        if (cuda_check((call), (what)) != 0) return -1;                                            \
    } while (0)

static __device__ __forceinline__ __nv_bfloat16 *as_bf(ct_bf16 *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }
static __device__ __forceinline__ const __nv_bfloat16 *as_bf(const ct_bf16 *p) {
    return reinterpret_cast<const __nv_bfloat16 *>(p);
}
static inline __nv_bfloat16 *host_as_bf(ct_bf16 *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }
static inline const __nv_bfloat16 *host_as_bf(const ct_bf16 *p) { return reinterpret_cast<const __nv_bfloat16 *>(p); }

static __device__ __forceinline__ __nv_bfloat16 to_bf16(float x) { return __float2bfloat16_rn(x); }
static __device__ __forceinline__ float from_bf16(__nv_bfloat16 x) { return __bfloat162float(x); }

/* V consecutive elements as one access (16 bytes for 4 floats or 8 bf16): the wide loads and
 * stores of the memory-bound kernels. The pointer must be aligned to the access size. */
template <int V>
struct alignas(4 * V) F32V {
    float v[V];
};
template <int V>
struct alignas(2 * V) Bf16V {
    __nv_bfloat16 v[V];
};
template <int V>
static __device__ __forceinline__ F32V<V> ld_vec(const float *p) {
    return *reinterpret_cast<const F32V<V> *>(p);
}
template <int V>
static __device__ __forceinline__ void st_vec(float *p, const F32V<V> &x) {
    *reinterpret_cast<F32V<V> *>(p) = x;
}
template <int V>
static __device__ __forceinline__ Bf16V<V> ld_vec(const __nv_bfloat16 *p) {
    return *reinterpret_cast<const Bf16V<V> *>(p);
}
template <int V>
static __device__ __forceinline__ void st_vec(__nv_bfloat16 *p, const Bf16V<V> &x) {
    *reinterpret_cast<Bf16V<V> *>(p) = x;
}

/* An fp32 or bf16 element as fp32, for kernels that read either. */
static __device__ __forceinline__ float as_f32(float x) { return x; }
static __device__ __forceinline__ float as_f32(__nv_bfloat16 x) { return from_bf16(x); }

/* Rows are walked V channels at a time (ld_vec/st_vec above): 16-byte fp32 accesses
 * when V = 4 (rows of C % 4 == 0 channels in 16-byte aligned buffers: every row the backend
 * has), so a warp moves 512 bytes per instruction; V = 1 otherwise. Lane l handles channels
 * V*l + 32*V*k. */
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
/* 4 when every row of C channels in these buffers (NULL ones ignored) can take V = 4 accesses. */
static inline int row_vector_width(int C, std::initializer_list<const void *> buffers) {
    if (C % 4 != 0) return 1;
    for (const void *p : buffers)
        if (p && !aligned16(p)) return 1;
    return 4;
}

/* x + scale * bf16 branch, the residual add of the attention and MLP outputs, V channels: one
 * definition, so that every kernel that recomputes x1 = xm + attn_scale * ao instead of reading
 * it from memory gets the bits add_norm_forward got (cuda_rmsnorm.cu, cuda_scaled_add.cu). */
template <int V>
static __device__ __forceinline__ F32V<V> add_scaled(const F32V<V> &x, const F32V<V> &scale, const Bf16V<V> &branch) {
    F32V<V> y;
#pragma unroll
    for (int e = 0; e < V; e++) y.v[e] = __fadd_rn(x.v[e], __fmul_rn(scale.v[e], from_bf16(branch.v[e])));
    return y;
}

/* sigmoid(z) = 1 / (1 + e), e = expf(-z) taken as exp in double rounded once to fp32: the
 * correctly rounded value, which is what glibc's expf gives (within its 0.502-ulp bound) on the
 * CPU side; CUDA's own expf is 2 ulp. The gates' sigmoid (SmearGate, skip gates). */
static __device__ __forceinline__ float sigmoid_f32(float z) {
    const float e = (float)exp(-(double)z);
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
}
/* torch.lerp's evaluation (cpu_lerp): start + w*(end - start) for w < 0.5, else
 * end - (end - start)*(1 - w), fp32 with explicit roundings */
static __device__ __forceinline__ float lerp_f32(float start, float end, float w) {
    const float diff = __fsub_rn(end, start);
    return w < 0.5f ? __fadd_rn(start, __fmul_rn(w, diff)) : __fsub_rn(end, __fmul_rn(diff, __fsub_rn(1.0f, w)));
}

/* ---- the residual stream's storage (residual_dtype, docs/cuda.md "Residual stream") ----
 * The kernels over the residual stream (cuda_rmsnorm.cu, cuda_scaled_add.cu,
 * cuda_residual_mix.cu, cuda_add_inplace) take its element type S as a template parameter:
 * float, or __nv_bfloat16 as train_gpt.py keeps its stream. With S = __nv_bfloat16: stream
 * values are widened to fp32 where they are loaded (ld_stream), the arithmetic is fp32, the
 * control tensors that scale or mix the stream (resid_mix, attn_scale, mlp_scale,
 * skip_weights) are rounded to bf16 first (ld_control: train_gpt.py's `.to(dtype=x.dtype)`),
 * and every stream value is rounded once where it is stored (st_stream) and also where a
 * kernel recomputes a stored value instead of reading it (round_stream: x_in, xm, x1, a norm
 * backward's g), so that a recomputation gives the stored bits. With S = float every helper
 * below is the identity or the plain access: the fp32 kernels' bits. */
template <typename S>
static __device__ __forceinline__ float round_stream(float x) {
    if constexpr (sizeof(S) == sizeof(float)) return x; /* float (or the exact-bf16 emulation's "bf16") */
    else return from_bf16(to_bf16(x));
}
template <typename S, int V>
static __device__ __forceinline__ F32V<V> round_stream_v(F32V<V> x) {
#pragma unroll
    for (int e = 0; e < V; e++) x.v[e] = round_stream<S>(x.v[e]);
    return x;
}
template <typename S, int V>
static __device__ __forceinline__ F32V<V> ld_stream(const S *p) {
    if constexpr (sizeof(S) == sizeof(float)) {
        return ld_vec<V>(reinterpret_cast<const float *>(p));
    } else {
        const Bf16V<V> h = ld_vec<V>(p);
        F32V<V> y;
#pragma unroll
        for (int e = 0; e < V; e++) y.v[e] = from_bf16(h.v[e]);
        return y;
    }
}
template <typename S, int V>
static __device__ __forceinline__ void st_stream(S *p, const F32V<V> &x) {
    if constexpr (sizeof(S) == sizeof(float)) {
        st_vec<V>(reinterpret_cast<float *>(p), x);
    } else {
        Bf16V<V> h;
#pragma unroll
        for (int e = 0; e < V; e++) h.v[e] = to_bf16(x.v[e]);
        st_vec<V>(p, h);
    }
}
/* A control tensor (fp32 parameter) as the stream of type S sees it. */
template <typename S, int V>
static __device__ __forceinline__ F32V<V> ld_control(const float *p) {
    return round_stream_v<S, V>(ld_vec<V>(p));
}
/* x + scale * bf16 branch on a stream of type S: add_scaled (above), with scale as ld_control
 * gives it, rounded as stored. */
template <typename S, int V>
static __device__ __forceinline__ F32V<V> add_scaled_stream(const F32V<V> &x, const F32V<V> &scale,
                                                            const Bf16V<V> &branch) {
    return round_stream_v<S, V>(add_scaled<V>(x, scale, branch));
}
/* A launcher's `void *` stream tensor as the S * its kernel takes. */
template <typename S>
static inline S *stream_ptr(void *p) {
    return static_cast<S *>(p);
}
template <typename S>
static inline const S *stream_ptr(const void *p) {
    return static_cast<const S *>(p);
}
/* Launch a kernel templated <S, V> with the stream type of dtype (CT_F32, CT_BF16) and V = 4 or
 * 1: KERNEL_CALL(S, V) expands to the launch. */
#define CT_STREAM_DISPATCH(dtype, V, KERNEL_CALL)                                                  \
    do {                                                                                           \
        if ((dtype) == CT_BF16) {                                                                  \
            if ((V) == 4) KERNEL_CALL(__nv_bfloat16, 4);                                           \
            else KERNEL_CALL(__nv_bfloat16, 1);                                                    \
        } else {                                                                                   \
            if ((V) == 4) KERNEL_CALL(float, 4);                                                   \
            else KERNEL_CALL(float, 1);                                                            \
        }                                                                                          \
    } while (0)

/* Butterfly sums: every lane ends with the same bits (each step adds a pair that its partner
 * lane adds in the other order, and fp addition is commutative), in a fixed order. */
static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CT_FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CT_FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(CT_FULL_MASK, v, o));
    return v;
}

/* Block-wide reductions for blockDim.x == BLOCK (a multiple of 32, <= 1024), every thread
 * calling; the result is returned to every thread. scratch: BLOCK/32 entries of shared memory.
 * Fixed order: warp butterflies (WARP_OP), then warp 0 combines the warp results; identity pads
 * the lanes past the last warp. */
template <int BLOCK, typename T, T (*WARP_OP)(T)>
static __device__ __forceinline__ T block_reduce(T v, T *scratch, T identity) {
    constexpr int WARPS = BLOCK / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = WARP_OP(v);
    __syncthreads(); /* scratch may still be read by a previous call */
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    T t = lane < WARPS ? scratch[lane] : identity;
    t = WARP_OP(t);
    return t;
}
template <int BLOCK>
static __device__ __forceinline__ double block_sum_d(double v, double *scratch) {
    return block_reduce<BLOCK, double, warp_sum_d>(v, scratch, 0.0);
}
template <int BLOCK>
static __device__ __forceinline__ float block_max(float v, float *scratch) {
    return block_reduce<BLOCK, float, warp_max>(v, scratch, -INFINITY);
}

static inline unsigned ct_blocks(size_t n, unsigned per_block) {
    size_t b = (n + per_block - 1) / per_block;
    return (unsigned)(b ? b : 1);
}

/* Grid-stride launch shape of elementwise kernels: depends on n only. */
static inline unsigned ct_grid_1d(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b > 65535u * 8u) b = 65535u * 8u;
    return (unsigned)(b ? b : 1);
}

/* Second pass of the column reductions (cuda_colsum_doubles layout). */
int colsum_finish(float *g, const double *partials, int n_chunks, int width, cudaStream_t stream);
static inline int colsum_chunks(int N) { return (N + CUDA_COLSUM_ROWS - 1) / CUDA_COLSUM_ROWS; }
/* Column-reduction kernels use blocks of 32 channels x COLSUM_TY rows. */
#define COLSUM_TY 8

/* Sum of the COLSUM_TY per-row-lane accumulators of a (32 x COLSUM_TY) block in ty order, V
 * channels per thread (thread x holds channels V*x .. V*x + V-1 of the block's 32*V): each
 * channel's total adds its row lanes' accumulators in ty order whatever V is, so a kernel that
 * moves 4 channels per thread (16-byte accesses) sums in the order of one that moves 1. On
 * return acc holds the totals in the threads with ty == 0. sh: shared [COLSUM_TY][32*V]
 * doubles. Every thread calls. */
template <int V>
static __device__ __forceinline__ void colsum_block_reduce_v(double (&acc)[V], double (*sh)[32 * V]) {
#pragma unroll
    for (int e = 0; e < V; e++) sh[threadIdx.y][V * threadIdx.x + e] = acc[e];
    __syncthreads();
    if (threadIdx.y == 0) {
#pragma unroll
        for (int e = 0; e < V; e++) {
            double total = 0.0;
#pragma unroll
            for (int y = 0; y < COLSUM_TY; y++) total += sh[y][V * threadIdx.x + e];
            acc[e] = total;
        }
    }
    __syncthreads();
}
/* One channel per thread: the total, in the threads with ty == 0. sh: shared [COLSUM_TY][32]. */
static __device__ __forceinline__ double colsum_block_reduce(double acc, double (*sh)[32]) {
    double a[1] = {acc};
    colsum_block_reduce_v<1>(a, sh);
    return a[0];
}

#endif
