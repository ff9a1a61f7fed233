/* text_import.h — a byte-level data set made from text files (`ctrain data from-text`): every
 * byte is one token, vocab_size 256, tokenizer "bytes", with /tokenizer tables that count one
 * byte per token (so bits per byte is the loss divided by ln 2). text_import.c. */
#ifndef CT_TEXT_IMPORT_H
#define CT_TEXT_IMPORT_H

#include <stdint.h>

#include "data.h"

typedef struct {
    TokenWriter *train, *val; /* every token written, still open: the caller closes each */
    int64_t train_tokens, val_tokens;
} TextImport;

/* Stream the bytes of the inputs (in the order given) into a new data file out, or, with
 * val_out, the first part into out and the last fraction (0 < fraction < 1) into val_out. The
 * sizes are read first, so an input that is not a regular file is refused with val_out, and a
 * split too small for either side is an error before anything is written. On failure nothing
 * is left open and no file is written. */
int text_import(char **inputs, int num_inputs, const char *out, const char *val_out, double fraction,
                TextImport *import);

#endif
