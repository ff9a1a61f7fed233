/* tokenize.c — a corpus into token shards (tokenize.h). Documents go in batches: while a
 * reader thread reads the next batch, an OpenMP loop encodes this one (each document on its own:
 * checked UTF-8, the CaseOps transform, the model's encoding, byte counts), and then the main
 * thread appends its documents in corpus order to the shard streams of the two splits: the
 * order of the output never depends on which thread encoded what.
 *   shard streams     one split's shards, opened as tokens arrive, closed full (tmp + rename)
 *   encoding          one document: UTF-8 check, CaseOps, ids, byte counts
 *   progress          a line on stderr
 *   tokenize_corpus   the loop */
#include "tokenize.h"

#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "data.h"
#include "fault.h"
#include "shard_bin.h"
#include "stop.h"
#include "tokenizer.h"

/* A batch ends at this many bytes of text or documents per thread (of at most BATCH_THREADS
 * threads: memory stays bounded on a large node): large enough that a thread rarely waits for
 * the slowest document of its batch, small enough to bound memory (two batches are held). */
#define BATCH_BYTES_PER_THREAD ((size_t)4 << 20)
#define BATCH_DOCS_PER_THREAD 512
#define BATCH_THREADS 64

/* ---- shard streams ---- */

typedef struct {
    const TokenizeRequest *req;
    const char *split;   /* "train" or "val" */
    char prefix[64];     /* "train_" or "train_p001of003_" */
    int token_bytes;     /* 2 or 4 */
    int with_counts;     /* /bytes_per_token (HDF5) or a byte sidecar (.bin) */
    int64_t vocab_size, bos_id;
    const SpmTokenizer *tok;
    int index;           /* shards finished */
    int64_t in_shard, tokens;
    TokenWriter *h5;
    ShardBinWriter *bin, *bin_counts;
    char *path, *counts_path; /* of the open shard */
    char **done;         /* finished files (removed again if the run fails) */
    int num_done, cap_done;
    void *scratch;       /* ids at the file's width */
    size_t scratch_cap;
} ShardStream;

static char *shard_path(const ShardStream *s, const char *infix, int index) {
    const char *dir = s->req->out_dir;
    size_t cap = strlen(dir) + strlen(s->prefix) + strlen(infix) + 32;
    char *path = ct_malloc(cap, "shard path");
    snprintf(path, cap, "%s/%s%s%06d.%s", dir, s->prefix, infix, index, s->req->format_bin ? "bin" : "h5");
    return path;
}

static void remember_done(ShardStream *s, char *path) {
    if (s->num_done == s->cap_done) {
        s->cap_done = s->cap_done ? 2 * s->cap_done : 16;
        char **grown = ct_malloc((size_t)s->cap_done * sizeof *grown, "shard list");
        if (s->num_done > 0) memcpy(grown, s->done, (size_t)s->num_done * sizeof *grown);
        free(s->done);
        s->done = grown;
    }
    s->done[s->num_done++] = path;
}

static int open_shard(ShardStream *s) {
    s->path = shard_path(s, "", s->index);
    if (s->req->format_bin) {
        if (shard_bin_writer_create(&s->bin, s->path) != 0) return -1;
        if (s->with_counts) {
            /* the record's name for the sidecar: "bytes_" before the number (shard_bin.h pairs them) */
            s->counts_path = shard_path(s, "bytes_", s->index);
            if (shard_bin_writer_create(&s->bin_counts, s->counts_path) != 0) return -1;
        }
        return 0;
    }
    if (token_writer_create(&s->h5, s->path, s->token_bytes, s->vocab_size, s->bos_id, s->tok->description) != 0)
        return -1;
    if (token_writer_set_luts(s->h5, s->tok->base_bytes, s->tok->has_leading_space, s->tok->is_boundary_token) != 0 ||
        token_writer_set_pieces(s->h5, &s->tok->pieces) != 0 ||
        (s->req->provenance && token_writer_set_provenance(s->h5, s->req->provenance) != 0))
        return -1;
    return 0;
}

