/* backend_common.h — what every backend does the same way, so it is written once: the buffer
 * arena, the token-id check of a micro-batch, the divergence message, the learning rate of an
 * optimizer group, and test-time training's chunk check and CT_TTT_BASE_GRADS. Private to
 * src/backend/ (the loop sees only backend.h). */
#ifndef CT_BACKEND_COMMON_H
#define CT_BACKEND_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* A backend's buffers are carved from one allocation (host memory for the CPU backend, device
 * memory for CUDA), made once at creation. The backend writes its list of buffers once, as a
 * function taking an arena, and calls it twice: with base NULL it only adds up the bytes
 * (every piece rounded up to 256 bytes, so each starts aligned for vector loads and cuBLAS),
 * then with base pointing at that many bytes it hands out the pieces. */
typedef struct {
    char *base; /* NULL: sizing pass */
    size_t used;
} BackendArena;

/* The next piece of `bytes` (at least 1); NULL in the sizing pass. tally (may be NULL) adds
 * the piece's size, for a memory report by kind. */
void *backend_arena_take(BackendArena *a, size_t bytes, size_t *tally);
#define BACKEND_TAKE_FLOATS(a, n, tally) ((float *)backend_arena_take((a), (size_t)(n) * sizeof(float), (tally)))
#define BACKEND_TAKE_DOUBLES(a, n, tally) ((double *)backend_arena_take((a), (size_t)(n) * sizeof(double), (tally)))

/* Every id of tokens[0..count) is below vocab (the data was checked when opened, but a file
 * changed underneath must not index out of bounds); -1 naming the first bad id otherwise. */
int backend_check_tokens(const uint32_t *tokens, size_t count, int64_t vocab);

/* A test-time-training chunk (backend.h's ttt_chunk) against a backend that opened `slots`
 * document slots (0: ttt_open never ran) in rows of at most `capacity` tokens of vocab ids: its
 * rows within the slots, its window within the rows, each row's scored span within the window,
 * every id below vocab; -1 naming what is out of range otherwise. */
int backend_check_ttt_chunk(const TttChunk *c, int slots, int capacity, int64_t vocab);

/* CT_TTT_BASE_GRADS, read by each ttt_open: unset, empty or 0 (the default): a chunk's backward
 * makes no base weight gradient (*on = 0); 1: it makes the blocks' (and on CUDA those below x0;
 * the head's never), into a scratch buffer never read (*on = 1: the earlier path, kept so that
 * a GPU run can time both; the adapters' gradients and the scores are the same bits either
 * way). Anything else: -1 naming the variable. */
int backend_ttt_base_grads(int *on);

/* 0 if the micro-batch's mean loss is finite; else -1 with the message that ends a diverged
 * run (no checkpoint is written from such a state). */
int backend_check_loss(double mean_loss);

/* The Adam learning rate of a parameter group (token embedding, head, scalars) in a step. */
double backend_adam_lr(ParamGroup group, const StepHyper *h);

/* Decoupled weight decay of a parameter group in a step, as train_gpt.py's optimizers: 1 with
 * *factor = 1 - lr * wd (double; lr the group's scheduled learning rate) for the Muon matrices
 * (muon_wd), the token-embedding group (embed_wd) and the scalar group (adam_wd; both
 * torch.optim.AdamW); 0 (no decay) when that wd is 0 and for lm_head, which the record steps
 * with plain Adam. */
int backend_weight_decay_factor(ParamGroup group, const StepHyper *h, double *factor);

/* Whether late QAT fake-quantizes parameter p while it is on (docs/model.md, "Late QAT"): the
 * linear layers' 2-D weights, train_gpt.py's CastedLinear (the Muon matrices and the untied
 * lm_head; never the embeddings, tied or not). */
int backend_qat_quantizes(const ParamInfo *p);

/* Multi-token prediction: whether a training micro-batch runs the heads: the model has some
 * and their weight is not 0 (the record skips them then: no gradient). */
int backend_mtp_active(const ModelSpec *s, double mtp_loss_weight);

/* Multi-token prediction (mtp_num_heads, docs/model.md): head k (0-based) scores positions
 * t < T-k-1 of each sequence against the target of position t+k+1 (the token k+2 ahead), and a
 * training micro-batch's loss is main + mtp_loss_weight * (mean over heads of each head's mean
 * over its B*(T-k-1) positions), train_gpt.py's. The rows a head scores are contiguous within a
 * sequence but not across sequences, so a backend runs the logits op once per head and
 * sequence with loss weight backend_mtp_call_weight (its mean over T-k-1 rows, weighted so the
 * gradients add up to the formula's), then combines the means with backend_mtp_loss. */
float backend_mtp_call_weight(float loss_weight, double mtp_loss_weight, int heads, int num_seqs);
/* main_mean + mtp_loss_weight * mean over the heads of head_means[k] (each the head's mean over
 * the micro-batch's sequences, summed in head order). */
double backend_mtp_loss(double main_mean, const double *head_means, int heads, double mtp_loss_weight);

/* Which CUDA device a rank uses, from what it sees and its place on its node:
 *   explicit_device >= 0 (CT_CUDA_DEVICE): that one of the visible devices;
 *   the rank sees one device (Slurm --gpus-per-task=1 or --gpu-bind=single:1, or a
 *   CUDA_VISIBLE_DEVICES per rank): device 0;
 *   the ranks of a node see all of its devices (--gpu-bind=none): device local_rank, which must
 *   exist: never two ranks on one GPU by wrapping around, unless may_share
 *   (ct_ranks_may_share_gpu: NCCL_MULTI_RANK_GPU_ENABLE=1), which wraps round-robin with at most
 *   CT_MAX_RANKS_PER_GPU ranks per device.
 * local_rank < 0: not known (one process): device 0. local_size <= 0: not known. Fails with a
 * message naming the host, the rank and what it sees. */
int backend_pick_gpu(int visible, int explicit_device, int local_rank, int local_size, int may_share,
                     const char *host, const char *cuda_visible_devices, int *device);

#endif
