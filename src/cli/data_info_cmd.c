/* data_info_cmd.c — `ctrain data info`: a split's files in a table (tokens, dtype, vocabulary,
 * bos_id, tokenizer tables), every token and checksum checked, and the CaseOps byte counts
 * summed when the files carry them. Each glob is checked in a child process, so that damaged
 * HDF5 metadata that crashes the library is reported as an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "common.h"
#include "data.h"
#include "isolate.h"
#include "progress.h"
#include "tokenizer.h"

static const char INFO_USAGE[] =
    "usage: ctrain data info FILE_OR_GLOB...\n"
    "\n"
    "Print each file of the glob (sorted by path, the order training reads them) with its token\n"
    "count, dtype, vocab_size, bos_id, whether it has the /tokenizer tables (luts: yes or no,\n"
    "with +pieces when it also stores the tokenizer's pieces, for decoding), and the tokenizer\n"
    "text; then read every token and check it is below vocab_size, and sum the CaseOps byte\n"
    "counts (/bytes_per_token) when the files carry them. Quote globs so that ctrain, not the\n"
    "shell, expands them. Exit status 0 if every file is valid, 1 otherwise.\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n";

/* Print free text on one table row: control characters (newlines in a tokenizer
 * description) would break the layout. */
static void print_sanitized(const char *s) {
    char shortened[256];
    for (s = ct_shorten(s, shortened, sizeof shortened); *s; s++)
        putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

static void report_scan_progress(void *ctx, int64_t done, int64_t total) {
    (void)total;
    progress_update(ctx, done);
}

/* The luts column: the tables, and whether the tokenizer's pieces are there too. */
static const char *luts_column(int has_luts, int has_pieces) {
    return has_luts ? (has_pieces ? "yes+pieces" : "yes") : (has_pieces ? "no+pieces" : "no");
}

/* Read (and so check) each file's pieces, if it has them: has_pieces[i] says. */
static int check_pieces(const TokenSet *set, int *has_pieces) {
    for (int i = 0; i < set->num_files; i++) {
        TokenPieces pieces;
        if (data_read_pieces_file(set->files[i].path, set->vocab_size, &pieces, &has_pieces[i]) != 0) return -1;
        token_pieces_free(&pieces);
    }
    return 0;
}

/* The files' /bytes_per_token (CaseOps byte counts), read in full (so checked): what validation
 * counts for bits per byte. */
static int report_byte_counts(const TokenSet *set) {
    int with = 0;
    for (int i = 0; i < set->num_files; i++) with += set->files[i].has_byte_counts;
    if (with < set->num_files) {
        printf("bytes_per_token: in %d of %d files (validation needs all or none)\n", with, set->num_files);
        return 0;
    }
    uint16_t *counts;
    if (data_read_byte_counts(set, set->total_tokens, &counts) != 0) return -1;
    double bytes = 0;
    for (int64_t i = 0; i < set->total_tokens; i++) bytes += counts[i];
    free(counts);
    printf("bytes_per_token: in every file, %.0f bytes of original text (%.3f per token): val_bpb counts these\n",
           bytes, bytes / (double)set->total_tokens);
    return 0;
}

/* Describe and check one glob; 0 if valid. */
static int info_one(const char *pattern) {
    TokenSet set;
    if (data_open_set(pattern, &set) != 0) return -1;
    int *has_pieces = ct_calloc((size_t)set.num_files, sizeof *has_pieces, "pieces flags");
    if (data_check_storage(&set) != 0 || check_pieces(&set, has_pieces) != 0) {
        free(has_pieces);
        data_free_set(&set);
        return -1;
    }
    int all_pieces = 1, luts_width = 4; /* room for "yes+pieces" only when some file has them */
    for (int i = 0; i < set.num_files; i++) {
        all_pieces &= has_pieces[i];
        if (has_pieces[i]) luts_width = 10;
    }
    char total_label[64];
    snprintf(total_label, sizeof total_label, "total (%d file%s)", set.num_files, set.num_files == 1 ? "" : "s");
    int width = (int)strlen(total_label);
    for (int i = 0; i < set.num_files; i++) {
        int n = (int)strlen(set.files[i].path);
        if (n > width) width = n;
    }
    printf("%-*s %12s  %-6s %10s %7s  %-*s  %s\n", width, "file", "tokens", "dtype", "vocab", "bos", luts_width,
           "luts", "tokenizer");
    for (int i = 0; i < set.num_files; i++) {
        const TokenFileInfo *f = &set.files[i];
        printf("%-*s %12lld  %-6s %10lld %7lld  %-*s  ", width, f->path, (long long)f->num_tokens,
               f->token_bytes == 2 ? "uint16" : "uint32", (long long)f->vocab_size, (long long)f->bos_id, luts_width,
               luts_column(f->has_luts, has_pieces[i]));
        print_sanitized(f->tokenizer);
        putchar('\n');
    }
    printf("%-*s %12lld  %-6s %10lld %7s  %s\n", width, total_label, (long long)set.total_tokens, "",
           (long long)set.vocab_size, "", luts_column(set.has_luts, all_pieces));
    free(has_pieces);
    fflush(stdout);

    Progress progress;
    uint32_t max_token = 0;
    progress_begin(&progress, "checking tokens", "tokens", set.total_tokens);
    int rc = data_scan_tokens(&set, &max_token, report_scan_progress, &progress);
    progress_end(&progress);
    if (rc == 0) {
        int with_crc = 0;
        for (int i = 0; i < set.num_files; i++) with_crc += set.files[i].tokens_crc32 >= 0;
        printf("checked %lld tokens: all below vocab_size %lld (largest id %u)\n", (long long)set.total_tokens,
               (long long)set.vocab_size, max_token);
        if (with_crc == set.num_files)
            printf("tokens_crc32: matches in every file\n");
        else if (with_crc == 0)
            printf("tokens_crc32: no file has one (files not written by ctrain; see docs/data-format.md)\n");
        else
            printf("tokens_crc32: matches in %d of %d files; the others have none (see docs/data-format.md)\n",
                   with_crc, set.num_files);
    }
    if (rc == 0 && set.any_byte_counts) rc = report_byte_counts(&set);
    fflush(stdout);
    data_free_set(&set);
    return rc;
}

static int info_one_here(void *pattern, void *out) {
    (void)out;
    return info_one(pattern);
}

/* In a child process, so that a file whose damaged metadata crashes HDF5 is reported as such. */
static int info_one_isolated(const char *pattern) {
    char what[4300];
    snprintf(what, sizeof what, "checking '%s' (damaged HDF5 structure?)", pattern);
    fflush(stdout);
    return ct_run_isolated(what, info_one_here, (void *)pattern, NULL, 0, 0);
}

int data_info_main(int argc, char **argv) {
    char **patterns;
    int num_patterns, rc = cli_parse("data", argc, argv, INFO_USAGE, NULL, 0, &patterns, &num_patterns);
    if (rc != 0) {
        free(patterns);
        return rc == CLI_HELP_SHOWN ? CT_EXIT_OK : rc;
    }
    if (num_patterns == 0) {
        free(patterns);
        return cli_usage_error("data", "info", "no file or glob given");
    }
    rc = CT_EXIT_OK;
    for (int i = 0; i < num_patterns; i++) {
        if (i > 0) putchar('\n');
        if (info_one_isolated(patterns[i]) != 0) {
            fflush(stdout);
            ct_print_error();
            rc = CT_EXIT_FAILURE;
        }
    }
    free(patterns);
    return rc;
}

