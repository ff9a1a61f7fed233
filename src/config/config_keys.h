/* config_keys.h — THE table of configuration keys. Everything else (the Config struct, parsing,
 * `ctrain train --help`, config.txt, docs/configuration.md and the checkpoint's /config group)
 * is generated from it, so a key cannot exist in one place and be missing in another.
 *
 * X(name, type, default, group, resume, help)
 *   type:   INT (int64), FLOAT (double), BOOL (0/1, true/false), STR
 *   group:  section in --help and docs
 *   resume: SHAPE  must match the checkpoint (model shape / batch geometry / data);
 *           FREE   may change when resuming (reported)
 * Names and defaults follow train_gpt.py's Hyperparameters, lower-cased; max_wallclock_seconds
 * defaults to 0 (off) so runs are reproducible unless a time budget is asked for. */
#ifndef CT_CONFIG_KEYS_H
#define CT_CONFIG_KEYS_H

#define CT_CONFIG_KEYS(X)                                                                          \
    /* model shape */                                                                              \
    X(vocab_size, INT, "1024", "model", SHAPE, "vocabulary size; must equal the data files' vocab_size") \
    X(num_layers, INT, "9", "model", SHAPE, "transformer blocks (first half feed U-Net skips to the second)") \
    X(model_dim, INT, "512", "model", SHAPE, "residual stream width D")                              \
    X(num_heads, INT, "8", "model", SHAPE, "query heads; head_dim = model_dim / num_heads (even)")   \
    X(num_kv_heads, INT, "4", "model", SHAPE, "key/value heads (GQA); must divide num_heads")        \
    X(mlp_mult, FLOAT, "2", "model", SHAPE, "MLP hidden width = int(mlp_mult * model_dim); fractional values allowed") \
    X(tie_embeddings, BOOL, "1", "model", SHAPE, "1: logits use tok_emb (tied); 0: separate lm_head") \
    X(rope_base, FLOAT, "10000.0", "model", SHAPE, "RoPE frequency base")                          \
    X(logit_softcap, FLOAT, "30.0", "model", SHAPE, "logits = c*tanh(logits/c); must be > 0")      \
    X(qk_gain_init, FLOAT, "1.5", "model", SHAPE, "initial per-head query gain (q_gain)")          \
    X(tied_embed_init_std, FLOAT, "0.005", "model", SHAPE, "std of the normal init of tok_emb")    \
    /* the record stack (docs/model.md, "Record features"); every one off by default */         \
    X(rope_dims, INT, "0", "model", SHAPE,                                                         \
      "partial RoPE: rotate only the first rope_dims of each head (even, <= head_dim); 0 = all")   \
    X(rope_train_seq_len, INT, "0", "model", SHAPE,                                                \
      "NTK-aware RoPE: sequences longer than this use base*(T/this)^(r/(r-2)); 0 = train_seq_len (off)") \
    X(ln_scale, BOOL, "0", "model", SHAPE, "scale block l's RMSNorm outputs by 1/sqrt(l+1)")      \
    X(xsa_last_n, INT, "0", "model", SHAPE,                                                        \
      "exclusive self attention in the last N blocks: remove the output's component along its own value") \
    X(smear_gate, BOOL, "0", "model", SHAPE,                                                       \
      "SmearGate: blend each position's embedding with the previous one's by sigmoid(smear.gate)") \
    X(bigram_vocab_size, INT, "0", "model", SHAPE,                                                 \
      "bigram hash embedding buckets (the record's hash of each token pair); 0 = off, else >= 2")  \
    X(bigram_dim, INT, "128", "model", SHAPE, "bigram embedding width (projected to model_dim when different)") \
    X(ortho_init, BOOL, "0", "model", SHAPE,                                                       \
      "orthogonal init of the random-init matrices with both sides >= 64 (the record's rule; docs/model.md)") \
    X(sparse_attn_gate_enabled, BOOL, "0", "model", SHAPE,                                         \
      "sparse attention gate: each head's output times sigmoid(scale * attn_gate_w[h] . the attention input's first gate_window channels), after XSA (docs/model.md)") \
    X(sparse_attn_gate_scale, FLOAT, "0.5", "model", SHAPE, "sparse attention gate: the scale of its logit; > 0") \
    X(sparse_attn_gate_init_std, FLOAT, "0", "model", SHAPE,                                       \
      "sparse attention gate: attn_gate_w ~ N(0, this) at init; 0 = zeros (gate 0.5)")          \
    X(gate_window, INT, "12", "model", SHAPE,                                                      \
      "input channels of the sparse attention gate (and the frontier SmearGate); in [1, model_dim]") \
    X(smear_gate_enabled, BOOL, "0", "model", SHAPE,                                               \
      "the 1.0611 record's SmearGate: e_t += lambda*sigmoid(smear_gate.weight . e_t[:gate_window])*e_(t-1) on the raw embedding, before its norm, not at the data's BOS tokens (docs/model.md)") \
    X(mtp_num_heads, INT, "0", "model", SHAPE,                                                     \
      "multi-token prediction: extra output heads trained beside lm_head; head k predicts the token k+2 ahead (never evaluated; left out of the golf artifact); 0 = off") \
    X(mlp_negative_slope, FLOAT, "0", "model", SHAPE,                                              \
      "MLP activation leaky_relu(h, s)^2 with this negative slope s in [0, 1) (the 1.0611 record: 0.5); 0 = relu^2") \
    X(skip_gates_enabled, BOOL, "0", "model", SHAPE,                                               \
      "sigmoid gates on the U-Net skips: x = lerp(skip_weights*skip, x, sigmoid(skip_gates)) instead of x + skip_weights*skip") \
    X(num_loops, INT, "0", "model", SHAPE,                                                         \
      "depth recurrence: blocks loop_start..loop_end run num_loops more times once looping is on (docs/model.md, \"Depth recurrence\"); 0 = off") \
    X(loop_start, INT, "0", "model", SHAPE, "depth recurrence: the first block that runs again (num_loops > 0)") \
    X(loop_end, INT, "0", "model", SHAPE, "depth recurrence: the last block that runs again, included (num_loops > 0)") \
    X(enable_looping_at, FLOAT, "0", "model", FREE,                                                \
      "depth recurrence switches on for good at the first step whose training progress (progress_clock's) is >= this, in [0, 1]") \
    X(parallel_start_layer, INT, "0", "model", SHAPE,                                              \
      "parallel residual lanes: decoder runs of blocks >= this run as two lanes (docs/model.md); 0 = off") \
    X(parallel_final_lane, STR, "mean", "model", SHAPE,                                            \
      "parallel residual lanes: what leaves the last block: mean (of both lanes) | attn (lane 0) | mlp (lane 1)") \
    /* batch geometry */                                                                           \
    X(train_batch_tokens, INT, "524288", "batch", SHAPE, "tokens per optimizer step (all ranks)")   \
    X(train_seq_len, INT, "1024", "batch", SHAPE, "sequence length of training and validation")    \
    X(grad_accum_slots, INT, "8", "batch", SHAPE,                                                  \
      "micro-batches per step; world size must divide it; accumulation steps = slots / world")    \
    X(doc_packing, BOOL, "0", "batch", SHAPE,                                                      \
      "document packing: each micro-batch is one row of train_batch_tokens / grad_accum_slots tokens, attention causal within its documents (cut at every bos_id token and into max_doc_len chunks); the data must record a bos_id") \
    X(max_doc_len, INT, "0", "batch", SHAPE,                                                       \
      "with doc_packing: the longest segment a document is cut into from its start (0 = train_seq_len)") \
    /* schedule */                                                                                 \
    X(iterations, INT, "20000", "schedule", FREE, "optimizer steps to train")                       \
    X(warmdown_iters, INT, "1200", "schedule", FREE, "linear LR warmdown over the last N steps")     \
    X(warmup_steps, INT, "20", "schedule", FREE,                                                   \
      "train_gpt.py compile-warmup steps; accepted and ignored (ctrain needs no compile warmup)")  \
    X(max_wallclock_seconds, FLOAT, "0", "schedule", FREE,                                          \
      "training time budget in seconds with time-based warmdown; 0 = off (reproducible)")          \
    /* the 1.0611 record's schedule (docs/model.md, "Learning-rate schedule"); off by default */ \
    X(warmdown_frac, FLOAT, "0", "schedule", FREE,                                                 \
      "the record's warmdown: LR multiplier 1 while progress < 1 - warmdown_frac, then max((1 - progress) / warmdown_frac, min_lr); in [0, 1]; 0 = warmdown_iters' form") \
    X(min_lr, FLOAT, "0", "schedule", FREE,                                                        \
      "warmdown_frac: floor of the LR multiplier (a fraction of every group's LR, not an LR), in [0, 1]") \
    X(progress_clock, STR, "steps", "schedule", FREE,                                              \
      "warmdown_frac's progress: steps (step / iterations; deterministic, resumes bit for bit) | wallclock (train_time / (max_wallclock_seconds - gptq_reserve_seconds), the record's timed run)") \
    X(gptq_reserve_seconds, FLOAT, "0", "schedule", FREE,                                          \
      "seconds kept back from max_wallclock_seconds (the record's GPTQ reserve): training stops, and wallclock progress reaches 1, at the difference; needs max_wallclock_seconds above it") \
    /* optimizer */                                                                                \
    X(embed_lr, FLOAT, "0.6", "optimizer", FREE, "Adam LR of tok_emb when embeddings are untied")   \
    X(head_lr, FLOAT, "0.008", "optimizer", FREE, "Adam LR of lm_head when embeddings are untied")  \
    X(tied_embed_lr, FLOAT, "0.05", "optimizer", FREE, "Adam LR of tok_emb when tied")              \
    X(matrix_lr, FLOAT, "0.04", "optimizer", FREE, "Muon LR of the 2-D block matrices")             \
    X(scalar_lr, FLOAT, "0.04", "optimizer", FREE, "Adam LR of control tensors and skip_weights")  \
    X(muon_momentum, FLOAT, "0.95", "optimizer", FREE, "Muon momentum after warmup")                \
    X(muon_backend_steps, INT, "5", "optimizer", FREE, "Newton-Schulz iterations per Muon update")  \
    X(muon_momentum_warmup_start, FLOAT, "0.85", "optimizer", FREE, "Muon momentum at step 0")      \
    X(muon_momentum_warmup_steps, INT, "500", "optimizer", FREE, "steps of linear momentum warmup") \
    X(beta1, FLOAT, "0.9", "optimizer", FREE, "Adam beta1")                                        \
    X(beta2, FLOAT, "0.95", "optimizer", FREE, "Adam beta2")                                       \
    X(adam_eps, FLOAT, "1e-8", "optimizer", FREE, "Adam epsilon")                                  \
    X(grad_clip_norm, FLOAT, "0.0", "optimizer", FREE, "clip the global grad norm to this; 0 = off") \
    X(muon_wd, FLOAT, "0.0", "optimizer", FREE,                                                    \
      "decoupled weight decay of the Muon matrices: w *= 1 - lr*muon_wd before each update; 0 = off") \
    X(adam_wd, FLOAT, "0.0", "optimizer", FREE,                                                    \
      "AdamW decoupled weight decay of the scalar group, and of the token-embedding group while embed_wd < 0 (lm_head: none); 0 = off") \
    X(embed_wd, FLOAT, "-1", "optimizer", FREE,                                                    \
      "AdamW decoupled weight decay of the token-embedding group (tok_emb, bigram.embed); -1 = adam_wd's (as before the key)") \
    X(muon_polar_express, BOOL, "0", "optimizer", FREE,                                            \
      "Muon: Polar Express Newton-Schulz (a coefficient triple per iteration, muon_backend_steps <= 5) instead of the fixed quintic") \
    X(muon_row_normalize, BOOL, "0", "optimizer", FREE,                                            \
      "Muon (MuonEq-R): divide each row of the momentum update by max(its L2 norm, 1e-7) before Newton-Schulz") \
    X(ema_enabled, BOOL, "0", "optimizer", SHAPE,                                                  \
      "keep an fp32 EMA of the weights; at the end it replaces them (final validation, export, artifact)") \
    X(ema_decay, FLOAT, "0.997", "optimizer", FREE, "EMA decay d, in (0, 1): ema = d*ema + (1-d)*w after every step") \
    X(swa_enabled, BOOL, "0", "optimizer", SHAPE,                                                  \
      "without EMA: average the weights every swa_every steps once lr_scale < 0.5; the average replaces them at the end") \
    X(swa_every, INT, "200", "optimizer", FREE, "SWA: a snapshot after each step whose count is a multiple of N, while lr_scale < 0.5") \
    X(qat_enabled, BOOL, "0", "optimizer", FREE,                                                   \
      "int6 straight-through fake quantization of the linear layers' weights in the training forward, from step 0") \
    X(late_qat, BOOL, "0", "optimizer", FREE, "switch that QAT on once lr_scale < qat_threshold (and keep it on)") \
    X(qat_threshold, FLOAT, "0.1", "optimizer", FREE, "late_qat: the lr_scale below which QAT starts") \
    X(mtp_loss_weight, FLOAT, "0.2", "optimizer", FREE,                                            \
      "mtp_num_heads: training loss = main + mtp_loss_weight * mean of the heads' losses; 0 = the heads get no gradient") \
    X(seed, INT, "1337", "optimizer", SHAPE, "seed of the weight initialisation")                  \
    /* data and evaluation */                                                                      \
    X(train_files, STR, "", "data", FREE,                                                           \
      "glob of HDF5 token files for training (required); on resume the files it matches are held to resume_data") \
    X(val_files, STR, "", "data", FREE, "glob of HDF5 token files for validation; empty = none")   \
    X(check_train_tokens, BOOL, "1", "data", FREE,                                                  \
      "before the first step of a fresh run, read every training token (range, tokens_crc32), the ranks sharing the files; 0 = only as the loader reaches them") \
    X(val_loss_every, INT, "1000", "data", FREE, "validate every N steps (and at the end); 0 = end only") \
    X(val_batch_size, INT, "524288", "data", FREE, "validation tokens per batch (all ranks)")      \
    X(eval_stride, INT, "0", "data", FREE,                                                          \
      "sliding-window validation (train_gpt.py's EVAL_STRIDE): windows of train_seq_len tokens every eval_stride tokens, each scoring its last eval_stride positions (the first window all); 0 = non-overlapping sequences") \
    X(eval_seq_len, INT, "0", "data", FREE,                                                         \
      "the golf artifact's round trip on sequences of this many tokens (train_gpt.py's EVAL_SEQ_LEN; 0 = train_seq_len), both its non-overlapping and its sliding-window evaluation; above rope_train_seq_len the RoPE base is NTK-scaled, as the record's Rotary does") \
    X(train_log_every, INT, "200", "data", FREE, "print a progress line every N steps (metrics.jsonl gets every step)") \
    X(golf_artifact, BOOL, "0", "data", FREE,                                                       \
      "at the end: write the parameter-golf artifact (golf_format) into out_dir and validate its round trip") \
    X(golf_format, STR, "int8-zlib", "data", FREE,                                                  \
      "the golf artifact's format: int8-zlib (the baseline's int8 + zlib level 9, final_model.int8.stz) | int6-zstd (the 1.1248 record's mixed int6 + zstd level 22, final_model.int6.safetensors.zst) | gptq-brotli (the 1.0611 record's GPTQ + LQER + brotli, final_model.gptq.safetensors.br; needs the Hessians, docs/model.md) | gptq-pergroup (the same quantization in the record's per-group layout: lrzip ZPAQ per role, brotli for the rest, final_model.gptq.pgrp; runs Debian's lrzip)") \
    /* the GPTQ artifacts (golf_format = gptq-brotli or gptq-pergroup; docs/model.md, "The GPTQ quantizer") */      \
    X(gptq_calibration_batches, INT, "16", "artifact", FREE,                                        \
      "the Hessians' calibration: this many training batches (train_batch_tokens each) after the last step; training data only") \
    X(matrix_bits, INT, "6", "artifact", FREE, "GPTQ bits of the block matrices, in [2, 8]")       \
    X(embed_bits, INT, "8", "artifact", FREE, "GPTQ bits of the token embedding, in [2, 8] (the 1.0611 record ran 7)") \
    X(matrix_clip_sigmas, FLOAT, "12.85", "artifact", FREE,                                         \
      "GPTQ row scale = this * std(row) / (2^(bits-1) - 1) for matrices not in the classes below; > 0") \
    X(mlp_clip_sigmas, FLOAT, "10.0", "artifact", FREE, "the same for the MLP matrices (the 1.0611 record ran 11.5)") \
    X(attn_clip_sigmas, FLOAT, "13.0", "artifact", FREE, "the same for the attention matrices")   \
    X(embed_clip_sigmas, FLOAT, "20.0", "artifact", FREE, "the same for the token embedding (the 1.0611 record ran 14)") \
    X(gated_attn_quant_gate, BOOL, "0", "artifact", FREE,                                           \
      "store the sparse attention gates (attn_gate_w) as int8 rows instead of float16 (the 1.0611 record ran 1)") \
    X(lqer_enabled, BOOL, "1", "artifact", FREE,                                                    \
      "LQER: a low-rank correction of the quantization error of the lqer_top_k matrices with the largest error") \
    X(lqer_rank, INT, "4", "artifact", FREE, "LQER: the correction's rank, >= 1")                 \
    X(lqer_top_k, INT, "3", "artifact", FREE, "LQER: how many matrices get a correction, >= 0")   \
    X(lqer_factor_bits, INT, "4", "artifact", FREE,                                                 \
      "LQER: bits of the symmetric factors (when the asymmetric form does not apply), in [2, 8]")  \
    X(lqer_asym_enabled, BOOL, "1", "artifact", FREE,                                               \
      "LQER: factors as int2 (A, one scale) and int4 in groups of lqer_asym_group (B) when B's size is a multiple of the group") \
    X(lqer_asym_group, INT, "64", "artifact", FREE, "LQER: B's group size, >= 1")                 \
    /* test-time training (issue 57; docs/model.md, "Test-time training"); off by default */     \
    X(ttt_enabled, BOOL, "0", "ttt", FREE,                                                          \
      "score-first phased LoRA test-time training of the validation documents (the 1.0611 record ran 1); needs the validation data's bos_id; the golf artifact's round trip (ckpt golf, a run's end) then runs it, as `ctrain eval --mode ttt` does; on either backend") \
    X(ttt_lora_rank, INT, "96", "ttt", FREE, "rank of the per-document LoRA adapters, in [1, model_dim] (the 1.0611 record ran 80)") \
    X(ttt_lora_alpha, FLOAT, "144", "ttt", FREE, "the adapters' scale is ttt_lora_alpha / ttt_lora_rank; >= 0") \
    X(ttt_lora_lr, FLOAT, "1e-4", "ttt", FREE, "learning rate of the adapters' optimizer; >= 0")  \
    X(ttt_chunk_size, INT, "48", "ttt", FREE,                                                       \
      "a document is scored, then adapted on, in chunks of this many predictions; in [1, the TTT window]") \
    X(ttt_eval_seq_len, INT, "2048", "ttt", FREE,                                                   \
      "the TTT window: a chunk's forward sees at most this many tokens of its document; 0 = eval_seq_len (train_seq_len when that is 0 too)") \
    X(ttt_batch_size, INT, "64", "ttt", FREE, "documents adapted side by side, each with its own adapters; >= 1") \
    X(ttt_grad_steps, INT, "1", "ttt", FREE, "optimizer steps of the adapters per chunk; 0 = score only") \
    X(ttt_weight_decay, FLOAT, "1.0", "ttt", FREE,                                                  \
      "the adapters' weight decay (adam: decoupled, sgd: coupled L2); >= 0 (the 1.0611 record ran 0.5)") \
    X(ttt_beta1, FLOAT, "0", "ttt", FREE, "adam: beta1 of the adapters' optimizer (sgd: its momentum), in [0, 1)") \
    X(ttt_beta2, FLOAT, "0.999", "ttt", FREE, "adam: beta2 of the adapters' optimizer, in [0, 1) (the 1.0611 record ran 0.99)") \
    X(ttt_k_lora, BOOL, "1", "ttt", FREE, "an adapter on the key projection too (q and v always have one)") \
    X(ttt_mlp_lora, BOOL, "1", "ttt", FREE, "an adapter beside each MLP (normed MLP input to its output)") \
    X(ttt_o_lora, BOOL, "1", "ttt", FREE, "an adapter added to each attention output projection's output") \
    X(ttt_optimizer, STR, "adam", "ttt", FREE, "the adapters' optimizer: adam (AdamW, eps 1e-10) | sgd") \
    X(phased_ttt_prefix_docs, INT, "2000", "ttt", FREE,                                             \
      "documents the global steps train on in all: the phases end once the queue (longest first) has scored this many; 0 = no global step (the 1.0611 record ran 2500)") \
    X(phased_ttt_num_phases, INT, "1", "ttt", FREE,                                                 \
      "global SGD steps of the base weights, one after each phase, step k on the first (k+1)/K of the prefix documents; >= 1, at most phased_ttt_prefix_docs when that is > 0 (the 1.0611 record ran 3)") \
    X(global_ttt_lr, FLOAT, "1e-3", "ttt", FREE, "the global step's SGD learning rate (cosine over its chunks); >= 0") \
    X(global_ttt_momentum, FLOAT, "0.9", "ttt", FREE, "the global step's SGD momentum; >= 0")      \
    X(global_ttt_epochs, INT, "1", "ttt", FREE, "passes of the global step over each chunk; 0 = no update") \
    X(global_ttt_chunk_tokens, INT, "32768", "ttt", FREE,                                           \
      "the global step's chunk of the scored documents' stream (one learning rate each; the last chunk is not trained on); >= the evaluation's sequence length") \
    X(global_ttt_batch_seqs, INT, "32", "ttt", FREE, "sequences per SGD step of the global step; >= 1") \
    X(global_ttt_warmup_start_lr, FLOAT, "0", "ttt", FREE, "the global step's learning rate at its first chunk when warming up; >= 0") \
    X(global_ttt_warmup_chunks, INT, "0", "ttt", FREE, "chunks of linear learning-rate warmup before the cosine; 0 = none") \
    X(global_ttt_grad_clip, FLOAT, "1.0", "ttt", FREE, "the global step's gradient-norm clip; 0 = off") \
    X(ttt_time_budget, FLOAT, "0", "ttt", FREE,                                                     \
      "seconds of test-time training (ctrain's own): past it, documents are scored without adapting and no global step runs; 0 = no limit") \
    /* run */                                                                                      \
    X(out_dir, STR, "out", "run", FREE, "run directory: config.txt, metrics.jsonl, checkpoints/")  \
    X(checkpoint_every, INT, "1000", "run", FREE, "write a checkpoint every N steps; 0 = only at stop/end") \
    X(keep_checkpoints, INT, "3", "run", FREE, "how many recent checkpoints to keep")              \
    X(checkpoint_async, STR, "auto", "run", FREE,                                                   \
      "write checkpoints in a background process while training goes on: on | off | auto (on for device=cuda)") \
    X(checkpoint_wait, FLOAT, "1800", "run", FREE,                                                  \
      "seconds the run waits for a background checkpoint writer (at the next save or the end; after a stop signal at most 20 more); then exit 1 naming it; 0 = no limit") \
    X(lock_wait, FLOAT, "0", "run", FREE,                                                           \
      "seconds to wait while another run holds out_dir (the sbatch scripts use 300 for requeues); 0 = fail at once") \
    X(resume, STR, "auto", "run", FREE, "auto (newest valid checkpoint in out_dir) | none | PATH") \
    X(overwrite, BOOL, "0", "run", FREE,                                                            \
      "with resume=none: start fresh in an out_dir that has checkpoints, moving them, metrics.jsonl and config.txt aside") \
    X(resume_data, STR, "same", "run", FREE,                                                        \
      "what a resume accepts of the training files: same (paths, token counts, checksums) | moved (paths may differ) | changed (token counts only)") \
    X(stop_signal, STR, "USR1", "run", FREE,                                                        \
      "signal that asks for checkpoint + exit 75 (besides TERM and INT); USR2 where MPI/NCCL use USR1") \
    X(stop_before_job_end, FLOAT, "0", "run", FREE,                                                 \
      "under Slurm: checkpoint and exit 75 this many seconds before the job's end time; 0 = off")  \
    X(device, STR, "auto", "run", FREE, "auto (cuda if a GPU is visible, else cpu) | cpu (fp32 reference) | cuda (bf16 compute)")               \
    X(collective_timeout, FLOAT, "600", "run", FREE,                                                \
      "multi-rank: seconds a rank waits in one collective before ending the job (a rank died or hangs); 0 = forever") \
    X(nccl, STR, "auto", "run", FREE,                                                               \
      "device=cuda: auto (NCCL when world > 1) | on (also with one rank: checks the multi-GPU path) | off (one rank only)") \
    X(grad_bucket_mb, FLOAT, "8", "run", FREE,                                                      \
      "NCCL gradient buckets (MB), reduced while the last micro-batch's backward goes on") \
    X(residual_dtype, STR, "fp32", "run", FREE,                                                    \
      "device=cuda: storage of the residual stream and the gradients along it: fp32 | bf16 (as train_gpt.py keeps it: half the bytes of every norm, residual and mix pass; docs/cuda.md, \"Residual stream\")") \
    X(cuda_graph, BOOL, "1", "run", FREE,                                                         \
      "device=cuda: replay each micro-batch's forward and backward as one CUDA graph (same kernels, same bits, no per-kernel launch cost); 0 = launch kernel by kernel") \
    X(threads, INT, "0", "run", FREE, "CPU threads per rank; 0 = every core the process may use (its CPU affinity: under Slurm, the task's CPUs); docs/running.md, \"Threads\"")

#endif
