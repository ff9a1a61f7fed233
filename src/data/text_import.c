/* text_import.c — text files into a byte-level HDF5 data set (text_import.h), streamed in blocks
 * so that inputs of any size need a bounded amount of memory. Used by `ctrain data from-text`. */
#include "text_import.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fault.h"
#include "progress.h"
#include "stop.h"
#include "tokenizer.h"

/* Text bytes converted per step: bounds memory whatever the input size. */
#define COPY_BLOCK ((int64_t)1 << 20)

/* Byte-level tables: each token is one byte, nothing is a leading space or a boundary, so
 * the byte count of a text is its token count. */
static int set_byte_luts(TokenWriter *writer) {
    int16_t base_bytes[256];
    uint8_t zeros[256] = {0};
    for (int i = 0; i < 256; i++) base_bytes[i] = 1;
    return token_writer_set_luts(writer, base_bytes, zeros, zeros);
}

static int create_byte_writer(TokenWriter **writer, const char *path) {
    if (token_writer_create(writer, path, 2, 256, -1, "bytes") != 0) return -1;
    if (set_byte_luts(*writer) != 0) {
        token_writer_abort(*writer);
        *writer = NULL;
        return -1;
    }
    return 0;
}

/* Stream the inputs into the writers: the first train_bytes bytes to train, the rest to val. */
static int copy_text(char **inputs, int num_inputs, TokenWriter *train, TokenWriter *val, int64_t train_bytes,
                     int64_t total_bytes, int64_t *copied) {
    unsigned char *raw = ct_malloc((size_t)COPY_BLOCK, "text read buffer");
    uint16_t *tokens = ct_malloc((size_t)COPY_BLOCK * sizeof(uint16_t), "text token buffer");
    Progress progress;
    progress_begin(&progress, "from-text", "bytes", total_bytes);
    int rc = 0;
    *copied = 0;
    for (int i = 0; i < num_inputs && rc == 0; i++) {
        FILE *f = fopen(inputs[i], "rb");
        if (!f) {
            rc = ct_fail("cannot open text file '%s': %s", inputs[i], strerror(errno));
            break;
        }
        size_t n;
        while (rc == 0 && (n = fread(raw, 1, (size_t)COPY_BLOCK, f)) > 0) {
            for (size_t k = 0; k < n; k++) tokens[k] = raw[k];
            int64_t to_train = val ? train_bytes - *copied : (int64_t)n;
            to_train = to_train < 0 ? 0 : to_train > (int64_t)n ? (int64_t)n : to_train;
            if (to_train > 0) rc = token_writer_append(train, tokens, to_train);
            if (rc == 0 && (int64_t)n > to_train) rc = token_writer_append(val, tokens + to_train, (int64_t)n - to_train);
            *copied += (int64_t)n;
            progress_update(&progress, *copied);
            fault_point_import(*copied - (int64_t)n, *copied); /* CTRAIN_FAULT=TERM@import:N (bytes) */
            if (rc == 0 && stop_requested())
                rc = ct_fail("from-text stopped by signal %d after %lld of %lld bytes", stop_requested(),
                             (long long)*copied, (long long)total_bytes);
        }
        if (rc == 0 && ferror(f)) rc = ct_fail("cannot read text file '%s': %s", inputs[i], strerror(errno));
        fclose(f);
    }
    progress_end(&progress);
    free(raw);
    free(tokens);
    return rc;
}

int text_import(char **inputs, int num_inputs, const char *out, const char *val_out, double fraction,
                TextImport *import) {
    memset(import, 0, sizeof *import);
    TokenWriter *train = NULL, *val = NULL;
    /* Sizes first: the split point must be known before the first byte is written. */
    int64_t total_bytes = 0;
    for (int i = 0; i < num_inputs; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            ct_fail("cannot open text file '%s': %s", inputs[i], strerror(errno));
            goto fail;
        }
        if (S_ISDIR(st.st_mode)) {
            ct_fail("text file '%s' is a directory", inputs[i]);
            goto fail;
        }
        if (!S_ISREG(st.st_mode)) {
            if (val_out) {
                ct_fail("text file '%s' is not a regular file; --val-out needs the input size in advance", inputs[i]);
                goto fail;
            }
            total_bytes = -1; /* unknown: the progress bar shows just a count */
        } else if (total_bytes >= 0) {
            total_bytes += st.st_size;
        }
    }
    int64_t train_bytes = total_bytes;
    if (val_out) {
        int64_t val_bytes = (int64_t)floor((double)total_bytes * fraction);
        train_bytes = total_bytes - val_bytes;
        if (val_bytes < 1 || train_bytes < 1) {
            ct_fail("the input has %lld bytes: too few to split off a fraction %g for validation",
                    (long long)total_bytes, fraction);
            goto fail;
        }
    }
    if (create_byte_writer(&train, out) != 0 || (val_out && create_byte_writer(&val, val_out) != 0)) goto fail;
    int64_t copied = 0;
    if (copy_text(inputs, num_inputs, train, val, train_bytes, total_bytes, &copied) != 0) goto fail;
    if (total_bytes >= 0 && copied != total_bytes) {
        ct_fail("the text files changed while being read (%lld bytes read, %lld expected)", (long long)copied,
                (long long)total_bytes);
        goto fail;
    }
    if (copied == 0) {
        ct_fail("the text files are empty; there is nothing to write to '%s'", out);
        goto fail;
    }
    import->train = train;
    import->val = val;
    import->train_tokens = val ? train_bytes : copied;
    import->val_tokens = copied - train_bytes;
    return 0;
fail:
    token_writer_abort(train);
    token_writer_abort(val);
    return -1;
}
