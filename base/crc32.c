/* crc32.c — CRC-32 for the checkpoint content checksum and the data files' tokens_crc32: zlib's
 * (the library HDF5 already depends on), whose braided implementation runs at several GB/s,
 * which matters for checkpoints of hundreds of MB checked at every resume and data files of
 * many GB. crc32_z takes a size_t length, so no caller has to split large buffers. */
#include "crc32.h"

#include <zlib.h>

uint32_t ct_crc32(uint32_t crc, const void *data, size_t n) {
    return (uint32_t)crc32_z(crc, data, n);
}
