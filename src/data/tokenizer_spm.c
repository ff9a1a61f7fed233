/* tokenizer_spm.c — a SentencePiece .model turned into what a data file stores: the
 * bits-per-byte tables by train_gpt.py's build_sentencepiece_luts rule and the pieces for
 * decoding, with the decoding rules read off the library itself (docs/data-format.md
 * "Tokenizers"), and text encoded as the library encodes it (for `ctrain sample --prompt`). The
 * model is read through spm_shim.cc, the C++ side; without the library this file only says what
 * to install. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "isolate.h"
#include "tokenizer.h"

#ifdef CT_HAVE_SENTENCEPIECE
#include "spm_shim.h"
#endif

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */
#define SPACE_MARK_LEN 3

void spm_tokenizer_free(SpmTokenizer *tok) {
    if (!tok) return;
    free(tok->base_bytes);
    free(tok->has_leading_space);
    free(tok->is_boundary_token);
    token_pieces_free(&tok->pieces);
    free(tok->description);
    free(tok->decode_mismatch);
    memset(tok, 0, sizeof *tok);
}

int spm_check_pieces(const SpmTokenizer *tok, const char *model_path, const TokenPieces *stored,
                     const char *stored_path) {
    const TokenPieces *m = &tok->pieces;
    if (m->vocab_size != stored->vocab_size)
        return ct_fail("SentencePiece model '%s' has %lld pieces but '%s' stores %lld", model_path,
                       (long long)m->vocab_size, stored_path, (long long)stored->vocab_size);
    for (int64_t id = 0; id < m->vocab_size; id++)
        if (strcmp(m->text[id], stored->text[id]) != 0 || m->type[id] != stored->type[id])
            return ct_fail("SentencePiece model '%s' is not the tokenizer of '%s': piece %lld is '%s' (type %d) in "
                           "the model but '%s' (type %d) in /tokenizer/pieces", model_path, stored_path,
                           (long long)id, m->text[id], m->type[id], stored->text[id], stored->type[id]);
    return 0;
}

#ifndef CT_HAVE_SENTENCEPIECE

int spm_available(void) { return 0; }

static int without_library(const char *model_path) {
    return ct_fail("cannot read SentencePiece model '%s': this ctrain was built without the SentencePiece library; "
                   "install it (Debian: apt-get install libsentencepiece-dev g++, or run scripts/install-deps.sh) "
                   "and rebuild with make", model_path);
}

int spm_tokenizer_load(const char *model_path, SpmTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    return without_library(model_path);
}

int spm_encode(const char *model_path, const char *text, uint32_t **ids, int64_t *n) {
    (void)text;
    *ids = NULL;
    *n = 0;
    return without_library(model_path);
}

int spm_encoder_open(const char *model_path, SpmEncoder **encoder) {
    *encoder = NULL;
    return without_library(model_path);
}

int64_t spm_encoder_bos_id(const SpmEncoder *encoder) {
    (void)encoder;
    return -1;
}

int spm_encoder_encode(const SpmEncoder *encoder, const char *text, size_t len, int want_spans,
                       SpmEncodeBuffer *buf, int64_t *n) {
    (void)encoder, (void)text, (void)len, (void)want_spans, (void)buf;
    *n = 0;
    return ct_fail("this ctrain was built without the SentencePiece library");
}

void spm_encoder_free(SpmEncoder *encoder) { (void)encoder; }

#else

int spm_available(void) { return 1; }

/* train_gpt.py's build_sentencepiece_luts for one piece. */
static int table_entry(SpmTokenizer *tok, const char *path, int id) {
    int type = tok->pieces.type[id];
    if (type == CT_PIECE_CONTROL || type == CT_PIECE_UNKNOWN || type == CT_PIECE_UNUSED) {
        tok->base_bytes[id] = 0;
        tok->is_boundary_token[id] = 1;
        return 0;
    }
    tok->is_boundary_token[id] = 0;
    if (type == CT_PIECE_BYTE) {
        tok->base_bytes[id] = 1;
        return 0;
    }
    const char *text = tok->pieces.text[id];
    if (!strncmp(text, SPACE_MARK, SPACE_MARK_LEN)) {
        tok->has_leading_space[id] = 1;
        text += SPACE_MARK_LEN;
    }
    size_t bytes = strlen(text);
    if (bytes > INT16_MAX)
        return ct_fail("SentencePiece model '%s': piece %d has %zu bytes, more than the int16 base_bytes table holds",
                       path, id, bytes);
    tok->base_bytes[id] = (int16_t)bytes;
    return 0;
}

