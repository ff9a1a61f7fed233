/* backend_cuda_private.h — the CUDA backend's state and the helpers its files share (CUDA builds
 * only; the interface the rest of ctrain sees is backend_cuda.h). The backend's host
 * orchestration runs everything on one stream (kernels in kernels/cuda/cuda_*.cu, declared in
 * cuda_ops.h); its files, by concern:
 *   backend_cuda.c        creation: checks, the one device allocation and its layout, the memory
 *                         report and the small public accessors, destruction
 *   backend_cuda_device.c which GPU: devices visible, the rank's device, its identity
 *   backend_cuda_blocks.c the forward and backward through the parameter-golf GPT (the block
 *                         plan's runs, the stream's ends)
 *   backend_cuda_step.c   token upload (packing's segments), the micro-batch and its CUDA graph,
 *                         evaluation, one position's logits
 *   backend_cuda_optim.c  the gradients handed to the host, the optimizer step (Adam, Muon in
 *                         batches, sharded Muon, weight decay, the EMA and SWA's sum)
 *   backend_cuda_grams.c  GPTQ's calibration: X^T X of each matrix's input over a forward
 *   backend_cuda_state.c  copies of the TrainState between device and host (whole, or what a
 *                         checkpoint holds), the bf16 weight shadows (plain, or late QAT's)
 *   backend_cuda_ttt.c    test-time training: per-document adapters (the ttt_* hooks) and the
 *                         global step's sgd_step
 *   backend_cuda_lora.c   the adapters' calls inside the block passes
 *   backend_cuda_stubs.c  builds without CUDA: every public function, failing clearly
 *
 * The graph, the saved activations and the backward order are the CPU backend's
 * (backend_cpu.c); the differences are the precision policy (bf16 operands of every matrix
 * product, so the tensors that only feed products are kept in bf16) and a few fusions
 * (block-input mix + norm, attention residual + norm). docs/cuda.md describes both. */
#ifndef CT_BACKEND_CUDA_PRIVATE_H
#define CT_BACKEND_CUDA_PRIVATE_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend_common.h"
#include "backend_cuda.h"
#include "cuda_ops.h"
#include "muon_batches.h"

/* The device's and pinned host's scalar slots: the loss sum, the gradient norm, and one loss
 * sum per multi-token-prediction head. */
enum { CUDA_SCALARS = 2 + CT_MTP_MAX_HEADS };

/* Saved activations of one run of a block (block_plan.h: with depth recurrence a block runs
 * several times, each run with its own CudaLayer; one per run of the longer plan); N = B*T rows. Tensors that only feed matrix products are bf16.
 * Not kept, because the kernels that need them recompute them (to the same bits) for less than
 * keeping them costs (docs/cuda.md, "Memory plan"): xm = mix[0] * x_in + mix[1] * x0 and x1 =
 * xm + attn_scale * ao (read from x_in, x0 and ao), the norm rms_norm(xm) that feeds
 * c_q/c_k/c_v and relu(u)^2; the forward writes xm, that norm and relu(u)^2 of the block being
 * computed into buffers shared by all blocks (CudaBackend.xm, .a_in, .h). The residual stream's
 * buffers (`void *`: x_in, x_out here, x0, xm, dx, dx_alt, dx0 and dskip in CudaBackend) hold
 * elements of CudaBackend.stream_dtype (residual_dtype: fp32 or bf16). */
typedef struct {
    void *x_in;            /* x + skip_weights * skip; allocated only for runs with a U-Net skip (either plan) */
    const void *x_in_used; /* the block input of the last forward (x_in, or the previous output) */
    float *rstd_attn;
    /* c_q, c_k and c_v's outputs side by side, [N, D + 2 KV] (one product for the three): the
     * raw q and k (the QK-norm/RoPE backward needs them) and v (an attention input) */
    ct_bf16 *qkv;
    ct_bf16 *q16, *k16; /* attention inputs: normed, rotated q and k */
    ct_bf16 *y16;             /* attention output */
    ct_bf16 *y_xsa16;         /* y minus its self-value component (XSA blocks; NULL elsewhere): attn.proj's input */
    /* the sparse attention gate (NULL without it): g [N, heads], and the gated output (after
     * XSA), attn.proj's input */
    float *gate;
    ct_bf16 *y_gate16;
    float *lse;
    ct_bf16 *ao; /* attention projection output */
    float *rstd_mlp;
    ct_bf16 *m_in;
    ct_bf16 *u; /* fc output (relu^2's input and its backward's) */
    ct_bf16 *mo; /* MLP projection output */
    void *x_out; /* the block's output; of a parallel run (docs/model.md), lane 0's */
    void *l1_out; /* a parallel run's lane 1 output (runs parallel in either plan; NULL elsewhere) */
} CudaLayer;

