/* common.h — error reporting, exit codes and small helpers shared by every part of ctrain.
 *
 * Error convention (as in SQLite/Redis): a function that can fail returns int, 0 on success
 * and -1 on failure, after recording a message with ct_fail(). The message names what failed
 * (file, key, value, what was expected). The caller either adds context with ct_fail_prefix()
 * and returns -1 again, or prints ct_error() and exits with the matching exit code. */
#ifndef CT_COMMON_H
#define CT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CT_VERSION "0.1.0"

/* Process exit codes, documented in docs/cli.md. 75 is EX_TEMPFAIL: "checkpointed, requeue me". */
enum {
    CT_EXIT_OK = 0,
    CT_EXIT_FAILURE = 1,
    CT_EXIT_USAGE = 2,
    CT_EXIT_REQUEUE = 75,
};

/* Record an error message (printf-style) for the calling thread; always returns -1. */
int ct_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prepend context to the current message ("reading x.h5: <old message>"); returns -1. */
int ct_fail_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The calling thread's last error message ("" if none). */
const char *ct_error(void);
/* Clear the calling thread's error message. */
void ct_error_clear(void);

/* Print "ctrain: error: <message>" to stderr. */
void ct_print_error(void);

/* Allocation that cannot fail silently: on out-of-memory it prints what it was allocating and
 * exits with CT_EXIT_FAILURE (there is nothing sensible to recover at that point). */
void *ct_malloc(size_t bytes, const char *what);
void *ct_calloc(size_t count, size_t size, const char *what);
char *ct_strdup(const char *s);
/* open_memstream(text, size) that cannot fail silently, as ct_malloc (what: for the message). */
FILE *ct_open_memstream(char **text, size_t *size, const char *what);

/* "NaN", "+Inf" or "-Inf" for a non-finite value (messages about diverged values); "finite"
 * otherwise. */
const char *ct_nonfinite_name(double v);

/* Monotonic wall clock in milliseconds. */
double ct_now_ms(void);

/* Parse a whole string as a signed 64-bit integer / double; returns -1 (no message) if the
 * string is empty, has trailing garbage or is out of range. Accepts 524_288 style underscores
 * like Python literals. */
int ct_parse_int64(const char *s, int64_t *out);
int ct_parse_double(const char *s, double *out);

/* An environment variable holding a whole non-negative decimal that fits an int (digits only:
 * no sign, no spaces); returns -1 (no message) if it is unset, empty or anything else. */
int ct_env_nonneg_int(const char *name, int *out);

/* Whether ranks may share a GPU: NCCL_MULTI_RANK_GPU_ENABLE set to a non-zero number, as NCCL
 * (2.30 and later; experimental there) reads it. Without it the GPU choice and the placement
 * check refuse two ranks on one GPU; with it they allow up to CT_MAX_RANKS_PER_GPU, the number
 * NCCL documents for its default configuration (more exhaust the GPU and hang NCCL). */
#define CT_MULTI_RANK_GPU_VAR "NCCL_MULTI_RANK_GPU_ENABLE"
#define CT_MAX_RANKS_PER_GPU 2
int ct_ranks_may_share_gpu(void);

/* Create a directory and its parents (mkdir -p); returns -1 with a message on failure. */
int ct_mkdir_p(const char *path);
/* Create the folder a file path lies in (and its parents), if it has one and it is missing:
 * every command that writes a file makes its folder, as `data import-bin` always did. */
int ct_mkdir_parent(const char *file_path);

/* fopen for a run's own files in out_dir (metrics.jsonl and its temporary copy): never through a
 * symbolic link, so that a link planted there cannot make ctrain truncate or write a file
 * elsewhere. mode: "r", "w" (create or truncate) or "a" (create or append). NULL with errno set on
 * failure; ct_open_error(errno) says why (for ELOOP: that the path is a link). */
FILE *ct_fopen_nofollow(const char *path, const char *mode);
const char *ct_open_error(int err);

/* For printing a string read from a file: s itself when at most 200 bytes, else its first 160
 * bytes and "... (N bytes in all)" in buf (cap >= 200), so that a 100 MB attribute cannot
 * flood the output. */
const char *ct_shorten(const char *s, char *buf, size_t cap);

/* True when stderr is a terminal (progress bars are drawn only then). */
int ct_stderr_is_tty(void);

#endif