/* The pieces, their types and the tables. */
static int read_vocabulary(const CtSpmModel *model, const char *path, SpmTokenizer *tok) {
    int n = ct_spm_size(model);
    if (n < 1) return ct_fail("SentencePiece model '%s' has no pieces", path);
    tok->vocab_size = n;
    TokenPieces *p = &tok->pieces;
    p->vocab_size = n;
    p->text = ct_calloc((size_t)n, sizeof(char *), "tokenizer pieces");
    p->type = ct_malloc((size_t)n, "piece types");
    tok->base_bytes = ct_calloc((size_t)n, sizeof(int16_t), "base_bytes table");
    tok->has_leading_space = ct_calloc((size_t)n, 1, "has_leading_space table");
    tok->is_boundary_token = ct_calloc((size_t)n, 1, "is_boundary_token table");
    for (int id = 0; id < n; id++) {
        size_t len;
        const char *text = ct_spm_piece(model, id, &len);
        if (memchr(text, '\0', len))
            return ct_fail("SentencePiece model '%s': piece %d holds a NUL byte, which ctrain cannot store", path, id);
        p->text[id] = ct_malloc(len + 1, "tokenizer piece");
        memcpy(p->text[id], text, len);
        p->text[id][len] = '\0';
        p->type[id] = (uint8_t)ct_spm_type(model, id);
        if (p->type[id] == CT_PIECE_BYTE && token_piece_byte(p->text[id]) < 0)
            return ct_fail("SentencePiece model '%s': byte piece %d reads '%s', expected <0xNN>", path, id,
                           p->text[id]);
        if (table_entry(tok, path, id) != 0) return -1;
    }
    return 0;
}

/* The library's decoding of ids (ints) as a new string. */
static char *library_decode(const CtSpmModel *model, const char *path, const int *ids, int n, size_t *len) {
    char err[512], *text = NULL;
    if (ct_spm_decode(model, ids, n, &text, len, err, sizeof err) != 0) {
        ct_fail("SentencePiece model '%s': decoding failed: %s", path, err);
        return NULL;
    }
    return text;
}

/* The first id of a piece of type `type` whose text is exactly `text` (NULL: any) or, with
 * prefix set, starts with it and has more after it; -1 if none. */
static int find_piece(const TokenPieces *p, int type, const char *text, int prefix) {
    for (int64_t id = 0; id < p->vocab_size; id++) {
        if (p->type[id] != type) continue;
        if (!text) return (int)id;
        size_t k = strlen(text);
        if (prefix ? !strncmp(p->text[id], text, k) && p->text[id][k] : !strcmp(p->text[id], text)) return (int)id;
    }
    return -1;
}

/* What the library does with a leading space mark at the start of the text, asked of the
 * library itself (the model's normalizer flags are not in its public interface): "▁▁" decodes
 * to "" when every leading mark is dropped, " " when only the first is, "  " when none is.
 * Without a "▁" piece only a piece starting with "▁" can tell, and then dropping the first
 * and dropping all differ on no input. */
static int read_leading_space_rule(const CtSpmModel *model, const char *path, TokenPieces *p) {
    p->leading_space = CT_LEADING_SPACE_KEEP;
    int id = find_piece(p, CT_PIECE_NORMAL, SPACE_MARK, 0), ids[2] = {id, id};
    size_t len;
    if (id >= 0) {
        char *s = library_decode(model, path, ids, 2, &len);
        if (!s) return -1;
        p->leading_space = len == 0 ? CT_LEADING_SPACE_STRIP_UNTIL_TEXT
                           : len == 1 ? CT_LEADING_SPACE_STRIP_FIRST : CT_LEADING_SPACE_KEEP;
        free(s);
        return 0;
    }
    if ((id = find_piece(p, CT_PIECE_NORMAL, SPACE_MARK, 1)) < 0) return 0;
    char *s = library_decode(model, path, &id, 1, &len);
    if (!s) return -1;
    size_t kept = strlen(p->text[id]); /* its length with every mark as a space */
    for (const char *m = p->text[id]; (m = strstr(m, SPACE_MARK)) != NULL; m += SPACE_MARK_LEN) kept -= 2;
    if (len != kept) p->leading_space = CT_LEADING_SPACE_STRIP_FIRST;
    free(s);
    return 0;
}

/* Compare ctrain's decoding of ids with the library's; a note in tok->decode_mismatch if they
 * differ. */
