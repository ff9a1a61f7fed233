/* tokenizer.h — the tokenizers of the data files (docs/data-format.md "Tokenizers"), one header
 * for the files src/data/tokenizer_*.c (+ spm_shim.cc):
 *   - what a data file stores of its tokenizer under /tokenizer: the bits-per-byte tables
 *     (tokenizer_tables.c) and the pieces for decoding (tokenizer_pieces.c);
 *   - a SentencePiece .model read with the SentencePiece library and turned into what a data
 *     file stores: the tables by train_gpt.py's build_sentencepiece_luts rule, and the pieces;
 *     and text encoded with it (tokenizer_spm.c, through spm_shim.cc);
 *   - token ids turned back into text with stored pieces, as SentencePiece's own decoding
 *     does (tokenizer_decode.c), and the CaseOps capitalisation undone (caseops.c).
 * Functions that can fail return 0, or -1 with ct_error() naming the file and the problem. */
#ifndef CT_TOKENIZER_H
#define CT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* ---- tokenizer pieces (tokenizer_pieces.c) ----
 * A tokenizer vocabulary's pieces, stored beside the byte-count tables as /tokenizer/pieces
 * (variable-length UTF-8 strings) and /tokenizer/piece_type (uint8), with two attributes of
 * /tokenizer/pieces, leading_space and unk_surface (docs/data-format.md). The decoder below
 * turns them into text. (token_writer_set_pieces is token_writer.c's, which owns the writer.) */
typedef enum { /* SentencePiece's own type numbers (user-defined pieces are stored as normal) */
    CT_PIECE_NORMAL = 1,
    CT_PIECE_UNKNOWN = 2, /* decodes to unk_surface */
    CT_PIECE_CONTROL = 3, /* <s>, </s>, <pad>: decodes to nothing */
    CT_PIECE_UNUSED = 5,  /* decodes as a normal piece */
    CT_PIECE_BYTE = 6,    /* "<0xNN>": the byte NN */
} PieceType;
/* What happens to the '\u2581' (space mark) that starts a piece at the start of the text,
 * as SentencePiece decides from the model's normalizer (add_dummy_prefix,
 * remove_extra_whitespaces); the attribute holds the name. */
typedef enum {
    CT_LEADING_SPACE_KEEP,        /* "keep": it becomes a space like any other */
    CT_LEADING_SPACE_STRIP_FIRST, /* "strip_first": dropped from the first piece that has one */
    CT_LEADING_SPACE_STRIP_UNTIL_TEXT, /* "strip_until_text": dropped from every piece while the text is empty */
} LeadingSpaceRule;
typedef struct {
    int64_t vocab_size;
    char **text;    /* vocab_size NUL-terminated UTF-8 strings (the piece as the model has it) */
    uint8_t *type;  /* vocab_size PieceType values */
    LeadingSpaceRule leading_space;
    char *unk_surface; /* what an unknown piece decodes to (SentencePiece's default " \u2047 ") */
} TokenPieces;
void token_pieces_free(TokenPieces *pieces); /* frees the members; NULL members are fine */
/* The byte of a byte piece's text "<0xNN>" (hex digits in either case), or -1 if it is not one. */
int token_piece_byte(const char *piece);

/* The pieces of any HDF5 file holding /tokenizer (a data file or `ctrain data luts` output).
 * vocab_size >= 1: they must have that many entries; -1: any count (pieces->vocab_size says).
 * *present = 0 (and pieces zeroed) when the file has no /tokenizer/pieces. */
int data_read_pieces_file(const char *path, int64_t vocab_size, TokenPieces *pieces, int *present);
/* Store the pieces in a file being written (vocab_size entries, as the writer's). */
int token_writer_set_pieces(TokenWriter *writer, const TokenPieces *pieces);

/* ---- bits-per-byte tables (tokenizer_tables.c) ----
 * /tokenizer/base_bytes (int16), /tokenizer/has_leading_space and /tokenizer/is_boundary_token
 * (uint8 0/1), vocab_size entries each: a data file has all three or none (TokenFileInfo's
 * has_luts). (token_writer_set_luts is token_writer.c's, which owns the writer.) */

/* The tokenizer byte-count tables of the set's first file (vocab_size entries each); fails if
 * the set has no LUTs. Caller frees the three arrays with free(). */
int data_read_luts(const TokenSet *set, int16_t **base_bytes, uint8_t **has_leading_space,
                   uint8_t **is_boundary_token);

/* The /tokenizer tables of any HDF5 file (it need not hold /tokens), which must have
 * vocab_size entries each; used to copy tables into converted files. Caller frees. */
int data_read_luts_file(const char *path, int64_t vocab_size, int16_t **base_bytes,
                        uint8_t **has_leading_space, uint8_t **is_boundary_token);

/* Store the tables in a file being written (vocab_size entries, as the writer's). */
int token_writer_set_luts(TokenWriter *writer, const int16_t *base_bytes, const uint8_t *has_leading_space,
                          const uint8_t *is_boundary_token);

/* A file holding only /tokenizer: the three tables and, if pieces is not NULL, the pieces;
 * written as "<path>.tmp" and renamed into place. `--luts` reads it like a data file. */
int data_write_tokenizer_file(const char *path, int64_t vocab_size, const int16_t *base_bytes,
                              const uint8_t *has_leading_space, const uint8_t *is_boundary_token,
                              const TokenPieces *pieces);

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

/* A model loaded once and shared by threads that encode documents (`ctrain data tokenize`):
 * spm_encoder_encode may run on many threads at once with one encoder, each with its own
 * SpmEncodeBuffer. Open it after spm_tokenizer_load has read the same file (that read happens in
 * a child process first, so a file that crashes the library is an error, not a crash). */
typedef struct SpmEncoder SpmEncoder;
typedef struct {
    int *ids;              /* *n ids */
    unsigned *begin, *end; /* with spans: piece i covers bytes [begin[i], end[i]) of the text */
    size_t cap;            /* entries allocated in each array */
} SpmEncodeBuffer;
int spm_encoder_open(const char *model_path, SpmEncoder **encoder);
/* The model's <s> id, -1 when it has none. */
int64_t spm_encoder_bos_id(const SpmEncoder *encoder);
/* text (len bytes, no NUL needed) encoded as Python's sp.encode(text); with want_spans, each
 * piece's span of the text as well (sp.encode_as_immutable_proto's begin/end). *n ids are left in
 * buf->ids. Fails (ct_error set on the calling thread) only when the library reports an error. */
int spm_encoder_encode(const SpmEncoder *encoder, const char *text, size_t len, int want_spans,
                       SpmEncodeBuffer *buf, int64_t *n);
void spm_encode_buffer_free(SpmEncodeBuffer *buf);
void spm_encoder_free(SpmEncoder *encoder);

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
/* Length of the valid UTF-8 character at s (n >= 1 bytes available), or 0: SentencePiece's
 * DecodeUTF8 (shortest form only, no surrogates, nothing above U+10FFFF). */
size_t utf8_char_length(const unsigned char *s, size_t n);
/* All of ids as one new NUL-ended string (free() it) of *len bytes. */
char *piece_decode(const TokenPieces *pieces, const uint32_t *ids, int64_t n, size_t *len);
/* The same, with undo_caseops the text passed through the CaseOps decoder (below): a CaseOps
 * tokenizer's ids as the original text. */
char *piece_decode_text(const TokenPieces *pieces, const uint32_t *ids, int64_t n, int undo_caseops, size_t *len);

/* ---- the CaseOps text transform undone (caseops.c) ----
 * The 1.0611 record's CaseOps data writes capitals as lower case behind operator characters
 * U+E001 TITLE (next word capitalised), U+E002 ALLCAPS (next word in capitals), U+E003 CAPNEXT
 * (next letter a capital) and U+E004 ESC (next character literal), each a piece of its
 * SentencePiece model. The decoder is a text filter: decoded text goes in through
 * caseops_decoder_write (a TextSink: ctx = the decoder), the original text comes out to sink;
 * an operator that finds no letter to act on (a malformed sample) is dropped. */
typedef struct CaseOpsDecoder CaseOpsDecoder;
CaseOpsDecoder *caseops_decoder_create(TextSink sink, void *ctx);
void caseops_decoder_write(void *decoder, const char *text, size_t n);
/* End of the text: write what waits (the start of an operator that never completed). */
void caseops_decoder_finish(CaseOpsDecoder *d);
void caseops_decoder_free(CaseOpsDecoder *d);
/* text with its capitals written as CaseOps operators (a new string: free() it), as the record
 * prepares its data: what a CaseOps model is given to encode. */
char *caseops_encode(const char *text);
/* 1 if the pieces hold all four operator characters as pieces: a CaseOps tokenizer. */
int caseops_pieces(const TokenPieces *pieces);

#endif
