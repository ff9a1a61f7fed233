/* cuda_weights.cu — weight decay, the EMA and SWA's sum on the device (cuda_weights.h; the CPU
 * versions are kernels/cpu/cpu_weights.c). The lines spell out the CPU's fp32 roundings
 * (__fmul_rn/__fadd_rn, fmaf where the CPU uses fmaf) so nvcc cannot contract them otherwise. */
#include "cuda_common.cuh"
#include "cuda_weights.h"

static __global__ void weight_decay_kernel(float *p, size_t n, float f) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __fmul_rn(p[i], f);
}

extern "C" int cuda_weight_decay(float *p, size_t n, double factor, cudaStream_t stream) {
    if (n == 0) return 0;
    weight_decay_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(p, n, (float)factor);
    CT_LAUNCHED("weight_decay", stream);
    return 0;
}

static __global__ void ema_update_kernel(float *ema, const float *w, size_t n, float d, float one_minus_d) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        ema[i] = fmaf(w[i], one_minus_d, __fmul_rn(ema[i], d));
}

extern "C" int cuda_ema_update(float *ema, const float *w, size_t n, double decay, cudaStream_t stream) {
    if (n == 0) return 0;
    ema_update_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(ema, w, n, (float)decay, (float)(1.0 - decay));
    CT_LAUNCHED("ema_update", stream);
    return 0;
}

static __global__ void swa_add_kernel(float *sum, const float *w, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sum[i] = __fadd_rn(sum[i], w[i]);
}

extern "C" int cuda_swa_add(float *sum, const float *w, size_t n, int start, cudaStream_t stream) {
    if (n == 0) return 0;
    if (start) /* a copy, as the CPU's memcpy: keeps -0.0, which 0 + -0.0 would not */
        return cuda_check(cudaMemcpyAsync(sum, w, n * sizeof(float), cudaMemcpyDeviceToDevice, stream),
                          "swa_add: copy of the first snapshot");
    swa_add_kernel<<<ct_grid_1d(n, 256), 256, 0, stream>>>(sum, w, n);
    CT_LAUNCHED("swa_add", stream);
    return 0;
}
