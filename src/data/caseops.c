/* caseops.c — the CaseOps text transform (tokenizer.h) both ways, so that `ctrain sample` takes
 * a plain prompt and prints readable text for a model trained on the 1.0611 record's CaseOps data.
 * That transform (the record's lossless_caps_caseops_v1) writes capitals as lower case behind
 * four private-use operator characters, which its SentencePiece model holds as pieces:
 *   U+E001 TITLE    the next ASCII word starts with a capital
 *   U+E002 ALLCAPS  the next ASCII word is all capitals
 *   U+E003 CAPNEXT  the next ASCII letter is a capital
 *   U+E004 ESC      the next character is literal (an operator character in the original text)
 * (an ASCII word: a maximal run of A-Z, a-z). Encoding: a lower-case word stays; a word of two
 * or more capitals becomes ALLCAPS + the word in lower case; any other word with a capital
 * becomes TITLE when its first letter is one, then its letters in lower case, each later capital
 * behind CAPNEXT; an operator character of the text gets ESC before it. The record's decoder raises on a malformed
 * sequence; a model's sample may well hold one, so this one is lenient: an operator that finds
 * no letter to act on is dropped. Decoding is a filter on the text stream, byte by byte (an
 * operator split across two writes is still seen), so it fits the piece decoder's sink. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer.h"

/* UTF-8 of U+E001..U+E004: EE 80 81..84. */
#define OP_LEAD 0xEE
#define OP_MID 0x80
enum { OP_TITLE = 0x81, OP_ALLCAPS = 0x82, OP_CAPNEXT = 0x83, OP_ESC = 0x84 };

typedef enum { PENDING_NONE, PENDING_TITLE, PENDING_ALLCAPS } WordMode;

struct CaseOpsDecoder {
    TextSink sink;
    void *ctx;
    unsigned char held[2]; /* a possible operator's first bytes (EE, EE 80) */
    int num_held;
    int escape;       /* ESC seen: the next character is literal */
    WordMode pending; /* TITLE or ALLCAPS waiting for the next word */
    int capnext;      /* CAPNEXT waiting for the next letter */
    int allcaps;      /* inside a word that ALLCAPS started */
    int in_word;      /* the last character was an ASCII letter */
};

CaseOpsDecoder *caseops_decoder_create(TextSink sink, void *ctx) {
    CaseOpsDecoder *d = ct_calloc(1, sizeof *d, "CaseOps decoder");
    d->sink = sink;
    d->ctx = ctx;
    return d;
}

void caseops_decoder_free(CaseOpsDecoder *d) { free(d); }

static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static void emit(CaseOpsDecoder *d, const unsigned char *s, size_t n) { d->sink(d->ctx, (const char *)s, n); }

/* An ordinary byte (not part of an operator): letters take the pending capitalisation. */
static void ordinary(CaseOpsDecoder *d, unsigned char c) {
    const int continuation = (c & 0xC0) == 0x80; /* inside a multi-byte character: changes nothing */
    if (d->escape && !continuation) {
        d->escape = 0;
        d->in_word = is_letter(c);
        if (!d->in_word) d->allcaps = 0;
        emit(d, &c, 1);
        return;
    }
    if (continuation) {
        emit(d, &c, 1);
        return;
    }
    if (is_letter(c)) {
        const int upper = (!d->in_word && d->pending != PENDING_NONE) || d->capnext || (d->in_word && d->allcaps);
        if (!d->in_word && d->pending == PENDING_ALLCAPS) d->allcaps = 1;
        d->pending = PENDING_NONE;
        d->capnext = 0;
        d->in_word = 1;
        if (upper && c >= 'a' && c <= 'z') c = (unsigned char)(c - 'a' + 'A');
        emit(d, &c, 1);
        return;
    }
    /* any other character ends a word and drops what found no letter */
    d->pending = PENDING_NONE;
    d->capnext = 0;
    d->allcaps = 0;
    d->in_word = 0;
    emit(d, &c, 1);
}

