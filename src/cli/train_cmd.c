/* train_cmd.c — `ctrain train [--config FILE] [key=value ...]`: builds the configuration
 * (defaults < config files, in order < environment < command line), validates it before any work, checks that
 * no output of the run is one of its inputs (train_outputs.h), prints it and writes out_dir/config.txt, checks
 * the data, then runs training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "golf_env.h"
#include "model.h"
#include "stop.h"
#include "train.h"
#include "train_outputs.h"

static void train_usage(FILE *out) {
    fprintf(out,
            "usage: ctrain train [--config FILE] [key=value ...]\n"
            "\n"
            "Trains the parameter-golf GPT. Configuration comes from the defaults below, then FILE(s)\n"
            "(`key = value` lines, # comments), then environment variables named as the keys in\n"
            "upper case (train_gpt.py's: ITERATIONS=10 TRAIN_SEQ_LEN=64), then key=value\n"
            "arguments, which win. Keys may be spelled in upper case anywhere. train_gpt.py's\n"
            "DATA_PATH (a folder of fineweb_*.bin shards, imported once beside them),\n"
            "TOKENIZER_PATH and RUN_ID (out_dir runs/RUN_ID) work as there; without RUN_ID or\n"
            "out_dir, each DATA_PATH run starts a new run in a fresh runs/<id> (under Slurm, the\n"
            "job's id, so that a requeue resumes it), as train_gpt.py does.\n"
            "The resolved configuration is printed and written to out_dir/config.txt.\n"
            "\n"
            "options:\n"
            "  --config FILE   read keys from FILE; given more than once, the files are read in order\n"
            "                  and a later file's value wins\n"
            "  --print-config  print the resolved configuration and exit without training (after\n"
            "                  the run's check that none of its outputs is one of its inputs)\n"
            "  --world-size N  with --print-config: check it for N ranks (grad_accum_slots divisible;\n"
            "                  what slurm/submit --dry-run does before a job waits in the queue)\n"
            "  --print-flops-per-token  print the model FLOPs per trained token and exit\n"
            "  -h, --help      show this help\n"
            "\n"
            "keys (name, type, default, meaning):\n");
    config_print_help(out);
    fprintf(out, "\nKeys marked [fixed on resume] must match the checkpoint when a run resumes.\n");
}

/* After a refused configuration: which keys came from the environment, since a value the
 * user did not type on this command line (an exported ITERATIONS, TRAIN_SEQ_LEN) is easy to miss. */
static void print_env_keys(const Config *cfg) {
    int first = 1;
    for (int i = 0; i < ct_config_num_keys; i++) {
        if (cfg->source[i] != CT_SOURCE_ENV) continue;
        char env[128];
        config_env_origin(cfg, i, env, sizeof env);
        fprintf(stderr, "%s%s", first ? "ctrain: note: from the environment: " : ", ", env);
        first = 0;
    }
    if (!first) fprintf(stderr, "\n");
}

int train_main(int argc, char **argv) {
    Config cfg;
    config_init(&cfg);
    int print_only = 0;
    int64_t world_size = 1;
    int rc = CT_EXIT_USAGE;
    /* Options first, then key=value pairs; every --config, anywhere, is read before the pairs
     * so the command line always wins; several are applied in order, a later file winning. */
    const char **config_paths = ct_calloc((size_t)argc, sizeof(char *), "config files");
    int num_configs = 0;
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
            config_paths[num_configs++] = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            config_paths[num_configs++] = a + 9;
        } else if (!strcmp(a, "--help-markdown")) {
            /* Generates docs/configuration.md's key tables (make docs; checked by tests/cli/test_docs.sh). */
            config_print_markdown(stdout);
            rc = CT_EXIT_OK;
            goto done;
        } else if (!strcmp(a, "--print-flops-per-token")) {
            print_only = 2;
        } else if (!strcmp(a, "--print-config")) {
            print_only = 1;
        } else if (!strcmp(a, "--world-size")) {
            if (i + 1 >= argc || ct_parse_int64(argv[i + 1], &world_size) != 0 || world_size < 1 || world_size > 1 << 20) {
                fprintf(stderr, "ctrain: error: --world-size needs a number of ranks, 1 to 2^20 (got '%s')\n",
                        i + 1 < argc ? argv[i + 1] : "");
                goto done;
            }
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "ctrain: error: unknown option '%s' (see `ctrain train --help`)\n", a);
            goto done;
        } else {
            pairs[num_pairs++] = argv[i];
        }
    }
    for (int i = 0; i < num_configs; i++)
        if (config_load_file(&cfg, config_paths[i]) != 0) {
            ct_print_error();
            goto done;
        }
    if (config_apply_env(&cfg) != 0 || config_apply_args(&cfg, num_pairs, pairs) != 0 || golf_env_apply(&cfg) != 0) {
        ct_print_error();
        goto done;
    }
    if (world_size != 1 && print_only != 1) {
        fprintf(stderr, "ctrain: error: --world-size checks a configuration with --print-config; a run takes its "
                        "world size from its launcher (srun, mpiexec)\n");
        goto done;
    }
    if (config_validate(&cfg, (int)world_size) != 0) {
        ct_print_error();
        print_env_keys(&cfg);
        goto done;
    }
    if (print_only == 1) {
        /* the check the run makes before it writes anything, so that slurm/submit's pre-queue
         * --print-config refuses a colliding configuration instead of the job when it starts */
        if ((rc = train_check_outputs(&cfg, config_paths, num_configs)) != 0) goto done;
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
    if ((rc = train_check_outputs(&cfg, config_paths, num_configs)) != 0) goto done;
    if (golf_env_prepare_data(&cfg) != 0) {
        if (stop_requested()) /* stopped during the import (not an error): requeue */
            fprintf(stderr, "ctrain: %s\n", ct_error());
        else
            ct_print_error();
        rc = stop_requested() ? CT_EXIT_REQUEUE : CT_EXIT_FAILURE;
        goto done;
    }
    rc = train_run(&cfg);
done:
    free(pairs);
    free(config_paths);
    config_free(&cfg);
    return rc;
}
