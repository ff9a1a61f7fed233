/* omp_wait.c — how ctrain's OpenMP threads wait between parallel regions. libgomp's threads spin
 * (about a millisecond by default) before they sleep. On cores of their own that is free speed;
 * on cores shared with other busy processes the spinning threads take the time the other threads
 * of the same step need. Measured by tests/bench/wait_policy.sh (docs/performance.md, "Waiting
 * threads"): 20 steps of the demo model on 2 cores took 5.1 s idle with libgomp's default and
 * 7.6 s with OMP_WAIT_POLICY=passive (sleep at once; a sample 1.08 s instead of 0.40 s), but
 * beside 2 busy processes 26.7 s with the default and 14.5 s passive; a shorter spin
 * (GOMP_SPINCOUNT=10000) changed neither. So the choice depends on the machine, and ctrain
 * makes it at start: the default where the process has cores of its own (its CPU affinity is
 * narrower than the machine: Slurm's --cpus-per-task, taskset) or the machine is quiet (fewer
 * other processes running than half the cores), passive where it shares a busy machine. A setting of the
 * user's (OMP_WAIT_POLICY, GOMP_SPINCOUNT) is left alone. libgomp reads it only when it loads,
 * before main, so choosing passive means starting again (as blas_core.c does). */
#include "omp_wait.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Set in the environment of the second start: why ctrain chose passive. */
#define CHOSEN_MARK "CTRAIN_OMP_WAIT_CHOSEN"

static int set_by_user(const char *name) {
    const char *v = getenv(name);
    return v && *v;
}

/* Other processes ready to run now: /proc/stat's procs_running less this one, the least of three
 * looks a millisecond apart, so that only sustained work counts (CTRAIN_TEST_BUSY pretends a
 * count, for the tests); -1 if unknown. The load average would be a poor measure: it remembers
 * the last minute, e.g. the previous run of a script that starts ctrain again and again. */
static int others_running(void) {
    const char *pretend = getenv("CTRAIN_TEST_BUSY");
    if (pretend && *pretend) return atoi(pretend);
    int least = -1;
    for (int look = 0; look < 3; look++) {
        if (look) usleep(1000);
        FILE *f = fopen("/proc/stat", "r");
        if (!f) return -1;
        char line[256];
        int running = -1;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "procs_running %d", &running) == 1) break;
        fclose(f);
        if (running < 1) return -1;
        if (least < 0 || running - 1 < least) least = running - 1;
    }
    return least;
}

int omp_wait_choose(void) {
    if (getenv(CHOSEN_MARK) || set_by_user("OMP_WAIT_POLICY") || set_by_user("GOMP_SPINCOUNT")) return 0;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    if (online < 1 || sched_getaffinity(0, sizeof mask, &mask) != 0) return 0;
    if (CPU_COUNT(&mask) < online) return 0; /* cores of its own */
    const int others = others_running();
    if (others < 0 || 2 * others < online) return 0; /* quiet (or unknown) */
    char why[96];
    snprintf(why, sizeof why, "%d other process%s running on %ld cores", others, others == 1 ? "" : "es", online);
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0 || setenv(CHOSEN_MARK, why, 1) != 0) return 0;
    return 1;
}

void omp_wait_restart(char **argv) {
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");
    unsetenv(CHOSEN_MARK);
}

const char *omp_wait_describe(char *buf, size_t cap) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT"), *why = getenv(CHOSEN_MARK);
    if (why)
        snprintf(buf, cap, "OMP_WAIT_POLICY=passive, chosen by ctrain: %s", why);
    else if (policy && *policy && spin && *spin)
        snprintf(buf, cap, "OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s, yours", policy, spin);
    else if (policy && *policy)
        snprintf(buf, cap, "OMP_WAIT_POLICY=%s, yours", policy);
    else if (spin && *spin)
        snprintf(buf, cap, "GOMP_SPINCOUNT=%s, yours", spin);
    else
        snprintf(buf, cap, "OpenMP's default, spinning briefly");
    return buf;
}
