/* tokenizer.h — tokenizers of the data files (docs/data-format.md "Tokenizers"):
 *   - a SentencePiece .model read with the SentencePiece library and turned into what a data
 *     file stores: the bits-per-byte tables by train_gpt.py's build_sentencepiece_luts rule,
 *     and the pieces for decoding; and text encoded with it (tokenizer_spm.c);
 *   - token ids turned back into text with stored pieces, as SentencePiece's own decoding
 *     does (tokenizer_decode.c).
 * Functions that can fail return 0, or -1 with ct_error() naming the file and the problem. */
#ifndef CT_TOKENIZER_H
#define CT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* ---- SentencePiece models (tokenizer_spm.c) ---- */

/* 1 if this ctrain was built with the SentencePiece library, else 0 (spm_tokenizer_load then
 * fails saying what to install). */
int spm_available(void);

typedef struct {
    int64_t vocab_size;    /* the model's number of pieces */
    /* The bits-per-byte tables, vocab_size entries each, exactly as train_gpt.py's
     * build_sentencepiece_luts makes them: control, unknown and unused pieces count 0 bytes and
     * are boundaries; byte pieces count 1; any other piece counts the UTF-8 bytes of its text,
     * less a leading U+2581 (the space mark), which sets has_leading_space instead. */
    int16_t *base_bytes;
    uint8_t *has_leading_space, *is_boundary_token;
    TokenPieces pieces;    /* the pieces, their types and the model's decoding rules */
    char *description;     /* "sentencepiece:<file name> (vocab N)", for the tokenizer attribute */
    /* NULL, or why ctrain's decoding of the pieces (tokenizer_decode.c) differs from the
     * library's on this model (a model with a denormalization rule, which ctrain does not
     * apply): the tables are right, but decoded text may differ. */
    char *decode_mismatch;
} SpmTokenizer;

/* Load model_path and build everything above. The library reads the file in a child process
 * first, so a file that crashes it is reported as an error. Errors name the file: missing, not
 * a SentencePiece model, or (without the library) what to install. */
int spm_tokenizer_load(const char *model_path, SpmTokenizer *tok);
void spm_tokenizer_free(SpmTokenizer *tok);

/* 0 if the model's pieces (tok, loaded from model_path) are the pieces stored in stored_path:
 * the same number, and each piece's text and type; else -1 naming both files, the first id that
 * differs and its two values. */
int spm_check_pieces(const SpmTokenizer *tok, const char *model_path, const TokenPieces *stored,
                     const char *stored_path);

/* Encode text (NUL-ended UTF-8) with the model at model_path as the library does (Python's
 * sp.encode(text): no bos or eos added) into a new array of *n ids (free() it; *n may be 0, for
 * a text that normalizes to nothing). Like spm_tokenizer_load it works in a child process
 * first, so a model that crashes the library is an error. */
int spm_encode(const char *model_path, const char *text, uint32_t **ids, int64_t *n);

/* ---- decoding with stored pieces (tokenizer_decode.c) ----
 * Byte pieces <0xNN> gather into byte runs, each UTF-8 character of a run is written as it is
 * and each byte that starts no valid character as U+FFFD; control pieces write nothing; unknown
 * pieces write unk_surface; every other piece writes its text with each U+2581 as a space,
 * after the pieces' leading_space rule at the start of the text. That is SentencePiece's
 * decoding (0.1.97 and later), without a model's denormalization rule. */
typedef void (*TextSink)(void *ctx, const char *bytes, size_t n);
typedef struct PieceDecoder PieceDecoder;
/* pieces must outlive the decoder. */
PieceDecoder *piece_decoder_create(const TokenPieces *pieces);
/* Decode the next id (< pieces->vocab_size), writing any text it completes to sink. A byte
 * piece's text waits until the run of byte pieces ends. */
void piece_decoder_push(PieceDecoder *d, uint32_t id, TextSink sink, void *ctx);
/* End of the ids: write what a pending byte run holds. */
void piece_decoder_finish(PieceDecoder *d, TextSink sink, void *ctx);
void piece_decoder_free(PieceDecoder *d);
/* All of ids as one new NUL-ended string (free() it) of *len bytes. */
char *piece_decode(const TokenPieces *pieces, const uint32_t *ids, int64_t n, size_t *len);

#endif
