/* dirlock.c — the exclusive lock of a run directory, and shared / exclusive locks of a file
 * (dirlock.h). */
#include "dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "stop.h"

int ct_lock_try(int fd, int kind) {
    short type = kind == CT_LOCK_SHARED ? F_RDLCK : kind == CT_LOCK_EXCLUSIVE ? F_WRLCK : F_UNLCK;
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) == 0) return 0;
    return errno == EACCES || errno == EAGAIN ? 1 : -1;
}

static int try_lock(int fd) { return ct_lock_try(fd, CT_LOCK_EXCLUSIVE); }

int ct_lock_file(const char *path, int kind, double wait_s, const char *what) {
    /* O_NOFOLLOW: a link planted as the lock file must not lead ctrain to a file elsewhere. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ct_fail("cannot open the lock file '%s': %s", path, ct_open_error(errno));
    double deadline = ct_now_ms() + 1000.0 * (wait_s > 0 ? wait_s : 0);
    int said_waiting = 0;
    for (;;) {
        int held = ct_lock_try(fd, kind);
        if (held == 0) return fd;
        int e = errno;
        if (held < 0 || ct_now_ms() >= deadline || stop_requested()) {
            close(fd);
            if (held < 0)
                return ct_fail("cannot lock '%s': %s (the file system may not support POSIX locks; on Lustre "
                               "mount with -o flock)", path, strerror(e));
            if (stop_requested())
                return ct_fail("stopped by signal %d while waiting for %s ('%s')", stop_requested(), what, path);
            return ct_fail("waited %.0f s for %s ('%s'); it is still held", wait_s, what, path);
        }
        if (!said_waiting) {
            fprintf(stderr, "ctrain: waiting up to %.0f s for %s ('%s')\n", wait_s, what, path);
            said_waiting = 1;
        }
        usleep(200 * 1000);
    }
}

/* What the holder wrote: "host n1, pid 1234, since ..." (or "holder unknown"). */
static void read_holder(int fd, char *buf, size_t cap) {
    char text[256];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) {
        snprintf(buf, cap, "holder unknown");
        return;
    }
    text[n] = '\0';
    text[strcspn(text, "\n")] = '\0';
    snprintf(buf, cap, "%s", text);
}

int ct_dir_lock(const char *dir, double wait_s) {
    char path[4200];
    if ((size_t)snprintf(path, sizeof path, "%s/.lock", dir) >= sizeof path)
        return ct_fail("directory path too long: '%s'", dir);
    /* O_NOFOLLOW: a link planted as .lock must not make ctrain truncate a file elsewhere. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ct_fail("cannot open the lock file '%s': %s", path, ct_open_error(errno));
    double deadline = ct_now_ms() + 1000.0 * (wait_s > 0 ? wait_s : 0);
    int said_waiting = 0;
    for (;;) {
        int held = try_lock(fd);
        if (held == 0) break;
        if (held < 0) {
            int e = errno;
            close(fd);
            return ct_fail("cannot lock '%s': %s (the file system may not support POSIX locks; on Lustre mount "
                           "with -o flock)",
                           path, strerror(e));
        }
        char holder[256];
        read_holder(fd, holder, sizeof holder);
        if (ct_now_ms() >= deadline) {
            close(fd);
            return ct_fail("'%s' is in use by another ctrain run (%s); wait for it to end, or use another out_dir",
                           dir, holder);
        }
        if (stop_requested()) { /* a job asked to stop (a requeue, a time limit) stops waiting too */
            close(fd);
            return ct_fail("stopped by signal %d while waiting for '%s' (in use by another ctrain run: %s); "
                           "nothing was changed",
                           stop_requested(), dir, holder);
        }
        if (!said_waiting) {
            fprintf(stderr, "ctrain: waiting up to %.0f s for '%s' to be released by another ctrain run (%s)\n",
                    wait_s, dir, holder);
            said_waiting = 1;
        }
        usleep(200 * 1000);
    }
    char host[256] = "?", stamp[32] = "?", text[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(text, sizeof text, "host %s, pid %ld, since %s\n", host, (long)getpid(), stamp);
    /* The text is for messages only: failing to write it does not weaken the lock. */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)
        fprintf(stderr, "ctrain: warning: cannot record the holder in '%s': %s\n", path, strerror(errno));
    return fd;
}
