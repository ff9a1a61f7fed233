/* crc32.h — CRC-32 with the zlib / IEEE 802.3 polynomial: crc = ct_crc32(0, ...) then chain,
 * exactly as Python's zlib.crc32(data, crc), so files can be checked with a few lines of
 * Python. */
#ifndef CT_CRC32_H
#define CT_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t ct_crc32(uint32_t crc, const void *data, size_t n);

#endif
