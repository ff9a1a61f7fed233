/* plot_cmd.c — `ctrain plot RUN_DIR... [--out FILE.png] [--x step|tokens]`: training curves of
 * runs as a PNG. The figure is made by scripts/plot_runs.py with matplotlib (the plotting
 * library users of these trainers know; drawing PNGs in C would be a poorer copy of it), found
 * next to the ctrain executable; this file finds it and Python, runs it and turns its failures
 * into ctrain's error lines. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "common.h"

static const char PLOT_USAGE[] =
    "usage: ctrain plot RUN_DIR... [--out FILE.png] [--x step|tokens]\n"
    "\n"
    "Draw the training curves of one or more runs (each an out_dir of `ctrain train`) from their\n"
    "metrics.jsonl into one PNG: train loss with val_loss, val_bpb, the learning-rate scale and the\n"
    "step time, one colour per run. Prints a summary line per run and the path of the figure.\n"
    "Needs Python 3 with matplotlib (Debian: python3-matplotlib, which scripts/install-deps.sh\n"
    "installs); CTRAIN_PYTHON names another interpreter.\n"
    "\n"
    "options:\n"
    "  --out FILE    the PNG to write (default: RUN_DIR/loss.png for one run, loss.png for several)\n"
    "  --x AXIS      step (default) or tokens (steps times train_batch_tokens from config.txt)\n"
    "  -h, --help    show this help\n";

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* scripts/plot_runs.py beside the executable: build/ctrain in a checkout, or a bundle's ctrain. */
static int find_script(char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return ct_fail("plot: cannot find the ctrain executable (/proc/self/exe): %s", strerror(errno));
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    static const char *const places[] = {"%s/../scripts/plot_runs.py", "%s/scripts/plot_runs.py"};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        snprintf(out, cap, places[i], exe);
        if (is_file(out)) return 0;
    }
    return ct_fail("plot: scripts/plot_runs.py is not next to the ctrain executable in %s (run ctrain from its "
                   "checkout or bundle)", exe);
}

/* $CTRAIN_PYTHON, else Debian's /usr/bin/python3 (where python3-matplotlib installs), else
 * python3 on PATH. */
static const char *python(void) {
    const char *p = getenv("CTRAIN_PYTHON");
    if (p && *p) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

int plot_main(int argc, char **argv) {
    char **runs;
    const char *out = NULL, *x = "step";
    const CliOption options[] = {{"--out", &out, NULL}, {"--x", &x, NULL}};
    int nruns, rc = cli_parse("plot", argc, argv, PLOT_USAGE, options, 2, &runs, &nruns);
    if (rc != 0 || nruns == 0 || (strcmp(x, "step") && strcmp(x, "tokens"))) {
        free(runs);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        if (rc) return rc;
        if (nruns == 0) return cli_usage_error("plot", NULL, "no run directory given");
        return cli_usage_error("plot", NULL, "--x '%s': expected step or tokens", x);
    }
    char script[PATH_MAX + 64], default_out[PATH_MAX];
    if (find_script(script, sizeof script) != 0) {
        free(runs);
        ct_print_error();
        return CT_EXIT_FAILURE;
    }
    if (!out) {
        if (nruns == 1) snprintf(default_out, sizeof default_out, "%s/loss.png", runs[0]);
        else snprintf(default_out, sizeof default_out, "loss.png");
        out = default_out;
    }
    /* the figure never over a run's metrics.jsonl or config.txt, which the script reads */
    CtPathList outputs = {0}, inputs = {0};
    ct_path_list_add(&outputs, "--out", "the figure's path", out);
    for (int i = 0; i < nruns; i++) {
        char file[PATH_MAX + 32];
        snprintf(file, sizeof file, "%s/metrics.jsonl", runs[i]);
        ct_path_list_add(&inputs, "RUN_DIR", "a run's metrics", file);
        snprintf(file, sizeof file, "%s/config.txt", runs[i]);
        ct_path_list_add(&inputs, "RUN_DIR", "a run's configuration", file);
    }
    rc = cli_check_outputs("plot", NULL, &outputs, &inputs);
    ct_path_list_free(&outputs);
    ct_path_list_free(&inputs);
    if (rc != 0) {
        free(runs);
        return rc;
    }
    const char **args = ct_calloc((size_t)nruns + 5, sizeof *args, "plot arguments");
    args[0] = python();
    args[1] = script;
    args[2] = out;
    args[3] = x;
    for (int i = 0; i < nruns; i++) args[4 + i] = runs[i];
    /* the script's stderr comes back through a pipe, to be told as ctrain's own error */
    int fds[2];
    if (pipe(fds) != 0) {
        free(args);
        free(runs);
        ct_fail("plot: cannot create a pipe: %s", strerror(errno));
        ct_print_error();
        return CT_EXIT_FAILURE;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execvp(args[0], (char *const *)args);
        fprintf(stderr, "error: cannot run '%s': %s (set CTRAIN_PYTHON to a Python 3 with matplotlib)\n", args[0],
                strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char err[4096];
    size_t used = 0;
    ssize_t got;
    while (used + 1 < sizeof err && (got = read(fds[0], err + used, sizeof err - 1 - used)) > 0) used += (size_t)got;
    err[used] = '\0';
    char drain[256];
    while (read(fds[0], drain, sizeof drain) > 0) {
    }
    close(fds[0]);
    int status = 0;
    if (pid < 0) ct_fail("plot: cannot start Python: %s", strerror(errno));
    else waitpid(pid, &status, 0);
    free(args);
    free(runs);
    if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return CT_EXIT_OK;
    if (pid > 0) {
        /* the script's "error: ..." line, else the last line Python printed (a traceback's) */
        char *msg = strstr(err, "error: ");
        if (msg) {
            msg += 7;
        } else {
            while (used > 0 && (err[used - 1] == '\n' || err[used - 1] == ' ')) err[--used] = '\0';
            msg = strrchr(err, '\n') ? strrchr(err, '\n') + 1 : err;
        }
        msg[strcspn(msg, "\n")] = '\0';
        ct_fail("plot: %s", *msg ? msg : "the plotting script failed without a message");
    }
    ct_print_error();
    return CT_EXIT_FAILURE;
}
