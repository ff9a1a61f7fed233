/* progress.h — a one-line progress bar for long conversions and scans. It is drawn on stderr
 * only when stderr is a terminal, so batch job logs (Slurm output files) never fill with
 * carriage-return redraws; elsewhere every call is a cheap no-op. */
#ifndef CT_PROGRESS_H
#define CT_PROGRESS_H

#include <stdint.h>

typedef struct {
    char label[96];
    const char *unit; /* "tokens", "bytes", ... */
    int64_t total;
    int enabled;
    double start_ms, last_draw_ms;
} Progress;

/* Start a bar for `total` units (total <= 0: show only the count). */
void progress_begin(Progress *p, const char *label, const char *unit, int64_t total);
/* Report `done` units so far; redraws at most ten times a second. */
void progress_update(Progress *p, int64_t done);
/* Erase the bar, leaving the line for the caller's own summary. */
void progress_end(Progress *p);

#endif