/* Test-time training's state (backend_cuda_ttt.c; its adapters' calls in the block passes:
 * backend_cuda_lora.c). */
typedef struct CudaTtt {
    const LoraLayout *layout;
    int slots;
    float *w, *g, *m, *v;  /* device [slots * slot_floats]: adapters, gradients, Adam moments (SGD: m its momentum) */
    ct_bf16 *w16;          /* the adapters' bf16 shadow, the products' operand */
    ct_bf16 *h, *dh;       /* device [B*T, r]: one adapter's h and dh at a time */
    ct_bf16 *head_h;       /* device [B*T, r]: the head adapter's h of every row */
    float *head_dh;        /* device [B*T, r]: its dh from the logits op (fp32) */
    float *junk_grads;     /* device, total_floats: the base's gradients in a chunk's backward, never read: the
                            * per-channel ones (cheap), and with base_grads the matrices' too */
    int base_grads;        /* CT_TTT_BASE_GRADS=1 (backend_ttt_base_grads): a chunk's backward makes every base
                            * weight gradient (the earlier path, for timing); else none (backend_cuda_blocks.c) */
    int64_t *steps;        /* host [slots]: optimizer steps each slot has taken */
    int slot0, active;     /* the chunk's first slot; 1 while a chunk with adapters runs */
    int train_lo, train_hi; /* the rows [lo, hi) that hold every training row of the chunk */
} CudaTtt;

