/* cuda_fake_quant.cu — int6 per-row straight-through fake quantization (cuda_fake_quant.h; the
 * CPU version is kernels/cpu/cpu_fake_quant.c). One block per row: the row's max |w| (fmaxf is
 * exact, so the order of the block reduction cannot change it), then each element with the CPU's
 * fp32 roundings spelled out (__fdiv_rn, rintf = round half to even, __fmul_rn, __fsub_rn,
 * __fadd_rn). */
#include "cuda_common.cuh"
#include "cuda_fake_quant.h"

enum { FAKE_QUANT_BLOCK = 256 };

static __global__ void fake_quant_int6_rows_kernel(float *dst, __nv_bfloat16 *dst_bf16, const float *src, int cols) {
    __shared__ float scratch[FAKE_QUANT_BLOCK / 32];
    const size_t row = (size_t)blockIdx.x * cols;
    const float *w = src + row;
    float row_max = 0.0f;
    for (int c = threadIdx.x; c < cols; c += FAKE_QUANT_BLOCK) row_max = fmaxf(row_max, fabsf(w[c]));
    row_max = block_max<FAKE_QUANT_BLOCK>(row_max, scratch);
    const float min_scale = (float)(1.0 / 31.0);
    float scale = __fdiv_rn(row_max, 31.0f);
    scale = scale < min_scale ? min_scale : scale;
    for (int c = threadIdx.x; c < cols; c += FAKE_QUANT_BLOCK) {
        float q = rintf(__fdiv_rn(w[c], scale));
        q = q < -32.0f ? -32.0f : q > 31.0f ? 31.0f : q;
        const float w_q = __fmul_rn(q, scale);
        const float w_ste = __fadd_rn(w[c], __fsub_rn(w_q, w[c]));
        if (dst) dst[row + c] = w_ste;
        if (dst_bf16) dst_bf16[row + c] = to_bf16(w_ste);
    }
}

extern "C" int cuda_fake_quant_int6_rows(float *dst, ct_bf16 *dst_bf16, const float *src, int rows, int cols,
                                         cudaStream_t stream) {
    if (!dst && !dst_bf16) return ct_fail("fake_quant_int6_rows: no output given");
    if ((const void *)dst == (const void *)src) return ct_fail("fake_quant_int6_rows: dst must not alias src");
    if (rows <= 0 || cols <= 0) return 0;
    fake_quant_int6_rows_kernel<<<rows, FAKE_QUANT_BLOCK, 0, stream>>>(dst, host_as_bf(dst_bf16), src, cols);
    CT_LAUNCHED("fake_quant_int6_rows", stream);
    return 0;
}
