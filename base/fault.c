/* fault.c — CTRAIN_FAULT parsing and the injection points (see fault.h). */
#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common.h"

enum { MAX_FAULTS = 16 };

typedef struct {
    int sig;           /* 0: ERR, an injected error (fault_error_stage) */
    int in_checkpoint; /* 1: ckpt:STEP, 0: STEP.MICRO, a stage or import */
    int in_import;     /* 1: import:TOKENS (step holds TOKENS) */
    char stage[16];    /* a named stage (fault_point_stage), "" otherwise */
    int any_step;      /* a stage given without :STEP */
    int64_t step;
    int micro;
} Fault;

static Fault faults[MAX_FAULTS];
static int num_faults;

/* A signal's number, or 0 for ERR (an error, not a signal); -1 for neither. */
static int parse_signal(const char *s, size_t n) {
    if (n == 3 && !strncasecmp(s, "ERR", 3)) return 0;
    static const struct { const char *name; int sig; } names[] = {
        {"TERM", SIGTERM}, {"INT", SIGINT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},
        {"STOP", SIGSTOP}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == n && !strncasecmp(s, names[i].name, n)) return names[i].sig;
    return -1;
}

int fault_init(int rank) {
    const char *spec = getenv("CTRAIN_FAULT");
    num_faults = 0;
    if (!spec || !*spec) return 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        /* "%R" at the end: this entry is for rank R only */
        char *only = strrchr(item, '%');
        if (only) {
            long long r;
            int used = 0;
            if (sscanf(only + 1, "%lld%n", &r, &used) != 1 || only[1 + used] != '\0')
                return ct_fail("CTRAIN_FAULT: bad rank in '%s'", item);
            *only = '\0';
            if (r != rank) continue;
        }
        char *at = strchr(item, '@');
        if (num_faults == MAX_FAULTS) return ct_fail("CTRAIN_FAULT: more than %d entries", MAX_FAULTS);
        Fault f = {0, 0, 0, "", 0, 0, 0};
        long long step = 0;
        int micro = 0, used = 0;
        if (!at || (f.sig = parse_signal(item, (size_t)(at - item))) < 0)
            return ct_fail("CTRAIN_FAULT: '%s' is not SIGNAL@STEP.MICRO, SIGNAL@ckpt:STEP, SIGNAL@STAGE[:STEP], "
                           "SIGNAL@import:TOKENS or ERR@STAGE[:STEP]", item);
        static const char *const stages[] = {"val", "ema_val", "artifact", "round_trip", "ttt", "ttt_global",
                                             "ttt_sgd", "resume", "calibration"};
        const char *name = at + 1;
        size_t name_len = strcspn(name, ":");
        int is_stage = 0;
        for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
            if (strlen(stages[i]) == name_len && !strncmp(name, stages[i], name_len)) is_stage = 1;
        if (!strncmp(at + 1, "import:", 7)) {
            f.in_import = 1;
            if (sscanf(at + 8, "%lld%n", &step, &used) != 1 || at[8 + used] != '\0' || step < 1)
                return ct_fail("CTRAIN_FAULT: bad token count in '%s'", item);
        } else if (is_stage) {
            snprintf(f.stage, sizeof f.stage, "%.*s", (int)name_len, name);
            f.any_step = name[name_len] == '\0';
            if (!f.any_step && (sscanf(name + name_len + 1, "%lld%n", &step, &used) != 1 ||
                                name[name_len + 1 + used] != '\0'))
                return ct_fail("CTRAIN_FAULT: bad stage step in '%s'", item);
        } else if (!strncmp(at + 1, "ckpt:", 5)) {
            f.in_checkpoint = 1;
            if (sscanf(at + 6, "%lld%n", &step, &used) != 1 || at[6 + used] != '\0')
                return ct_fail("CTRAIN_FAULT: bad checkpoint step in '%s'", item);
        } else if (sscanf(at + 1, "%lld.%d%n", &step, &micro, &used) != 2 || at[1 + used] != '\0') {
            return ct_fail("CTRAIN_FAULT: bad STEP.MICRO in '%s'", item);
        }
        if (f.sig == 0 && !is_stage)
            return ct_fail("CTRAIN_FAULT: '%s': ERR is for a named stage (ERR@STAGE[:STEP], e.g. ERR@ttt:3)", item);
        f.step = step;
        f.micro = micro;
        faults[num_faults++] = f;
    }
    /* once per process: a DATA_PATH run reads the spec before its import and again in training */
    static int announced;
    if (!announced++) fprintf(stderr, "ctrain: CTRAIN_FAULT=%s (fault injection for tests)\n", spec);
    return 0;
}

static int forward_to_parent;

void fault_forward_to_parent(void) { forward_to_parent = 1; }

static void fire(const Fault *f) {
    if (f->sig == 0) return; /* ERR: fault_error_stage's */
    fflush(stdout);
    fflush(stderr);
    /* a child's fault is the whole job's (the node dies), except a stop: a stuck writer */
    if (forward_to_parent && f->sig != SIGSTOP) kill(getppid(), f->sig);
    raise(f->sig);
}

void fault_point_micro(int64_t step, int micro) {
    for (int i = 0; i < num_faults; i++)
        if (!faults[i].in_checkpoint && !faults[i].in_import && !faults[i].stage[0] && faults[i].step == step &&
            faults[i].micro == micro)
            fire(&faults[i]);
}

void fault_point_checkpoint(int64_t step) {
    for (int i = 0; i < num_faults; i++)
        if (faults[i].in_checkpoint && faults[i].step == step) fire(&faults[i]);
}

void fault_point_stage(const char *stage, int64_t step) {
    for (int i = 0; i < num_faults; i++)
        if (!strcmp(faults[i].stage, stage) && (faults[i].any_step || faults[i].step == step)) fire(&faults[i]);
}

int fault_error_stage(const char *stage, int64_t step) {
    for (int i = 0; i < num_faults; i++)
        if (faults[i].sig == 0 && !strcmp(faults[i].stage, stage) && (faults[i].any_step || faults[i].step == step))
            return step < 0 ? ct_fail("CTRAIN_FAULT: injected error ERR@%s", stage)
                            : ct_fail("CTRAIN_FAULT: injected error ERR@%s:%lld", stage, (long long)step);
    return 0;
}

void fault_point_import(int64_t before, int64_t after) {
    for (int i = 0; i < num_faults; i++)
        if (faults[i].in_import && before < faults[i].step && faults[i].step <= after) fire(&faults[i]);
}
