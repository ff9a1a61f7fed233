/* backend_cuda_stubs.c — the CUDA backend in a build without CUDA (nvcc was not found at build
 * time): every function of backend_cuda.h exists, and those that would use a GPU fail with a
 * message saying how to get one. */
#include "backend_cuda.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

#ifndef CT_HAVE_CUDA

static int no_cuda(void) {
    return ct_fail("device = cuda: this ctrain was built without CUDA (nvcc was not found at build time); "
                   "rebuild with CUDA_HOME pointing at a CUDA toolkit, or use device=cpu");
}
int backend_cuda_create(Backend **out, const Config *cfg, TrainState *st) {
    (void)out, (void)cfg, (void)st;
    return no_cuda();
}
int backend_cuda_visible(char *why, size_t cap) {
    snprintf(why, cap, "this ctrain was built without CUDA");
    return 0;
}
int backend_cuda_choose_gpu(BackendGpu *gpu) {
    (void)gpu;
    return no_cuda();
}
int backend_cuda_sync_to_host(Backend *b) {
    (void)b;
    return no_cuda();
}
int backend_cuda_sync_from_host(Backend *b) {
    (void)b;
    return no_cuda();
}
void backend_cuda_set_ns_fp32(Backend *b, int on) { (void)b, (void)on; }
float *backend_cuda_device_grads(Backend *b) {
    (void)b;
    return NULL;
}
void backend_cuda_graph_counts(Backend *b, long long *captures, long long *launches) {
    (void)b;
    *captures = *launches = 0;
}
void *backend_cuda_stream(Backend *b) {
    (void)b;
    return NULL;
}
int backend_cuda_memory(Backend *b, CudaMemoryReport *report) {
    (void)b;
    memset(report, 0, sizeof *report);
    return no_cuda();
}
void backend_cuda_describe(Backend *b, char *buf, size_t cap) {
    (void)b;
    snprintf(buf, cap, "cuda: not built");
}

#endif /* !CT_HAVE_CUDA */