static int check_decoding(const CtSpmModel *model, const char *path, SpmTokenizer *tok, const int *ids, int n,
                          const char *which) {
    size_t want_len, got_len;
    char *want = library_decode(model, path, ids, n, &want_len);
    if (!want) return -1;
    char *got = piece_decode(&tok->pieces, (const uint32_t *)ids, n, &got_len);
    if (!tok->decode_mismatch && (got_len != want_len || memcmp(got, want, got_len) != 0)) {
        size_t at = 0;
        while (at < got_len && at < want_len && got[at] == want[at]) at++;
        char note[600];
        snprintf(note, sizeof note, "SentencePiece model '%s': ctrain's decoding of the pieces differs from the "
                 "library's (%s, from byte %zu; a model with a denormalization rule?): text that ctrain sample "
                 "prints may differ from sp.decode", path, which, at);
        tok->decode_mismatch = ct_strdup(note);
    }
    free(want);
    free(got);
    return 0;
}

/* Load the model at path, with errors that say what is wrong with the file. */
static int open_model(const char *path, CtSpmModel **model) {
    FILE *probe = fopen(path, "rb"); /* the system's words for a missing or unreadable file */
    if (!probe) return ct_fail("cannot open SentencePiece model '%s': %s", path, strerror(errno));
    struct stat st;
    int regular = fstat(fileno(probe), &st) == 0 && S_ISREG(st.st_mode);
    fclose(probe);
    if (!regular) return ct_fail("SentencePiece model '%s' is not a regular file", path);
    char err[512];
    if (ct_spm_load(path, model, err, sizeof err) != 0) {
        if (strstr(err, "ParseFromArray"))
            return ct_fail("'%s' is not a SentencePiece model: it does not parse as one (another kind of file, or "
                           "a truncated or damaged model)", path);
        return ct_fail("'%s' is not a usable SentencePiece model: %s", path, err);
    }
    return 0;
}

/* Everything, in this process. */
static int load_here(const char *path, SpmTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    CtSpmModel *model;
    if (open_model(path, &model) != 0) return -1;
    int rc = read_vocabulary(model, path, tok);
    if (rc == 0) rc = read_leading_space_rule(model, path, &tok->pieces);
    if (rc == 0) {
        int unk = find_piece(&tok->pieces, CT_PIECE_UNKNOWN, NULL, 0);
        size_t len;
        tok->pieces.unk_surface = unk >= 0 ? library_decode(model, path, &unk, 1, &len) : ct_strdup(" \xE2\x81\x87 ");
        if (!tok->pieces.unk_surface) rc = -1;
    }
    if (rc == 0) { /* every id, forwards and backwards: each piece after every kind */
        int n = (int)tok->vocab_size;
        int *ids = ct_malloc((size_t)(n > 8 ? n : 8) * sizeof(int), "id list");
        for (int i = 0; i < n; i++) ids[i] = i;
        rc = check_decoding(model, path, tok, ids, n, "all ids in order");
        for (int i = 0; i < n; i++) ids[i] = n - 1 - i;
        if (rc == 0) rc = check_decoding(model, path, tok, ids, n, "all ids in reverse order");
        /* and the start of a text, where the leading-space rule acts: a control piece, "▁" twice,
         * a piece starting with "▁", "▁" again, one more starting with "▁" */
        const TokenPieces *p = &tok->pieces;
        int control = find_piece(p, CT_PIECE_CONTROL, NULL, 0), space = find_piece(p, CT_PIECE_NORMAL, SPACE_MARK, 0);
        int word = find_piece(p, CT_PIECE_NORMAL, SPACE_MARK, 1), k = 0;
        int candidates[] = {control, space, space, word, space, word};
        for (int i = 0; i < 6; i++)
            if (candidates[i] >= 0) ids[k++] = candidates[i];
        if (rc == 0 && k > 0) rc = check_decoding(model, path, tok, ids, k, "the start of a text");
        free(ids);
    }
    ct_spm_free(model);
    if (rc == 0) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        size_t cap = strlen(base) + 64;
        tok->description = ct_malloc(cap, "tokenizer description");
        snprintf(tok->description, cap, "sentencepiece:%s (vocab %lld)", base, (long long)tok->vocab_size);
    }
    if (rc != 0) spm_tokenizer_free(tok);
    return rc;
}

static int load_check(void *path, void *out) {
    (void)out;
    SpmTokenizer tok;
    int rc = load_here(path, &tok);
    if (rc == 0) spm_tokenizer_free(&tok);
    return rc;
}

/* fn(ctx, NULL) in a child process, where a crash of the library is only an error: "DOING
 * SentencePiece model 'PATH' (a damaged file?) crashed (signal ...)". */
