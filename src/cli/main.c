/* main.c — the `ctrain` command: dispatches to its commands (train, data, ckpt, sample, plot,
 * launch-check, eval; each in src/cli/<name>_cmd.c, declared in commands.h) and handles --help /
 * --version. Exit codes: 0 success, 1 runtime failure, 2 usage or configuration
 * error, 75 stopped with a checkpoint (requeue). */
#include <stdio.h>
#include <string.h>

#include "blas_core.h"
#include "cli.h"
#include "commands.h"
#include "common.h"
#include "omp_wait.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: ctrain <command> [options]\n"
            "\n"
            "commands:\n"
            "  train [--config FILE] [key=value ...]   train a model (see `ctrain train --help`)\n"
            "  data <import-bin|from-text|info> ...     prepare and inspect HDF5 token data\n"
            "  ckpt <info|verify|diff|export|golf> ...  inspect, check and export HDF5 checkpoints\n"
            "  sample CHECKPOINT [--prompt TEXT] ...     generate text from a trained model\n"
            "  eval CHECKPOINT [--mode MODES] ...       evaluate a model: plain, sliding, test-time training\n"
            "  plot RUN_DIR... [--out FILE.png]         training curves of runs as a PNG (matplotlib)\n"
            "  launch-check [--timeout S]               check a multi-rank launch (srun/mpiexec)\n"
            "\n"
            "options:\n"
            "  -h, --help      show this help\n"
            "  -V, --version   show the version and the compiled-in parts\n"
            "\n"
            "exit codes: 0 success, 1 failure, 2 usage or configuration error,\n"
            "            75 stopped on request with a checkpoint written (requeue the job)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CT_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    /* the commands that multiply matrices on the CPU (and --version, which reports it) run with
     * the best OpenBLAS kernels for this CPU; the others start once, quickly */
    int uses_blas = !strcmp(cmd, "train") || !strcmp(cmd, "sample") || !strcmp(cmd, "eval") || !strcmp(cmd, "-V") ||
                    !strcmp(cmd, "--version") ||
                    !strcmp(cmd, "version") || (!strcmp(cmd, "ckpt") && argc > 2 && !strcmp(argv[2], "golf"));
    if (uses_blas) {
        const int restart = omp_wait_choose(); /* OpenMP reads its waiting policy only at start */
        cpu_blas_choose_core(argv);            /* starts again itself when it sets the BLAS core */
        if (restart) omp_wait_restart(argv);
    }
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) {
        usage(stdout);
        return CT_EXIT_OK;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        version_print(stdout);
        return CT_EXIT_OK;
    }
    if (!strcmp(cmd, "train")) return train_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "data")) return data_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return ckpt_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "launch-check")) return launch_check_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot")) return plot_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return sample_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return eval_main(argc - 1, argv + 1);
    fprintf(stderr, "ctrain: error: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return CT_EXIT_USAGE;
}