static void operator(CaseOpsDecoder *d, unsigned char op) {
    if (d->escape) { /* an operator character of the original text */
        const unsigned char literal[3] = {OP_LEAD, OP_MID, op};
        d->escape = 0;
        d->in_word = d->allcaps = 0;
        emit(d, literal, 3);
        return;
    }
    switch (op) {
    case OP_TITLE: d->pending = PENDING_TITLE; break;
    case OP_ALLCAPS: d->pending = PENDING_ALLCAPS; break;
    case OP_CAPNEXT: d->capnext = 1; break;
    default: d->escape = 1; break;
    }
    if (op != OP_CAPNEXT && op != OP_ESC) { /* TITLE and ALLCAPS start a new word */
        d->in_word = 0;
        d->allcaps = 0;
    }
}

/* Give the held bytes back as ordinary ones (they began no operator). */
static void release_held(CaseOpsDecoder *d) {
    const int n = d->num_held;
    d->num_held = 0;
    for (int i = 0; i < n; i++) ordinary(d, d->held[i]);
}

void caseops_decoder_write(void *decoder, const char *text, size_t n) {
    CaseOpsDecoder *d = decoder;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)text[i];
        if (d->num_held == 0 && c == OP_LEAD) {
            d->held[d->num_held++] = c;
        } else if (d->num_held == 1 && c == OP_MID) {
            d->held[d->num_held++] = c;
        } else if (d->num_held == 2 && c >= OP_TITLE && c <= OP_ESC) {
            d->num_held = 0;
            operator(d, c);
        } else {
            release_held(d);
            if (c == OP_LEAD) d->held[d->num_held++] = c;
            else ordinary(d, c);
        }
    }
}

void caseops_decoder_finish(CaseOpsDecoder *d) {
    release_held(d);
    d->escape = d->capnext = d->allcaps = d->in_word = 0;
    d->pending = PENDING_NONE;
}

static int is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static char lower(char c) { return is_upper(c) ? (char)(c - 'A' + 'a') : c; }

/* out gains n bytes of s (out has room: the encoder sizes it for the worst case). */
static void put(char **out, const char *s, size_t n) {
    memcpy(*out, s, n);
    *out += n;
}

char *caseops_encode(const char *text) {
    static const char TITLE[] = "\xEE\x80\x81", ALLCAPS[] = "\xEE\x80\x82", CAPNEXT[] = "\xEE\x80\x83",
                      ESC[] = "\xEE\x80\x84";
    const size_t n = strlen(text);
    char *out = ct_malloc(4 * n + 1, "CaseOps text"), *o = out; /* at most 4 bytes per byte of text */
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)text[i];
        if (c == OP_LEAD && i + 2 < n && (unsigned char)text[i + 1] == OP_MID && (unsigned char)text[i + 2] >= OP_TITLE &&
            (unsigned char)text[i + 2] <= OP_ESC) {
            put(&o, ESC, 3);
            put(&o, text + i, 3);
            i += 3;
            continue;
        }
        if (!is_letter(c)) {
            *o++ = (char)c;
            i++;
            continue;
        }
        size_t end = i, capitals = 0;
        while (end < n && is_letter((unsigned char)text[end])) capitals += is_upper(text[end++]);
        const size_t len = end - i;
        if (capitals == 0) {
            put(&o, text + i, len);
        } else if (len >= 2 && capitals == len) {
            put(&o, ALLCAPS, 3);
            for (size_t k = i; k < end; k++) *o++ = lower(text[k]);
        } else {
            if (is_upper(text[i])) put(&o, TITLE, 3);
            *o++ = lower(text[i]);
            for (size_t k = i + 1; k < end; k++) {
                if (is_upper(text[k])) put(&o, CAPNEXT, 3);
                *o++ = lower(text[k]);
            }
        }
        i = end;
    }
    *o = '\0';
    return out;
}

int caseops_pieces(const TokenPieces *pieces) {
    static const char *const OPERATORS[4] = {"\xEE\x80\x81", "\xEE\x80\x82", "\xEE\x80\x83", "\xEE\x80\x84"};
    int found = 0;
    for (int op = 0; op < 4; op++)
        for (int64_t id = 0; id < pieces->vocab_size; id++)
            if (pieces->text[id] && strcmp(pieces->text[id], OPERATORS[op]) == 0) {
                found++;
                break;
            }
    return found == 4;
}
