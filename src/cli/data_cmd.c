/* data_cmd.c — the `ctrain data` subcommands that prepare and inspect token data: their
 * arguments and what they print; the work is src/data's.
 *   import-bin  llm.c / parameter-golf .bin shards (and CaseOps byte sidecars) -> HDF5, one
 *               output per token shard, streamed (shard_bin.h)
 *   from-text   text files -> a byte-level HDF5 data set, optionally split into train + val
 *               (text_import.h)
 *   tokenize    tokenize_cmd.c (and detokenize)
 *   info        data_info_cmd.c
 *   luts        a SentencePiece model -> an HDF5 file of its /tokenizer tables and pieces
 *               (tokenizer.h)
 * Exit codes: 0 success, 1 bad data or I/O failure, 2 usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "commands.h"
#include "common.h"
#include "data.h"
#include "isolate.h"
#include "progress.h"
#include "shard_bin.h"
#include "stop.h"
#include "text_import.h"
#include "tokenizer.h"

static const char DATA_USAGE[] =
    "usage: ctrain data <command> [options]\n"
    "\n"
    "Prepare and inspect HDF5 token data (format: docs/data-format.md).\n"
    "\n"
    "commands:\n"
    "  import-bin --out DIR_OR_FILE SHARD.bin...   convert llm.c / parameter-golf shards\n"
    "  tokenize --tokenizer M.model --out DIR IN... a corpus (JSONL, text) -> shards with SentencePiece\n"
    "  detokenize FILE_OR_GLOB                     tokens back to text (JSONL), one document per BOS\n"
    "  from-text --out FILE.h5 TEXT...             byte-level data set from text files\n"
    "  info FILE_OR_GLOB...                        show the files and check every token\n"
    "  luts MODEL.model --out FILE.h5              a SentencePiece model's tables and pieces\n"
    "\n"
    "Run `ctrain data <command> --help` for the options of a command.\n";

static const char IMPORT_USAGE[] =
    "usage: ctrain data import-bin --out DIR_OR_FILE [options] SHARD.bin...\n"
    "\n"
    "Convert llm.c / parameter-golf token shards (" CT_SHARD_HEADER_TEXT ",\n"
    "token count; then uint16 tokens) to HDF5 data files, one per shard, without loading a\n"
    "whole shard into memory. Every header is checked before anything is written.\n"
    "A CaseOps byte sidecar given with its shard (fineweb_val_bytes_000000.bin beside\n"
    "fineweb_val_000000.bin: each token's count of original text bytes) becomes that file's\n"
    "/bytes_per_token, which validation's bits per byte then counts.\n"
    "\n"
    "options:\n"
    "  --out PATH         a directory (created if needed) receiving <shard name>.h5 for each\n"
    "                     shard; or, with a single shard, a file path ending in .h5 or .hdf5\n"
    "  --vocab-size N     tokenizer vocabulary size, 1..65536 (default: the --tokenizer model's,\n"
    "                     else 1024, parameter-golf's sp1024); every token must be below it\n"
    "  --bos-id N         beginning-of-sequence token id, or -1 for none (default -1)\n"
    "  --tokenizer MODEL.model\n"
    "                     a SentencePiece model (a path ending in .model): store the tables that\n"
    "                     bits per byte needs (train_gpt.py's rule) and the pieces that `ctrain\n"
    "                     sample` decodes with; its vocabulary size must equal --vocab-size\n"
    "  --tokenizer TEXT   any other value: free text describing the tokenizer (default: empty)\n"
    "  --luts FILE.h5     copy the /tokenizer tables (and pieces, if it has them) from FILE.h5,\n"
    "                     e.g. one written by `ctrain data luts`\n"
    "  -h, --help         show this help\n";

static const char FROM_TEXT_USAGE[] =
    "usage: ctrain data from-text --out FILE.h5 [--val-out FILE.h5 [--val-fraction F]] TEXT...\n"
    "\n"
    "Make a byte-level data set: every byte of the input files (concatenated in the order given)\n"
    "is one token, vocab_size 256, tokenizer \"bytes\". The /tokenizer tables count one byte per\n"
    "token, so bits per byte equals the loss divided by ln 2.\n"
    "\n"
    "options:\n"
    "  --out FILE.h5        the training file to write\n"
    "  --val-out FILE.h5    also write a validation file holding the last part of the bytes\n"
    "  --val-fraction F     the fraction of the bytes that goes to --val-out, 0 < F < 1\n"
    "                       (default 0.1)\n"
    "  -h, --help           show this help\n";

static const char LUTS_USAGE[] =
    "usage: ctrain data luts MODEL.model --out FILE.h5\n"
    "\n"
    "Read a SentencePiece model with the SentencePiece library and write FILE.h5 holding only\n"
    "/tokenizer: the tables that validation's bits per byte needs, made by train_gpt.py's\n"
    "build_sentencepiece_luts rule, and the pieces that `ctrain sample` decodes with. Give it to\n"
    "`ctrain data import-bin --luts FILE.h5`, or read it with h5dump or h5py\n"
    "(docs/data-format.md). `import-bin --tokenizer MODEL.model` stores the same in each file.\n"
    "\n"
    "options:\n"
    "  --out FILE.h5   the file to write\n"
    "  -h, --help      show this help\n";


/* ---- argument handling ---- */