typedef struct {
    Backend base;
    /* Shapes. The training micro-batch is B sequences of T tokens (CpuBackend's B and T); the
     * model's are copies of the ModelSpec fields of the same names, read by every launch (the
     * functions' local one-letter aliases are in brackets). */
    int B, T;
    int num_tokens;   /* [N] B * T: the rows of every activation buffer */
    int vocab;        /* [V] token ids, and the logits of a row */
    int dim;          /* [D] model width: the residual stream, q and the attention output */
    int kv_dim;       /* [KV] num_kv_heads * head_dim: the width of k and v */
    int hidden;       /* [HID] the MLP's width */
    int num_heads;    /* query heads */
    int num_kv_heads; /* key/value heads (grouped-query attention) */
    int head_dim;
    int rope_dims; /* [rd] dims of each head RoPE rotates (head_dim, or the record's partial RoPE) */
    int rope_base_len; /* the length the RoPE base is made for (model_rope_base): T, train_seq_len when packed */
    int num_layers;
    int qkv_width; /* [QKV] dim + 2 kv_dim: the width of CudaLayer.qkv's rows */
    int device;
    char device_name[256];
    int cc_major, cc_minor;
    cudaStream_t stream;
    cublasHandle_t blas;
    int ns_fp32;
    /* residual_dtype: CT_F32 or CT_BF16, the element type of the residual stream's buffers and
     * of the `dtype` of the ops on them (docs/cuda.md, "Residual stream"); its size in bytes */
    int stream_dtype;
    size_t stream_bytes;
    int logits_chunk; /* tokens per chunk of the logits and loss (the z and dz scratch rows) */
    int grads_on_host; /* grad_buffer() handed out the host gradients: upload before stepping */

    /* A training micro-batch's forward and backward as one CUDA graph (docs/cuda.md, "CUDA
     * graph"): a few hundred launches become one. Captured at the second forward_backward (the first warms
     * cuBLAS and the kernels' attributes up), again when the loss weight changes (its logits
     * kernels take it as an argument); every pointer it holds is fixed at creation. */
    int graph_on;            /* cuda_graph = 1, no debug synchronisation, no failed capture yet */
    int graph_warm;          /* a micro-batch has run launch by launch */
    cudaGraphExec_t graph;   /* NULL until captured */
    float graph_loss_weight; /* the loss weight graph was captured with */
    int graph_loop_active;   /* and TrainState.loop_active, which picks its block plan */
    long long graph_captures, graph_launches;

    /* the one device allocation and its accounting */
    void *arena;
    size_t arena_bytes, state_bytes, act_bytes, work_bytes;
    size_t free_before, free_after, total_mem;

    /* device state, flat layout of TrainState */
    float *d_params, *d_grads, *d_exp_avg, *d_exp_avg_sq, *d_momentum;
    float *d_ema, *d_swa_sum; /* the weight averages (TrainState.ema / swa_sum), NULL without them */
    ct_bf16 **w16; /* [num_params]: bf16 shadow of each parameter used in a product, else NULL */
    /* What the shadows hold: 0 bf16(w); 1 late QAT's bf16(fake_quant(w)) for the weights it
     * quantizes (backend_qat_quantizes), what a training pass reads while QAT is on. Every pass
     * first asks for the kind it needs (cuda_use_shadows); the optimizer step leaves kind 0. */
    int shadows_quantized;
    void *cublas_ws; /* cuBLAS's fixed workspace (CUBLAS_WORKSPACE_BYTES) */

    /* tokens: pinned host staging and its device copy, one layout:
     * ids [N] | targets [N] | positions [N] | starts [V+1] | rows [V]
     * then, with the bigram embedding, the same index of the bigram buckets:
     * bucket positions [N] | bucket starts [Vb+1] | bucket rows [Vb]
     * then, with doc_packing, the segment starts: seg [N] */
    int32_t *h_tok, *d_tok;
    size_t tok_count;
    int emb_rows;    /* distinct token ids of the micro-batch: the embedding backward's grid */
    int bigram_rows; /* distinct bigram buckets, the same for the bigram table's backward */
    int32_t *h_buckets; /* [N] host buckets (cpu_bigram_hash) the index is made from */
    /* doc_packing: each row's segment starts (packing_segments, the CPU backend's function, from
     * the uploaded ids), the last N entries of the token staging layout above, so a training
     * micro-batch's one upload carries them and the graph reads them at a fixed address; NULL
     * without packing (causal attention over whole rows) */
    int32_t *h_seg, *d_seg;
    int64_t max_doc_len; /* config_max_doc_len: packing's longest segment */
    double *h_scalars; /* pinned: [0] loss sum, [1] grad norm, [2 + k] MTP head k's loss sum */
    double *d_scalars; /* CUDA_SCALARS of them */
    double mtp_loss_weight; /* the multi-token-prediction heads' share of the loss (config) */

    /* activations */
    float *emb, *rstd0, *rstdf, *losses; /* emb: fp32, with bf16 values under residual_dtype bf16 */
    void *x0;          /* rms_norm(emb) (smeared with the SmearGate): the stream's start */
    ct_bf16 *xf16;
    void *xm;          /* the current block's xm, rms_norm(xm) and relu(u)^2 (see CudaLayer) */
    ct_bf16 *a_in, *h;
    CudaLayer *layers; /* [model_max_runs]: one per run of the longer (looped) plan */
    void *x_lanes;     /* parallel_final = mean: the lanes' mean, the final norm's input (NULL otherwise) */
    float *rope_cos, *rope_sin; /* [T, rope_dims/2] */
    /* the record stack (NULL when the model has no such part) */
    float *x_normed;     /* [N, D] rms_norm(emb), the SmearGate's input (x0 is its output) */
    float *emb_smeared;  /* [N, D] the BOS SmearGate's output (smear_gate_enabled), the x0 norm's input */
    double *smear_scratch; /* its backward's (cuda_smear_bos_backward_scratch_doubles) */
    int32_t *d_buckets;  /* [N] bigram bucket of each position (cuda_bigram_hash) */
    float *bigram_h;     /* [N, bigram_dim] the bigram table's rows */
    ct_bf16 *bigram_h16; /* [N, bigram_dim] the same in bf16, bigram.proj's input (with a projection) */
    ct_bf16 *bigram_p16; /* [N, D] bigram.proj's output (with a projection) */
    float *dbigram_h;    /* [N, bigram_dim] d bigram rows, the bigram table's backward input */

    /* backward work buffers */
    void *dx, *dx_alt; /* dL/d(residual stream), and the buffer the next one is written to */
    void *dx0;         /* dL/dx0, summed over every block's resid_mix */
    void *dl1;         /* parallel lanes: dL/d(lane 1), the stream's type (NULL without lanes) */
    ct_bf16 *dao16;    /* parallel lanes: dL/d(attn.proj output) while the MLP's backward uses gD16 */
    float *dxf;        /* dL/d(final norm's output), then dL/d(emb) (fp32 either way) */
    float *dD2;         /* dL/d(m_in), then dL/d(a_in): into the block's norms' backward */
    float *dq, *dk;     /* fp32 dL/dq, dL/dk (the QK-norm/RoPE backward's inputs) */
    ct_bf16 *gD16, *gH16; /* bf16 gradients of [N, D] and [N, HID] product outputs (mo/ao, h) */
    ct_bf16 *dy16;        /* dL/d(attention output) */
    ct_bf16 *dqkv16; /* dL/d(c_q, c_k, c_v outputs), laid out as CudaLayer.qkv */
    float *attn_D, *rope_scratch; /* attention backward's row sums, QK-norm/RoPE backward's scratch */
    float *gate_dz;       /* the sparse attention gate's logit gradient [N, heads] (NULL without it) */
    double *partials;     /* column reductions */
    double *red_partials; /* whole-buffer reductions (loss sum, norms) */
    float *z;    /* a logits chunk, [logits_chunk, V] */
    ct_bf16 *dz; /* its gradient */

    /* GPTQ's calibration (backend_cuda_grams.c): [num_params] device sums of X^T X of the
     * matrices' inputs while it runs (NULL entries: not asked for), NULL otherwise */
    float **gram_dev;

    /* optimizer: Muon's Newton–Schulz in batches of matrices of one shape (muon_batches.h) */
    MuonBatchPlan muon_plan;
    void *muon_scratch; /* the largest batch's */
    /* StepHyper.share_device's lists, one entry per matrix in plan order: its update in d_grads,
     * its size, the rank that computes it (filled each step: the owners depend on the world) */
    float **share_bufs;
    size_t *share_counts;
    int *share_roots;

    /* test-time training (backend_cuda_ttt.c): the adapters and their scratch (NULL until
     * ttt_open; `active` there while a chunk with adapters runs), and sgd_step's momentum
     * (NULL until its first step with momentum); allocated apart from the arena */
    CudaTtt *ttt;
    float *d_sgd_buf;
} CudaBackend;

