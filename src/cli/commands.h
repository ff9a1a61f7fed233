/* commands.h — the subcommands of `ctrain` that main.c dispatches to. Each takes argv with
 * argv[0] the command's name and returns the process exit code (common.h: 0, 1, 2, 75). */
#ifndef CT_COMMANDS_H
#define CT_COMMANDS_H

#include <stdio.h>

int train_main(int argc, char **argv);        /* train_cmd.c: `ctrain train` */
int data_main(int argc, char **argv);         /* data_cmd.c: `ctrain data ...` */
int data_info_main(int argc, char **argv);    /* data_info_cmd.c: `ctrain data info` */
int data_tokenize_main(int argc, char **argv); /* tokenize_cmd.c: `ctrain data tokenize` */
int data_detokenize_main(int argc, char **argv); /* tokenize_cmd.c: `ctrain data detokenize` */
int ckpt_main(int argc, char **argv);         /* ckpt_cmd.c: `ctrain ckpt ...` */
int launch_check_main(int argc, char **argv); /* launch_check_cmd.c: `ctrain launch-check` */
int plot_main(int argc, char **argv);         /* plot_cmd.c: `ctrain plot` */
int sample_main(int argc, char **argv);       /* sample_cmd.c: `ctrain sample` */
int eval_main(int argc, char **argv);         /* eval_cmd.c: `ctrain eval` */

/* data_cmd.c: what `ctrain data import-bin` does once its arguments are read; also DATA_PATH's
 * import in `ctrain train` (golf_import.c), so both make the same files. Prints its errors and
 * returns the exit code: 75 when a stop signal (stop.h, where installed) ended it. */
typedef struct {
    const char *out, *vocab_text, *bos_text, *tokenizer, *luts; /* the options; vocab_text NULL: unset */
    char *const *shards;
    int num_shards;
    int tokenizer_is_model;                  /* tokenizer names a SentencePiece model, not free text */
    const char *vocab_name, *tokenizer_name; /* how the user gave them, for messages ("--vocab-size") */
} ImportBinRequest;
int data_import_bin(const ImportBinRequest *r);

/* version.c: the version line and one line per optional part (compiled in or not, and
 * versions), for `ctrain --version`. */
void version_print(FILE *out);

#endif
