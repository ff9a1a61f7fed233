/* cli.c — argument handling shared by the `ctrain data`, `ctrain ckpt` and `ctrain eval` commands
 * (cli.h). */
#include "cli.h"

#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fault.h"
#include "paths.h"
#include "stop.h"

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int cli_usage_error(const char *group, const char *command, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ctrain: error: %s\n(see `ctrain %s%s%s --help`)\n", message, group, command ? " " : "",
            command ? command : "");
    return CT_EXIT_USAGE;
}

/* Whether the folder `path` is written into is named checkpoints (by its real path where it
 * exists, so a link to a run's checkpoints/ counts too). */
static int in_checkpoints_folder(const char *path) {
    char copy[PATH_MAX], real[PATH_MAX];
    if (snprintf(copy, sizeof copy, "%s", path) >= (int)sizeof copy) return 0;
    const char *dir = dirname(copy);
    if (realpath(dir, real)) dir = real;
    const char *base = strrchr(dir, '/');
    return !strcmp(base ? base + 1 : dir, "checkpoints");
}

int cli_check_outputs(const char *group, const char *command, const CtPathList *outputs, const CtPathList *inputs) {
    if (ct_check_outputs(outputs, inputs) != 0) return cli_usage_error(group, command, "%s", ct_error());
    for (int o = 0; o < outputs->count; o++)
        if (in_checkpoints_folder(outputs->items[o].path))
            return cli_usage_error(group, command,
                                   "%s '%s' lies in a checkpoints/ folder, where a resume would take it for a "
                                   "checkpoint; give a path outside it",
                                   outputs->items[o].role, outputs->items[o].path);
    return 0;
}

/* Whether argv[*i] is `option`: 1 (and its value taken, advancing *i past a separate value),
 * 0 if it is another argument, -1 if the value is missing. */
static int take_option(int argc, char **argv, int *i, const CliOption *option) {
    const char *arg = argv[*i];
    if (option->flag) {
        if (strcmp(arg, option->name) != 0) return 0;
        *option->flag = 1;
        return 1;
    }
    size_t n = strlen(option->name);
    if (strncmp(arg, option->name, n) != 0) return 0;
    if (arg[n] == '=') {
        *option->value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *option->value = argv[++*i];
    return 1;
}

int cli_parse(const char *group, int argc, char **argv, const char *usage, const CliOption *options, int num_options,
              char ***positional, int *num_positional) {
    const char *command = argv[0];
    *positional = ct_calloc((size_t)argc + 1, sizeof **positional, "argument list");
    *num_positional = 0;
    int options_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (options_done || arg[0] != '-' || !strcmp(arg, "-")) {
            (*positional)[(*num_positional)++] = argv[i];
            continue;
        }
        if (!strcmp(arg, "--")) {
            options_done = 1;
            continue;
        }
        if (cli_is_help(arg)) {
            fputs(usage, stdout);
            return CLI_HELP_SHOWN;
        }
        int matched = 0;
        for (int k = 0; k < num_options && !matched; k++) {
            matched = take_option(argc, argv, &i, &options[k]);
            if (matched < 0) return cli_usage_error(group, command, "option %s needs a value", options[k].name);
        }
        if (!matched) return cli_usage_error(group, command, "unknown option '%s'", arg);
    }
    return 0;
}

int cli_set_keys(const char *group, const char *command, const CliKeyRule *rule, char **args, int n, Config *cfg) {
    for (int i = 0; i < n; i++) {
        const char *eq = strchr(args[i], '=');
        if (!eq) return cli_usage_error(group, command, "'%s': give one checkpoint, then KEY=VALUE arguments", args[i]);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(eq - args[i]), args[i]);
        const ConfigKey *k = config_find_key(key);
        if (!k || !rule->allowed(k))
            return cli_usage_error(group, command, "'%s': %s; %s", args[i], k ? rule->refused : "no such configuration key",
                                   rule->only);
        if (cfg && config_set(cfg, key, eq + 1, CT_SOURCE_COMMAND_LINE, "the command line") != 0) {
            ct_print_error();
            return CT_EXIT_USAGE;
        }
    }
    return 0;
}

int cli_dispatch(const char *group, int argc, char **argv, const char *usage, const CliCommand *commands,
                 int num_commands) {
    if (argc < 2) {
        fputs(usage, stderr);
        return CT_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (cli_is_help(name) || !strcmp(name, "help")) {
        fputs(usage, stdout);
        return CT_EXIT_OK;
    }
    for (int i = 0; i < num_commands; i++)
        if (!strcmp(name, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    char known[256] = "";
    for (int i = 0; i < num_commands; i++) {
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", i == 0 ? "" : i + 1 == num_commands ? " or " : ", ",
                 commands[i].name);
    }
    return cli_usage_error(group, NULL, "unknown %s command '%s' (expected %s)", group, name, known);
}

int cli_catch_stops(void) { return stop_install("USR1") != 0 || fault_init(0) != 0 ? -1 : 0; }