static int in_child(const char *doing, const char *path, int (*fn)(void *ctx, void *out), void *ctx) {
    char what[4200];
    snprintf(what, sizeof what, "%s SentencePiece model '%s' (a damaged file?)", doing, path);
    fflush(stdout);
    return ct_run_isolated(what, fn, ctx, NULL, 0, 0);
}

int spm_tokenizer_load(const char *model_path, SpmTokenizer *tok) {
    memset(tok, 0, sizeof *tok);
    if (in_child("reading", model_path, load_check, (void *)model_path) != 0) return -1;
    return load_here(model_path, tok);
}

/* ---- encoding ---- */

typedef struct {
    const char *path, *text;
} EncodeJob;

/* Encode in this process. */
static int encode_here(const EncodeJob *job, uint32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    CtSpmModel *model;
    if (open_model(job->path, &model) != 0) return -1;
    int *encoded, count;
    char err[512];
    int rc = ct_spm_encode(model, job->text, strlen(job->text), &encoded, &count, err, sizeof err);
    ct_spm_free(model);
    if (rc != 0) return ct_fail("SentencePiece model '%s': encoding failed: %s", job->path, err);
    *ids = ct_calloc(count > 0 ? (size_t)count : 1, sizeof **ids, "encoded ids");
    for (int i = 0; i < count; i++) (*ids)[i] = (uint32_t)encoded[i];
    *n = count;
    free(encoded);
    return 0;
}

static int encode_check(void *job, void *out) {
    (void)out;
    uint32_t *ids;
    int64_t n;
    int rc = encode_here(job, &ids, &n);
    free(ids);
    return rc;
}

int spm_encode(const char *model_path, const char *text, uint32_t **ids, int64_t *n) {
    *ids = NULL;
    *n = 0;
    EncodeJob job = {model_path, text};
    if (in_child("encoding with", model_path, encode_check, &job) != 0) return -1;
    return encode_here(&job, ids, n);
}

/* ---- a shared encoder for many documents ---- */

struct SpmEncoder {
    CtSpmModel *model;
    char *path;
};

int spm_encoder_open(const char *model_path, SpmEncoder **encoder) {
    *encoder = NULL;
    CtSpmModel *model;
    if (open_model(model_path, &model) != 0) return -1;
    SpmEncoder *e = ct_calloc(1, sizeof *e, "SentencePiece encoder");
    e->model = model;
    e->path = ct_strdup(model_path);
    *encoder = e;
    return 0;
}

int64_t spm_encoder_bos_id(const SpmEncoder *encoder) { return ct_spm_bos_id(encoder->model); }

int spm_encoder_encode(const SpmEncoder *encoder, const char *text, size_t len, int want_spans,
                       SpmEncodeBuffer *buf, int64_t *n) {
    char err[512];
    int count = 0, rc;
    *n = 0;
    if (len > (size_t)INT32_MAX)
        return ct_fail("a text of %zu bytes is longer than the SentencePiece library encodes (2 GiB)", len);
    if (want_spans) {
        rc = ct_spm_encode_spans(encoder->model, text, len, &buf->ids, &buf->begin, &buf->end, &buf->cap, &count,
                                 err, sizeof err);
    } else {
        int *ids = NULL;
        rc = ct_spm_encode(encoder->model, text, len, &ids, &count, err, sizeof err);
        if (rc == 0 && (size_t)count > buf->cap) { /* the three arrays keep one capacity */
            size_t want = (size_t)count + (size_t)count / 2 + 16;
            free(buf->ids), free(buf->begin), free(buf->end);
            buf->ids = ct_malloc(want * sizeof(int), "encoded ids");
            buf->begin = ct_malloc(want * sizeof(unsigned), "piece spans");
            buf->end = ct_malloc(want * sizeof(unsigned), "piece spans");
            buf->cap = want;
        }
        if (rc == 0 && count > 0) memcpy(buf->ids, ids, (size_t)count * sizeof(int));
        free(ids);
    }
    if (rc != 0) return ct_fail("SentencePiece model '%s': encoding failed: %s", encoder->path, err);
    *n = count;
    return 0;
}

void spm_encoder_free(SpmEncoder *encoder) {
    if (!encoder) return;
    ct_spm_free(encoder->model);
    free(encoder->path);
    free(encoder);
}

#endif

void spm_encode_buffer_free(SpmEncodeBuffer *buf) {
    free(buf->ids);
    free(buf->begin);
    free(buf->end);
    memset(buf, 0, sizeof *buf);
}
