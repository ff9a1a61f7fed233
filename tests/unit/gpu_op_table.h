/* gpu_op_table.h — every CUDA op case, one row each: the op (described once in its family's
 * gpu_ops_<family>.h, beside kernels/cuda/cuda_<family>.cu), a shape name (the case is named
 * <op>_<shape>), the shape, and where the row runs: CASE_TEST, a case of test_gpu_ops (against
 * the CPU reference, run twice for the bits; gpu_ops.h), CASE_SLOW if the emulator's quick set
 * leaves it out; CASE_BENCH, timed by bench_gpu_ops by default (any row can be timed by naming
 * it). per_seq: for bench_gpu_ops --seqs, d[0] is
 * per_seq times the number of sequences (the rows below are given for its default of 8).
 * A new op: its adapters and OpDef in its family's file, then its rows here. */
#ifndef CT_TEST_GPU_OP_TABLE_H
#define CT_TEST_GPU_OP_TABLE_H

#include "gpu_ops_attention.h"
#include "gpu_ops_bigram.h"
#include "gpu_ops_embedding.h"
#include "gpu_ops_gemm.h"
#include "gpu_ops_head_gate.h"
#include "gpu_ops_lanes.h"
#include "gpu_ops_logits.h"
#include "gpu_ops_lora.h"
#include "gpu_ops_optim.h"
#include "gpu_ops_rope.h"
#include "gpu_ops_rowops.h"
#include "gpu_ops_smear.h"
#include "gpu_ops_weights.h"
#include "gpu_ops_xsa.h"

#ifdef CT_HAVE_CUDA

/* Row-op shapes: rows not a multiple of a block's 8, channels not a multiple of 32, tokens over
 * several CUDA_COLSUM_ROWS chunks with a partial last one (RAGGED); C % 4 != 0, the one-channel
 * path, and fewer rows than a block holds (ODD). */
#define RAGGED 611, 200
#define ODD 37, 203
#define RELU2_N (611 * 200)
/* The baseline model's shapes (dim 512, 8 heads / 4 kv heads of 64, MLP 1024, T 1024, vocab
 * 1024), 8 sequences: 8192 tokens. */
#define TOKENS 8192
#define B_MODEL 512
#define B_MLP 1024
#define B_VOCAB 1024
#define T_SEQ 1024
/* The record's shapes (issue 36: 2026-03-21_11L_XSA4_EMA_PartialRoPE_LateQAT_1.1248): dim 512, 8
 * heads / 4 kv heads of 64, T 2048, rope_dims 16, bigram table 2048 x 128, 8 sequences; its rows
 * scale with --seqs as sequences of 2048 tokens. v in the backend's [q | k | v] rows of
 * 512 + 2 * 256 columns: 768 past v's 256. */
#define REC_T 2048
#define REC_TOKENS (8 * REC_T)
#define REC_ROPE_DIMS 16
#define REC_BIGRAM_VOCAB 2048
#define REC_BIGRAM_DIM 128
#define REC_V_EXTRA 768
/* the record's parameter count (11 layers, mlp_mult 3, bigram 2048 x 128): the weight passes' length */
#define REC_PARAMS 26829913
/* The record's test-time training (issue 57): batches of 64 documents, windows of up to 2048
 * tokens (the rows below: every document at the full window), adapters of rank 80 on dim 512 (the
 * 512 -> 512 shape here), the head's on a vocabulary of 8192, one document per call. */
#define TTT_DOCS 64
#define TTT_RANK 80
#define TTT_VOCAB 8192

