/* golf_gptq.h — the 1.0611 record's quantizers (issue 58), as functions on float32 matrices:
 * full-Hessian GPTQ with per-row standard-deviation scales, round to nearest at the same scales
 * (what GPTQ is measured against), the LQER low-rank correction of the quantization error and
 * its int2/int4 factor packing, and the int8 per-row rule of the attention gates. Written from
 * the record's description (docs/model.md, "The GPTQ quantizer"); tests/unit/test_golf_gptq.c
 * checks them against a PyTorch version (tests/parity/gptq_ref.py) and by properties.
 *
 * GPTQ of W (rows x cols, y = W x) with H = the mean of X^T X over the calibration batches
 * (cols x cols):
 *   1. a column whose H diagonal is 0 (an input that never fired) gets H[c][c] = 1 and W's
 *      column 0 (nothing to preserve); H += damp * mean(diag H) * I;
 *   2. columns ordered by H's diagonal, largest first (ties: lower index first);
 *   3. U = the upper Cholesky factor of H^-1 (LAPACK; H^-1 from H's Cholesky factor);
 *   4. per row: scale = float16(max(clip_sigmas * std(row) / clip_range, 1e-10)) with the
 *      unbiased std of the original row;
 *   5. in blocks of block_size columns, column by column: q = clamp(round_half_even(w / scale),
 *      -clip_range, clip_range); err = (w - q * scale) / U[c][c]; the block's later columns
 *      -= err * U[c][later]; after the block, all later columns -= Err_block @ U[block][later];
 *   6. q back in the original column order.
 * A row whose float16 scale is 0 (a row of zeros) gets q = 0 (its dequantized values, q * 0,
 * are 0 whatever q is). */
#ifndef CT_GOLF_GPTQ_H
#define CT_GOLF_GPTQ_H

#include <stdint.h>

typedef struct {
    float clip_sigmas; /* the record: matrix 12.85, mlp 11.5, attn 13, embed 14 */
    int clip_range;    /* 2^(bits-1) - 1: 31 for int6, 63 for int7 */
    int block_size;    /* 128 */
    float damp;        /* 0.01 */
} GolfGptqSettings;

/* The artifact's settings (the configuration keys of the same names, docs/configuration.md,
 * "GPTQ artifact") and the Hessians of the weights' inputs. */
struct GolfGptqOptions {
    int matrix_bits, embed_bits;
    float matrix_clip_sigmas, mlp_clip_sigmas, attn_clip_sigmas, embed_clip_sigmas;
    int quant_gate; /* gated_attn_quant_gate */
    int lqer_enabled, lqer_rank, lqer_top_k, lqer_factor_bits, lqer_asym, lqer_group;
    /* per parameter of the model (ModelSpec.params): the mean X^T X of its input (cols x cols),
     * or NULL where none was collected (that matrix is rounded to nearest at GPTQ's scales) */
    const float *const *hessians;
};
typedef struct GolfGptqOptions GolfGptqOptions;

/* Step 4 alone: the per-row float16 scales (bits) of w. */
void golf_gptq_row_scales(uint16_t *scale, const float *w, int rows, int cols, float clip_sigmas, int clip_range);
/* GPTQ of w with h (see above): q[rows * cols] in [-clip_range, clip_range], scale[rows] float16
 * bits. Returns 0, or -1 with ct_fail naming `name` when H is unusable (not finite, not positive
 * definite after damping). */
int golf_gptq_quantize(int8_t *q, uint16_t *scale, const float *w, const float *h, int rows, int cols,
                       const GolfGptqSettings *gs, const char *name);
/* Round to nearest at the given scales: q = clamp(round_half_even(w / scale), -clip_range, clip_range). */
void golf_round_nearest(int8_t *q, const float *w, const uint16_t *scale, int rows, int cols, int clip_range);
/* Dequantized q * scale (row scales), into w. */
void golf_dequantize_rows(float *w, const int8_t *q, const uint16_t *scale, int rows, int cols);

/* LQER: the rank-r (r = min(rank, rows, cols)) truncated SVD of the error e (rows x cols):
 * a (rows x r) = U_r diag(S_r), b (r x cols) = V_r^T, each component's sign fixed so that its
 * V row's element of largest magnitude (the first such) is positive (LAPACK leaves the sign
 * free; the asymmetric int2 range of a makes it matter). Returns r, or -1 with ct_fail. */
int golf_lqer_factors(float *a, float *b, const float *e, int rows, int cols, int rank);
/* The record's asymmetric packing: a as int2 in [-2, 1] with one float16 scale
 * float16(max(amax|a|, 1e-10) / 1.5); b (n_b elements, n_b % group == 0) as int4 in [-8, 7] in
 * groups of `group` consecutive elements, each with scale float16(max(amax|group|, 1e-10) / 7.5). */
void golf_lqer_pack_asym(int8_t *qa, uint16_t *scale_a, int8_t *qb, uint16_t *scale_b, const float *a, int n_a,
                         const float *b, int n_b, int group);
/* The record's symmetric packing (when b's size is not a multiple of the group): per row of a
 * (rows x r) and of b (r x cols) a float16 scale amax / (2^(bits-1) - 1), q in +-(2^(bits-1) - 1). */
void golf_lqer_pack_sym(int8_t *qa, uint16_t *scale_a, int8_t *qb, uint16_t *scale_b, const float *a,
                        const float *b, int rows, int r, int cols, int bits);

/* The attention gates' rule: per row scale = float16(max(amax|row|, 1e-10) / 127), q in
 * [-127, 127] (a row whose scale is 0 gets q = 0). */
void golf_int8_rows_absmax(int8_t *q, uint16_t *scale, const float *w, int rows, int cols);

#endif
