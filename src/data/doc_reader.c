/* doc_reader.c — a corpus's documents one after another (doc_reader.h): lines read with getline,
 * JSONL lines parsed by cJSON (Debian's libcjson), whole files read into one buffer. */
#include "doc_reader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

#ifdef CT_HAVE_CJSON
#include <cJSON.h>
#endif

struct DocReader {
    char *const *inputs;
    int num_inputs, per_line;
    DocFormat format;
    int current;       /* input being read; num_inputs when done */
    FILE *f;           /* open input, or NULL between inputs */
    DocFormat current_format;
    int64_t line, offset, bytes_read, total_bytes;
    char *buf;         /* getline's buffer */
    size_t cap;
    int64_t docs;      /* documents met so far, read or skipped */
    int64_t input_base; /* where the current input starts in the inputs as one stream */
    int64_t range_begin, range_end; /* doc_reader_set_range's; 0, INT64_MAX: everything */
};

static int is_stdin(const char *input) { return strcmp(input, "-") == 0; }

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

DocReader *doc_reader_create(char *const *inputs, int num_inputs, DocFormat format, int per_line) {
    DocReader *r = ct_calloc(1, sizeof *r, "document reader");
    r->inputs = inputs;
    r->num_inputs = num_inputs;
    r->format = format;
    r->per_line = per_line;
    r->current = -1;
    r->range_end = INT64_MAX;
    for (int i = 0; i < num_inputs && r->total_bytes >= 0; i++) {
        struct stat st;
        if (is_stdin(inputs[i]) || stat(inputs[i], &st) != 0 || !S_ISREG(st.st_mode)) r->total_bytes = -1;
        else r->total_bytes += st.st_size;
    }
    return r;
}

const char *doc_reader_input_name(const DocReader *r, int input) {
    return is_stdin(r->inputs[input]) ? "standard input" : r->inputs[input];
}

int64_t doc_reader_bytes_read(const DocReader *r) { return r->bytes_read; }

int doc_reader_set_range(DocReader *r, int64_t begin, int64_t end) {
    if (r->total_bytes < 0)
        for (int i = 0; i < r->num_inputs; i++) {
            struct stat st;
            if (is_stdin(r->inputs[i]) || stat(r->inputs[i], &st) != 0 || !S_ISREG(st.st_mode))
                return ct_fail("input '%s' is not a regular file: a part of the inputs is placed by their sizes, "
                               "which only regular files have", doc_reader_input_name(r, i));
        }
    r->range_begin = begin;
    r->range_end = end;
    return 0;
}
int64_t doc_reader_total_bytes(const DocReader *r) { return r->total_bytes; }

/* Open the next input; 0 at the end of the inputs (r->f NULL), -1 on error. */
static int open_next(DocReader *r) {
    if (r->f && r->f != stdin) fclose(r->f);
    r->f = NULL;
    r->input_base = r->bytes_read;
    if (r->current >= r->num_inputs || ++r->current >= r->num_inputs) return 0;
    const char *input = r->inputs[r->current];
    if (is_stdin(input)) {
        r->f = stdin;
    } else {
        struct stat st;
        if (stat(input, &st) == 0 && S_ISDIR(st.st_mode)) return ct_fail("input '%s' is a directory", input);
        if (!(r->f = fopen(input, "rb"))) return ct_fail("cannot open input '%s': %s", input, strerror(errno));
    }
    r->current_format = r->format != DOC_FORMAT_AUTO ? r->format
                        : !is_stdin(input) && (ends_with(input, ".jsonl") || ends_with(input, ".json"))
                            ? DOC_FORMAT_JSONL
                            : DOC_FORMAT_TEXT;
    r->line = 0;
    r->offset = 0;
    return 0;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

/* A JSONL line's "text" as a new document. */
#ifndef CT_HAVE_CJSON
static int parse_json_line(DocReader *r, size_t n, Doc *doc) {
    (void)n, (void)doc;
    return ct_fail("cannot read JSONL input '%s': this ctrain was built without cJSON; install it (Debian: apt-get "
                   "install libcjson-dev, or run scripts/install-deps.sh) and rebuild with make",
                   doc_reader_input_name(r, r->current));
}
#else
/* The length of a line's decoded "text" (the item at the same place in obj). cJSON ends its
 * strings at a NUL, while a line may put one in "text" (a raw byte or \u0000): strlen would drop
 * the rest of the document without a word. The same line with each such NUL made 0x01 decodes
 * to as many bytes and none of them NUL, so its strlen is the length; the NULs, kept, then meet
 * the UTF-8 check as in text inputs (an error, or U+FFFD with --replace-invalid). */
static size_t json_text_length(const char *line, size_t n, const cJSON *obj, const cJSON *text) {
    int nuls = 0;
    for (size_t i = 0; i < n && !nuls; i++)
        nuls = line[i] == '\0' || (line[i] == '\\' && i + 6 <= n && !memcmp(line + i + 1, "u0000", 5));
    if (!nuls) return strlen(text->valuestring);
    char *copy = ct_malloc(n + 1, "JSON line");
    memcpy(copy, line, n);
    copy[n] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (copy[i] == '\0') copy[i] = '\1';
        else if (copy[i] == '\\' && i + 6 <= n && !memcmp(copy + i + 1, "u0000", 5)) copy[i + 5] = '1';
        if (copy[i] == '\\') i++; /* an escaped character is not the start of another escape */
    }
    cJSON *again = cJSON_ParseWithLength(copy, n);
    const cJSON *a = again ? again->child : NULL;
    for (const cJSON *o = obj->child; a && o && o != text; o = o->next) a = a->next;
    const size_t len = a && cJSON_IsString(a) && a->valuestring ? strlen(a->valuestring) : strlen(text->valuestring);
    cJSON_Delete(again);
    free(copy);
    return len;
}

