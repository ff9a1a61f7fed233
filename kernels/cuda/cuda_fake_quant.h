/* cuda_fake_quant.h — late QAT's int6 per-row straight-through fake quantization on the device
 * (cuda_fake_quant.cu), the pair of cpu_fake_quant.c: the weights a training forward uses for a
 * linear layer while QAT is on. The reference semantics (the record's CastedLinear with its QAT
 * switch on) are in cpu_fake_quant.h; every element is computed with the CPU's fp32 operations
 * and roundings, so the fp32 result is bitwise the CPU's.
 * C-callable; the conventions of every CUDA op are in cuda_ops.h. */
#ifndef CT_CUDA_FAKE_QUANT_H
#define CT_CUDA_FAKE_QUANT_H

#include "cuda_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* w_ste of src [rows x cols] (row-major, cpu_fake_quant_int6_rows) into dst (fp32, may be NULL)
 * and dst_bf16 (bf16(w_ste), may be NULL: the CUDA backend's matrix-product shadow); at least
 * one of them, neither aliasing src. */
int cuda_fake_quant_int6_rows(float *dst, ct_bf16 *dst_bf16, const float *src, int rows, int cols,
                              cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
