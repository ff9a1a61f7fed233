/* backend.h — the math a training step needs, behind one interface so the training loop,
 * loader, checkpointing and distributed layer are shared by device=cpu and device=cuda.
 *
 * The training state (fp32 master weights, gradients, optimizer state, train_state.h) lives in
 * TrainState on the host for the CPU backend; the CUDA backend keeps device copies and syncs them to the
 * host TrainState on request (checkpoints, parity tests). */
#ifndef CT_BACKEND_H
#define CT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "lora.h"
#include "model.h"
#include "train_state.h"

/* Hyperparameters of one optimizer step (already scaled by the schedule). */
typedef struct {
    double token_lr, head_lr, matrix_lr, scalar_lr;
    double muon_momentum;
    int muon_steps;
    int muon_flags; /* CT_MUON_POLAR_EXPRESS | CT_MUON_ROW_NORMALIZE (kernels/ns5.h); 0 = the baseline's */
    double beta1, beta2, adam_eps;
    double grad_clip_norm; /* 0 = off */
    /* Decoupled weight decay (0 = off): before its update each weight is multiplied by
     * 1 - lr * wd, lr its group's learning rate above: muon_wd for the Muon matrices, adam_wd
     * for the scalar group and embed_wd for the token-embedding group (torch.optim.AdamW; the
     * configuration's embed_wd = -1 puts adam_wd here); lm_head gets none. */
    double muon_wd, adam_wd, embed_wd;
    /* Weight averaging after the update (TrainState.ema / swa_sum): ema_decay > 0 steps the
     * EMA, ema = d*ema + (1-d)*w; swa_add adds the new weights to the SWA sum (a copy when
     * swa_count is 0) and counts them. */
    double ema_decay;
    int swa_add;
    /* Muon sharding as train_gpt.py: each matrix's update is computed on one rank (the CPU
     * backend: the i-th matrix on rank i % shard_world; the CUDA backend: Newton–Schulz batch
     * j on rank j % shard_world, muon_batches.h), and the updates are combined by one sum
     * across ranks (`combine`, NULL when shard_world is 1) before every rank applies all of
     * them. */
    int shard_rank, shard_world;
    int (*combine)(void *ctx, float *buf, size_t n);
    void *combine_ctx;
    /* The same sum on a device buffer, queued after the backend's work on its stream (see
     * Backend.device_stream) and finished when it returns; NULL where the caller has none. A
     * backend whose state lives on a device uses it instead of `combine`, and calls it even
     * with shard_world 1 when it is set (so a one-GPU run exercises the multi-GPU path). */
    int (*combine_device)(void *ctx, float *device_buf, size_t n, void *stream);
    /* Instead of that sum, where set (and combine_device is): each update sent by the rank that
     * computed it to every other, bufs[i] (counts[i] floats of a device buffer) from rank
     * roots[i], queued on the stream and finished when it returns. Exact by construction and
     * about half the bytes of the sum (issue 33); the sum stays selectable (CT_MUON_COMBINE). */
    int (*share_device)(void *ctx, float *const *bufs, const size_t *counts, const int *roots, int count,
                        void *stream);
} StepHyper;

/* The step's hyperparameters from the configuration: learning rates times lr_scale (the
 * schedule's factor), Muon momentum at `step` (its warmup), the rest as configured; the EMA's
 * decay with ema_enabled; swa_add as train_gpt.py decides it (SWA on, no EMA, lr_scale < 0.5
 * and step + 1, the count after this step, a multiple of swa_every). One rank: shard_world 1,
 * no combine; a distributed caller fills those in. */
StepHyper step_hyper_from_config(const Config *cfg, int64_t step, double lr_scale);

/* Test-time training (issue 57; src/infer/ttt_eval.c, docs/model.md "Test-time training"): the
 * optimizer every document's adapters take after each chunk they are trained on. */
typedef struct {
    int adam;            /* 1: AdamW (decoupled decay p *= 1 - lr*wd, then Adam), 0: SGD (momentum beta1, coupled decay) */
    double lr, beta1, beta2, eps, weight_decay;
    int grad_steps;      /* optimizer steps per chunk; step 0 reuses the scoring forward */
} TttOptimizer;
/* One chunk of a batch of documents: row i is document slot slot0 + i's window. */
typedef struct {
    int rows, ctx, slot0;               /* rows <= the slots given to ttt_open, ctx <= its ctx */
    const uint32_t *inputs, *targets;   /* [rows * ctx]; after a row's window, any ids (padding) */
    const int32_t *from, *len;          /* [rows]: the positions [from, from + len) a row scores */
    const uint8_t *train;               /* [rows]: 1 to train the row's adapters on those positions after */
    int adapt;                          /* 0: the base model alone, nothing trained (the `docs` evaluation) */
} TttChunk;

