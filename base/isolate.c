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

/* Read exactly n bytes before the deadline (ms on ct_now_ms's clock). 0, or -1 on end of data
 * / error, -2 on timeout. */
static int read_all(int fd, void *buf, size_t n, double deadline_ms) {
    char *p = buf;
    while (n > 0) {
        int wait_ms = -1;
        if (deadline_ms > 0) {
            double left = deadline_ms - ct_now_ms();
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

int ct_child_finish(CtChild *child, const char *what, void *out, size_t out_cap, double timeout_s) {
    const pid_t pid = (pid_t)child->pid;
    const int fd = child->fd;
    child->pid = 0;
    child->fd = -1;
    if (pid <= 0) return ct_fail("%s: no child process to wait for", what);
    double deadline = timeout_s > 0 ? ct_now_ms() + 1000.0 * timeout_s : 0;
    ChildReport rep;
    int got = read_all(fd, &rep, sizeof rep, deadline);
    if (got == 0 && out_cap) got = read_all(fd, out, out_cap, deadline);
    char message[4096] = "";
    if (got == 0) {
        size_t n = rep.message_bytes < sizeof message ? rep.message_bytes : sizeof message;
        got = read_all(fd, message, n, deadline);
        message[sizeof message - 1] = '\0';
    }
    close(fd);
    if (got == -2) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got == -2) return ct_fail("%s did not finish within %g s (stopped)", what, timeout_s);
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
