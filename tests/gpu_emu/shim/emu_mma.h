/* emu_mma.h — tests/gpu_emu: host stand-ins for the warp-level instructions of
 * kernels/cuda/cuda_mma.cuh (run.sh force-includes this file; cuda_mma.cuh leaves them out under
 * CT_GPU_EMU). Each moves the data exactly as the PTX ISA specifies (which lane holds which
 * element of an mma fragment, which lane's address an ldmatrix row comes from, the transposed
 * variant, cp.async's zero fill), so the kernels' fragment and tile indexing is checked on the
 * CPU. The lanes exchange their operands through g_xbuf between two warp barriers, like the
 * emulated shuffles: every lane of the warp must reach the call (as on a GPU, where these are
 * .aligned warp-wide instructions). The mma's products are summed in double and added to the
 * fp32 accumulator once: the exact product sum rounded once, not a real tensor core's rounding.
 * cp.async copies at once (commit/wait are no-ops): ordering then comes from the kernels'
 * barriers alone. */
#pragma once
#include "cuda_runtime_api.h"
#include "emu_device.h"

struct bf16x2 {
    __nv_bfloat16 x, y;
};
static inline bf16x2 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)}; }

/* Large enough for every kernel's dynamic shared memory (the H100's per-block maximum). */
#define EMU_DYNAMIC_SMEM_BYTES (227 * 1024)
#define CT_DYNAMIC_SMEM(name) alignas(16) static unsigned char name[EMU_DYNAMIC_SMEM_BYTES]

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename F>
static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int bytes) {
    return bytes <= EMU_DYNAMIC_SMEM_BYTES ? cudaSuccess : cudaErrorInvalidValue;
}

/* Every lane's `mine`, in lane order, to every lane of the calling warp. */
template <typename T>
static inline void emu_warp_gather(const T &mine, T (&all)[32]) {
    static_assert(sizeof(T) <= sizeof(g_xbuf[0]), "emu_warp_gather: value too large");
    const int t = emu_tid(), w = t / 32;
    memcpy(g_xbuf[t].data(), &mine, sizeof(T));
    g_wb[w]->arrive_and_wait();
    for (int i = 0; i < 32; i++) memcpy(&all[i], g_xbuf[w * 32 + i].data(), sizeof(T));
    g_wb[w]->arrive_and_wait();
}

static inline float emu_half(const bf16x2 &v, int hi) { return __bfloat162float(hi ? v.y : v.x); }

static inline void mma_16816(float (&d)[4], const bf16x2 (&a)[4], const bf16x2 (&b)[2]) {
    struct Frag {
        bf16x2 a[4], b[2];
    } mine, all[32];
    for (int i = 0; i < 4; i++) mine.a[i] = a[i];
    mine.b[0] = b[0];
    mine.b[1] = b[1];
    emu_warp_gather(mine, all);
    const int lane = emu_tid() % 32, g = lane >> 2, t = lane & 3;
    /* A[r][c] sits in lane (r%8)*4 + (c%8)/2, register (r/8) + 2*(c/8), half c%2;
     * B[k][n] in lane n*4 + (k%8)/2, register k/8, half k%2 */
    auto A = [&](int r, int c) { return emu_half(all[(r & 7) * 4 + ((c & 7) >> 1)].a[(r >> 3) + 2 * (c >> 3)], c & 1); };
    auto B = [&](int k, int n) { return emu_half(all[n * 4 + ((k & 7) >> 1)].b[k >> 3], k & 1); };
    for (int i = 0; i < 4; i++) {
        const int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
        double acc = 0.0;
        for (int k = 0; k < 16; k++) acc += (double)A(r, k) * (double)B(k, c);
        d[i] = (float)((double)d[i] + acc);
    }
}

static inline void ldsm_x4(bf16x2 (&r)[4], const __nv_bfloat16 *row) {
    const __nv_bfloat16 *all[32];
    emu_warp_gather(row, all);
    const int lane = emu_tid() % 32;
    for (int i = 0; i < 4; i++) {
        const __nv_bfloat16 *p = all[8 * i + (lane >> 2)];
        r[i] = {p[2 * (lane & 3)], p[2 * (lane & 3) + 1]};
    }
}

static inline void ldsm_x4_trans(bf16x2 (&r)[4], const __nv_bfloat16 *row) {
    const __nv_bfloat16 *all[32];
    emu_warp_gather(row, all);
    const int lane = emu_tid() % 32;
    for (int i = 0; i < 4; i++)
        r[i] = {all[8 * i + 2 * (lane & 3)][lane >> 2], all[8 * i + 2 * (lane & 3) + 1][lane >> 2]};
}

static inline void cp_async_16(__nv_bfloat16 *dst, const __nv_bfloat16 *src, bool valid) {
    for (int i = 0; i < 8; i++) dst[i] = valid ? src[i] : __nv_bfloat16{};
}
static inline void cp_async_commit() {}
template <int N>
static inline void cp_async_wait() {}
