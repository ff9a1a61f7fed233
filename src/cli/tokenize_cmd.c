/* tokenize_cmd.c — `ctrain data tokenize`: a corpus (JSONL, text files, standard input) into
 * training and validation shards with a SentencePiece model; its arguments, checks and what it
 * prints (the work is src/data/tokenize.c's). And `ctrain data detokenize`, the way back: a
 * split's tokens as text, one document per BOS, with the pieces its files store. Exit codes: 0
 * success, 1 bad input or I/O failure, 2 usage error, 75 stopped by a signal (nothing kept: run
 * it again). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "common.h"
#include "data.h"
#include "stop.h"
#include "tokenize.h"
#include "tokenizer.h"

#ifdef CT_HAVE_CJSON
#include <cJSON.h>
#endif

static const char TOKENIZE_USAGE[] =
    "usage: ctrain data tokenize --tokenizer MODEL.model --out DIR [options] INPUT...\n"
    "\n"
    "Tokenize a corpus with a SentencePiece model into shards ctrain trains on: each document is\n"
    "BOS then its tokens (the model's <s>, recorded as bos_id); the first --val-docs documents go\n"
    "to validation (DIR/val_000000.h5, ...), the rest to training (DIR/train_000000.h5, ...).\n"
    "HDF5 shards carry the tokenizer's bits-per-byte tables and pieces, tokens_crc32 and a\n"
    "provenance attribute. A shard is written under a temporary name and renamed when complete;\n"
    "on an error nothing of the run is kept. The output is the same bits for any --threads.\n"
    "\n"
    "inputs:\n"
    "  FILE.jsonl / FILE.json   one JSON object per line with a \"text\" string (FineWeb's\n"
    "                           docs_selected.jsonl); blank lines are skipped\n"
    "  FILE (any other name)    plain text: the whole file is one document (an empty file none),\n"
    "                           or one document per non-blank line with --doc-per-line\n"
    "  -                        standard input, as text (or JSONL with --input-format jsonl)\n"
    "  (a file given twice, by any spelling or link, is refused: its documents would be in both\n"
    "  splits)\n"
    "\n"
    "options:\n"
    "  --tokenizer MODEL.model  the SentencePiece model (it must have a BOS piece)\n"
    "  --out DIR                the output directory (created if needed); it must not hold\n"
    "                           shards of these names yet: tokenize never writes over a file\n"
    "  --val-docs N             the corpus's first N documents go to validation (default 0)\n"
    "  --shard-tokens N         tokens per shard (default 10000000, the record's); the last shard\n"
    "                           of each split is shorter; a document may span two shards\n"
    "  --format hdf5|bin        HDF5 data files (default) or parameter-golf .bin shards (uint16,\n"
    "                           1024-byte header): train_000000.bin, val_000000.bin\n"
    "  --input-format auto|jsonl|text\n"
    "                           how to read the inputs (default auto: JSONL for names ending in\n"
    "                           .jsonl or .json, text otherwise)\n"
    "  --doc-per-line           text inputs hold one document per line (the line end is not\n"
    "                           part of it; blank lines are skipped)\n"
    "  --threads N              threads that encode documents (default: every core)\n"
    "  --replace-invalid        write each byte of invalid UTF-8 (or NUL) as U+FFFD and count\n"
    "                           them, instead of stopping at the first such document\n"
    "  --caseops                the CaseOps transform (capitals as operators U+E001..U+E004, the\n"
    "                           1.0611 record's) before encoding, for a model holding them as\n"
    "                           pieces; validation shards get each token's original byte count\n"
    "                           (/bytes_per_token; .bin: val_bytes_000000.bin) for val_bpb\n"
    "  --byte-counts            validation shards get each token's count of original UTF-8 bytes\n"
    "                           without a transform too (the bytes of its span of the text;\n"
    "                           what val_bpb then counts instead of the tokenizer tables, which\n"
    "                           count the normalized text)\n"
    "  --part I/N               process part I of N of the inputs (split by bytes at document\n"
    "                           starts; a Slurm array task each): shards named\n"
    "                           train_pIIIofNNN_000000.h5; the parts' shards in name order hold\n"
    "                           the tokens of a single run (the first --val-docs documents of the\n"
    "                           whole corpus are validation, whichever part reads them)\n"
    "  -h, --help               show this help\n";

/* "I/N" with 1 <= I <= N <= 999. */
static int parse_part(const char *text, int *part, int *num_parts) {
    char *slash = strchr(text, '/');
    if (!slash) return -1;
    char left[32];
    size_t k = (size_t)(slash - text);
    if (k == 0 || k >= sizeof left) return -1;
    memcpy(left, text, k);
    left[k] = '\0';
    int64_t i, n;
    if (ct_parse_int64(left, &i) != 0 || ct_parse_int64(slash + 1, &n) != 0 || n < 1 || n > 999 || i < 1 || i > n)
        return -1;
    *part = (int)i;
    *num_parts = (int)n;
    return 0;
}

