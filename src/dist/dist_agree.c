/* dist_agree.c — the ranks' agreement on how a piece of work went (dist.h's dist_agree): every
 * rank gives its outcome, one allreduce-max decides, and on an error the lowest failing rank's
 * message is broadcast, so that every rank fails at the same point for the same reason instead
 * of some waiting in the next collective for a rank that has left. */
#include <stdio.h>

#include "common.h"
#include "dist.h"
#include "stop.h"

/* stops: whether a stop (stop.h) ends the work too, or is left to the caller. */
static int agree(const DistInfo *d, int rc, int stops, const char *what) {
    /* this rank's own failure was a stop (stop_abandon) rather than an error */
    const int stopped = !stops ? 0 : rc != 0 ? stop_abandoned() : stop_requested() != 0;
    if (d->world_size <= 1) return rc != 0 ? -1 : stopped ? stop_abandon(what) : 0;
    /* 0: go on; 1: a stop; 1 + world - rank: an error on rank (the lowest failing rank's is the
     * largest, and any error is above any stop: an error wins) */
    int v = rc == 0 || stopped ? stopped : 1 + d->world_size - d->rank;
    if (dist_allreduce_max_i32(d, &v) != 0) return -1;
    if (v == 0) return 0;
    if (v == 1) return rc != 0 ? -1 : stop_abandon(what);
    const int from = d->world_size + 1 - v;
    char error[2048];
    snprintf(error, sizeof error, "%s", ct_error());
    if (dist_bcast(d, error, sizeof error, from) != 0) return -1;
    if (rc != 0 && !stopped) return -1; /* a failing rank keeps its own message */
    /* this rank stopped, or was asked to: the error outranks it, so it ends as the others do
     * (exit 1, not 75) */
    if (stopped) stop_abandon_undo();
    return ct_fail("rank %d failed during %s: %s", from, what, error);
}

int dist_agree(const DistInfo *d, int rc, const char *what) { return agree(d, rc, 1, what); }

int dist_agree_errors(const DistInfo *d, int rc, const char *what) { return agree(d, rc, 0, what); }
