/* emu_runtime.cpp — host implementations of the CUDA runtime and cuBLAS subset ctrain uses, for
 * tests/gpu_emu: "device" memory is host memory (filled with 0xA5 garbage on allocation, never
 * zeros), streams and events are synchronous, cublasGemmEx is a reference column-major GEMM with
 * fp32 accumulation and cuBLAS's leading-dimension checks. Stream capture records what is queued
 * on the capturing stream (kernels: every launch, since emu_launch does not see its stream) and a
 * graph launch replays it; synchronising a capturing stream fails and spoils the capture, as on a
 * GPU. */
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>
#include "cuda_runtime_api.h"
#include "cublas_v2.h"
#include "emu_device.h"

static std::map<void *, size_t> allocs;
static size_t allocated = 0;
static const size_t TOTAL = (size_t)80 << 30;
struct emu_stream { int dummy; };
struct emu_graph { std::vector<std::function<void()>> ops; };
struct emu_graph_exec { std::vector<std::function<void()>> ops; };
static cudaStream_t capture_stream;  /* the stream being captured, or null */
static emu_graph *capture_graph;
static bool capture_spoiled;         /* an illegal call happened during the capture */
static cudaError_t last_error = cudaSuccess;
static cudaError_t fail(cudaError_t e) { last_error = e; return e; }
bool emu_capture_record(std::function<void()> op) {
    if (!capture_stream) return false;
    if (capture_spoiled) last_error = cudaErrorStreamCaptureInvalidated;
    else capture_graph->ops.push_back(std::move(op));
    return true;
}
extern "C" {
cudaError_t cudaGetDeviceCount(int *n) { *n = getenv("EMU_NO_DEVICE") ? 0 : 1; return *n ? cudaSuccess : cudaErrorNoDevice; }
/* the emulated machine has a driver (EMU_NO_DEVICE: a driver without devices) */
cudaError_t cudaDriverGetVersion(int *version) { *version = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int *version) { *version = 13000; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p); strcpy(p->name, "host emulator"); p->major = 9; p->minor = 0; p->totalGlobalMem = TOTAL; p->multiProcessorCount = 1; return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (!bytes) bytes = 1;
    size_t sz = (bytes + 255) & ~(size_t)255;
    *p = aligned_alloc(256, sz);
    if (!*p) return cudaErrorMemoryAllocation;
    /* poison like fresh device memory could be: garbage, not zeros */
    memset(*p, 0xA5, sz);
    allocs[*p] = sz; allocated += sz; return cudaSuccess;
}
cudaError_t cudaFree(void *p) { if (!p) return cudaSuccess; auto it = allocs.find(p); if (it == allocs.end()) return cudaErrorInvalidValue; allocated -= it->second; allocs.erase(it); free(p); return cudaSuccess; }
cudaError_t cudaMallocHost(void **p, size_t bytes) { *p = malloc(bytes ? bytes : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { *f = TOTAL - allocated; *t = TOTAL; return cudaSuccess; }
/* what is queued on s: recorded while s captures, else run now */
static bool recorded(cudaStream_t s, std::function<void()> op) { return s && s == capture_stream && emu_capture_record(std::move(op)); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = new emu_stream; return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s && s == capture_stream) { capture_spoiled = true; return fail(cudaErrorStreamCaptureUnsupported); }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (capture_stream) { capture_spoiled = true; return fail(cudaErrorStreamCaptureUnsupported); }
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t st) {
    if (!recorded(st, [=] { memmove(d, s, n); })) memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t st) {
    if (!recorded(st, [=] { memset(d, v, n); })) memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { cudaError_t e = last_error; last_error = cudaSuccess; return e; }
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorStreamCaptureUnsupported ? "operation not permitted when stream is capturing"
         : e == cudaErrorStreamCaptureInvalidated ? "operation failed due to a previous error during capture" : "emulated error";
}
const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorStreamCaptureUnsupported ? "cudaErrorStreamCaptureUnsupported"
         : e == cudaErrorStreamCaptureInvalidated ? "cudaErrorStreamCaptureInvalidated" : "cudaErrorEmulated";
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || capture_stream) return fail(cudaErrorInvalidValue);
    capture_stream = s; capture_graph = new emu_graph; capture_spoiled = false; return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    if (!s || s != capture_stream) return fail(cudaErrorInvalidValue);
    capture_stream = nullptr;
    if (capture_spoiled) { delete capture_graph; capture_graph = nullptr; *graph = nullptr; return fail(cudaErrorStreamCaptureInvalidated); }
    *graph = capture_graph; capture_graph = nullptr; return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long) {
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new emu_graph_exec{graph->ops}; return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return fail(cudaErrorInvalidValue);
    if (!recorded(s, [=] { for (auto &op : exec->ops) op(); })) for (auto &op : exec->ops) op();
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t graph) { delete graph; return cudaSuccess; }
struct emu_event { std::chrono::steady_clock::time_point t; };
cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new emu_event; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) { e->t = std::chrono::steady_clock::now(); return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count(); return cudaSuccess; }

