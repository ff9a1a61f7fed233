/* doc_reader.h — the documents of a corpus, one after another, for `ctrain data tokenize`
 * (tokenize.h): JSONL files whose lines are objects with a "text" string (FineWeb's
 * docs_selected.jsonl; parsed with cJSON), or plain text files, each one document or, with
 * per_line, one document per line; "-" is standard input. Lines with nothing but white space
 * are skipped in JSONL and in per-line text (as the record's script skips them); a whole-file
 * document is taken as it is, empty lines and all. doc_reader.c. */
#ifndef CT_DOC_READER_H
#define CT_DOC_READER_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DOC_FORMAT_AUTO,  /* JSONL for a name ending in .jsonl or .json, else text ("-": text) */
    DOC_FORMAT_JSONL,
    DOC_FORMAT_TEXT,
} DocFormat;

typedef struct {
    char *text;          /* len bytes of UTF-8 (not checked here), NUL-ended; the caller owns it */
    size_t len;
    int input;           /* index of the input it came from */
    int64_t line;        /* its line in that input (1-based); 0 for a whole-file document */
    int64_t offset;      /* its first byte's offset in the input */
    int64_t index;       /* its number in the corpus (0-based), counting the documents a range skips */
} Doc;

typedef struct DocReader DocReader;

/* inputs must outlive the reader. Nothing is opened until the first doc_reader_next. */
DocReader *doc_reader_create(char *const *inputs, int num_inputs, DocFormat format, int per_line);
/* Read only the documents whose first byte lies in [begin, end) of the inputs taken as one
 * stream (a whole-file document starts at its file's first byte): the others are counted (Doc's
 * index) but not parsed. The inputs must be regular files (their sizes place the range). Call
 * before the first doc_reader_next. */
int doc_reader_set_range(DocReader *r, int64_t begin, int64_t end);
/* The next document: 1 with *doc filled, 0 at the end of the last input, -1 with ct_error() naming
 * the file and line (a line that is not JSON, has no "text" string, a read error). */
int doc_reader_next(DocReader *r, Doc *doc);
/* Bytes of input consumed so far, and the sum of the inputs' sizes (-1 when one is not a
 * regular file: standard input, a pipe). */
int64_t doc_reader_bytes_read(const DocReader *r);
int64_t doc_reader_total_bytes(const DocReader *r);
/* The name of input i as the user gave it ("standard input" for "-"). */
const char *doc_reader_input_name(const DocReader *r, int input);
void doc_reader_free(DocReader *r);

#endif