typedef struct Backend Backend;
struct Backend {
    const char *name;
    char detail[256]; /* what runs it, for the start banner ("OpenBLAS core ..., 2 threads"); may be "" */
    /* The libraries and hardware its bits depend on besides ctrain and the inputs, as "; "-
     * separated name=value items ("blas=OpenBLAS 0.3.21 ... Haswell ...", or the CUDA runtime,
     * driver, cuBLAS and GPU): checkpoints record it, and a resume on another stack says so
     * (bits are promised only for the same stack). */
    char stack[384];
    TrainState *state;
    /* One micro-batch: tokens holds B*T+1 tokens (inputs tokens[0..B*T), targets shifted by
     * one). Accumulates d(loss_weight * mean loss)/d(params) into the gradients; *mean_loss is
     * the micro-batch's mean token loss. */
    int (*forward_backward)(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss);
    /* Forward only over num_seqs sequences (tokens: num_seqs*T + 1); *loss_sum = sum of the
     * per-token losses in double. */
    int (*evaluate)(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum);
    /* (optional, NULL where not implemented) Forward only over num_seqs sequences given as
     * inputs and targets apart (num_seqs*T ids each: sliding-window validation's windows
     * overlap, so a window's targets are not the next window's inputs); losses[num_seqs*T] gets
     * every position's token loss (fp32, as `evaluate` sums them). */
    int (*evaluate_positions)(Backend *b, const uint32_t *inputs, const uint32_t *targets, int num_seqs,
                              float *losses);
    /* (optional, NULL where not implemented) The logits (softcapped as in training, vocab
     * entries) at position pos of one sequence of seq_len tokens; positions after pos do not
     * matter (attention is causal). For sampling. */
    int (*position_logits)(Backend *b, const uint32_t *tokens, int pos, float *logits);
    /* (optional, NULL where not implemented) GPTQ's calibration (the golf artifact,
     * golf_hessians.h): a forward over num_seqs sequences (tokens: num_seqs*T + 1, as evaluate)
     * that adds X^T X of each matrix's input into grams[i] (cols x cols fp32, i the parameter's
     * index) where grams[i] is not NULL: c_q's input (the normed attention input; c_k and c_v
     * read the same), attn.proj's, mlp.fc's, mlp.proj's (the activation), the final norm's
     * output for the tied embedding or lm_head, bigram.proj's. A block that runs more than once
     * (depth recurrence) adds each run's input. Sums in a fixed order: the same bits every time. */
    int (*accumulate_input_grams)(Backend *b, const uint32_t *tokens, int num_seqs, float *const *grams);
    /* (optional, NULL where not implemented) Test-time training on this backend, which the
     * caller made with micro-batches of `slots` sequences of `ctx` tokens and no packing:
     * ttt_open allocates `slots` documents' adapters of `layout` (kept by pointer; it must outlive
     * the backend) and their optimizer state; ttt_reset sets slots [slot0, slot0 + n) to
     * `initial` (a slot's worth: lora_initial_slot) with fresh optimizer state; ttt_chunk runs one
     * chunk (the forward with each row's adapters, every scored position's loss written to
     * losses[row * ctx + position], then for rows with train set the gradient of the mean loss of
     * their scored positions, to their adapters only, and grad_steps optimizer steps of o; the base
     * weights and their gradients are not touched); ttt_slot_to_host copies a slot's adapters out. */
    int (*ttt_open)(Backend *b, const LoraLayout *layout, int slots);
    int (*ttt_reset)(Backend *b, const float *initial, int slot0, int n);
    int (*ttt_chunk)(Backend *b, const TttChunk *c, const TttOptimizer *o, float *losses);
    int (*ttt_slot_to_host)(Backend *b, int slot, float *out);
    /* (optional, NULL where not implemented) torch.optim.SGD on every parameter with the
     * (already reduced) gradients: clip the global gradient norm to clip when clip > 0
     * (*grad_norm gets the norm, else 0), buf = g at the first step after `restart` (else
     * momentum * buf + g), p -= lr * buf; then zero the gradients. Test-time training's global
     * step. */
    int (*sgd_step)(Backend *b, double lr, double momentum, double clip, int restart, double *grad_norm);
    /* Gradients as a host fp32 buffer for the collective (the CPU backend's are the state's). */
    float *(*grad_buffer)(Backend *b);
    /* Apply the optimizers to the (already reduced) gradients, then zero the gradients.
     * *grad_norm gets the global gradient norm when clipping is on (else 0). */
    int (*optimizer_step)(Backend *b, const StepHyper *h, double *grad_norm);
    /* (optional, NULL when the state's host buffers are always current) Bring what a checkpoint
     * holds of the TrainState's host buffers (the weights, Muon momentum of the matrices, Adam
     * moments of the others; not the gradients) up to date from the backend's own copy, before a
     * checkpoint is written. */
    int (*sync_to_host)(Backend *b);
    /* (optional, NULL where the backend computes on the TrainState's host buffers) The caller
     * has replaced TrainState.params on the host (a run's averaged weights, at its end): the
     * backend computes with them from then on. */
    int (*weights_from_host)(Backend *b);
    void (*destroy)(Backend *b);
    /* (optional, NULL where the gradients live on the host) The device gradient buffer (fp32,
     * the TrainState's flat layout) and the stream (a cudaStream_t, as void *) the backend's work
     * is queued on, for a reduction on the device. */
    float *(*device_grads)(Backend *b);
    void *(*device_stream)(Backend *b);
    /* Set by the caller (NULL when unused), called by forward_backward as its backward pass
     * ends each stage of model_grad_ready_stage (model.h), with the stage: from then on the
     * gradients final at that stage are not touched again by this micro-batch. On a device the
     * work is then queued on device_stream, not necessarily done. GPU jobs set it for the last
     * micro-batch of a step to start reducing gradients while the backward goes on. A nonzero
     * return fails the micro-batch. */
    int (*grad_ready)(void *ctx, int stage);
    void *grad_ready_ctx;
    int micro_batch_seqs, seq_len; /* B and T of forward_backward */
    /* The data's BOS token (its bos_id attribute), -1 (set at creation) for none. The 1.0611
     * SmearGate (smear_gate_enabled: no mixing into a BOS position) and document packing
     * (doc_packing: a BOS starts a document) read it. Whoever runs the forward sets it from the
     * data before the first call (train, the round trip, sample); the SmearGate's forward fails
     * while it is -1, packing then cuts rows by max_doc_len only. */
    int64_t bos_id;
};

