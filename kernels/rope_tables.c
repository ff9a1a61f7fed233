/* rope_tables.c — the RoPE cos/sin tables of train_gpt.py's Rotary (see rope_tables.h). */
#include "rope_tables.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

void cpu_rope_tables_init(float *cos_table, float *sin_table, int T, int head_dim, float base) {
    assert(T > 0 && head_dim > 0 && head_dim % 2 == 0 && base > 0);
    int half = head_dim / 2;
    for (int i = 0; i < half; i++) {
        /* Every step rounded to fp32, in the order torch evaluates
         * 1.0 / (base ** (arange(0, dim, 2, fp32) / dim)), so the angles match Rotary's. */
        float exponent = (float)(2 * i) / (float)head_dim;
        float inv_freq = 1.0f / powf(base, exponent);
        for (int t = 0; t < T; t++) {
            float angle = (float)t * inv_freq;
            cos_table[(size_t)t * half + i] = (float)cos((double)angle);
            sin_table[(size_t)t * half + i] = (float)sin((double)angle);
        }
    }
}
