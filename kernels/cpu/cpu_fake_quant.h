/* cpu_fake_quant.h — the int6 straight-through fake quantization of late QAT (docs/model.md,
 * "Late QAT"): the weights the training forward uses for a linear layer while QAT is on.
 *
 * Reference semantics: the record's train_gpt.py CastedLinear.forward with its QAT switch on,
 * in fp32:
 *   s     = max(rowmax|w| / 31, 1/31)                      per row (fp32, 1/31 rounded to fp32)
 *   w_q   = clamp(round(w / s), -32, 31) * s                round half to even, as torch.round
 *   w_ste = w + (w_q - w)                                  w + (w_q - w).detach(): the forward's
 *                                                          value; its gradient goes to w as is
 * w_ste is w_q itself wherever the subtraction is exact (always, by Sterbenz's lemma, for the
 * values w_q takes); it is computed as written so that the bits are the record's whatever.
 * The backward of a linear layer with these weights is the plain one: the input gradient uses
 * w_ste, the weight gradient (dY^T X) lands on w unchanged (the straight-through estimator). */
#ifndef CT_CPU_FAKE_QUANT_H
#define CT_CPU_FAKE_QUANT_H

/* dst[rows x cols] = w_ste of src[rows x cols] (row-major; dst may not alias src). Bitwise the
 * same whatever the OpenMP thread count (rows are independent). */
void cpu_fake_quant_int6_rows(float *dst, const float *src, int rows, int cols);

#endif
