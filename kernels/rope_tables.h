/* rope_tables.h — the rotary-embedding (RoPE) cos/sin tables, computed on the host once per
 * (T, head_dim, base) and used by both backends: the CPU's QK-norm + RoPE op (cpu_rope.c) reads
 * them directly, the CUDA backend uploads them for cuda_rope.cu. Family-neutral, so the CUDA
 * backend need not include the CPU ops' headers (the function keeps its historical cpu_ name).
 *
 * cos_table, sin_table: [T, head_dim/2]. Entry [t, i] is cos/sin of freq = t * inv_freq[i] with
 * inv_freq[i] = 1 / base^((2i)/head_dim), every step rounded to fp32 as in train_gpt.py's
 * Rotary (which computes the tables in fp32). The final cos/sin are evaluated in double and
 * rounded once, so they are the correctly rounded values of the fp32 angle (torch's vectorised
 * fp32 cos/sin agree to within 1 ulp). Compute once per (T, head_dim, base). */
#ifndef CT_ROPE_TABLES_H
#define CT_ROPE_TABLES_H

void cpu_rope_tables_init(float *cos_table, float *sin_table, int T, int head_dim, float base);

#endif
