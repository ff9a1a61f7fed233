/* cuda_mma.cuh — the warp-level tensor-core and asynchronous-copy instructions the attention
 * kernels use, each behind a small device function so that the host emulator (tests/gpu_emu,
 * shim/emu_mma.h) can stand in for it with the instruction's exact data movement. Only this file
 * holds inline PTX. Layouts are PTX ISA's ("Matrix fragments for mma.m16n8k16 with floating point
 * type", "ldmatrix"); g = lane / 4 and t = lane % 4 below.
 *
 *   mma_16816     D (16x8 fp32) += A (16x16 bf16, row-major) B (16x8 bf16, column-major).
 *                 A regs: {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]};
 *                 B regs: {B[2t..][g], B[2t+8..][g]}; D: {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}.
 *   ldsm_x4       four 8x8 bf16 matrices from shared memory; lanes 8i..8i+7 give the row addresses
 *                 of matrix i (16 bytes each); register i of lane l = matrix i, row l/4, cols 2(l%4)..+1.
 *   ldsm_x4_trans the same matrices transposed: register i = matrix i, rows 2(l%4)..+1, col l/4.
 *   cp_async_16   16 bytes global -> shared without passing through registers; zero-filled when
 *                 !valid (rows past the sequence). commit/wait group the copies of one stage. */
#ifndef CT_CUDA_MMA_CUH
#define CT_CUDA_MMA_CUH

#include "cuda_common.cuh"

#ifndef CT_GPU_EMU /* the host emulator brings its own (tests/gpu_emu/run.sh force-includes emu_mma.h) */

typedef __nv_bfloat162 bf16x2;

static __device__ __forceinline__ uint32_t bf16x2_bits(const bf16x2 &v) {
    return *reinterpret_cast<const uint32_t *>(&v);
}

static __device__ __forceinline__ void mma_16816(float (&d)[4], const bf16x2 (&a)[4], const bf16x2 (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(bf16x2_bits(a[0])), "r"(bf16x2_bits(a[1])), "r"(bf16x2_bits(a[2])), "r"(bf16x2_bits(a[3])),
                   "r"(bf16x2_bits(b[0])), "r"(bf16x2_bits(b[1])));
}

static __device__ __forceinline__ void ldsm_x4(bf16x2 (&r)[4], const __nv_bfloat16 *row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    uint32_t *o = reinterpret_cast<uint32_t *>(r);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(o[0]), "=r"(o[1]), "=r"(o[2]), "=r"(o[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldsm_x4_trans(bf16x2 (&r)[4], const __nv_bfloat16 *row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    uint32_t *o = reinterpret_cast<uint32_t *>(r);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(o[0]), "=r"(o[1]), "=r"(o[2]), "=r"(o[3])
                 : "r"(addr));
}

/* 8 bf16 (16 bytes) from src to dst; dst is filled with zeros (src not read) when !valid. src
 * must be a valid address either way. */
static __device__ __forceinline__ void cp_async_16(__nv_bfloat16 *dst, const __nv_bfloat16 *src, bool valid) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(dst);
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Wait until at most N of this thread's committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif /* !CT_GPU_EMU */

/* Two fp32 values as one bf16x2 register (lo in the low half), round-to-nearest-even. */
static __device__ __forceinline__ bf16x2 pack_bf16x2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }

#endif
