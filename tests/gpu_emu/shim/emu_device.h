/* emu_device.h — device-side emulation for tests/gpu_emu: every CUDA thread of a block is a
 * std::thread, blocks run one after another; __syncthreads is a block-wide std::barrier and a
 * shuffle is an exchange between two warp-wide barriers, so a shuffle that not every lane of the
 * warp reaches deadlocks here instead of silently misbehaving. __shared__ becomes `static`
 * (one block at a time). Device math is the host's (glibc expf/tanhf, IEEE fp32). */
#pragma once
#include <array>
#include <barrier>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct float2 { float x, y; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
#ifdef EMU_EXACT_BF16
/* "bf16" that keeps the full fp32 value: isolates the wiring from bf16 rounding */
struct __nv_bfloat16 { float v; };
#else
struct __nv_bfloat16 { uint16_t v; };
#endif
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
inline std::unique_ptr<std::barrier<>> g_bb;
inline std::vector<std::unique_ptr<std::barrier<>>> g_wb;
inline std::vector<double> g_xch;
inline std::vector<std::array<unsigned char, 64>> g_xbuf; /* per-thread slot of the warp-wide gathers (emu_mma.h) */
inline void __syncthreads() { g_bb->arrive_and_wait(); }
inline int emu_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
template <typename T> inline T __shfl_xor_sync(unsigned, T v, int m) {
    int t = emu_tid(), w = t / 32, lane = t % 32;
    g_xch[t] = (double)v;
    g_wb[w]->arrive_and_wait();
    T r = (T)g_xch[w * 32 + (lane ^ m)];
    g_wb[w]->arrive_and_wait();
    return r;
}
#ifdef EMU_EXACT_BF16
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {f}; }
static inline float __bfloat162float(__nv_bfloat16 h) { return h.v; }
#else
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u); return {(uint16_t)(u >> 16)};
}
static inline float __bfloat162float(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.v << 16; float f; memcpy(&f, &u, 4); return f; }
#endif
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
static inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
template <class A, class B> static inline std::common_type_t<A, B> min(A a, B b) { return a < b ? a : b; }
template <class A, class B> static inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }
/* Stream capture (emu_runtime.cpp): while a capture is open, op is kept for the graph instead of
 * being run (returns true); otherwise returns false and the caller runs it now. */
bool emu_capture_record(std::function<void()> op);
/* grid blocks run one after another on one pool of blockDim threads; a thread that returns
 * early leaves the block's barriers (as exited CUDA threads count as arrived). */
template <typename F> void emu_launch(dim3 grid, dim3 block, F f) {
    /* f holds its kernel's arguments by value (launch_to_cpp.py), as a captured CUDA launch does */
    if (emu_capture_record([=] { emu_launch(grid, block, f); })) return;
    gridDim = grid; blockDim = block;
    const int nt = (int)(block.x * block.y * block.z);
    const size_t nb = (size_t)grid.x * grid.y * grid.z;
    if ((int)g_xch.size() < nt) g_xch.resize(nt);
    if ((int)g_xbuf.size() < nt) g_xbuf.resize(nt);
    size_t cur = 0;
    auto setup = [&]() noexcept {
        g_bb.reset(new std::barrier<>(nt));
        g_wb.clear();
        for (int w = 0; w < (nt + 31) / 32; w++) g_wb.emplace_back(new std::barrier<>(nt - 32 * w < 32 ? nt - 32 * w : 32));
    };
    std::barrier<decltype(setup)> start(nt, setup);
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++) th.emplace_back([&, t] {
        threadIdx = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
        for (size_t b = 0; b < nb; b++) {
            start.arrive_and_wait();
            blockIdx = dim3((unsigned)(b % grid.x), (unsigned)((b / grid.x) % grid.y), (unsigned)(b / ((size_t)grid.x * grid.y)));
            f();
            g_wb[t / 32]->arrive_and_drop();
            g_bb->arrive_and_drop();
        }
        (void)cur;
    });
    for (auto &x : th) x.join();
}
