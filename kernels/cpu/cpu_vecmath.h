/* cpu_vecmath.h — exp and tanh for fp32 loops that GCC should vectorize: the softcapped
 * cross-entropy (2 exp + 1 tanh per vocabulary entry per token) and the attention softmax.
 *
 * Why not expf/tanhf from libm: they are calls GCC cannot vectorize at our flags; in the
 * cross-entropy they were 7% of a training step, in attention half of the attention time.
 * These are branch-free (selects only), use IEEE +,-,*,/ and integer bit operations alone, and
 * no fused multiply-add (the build has -ffp-contract=off), so they give the same bits on every
 * x86-64 CPU, unlike glibc, which picks FMA code paths by CPU at run time.
 * Accuracy (tests/unit/test_cpu_vecmath.c checks it against double precision over dense sweeps):
 * vec_expf within 2 ulp, vec_tanhf within 3 ulp (measured figures in kernels/README.md). */
#ifndef CT_CPU_VECMATH_H
#define CT_CPU_VECMATH_H

#include <stdint.h>
#include <string.h>

/* e^x. Below ln(FLT_MIN) = -87.3365 the result would be subnormal: it is flushed to +0. Above
 * ln(FLT_MAX) = 88.7228 it is +Inf. NaN gives NaN. */
static inline float vec_expf(float x) {
    const float log2e = 1.44269504088896341f;
    /* ln 2 split so that n * ln2_hi is exact for |n| < 2^15 (ln2_hi has 9 significant bits). */
    const float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float lowest = -87.33654f, highest = 88.7228f;
    /* written so that a NaN becomes `lowest` here: the integer conversion below must not see
     * one (that is undefined behaviour); the last line returns the NaN itself */
    const float clamped = x >= lowest ? (x <= highest ? x : highest) : lowest;
    const float n = (clamped * log2e + round_magic) - round_magic;
    const float r = (clamped - n * ln2_hi) - n * ln2_lo; /* |r| <= ln2/2 + rounding */
    /* Taylor series of e^r to r^7: the truncation error r^8/8! is below 7.4e-9 relative. */
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n for n in [-126, 128] as two normal powers of two built in the exponent field (2^128
     * alone is not a float); both products are exact until the final rounding. */
    const int32_t n_int = (int32_t)n, half = n_int / 2;
    const uint32_t bits_a = (uint32_t)(half + 127) << 23, bits_b = (uint32_t)(n_int - half + 127) << 23;
    float scale_a, scale_b;
    memcpy(&scale_a, &bits_a, sizeof scale_a);
    memcpy(&scale_b, &bits_b, sizeof scale_b);
    float result = (p * scale_a) * scale_b;
    result = x < lowest ? 0.0f : result;
    result = x > highest ? __builtin_inff() : result;
    return x != x ? x : result;
}

/* tanh(x). |x| < 0.5: its odd Taylor series to x^17 (truncation below 1e-8 relative, no
 * cancellation); otherwise 1 - 2 / (e^(2|x|) + 1) with the sign of x (|x| > 9.1 gives 1 exactly
 * in fp32, so the argument of exp is capped there). NaN gives NaN, -0 gives -0. */
static inline float vec_tanhf(float x) {
    const float z = x * x;
    float p = 6404582.0f / 10854718875.0f;
    p = p * z - 929569.0f / 638512875.0f;
    p = p * z + 21844.0f / 6081075.0f;
    p = p * z - 1382.0f / 155925.0f;
    p = p * z + 62.0f / 2835.0f;
    p = p * z - 17.0f / 315.0f;
    p = p * z + 2.0f / 15.0f;
    p = p * z - 1.0f / 3.0f;
    const float small = x + x * (z * p);
    const float a = x < 0.0f ? -x : x;
    const float e = vec_expf(2.0f * (a > 9.1f ? 9.1f : a));
    const float magnitude = 1.0f - 2.0f / (e + 1.0f);
    const float large = x < 0.0f ? -magnitude : magnitude;
    const float result = a < 0.5f ? small : large;
    return x != x || x == 0.0f ? x : result;
}

#endif