/* Close the open shard (renamed into place) and remember its files. */
static int close_shard(ShardStream *s) {
    int rc;
    if (s->req->format_bin) {
        rc = shard_bin_writer_close(s->bin);
        s->bin = NULL;
    } else {
        rc = token_writer_close(s->h5);
        s->h5 = NULL;
    }
    if (rc == 0) remember_done(s, s->path);
    else free(s->path);
    s->path = NULL;
    if (s->bin_counts) {
        if (rc == 0) rc = shard_bin_writer_close(s->bin_counts);
        else shard_bin_writer_abort(s->bin_counts);
        s->bin_counts = NULL;
        if (rc == 0) remember_done(s, s->counts_path);
        else free(s->counts_path);
        s->counts_path = NULL;
    }
    if (rc != 0) return -1;
    if (s->with_counts && s->req->format_bin)
        printf("wrote %s + %s: %lld tokens\n", s->done[s->num_done - 2], s->done[s->num_done - 1],
               (long long)s->in_shard);
    else
        printf("wrote %s: %lld tokens%s\n", s->done[s->num_done - 1], (long long)s->in_shard,
               s->with_counts ? ", /bytes_per_token" : "");
    fflush(stdout);
    s->index++;
    s->in_shard = 0;
    return 0;
}

/* ids at the file's width in s->scratch. */
static const void *narrow(ShardStream *s, const uint32_t *ids, int64_t n) {
    size_t need = (size_t)n * (size_t)s->token_bytes;
    if (need > s->scratch_cap) {
        free(s->scratch);
        s->scratch_cap = need + need / 2;
        s->scratch = ct_malloc(s->scratch_cap, "token buffer");
    }
    if (s->token_bytes == 4) return ids;
    uint16_t *out = s->scratch;
    for (int64_t i = 0; i < n; i++) out[i] = (uint16_t)ids[i];
    return out;
}

/* Append n tokens (and their byte counts, if the stream has them), cutting shards as they fill. */
static int stream_append(ShardStream *s, const uint32_t *ids, const uint16_t *counts, int64_t n) {
    while (n > 0) {
        if (!s->h5 && !s->bin && open_shard(s) != 0) return -1;
        const int64_t k = s->req->shard_tokens - s->in_shard < n ? s->req->shard_tokens - s->in_shard : n;
        const void *values = narrow(s, ids, k);
        int rc;
        if (s->req->format_bin) {
            rc = shard_bin_writer_append(s->bin, values, k);
            if (rc == 0 && s->with_counts) rc = shard_bin_writer_append(s->bin_counts, counts, k);
        } else {
            rc = token_writer_append(s->h5, values, k);
            if (rc == 0 && s->with_counts) rc = token_writer_append_byte_counts(s->h5, counts, k);
        }
        if (rc != 0) return -1;
        s->in_shard += k;
        s->tokens += k;
        ids += k;
        if (counts) counts += k;
        n -= k;
        if (s->in_shard == s->req->shard_tokens && close_shard(s) != 0) return -1;
    }
    return 0;
}

static int stream_finish(ShardStream *s) { return s->in_shard > 0 ? close_shard(s) : 0; }

