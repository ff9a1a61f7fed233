/* cli.h — the argument handling the `ctrain data` and `ctrain ckpt` command groups and `ctrain
 * eval` share: help flags, usage errors that say where the help is, options (with a value, or
 * flags), positional arguments, KEY=VALUE arguments, and dispatch of a group's subcommands. */
#ifndef CT_CLI_H
#define CT_CLI_H

#include "config.h"
#include "paths.h"

/* "-h" or "--help" */
int cli_is_help(const char *arg);

/* Prints "ctrain: error: <message>" and "(see `ctrain <group>[ <command>] --help`)" to stderr;
 * returns CT_EXIT_USAGE. command may be NULL (an error about the group itself). */
int cli_usage_error(const char *group, const char *command, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* One option of a subcommand: either `value` is set from "--name VALUE" or "--name=VALUE", or
 * `flag` is set to 1 by a bare "--name". */
typedef struct {
    const char *name;
    const char **value;
    int *flag;
} CliOption;

/* cli_parse's result when it printed the usage because of -h/--help (the command exits 0). */
#define CLI_HELP_SHOWN (-1)

/* Splits argv (argv[0] is the subcommand's name) into the given options and the positional
 * arguments ("--" ends the options; "-" is positional). *positional is allocated in every case
 * (the caller frees it). Returns 0, CLI_HELP_SHOWN after printing usage to stdout, or
 * CT_EXIT_USAGE after printing what is wrong (unknown option, option without its value). */
int cli_parse(const char *group, int argc, char **argv, const char *usage, const CliOption *options, int num_options,
              char ***positional, int *num_positional);

/* A command that writes files refuses, with a usage error naming both paths (CT_EXIT_USAGE), an
 * output that is one of the files it reads or another of its outputs (by identity: paths.h's
 * ct_check_outputs, so also through links and other spellings of the path), or that lies in a
 * folder named checkpoints/, where a resume would take it for a checkpoint; returns 0
 * otherwise. Called before anything is written, so a refused command leaves every file as it
 * was. inputs lists every file the command reads: the checkpoint, the data files it names or
 * the command line gives, a tokenizer, a config file. */
/* For a command that writes files for a while (data import-bin, from-text): SIGTERM, SIGINT and
 * SIGUSR1 (Slurm's usual warning signal) ask it to stop, so that it removes its partial file and
 * exits 75 instead of dying with a half-written .tmp left behind; CTRAIN_FAULT's import points
 * are read too. 0, or -1 with the error set. */
int cli_catch_stops(void);

int cli_check_outputs(const char *group, const char *command, const CtPathList *outputs, const CtPathList *inputs);

/* Which configuration keys a command's KEY=VALUE arguments may set (`ctrain eval`: the
 * evaluation's; `ckpt golf` / `ckpt hessians`: the artifact's): allowed(k) accepts a key; refused
 * says what a key it refuses is not ("not an evaluation key"); only says which keys may be given
 * and where they are described ("only the ... may be given here (docs/configuration.md)"). */
typedef struct {
    int (*allowed)(const ConfigKey *k);
    const char *refused, *only;
} CliKeyRule;

/* args[0..n), each KEY=VALUE naming a key the rule allows; with cfg, each is also set there
 * (config_set, from the command line), in order. Returns 0, or CT_EXIT_USAGE after printing what
 * is wrong: an argument without '=', an unknown key, a key the rule refuses (a usage error naming
 * the argument), or config_set's error (a bad value). */
int cli_set_keys(const char *group, const char *command, const CliKeyRule *rule, char **args, int n, Config *cfg);

/* One subcommand of a group: its name and its main (argv[0] is the subcommand's name). */
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
} CliCommand;

/* argv[0] is the group's name: runs the subcommand named by argv[1]. No subcommand: usage to
 * stderr, exit code 2; help / -h / --help: usage to stdout, 0; an unknown name: an error that
 * lists the known ones, 2. */
int cli_dispatch(const char *group, int argc, char **argv, const char *usage, const CliCommand *commands,
                 int num_commands);

#endif
