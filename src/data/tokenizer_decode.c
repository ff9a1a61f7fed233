/* tokenizer_decode.c — token ids to text with a tokenizer's stored pieces, following
 * SentencePiece's decoding (SentencePieceProcessor::Decode) step by step, so that text from
 * `ctrain sample` equals sp.decode(ids) without the model file. tokenizer_spm.c checks this
 * against the library for each model it imports. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581, SentencePiece's space */
#define SPACE_MARK_LEN 3
#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

struct PieceDecoder {
    const TokenPieces *pieces;
    unsigned char *run; /* the pending run of byte pieces */
    size_t run_len, run_cap;
    int text_empty;  /* nothing written yet */
    int at_start;    /* SentencePiece's is_bos_ws: the leading_space rule still applies */
    int space_taken; /* the last text piece gave up its leading space mark (bos_ws_seen) */
};

PieceDecoder *piece_decoder_create(const TokenPieces *pieces) {
    PieceDecoder *d = ct_calloc(1, sizeof *d, "piece decoder");
    d->pieces = pieces;
    d->text_empty = d->at_start = 1;
    return d;
}

void piece_decoder_free(PieceDecoder *d) {
    if (!d) return;
    free(d->run);
    free(d);
}

static void write_text(PieceDecoder *d, const char *s, size_t n, TextSink sink, void *ctx) {
    if (n == 0) return;
    sink(ctx, s, n);
    d->text_empty = 0;
}

size_t utf8_char_length(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
#define TRAIL(k) ((s[k] & 0xC0) == 0x80)
    uint32_t cp;
    size_t len;
    if (n >= 2 && (s[0] & 0xE0) == 0xC0) {
        cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
        len = TRAIL(1) && cp >= 0x80 ? 2 : 0;
    } else if (n >= 3 && (s[0] & 0xF0) == 0xE0) {
        cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        len = TRAIL(1) && TRAIL(2) && cp >= 0x800 ? 3 : 0;
    } else if (n >= 4 && (s[0] & 0xF8) == 0xF0) {
        cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
             (s[3] & 0x3F);
        len = TRAIL(1) && TRAIL(2) && TRAIL(3) && cp >= 0x10000 ? 4 : 0;
    } else {
        return 0;
    }
#undef TRAIL
    int valid_cp = cp < 0xD800 || (cp >= 0xE000 && cp <= 0x10FFFF);
    return valid_cp ? len : 0;
}

/* A run of byte pieces: each valid UTF-8 character as it is, each other byte as U+FFFD. */
static void flush_run(PieceDecoder *d, TextSink sink, void *ctx) {
    for (size_t at = 0; at < d->run_len;) {
        size_t k = utf8_char_length(d->run + at, d->run_len - at);
        if (k == 0) {
            write_text(d, REPLACEMENT, 3, sink, ctx);
            at++;
        } else {
            write_text(d, (const char *)d->run + at, k, sink, ctx);
            at += k;
        }
    }
    d->run_len = 0;
}

void piece_decoder_push(PieceDecoder *d, uint32_t id, TextSink sink, void *ctx) {
    const TokenPieces *p = d->pieces;
    const char *text = p->text[id];
    if (p->type[id] == CT_PIECE_BYTE) {
        if (d->run_len == d->run_cap) {
            d->run_cap = d->run_cap ? 2 * d->run_cap : 16;
            unsigned char *grown = realloc(d->run, d->run_cap);
            if (!grown) {
                ct_fail("out of memory for the decoder's byte run");
                ct_print_error();
                exit(CT_EXIT_FAILURE);
            }
            d->run = grown;
        }
        d->run[d->run_len++] = (unsigned char)token_piece_byte(text);
        return;
    }
    flush_run(d, sink, ctx);
    if (d->space_taken || !d->text_empty) d->at_start = 0;
    d->space_taken = 0;
    if (p->type[id] == CT_PIECE_CONTROL) return; /* <s>, </s>: invisible */
    if (p->type[id] == CT_PIECE_UNKNOWN) {
        write_text(d, p->unk_surface, strlen(p->unk_surface), sink, ctx);
        return;
    }
    if (d->at_start && p->leading_space != CT_LEADING_SPACE_KEEP && !strncmp(text, SPACE_MARK, SPACE_MARK_LEN)) {
        text += SPACE_MARK_LEN;
        d->space_taken = p->leading_space == CT_LEADING_SPACE_STRIP_FIRST;
    }
    for (const char *mark; (mark = strstr(text, SPACE_MARK)) != NULL; text = mark + SPACE_MARK_LEN) {
        write_text(d, text, (size_t)(mark - text), sink, ctx);
        write_text(d, " ", 1, sink, ctx);
    }
    write_text(d, text, strlen(text), sink, ctx);
}

void piece_decoder_finish(PieceDecoder *d, TextSink sink, void *ctx) { flush_run(d, sink, ctx); }

typedef struct {
    char *buf;
    size_t len, cap;
} Growing;

static void append(void *ctx, const char *bytes, size_t n) {
    Growing *g = ctx;
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap ? g->cap : 64;
        while (cap < g->len + n + 1) cap *= 2;
        char *grown = ct_malloc(cap, "decoded text");
        if (g->buf) memcpy(grown, g->buf, g->len);
        free(g->buf);
        g->buf = grown;
        g->cap = cap;
    }
    memcpy(g->buf + g->len, bytes, n);
    g->len += n;
    g->buf[g->len] = '\0';
}

char *piece_decode(const TokenPieces *pieces, const uint32_t *ids, int64_t n, size_t *len) {
    return piece_decode_text(pieces, ids, n, 0, len);
}

char *piece_decode_text(const TokenPieces *pieces, const uint32_t *ids, int64_t n, int undo_caseops, size_t *len) {
    Growing g = {0};
    append(&g, "", 0);
    PieceDecoder *d = piece_decoder_create(pieces);
    CaseOpsDecoder *c = undo_caseops ? caseops_decoder_create(append, &g) : NULL;
    TextSink sink = c ? caseops_decoder_write : append;
    void *ctx = c ? (void *)c : (void *)&g;
    for (int64_t i = 0; i < n; i++) piece_decoder_push(d, ids[i], sink, ctx);
    piece_decoder_finish(d, sink, ctx);
    if (c) caseops_decoder_finish(c);
    caseops_decoder_free(c);
    piece_decoder_free(d);
    *len = g.len;
    return g.buf;
}
