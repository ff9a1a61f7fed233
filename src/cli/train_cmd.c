/* train_cmd.c — `ctrain train [--config FILE] [key=value ...]`: builds the configuration
 * (defaults < config file < command line), validates it before any work, prints it and writes
 * out_dir/config.txt, checks the data, then runs training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "train.h"

static void train_usage(FILE *out) {
    fprintf(out,
            "usage: ctrain train [--config FILE] [key=value ...]\n"
            "\n"
            "Trains the parameter-golf GPT. Configuration comes from the defaults below, then FILE\n"
            "(`key = value` lines, # comments), then key=value arguments, which win.\n"
            "The resolved configuration is printed and written to out_dir/config.txt.\n"
            "\n"
            "options:\n"
            "  --config FILE   read keys from FILE\n"
            "  --print-config  print the resolved configuration and exit without training\n"
            "  --print-flops-per-token  print the model FLOPs per trained token and exit\n"
            "  -h, --help      show this help\n"
            "\n"
            "keys (name, type, default, meaning):\n");
    config_print_help(out);
    fprintf(out, "\nKeys marked [fixed on resume] must match the checkpoint when a run resumes.\n");
}

int train_open_data(const Config *cfg, TokenSet *train, TokenSet *val) {
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (data_open_set(cfg->train_files, train) != 0) return ct_fail_prefix("train_files");
    if (train->vocab_size != cfg->vocab_size) {
        ct_fail("train_files: the data's vocab_size is %lld (%s) but the configuration says vocab_size = %lld",
                (long long)train->vocab_size, train->files[0].path, (long long)cfg->vocab_size);
        data_free_set(train);
        return -1;
    }
    int64_t step_tokens = cfg->grad_accum_slots * (config_local_tokens(cfg) + 1);
    if (train->total_tokens < step_tokens) {
        ct_fail("train_files '%s' hold %lld tokens, fewer than one optimizer step needs "
                "(grad_accum_slots * (train_batch_tokens / grad_accum_slots + 1) = %lld)",
                cfg->train_files, (long long)train->total_tokens, (long long)step_tokens);
        data_free_set(train);
        return -1;
    }
    if (cfg->val_files[0]) {
        if (data_open_set(cfg->val_files, val) != 0) {
            data_free_set(train);
            return ct_fail_prefix("val_files");
        }
        if (val->vocab_size != cfg->vocab_size) {
            ct_fail("val_files: the data's vocab_size is %lld (%s) but the configuration says vocab_size = %lld",
                    (long long)val->vocab_size, val->files[0].path, (long long)cfg->vocab_size);
            data_free_set(train);
            data_free_set(val);
            return -1;
        }
        if (val->total_tokens < cfg->train_seq_len + 1) {
            ct_fail("val_files '%s' hold %lld tokens, fewer than one sequence of train_seq_len + 1 = %lld",
                    cfg->val_files, (long long)val->total_tokens, (long long)cfg->train_seq_len + 1);
            data_free_set(train);
            data_free_set(val);
            return -1;
        }
    }
    return 0;
}

int train_main(int argc, char **argv) {
    Config cfg;
    config_init(&cfg);
    int print_only = 0;
    int rc = CT_EXIT_USAGE;
    /* Options first, then key=value pairs; a --config anywhere is read before the pairs so the
     * command line always wins. */
    const char *config_path = NULL;
    char **pairs = ct_calloc((size_t)argc, sizeof(char *), "arguments");
    int num_pairs = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            train_usage(stdout);
            rc = CT_EXIT_OK;
            goto done;
        } else if (!strcmp(a, "--config") || !strcmp(a, "-c")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrain: error: --config needs a file name\n");
                goto done;
            }
            config_path = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            config_path = a + 9;
        } else if (!strcmp(a, "--help-markdown")) {
            /* Generates docs/configuration.md's key tables (make docs; checked by tests/cli/test_docs.sh). */
            config_print_markdown(stdout);
            rc = CT_EXIT_OK;
            goto done;
        } else if (!strcmp(a, "--print-flops-per-token")) {
            print_only = 2;
        } else if (!strcmp(a, "--print-config")) {
            print_only = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "ctrain: error: unknown option '%s' (see `ctrain train --help`)\n", a);
            goto done;
        } else {
            pairs[num_pairs++] = argv[i];
        }
    }
    if (config_path && config_load_file(&cfg, config_path) != 0) {
        ct_print_error();
        goto done;
    }
    if (config_apply_args(&cfg, num_pairs, pairs) != 0 || config_validate(&cfg, 1) != 0) {
        ct_print_error();
        goto done;
    }
    if (print_only == 1) {
        config_write(&cfg, stdout);
        rc = CT_EXIT_OK;
        goto done;
    }
    if (print_only == 2) { /* for benchmarks: model FLOPs per trained token (docs/model.md) */
        ModelSpec spec;
        if (model_spec_init(&spec, &cfg) != 0) {
            ct_print_error();
            goto done;
        }
        printf("%.0f\n", model_train_flops_per_token(&spec, (int)cfg.train_seq_len));
        model_spec_free(&spec);
        rc = CT_EXIT_OK;
        goto done;
    }
    rc = train_run(&cfg);
done:
    free(pairs);
    config_free(&cfg);
    return rc;
}