/* Remove the open shard's temporary files and every file finished; frees the stream. */
static void stream_discard(ShardStream *s, int remove_finished) {
    token_writer_abort(s->h5);
    shard_bin_writer_abort(s->bin);
    shard_bin_writer_abort(s->bin_counts);
    for (int i = 0; i < s->num_done; i++) {
        if (remove_finished) unlink(s->done[i]);
        free(s->done[i]);
    }
    free(s->done);
    free(s->path);
    free(s->counts_path);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

/* ---- encoding ---- */

/* A document of the batch and what encoding made of it. */
typedef struct {
    Doc doc;
    int is_val;
    uint32_t *ids;      /* n: BOS, then the model's ids */
    uint16_t *counts;   /* n original bytes per token (validation with CaseOps), else NULL */
    int64_t n;
    int64_t replaced;   /* invalid bytes replaced */
    char *error;        /* why it could not be encoded */
} Item;

/* "document 12 ('x.jsonl' line 13)": numbered from 1, as the lines are. */
static void describe_doc(const DocReader *reader, const Doc *doc, char *buf, size_t cap) {
    if (doc->line > 0)
        snprintf(buf, cap, "document %lld ('%s' line %lld)", (long long)doc->index + 1,
                 doc_reader_input_name(reader, doc->input), (long long)doc->line);
    else
        snprintf(buf, cap, "document %lld ('%s')", (long long)doc->index + 1,
                 doc_reader_input_name(reader, doc->input));
}

/* Bytes that start no valid UTF-8 character, NULs among them (text holds none; a NUL means a
 * binary file). *first is the offset of the first. */
static int64_t count_invalid(const char *text, size_t len, size_t *first) {
    const unsigned char *s = (const unsigned char *)text;
    int64_t bad = 0;
    for (size_t at = 0; at < len;) {
        if (s[at] >= 0x80 || s[at] == 0) {
            size_t k = s[at] ? utf8_char_length(s + at, len - at) : 0;
            if (k == 0) {
                if (bad++ == 0) *first = at;
                at++;
                continue;
            }
            at += k;
        } else {
            at++;
        }
    }
    return bad;
}

/* text with each invalid byte as U+FFFD (a new string). */
static char *replace_invalid(const char *text, size_t len, size_t *out_len) {
    const unsigned char *s = (const unsigned char *)text;
    char *out = ct_malloc(3 * len + 1, "document"), *o = out;
    for (size_t at = 0; at < len;) {
        size_t k = s[at] ? utf8_char_length(s + at, len - at) : 0;
        if (k == 0) {
            memcpy(o, "\xEF\xBF\xBD", 3), o += 3, at++;
        } else {
            memcpy(o, s + at, k), o += k, at += k;
        }
    }
    *o = '\0';
    *out_len = (size_t)(o - out);
    return out;
}

/* The original text's bytes per token (the record's rule): each piece counts the UTF-8 bytes of
 * its span of the text it encoded; of a CaseOps text, less the operator characters, which stand
 * for no original byte (an operator character of the original text, behind ESC, counts its 3
 * bytes). */
static void original_byte_counts(const char *text, size_t len, int caseops, const SpmEncodeBuffer *buf, int64_t n,
                                 uint16_t *counts) {
    /* weight[i]: does byte i of the encoded text stand for a byte of the original? As a prefix
     * sum, so that each piece's span costs two lookups. */
    int64_t *before = ct_malloc((len + 1) * sizeof(int64_t), "byte weights");
    const unsigned char *s = (const unsigned char *)text;
    int escaped = 0;
    before[0] = 0;
    for (size_t i = 0; i < len;) {
        const int op = caseops && i + 2 < len && s[i] == 0xEE && s[i + 1] == 0x80 && s[i + 2] >= 0x81 &&
                       s[i + 2] <= 0x84; /* U+E001..U+E004 */
        if (op) {
            const int w = escaped; /* a literal operator character: 3 bytes of the original */
            escaped = !escaped && s[i + 2] == 0x84;
            for (int k = 0; k < 3; k++, i++) before[i + 1] = before[i] + w;
        } else {
            escaped = 0;
            before[i + 1] = before[i] + 1;
            i++;
        }
    }
    for (int64_t p = 0; p < n; p++) {
        const size_t b = buf->begin[p] < len ? buf->begin[p] : len, e = buf->end[p] < len ? buf->end[p] : len;
        const int64_t c = e > b ? before[e] - before[b] : 0;
        counts[p] = (uint16_t)(c > UINT16_MAX ? UINT16_MAX : c);
    }
    free(before);
}

/* Encode one document into item (item->error set on failure). */
static void encode_item(const TokenizeRequest *req, const DocReader *reader, const SpmEncoder *enc, int64_t bos_id,
                        Item *item, SpmEncodeBuffer *buf) {
    char where[4300];
    const char *text = item->doc.text;
    size_t len = item->doc.len, first = 0;
    char *replaced = NULL, *transformed = NULL;
    int64_t bad = count_invalid(text, len, &first);
    if (bad > 0 && !req->replace_invalid) {
        describe_doc(reader, &item->doc, where, sizeof where);
        char msg[4600];
        snprintf(msg, sizeof msg, "%s is not valid UTF-8: its byte %zu (0x%02X) starts no character (%lld such bytes "
                 "in it); fix the input or give --replace-invalid to write each as U+FFFD", where, first,
                 (unsigned)(unsigned char)text[first], (long long)bad);
        item->error = ct_strdup(msg);
        return;
    }
    if (bad > 0) {
        text = replaced = replace_invalid(text, len, &len);
        item->replaced = bad;
    }
    const int want_counts = (req->caseops || req->byte_counts) && item->is_val;
    if (req->caseops) {
        text = transformed = caseops_encode(text);
        len = strlen(transformed);
    }
    int64_t n = 0;
    if (spm_encoder_encode(enc, text, len, want_counts, buf, &n) != 0) {
        describe_doc(reader, &item->doc, where, sizeof where);
        char msg[5000];
        snprintf(msg, sizeof msg, "%s: %s", where, ct_error());
        item->error = ct_strdup(msg);
    } else {
        item->n = n + 1;
        item->ids = ct_malloc((size_t)item->n * sizeof(uint32_t), "document ids");
        item->ids[0] = (uint32_t)bos_id;
        for (int64_t i = 0; i < n; i++) item->ids[i + 1] = (uint32_t)buf->ids[i];
        if (want_counts) {
            item->counts = ct_malloc((size_t)item->n * sizeof(uint16_t), "document byte counts");
            item->counts[0] = 0; /* BOS stands for no text */
            original_byte_counts(text, len, req->caseops, buf, n, item->counts + 1);
        }
    }
    free(replaced);
    free(transformed);
}

/* ---- progress ---- */

typedef struct {
    int tty;
    double start_ms, last_ms;
    int drawn;
} ProgressLine;

static void human(double v, char *buf, size_t cap) {
    if (v >= 1e9) snprintf(buf, cap, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, cap, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, cap, "%.1fk", v / 1e3);
    else snprintf(buf, cap, "%.0f", v);
}

/* "tokenize: 12000 documents, 3.40M tokens, 1.10M tokens/s, 35% of 120.00M bytes, ETA 1m05s".
 * On a terminal it is redrawn in place every second; elsewhere (a batch job's log) a line is
 * written every 30 s, and always one at the end (final). */
static void progress_report(ProgressLine *p, const TokenizeSummary *s, int64_t done_bytes, int64_t total_bytes,
                            int final) {
    const double now = ct_now_ms();
    if (!final && now - p->last_ms < (p->tty ? 1000.0 : 30000.0)) return;
    p->last_ms = now;
    const double secs = (now - p->start_ms) / 1000.0;
    const int64_t tokens = s->train_tokens + s->val_tokens;
    char tok[32], rate[32], line[256];
    human((double)tokens, tok, sizeof tok);
    human(secs > 0 ? (double)tokens / secs : 0, rate, sizeof rate);
    int k = snprintf(line, sizeof line, "tokenize: %lld documents, %s tokens, %s tokens/s", (long long)s->docs, tok,
                     rate);
    if (total_bytes > 0 && k > 0 && (size_t)k < sizeof line) {
        char total[32];
        human((double)total_bytes, total, sizeof total);
        const double frac = done_bytes <= 0 ? 0.0 : (double)done_bytes / (double)total_bytes; /* a part: skipping */
        k += snprintf(line + k, sizeof line - (size_t)k, ", %.0f%% of %s bytes", 100.0 * frac, total);
        if (!final && frac > 0.001 && (size_t)k < sizeof line) {
            const double eta = secs * (1.0 - frac) / frac;
            snprintf(line + k, sizeof line - (size_t)k, ", ETA %dm%02ds", (int)(eta / 60), (int)eta % 60);
        }
    }
    if (p->tty) fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    else fprintf(stderr, "%s\n", line);
    fflush(stderr);
    p->drawn = !final;
}

/* ---- tokenize_corpus: batches, read ahead ---- */

/* Refuse an output directory that holds a shard (or a temporary one) this run could write or
 * that would mix with its shards: "train_..." and "val_..." files, of this part or unparted. */
static int check_out_dir(const TokenizeRequest *req, const char *train_prefix, const char *val_prefix) {
    DIR *d = opendir(req->out_dir);
    if (!d) return errno == ENOENT ? 0 : ct_fail("cannot read --out '%s': %s", req->out_dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        const char *rest = !strncmp(name, "train_", 6) ? name + 6 : !strncmp(name, "val_", 4) ? name + 4 : NULL;
        if (!rest) continue;
        const int ours = req->num_parts == 1 || !strncmp(name, train_prefix, strlen(train_prefix)) ||
                         !strncmp(name, val_prefix, strlen(val_prefix)) || (rest[0] >= '0' && rest[0] <= '9') ||
                         !strncmp(rest, "bytes_", 6);
        if (ours)
            rc = ct_fail("--out '%s' already holds '%s' (from an earlier run?): data tokenize writes new shards only "
                         "and never over a file; remove the old shards or give another --out", req->out_dir, name);
    }
    closedir(d);
    return rc;
}

static void free_batch(Item *items, int n) {
    if (!items) return;
    for (int i = 0; i < n; i++) {
        free(items[i].doc.text);
        free(items[i].ids);
        free(items[i].counts);
        free(items[i].error);
    }
    memset(items, 0, (size_t)n * sizeof *items);
}

/* A batch of documents, read on a thread of its own while the batch before it is encoded: the
 * reading (and JSON parsing) then costs no time of the encoding threads. */
typedef struct {
    DocReader *reader;
    int64_t val_docs;
    Item *items;
    int cap, n;
    int more;           /* 0 once the inputs are exhausted (or reading failed) */
    size_t max_bytes;   /* a batch ends at this much text (or cap documents) */
    int64_t bytes_read; /* the reader's count after this batch */
    char *error;        /* why reading failed: the reader thread's ct_error() */
} Batch;

static void *read_batch(void *arg) {
    Batch *b = arg;
    size_t bytes = 0;
    b->n = 0;
    b->more = 1;
    while (b->n < b->cap && bytes < b->max_bytes) {
        Item *it = &b->items[b->n];
        const int got = doc_reader_next(b->reader, &it->doc);
        if (got < 0) b->error = ct_strdup(ct_error());
        if (got <= 0) {
            b->more = 0;
            break;
        }
        it->is_val = it->doc.index < b->val_docs;
        bytes += it->doc.len;
        b->n++;
    }
    b->bytes_read = doc_reader_bytes_read(b->reader);
    return NULL;
}

int tokenize_corpus(const TokenizeRequest *req, TokenizeSummary *summary) {
    memset(summary, 0, sizeof *summary);
    const double start = ct_now_ms();
    SpmTokenizer tok = {0};
    SpmEncoder *enc = NULL;
    DocReader *reader = NULL;
    ShardStream train = {0}, val = {0};
    Batch batches[2] = {{0}};
    SpmEncodeBuffer *bufs = NULL;
    pthread_t reading_thread;
    int reading = 0, rc = -1, threads = req->threads;
    char part[32] = "";
    if (req->num_parts > 1) snprintf(part, sizeof part, "p%03dof%03d_", req->part, req->num_parts);

    if (spm_tokenizer_load(req->model_path, &tok) != 0 || spm_encoder_open(req->model_path, &enc) != 0) goto done;
    const int64_t bos_id = spm_encoder_bos_id(enc);
    if (bos_id < 0) {
        ct_fail("SentencePiece model '%s' has no BOS piece (<s>): each document starts with BOS; train the model "
                "with bos_id set", req->model_path);
        goto done;
    }
    if (req->caseops && !caseops_pieces(&tok.pieces)) {
        ct_fail("--caseops: SentencePiece model '%s' does not hold the four CaseOps operators U+E001..U+E004 as "
                "pieces (train it with them as user_defined_symbols)", req->model_path);
        goto done;
    }
    if (req->format_bin && tok.vocab_size > 65536) {
        ct_fail("--format bin: SentencePiece model '%s' has %lld pieces, but .bin shards hold uint16 tokens (at most "
                "65536 ids)", req->model_path, (long long)tok.vocab_size);
        goto done;
    }
    for (int i = 0; i < 2; i++) {
        ShardStream *s = i == 0 ? &train : &val;
        s->req = req;
        s->split = i == 0 ? "train" : "val";
        snprintf(s->prefix, sizeof s->prefix, "%s_%s", s->split, part);
        s->token_bytes = tok.vocab_size <= 65536 ? 2 : 4;
        s->with_counts = i == 1 && (req->caseops || req->byte_counts);
        s->vocab_size = tok.vocab_size;
        s->bos_id = bos_id;
        s->tok = &tok;
    }
    if (check_out_dir(req, train.prefix, val.prefix) != 0 || ct_mkdir_p(req->out_dir) != 0) goto done;

    reader = doc_reader_create(req->inputs, req->num_inputs, req->format, req->doc_per_line);
    int64_t total_bytes = doc_reader_total_bytes(reader), range_begin = 0, range_end = total_bytes;
    if (req->num_parts > 1) {
        if (total_bytes < 0) { /* a part is placed by the inputs' sizes: this fails naming the input */
            doc_reader_set_range(reader, 0, 0);
            ct_fail_prefix("--part %d/%d", req->part, req->num_parts);
            goto done;
        }
        range_begin = (int64_t)((__int128)total_bytes * (req->part - 1) / req->num_parts);
        range_end = (int64_t)((__int128)total_bytes * req->part / req->num_parts);
        if (doc_reader_set_range(reader, range_begin, range_end) != 0) goto done;
    }
    for (int i = 0; i < 2; i++) {
        Batch *b = &batches[i];
        b->reader = reader;
        b->val_docs = req->val_docs;
        const int scale = threads < BATCH_THREADS ? threads : BATCH_THREADS;
        b->cap = BATCH_DOCS_PER_THREAD * scale;
        b->max_bytes = BATCH_BYTES_PER_THREAD * (size_t)scale;
        b->items = ct_calloc((size_t)b->cap, sizeof *b->items, "document batch");
    }
    bufs = ct_calloc((size_t)threads, sizeof *bufs, "encode buffers");
    ProgressLine progress = {.tty = ct_stderr_is_tty(), .start_ms = start, .last_ms = start};
    read_batch(&batches[0]);
    for (int cur = 0;; cur = 1 - cur) {
        Batch *b = &batches[cur], *next = &batches[1 - cur];
        if (b->error) {
            ct_fail("%s", b->error);
            goto done;
        }
        /* read the next batch meanwhile (on this thread, should no thread start) */
        if (b->more) reading = pthread_create(&reading_thread, NULL, read_batch, next) == 0;
        if (b->more && !reading) read_batch(next);
        /* encode this one: each document on its own, any thread */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
        for (int i = 0; i < b->n; i++)
            encode_item(req, reader, enc, bos_id, &b->items[i], &bufs[omp_get_thread_num()]);
        /* write it, in corpus order */
        const int64_t tokens_before = train.tokens + val.tokens;
        for (int i = 0; i < b->n; i++) {
            Item *it = &b->items[i];
            if (it->error) {
                ct_fail("%s", it->error);
                goto done;
            }
            if (stream_append(it->is_val ? &val : &train, it->ids, it->counts, it->n) != 0) goto done;
            summary->docs++;
            summary->val_docs += it->is_val;
            summary->replaced_docs += it->replaced > 0;
            summary->replaced_bytes += it->replaced;
            summary->train_tokens = train.tokens;
            summary->val_tokens = val.tokens;
        }
        free_batch(b->items, b->n);
        b->n = 0;
        if (reading) pthread_join(reading_thread, NULL);
        reading = 0;
        fault_point_import(tokens_before, train.tokens + val.tokens); /* CTRAIN_FAULT=TERM@import:N (tokens) */
        progress_report(&progress, summary, (b->more ? next : b)->bytes_read - range_begin, range_end - range_begin, 0);
        if (stop_requested()) {
            ct_fail("data tokenize stopped by signal %d after %lld documents", stop_requested(),
                    (long long)summary->docs);
            goto done;
        }
        if (!b->more) break;
    }
    if (summary->docs == 0 && req->num_parts == 1) {
        ct_fail("the inputs hold no documents (empty files, or only blank lines)");
        goto done;
    }
    if (stream_finish(&val) != 0 || stream_finish(&train) != 0) goto done;
    summary->train_shards = train.index;
    summary->val_shards = val.index;
    progress_report(&progress, summary, range_end - range_begin, range_end - range_begin, 1);
    rc = 0;
done:
    if (reading) pthread_join(reading_thread, NULL);
    for (int i = 0; i < 2; i++) {
        free_batch(batches[i].items, batches[i].n);
        free(batches[i].items);
        free(batches[i].error);
    }
    if (rc != 0) { /* no shard of a failed run stays: it would pass for a whole data set */
        int removed = train.num_done + val.num_done;
        if (removed > 0) {
            char msg[64];
            snprintf(msg, sizeof msg, "; the %d shard file%s written before it removed", removed,
                     removed == 1 ? "" : "s");
            const char *why = ct_error();
            char *keep = ct_strdup(why);
            ct_fail("%s%s", keep, msg);
            free(keep);
        }
    }
    stream_discard(&train, rc != 0);
    stream_discard(&val, rc != 0);
    if (bufs)
        for (int t = 0; t < threads; t++) spm_encode_buffer_free(&bufs[t]);
    free(bufs);
    doc_reader_free(reader);
    spm_encoder_free(enc);
    spm_tokenizer_free(&tok);
    summary->seconds = (ct_now_ms() - start) / 1000.0;
    return rc;
}
