/* cuda_ops.h — the CUDA math ops of ctrain, C-callable, llm.c style: includes the family headers
 * cuda_<family>.h, each declaring the ops of cuda_<family>.cu. Each op mirrors the CPU op of
 * kernels/cpu/cpu_<family>.c (contracts in cpu_ops.h / cpu_attention.h / cpu_optim.h; same math,
 * same layout) and is tested against it by the op table (tests/unit/gpu_op_table.h, one row per
 * op and shape, run by test_gpu_ops; the optimizers and the whole step by test_gpu_optim and
 * test_gpu_step). docs/cuda.md has the overview. The conventions all families share:
 *  - Activations are row-major [N, C] device buffers, N = tokens (B*T); shapes are explicit ints,
 *    offsets are computed in size_t. Every pointer in them is a DEVICE pointer unless it says host.
 *  - No op allocates. Scratch is passed in; a companion ..._floats() / ..._doubles() says how much.
 *  - Forward ops WRITE (=) their outputs. Backward ops ACCUMULATE (+=) into every fp32 gradient
 *    buffer, as the CPU ops do; the caller zeroes them. Exception, by the precision policy: a
 *    gradient whose only consumer is a bf16 matrix product is produced directly as bf16 (the
 *    `*_bf16` outputs) and those are WRITTEN (=) with this op's contribution, rounded once.
 *  - Precision: fp32 master weights, optimizer state and residual stream; matrix products take
 *    bf16 inputs and accumulate in fp32 (cuBLAS, CUBLAS_COMPUTE_32F); norms, RoPE, attention
 *    (softmax included), softcap, cross-entropy and every reduction are fp32 or double.
 *  - Determinism: no floating-point atomics anywhere. Reductions over rows of a row run in one
 *    warp/block in a fixed tree; parameter-gradient reductions over tokens write fixed-shape
 *    per-chunk partials (CUDA_COLSUM_ROWS tokens each, in double) that a second kernel adds in
 *    chunk order. Launch shapes depend on the problem shape only. With the same GPU model,
 *    shapes and inputs every op gives the same bits on every run.
 *  - All ops run on the given stream and return 0, or -1 after ct_fail() naming the kernel and
 *    the CUDA error (launch errors are caught with cudaGetLastError after every launch; with
 *    cuda_set_debug_sync(1) every launch is also synchronised so asynchronous faults name their
 *    kernel). Shapes are trusted (checked by the backend at creation), token ids too (checked on
 *    the host before they are uploaded).
 *  - ct_bf16 is the storage of one bfloat16 (__nv_bfloat16 on the device), round-to-nearest-even
 *    from fp32.
 *  - An op with many operands takes them in a struct of named fields (CudaAttentionShape,
 *    CudaAddNormBackward, ...: the call site says which buffer is which, e.g. with designated
 *    initializers), passed by pointer and read before anything is queued, so it may live on the
 *    caller's stack. The cuBLAS wrappers (cuda_gemm.h) keep BLAS's positional convention, which
 *    maps one to one onto cublasGemmEx. */
#ifndef CT_CUDA_OPS_H
#define CT_CUDA_OPS_H

#ifdef CT_HAVE_CUDA

#include "cuda_common.h"        /* ct_bf16, launch checks, bf16 conversion, fixed-order sums */
#include "cuda_gemm.h"          /* cuBLAS matrix products, batched, handle setup */
#include "cuda_linear.h"        /* bias-free linear layer */
#include "cuda_embedding.h"     /* token gather, scatter-add backward */
#include "cuda_rmsnorm.h"       /* RMSNorm + the fused mix/add + norm ops */
#include "cuda_scaled_add.h"    /* x + scale * branch */
#include "cuda_residual_mix.h"  /* the residual mix's backward */
#include "cuda_relu2.h"         /* relu^2 (bf16) */
#include "cuda_rope.h"          /* QK-norm + RoPE + gain (full or partial RoPE) */
#include "cuda_attention.h"     /* causal GQA flash attention */
#include "cuda_xsa.h"           /* exclusive self attention (the record's XSA) */
#include "cuda_head_gate.h"     /* the 1.0611 record's sparse attention head-output gate */
#include "cuda_smear.h"         /* the record's SmearGate */
#include "cuda_smear_bos.h"     /* the 1.0611 record's SmearGate with the BOS mask */
#include "cuda_skip_gate.h"     /* the gated U-Net skip's backward (skip_gates) */
#include "cuda_lane_mix.h"      /* the parallel residual lanes' block end */
#include "cuda_bigram.h"        /* the record's bigram hash and its scalar-scaled add */
#include "cuda_logits.h"        /* logits + softcap + cross-entropy (+ the TTT head adapter) */
#include "cuda_lora.h"          /* test-time training's LoRA, many documents at once */
#include "cuda_optim.h"         /* Adam, Muon, SGD, clipping */
#include "cuda_weights.h"       /* weight decay, EMA, SWA sum (the record's optimizer additions) */
#include "cuda_fake_quant.h"    /* late QAT's int6 fake quantization */

#endif /* CT_HAVE_CUDA */
#endif
