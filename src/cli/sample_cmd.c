/* sample_cmd.c — `ctrain sample CHECKPOINT [--prompt TEXT | --prompt-ids IDS] [--bos] [--tokens N]
 * [--temperature T] [--top-k K] [--seed S] [--ids] [--pieces FILE.h5] [--tokenizer MODEL.model]
 * [--device D]`: text from a trained model. Byte-level models (the data's tokenizer is "bytes")
 * read the prompt as bytes and print bytes; models whose data stores tokenizer pieces (or
 * --pieces, or --tokenizer) take token ids and print decoded text (tokenizer.h); with
 * --tokenizer a text prompt is encoded by the SentencePiece model, checked against the stored
 * pieces; others take and print token ids; --bos puts the data's bos_id first. The work is
 * sample_tokens's (src/infer/sample.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "tokenizer.h"
#include "infer.h"

static const char SAMPLE_USAGE[] =
    "usage: ctrain sample CHECKPOINT [--prompt TEXT | --prompt-ids IDS] [--bos] [--tokens N]\n"
    "                     [--temperature T] [--top-k K] [--seed S] [--ids] [--pieces FILE.h5]\n"
    "                     [--tokenizer MODEL.model] [--device auto|cpu|cuda] [--live]\n"
    "\n"
    "Generate text from a checkpoint's model (CHECKPOINT may be a run directory: its newest\n"
    "checkpoint). Each token is drawn from the model's next-token distribution at temperature T,\n"
    "among the K most likely tokens; the same seed gives the same text. Byte-level models (data\n"
    "made by `ctrain data from-text`) read the prompt as bytes and print text. Other models take\n"
    "--prompt-ids, or --prompt with --tokenizer MODEL.model (the SentencePiece model of the\n"
    "data); they print text decoded as SentencePiece does when the training data holds the\n"
    "tokenizer's pieces (`ctrain data import-bin --tokenizer MODEL.model`) or --pieces or\n"
    "--tokenizer gives them, else token ids. With a CaseOps tokenizer (the 1.0611 record's data:\n"
    "capitals as operator pieces U+E001..U+E004) --prompt is case-encoded before SentencePiece\n"
    "and the text printed has its capitals restored. Runs on the GPU when one is visible\n"
    "(--device auto), else the CPU; the two compute in different precision, so their samples\n"
    "differ.\n"
    "\n"
    "options:\n"
    "  --prompt TEXT        the start of the text (byte-level models, default a newline; with\n"
    "                       --tokenizer: encoded by the model, as Python's sp.encode(TEXT))\n"
    "  --prompt-ids IDS     the start as comma-separated token ids (any model; default for\n"
    "                       tokenizer models: the data's bos_id, else token 0)\n"
    "  --bos                put the data's bos_id before the prompt, as every document of\n"
    "                       the training data starts (the data must record a bos_id)\n"
    "  --tokens N           tokens to generate (default 200)\n"
    "  --temperature T      0 = always the most likely token; default 0.8\n"
    "  --top-k K            draw among the K most likely tokens; 0 = all (default 40)\n"
    "  --seed S             random seed (default 1337)\n"
    "  --ids                print token ids (prompt, then generated), one line\n"
    "  --pieces FILE.h5     decode with the /tokenizer/pieces of FILE.h5 (a data file or\n"
    "                       `ctrain data luts` output) instead of the training data's\n"
    "  --tokenizer MODEL.model\n"
    "                       the SentencePiece model of the training data: encodes --prompt,\n"
    "                       decodes when no pieces are stored; its vocabulary must be the\n"
    "                       checkpoint's and its pieces the stored ones (a wrong model fails)\n"
    "  --device D           auto (default: cuda if a GPU is visible), cpu or cuda\n"
    "  --live               a checkpoint with EMA (or SWA) weights: use the live training weights\n"
    "                       (/model) instead of the averaged ones its run ends with (the default)\n"
    "  -h, --help           show this help\n";

/* How the sample is printed. */
typedef enum { PRINT_IDS, PRINT_BYTES, PRINT_PIECES } PrintMode;

typedef struct {
    PrintMode mode;
    int64_t printed;       /* ids printed so far (PRINT_IDS) */
    PieceDecoder *decoder; /* PRINT_PIECES */
    CaseOpsDecoder *caseops; /* PRINT_PIECES with a CaseOps tokenizer: the text passes through it */
} Printer;

static void write_stdout(void *ctx, const char *bytes, size_t n) {
    (void)ctx;
    fwrite(bytes, 1, n, stdout);
}

