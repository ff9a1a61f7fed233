/* harness.h — the tiny unit-test harness every tests/unit/test_*.c program uses.
 *
 * A test program runs its cases with RUN(case_fn); each case prints exactly one line:
 *   PASS <program>/<case>
 *   FAIL <program>/<case>: <file>:<line>: <what>
 *   SKIP <program>/<case>: <reason>
 * and TEST_EXIT() ends the program with its completion line "END <program>".
 * tests/run.sh counts these lines across all programs and holds each program to
 * tests/manifest.txt: the number of cases listed there, the completion line (a program that
 * stopped early lacks it), exit status 0 unless a FAIL line says why. */
#ifndef CT_TEST_HARNESS_H
#define CT_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int harness_failures;
static int harness_case_failed;
static const char *harness_skip_reason;
static char harness_message[1024];

/* Fail the current case with a message and return from the case function. */
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            int harness_n_ = snprintf(harness_message, sizeof harness_message, "%s:%d: ",         \
                                      __FILE__, __LINE__);                                        \
            snprintf(harness_message + harness_n_, sizeof harness_message - (size_t)harness_n_,   \
                     __VA_ARGS__);                                                                \
            harness_case_failed = 1;                                                              \
            return;                                                                               \
        }                                                                                         \
    } while (0)

/* |a-b| <= tol*max(1,|b|) style closeness for scalars. */
#define CHECK_CLOSE(a, b, rel_tol)                                                                \
    CHECK(fabs((double)(a) - (double)(b)) <= (rel_tol) * fmax(1e-30, fabs((double)(b))),          \
          "%s = %.9g, expected %.9g (rel tol %g)", #a, (double)(a), (double)(b), (double)(rel_tol))

/* Mark the current case skipped (never counted as passed) and return. */
#define SKIP(reason)                                                                              \
    do {                                                                                          \
        harness_skip_reason = (reason);                                                           \
        return;                                                                                   \
    } while (0)

/* CT_TEST_CASES="a,b" runs only the cases named (e.g. the small ones under compute-sanitizer);
 * the others are left out without a line. */
static inline int harness_selected(const char *name) {
    const char *list = getenv("CT_TEST_CASES");
    if (!list || !*list) return 1;
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

static inline void harness_run(const char *program, const char *name, void (*fn)(void)) {
    if (!harness_selected(name)) return;
    harness_case_failed = 0;
    harness_skip_reason = NULL;
    harness_message[0] = '\0';
    fn();
    if (harness_case_failed) {
        printf("FAIL %s/%s: %s\n", program, name, harness_message);
        harness_failures++;
    } else if (harness_skip_reason) {
        printf("SKIP %s/%s: %s\n", program, name, harness_skip_reason);
    } else {
        printf("PASS %s/%s\n", program, name);
    }
    fflush(stdout);
}

/* The Makefile passes -DTEST_PROGRAM='"test_name"'; a program built by hand names itself by file. */
#ifndef TEST_PROGRAM
#define TEST_PROGRAM __FILE__
#endif
#define RUN(fn) harness_run(TEST_PROGRAM, #fn, fn)
/* The last statement of main: the completion line, then the exit status. */
#define TEST_EXIT()                                                                               \
    do {                                                                                          \
        printf("END %s\n", TEST_PROGRAM);                                                         \
        fflush(stdout);                                                                           \
        return harness_failures ? 1 : 0;                                                          \
    } while (0)

/* Path of a fresh scratch directory for this test program (created on first use). */
static inline const char *test_tmpdir(void) {
    static char dir[512];
    if (!dir[0]) {
        const char *base = getenv("CT_TEST_TMP");
        snprintf(dir, sizeof dir, "%s/unit.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return dir;
}

/* "<scratch dir>/<name>"; the last 64 results stay valid. */
static inline char *test_path(const char *name) {
    static char paths[64][700];
    static int next;
    char *p = paths[next++ % 64];
    snprintf(p, sizeof paths[0], "%s/%s", test_tmpdir(), name);
    return p;
}

static inline int test_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

#endif