/* The index of the earliest input that names the same file as one before it (by device and
 * inode: another spelling or a link too), that one's index in *first; -1 when none does. Files
 * that cannot be stat'ed are left to the reader's error. */
typedef struct {
    dev_t dev;
    ino_t ino;
    int index;
} InputId;

static int by_identity(const void *a, const void *b) {
    const InputId *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return x->index - y->index;
}

static int repeated_input(char **inputs, int num_inputs, int *first) {
    InputId *ids = ct_malloc((size_t)num_inputs * sizeof *ids + 1, "input identities");
    int n = 0, repeat = -1;
    for (int i = 0; i < num_inputs; i++) {
        struct stat st;
        if (strcmp(inputs[i], "-") && stat(inputs[i], &st) == 0) ids[n++] = (InputId){st.st_dev, st.st_ino, i};
    }
    qsort(ids, (size_t)n, sizeof *ids, by_identity);
    for (int k = 1; k < n; k++) /* in a run of one file, by index: each entry repeats the one before it */
        if (ids[k].dev == ids[k - 1].dev && ids[k].ino == ids[k - 1].ino && (repeat < 0 || ids[k].index < repeat))
            repeat = ids[k].index, *first = ids[k - 1].index;
    free(ids);
    return repeat;
}

/* What made the shards, for their provenance attribute. */
static char *provenance_text(const TokenizeRequest *r) {
    char head[1024];
    snprintf(head, sizeof head, "ctrain %s data tokenize --tokenizer %s --val-docs %lld --shard-tokens %lld%s%s%s%s",
             CT_VERSION, r->model_path, (long long)r->val_docs, (long long)r->shard_tokens,
             r->doc_per_line ? " --doc-per-line" : "", r->caseops ? " --caseops" : "",
             r->byte_counts ? " --byte-counts" : "", r->replace_invalid ? " --replace-invalid" : "");
    size_t cap = strlen(head) + 64, len;
    for (int i = 0; i < r->num_inputs && i < 16; i++) cap += strlen(r->inputs[i]) + 1;
    char *out = ct_malloc(cap, "provenance");
    len = (size_t)snprintf(out, cap, "%s", head);
    if (r->num_parts > 1) len += (size_t)snprintf(out + len, cap - len, " --part %d/%d", r->part, r->num_parts);
    for (int i = 0; i < r->num_inputs && i < 16; i++)
        len += (size_t)snprintf(out + len, cap - len, " %s", r->inputs[i]);
    if (r->num_inputs > 16) snprintf(out + len, cap - len, " (and %d more inputs)", r->num_inputs - 16);
    return out;
}

