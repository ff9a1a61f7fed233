/* crc32.c — CRC-32 (reflected polynomial 0xEDB88320, as zlib, gzip and Python's zlib.crc32)
 * for the checkpoint content checksum and the data files' tokens_crc32. Written here rather
 * than taken from zlib because the build does not link zlib directly (only HDF5 does,
 * privately). Slice-by-8: checkpoints are hundreds of MB and data files many GB, so the
 * byte-at-a-time loop (~0.4 GB/s) would be noticeable; this runs at a few GB/s. */
#include <pthread.h>
#include <string.h>

#include "crc32.h"

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        table[0][i] = c;
    }
    /* table[k][i]: the CRC of byte i followed by k zero bytes, so 8 bytes fold at once. */
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++) table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xFF];
}

uint32_t ct_crc32(uint32_t crc, const void *data, size_t n) {
    pthread_once(&table_once, build_table);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    while (n >= 8) {
        /* Little-endian assembly by bytes keeps it correct on any host byte order. */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
            table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
    return ~c;
}