/* For a call that returns 0 or -1 with ct_error() set: return -1 from the caller on failure. */
#define RETURN_ON_FAILURE(call)                                                                    \
    do {                                                                                           \
        if ((call) != 0) return -1;                                                                \
    } while (0)

/* Waits for everything queued on the backend's stream; what names the wait in an error. */
static inline int sync_stream(CudaBackend *cb, const char *what) {
    return cuda_check(cudaStreamSynchronize(cb->stream), what);
}

/* Queues the zeroing of bytes at device address p on the backend's stream. */
static inline int zero_on_stream(CudaBackend *cb, void *p, size_t bytes, const char *what) {
    return cuda_check(cudaMemsetAsync(p, 0, bytes, cb->stream), what);
}

/* The Backend hooks (set in backend_cuda_create), by the file that defines them. */
/* backend_cuda_step.c */
int cuda_forward_backward(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss);
int cuda_evaluate(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum);
int cuda_evaluate_positions(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs, float *losses);
int cuda_position_logits(Backend *b, const uint32_t *tokens, int pos, float *logits);
/* backend_cuda_blocks.c: the forward of B sequences (whose tokens, and segments with packing,
 * are uploaded) through the blocks of the plan TrainState.loop_active picks, leaving the final
 * normed x in xf16; and the training micro-batch's backward from dL/d(final normed x) in dxf to
 * dL/d(emb) in dxf (and the bigram rows'), every block's and the stream start's parameter
 * gradients added, each block's grad-ready stage reported at its first run. Queued on the stream. */
int cuda_forward_blocks(CudaBackend *cb, int B);
int cuda_backward_blocks(CudaBackend *cb);
/* backend_cuda_step.c: uploads the ids and targets of N tokens (evaluation's layout), with
 * packing's segments. */
