/* backend_cuda.h — the CUDA backend (backend_cuda*.c, whose private header backend_cuda_private.h
 * lists them; kernels in kernels/cuda/cuda_*.cu): the same model, graph and optimizers as the CPU
 * backend, on one NVIDIA GPU, with bf16 matrix products (fp32 accumulation) and fp32 everything
 * else (docs/cuda.md).
 *
 * State: the backend keeps its own device copies of the TrainState's fp32 buffers (params,
 * grads, exp_avg, exp_avg_sq, momentum; same flat layout, ParamInfo.offset) plus bf16 shadows of
 * the matrices used in products. After backend_cuda_create the DEVICE copy is authoritative; the
 * host TrainState buffers are only brought up to date by backend_cuda_sync_to_host (the host
 * adam_step counter is always current: optimizer_step increments it on the host).
 *
 * In builds without CUDA (no nvcc at build time) every function here exists and fails with a
 * message saying so. */
#ifndef CT_BACKEND_CUDA_H
#define CT_BACKEND_CUDA_H

#include <stddef.h>

#include "backend.h"

/* Creates the backend over an initialised TrainState and uploads the state (params, grads,
 * Adam and Muon buffers) to the device. Every device buffer is allocated here, once: the
 * activations for a micro-batch of B = local tokens / T sequences, work buffers and the state.
 * Fails with "device = cuda: no CUDA device found (cudaGetDeviceCount: ...)" when there is no
 * usable GPU, and with a clear message for unsupported shapes (head_dim other than 32/64/128) or
 * too little device memory. Device choice: backend_pick_gpu (backend_common.h) from
 * CT_CUDA_DEVICE, LOCAL_RANK / SLURM_LOCALID and LOCAL_WORLD_SIZE / SLURM_NTASKS_PER_NODE; a
 * layout that would put two ranks on one GPU fails. Newton–Schulz runs in bf16 like train_gpt.py unless the
 * environment has CT_CUDA_NS_FP32=1 (or backend_cuda_set_ns_fp32 is called). */
int backend_cuda_create(Backend **out, const Config *cfg, TrainState *st);

/* backend_choose_gpu for device=cuda (backend.h). */
int backend_cuda_choose_gpu(BackendGpu *gpu);

/* How many CUDA devices this process sees (0 without a driver, a device or a CUDA build); with
 * 0, why[] says why (the CUDA error, or that this build has no CUDA); with more, the first one's
 * name. Creates no context. */
int backend_cuda_visible(char *why, size_t cap);

/* Device -> host: copies params, grads, exp_avg, exp_avg_sq and momentum into the TrainState's
 * host buffers (synchronous), whole, for comparing state. (The Backend.sync_to_host hook, used
 * before checkpoints, copies only what a checkpoint holds.) */
int backend_cuda_sync_to_host(Backend *b);
/* Host -> device: uploads those five buffers from the TrainState (e.g. after a checkpoint was
 * loaded into it) and refreshes the bf16 weight shadows (synchronous). st->adam_step is read
 * from the host as always. */
int backend_cuda_sync_from_host(Backend *b);

/* Newton–Schulz precision: 0 = bf16 operands and results, fp32 accumulation (train_gpt.py,
 * the default); 1 = fp32 throughout (closer to the CPU reference, slower). */
void backend_cuda_set_ns_fp32(Backend *b, int on);

/* The device gradient buffer (fp32, flat layout, total_floats) for a device-side collective
 * (NCCL all-reduce on the backend's stream, see backend_cuda_stream). The Backend.grad_buffer
 * hook instead downloads the gradients to the host TrainState and returns that buffer (NULL,
 * with ct_error() set, if the download fails); the next forward_backward or optimizer_step then
 * uploads the (possibly reduced) host gradients before using them. */
float *backend_cuda_device_grads(Backend *b);
/* How many times the training micro-batch was captured as a CUDA graph and how many micro-batches
 * ran as a launch of it (cuda_graph = 1: the first micro-batch, those that report gradient stages
 * to Backend.grad_ready, and all after a failed capture run launch by launch). */
void backend_cuda_graph_counts(Backend *b, long long *captures, long long *launches);
/* The cudaStream_t every kernel of the backend runs on, as void*. */
void *backend_cuda_stream(Backend *b);

/* Memory accounting for logging. Everything is allocated at creation, so these are also the
 * peaks: nothing is allocated afterwards (cuBLAS gets a fixed workspace) but the micro-batch's
 * CUDA graph (cuda_graph = 1), whose few hundred nodes CUDA keeps in a small allocation of its
 * own. */
typedef struct {
    char device_name[256];
    int cc_major, cc_minor, device_index;
    size_t arena_bytes;      /* the one cudaMalloc: all of the below */
    size_t state_bytes;      /* fp32 params, grads, Adam m/v, Muon momentum + bf16 weight shadows */
    size_t activation_bytes; /* saved activations of one micro-batch */
    size_t work_bytes;       /* backward work buffers, logits chunk, optimizer and reduction scratch */
    size_t cublas_workspace_bytes;
    size_t device_used_bytes; /* cudaMemGetInfo free memory before creation minus after: the arena
                                 plus the cuBLAS handle's and stream's own allocations */
    size_t device_total_bytes;
    int micro_batch_seqs, logits_chunk, ns_fp32;
    int residual_bf16; /* residual_dtype = bf16: the stream's buffers hold bf16 */
} CudaMemoryReport;
int backend_cuda_memory(Backend *b, CudaMemoryReport *report);
/* One line for the run log: "cuda: <name> (sm_XY), 1234.5 MiB allocated (state ..., activations
 * ..., work ...), device memory used 1300.2 / 81559.0 MiB, Newton-Schulz bf16, residual stream
 * fp32". */
void backend_cuda_describe(Backend *b, char *buf, size_t cap);

#endif
