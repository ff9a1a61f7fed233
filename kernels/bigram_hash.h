/* bigram_hash.h — the record's bigram hash: the bucket of each position's (previous, current)
 * token pair, computed on the host. Family-neutral, like rope_tables.h: the CPU backend's
 * forward uses it, and so does the CUDA backend for the bucket index its table backward needs
 * (the device computes the same buckets with cuda_bigram_hash, checked against this one), so the
 * CUDA backend need not include the CPU ops' header. The function keeps the cpu_ name of the op
 * cuda_bigram_hash pairs with. */
#ifndef CT_BIGRAM_HASH_H
#define CT_BIGRAM_HASH_H

#include <stdint.h>

/* buckets[b,t] = (36313 ids[b,t] XOR 27191 ids[b,t-1]) mod (num_buckets - 1) in int32 arithmetic
 * as torch computes it (the products wrap, the remainder is never negative); the first position
 * of each of the B sequences of T tokens gets num_buckets - 1. num_buckets >= 2. */
void cpu_bigram_hash(int32_t *buckets, const int32_t *ids, int B, int T, int num_buckets);

#endif
