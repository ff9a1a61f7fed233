/* isolate.h — run a check in a child process, so that a crash or a hang inside a library
 * (HDF5 reading damaged metadata can segfault or loop) becomes an ordinary failure with a
 * message instead of taking the caller down.
 *
 * The child is a fork() of the caller: it sees the same memory, runs fn, sends back fn's
 * result, its ct_error() message and up to out_cap bytes of out through a pipe, and leaves with
 * _exit (no exit handlers). Fork only where no other thread can hold a lock the child needs:
 * the callers run it before the loader's prefetch thread starts, and never with the HDF5 lock
 * held. */
#ifndef CT_ISOLATE_H
#define CT_ISOLATE_H

#include <stddef.h>

/* Run fn(ctx, out) in a child and wait up to timeout_s seconds (<= 0: forever). Returns fn's
 * result (0, or -1 with fn's message in ct_error(); out filled as fn left it), or -1 with
 * "WHAT crashed (signal 11, Segmentation fault)" / "WHAT did not finish within S s (pid P,
 * stopped when killed)" (the child's state from /proc: running, sleeping, disk wait, stopped...)
 * / the reason the child could not be started. */
int ct_run_isolated(const char *what, int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_cap,
                    double timeout_s);

/* The same in two halves, so the caller can go on while the child works (the background
 * checkpoint writer): ct_child_start forks and returns at once (child_init, if given, runs in
 * the child before fn: e.g. to reset a lock the forking thread held); ct_child_finish waits for
 * the child and gives what ct_run_isolated would have returned. Every started child must be
 * finished exactly once. A child is killed when its parent dies (PR_SET_PDEATHSIG). */
typedef struct {
    int pid; /* 0: none running */
    int fd;
    /* > 0: a stop signal (stop_requested) during ct_child_finish cuts the wait to at most this
     * many more seconds (the writer's wait must not outlast the job's grace period) */
    double stop_grace_s;
} CtChild;
int ct_child_start(CtChild *child, const char *what, int (*fn)(void *ctx, void *out), void *ctx, void *out,
                   size_t out_cap, void (*child_init)(void));
int ct_child_finish(CtChild *child, const char *what, void *out, size_t out_cap, double timeout_s);

#endif