int data_tokenize_main(int argc, char **argv) {
    const char *model = NULL, *out = NULL, *val_text = "0", *shard_text = "10000000", *format = "hdf5";
    const char *input_format = "auto", *threads_text = NULL, *part_text = NULL;
    int per_line = 0, replace = 0, caseops = 0, byte_counts = 0;
    const CliOption options[] = {{"--tokenizer", &model, NULL},       {"--out", &out, NULL},
                                 {"--val-docs", &val_text, NULL},     {"--shard-tokens", &shard_text, NULL},
                                 {"--format", &format, NULL},         {"--input-format", &input_format, NULL},
                                 {"--threads", &threads_text, NULL},  {"--part", &part_text, NULL},
                                 {"--doc-per-line", NULL, &per_line}, {"--replace-invalid", NULL, &replace},
                                 {"--caseops", NULL, &caseops},       {"--byte-counts", NULL, &byte_counts}};
    char **inputs;
    int num_inputs, rc = cli_parse("data", argc, argv, TOKENIZE_USAGE, options, 12, &inputs, &num_inputs);
    if (rc != 0) {
        free(inputs);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    const char *cmd = "tokenize";
    TokenizeRequest r = {.inputs = inputs, .num_inputs = num_inputs, .doc_per_line = per_line,
                         .replace_invalid = replace, .caseops = caseops, .byte_counts = byte_counts,
                         .part = 1, .num_parts = 1, .model_path = model, .out_dir = out};
    char *provenance = NULL;
    int64_t value;
    rc = CT_EXIT_USAGE;
    if (num_inputs == 0) {
        cli_usage_error("data", cmd, "no inputs given (JSONL or text files, or - for standard input)");
        goto done;
    }
    if (!model || !out) {
        cli_usage_error("data", cmd, "%s is required", !model ? "--tokenizer MODEL.model" : "--out DIR");
        goto done;
    }
    if (ct_parse_int64(val_text, &value) != 0 || value < 0) {
        cli_usage_error("data", cmd, "--val-docs '%s' is not a count of documents (an integer >= 0)", val_text);
        goto done;
    }
    r.val_docs = value;
    if (!strcmp(format, "bin")) r.format_bin = 1;
    else if (strcmp(format, "hdf5") != 0) {
        cli_usage_error("data", cmd, "--format '%s' is not hdf5 or bin", format);
        goto done;
    }
    const int64_t max_shard = r.format_bin ? INT32_MAX : ((int64_t)1 << 40);
    if (ct_parse_int64(shard_text, &value) != 0 || value < 1 || value > max_shard) {
        cli_usage_error("data", cmd, "--shard-tokens '%s' is not an integer in 1..%lld", shard_text,
                        (long long)max_shard);
        goto done;
    }
    r.shard_tokens = value;
    if (!strcmp(input_format, "auto")) r.format = DOC_FORMAT_AUTO;
    else if (!strcmp(input_format, "jsonl")) r.format = DOC_FORMAT_JSONL;
    else if (!strcmp(input_format, "text")) r.format = DOC_FORMAT_TEXT;
    else {
        cli_usage_error("data", cmd, "--input-format '%s' is not auto, jsonl or text", input_format);
        goto done;
    }
    r.threads = omp_get_num_procs();
    if (threads_text && (ct_parse_int64(threads_text, &value) != 0 || value < 1 || value > 4096)) {
        cli_usage_error("data", cmd, "--threads '%s' is not an integer in 1..4096", threads_text);
        goto done;
    }
    if (threads_text) r.threads = (int)value;
    if (part_text && parse_part(part_text, &r.part, &r.num_parts) != 0) {
        cli_usage_error("data", cmd, "--part '%s' is not I/N with 1 <= I <= N <= 999 (e.g. 2/8; in a Slurm array: "
                        "--part $((SLURM_ARRAY_TASK_ID + 1))/$SLURM_ARRAY_TASK_COUNT)", part_text);
        goto done;
    }
    int stdin_count = 0;
    for (int i = 0; i < num_inputs; i++) stdin_count += !strcmp(inputs[i], "-");
    if (stdin_count > 1) {
        cli_usage_error("data", cmd, "- (standard input) is given %d times; it can be read once", stdin_count);
        goto done;
    }
    /* a file given twice would be tokenized twice: with --val-docs, the same documents in
     * validation and in training */
    int first, repeat = repeated_input(inputs, num_inputs, &first);
    if (repeat >= 0) {
        cli_usage_error("data", cmd, "INPUT '%s' is the file '%s' given before it: its documents would be tokenized "
                        "twice (with --val-docs, the same ones in validation and training); give each file once",
                        inputs[repeat], inputs[first]);
        goto done;
    }
    /* The inputs and the model are read, and never inside the shards' names: data tokenize's own
     * check refuses an --out holding any file of those names (tokenize.c). */
    CtPathList outputs = {0}, read = {0};
    ct_path_list_add(&outputs, "--out", "the output directory", out);
    for (int i = 0; i < num_inputs; i++)
        if (strcmp(inputs[i], "-")) ct_path_list_add(&read, "INPUT", "a corpus file", inputs[i]);
    ct_path_list_add(&read, "--tokenizer", "the SentencePiece model", model);
    int guarded = cli_check_outputs("data", cmd, &outputs, &read);
    ct_path_list_free(&outputs);
    ct_path_list_free(&read);
    if (guarded != 0) goto done;

    rc = CT_EXIT_FAILURE;
    if (cli_catch_stops() != 0) {
        ct_print_error();
        goto done;
    }
    provenance = provenance_text(&r);
    r.provenance = provenance;
    TokenizeSummary s;
    if (tokenize_corpus(&r, &s) != 0) {
        if (stop_requested()) {
            fprintf(stderr, "ctrain: %s; nothing kept (exit %d: run the same command again)\n", ct_error(),
                    CT_EXIT_REQUEUE);
            rc = CT_EXIT_REQUEUE;
        } else {
            ct_print_error();
        }
        goto done;
    }
    printf("tokenized %lld documents in %.1f s: %lld validation documents, %lld tokens in %d shard%s; %lld "
           "training tokens in %d shard%s\n", (long long)s.docs, s.seconds, (long long)s.val_docs,
           (long long)s.val_tokens, s.val_shards, s.val_shards == 1 ? "" : "s", (long long)s.train_tokens,
           s.train_shards, s.train_shards == 1 ? "" : "s");
    if (s.replaced_docs > 0)
        printf("--replace-invalid: %lld bytes of invalid UTF-8 in %lld documents written as U+FFFD\n",
               (long long)s.replaced_bytes, (long long)s.replaced_docs);
    rc = CT_EXIT_OK;
done:
    free(provenance);
    free(inputs);
    return rc;
}

/* ---- detokenize ---- */

static const char DETOKENIZE_USAGE[] =
    "usage: ctrain data detokenize [--format jsonl|text] FILE_OR_GLOB\n"
    "\n"
    "Turn a split's tokens (the files of the glob in path order, one stream) back into text with\n"
    "the pieces stored in its files (/tokenizer/pieces), one document per BOS token, written to\n"
    "standard output; a CaseOps tokenizer's capitals are restored. For a model whose normalizer\n"
    "keeps the text as it is (identity, no extra-whitespace removal) this gives back the text\n"
    "`data tokenize` was given.\n"
    "\n"
    "options:\n"
    "  --format jsonl   one JSON object {\"text\": ...} per document (default; needs cJSON)\n"
    "  --format text    the documents' text one after another, nothing between them\n"
    "  -h, --help       show this help\n";

/* Write one document's ids as text. */
static int write_document(const TokenPieces *pieces, int caseops, const uint32_t *ids, int64_t n, int jsonl) {
    size_t len;
    char *text = piece_decode_text(pieces, ids, n, caseops, &len);
    int rc = 0;
    if (!jsonl) {
        fwrite(text, 1, len, stdout);
    } else {
#ifdef CT_HAVE_CJSON
        cJSON *obj = cJSON_CreateObject();
        char *line = obj && cJSON_AddStringToObject(obj, "text", text) ? cJSON_PrintUnformatted(obj) : NULL;
        if (line) printf("%s\n", line);
        else rc = ct_fail("cannot write a document as JSON (out of memory?)");
        free(line);
        cJSON_Delete(obj);
#endif
    }
    free(text);
    return rc;
}

static int detokenize(const char *pattern, int jsonl) {
    TokenSet set = {0};
    TokenReader *reader = NULL;
    TokenPieces pieces = {0};
    uint32_t *ids = NULL, *chunk = NULL;
    int64_t n = 0, cap = 0;
    int rc = -1, present = 0, in_document = 0; /* in_document: a BOS began one (it may be empty) */
    if (data_open_set(pattern, &set) != 0) goto done;
    if (data_read_pieces_file(set.files[0].path, set.vocab_size, &pieces, &present) != 0) goto done;
    if (!present) {
        ct_fail("'%s' stores no /tokenizer/pieces to decode with (make it with data tokenize, or import-bin "
                "--tokenizer MODEL.model)", set.files[0].path);
        goto done;
    }
    const int caseops = caseops_pieces(&pieces);
    if (token_reader_open(&reader, &set) != 0) goto done;
    const int64_t block = (int64_t)1 << 20;
    chunk = ct_malloc((size_t)block * sizeof *chunk, "token block");
    for (int f = 0; f < set.num_files; f++) {
        const int64_t bos = set.files[f].bos_id;
        for (int64_t pos = 0; pos < set.files[f].num_tokens; pos += block) {
            const int64_t k = set.files[f].num_tokens - pos < block ? set.files[f].num_tokens - pos : block;
            if (token_reader_read(reader, f, pos, k, chunk) != 0) goto done;
            for (int64_t i = 0; i < k; i++) {
                if ((int64_t)chunk[i] == bos) { /* a document ends where the next begins */
                    if ((in_document || n > 0) && write_document(&pieces, caseops, ids, n, jsonl) != 0) goto done;
                    n = 0;
                    in_document = 1;
                    continue;
                }
                if (n == cap) {
                    cap = cap ? 2 * cap : 4096;
                    uint32_t *bigger = ct_malloc((size_t)cap * sizeof *bigger, "document ids");
                    if (n) memcpy(bigger, ids, (size_t)n * sizeof *ids);
                    free(ids);
                    ids = bigger;
                }
                ids[n++] = chunk[i];
            }
        }
    }
    if ((in_document || n > 0) && write_document(&pieces, caseops, ids, n, jsonl) != 0) goto done;
    rc = fflush(stdout) == 0 ? 0 : ct_fail("cannot write the text to standard output");
done:
    free(ids);
    free(chunk);
    token_reader_close(reader);
    token_pieces_free(&pieces);
    data_free_set(&set);
    return rc;
}

int data_detokenize_main(int argc, char **argv) {
    const char *format = "jsonl";
    const CliOption options[] = {{"--format", &format, NULL}};
    char **globs;
    int num_globs, rc = cli_parse("data", argc, argv, DETOKENIZE_USAGE, options, 1, &globs, &num_globs);
    if (rc != 0) {
        free(globs);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    rc = CT_EXIT_USAGE;
    if (num_globs != 1) {
        cli_usage_error("data", "detokenize", "give one file or quoted glob (got %d)", num_globs);
    } else if (strcmp(format, "jsonl") != 0 && strcmp(format, "text") != 0) {
        cli_usage_error("data", "detokenize", "--format '%s' is not jsonl or text", format);
#ifndef CT_HAVE_CJSON
    } else if (!strcmp(format, "jsonl")) {
        cli_usage_error("data", "detokenize", "--format jsonl needs cJSON, which this ctrain was built without "
                        "(apt-get install libcjson-dev, or scripts/install-deps.sh; then make); use --format text");
#endif
    } else {
        rc = detokenize(globs[0], !strcmp(format, "jsonl")) == 0 ? CT_EXIT_OK : CT_EXIT_FAILURE;
        if (rc != CT_EXIT_OK) ct_print_error();
    }
    free(globs);
    return rc;
}
