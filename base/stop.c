/* stop.c — signal handlers that turn TERM / INT / stop_signal into a stop request, and the
 * Slurm job end time for stop_before_job_end. */
#include "stop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static volatile sig_atomic_t requested_signal;
static struct timespec requested_at; /* set before requested_signal, read after it */
static volatile sig_atomic_t interrupts;
static volatile sig_atomic_t continues;

static void on_continue(int sig) {
    (void)sig;
    continues++;
}

static const struct { const char *name; int number; } known_signals[] = {
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"INT", SIGINT},
    {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU}, {"ALRM", SIGALRM},
};

int stop_signal_number(const char *name) {
    if (!strncasecmp(name, "SIG", 3)) name += 3;
    for (size_t i = 0; i < sizeof known_signals / sizeof known_signals[0]; i++)
        if (!strcasecmp(name, known_signals[i].name)) return known_signals[i].number;
    return -1;
}

static void on_signal(int sig) {
    if (sig == SIGINT && ++interrupts >= 2) {
        /* A second Ctrl-C means "now": no checkpoint, the previous one stays valid. */
        static const char msg[] = "\nctrain: second interrupt, aborting without a checkpoint\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(130);
    }
    if (sig == SIGINT && isatty(STDERR_FILENO)) {
        /* at once, not at the end of a step that may take seconds (write is async-signal-safe) */
        static const char msg[] = "\nctrain: interrupt: stopping after this step with a checkpoint (exit 75); "
                                  "Ctrl-C again to abort without one\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
    }
    if (!requested_signal) {
        clock_gettime(CLOCK_MONOTONIC, &requested_at); /* async-signal-safe */
        requested_signal = sig;
    }
}

int stop_install(const char *stop_signal) {
    int extra = stop_signal_number(stop_signal);
    if (extra < 0) return ct_fail("stop_signal = '%s' is not a signal ctrain can wait for", stop_signal);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes in flight finish normally */
    int sigs[] = {SIGTERM, SIGINT, extra};
    for (size_t i = 0; i < 3; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) return ct_fail("cannot install a handler for signal %d", sigs[i]);
    sa.sa_handler = on_continue;
    if (sigaction(SIGCONT, &sa, NULL) != 0) return ct_fail("cannot install a handler for SIGCONT");
    return 0;
}

int stop_requested(void) { return requested_signal; }

double stop_requested_ms(void) {
    return requested_signal ? (double)requested_at.tv_sec * 1e3 + (double)requested_at.tv_nsec * 1e-6 : 0;
}

int stop_continues(void) { return continues; }

static int abandoned;

int stop_abandon(const char *what) {
    abandoned = 1;
    return ct_fail("stopped by a signal during %s", what);
}

int stop_abandoned(void) { return abandoned; }

void stop_abandon_undo(void) { abandoned = 0; }

/* scontrol talks to the controller, which can hang: the run must not wait on it for long. */
#define SCONTROL_TIMEOUT_S 10

double stop_slurm_job_end_time(char *why, size_t cap) {
    const char *job = getenv("SLURM_JOB_ID");
    if (!job || !*job) {
        snprintf(why, cap, "not under Slurm: SLURM_JOB_ID is not set");
        return 0;
    }
    for (const char *p = job; *p; p++)
        if (*p < '0' || *p > '9') { /* never pass anything but a number to the shell */
            snprintf(why, cap, "SLURM_JOB_ID '%.40s' is not a job number", job);
            return 0;
        }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "timeout -k 2 %d scontrol show job -o %s 2>/dev/null", SCONTROL_TIMEOUT_S, job);
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(why, cap, "cannot run scontrol");
        return 0;
    }
    /* the whole output: one line per job, as long as its fields (a long Comment= or name) make it */
    size_t len = 0, size = 16384;
    char *text = ct_malloc(size, "scontrol output");
    for (;;) {
        if (len == size - 1) { /* full: grow, up to 64 MB */
            char *grown = size < ((size_t)64 << 20) ? realloc(text, 2 * size) : NULL;
            if (!grown) break;
            text = grown;
            size *= 2;
        }
        size_t got = fread(text + len, 1, size - 1 - len, f);
        if (got == 0) break;
        len += got;
    }
    text[len] = '\0';
    int status = pclose(f);
    double end = 0;
    /* the value after "EndTime=", a field of the line (after a space, or the line's start) */
    const char *e = strstr(text, " EndTime=");
    const char *value = e ? e + 9 : !strncmp(text, "EndTime=", 8) ? text + 8 : NULL;
    if (WIFEXITED(status) && (WEXITSTATUS(status) == 124 || WEXITSTATUS(status) == 137))
        snprintf(why, cap, "scontrol show job %s did not answer within %d s", job, SCONTROL_TIMEOUT_S);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        snprintf(why, cap, "scontrol or timeout(1) is not installed here");
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        snprintf(why, cap, "scontrol show job %s failed (exit status %d)", job,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    else if (!value)
        snprintf(why, cap, "scontrol's output for job %s has no EndTime", job);
    else {
        struct tm tm;
        memset(&tm, 0, sizeof tm);
        if (strptime(value, "%Y-%m-%dT%H:%M:%S", &tm)) {
            tm.tm_isdst = -1;
            end = (double)mktime(&tm); /* scontrol prints local time */
        }
        if (end <= 0) snprintf(why, cap, "job %s has no end time (EndTime=%.20s)", job, value);
    }
    free(text);
    return end > 0 ? end : 0;
}
