/* isolate.c — run a check in a child process (isolate.h). */
#include "isolate.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "stop.h"

/* What the child sends: its result, then out, then its message (NUL-terminated). */
typedef struct {
    int32_t rc;
    uint32_t message_bytes;
} ChildReport;

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* How long a wait may last: deadline_ms (ms on ct_now_ms's clock; 0: none), cut to grace_s
 * after a stop signal. */
typedef struct {
    double deadline_ms, grace_s;
    int cut; /* the stop signal set the deadline */
} Deadline;

/* Read exactly n bytes before the deadline. 0, or -1 on end of data / error, -2 on timeout. */
static int read_all(int fd, void *buf, size_t n, Deadline *d) {
    char *p = buf;
    while (n > 0) {
        if (d->grace_s > 0 && !d->cut && stop_requested()) { /* poll returns EINTR when it comes */
            double cut = ct_now_ms() + 1000.0 * d->grace_s;
            if (d->deadline_ms <= 0 || cut < d->deadline_ms) {
                d->deadline_ms = cut;
                d->cut = 1;
            }
        }
        int wait_ms = -1;
        if (d->deadline_ms > 0) {
            double left = d->deadline_ms - ct_now_ms();
            if (left <= 0) return -2;
            wait_ms = left > 1e9 ? 1000000000 : (int)left + 1;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, wait_ms);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) return -2;
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int ct_child_start(CtChild *child, const char *what, int (*fn)(void *ctx, void *out), void *ctx, void *out,
                   size_t out_cap, void (*child_init)(void)) {
    child->pid = 0;
    child->fd = -1;
    child->stop_grace_s = 0;
    int fds[2];
    if (pipe(fds) != 0) return ct_fail("%s: cannot create a pipe: %s", what, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return ct_fail("%s: cannot start a child process: %s", what, strerror(e));
    }
    if (pid == 0) {
        /* a child never outlives its parent: one that was killed must not publish anything
         * afterwards (and no longer holds out_dir's lock) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        close(fds[0]);
        if (child_init) child_init();
        ct_error_clear();
        int rc = fn(ctx, out) == 0 ? 0 : -1;
        const char *msg = rc == 0 ? "" : ct_error();
        ChildReport rep = {.rc = rc, .message_bytes = (uint32_t)strlen(msg) + 1};
        int ok = write_all(fds[1], &rep, sizeof rep) == 0 && (out_cap == 0 || write_all(fds[1], out, out_cap) == 0) &&
                 write_all(fds[1], msg, rep.message_bytes) == 0;
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    child->pid = (int)pid;
    child->fd = fds[0];
    return 0;
}

/* What /proc says the process is doing ("stopped", "in uninterruptible disk wait", ...). */
static void child_state(pid_t pid, char *buf, size_t cap) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    snprintf(buf, cap, "state unknown");
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *close_paren = strrchr(text, ')'); /* the command name may hold spaces */
    if (!close_paren || close_paren[1] != ' ') return;
    switch (close_paren[2]) {
    case 'R': snprintf(buf, cap, "running"); break;
    case 'S': snprintf(buf, cap, "sleeping"); break;
    case 'D': snprintf(buf, cap, "in uninterruptible disk wait"); break;
    case 'T': snprintf(buf, cap, "stopped"); break;
    case 't': snprintf(buf, cap, "stopped by a debugger"); break;
    case 'Z': snprintf(buf, cap, "a zombie"); break;
    default: snprintf(buf, cap, "state %c", close_paren[2]); break;
    }
}

int ct_child_finish(CtChild *child, const char *what, void *out, size_t out_cap, double timeout_s) {
    const pid_t pid = (pid_t)child->pid;
    const int fd = child->fd;
    child->pid = 0;
    child->fd = -1;
    if (pid <= 0) return ct_fail("%s: no child process to wait for", what);
    const double start = ct_now_ms();
    Deadline d = {timeout_s > 0 ? start + 1000.0 * timeout_s : 0, child->stop_grace_s, 0};
    ChildReport rep;
    int got = read_all(fd, &rep, sizeof rep, &d);
    if (got == 0 && out_cap) got = read_all(fd, out, out_cap, &d);
    char message[4096] = "";
    if (got == 0) {
        size_t n = rep.message_bytes < sizeof message ? rep.message_bytes : sizeof message;
        got = read_all(fd, message, n, &d);
        message[sizeof message - 1] = '\0';
    }
    close(fd);
    char state[64];
    if (got == -2) {
        child_state(pid, state, sizeof state);
        kill(pid, SIGKILL);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got == -2 && d.cut)
        return ct_fail("%s did not finish within %g s of the stop signal (pid %d, %s when killed)", what,
                       d.grace_s, (int)pid, state);
    if (got == -2) return ct_fail("%s did not finish within %g s (pid %d, %s when killed)", what, timeout_s, (int)pid, state);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGPIPE) {
        /* The child wrote to our standard output after its reader went away (`ctrain data info
         * | head -1`): no crash, the end of the output. This process ends as quietly, the way
         * other command-line tools do. */
        signal(SIGPIPE, SIG_DFL);
        raise(SIGPIPE);
    }
    if (WIFSIGNALED(status))
        return ct_fail("%s crashed (signal %d, %s)", what, WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (got != 0) return ct_fail("%s: the child process ended without a result (exit status %d)", what,
                                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (rep.rc != 0) return ct_fail("%s", message);
    return 0;
}

int ct_run_isolated(const char *what, int (*fn)(void *ctx, void *out), void *ctx, void *out, size_t out_cap,
                    double timeout_s) {
    CtChild child;
    if (ct_child_start(&child, what, fn, ctx, out, out_cap, NULL) != 0) return -1;
    return ct_child_finish(&child, what, out, out_cap, timeout_s);
}
