/* cuda_common.h — the CUDA infrastructure of kernels/cuda (cuda_common.cu), C-callable: ct_bf16,
 * launch and status checking, the kernel-image probe, bf16 conversion, and the fixed-order sums
 * and column sums the ops' parameter gradients use. Every family header (cuda_<family>.h)
 * includes it; cuda_ops.h has the conventions and includes them all. */
#ifndef CT_CUDA_COMMON_H
#define CT_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The storage of one bfloat16 (__nv_bfloat16 on the device), round-to-nearest-even from fp32.
 * (tests/gpu_emu/run.sh rewrites this line for its exact-bf16 mode.) */
typedef uint16_t ct_bf16;

/* Element types of the ops' typed buffers: cuda_gemm's operands, and the residual stream's
 * (residual_dtype: the ops that take a `dtype` read and write its tensors as fp32 or bf16; their
 * rounding points are in cuda_common.cuh, "the residual stream's storage"). */
enum { CT_F32 = 0, CT_BF16 = 1 };


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
/* y[i] += x[i], y and x of type dtype (CT_BF16: the sum in fp32, rounded once). */
int cuda_add_inplace(void *y, const void *x, size_t n, int dtype, cudaStream_t stream);
/* x[i] = float(bf16(x[i])): an fp32 buffer given the values a bf16 one would hold (the ends of
 * the bf16 residual stream kept in fp32 buffers: the embedding and its gradient). */
int cuda_round_bf16_inplace(float *x, size_t n, cudaStream_t stream);
/* x[i] *= s (cpu_scale's fp32 product: ln_scale's factor on a norm's output gradient). */
int cuda_scale_inplace(float *x, float s, size_t n, cudaStream_t stream);

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

#ifdef __cplusplus
}
#endif

#endif