int cuda_load_tokens(CudaBackend *cb, const uint32_t *tokens, int N);
/* backend_cuda_step.c: B rows of cb->T ids and their targets given apart (sliding windows,
 * test-time training's chunks; already checked) into the staging layout's ids | targets of
 * cb->num_tokens each, uploaded, with packing's segments. */
int cuda_load_rows(CudaBackend *cb, const uint32_t *inputs, const uint32_t *targets, int B);
/* backend_cuda_grams.c: Backend.accumulate_input_grams. */
int cuda_accumulate_input_grams(Backend *b, const uint32_t *tokens, int num_seqs, float *const *grams);
/* backend_cuda_blocks.c (the forward calls it while the calibration runs): gram_dev[param] +=
 * x^T x of a matrix input x [N, cols] (a no-op for a parameter not asked for), queued. */
int cuda_add_gram(CudaBackend *cb, int param, const ct_bf16 *x, int N, int cols);
/* backend_cuda_optim.c */
float *cuda_grad_buffer(Backend *b);
int cuda_optimizer_step(Backend *b, const StepHyper *h, double *grad_norm);
/* backend_cuda_state.c */
int cuda_sync_for_checkpoint(Backend *b);

/* backend_cuda_ttt.c: the Backend hooks ttt_open, ttt_reset, ttt_chunk, ttt_slot_to_host and
 * sgd_step; cuda_ttt_free releases what they allocated (destroy calls it). */
int cuda_ttt_open(Backend *b, const LoraLayout *layout, int slots);
int cuda_ttt_reset(Backend *b, const float *initial, int slot0, int n);
int cuda_ttt_chunk(Backend *b, const TttChunk *c, const TttOptimizer *o, float *losses);
int cuda_ttt_slot_to_host(Backend *b, int slot, float *out);
int cuda_sgd_optimizer_step(Backend *b, double lr, double momentum, double clip, int restart, double *grad_norm);
void cuda_ttt_free(CudaBackend *cb);
/* backend_cuda_lora.c: the CudaLora of adapter entry e for the `rows` documents from chunk row
 * row0 on (slot slot0 + row0), rows of cb->T, out rows of ld_out elements (0: e->out). */
CudaLora cuda_ttt_rows_lora(const CudaBackend *cb, const LoraEntry *e, int row0, int rows, int ld_out);
/* backend_cuda_lora.c, called by the block passes (backend_cuda_blocks.c) where the CPU backend
 * calls cpu_lora_rows_*: each row's adapter (run, kind) while a chunk with adapters runs, else
 * they return 0 at once (training and evaluation run as without them). Forward: out (bf16 rows
 * of ld_out elements, columns of the adapter's output) += s * (x A^T) B^T, rounded once.
 * Backward, for the adapter's gradients and dx (fp32 [N, in], +=) from dout (bf16, ld_out). */
int cuda_lora_rows_forward(CudaBackend *cb, int run, LoraKind kind, const ct_bf16 *x, ct_bf16 *out, int ld_out);
int cuda_lora_rows_backward(CudaBackend *cb, int run, LoraKind kind, const ct_bf16 *x, const ct_bf16 *dout,
                            int ld_out, float *dx);

/* backend_cuda_state.c: copies the state buffers (the five of every run, the weight averages
 * of those that have them) device -> host (to_host) or host -> device (then refreshes the bf16
 * shadows), and waits for the copies. */
int cuda_copy_state(CudaBackend *cb, int to_host);
/* backend_cuda_state.c: makes the bf16 shadows what the next pass reads — late QAT's
 * fake-quantized weights for a training pass (training = 1) while TrainState.qat_active, else
 * bf16(w) — rewriting them only when they hold the other kind (queued on the stream). */
int cuda_use_shadows(CudaBackend *cb, int training);
/* backend_cuda_state.c: Backend.weights_from_host: uploads the weights, plain shadows. */
int cuda_weights_from_host(Backend *b);

/* backend_cuda_device.c: the CUDA device this process uses (backend_pick_gpu from the
 * environment); -1 with ct_error() set when there is none or the placement is impossible. */
int cuda_select_device(int *device);

#endif
