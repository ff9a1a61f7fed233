/* token_crc.c — CRC-32 of tokens as a data file stores them: each token a little-endian integer
 * of the file's width (2 or 4 bytes), whatever the host's byte order, so that the numbers equal
 * Python's zlib.crc32(tokens.astype("<u2").tobytes()). Used by the writer (tokens_crc32), the
 * scan of `ctrain data info` and the sample checksum (data_identity.c). */
#include <string.h>

#include "crc32.h"
#include "data.h"

/* Tokens packed per CRC call when converting to little-endian bytes. */
#define PACK_TOKENS 4096

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

uint32_t data_crc32_tokens(uint32_t crc, const uint32_t *tokens, int64_t n, int token_bytes) {
    unsigned char bytes[PACK_TOKENS * 4];
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < PACK_TOKENS ? n - done : PACK_TOKENS;
        for (int64_t i = 0; i < k; i++) {
            uint32_t v = tokens[done + i];
            for (int b = 0; b < token_bytes; b++) bytes[i * token_bytes + b] = (unsigned char)(v >> (8 * b));
        }
        crc = ct_crc32(crc, bytes, (size_t)k * (size_t)token_bytes);
        done += k;
    }
    return crc;
}

uint32_t data_crc32_packed(uint32_t crc, const void *tokens, int64_t n, int token_bytes) {
    if (host_is_little_endian()) return ct_crc32(crc, tokens, (size_t)n * (size_t)token_bytes);
    uint32_t wide[PACK_TOKENS];
    const unsigned char *p = tokens;
    for (int64_t done = 0; done < n;) {
        int64_t k = n - done < PACK_TOKENS ? n - done : PACK_TOKENS;
        for (int64_t i = 0; i < k; i++) {
            if (token_bytes == 2) {
                uint16_t v;
                memcpy(&v, p + (done + i) * 2, 2);
                wide[i] = v;
            } else {
                memcpy(&wide[i], p + (done + i) * 4, 4);
            }
        }
        crc = data_crc32_tokens(crc, wide, k, token_bytes);
        done += k;
    }
    return crc;
}

