/* bigram_hash.c — the record's bigram hash on the host (see bigram_hash.h). */
#include "bigram_hash.h"

void cpu_bigram_hash(int32_t *buckets, const int32_t *ids, int B, int T, int num_buckets) {
    const int32_t mod = num_buckets - 1;
    const long N = (long)B * T;
#pragma omp parallel for schedule(static)
    for (long n = 0; n < N; n++) {
        if (n % T == 0) {
            buckets[n] = mod;
            continue;
        }
        /* torch int32 arithmetic: the products wrap, the remainder takes the divisor's sign */
        const int32_t a = (int32_t)(36313u * (uint32_t)ids[n]), b = (int32_t)(27191u * (uint32_t)ids[n - 1]);
        int32_t r = (a ^ b) % mod;
        if (r < 0) r += mod;
        buckets[n] = r;
    }
}