/* Parse an integer option value within [min, max]; prints a usage error on failure. */
static int parse_int_option(const char *command, const char *name, const char *text, int64_t min, int64_t max,
                            int64_t *out) {
    if (ct_parse_int64(text, out) != 0 || *out < min || *out > max) {
        cli_usage_error("data", command, "%s '%s' is not an integer in %lld..%lld", name, text, (long long)min, (long long)max);
        return -1;
    }
    return 0;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- import-bin ---- */

/* DIR/<name of shard with .bin replaced by .h5>. */
static char *output_path_in_dir(const char *dir, const char *shard) {
    const char *base = strrchr(shard, '/');
    base = base ? base + 1 : shard;
    size_t stem = strlen(base) - (ends_with(base, ".bin") ? 4 : 0);
    size_t dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/') dir_len--;
    char *out = ct_malloc(dir_len + 1 + stem + 4, "output path");
    sprintf(out, "%.*s/%.*s.h5", (int)dir_len, dir, (int)stem, base);
    return out;
}

/* A --tokenizer value naming a SentencePiece model rather than describing a tokenizer. */
static int names_model(const char *tokenizer) { return ends_with(tokenizer, ".model"); }

/* Print ctrain's note when its decoding of a model's pieces differs from the library's. */
static void warn_decode_mismatch(const SpmTokenizer *tok) {
    if (tok->decode_mismatch) fprintf(stderr, "ctrain: warning: %s\n", tok->decode_mismatch);
}

static int import_bin_main(int argc, char **argv) {
    ImportBinRequest r = {.bos_text = "-1", .tokenizer = "", .vocab_name = "--vocab-size", .tokenizer_name = "--tokenizer"};
    const CliOption options[] = {{"--out", &r.out, NULL},
                                 {"--vocab-size", &r.vocab_text, NULL},
                                 {"--bos-id", &r.bos_text, NULL},
                                 {"--tokenizer", &r.tokenizer, NULL},
                                 {"--luts", &r.luts, NULL}};
    char **shards;
    int num_shards, rc = cli_parse("data", argc, argv, IMPORT_USAGE, options, 5, &shards, &num_shards);
    if (rc != 0) {
        free(shards);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    r.shards = shards;
    r.num_shards = num_shards;
    r.tokenizer_is_model = names_model(r.tokenizer);
    if (cli_catch_stops() != 0) {
        ct_print_error();
        free(shards);
        return CT_EXIT_FAILURE;
    }
    rc = data_import_bin(&r);
    free(shards);
    return rc;
}

int data_import_bin(const ImportBinRequest *r) {
    const char *out = r->out, *vocab_text = r->vocab_text, *bos_text = r->bos_text, *tokenizer = r->tokenizer;
    const char *luts = r->luts;
    char **shards = NULL, **sidecars = NULL; /* the token shards and each one's byte sidecar (or NULL) */
    int num_shards = 0;
    const char *cmd = "import-bin";
    ShardImportSettings settings = {.tokenizer = tokenizer, .vocab_name = r->vocab_name};
    char **out_paths = NULL;
    FILE **files = NULL;
    int64_t *counts = NULL, total_tokens = 0;
    int16_t *base_bytes = NULL;
    uint8_t *has_leading_space = NULL, *is_boundary_token = NULL;
    SpmTokenizer model = {0};
    TokenPieces pieces = {0};
    int model_given = r->tokenizer_is_model;
    int rc = CT_EXIT_USAGE;

    if (r->num_shards == 0) {
        cli_usage_error("data", cmd, "no shards given");
        goto done;
    }
    if (shard_bin_pair_sidecars(r->shards, r->num_shards, &shards, &sidecars, &num_shards) != 0) {
        ct_print_error();
        goto done;
    }
    if (!out) {
        cli_usage_error("data", cmd, "--out is required (a directory, or a .h5 file path for a single shard)");
        goto done;
    }
    if (model_given && luts) {
        cli_usage_error("data", cmd, "give --tokenizer MODEL.model or --luts FILE.h5, not both: each supplies the "
                        "/tokenizer tables");
        goto done;
    }
    if (parse_int_option(cmd, r->vocab_name, vocab_text ? vocab_text : "1024", 1, 65536, &settings.vocab_size) != 0 ||
        parse_int_option(cmd, "--bos-id", bos_text, -1, (vocab_text || !model_given ? settings.vocab_size : 65536) - 1,
                         &settings.bos_id) != 0)
        goto done;
    int out_is_file = !is_directory(out) && (ends_with(out, ".h5") || ends_with(out, ".hdf5"));
    if (out_is_file && num_shards > 1) {
        cli_usage_error("data", cmd, "--out '%s' names one file but %d shards were given; give a directory", out, num_shards);
        goto done;
    }
    out_paths = ct_calloc((size_t)num_shards, sizeof(char *), "output paths");
    for (int i = 0; i < num_shards; i++) {
        out_paths[i] = out_is_file ? ct_strdup(out) : output_path_in_dir(out, shards[i]);
        for (int j = 0; j < i; j++)
            if (ct_same_file(out_paths[i], out_paths[j])) {
                cli_usage_error("data", cmd, "shards '%s' and '%s' would both be written to '%s'", shards[j], shards[i],
                            out_paths[i]);
                goto done;
            }
    }
    /* no output over a shard, the tokenizer model or the --luts file */
    CtPathList outputs = {0}, inputs = {0};
    for (int i = 0; i < num_shards; i++) {
        ct_path_list_add(&outputs, "--out", "an output", out_paths[i]);
        ct_path_list_add(&inputs, "shard", "the tokens imported", shards[i]);
        if (sidecars[i]) ct_path_list_add(&inputs, "byte sidecar", "the byte counts imported", sidecars[i]);
    }
    if (model_given) ct_path_list_add(&inputs, "--tokenizer", "the SentencePiece model", tokenizer);
    if (luts) ct_path_list_add(&inputs, "--luts", "the tokenizer tables copied", luts);
    int guarded = cli_check_outputs("data", cmd, &outputs, &inputs);
    ct_path_list_free(&outputs);
    ct_path_list_free(&inputs);
    if (guarded != 0) goto done;

    /* The model first: its vocabulary decides vocab_size. */
    rc = CT_EXIT_FAILURE;
    struct stat st;
    if (!model_given && tokenizer[0] && stat(tokenizer, &st) == 0 && S_ISREG(st.st_mode))
        fprintf(stderr, "ctrain: note: --tokenizer '%s' names a file but is stored as free text; a SentencePiece "
                "model's name must end in .model\n", tokenizer);
    if (model_given) {
        if (spm_tokenizer_load(tokenizer, &model) != 0) {
            ct_fail_prefix("%s", r->tokenizer_name);
            goto fail;
        }
        if (vocab_text && settings.vocab_size != model.vocab_size) {
            ct_fail("%s %lld does not match SentencePiece model '%s', which has %lld pieces (train_gpt.py "
                    "requires them equal; leave out %s to take the model's)", r->vocab_name,
                    (long long)settings.vocab_size, tokenizer, (long long)model.vocab_size, r->vocab_name);
            goto fail;
        }
        if (model.vocab_size > 65536) {
            ct_fail("SentencePiece model '%s' has %lld pieces, but .bin shards hold uint16 tokens (at most 65536 ids)",
                    tokenizer, (long long)model.vocab_size);
            goto fail;
        }
        settings.vocab_size = model.vocab_size;
        if (settings.bos_id >= settings.vocab_size) {
            rc = cli_usage_error("data", cmd, "--bos-id '%s' is not below the model's vocabulary size %lld", bos_text,
                                 (long long)settings.vocab_size);
            goto done;
        }
        settings.tokenizer = model.description;
        settings.base_bytes = model.base_bytes;
        settings.has_leading_space = model.has_leading_space;
        settings.is_boundary_token = model.is_boundary_token;
        settings.pieces = &model.pieces;
        warn_decode_mismatch(&model);
    }

    /* Check every header first, so a bad shard is reported before hours of conversion. Each
     * shard is open only while it is checked or converted: thousands of shards must not need
     * thousands of file descriptors. */
    files = ct_calloc((size_t)num_shards, sizeof(FILE *), "shard files");
    counts = ct_calloc((size_t)num_shards, sizeof(int64_t), "shard sizes");
    for (int i = 0; i < num_shards; i++) {
        if (shard_bin_open(shards[i], &files[i], &counts[i]) != 0) goto fail;
        fclose(files[i]);
        files[i] = NULL;
        total_tokens += counts[i];
        if (sidecars[i]) {
            if (shard_bin_open_sidecar(sidecars[i], shards[i], counts[i], &files[i]) != 0) goto fail;
            fclose(files[i]);
            files[i] = NULL;
        }
    }
    if (luts) {
        int has_pieces = 0;
        if (data_read_luts_file(luts, settings.vocab_size, &base_bytes, &has_leading_space, &is_boundary_token) != 0 ||
            data_read_pieces_file(luts, settings.vocab_size, &pieces, &has_pieces) != 0) {
            ct_fail_prefix("--luts");
            goto fail;
        }
        settings.base_bytes = base_bytes;
        settings.has_leading_space = has_leading_space;
        settings.is_boundary_token = is_boundary_token;
        settings.pieces = has_pieces ? &pieces : NULL;
    }
    if (!out_is_file && ct_mkdir_p(out) != 0) goto fail;
    if (model_given) {
        printf("tokenizer: %s: bits-per-byte tables and pieces stored in each file\n", model.description);
        fflush(stdout);
    }

    Progress progress;
    int64_t done_tokens = 0;
    progress_begin(&progress, "import-bin", "tokens", total_tokens);
    for (int i = 0; i < num_shards; i++) {
        int64_t count;
        if (stop_requested() && ct_fail("import stopped by signal %d before shard '%s'", stop_requested(), shards[i])) {
            progress_end(&progress);
            goto fail;
        }
        if (shard_bin_open(shards[i], &files[i], &count) != 0 ||
            (count != counts[i] && ct_fail("shard '%s' changed while importing (%lld tokens, then %lld)", shards[i],
                                           (long long)counts[i], (long long)count))) {
            progress_end(&progress);
            goto fail;
        }
        if (shard_bin_convert(shards[i], files[i], counts[i], sidecars[i], out_paths[i], &settings, &progress,
                              &done_tokens) != 0) {
            progress_end(&progress);
            goto fail;
        }
        fclose(files[i]);
        files[i] = NULL;
        progress_end(&progress);
        if (sidecars[i])
            printf("%s + byte sidecar %s -> %s: %lld tokens, /bytes_per_token\n", shards[i], sidecars[i], out_paths[i],
                   (long long)counts[i]);
        else
            printf("%s -> %s: %lld tokens\n", shards[i], out_paths[i], (long long)counts[i]);
        fflush(stdout);
    }
    rc = CT_EXIT_OK;
    goto done;
fail:
    if (stop_requested()) { /* asked to stop (a job's preemption): not an error; requeue */
        fprintf(stderr, "ctrain: %s\n", ct_error());
        rc = CT_EXIT_REQUEUE;
    } else {
        ct_print_error();
    }
done:
    for (int i = 0; i < num_shards; i++) {
        if (files && files[i]) fclose(files[i]);
        if (out_paths) free(out_paths[i]);
    }
    free(files);
    free(counts);
    free(out_paths);
    free(shards);
    free(sidecars);
    free(base_bytes);
    free(has_leading_space);
    free(is_boundary_token);
    token_pieces_free(&pieces);
    spm_tokenizer_free(&model);
    return rc;
}

/* ---- luts ---- */

static int luts_main(int argc, char **argv) {
    const char *out = NULL;
    const CliOption options[] = {{"--out", &out, NULL}};
    char **models;
    int num_models, rc = cli_parse("data", argc, argv, LUTS_USAGE, options, 1, &models, &num_models);
    if (rc != 0) {
        free(models);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    SpmTokenizer tok = {0};
    rc = CT_EXIT_USAGE;
    if (num_models != 1) {
        cli_usage_error("data", "luts", "give one SentencePiece model (got %d)", num_models);
        goto done;
    }
    if (!out) {
        cli_usage_error("data", "luts", "--out FILE.h5 is required");
        goto done;
    }
    CtPathList outputs = {0}, inputs = {0};
    ct_path_list_add(&outputs, "--out", "the tables' path", out);
    ct_path_list_add(&inputs, "MODEL", "the SentencePiece model", models[0]);
    int guarded = cli_check_outputs("data", "luts", &outputs, &inputs);
    ct_path_list_free(&outputs);
    ct_path_list_free(&inputs);
    if (guarded != 0) goto done;
    rc = CT_EXIT_FAILURE;
    if (spm_tokenizer_load(models[0], &tok) != 0 ||
        data_write_tokenizer_file(out, tok.vocab_size, tok.base_bytes, tok.has_leading_space, tok.is_boundary_token,
                                  &tok.pieces) != 0) {
        ct_print_error();
        goto done;
    }
    warn_decode_mismatch(&tok);
    int64_t bytes = 0, boundary = 0;
    for (int64_t i = 0; i < tok.vocab_size; i++) {
        bytes += tok.pieces.type[i] == CT_PIECE_BYTE;
        boundary += tok.is_boundary_token[i];
    }
    printf("wrote %s: /tokenizer tables and pieces of %s; %lld byte pieces, %lld control/unknown/unused\n", out,
           tok.description, (long long)bytes, (long long)boundary);
    rc = CT_EXIT_OK;
done:
    spm_tokenizer_free(&tok);
    free(models);
    return rc;
}

/* ---- from-text ---- */

static int from_text_main(int argc, char **argv) {
    const char *out = NULL, *val_out = NULL, *fraction_text = NULL;
    const CliOption options[] = {
        {"--out", &out, NULL}, {"--val-out", &val_out, NULL}, {"--val-fraction", &fraction_text, NULL}};
    char **inputs;
    int num_inputs, rc = cli_parse("data", argc, argv, FROM_TEXT_USAGE, options, 3, &inputs, &num_inputs);
    if (rc != 0) {
        free(inputs);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    const char *cmd = "from-text";
    TokenWriter *train = NULL, *val = NULL;
    double fraction = 0.1;
    rc = CT_EXIT_USAGE;
    if (num_inputs == 0) {
        cli_usage_error("data", cmd, "no text files given");
        goto done;
    }
    if (!out) {
        cli_usage_error("data", cmd, "--out FILE.h5 is required");
        goto done;
    }
    if (fraction_text && !val_out) {
        cli_usage_error("data", cmd, "--val-fraction needs --val-out FILE.h5");
        goto done;
    }
    if (fraction_text && (ct_parse_double(fraction_text, &fraction) != 0 || !(fraction > 0 && fraction < 1))) {
        cli_usage_error("data", cmd, "--val-fraction '%s' is not a number between 0 and 1 (exclusive)", fraction_text);
        goto done;
    }
    /* neither output over a text file read, nor both outputs one file */
    CtPathList outputs = {0}, texts = {0};
    ct_path_list_add(&outputs, "--out", "the training file's path", out);
    if (val_out) ct_path_list_add(&outputs, "--val-out", "the validation file's path", val_out);
    for (int i = 0; i < num_inputs; i++) ct_path_list_add(&texts, "TEXT", "the text imported", inputs[i]);
    int guarded = cli_check_outputs("data", cmd, &outputs, &texts);
    ct_path_list_free(&outputs);
    ct_path_list_free(&texts);
    if (guarded != 0) goto done;

    rc = CT_EXIT_FAILURE;
    if (cli_catch_stops() != 0) goto fail;
    TextImport import;
    if (text_import(inputs, num_inputs, out, val_out, fraction, &import) != 0) goto fail;
    train = import.train;
    val = import.val;
    int closed = token_writer_close(train);
    train = NULL;
    if (closed != 0) goto fail;
    printf("wrote %s: %lld tokens (bytes)\n", out, (long long)import.train_tokens);
    if (val) {
        closed = token_writer_close(val);
        val = NULL;
        if (closed != 0) goto fail;
        printf("wrote %s: %lld tokens (bytes)\n", val_out, (long long)import.val_tokens);
    }
    rc = CT_EXIT_OK;
    goto done;
fail:
    if (stop_requested()) { /* asked to stop: the partial files go (below); not an error */
        fprintf(stderr, "ctrain: %s; nothing written (exit %d: run the same command again)\n", ct_error(),
                CT_EXIT_REQUEUE);
        rc = CT_EXIT_REQUEUE;
    } else {
        ct_print_error();
    }
done:
    token_writer_abort(train);
    token_writer_abort(val);
    free(inputs);
    return rc;
}

/* ---- dispatch ---- */

int data_main(int argc, char **argv) {
    static const CliCommand commands[] = {
        {"import-bin", import_bin_main}, {"from-text", from_text_main}, {"tokenize", data_tokenize_main},
        {"detokenize", data_detokenize_main}, {"info", data_info_main}, {"luts", luts_main}};
    return cli_dispatch("data", argc, argv, DATA_USAGE, commands, 6);
}
