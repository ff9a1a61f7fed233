/* stop.h — stopping on request: SIGTERM, SIGINT and the configured stop_signal only set a flag;
 * the training loop finishes the current optimizer step, writes a checkpoint and exits 75
 * (EX_TEMPFAIL, "checkpointed, requeue me"). A second SIGINT aborts at once. Also the
 * job-end deadline read from Slurm for stop_before_job_end. */
#ifndef CT_STOP_H
#define CT_STOP_H

#include <stddef.h>

/* Signal number for a name such as "USR1" or "SIGUSR1"; -1 if not one we accept. */
int stop_signal_number(const char *name);

/* Install the handlers (idempotent). */
int stop_install(const char *stop_signal);

/* The signal that asked to stop (0 if none yet). Async-signal-safe to read. */
int stop_requested(void);

/* When the first stop was asked for, on ct_now_ms's clock (CLOCK_MONOTONIC); 0 if none yet. */
double stop_requested_ms(void);

/* A stage of the work (a validation, the artifact) that gave up because a stop was asked for:
 * fails with "stopped by a signal during WHAT" and remembers that the failure is a stop, so the
 * caller ends with exit 75 (its work left recorded) instead of 1. Returns -1. */
int stop_abandon(const char *what);
/* 1 after stop_abandon: the latest failure was a stop, not an error. */
int stop_abandoned(void);
/* The latest failure is an error after all (another rank's, which outranks a stop: dist.h's
 * dist_agree): stop_abandoned() is 0 again. */
void stop_abandon_undo(void);

/* How many times the process was continued (SIGCONT) after being stopped, e.g. by Slurm's
 * suspend (SIGSTOP ... SIGCONT): a change across a step means the step's wall time holds a
 * suspension. */
int stop_continues(void);

/* Unix time (seconds) at which the Slurm job this process runs in ends, from
 * `scontrol show job -o $SLURM_JOB_ID` (its whole output, however long; given 10 s at most, as a
 * hung controller must not hold the run); 0 when not under Slurm or no end is known, with the
 * reason in why. */
double stop_slurm_job_end_time(char *why, size_t cap);

#endif