static const OpCase gpu_op_cases[] = {
    /* ---- rowops (gpu_ops_rowops.h): d = {N, C, mode, ln_scale, BF16S} ---- */
    {&op_rmsnorm_fwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_rmsnorm_fwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_rmsnorm_fwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_rmsnorm_fwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_rmsnorm_bwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_rmsnorm_bwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_rmsnorm_bwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_rmsnorm_bwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_mix_norm_fwd, "ragged", {RAGGED, 0}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_skip", {RAGGED, 1}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "odd", {ODD, 0}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "odd_skip", {ODD, 1}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_ln_scale", {RAGGED, 1, 3}, CASE_TEST, 0}, /* d[3]: ln_scale's 1/sqrt(3) */
    {&op_out_mix_norm_fwd, "ragged_noskip", {RAGGED, 0}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_skip", {RAGGED, 1}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_selfskip", {RAGGED, 2}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_ln_scale", {RAGGED, 1, 5}, CASE_TEST, 0},
    /* the gated skip (skip_gates_enabled), d[5] = 1: C = 203 takes the one-channel path */
    {&op_mix_norm_fwd, "ragged_skip_gated", {RAGGED, 1, 0, 0, 1}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "odd_skip_gated", {ODD, 1, 0, 0, 1}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_skip_gated", {RAGGED, 1, 0, 0, 1}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_selfskip_gated", {RAGGED, 2, 3, 0, 1}, CASE_TEST, 0},
    {&op_skip_gate_bwd, "ragged", {RAGGED, 0}, CASE_TEST, 0},
    {&op_skip_gate_bwd, "ragged_in_place", {RAGGED, 1}, CASE_TEST, 0},
    {&op_skip_gate_bwd, "odd", {ODD, 0}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "baseline", {TOKENS, B_MODEL, 0}, CASE_BENCH, T_SEQ},
    {&op_out_mix_norm_fwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_add_norm_fwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_add_norm_fwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_add_norm_fwd, "ragged_ln_scale", {RAGGED, 0, 3}, CASE_TEST, 0},
    {&op_add_norm_fwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_add_norm_fwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_add_norm_bwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_add_norm_bwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_add_norm_bwd, "ragged_ln_scale", {RAGGED, 0, 3}, CASE_TEST, 0},
    {&op_add_norm_bwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_add_norm_bwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_add_norm_scale_bwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_add_norm_scale_bwd, "odd", {70, 203}, CASE_TEST, 0},         /* one channel per lane */
    {&op_add_norm_scale_bwd, "wide", {300, 8000}, CASE_TEST, 0},      /* 8 x 8064 doubles: beyond any GPU's 227 KiB */
    {&op_add_norm_scale_bwd, "ragged_ln_scale", {RAGGED, 0, 3}, CASE_TEST, 0},
    {&op_add_norm_scale_bwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_add_norm_scale_bwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_norm_mix_bwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_norm_mix_bwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_norm_mix_bwd, "wide", {300, 16000}, CASE_TEST, 0},           /* 8 x 2 x 16000 doubles: the two-kernel path */
    {&op_norm_mix_bwd, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_norm_mix_bwd, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_scaled_add_fwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_scaled_add_fwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_scaled_add_fwd_inner, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_scaled_add_fwd_inner, "odd", {ODD}, CASE_TEST, 0},
    {&op_scaled_add_fwd_inner, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_scaled_add_fwd_inner, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_scaled_add_bwd, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_scaled_add_bwd, "odd", {ODD}, CASE_TEST, 0},
    {&op_scaled_add_bwd_bf16, "ragged", {RAGGED}, CASE_TEST, 0},
    {&op_scaled_add_bwd_bf16, "baseline", {TOKENS, B_MODEL}, CASE_BENCH, T_SEQ},
    {&op_scaled_add_bwd_bf16, "baseline_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_residual_mix_bwd, "ragged", {RAGGED, 1}, CASE_TEST, 0},
    {&op_residual_mix_bwd, "ragged_write", {RAGGED, 0}, CASE_TEST, 0},
    {&op_residual_mix_bwd, "baseline_write", {TOKENS, B_MODEL, 0}, CASE_BENCH, T_SEQ},
    {&op_residual_mix_bwd, "baseline_write_bf16s", {TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, T_SEQ},
    {&op_add_inplace, "100003", {100003}, CASE_TEST, 0},
    /* the same ops on a bf16 residual stream (residual_dtype bf16): d[4] = BF16S, rows *_bf16s
     * (their bench rows are beside the fp32 baselines above) */
    {&op_rmsnorm_fwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_rmsnorm_fwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_rmsnorm_bwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_rmsnorm_bwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_skip_bf16s", {RAGGED, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "odd_skip_bf16s", {ODD, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_ln_scale_bf16s", {RAGGED, 1, 3, BF16S}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_noskip_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_skip_bf16s", {RAGGED, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_selfskip_bf16s", {RAGGED, 2, 0, BF16S}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "odd_selfskip_bf16s", {ODD, 2, 0, BF16S}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_ln_scale_bf16s", {RAGGED, 1, 5, BF16S}, CASE_TEST, 0},
    {&op_mix_norm_fwd, "ragged_skip_gated_bf16s", {RAGGED, 1, 0, BF16S, 1}, CASE_TEST, 0},
    {&op_out_mix_norm_fwd, "ragged_selfskip_gated_bf16s", {RAGGED, 2, 0, BF16S, 1}, CASE_TEST, 0},
    {&op_skip_gate_bwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_skip_gate_bwd, "odd_in_place_bf16s", {ODD, 1, 0, BF16S}, CASE_TEST, 0},
    /* the parallel lanes' block end (gpu_ops_lanes.h): d = {N, C, in place, cancelling, BF16S} */
    {&op_lane_mix_fwd, "ragged", {RAGGED, 0}, CASE_TEST, 0},
    {&op_lane_mix_fwd, "odd_in_place", {ODD, 1}, CASE_TEST, 0},
    {&op_lane_mix_fwd, "ragged_in_place_bf16s", {RAGGED, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_lane_mix_fwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "ragged", {RAGGED, 0}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "odd_in_place", {ODD, 1}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "ragged_in_place_bf16s", {RAGGED, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "ragged_cancelling", {RAGGED, 0, 1}, CASE_TEST, 0},
    {&op_lane_mix_bwd, "ragged_cancelling_bf16s", {RAGGED, 0, 1, BF16S}, CASE_TEST, 0},
    /* the final lane mean (gpu_ops_lanes.h): d = {N, C, in place, -, BF16S} */
    {&op_lane_mean_fwd, "ragged", {RAGGED, 0}, CASE_TEST, 0},
    {&op_lane_mean_fwd, "odd_in_place_bf16s", {ODD, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_lane_mean_bwd, "ragged_in_place", {RAGGED, 1}, CASE_TEST, 0},
    {&op_lane_mean_bwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    /* timed at the 1.0611 record's shape (8 packed rows of 2,048 tokens, 512 wide), both streams */
    {&op_lane_mix_fwd, "record", {REC_TOKENS, B_MODEL}, CASE_BENCH, REC_T},
    {&op_lane_mix_fwd, "record_bf16s", {REC_TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, REC_T},
    {&op_lane_mix_bwd, "record", {REC_TOKENS, B_MODEL}, CASE_BENCH, REC_T},
    {&op_lane_mix_bwd, "record_bf16s", {REC_TOKENS, B_MODEL, 0, 0, BF16S}, CASE_BENCH, REC_T},
    {&op_lane_mean_fwd, "record", {REC_TOKENS, B_MODEL}, CASE_BENCH, REC_T},
    {&op_lane_mean_bwd, "record", {REC_TOKENS, B_MODEL}, CASE_BENCH, REC_T},
    {&op_add_norm_fwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_fwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_fwd, "ragged_ln_scale_bf16s", {RAGGED, 0, 3, BF16S}, CASE_TEST, 0},
    {&op_add_norm_bwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_bwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_bwd, "ragged_ln_scale_bf16s", {RAGGED, 0, 3, BF16S}, CASE_TEST, 0},
    {&op_add_norm_scale_bwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_scale_bwd, "odd_bf16s", {70, 203, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_norm_scale_bwd, "wide_bf16s", {300, 8000, 0, 0, BF16S}, CASE_TEST, 0}, /* the two-kernel path */
    {&op_add_norm_scale_bwd, "ragged_ln_scale_bf16s", {RAGGED, 0, 3, BF16S}, CASE_TEST, 0},
    {&op_norm_mix_bwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_norm_mix_bwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_norm_mix_bwd, "wide_bf16s", {300, 16000, 0, 0, BF16S}, CASE_TEST, 0}, /* the two-kernel path */
    {&op_scaled_add_fwd, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_scaled_add_fwd, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_scaled_add_fwd_inner, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_scaled_add_fwd_inner, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_scaled_add_bwd_bf16, "ragged_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_scaled_add_bwd_bf16, "odd_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_residual_mix_bwd, "ragged_bf16s", {RAGGED, 1, 0, BF16S}, CASE_TEST, 0},
    {&op_residual_mix_bwd, "ragged_write_bf16s", {RAGGED, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_residual_mix_bwd, "odd_write_bf16s", {ODD, 0, 0, BF16S}, CASE_TEST, 0},
    {&op_add_inplace, "100003_bf16s", {100003, 0, 0, 0, BF16S}, CASE_TEST, 0},
    /* SmearGate (gpu_ops_smear.h): d = {B, T, C}: chunk edges inside sequences; the one-channel
     * path; T = 1 */
    {&op_smear_fwd, "ragged", {3, 211, 200}, CASE_TEST, 0},
    {&op_smear_fwd, "odd", {2, 300, 37}, CASE_TEST, 0},
    {&op_smear_fwd, "one_position", {70, 1, 64}, CASE_TEST, 0},
    {&op_smear_fwd, "record", {8, REC_T, B_MODEL}, CASE_BENCH, 1},
    {&op_smear_bwd, "ragged", {3, 211, 200}, CASE_TEST, 0},
    {&op_smear_bwd, "odd", {2, 300, 37}, CASE_TEST, 0},
    {&op_smear_bwd, "one_position", {70, 1, 64}, CASE_TEST, 0},
    {&op_smear_bwd, "record", {8, REC_T, B_MODEL}, CASE_BENCH, 1},
    /* SmearGate with the BOS mask (gpu_ops_smear.h): d = {B, T, C, window} */
    {&op_smear_bos_fwd, "ragged", {3, 211, 200, 12}, CASE_TEST, 0},
    {&op_smear_bos_fwd, "whole_window", {2, 300, 37, 37}, CASE_TEST, 0},
    {&op_smear_bos_fwd, "one_position", {70, 1, 64, 12}, CASE_TEST, 0},
    {&op_smear_bos_fwd, "record", {8, REC_T, B_MODEL, 12}, CASE_BENCH, 1},
    {&op_smear_bos_bwd, "ragged", {3, 211, 200, 12}, CASE_TEST, 0},
    {&op_smear_bos_bwd, "whole_window", {2, 300, 37, 37}, CASE_TEST, 0},
    {&op_smear_bos_bwd, "one_position", {70, 1, 64, 12}, CASE_TEST, 0},
    {&op_smear_bos_bwd, "record", {8, REC_T, B_MODEL, 12}, CASE_BENCH, 1},
    /* relu^2: d = {n, offset, in place}: the 8-wide path, with a tail, short; one element past a
     * 16-byte boundary (the one-by-one path); the backward in place as the backend runs it */
    {&op_relu2_fwd, "vec", {RELU2_N, 0}, CASE_TEST, 0},
    {&op_relu2_fwd, "vec_unaligned", {RELU2_N, 1}, CASE_TEST, 0},
    {&op_relu2_fwd, "tail", {RELU2_N - 3, 0}, CASE_TEST, 0},
    {&op_relu2_fwd, "tail_unaligned", {RELU2_N - 3, 1}, CASE_TEST, 0},
    {&op_relu2_fwd, "short", {5, 0}, CASE_TEST, 0},
    {&op_relu2_fwd, "short_unaligned", {5, 1}, CASE_TEST, 0},
    {&op_relu2_fwd, "baseline", {TOKENS * B_MLP, 0}, CASE_BENCH, T_SEQ * B_MLP},
    {&op_relu2_bwd, "vec", {RELU2_N, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "vec_unaligned", {RELU2_N, 1, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "tail", {RELU2_N - 3, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "tail_unaligned", {RELU2_N - 3, 1, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "short", {5, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "short_unaligned", {5, 1, 1}, CASE_TEST, 0},
    {&op_relu2_bwd, "vec_apart", {RELU2_N, 0, 0}, CASE_TEST, 0},
    {&op_relu2_bwd, "baseline", {TOKENS * B_MLP, 0, 0}, CASE_BENCH, T_SEQ * B_MLP},
    {&op_relu2_bwd_h, "vec", {RELU2_N, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "vec_unaligned", {RELU2_N, 1, 1}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "tail", {RELU2_N - 3, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "tail_unaligned", {RELU2_N - 3, 1, 1}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "short", {5, 0, 1}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "short_unaligned", {5, 1, 1}, CASE_TEST, 0},
    /* leaky relu^2 (mlp_negative_slope 0.5, the 1.0611 record's; 0.3: a slope whose products round) */
    {&op_relu2_fwd, "leaky_vec", {RELU2_N, 0, 0, 500}, CASE_TEST, 0},
    {&op_relu2_fwd, "leaky_tail_unaligned", {RELU2_N - 3, 1, 0, 300}, CASE_TEST, 0},
    {&op_relu2_bwd, "leaky_vec", {RELU2_N, 0, 1, 500}, CASE_TEST, 0},
    {&op_relu2_bwd, "leaky_tail_unaligned", {RELU2_N - 3, 1, 1, 300}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "leaky_vec", {RELU2_N, 0, 1, 500}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "leaky_tail_unaligned", {RELU2_N - 3, 1, 1, 300}, CASE_TEST, 0},
    {&op_relu2_bwd_h, "baseline", {TOKENS * B_MLP, 0, 0}, CASE_BENCH, T_SEQ * B_MLP},
    {&op_f32_to_bf16, "100003", {100003}, CASE_TEST, 0},
    {&op_scale_inplace, "100003", {100003}, CASE_TEST, 0},
    {&op_bf16_to_f32, "100003", {100003}, CASE_TEST, 0},
    {&op_round_bf16_inplace, "100003", {100003}, CASE_TEST, 0},
    {&op_sum_sumsq, "1", {1}, CASE_TEST, 0},
    {&op_sum_sumsq, "1000", {1000}, CASE_TEST, 0},
    {&op_sum_sumsq, "4097", {4097}, CASE_TEST, 0},
    {&op_sum_sumsq, "5000000", {5000000}, CASE_TEST, 0},
    {&op_colsum, "10x97", {10, 97}, CASE_TEST, 0},
    {&op_colsum, "42x97", {42, 97}, CASE_TEST, 0},
    {&op_colsum, "51546x97", {51546, 97}, CASE_TEST, 0},

    /* ---- embedding (gpu_ops_embedding.h): d = {N, V, C, skewed ids} ---- */
    {&op_embedding_index, "counting_sort", {3001, 97}, CASE_TEST, 0},
    {&op_embedding_fwd, "ragged", {3001, 97, 160, 0}, CASE_TEST, 0},
    {&op_embedding_fwd, "baseline", {TOKENS, B_VOCAB, B_MODEL, 1}, CASE_BENCH, T_SEQ},
    {&op_embedding_bwd, "uniform", {3001, 97, 160, 0}, CASE_TEST, 0},
    {&op_embedding_bwd, "skewed", {3001, 97, 160, 1}, CASE_TEST, 0},
    {&op_embedding_bwd, "baseline", {TOKENS, B_VOCAB, B_MODEL, 1}, CASE_BENCH, T_SEQ},
    {&op_embedding_fwd, "bigram_record", {REC_TOKENS, REC_BIGRAM_VOCAB, REC_BIGRAM_DIM, 0}, CASE_BENCH, REC_T},
    {&op_embedding_bwd, "bigram_record", {REC_TOKENS, REC_BIGRAM_VOCAB, REC_BIGRAM_DIM, 0}, CASE_BENCH, REC_T},

    /* ---- the bigram hash embedding's own ops (gpu_ops_bigram.h): hash d = {B, T, buckets, ids
     * below}; add d = {N, C, bf16 branch} ---- */
    {&op_bigram_hash, "ragged", {3, 211, 2048, 1024}, CASE_TEST, 0},
    {&op_bigram_hash, "wrapping_ids", {2, 333, 4096, 2147483647}, CASE_TEST, 0},
    {&op_bigram_hash, "two_buckets", {4, 50, 2, 1000}, CASE_TEST, 0},
    {&op_bigram_hash, "record", {8, REC_T, REC_BIGRAM_VOCAB, B_VOCAB}, CASE_BENCH, 1},
    {&op_add_scalar_scaled_fwd, "ragged_bf16", {RAGGED, 1}, CASE_TEST, 0},
    {&op_add_scalar_scaled_fwd, "ragged_f32", {RAGGED, 0}, CASE_TEST, 0},
    {&op_add_scalar_scaled_fwd, "record", {REC_TOKENS, B_MODEL, 1}, CASE_BENCH, REC_T},
    {&op_add_scalar_scaled_bwd, "ragged_bf16", {RAGGED, 1}, CASE_TEST, 0},
    {&op_add_scalar_scaled_bwd, "ragged_f32", {RAGGED, 0}, CASE_TEST, 0},
    {&op_add_scalar_scaled_bwd, "short", {3, 5, 0}, CASE_TEST, 0},
    /* more than 1024 x 4096 elements: the grid's blocks loop */
    {&op_add_scalar_scaled_bwd, "grid_stride", {4100, 1024, 1}, CASE_TEST | CASE_SLOW, 0},
    {&op_add_scalar_scaled_bwd, "record", {REC_TOKENS, B_MODEL, 1}, CASE_BENCH, REC_T},

    /* ---- QK-norm + RoPE (gpu_ops_rope.h): d = {B, T, heads, head_dim, with gain, rope_dims (0:
     * head_dim)} ---- */
    {&op_rope_fwd, "hd64_gain", {3, 150, 4, 64, 1}, CASE_TEST, 0},
    {&op_rope_fwd, "hd64_nogain", {2, 33, 2, 64, 0}, CASE_TEST, 0},
    {&op_rope_fwd, "hd32", {2, 70, 8, 32, 1}, CASE_TEST, 0},
    {&op_rope_fwd, "hd24_uneven_lanes", {1, 45, 3, 24, 1}, CASE_TEST, 0},
    {&op_rope_fwd, "hd128_two_pairs_per_lane", {1, 20, 2, 128, 1}, CASE_TEST, 0},
    {&op_rope_fwd_bf16, "hd64_gain", {3, 150, 4, 64, 1}, CASE_TEST, 0},
    {&op_rope_fwd_bf16, "baseline", {8, T_SEQ, 8, 64, 1}, CASE_BENCH, 1},
    {&op_rope_bwd, "hd64_gain", {3, 150, 4, 64, 1}, CASE_TEST, 0},
    {&op_rope_bwd, "hd64_nogain", {2, 33, 2, 64, 0}, CASE_TEST, 0},
    {&op_rope_bwd, "hd32", {2, 70, 8, 32, 1}, CASE_TEST, 0},
    {&op_rope_bwd, "hd24_uneven_lanes", {1, 45, 3, 24, 1}, CASE_TEST, 0},
    {&op_rope_bwd, "hd128_two_pairs_per_lane", {1, 20, 2, 128, 1}, CASE_TEST, 0},
    {&op_rope_bwd_bf16, "hd64_gain", {3, 150, 4, 64, 1}, CASE_TEST, 0},
    {&op_rope_bwd_bf16, "baseline", {8, T_SEQ, 8, 64, 1}, CASE_BENCH, 1},
    {&op_rope_column_block, "column_block", {2, 37, 2, 64, 1, 256}, CASE_TEST, 0},
    /* partial RoPE (the record's rope_dims): the tail unrotated; rope_dims = head_dim given */
#define PARTIAL_ROPE_SHAPE(name, ...)                                                                                 \
    {&op_rope_fwd, name, {__VA_ARGS__}, CASE_TEST, 0}, {&op_rope_bwd, name, {__VA_ARGS__}, CASE_TEST, 0}
    PARTIAL_ROPE_SHAPE("hd64_rd16_gain", 3, 150, 4, 64, 1, 16),
    PARTIAL_ROPE_SHAPE("hd64_rd16_nogain", 2, 33, 2, 64, 0, 16),
    PARTIAL_ROPE_SHAPE("hd64_rd2", 1, 20, 2, 64, 1, 2),
    PARTIAL_ROPE_SHAPE("hd64_rd64_full", 3, 150, 4, 64, 1, 64),
    PARTIAL_ROPE_SHAPE("hd32_rd8", 2, 70, 8, 32, 1, 8),
    PARTIAL_ROPE_SHAPE("hd24_rd6_uneven_lanes", 1, 45, 3, 24, 1, 6),
    PARTIAL_ROPE_SHAPE("hd128_rd96_two_pairs_per_lane", 1, 20, 2, 128, 1, 96),
    PARTIAL_ROPE_SHAPE("hd256_rd16_four_pairs_per_lane", 1, 9, 2, 256, 1, 16),
#undef PARTIAL_ROPE_SHAPE
    {&op_rope_fwd_bf16, "hd64_rd16", {3, 150, 4, 64, 1, 16}, CASE_TEST, 0},
    {&op_rope_bwd_bf16, "hd64_rd16", {3, 150, 4, 64, 1, 16}, CASE_TEST, 0},
    {&op_rope_fwd_bf16, "record", {8, REC_T, 8, 64, 1, REC_ROPE_DIMS}, CASE_BENCH, 1},
    {&op_rope_bwd_bf16, "record", {8, REC_T, 8, 64, 1, REC_ROPE_DIMS}, CASE_BENCH, 1},

    /* ---- matrix products (gpu_ops_gemm.h): linear d = {N, in, out}; gemm d = {M, N, K, ta, tb} ---- */
    {&op_linear_fwd, "ragged", {301, 96, 200}, CASE_TEST, 0},
    {&op_linear_fwd, "baseline", {TOKENS, B_MODEL, B_MLP}, CASE_BENCH, T_SEQ},
    {&op_linear_fwd_bf16, "ragged", {301, 96, 200}, CASE_TEST, 0},
    {&op_linear_fwd_bf16, "baseline", {TOKENS, B_MODEL, B_MLP}, CASE_BENCH, T_SEQ},
    {&op_linear_bwd, "ragged", {301, 96, 200}, CASE_TEST, 0},
    {&op_linear_bwd, "baseline", {TOKENS, B_MODEL, B_MLP}, CASE_BENCH, T_SEQ},
    {&op_linear_bwd_dx_acc, "ragged", {301, 96, 200}, CASE_TEST, 0},
    {&op_linear_bwd_dx_bf16, "ragged", {301, 96, 200}, CASE_TEST, 0},
    {&op_gemm_f32, "nn", {70, 45, 130, 0, 0}, CASE_TEST, 0},
    {&op_gemm_f32, "nt", {70, 45, 130, 0, 1}, CASE_TEST, 0},
    {&op_gemm_f32, "tn", {70, 45, 130, 1, 0}, CASE_TEST, 0},
    {&op_gemm_f32, "tt", {70, 45, 130, 1, 1}, CASE_TEST, 0},
    {&op_gemm_bf16, "nn", {70, 45, 130, 0, 0}, CASE_TEST, 0},
    {&op_gemm_bf16, "nt", {70, 45, 130, 0, 1}, CASE_TEST, 0},
    {&op_gemm_bf16, "tn", {70, 45, 130, 1, 0}, CASE_TEST, 0},
    {&op_gemm_bf16, "tt", {70, 45, 130, 1, 1}, CASE_TEST, 0},

    /* ---- logits + cross-entropy (gpu_ops_logits.h): d = {N, C, V, chunk} ---- */
    {&op_logits_ce, "chunks_dividing_N", {512, 64, 1024, 128}, CASE_TEST, 0},
    {&op_logits_ce, "ragged_chunk_and_vocab", {301, 96, 517, 100}, CASE_TEST, 0},
    {&op_logits_ce, "one_chunk_bigger_than_N", {77, 32, 300, 4096}, CASE_TEST, 0},
    {&op_logits_ce, "baseline", {TOKENS, B_MODEL, B_VOCAB, TOKENS}, CASE_BENCH, T_SEQ},

    /* ---- attention (gpu_ops_attention.h): d = {B, T, heads, kv heads, head_dim, segments} ---- */
    /* CASE_SLOW: minutes each in the host emulator (one OS thread per CUDA thread) */
    {&op_attention_v_wide, "v_in_wider_rows", {2, 70, 4, 2, 64}, CASE_TEST | CASE_SLOW, 0},
#define ATTENTION_SHAPE(name, flags, ...)                                                                              \
    {&op_attention_fwd, name, {__VA_ARGS__}, flags, 0}, {&op_attention_bwd, name, {__VA_ARGS__}, flags, 0}
    ATTENTION_SHAPE("gqa_hd64_ragged_T", CASE_TEST | CASE_SLOW, 2, 200, 4, 2, 64),
    ATTENTION_SHAPE("gqa4_hd64_two_tiles", CASE_TEST | CASE_SLOW, 1, 128, 8, 2, 64),
    ATTENTION_SHAPE("mha_hd64_short", CASE_TEST, 3, 37, 2, 2, 64),
    ATTENTION_SHAPE("hd32_gqa", CASE_TEST | CASE_SLOW, 2, 130, 4, 2, 32),
    ATTENTION_SHAPE("single_token", CASE_TEST, 4, 1, 2, 1, 64),
    ATTENTION_SHAPE("baseline_head_shape", CASE_TEST | CASE_SLOW, 1, 1024, 8, 4, 64),
    ATTENTION_SHAPE("gqa8_hd64_odd_T", CASE_TEST | CASE_SLOW, 1, 301, 8, 1, 64),
    ATTENTION_SHAPE("hd128_mha_ragged", CASE_TEST, 2, 77, 2, 2, 128),
    ATTENTION_SHAPE("hd128_gqa4_long", CASE_TEST | CASE_SLOW, 1, 515, 8, 2, 128),
    ATTENTION_SHAPE("hd32_tiny_T", CASE_TEST, 3, 5, 4, 1, 32),
    /* within segments (d[5]: segment length, or ATT_SEG_MIXED): every token alone; segments of
     * 63, 64 (tile-aligned), 65 and 2048; row 0 cut 1/63/64/65/long with other rows of many short
     * ones (key tiles skipped before a block's segments, query tiles after a key tile's) */
    ATTENTION_SHAPE("seg_1", CASE_TEST, 2, 70, 2, 1, 64, 1),
    ATTENTION_SHAPE("seg_short_rows_gqa", CASE_TEST, 3, 40, 4, 2, 64, ATT_SEG_MIXED),
    ATTENTION_SHAPE("seg_63_hd32", CASE_TEST | CASE_SLOW, 1, 200, 2, 1, 32, 63),
    ATTENTION_SHAPE("seg_64_hd128", CASE_TEST | CASE_SLOW, 1, 192, 2, 2, 128, 64),
    ATTENTION_SHAPE("seg_65_gqa", CASE_TEST | CASE_SLOW, 1, 200, 4, 2, 64, 65),
    ATTENTION_SHAPE("seg_mixed_gqa", CASE_TEST | CASE_SLOW, 2, 320, 4, 2, 64, ATT_SEG_MIXED),
    ATTENTION_SHAPE("seg_2048", CASE_TEST | CASE_SLOW, 1, 2048, 1, 1, 64, 2048),
#undef ATTENTION_SHAPE
    {&op_attention_fwd, "baseline", {8, T_SEQ, 8, 4, 64}, CASE_BENCH, 1},
    {&op_attention_bwd, "baseline", {8, T_SEQ, 8, 4, 64}, CASE_BENCH, 1},
    /* the 1.0611 record's packed slot: one row of 98,304 tokens in segments of 2,048 */
    {&op_attention_fwd, "record_packed", {1, 98304, 8, 4, 64, 2048}, CASE_BENCH, 0},
    {&op_attention_bwd, "record_packed", {1, 98304, 8, 4, 64, 2048}, CASE_BENCH, 0},

    /* ---- XSA (gpu_ops_xsa.h): d = {N, heads, kv heads, head_dim, v's extra columns, clamped} ---- */
    {&op_xsa_fwd, "mha_hd64", {301, 4, 4, 64, 0, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa2_hd64_v_in_wider_rows", {301, 4, 2, 64, 640, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa4_hd64", {203, 8, 2, 64, 0, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa8_hd32", {150, 8, 1, 32, 0, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa2_hd24_uneven_lanes", {77, 4, 2, 24, 8, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa2_hd128", {50, 4, 2, 128, 0, 0}, CASE_TEST, 0},
    {&op_xsa_fwd, "gqa2_clamped", {64, 4, 2, 64, 0, 1}, CASE_TEST, 0},
    {&op_xsa_fwd_bf16, "gqa2_hd64", {301, 4, 2, 64, 640, 0}, CASE_TEST, 0},
    {&op_xsa_fwd_bf16, "record", {REC_TOKENS, 8, 4, 64, REC_V_EXTRA, 0}, CASE_BENCH, REC_T},
    {&op_xsa_bwd, "mha_hd64", {301, 4, 4, 64, 0, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa2_hd64_v_in_wider_rows", {301, 4, 2, 64, 640, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa4_hd64", {203, 8, 2, 64, 0, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa8_hd32", {150, 8, 1, 32, 0, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa2_hd24_uneven_lanes", {77, 4, 2, 24, 8, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa2_hd128", {50, 4, 2, 128, 0, 0}, CASE_TEST, 0},
    {&op_xsa_bwd, "gqa2_clamped", {64, 4, 2, 64, 0, 1}, CASE_TEST, 0},
    {&op_xsa_bwd_bf16, "gqa2_hd64", {301, 4, 2, 64, 640, 0}, CASE_TEST, 0},
    {&op_xsa_bwd_bf16, "record", {REC_TOKENS, 8, 4, 64, REC_V_EXTRA, 0}, CASE_BENCH, REC_T},
    /* ---- sparse attention gate (gpu_ops_head_gate.h): d = {N, heads, head_dim, window, 4 * scale} ---- */
    {&op_head_gate_fwd, "hd64_w12", {611, 4, 64, 12, 2}, CASE_TEST, 0},
    {&op_head_gate_fwd, "hd24_all_channels", {77, 3, 24, 72, 8}, CASE_TEST, 0},
    {&op_head_gate_fwd, "hd128", {50, 2, 128, 5, 2}, CASE_TEST, 0},
    {&op_head_gate_fwd, "frontier", {REC_TOKENS, 8, 64, 12, 2}, CASE_BENCH, REC_T},
    {&op_head_gate_bwd, "hd64_w12", {611, 4, 64, 12, 2}, CASE_TEST, 0},
    {&op_head_gate_bwd, "hd24_all_channels", {77, 3, 24, 72, 8}, CASE_TEST, 0},
    {&op_head_gate_bwd, "hd128", {50, 2, 128, 5, 2}, CASE_TEST, 0},
    {&op_head_gate_bwd_bf16, "hd64_w12", {611, 4, 64, 12, 2}, CASE_TEST, 0},
    {&op_head_gate_bwd_bf16, "frontier", {REC_TOKENS, 8, 64, 12, 2}, CASE_BENCH, REC_T},
    {&op_head_gate_dn, "hd64_w12", {611, 4, 64, 12, 2}, CASE_TEST, 0},
    {&op_head_gate_dn, "hd24_all_channels", {77, 3, 24, 72, 8}, CASE_TEST, 0},

    /* ---- test-time training (gpu_ops_lora.h): LoRA d = {docs, T, in, r, out, flags}; the head's
     * logits d = {N, C, V, chunk, r, flags}; SGD d = {n, mode} ---- */
    {&op_lora_fwd, "ragged_docs", {3, 37, 70, 6, 45, 0}, CASE_TEST, 0},
    {&op_lora_fwd, "odd_padded", {5, 13, 33, 3, 29, LORA_PADDED}, CASE_TEST, 0},
    {&op_lora_fwd, "one_doc", {1, 50, 64, 8, 96, 0}, CASE_TEST, 0},
    {&op_lora_fwd, "bf16_out_padded", {3, 37, 70, 6, 45, LORA_PADDED | LORA_BF16_OUT}, CASE_TEST, 0},
    {&op_lora_bwd, "ragged_docs", {3, 37, 70, 6, 45, 0}, CASE_TEST, 0},
    {&op_lora_bwd, "odd_padded", {5, 13, 33, 3, 29, LORA_PADDED}, CASE_TEST, 0},
    {&op_lora_bwd, "one_doc_no_dx", {1, 50, 64, 8, 96, LORA_NO_DX}, CASE_TEST, 0},
    {&op_lora_bwd, "padded_no_dx", {4, 21, 40, 5, 24, LORA_PADDED | LORA_NO_DX}, CASE_TEST, 0},
    {&op_lora_fwd, "record", {TTT_DOCS, REC_T, B_MODEL, TTT_RANK, B_MODEL, 0}, CASE_BENCH, 0},
    {&op_lora_bwd, "record", {TTT_DOCS, REC_T, B_MODEL, TTT_RANK, B_MODEL, 0}, CASE_BENCH, 0},
    {&op_logits_lowrank, "ragged_chunk_and_vocab", {301, 96, 517, 100, 7, 0}, CASE_TEST, 0},
    {&op_logits_lowrank, "one_chunk_no_dW", {77, 32, 300, 4096, 5, LOGITS_NO_DW}, CASE_TEST, 0},
    {&op_logits_lowrank, "record", {REC_T, B_MODEL, TTT_VOCAB, REC_T, TTT_RANK, LOGITS_NO_DW}, CASE_BENCH, 0},
    {&op_sgd_step, "momentum", {100003, 0}, CASE_TEST, 0},
    {&op_sgd_step, "first_step_decay", {100003, 1}, CASE_TEST, 0},
    {&op_sgd_step, "decay_no_momentum", {100003, 2}, CASE_TEST, 0},
    {&op_sgd_step, "plain", {1001, 3}, CASE_TEST, 0},
    {&op_sgd_step, "record", {REC_PARAMS, 0}, CASE_BENCH, 0},

    /* ---- optimizers, bench only (gpu_ops_optim.h; checked by test_gpu_optim) ---- */
    {&op_adam, "1024x512", {B_VOCAB * B_MODEL}, CASE_BENCH, 0},
    {&op_muon_update, "512x512", {B_MODEL, B_MODEL}, CASE_BENCH, 0},
    {&op_muon_update, "1024x512", {B_MLP, B_MODEL}, CASE_BENCH, 0},
    {&op_muon_update_fp32, "1024x512", {B_MLP, B_MODEL}, CASE_BENCH, 0},
    {&op_muon_update_batch, "9x1024x512", {9, B_MLP, B_MODEL}, CASE_BENCH, 0},

    /* ---- weight passes and late QAT (gpu_ops_weights.h): d = {n}; fake quant {rows, cols, amplitude} ---- */
    {&op_weight_decay, "odd", {100003}, CASE_TEST, 0},
    {&op_ema_update, "odd", {100003}, CASE_TEST, 0},
    {&op_swa_add, "odd", {100003}, CASE_TEST, 0},
    {&op_swa_start, "odd", {100003}, CASE_TEST, 0},
    {&op_ema_update, "record", {REC_PARAMS}, CASE_BENCH, 0},
    {&op_fake_quant, "small_scale_clamped", {37, 203, 0}, CASE_TEST, 0},
    {&op_fake_quant, "rows_over_a_block", {61, 1000, 1}, CASE_TEST, 0},
    {&op_fake_quant, "short_rows", {5, 77, 1}, CASE_TEST, 0},
    {&op_fake_quant, "record_fc", {3 * B_MODEL, B_MODEL, 1}, CASE_BENCH, 0},
};
static const size_t gpu_op_count = sizeof gpu_op_cases / sizeof gpu_op_cases[0];

#endif /* CT_HAVE_CUDA */
#endif