static int parse_json_line(DocReader *r, size_t n, Doc *doc) {
    const char *name = doc_reader_input_name(r, r->current);
    cJSON *obj = cJSON_ParseWithLength(r->buf, n);
    if (!obj) {
        const char *at = cJSON_GetErrorPtr();
        long col = at && at >= r->buf && at <= r->buf + n ? (long)(at - r->buf) + 1 : 0;
        return ct_fail("'%s' line %lld is not JSON (cJSON stops at byte %ld of the line); expected an object with a "
                       "\"text\" string per line", name, (long long)r->line, col);
    }
    const cJSON *text = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, "text") : NULL;
    int rc = 0;
    if (!cJSON_IsObject(obj))
        rc = ct_fail("'%s' line %lld is JSON but not an object; expected {\"text\": \"...\"}", name,
                     (long long)r->line);
    else if (!text)
        rc = ct_fail("'%s' line %lld has no \"text\" field; each line must be an object with a \"text\" string",
                     name, (long long)r->line);
    else if (!cJSON_IsString(text) || !text->valuestring)
        rc = ct_fail("'%s' line %lld: \"text\" is not a string", name, (long long)r->line);
    if (rc == 0) {
        doc->len = json_text_length(r->buf, n, obj, text);
        doc->text = ct_malloc(doc->len + 1, "document");
        memcpy(doc->text, text->valuestring, doc->len + 1);
    }
    cJSON_Delete(obj);
    return rc;
}
#endif

/* The whole of the current input as one document (its length may be 0). */
static int read_whole(DocReader *r, Doc *doc) {
    size_t len = 0, cap = 1 << 16;
    char *text = ct_malloc(cap, "document");
    size_t got;
    while ((got = fread(text + len, 1, cap - 1 - len, r->f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            cap *= 2;
            char *bigger = realloc(text, cap);
            if (!bigger) {
                free(text);
                return ct_fail("out of memory reading '%s' (%zu bytes so far)", doc_reader_input_name(r, r->current),
                               len);
            }
            text = bigger;
        }
    }
    if (ferror(r->f)) {
        free(text);
        return ct_fail("cannot read '%s': %s", doc_reader_input_name(r, r->current), strerror(errno));
    }
    text[len] = '\0';
    r->bytes_read += (int64_t)len;
    doc->text = text;
    doc->len = len;
    doc->line = 0;
    doc->offset = 0;
    return 1;
}

/* The range is over: nothing more is read. */
static int finish_range(DocReader *r) {
    if (r->f && r->f != stdin) fclose(r->f);
    r->f = NULL;
    r->current = r->num_inputs;
    return 0;
}

int doc_reader_next(DocReader *r, Doc *doc) {
    memset(doc, 0, sizeof *doc);
    for (;;) {
        if (!r->f) {
            if (open_next(r) != 0) return -1;
            if (!r->f) return 0;
            if (r->current_format == DOC_FORMAT_TEXT && !r->per_line) {
                if (r->input_base >= r->range_end) return finish_range(r);
                if (r->input_base < r->range_begin) { /* before the range: counted (when not empty), not read */
                    struct stat st;
                    if (fstat(fileno(r->f), &st) != 0) return ct_fail("cannot read input '%s': %s",
                                                                      r->inputs[r->current], strerror(errno));
                    if (st.st_size > 0) r->docs++;
                    r->bytes_read += st.st_size;
                    fclose(r->f);
                    r->f = NULL;
                    continue;
                }
                doc->input = r->current;
                if (read_whole(r, doc) < 0) return -1;
                if (r->f != stdin) fclose(r->f);
                r->f = NULL;
                if (doc->len > 0) {
                    doc->index = r->docs++;
                    return 1;
                }
                free(doc->text); /* an empty file holds no document */
                doc->text = NULL;
                continue;
            }
        }
        errno = 0;
        ssize_t n = getline(&r->buf, &r->cap, r->f);
        if (n < 0) {
            if (ferror(r->f))
                return ct_fail("cannot read '%s' after line %lld: %s", doc_reader_input_name(r, r->current),
                               (long long)r->line, strerror(errno));
            if (r->f != stdin) fclose(r->f);
            r->f = NULL;
            continue;
        }
        const int64_t offset = r->offset;
        r->line++;
        r->offset += n;
        r->bytes_read += n;
        if (blank(r->buf, (size_t)n)) continue;
        const int64_t at = r->input_base + offset;
        if (at >= r->range_end) return finish_range(r);
        if (at < r->range_begin) { /* before the range: counted, not parsed */
            r->docs++;
            continue;
        }
        doc->index = r->docs++;
        doc->input = r->current;
        doc->line = r->line;
        doc->offset = offset;
        if (r->current_format == DOC_FORMAT_JSONL) return parse_json_line(r, (size_t)n, doc) == 0 ? 1 : -1;
        size_t len = (size_t)n; /* a text line: without its line end */
        if (len > 0 && r->buf[len - 1] == '\n') len--;
        if (len > 0 && r->buf[len - 1] == '\r') len--;
        doc->text = ct_malloc(len + 1, "document");
        memcpy(doc->text, r->buf, len);
        doc->text[len] = '\0';
        doc->len = len;
        return 1;
    }
}

void doc_reader_free(DocReader *r) {
    if (!r) return;
    if (r->f && r->f != stdin) fclose(r->f);
    free(r->buf);
    free(r);
}