struct emu_cublas { cudaStream_t s; };
cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = new emu_cublas{nullptr}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->s = s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void *, size_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetVersion(cublasHandle_t, int *version) { *version = 130000; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t, cublasAtomicsMode_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetPointerMode(cublasHandle_t, cublasPointerMode_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error"; }
static float ld(const void *p, cudaDataType_t t, size_t i) {
    if (t == CUDA_R_16BF) { __nv_bfloat16 h; memcpy(&h, (const char *)p + sizeof h * i, sizeof h); return __bfloat162float(h); }
    return ((const float *)p)[i];
}
static void st(void *p, cudaDataType_t t, size_t i, float v) {
    if (t == CUDA_R_16BF) { __nv_bfloat16 h = __float2bfloat16_rn(v); memcpy((char *)p + sizeof h * i, &h, sizeof h); }
    else ((float *)p)[i] = v;
}
/* column-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, fp32 accumulation (cuBLAS-like),
 * with the argument checks cuBLAS does. */
static void gemm_now(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float a, const void *A,
                     cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, float b, void *C,
                     cudaDataType_t ct, int ldc);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t, cublasGemmAlgo_t) {
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) { fprintf(stderr, "emu gemm: bad lda\n"); return CUBLAS_STATUS_INVALID_VALUE; }
    if (ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) { fprintf(stderr, "emu gemm: bad ldb\n"); return CUBLAS_STATUS_INVALID_VALUE; }
    if (ldc < (m > 1 ? m : 1)) { fprintf(stderr, "emu gemm: bad ldc\n"); return CUBLAS_STATUS_INVALID_VALUE; }
    if (at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the host-pointer-mode scalars are read now, as cuBLAS does when a capture records the call */
    const float a = *(const float *)alpha, b = *(const float *)beta;
    if (!recorded(h->s, [=] { gemm_now(ta, tb, m, n, k, a, A, at, lda, B, bt, ldb, b, C, ct, ldc); }))
        gemm_now(ta, tb, m, n, k, a, A, at, lda, B, bt, ldb, b, C, ct, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
static void gemm_now(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float a, const void *A,
                     cudaDataType_t at, int lda, const void *B, cudaDataType_t bt, int ldb, float b, void *C,
                     cudaDataType_t ct, int ldc) {
    std::vector<float> out((size_t)m * n);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0;
            for (int p = 0; p < k; p++) {
                float x = ta == CUBLAS_OP_N ? ld(A, at, (size_t)i + (size_t)p * lda) : ld(A, at, (size_t)p + (size_t)i * lda);
                float y = tb == CUBLAS_OP_N ? ld(B, bt, (size_t)p + (size_t)j * ldb) : ld(B, bt, (size_t)j + (size_t)p * ldb);
                acc = fmaf(x, y, acc);
            }
            float r = a * acc;
            if (b != 0.0f) r += b * ld(C, ct, (size_t)i + (size_t)j * ldc);
            out[(size_t)i + (size_t)j * m] = r;
        }
    for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) st(C, ct, (size_t)i + (size_t)j * ldc, out[(size_t)i + (size_t)j * m]);
}
/* batch products, each cublasGemmEx's, at the given element strides */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
                                          long long stride_a, const void *B, cudaDataType_t bt, int ldb,
                                          long long stride_b, const void *beta, void *C, cudaDataType_t ct, int ldc,
                                          long long stride_c, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
    if (batch < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* a bf16 element's size as ld/st see it: 4 bytes in the exact-bf16 mode, which holds fp32 */
    const size_t e16 = sizeof(__nv_bfloat16);
    const size_t ea = at == CUDA_R_16BF ? e16 : 4, eb = bt == CUDA_R_16BF ? e16 : 4, ec = ct == CUDA_R_16BF ? e16 : 4;
    for (int b = 0; b < batch; b++) {
        cublasStatus_t r = cublasGemmEx(h, ta, tb, m, n, k, alpha, (const char *)A + (size_t)b * stride_a * ea, at, lda,
                                        (const char *)B + (size_t)b * stride_b * eb, bt, ldb, beta,
                                        (char *)C + (size_t)b * stride_c * ec, ct, ldc, compute, algo);
        if (r != CUBLAS_STATUS_SUCCESS) return r;
    }
    return CUBLAS_STATUS_SUCCESS;
}
}