/* Report stage `stage` of the backward to b->grad_ready when one is set (backends call it). */
static inline int backend_grad_ready(Backend *b, int stage) {
    return b->grad_ready ? b->grad_ready(b->grad_ready_ctx, stage) : 0;
}

/* device=auto: sets cfg->device to cuda when a CUDA device is visible, else cpu, and writes
 * "auto -> <device> (<why>)" into note (cap bytes); other devices are left as they are (note
 * empty). Call before anything depends on the device (the distributed layer does). */
void backend_resolve_device(Config *cfg, char *note, size_t cap);
/* The GPU this rank of a device=cuda job uses, chosen as backend_create will choose it
 * (backend_pick_gpu: CT_CUDA_DEVICE, the local rank, what CUDA_VISIBLE_DEVICES shows), made the
 * process's current device, with what identifies it across ranks (the UUID, as nvidia-smi -L
 * prints it). Fails, naming host and rank, when the rank sees no GPU or fewer than its node's
 * tasks; for device=cpu it fails too (there is no GPU to choose). */
typedef struct {
    int index;      /* among the devices this process sees */
    char uuid[48];  /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    char desc[200]; /* "CUDA device 0 (NVIDIA H100 80GB HBM3, PCI 0000:18:00.0)" */
} BackendGpu;
int backend_choose_gpu(const Config *cfg, BackendGpu *gpu);

/* Create the backend named by cfg->device over an initialised TrainState. */
int backend_create(Backend **out, const Config *cfg, TrainState *st);

/* The CPU backend (backend_cpu.c). */
int backend_cpu_create(Backend **out, const Config *cfg, TrainState *st);

#endif
