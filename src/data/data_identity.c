/* data_identity.c — what identifies a data file's content, so that a resume notices a file
 * replaced by another of the same length (docs/data-format.md "Identity"):
 *   - tokens_crc32, the CRC-32 of all of a file's tokens, which ctrain's converters store as an
 *     attribute (token_writer.c) and `ctrain data info` checks; computed once, when the file is made,
 *     because reading every token at every start would cost minutes on a large corpus;
 *   - the sample checksum, a CRC-32 of a file's first and last tokens, computed at every start
 *     (two small reads per file), which also covers files made by other tools.
 * Both hash tokens as they are stored (token_crc.c), so Python computes the same numbers with
 * zlib.crc32. */
#include <stdlib.h>

#include "common.h"
#include "data.h"

int data_fingerprint(TokenSet *set) {
    TokenReader *reader;
    if (token_reader_open(&reader, set) != 0) return -1;
    uint32_t *buf = ct_malloc((size_t)(2 * CT_DATA_SAMPLE_TOKENS) * sizeof(uint32_t), "data sample buffer");
    int rc = 0;
    for (int f = 0; f < set->num_files && rc == 0; f++) {
        TokenFileInfo *info = &set->files[f];
        int64_t n = info->num_tokens, k = CT_DATA_SAMPLE_TOKENS;
        uint32_t crc = 0;
        if (n <= 2 * k) {
            rc = token_reader_read(reader, f, 0, n, buf);
            if (rc == 0) crc = data_crc32_tokens(0, buf, n, info->token_bytes);
        } else {
            rc = token_reader_read(reader, f, 0, k, buf);
            if (rc == 0) rc = token_reader_read(reader, f, n - k, k, buf + k);
            if (rc == 0) crc = data_crc32_tokens(0, buf, 2 * k, info->token_bytes);
        }
        if (rc == 0) info->sample_crc32 = crc;
    }
    free(buf);
    token_reader_close(reader);
    return rc;
}
