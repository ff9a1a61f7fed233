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
#include "model.h"
#include "train_state.h"

/* Hyperparameters of one optimizer step (already scaled by the schedule). */
typedef struct {
    double token_lr, head_lr, matrix_lr, scalar_lr;
    double muon_momentum;
    int muon_steps;
    double beta1, beta2, adam_eps;
    double grad_clip_norm; /* 0 = off */
    /* Muon sharding as train_gpt.py: the update of the i-th matrix is computed only on rank
     * i % shard_world, and the updates are combined by one sum across ranks (`combine`,
     * NULL when shard_world is 1) before every rank applies all of them. */
    int shard_rank, shard_world;
    int (*combine)(void *ctx, float *buf, size_t n);
    void *combine_ctx;
} StepHyper;

/* The step's hyperparameters from the configuration: learning rates times lr_scale (the
 * schedule's factor), Muon momentum at `step` (its warmup), the rest as configured. One rank:
 * shard_world 1, no combine; a distributed caller fills those in. */
StepHyper step_hyper_from_config(const Config *cfg, int64_t step, double lr_scale);

typedef struct Backend Backend;
struct Backend {
    const char *name;
    char detail[256]; /* what runs it, for the start banner ("OpenBLAS core ..., 2 threads"); may be "" */
    TrainState *state;
    /* One micro-batch: tokens holds B*T+1 tokens (inputs tokens[0..B*T), targets shifted by
     * one). Accumulates d(loss_weight * mean loss)/d(params) into the gradients; *mean_loss is
     * the micro-batch's mean token loss. */
    int (*forward_backward)(Backend *b, const uint32_t *tokens, float loss_weight, double *mean_loss);
    /* Forward only over num_seqs sequences (tokens: num_seqs*T + 1); *loss_sum = sum of the
     * per-token losses in double. */
    int (*evaluate)(Backend *b, const uint32_t *tokens, int num_seqs, double *loss_sum);
    /* (optional, NULL where not implemented) The logits (softcapped as in training, vocab
     * entries) at position pos of one sequence of seq_len tokens; positions after pos do not
     * matter (attention is causal). For sampling. */
    int (*position_logits)(Backend *b, const uint32_t *tokens, int pos, float *logits);
    /* Gradients as a host fp32 buffer for the collective (the CPU backend's are the state's). */
    float *(*grad_buffer)(Backend *b);
    /* Apply the optimizers to the (already reduced) gradients, then zero the gradients.
     * *grad_norm gets the global gradient norm when clipping is on (else 0). */
    int (*optimizer_step)(Backend *b, const StepHyper *h, double *grad_norm);
    /* (optional, NULL when the state's host buffers are always current) Bring the TrainState's
     * host buffers up to date from the backend's own copy, before a checkpoint is written. */
    int (*sync_to_host)(Backend *b);
    void (*destroy)(Backend *b);
    int micro_batch_seqs, seq_len; /* B and T of forward_backward */
};

/* Create the backend named by cfg->device over an initialised TrainState. */
/* device=auto: sets cfg->device to cuda when a CUDA device is visible, else cpu, and writes
 * "auto -> <device> (<why>)" into note (cap bytes); other devices are left as they are (note
 * empty). Call before anything depends on the device (the distributed layer does). */
void backend_resolve_device(Config *cfg, char *note, size_t cap);
int backend_create(Backend **out, const Config *cfg, TrainState *st);

/* The CPU backend (backend_cpu.c). */
int backend_cpu_create(Backend **out, const Config *cfg, TrainState *st);

#endif
