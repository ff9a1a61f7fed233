/* tokenize.h — a corpus into token shards with a SentencePiece model (`ctrain data tokenize`,
 * docs/data-format.md "Tokenizing a corpus"): each document (doc_reader.h) becomes BOS then its
 * tokens; the first val_docs documents of the corpus go to validation, the rest to training; each
 * split is cut into shards of shard_tokens tokens (the last one shorter; a document may span
 * shards), HDF5 data files with the tokenizer's tables and pieces or parameter-golf .bin shards.
 * Validation may carry each token's count of original bytes (/bytes_per_token), from the span of
 * the text the model gives each piece. Documents are encoded on `threads` threads in batches and written in corpus order, so the
 * shards are the same bits for any thread count. tokenize.c. */
#ifndef CT_TOKENIZE_H
#define CT_TOKENIZE_H

#include <stdint.h>

#include "doc_reader.h"

typedef struct {
    char *const *inputs;
    int num_inputs;
    DocFormat format;
    int doc_per_line;
    const char *model_path;  /* the SentencePiece .model */
    const char *out_dir;     /* created if needed; must hold no shard of these names yet */
    int64_t val_docs;        /* the corpus's first val_docs documents go to validation */
    int64_t shard_tokens;    /* tokens per shard, >= 1 (.bin: at most INT32_MAX) */
    int format_bin;          /* .bin shards (uint16) instead of HDF5 data files */
    int threads;             /* >= 1 */
    int replace_invalid;     /* invalid UTF-8 (and NUL bytes) become U+FFFD instead of an error */
    int caseops;             /* CaseOps transform before encoding; implies byte_counts */
    int byte_counts;         /* /bytes_per_token (.bin: a byte sidecar) for validation */
    int part, num_parts;     /* this process's part, 1..num_parts, of the corpus split by bytes */
    const char *provenance;  /* stored in each HDF5 file's provenance attribute */
} TokenizeRequest;

typedef struct {
    int64_t docs, val_docs, train_tokens, val_tokens;
    int64_t replaced_docs, replaced_bytes; /* with replace_invalid: documents and bytes replaced */
    int train_shards, val_shards;
    double seconds;
} TokenizeSummary;

/* The shard names: "<split>_<NNNNNN>.h5" (or .bin; a .bin validation shard's byte counts in
 * "val_bytes_<NNNNNN>.bin"), with a part "<split>_p<III>of<NNN>_<NNNNNN>...". Prints each shard
 * as it is finished (stdout) and a progress line (stderr). On failure or a stop signal (stop.h)
 * no shard of this run is left: finished ones are removed too, and ct_error() says why. */
int tokenize_corpus(const TokenizeRequest *req, TokenizeSummary *summary);

#endif