static void print_token(void *ctx, uint32_t token) {
    Printer *p = ctx;
    if (p->mode == PRINT_IDS) printf("%s%u", p->printed++ ? " " : "", token);
    else if (p->mode == PRINT_BYTES) putchar((int)token);
    else if (p->caseops) piece_decoder_push(p->decoder, token, caseops_decoder_write, p->caseops);
    else piece_decoder_push(p->decoder, token, write_stdout, NULL);
    fflush(stdout);
}

/* What the model's data says about its tokenizer. */
typedef struct {
    int bytes;          /* byte-level: the data's tokenizer is "bytes" (or, the data gone, vocab 256) */
    int64_t bos_id;     /* -1: none or unknown */
    int has_pieces;
    TokenPieces pieces; /* from --pieces, else from the first training file, else from --tokenizer */
    char pieces_from[4200]; /* the file they came from */
    char note[600];     /* why text cannot be decoded, for a note on stderr */
} DataTokenizer;

/* Read it from --pieces (pieces_path, may be NULL) and the checkpoint's training files. Only a
 * bad --pieces file is an error; unreadable training data leaves the defaults. */
static int data_tokenizer(const Config *cfg, const char *pieces_path, DataTokenizer *t) {
    memset(t, 0, sizeof *t);
    t->bos_id = -1;
    t->bytes = cfg->vocab_size == 256;
    TokenSet set;
    const char *source = cfg->train_files;
    if (data_open_set(cfg->train_files, &set) == 0) {
        t->bytes = !strcmp(set.files[0].tokenizer, "bytes");
        t->bos_id = set.files[0].bos_id;
        snprintf(t->pieces_from, sizeof t->pieces_from, "%s", set.files[0].path);
        if (!pieces_path && data_read_pieces_file(set.files[0].path, cfg->vocab_size, &t->pieces, &t->has_pieces) != 0)
            snprintf(t->note, sizeof t->note, "%s", ct_error());
        else if (!pieces_path && !t->has_pieces)
            snprintf(t->note, sizeof t->note, "'%s' has no /tokenizer/pieces (import with --tokenizer MODEL.model)",
                     set.files[0].path);
        data_free_set(&set);
    } else {
        snprintf(t->note, sizeof t->note, "the training data '%s' cannot be read: %s", source, ct_error());
    }
    if (pieces_path) {
        snprintf(t->pieces_from, sizeof t->pieces_from, "%s", pieces_path);
        if (data_read_pieces_file(pieces_path, cfg->vocab_size, &t->pieces, &t->has_pieces) != 0)
            return ct_fail_prefix("--pieces");
        if (!t->has_pieces)
            return ct_fail("--pieces: '%s' has no /tokenizer/pieces (make one with `ctrain data luts MODEL.model`)",
                           pieces_path);
    }
    return 0;
}

/* The SentencePiece model of --tokenizer: its vocabulary must be the checkpoint's, and its pieces
 * the stored ones, if any (else they become the pieces to decode with). */
static int model_tokenizer(const Config *cfg, const char *checkpoint, const char *model_path, DataTokenizer *t) {
    SpmTokenizer model;
    if (spm_tokenizer_load(model_path, &model) != 0) return ct_fail_prefix("--tokenizer");
    int rc = 0;
    if (model.vocab_size != cfg->vocab_size)
        rc = ct_fail("--tokenizer: SentencePiece model '%s' has %lld pieces but the checkpoint '%s' has vocab_size "
                     "%lld: give the model its training data was tokenized with", model_path,
                     (long long)model.vocab_size, checkpoint, (long long)cfg->vocab_size);
    else if (t->has_pieces && spm_check_pieces(&model, model_path, &t->pieces, t->pieces_from) != 0)
        rc = ct_fail_prefix("--tokenizer");
    if (rc == 0 && model.decode_mismatch) fprintf(stderr, "ctrain: warning: %s\n", model.decode_mismatch);
    if (rc == 0 && !t->has_pieces) {
        token_pieces_free(&t->pieces);
        t->pieces = model.pieces;
        memset(&model.pieces, 0, sizeof model.pieces);
        t->has_pieces = 1;
    }
    spm_tokenizer_free(&model);
    return rc;
}

static int parse_int(const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return cli_usage_error("sample", NULL, "%s '%s': expected an integer in [%lld, %lld]", name, text,
                               (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int sample_main(int argc, char **argv) {
    char **pos;
    const char *prompt = NULL, *prompt_ids = NULL, *tokens_s = "200", *temp_s = "0.8", *topk_s = "40",
               *seed_s = "1337", *device = "auto", *pieces_path = NULL, *model_path = NULL;
    int as_ids = 0, with_bos = 0, live = 0;
    const CliOption options[] = {{"--prompt", &prompt, NULL},    {"--prompt-ids", &prompt_ids, NULL},
                                 {"--bos", NULL, &with_bos},
                                 {"--tokens", &tokens_s, NULL},  {"--temperature", &temp_s, NULL},
                                 {"--top-k", &topk_s, NULL},     {"--seed", &seed_s, NULL},
                                 {"--ids", NULL, &as_ids},       {"--device", &device, NULL},
                                 {"--pieces", &pieces_path, NULL}, {"--tokenizer", &model_path, NULL},
                                 {"--live", NULL, &live}};
    int npos, rc = cli_parse("sample", argc, argv, SAMPLE_USAGE, options, 12, &pos, &npos);
    if (rc != 0 || npos != 1) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("sample", NULL, "give one checkpoint (got %d)", npos);
    }
    SampleOptions o;
    int64_t seed = 0;
    char *end;
    o.temperature = strtod(temp_s, &end);
    if (*end || end == temp_s || !(o.temperature >= 0 && o.temperature <= 100)) {
        free(pos);
        return cli_usage_error("sample", NULL, "--temperature '%s': expected a number in [0, 100]", temp_s);
    }
    if (parse_int("--tokens", tokens_s, 1, 1000000, &o.num_tokens) || parse_int("--top-k", topk_s, 0, 1 << 30, &o.top_k) ||
        parse_int("--seed", seed_s, 0, INT64_MAX, &seed) || (prompt && prompt_ids)) {
        free(pos);
        return prompt && prompt_ids ? cli_usage_error("sample", NULL, "give --prompt or --prompt-ids, not both")
                                    : CT_EXIT_USAGE;
    }
    if (prompt && !*prompt) { /* the same for every model: an empty prompt is refused */
        free(pos);
        return cli_usage_error("sample", NULL,
                               "--prompt is empty: give some text, or leave --prompt out for the default start");
    }
    o.seed = (uint64_t)seed;
    char path[4400];
    rc = checkpoint_resolve(pos[0], path, sizeof path);
    free(pos);
    if (rc != 0) {
        ct_print_error();
        return CT_EXIT_FAILURE;
    }
    Config cfg;
    TrainState st;
    Backend *b = NULL;
    uint32_t *ids = NULL;
    int64_t n = 0;
    DataTokenizer tok = {0};
    Printer printer = {0};
    rc = CT_EXIT_FAILURE;
    /* one sequence at a time: the backend needs room for a micro-batch of one */
    if (checkpoint_read_weights(path, &cfg, &st) != 0) goto done;
    char averaged[96];
    if (!live && train_state_use_average(&st, averaged, sizeof averaged))
        fprintf(stderr, "weights: %s (--live for the live weights)\n", averaged);
    char seq_len[32];
    snprintf(seq_len, sizeof seq_len, "%lld", (long long)cfg.train_seq_len);
    if (config_set(&cfg, "device", device, CT_SOURCE_COMMAND_LINE, "--device") != 0 ||
        config_set(&cfg, "train_batch_tokens", seq_len, CT_SOURCE_COMMAND_LINE, "sample") != 0 ||
        config_set(&cfg, "grad_accum_slots", "1", CT_SOURCE_COMMAND_LINE, "sample") != 0)
        goto done;
    if (config_validate(&cfg, 1) != 0) { /* names a bad --device */
        rc = CT_EXIT_USAGE;
        goto done;
    }
    char note[400];
    backend_resolve_device(&cfg, note, sizeof note);
    if (note[0]) fprintf(stderr, "%s\n", note);
    if (data_tokenizer(&cfg, pieces_path, &tok) != 0) goto done;
    if (model_path && model_tokenizer(&cfg, path, model_path, &tok) != 0) goto done;
    if (with_bos && tok.bos_id < 0) { /* refused before the prompt is encoded */
        ct_fail("--bos: the training data '%s' records no bos_id (its bos_id is -1; `ctrain data import-bin "
                "--bos-id N` records one)",
                cfg.train_files);
        rc = CT_EXIT_USAGE;
        goto done;
    }
    int bytes = tok.bytes && !tok.has_pieces;
    if (prompt_ids) { /* comma-separated ids */
        ids = ct_calloc(strlen(prompt_ids) + 1, sizeof *ids, "prompt");
        for (const char *p = prompt_ids; *p;) {
            char *stop;
            errno = 0;
            unsigned long long v = strtoull(p, &stop, 10);
            if (stop == p || errno || v >= (unsigned long long)cfg.vocab_size || (*stop && *stop != ',')) {
                ct_fail("--prompt-ids '%s': expected comma-separated token ids below vocab_size %lld", prompt_ids,
                        (long long)cfg.vocab_size);
                rc = CT_EXIT_USAGE;
                goto done;
            }
            ids[n++] = (uint32_t)v;
            p = *stop ? stop + 1 : stop;
        }
    } else if (prompt && model_path) {
        /* a CaseOps model was trained on text with its capitals as operators: give it that */
        char *text = tok.has_pieces && caseops_pieces(&tok.pieces) ? caseops_encode(prompt) : NULL;
        const int encoded = spm_encode(model_path, text ? text : prompt, &ids, &n);
        free(text);
        if (encoded != 0) {
            ct_fail_prefix("--tokenizer");
            goto done;
        }
        if (n == 0) {
            ct_fail("--prompt '%s' encodes to no tokens with SentencePiece model '%s'", prompt, model_path);
            rc = CT_EXIT_USAGE;
            goto done;
        }
    } else if (!bytes) {
        if (prompt) {
            ct_fail("this model's tokenizer is not byte-level ('%s'): give --tokenizer MODEL.model (the "
                    "SentencePiece model of the data) to encode --prompt, or the prompt as --prompt-ids",
                    cfg.train_files);
            rc = CT_EXIT_USAGE;
            goto done;
        }
        ids = ct_calloc(1, sizeof *ids, "prompt"); /* the data's bos_id, else token 0 */
        ids[0] = tok.bos_id >= 0 ? (uint32_t)tok.bos_id : 0;
        n = 1;
        with_bos = 0; /* the prompt already is the bos_id (--bos was refused without one) */
    } else {
        const char *text = prompt ? prompt : "\n";
        n = (int64_t)strlen(text);
        ids = ct_calloc((size_t)n, sizeof *ids, "prompt");
        for (int64_t i = 0; i < n; i++) ids[i] = (unsigned char)text[i];
    }
    if (n == 0) {
        ct_fail("--prompt-ids is empty");
        rc = CT_EXIT_USAGE;
        goto done;
    }
    if (with_bos) {
        uint32_t *with = ct_calloc((size_t)n + 1, sizeof *with, "prompt");
        with[0] = (uint32_t)tok.bos_id;
        memcpy(with + 1, ids, (size_t)n * sizeof *ids);
        free(ids);
        ids = with;
        n++;
    }
    if (cfg.smear_gate_enabled && tok.bos_id < 0) { /* the mask cannot be applied without it */
        ct_fail("smear_gate_enabled = 1: the checkpoint's training data '%s' cannot be read or records no bos_id, "
                "and the SmearGate's mask needs its BOS token", cfg.train_files);
        goto done;
    }
    if (backend_create(&b, &cfg, &st) != 0) goto done;
    b->bos_id = tok.bos_id; /* the SmearGate's mask: the training data's BOS */
    printer.mode = as_ids ? PRINT_IDS : bytes ? PRINT_BYTES : tok.has_pieces ? PRINT_PIECES : PRINT_IDS;
    if (printer.mode == PRINT_PIECES) printer.decoder = piece_decoder_create(&tok.pieces);
    if (printer.mode == PRINT_PIECES && caseops_pieces(&tok.pieces)) {
        printer.caseops = caseops_decoder_create(write_stdout, NULL);
        fprintf(stderr, "ctrain: CaseOps tokenizer (its pieces hold the operators U+E001..U+E004): capitals restored "
                "in the text (--ids prints the ids as they are)\n");
    }
    if (printer.mode == PRINT_IDS && !as_ids && tok.note[0])
        fprintf(stderr, "ctrain: printing token ids: %s\n", tok.note);
    for (int64_t i = 0; i < n; i++) print_token(&printer, ids[i]);
    int sampled = sample_tokens(b, ids, n, &o, print_token, &printer);
    if (printer.caseops) {
        piece_decoder_finish(printer.decoder, caseops_decoder_write, printer.caseops);
        caseops_decoder_finish(printer.caseops);
    } else if (printer.decoder) {
        piece_decoder_finish(printer.decoder, write_stdout, NULL);
    }
    putchar('\n');
    if (sampled != 0) goto done;
    rc = CT_EXIT_OK;
done:
    if (rc != CT_EXIT_OK) ct_print_error();
    if (b) b->destroy(b);
    piece_decoder_free(printer.decoder);
    caseops_decoder_free(printer.caseops);
    token_pieces_free(&tok.pieces);
    free(ids);
    config_free(&cfg);
    train_state_free(&st);
    return rc;
}
