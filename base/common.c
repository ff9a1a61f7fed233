/* common.c — error reporting, checked allocation, number parsing and small OS helpers. */
#include "common.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CT_ERROR_MAX 2048

/* Thread-local so that the loader's prefetch thread and the main thread never clobber each
 * other's messages. */
static _Thread_local char error_message[CT_ERROR_MAX];

int ct_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return -1;
}

int ct_fail_prefix(const char *fmt, ...) {
    char combined[2 * CT_ERROR_MAX + 4];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(combined, CT_ERROR_MAX, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n >= CT_ERROR_MAX) n = CT_ERROR_MAX - 1;
    memcpy(combined + n, ": ", 2);
    size_t old_len = strlen(error_message);
    memcpy(combined + n + 2, error_message, old_len + 1);
    size_t total = (size_t)n + 2 + old_len;
    if (total >= CT_ERROR_MAX) total = CT_ERROR_MAX - 1; /* keep the start: it names the context */
    memcpy(error_message, combined, total);
    error_message[total] = '\0';
    return -1;
}

const char *ct_error(void) { return error_message; }

void ct_error_clear(void) { error_message[0] = '\0'; }

void ct_print_error(void) {
    fprintf(stderr, "ctrain: error: %s\n", error_message[0] ? error_message : "unknown error");
}

void *ct_malloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "ctrain: error: out of memory allocating %zu bytes for %s\n", bytes, what);
        exit(CT_EXIT_FAILURE);
    }
    return p;
}

void *ct_calloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "ctrain: error: out of memory allocating %zu x %zu bytes for %s\n", count, size,
                what);
        exit(CT_EXIT_FAILURE);
    }
    return p;
}

char *ct_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ct_malloc(n, "string");
    memcpy(p, s, n);
    return p;
}

FILE *ct_open_memstream(char **text, size_t *size, const char *what) {
    FILE *f = open_memstream(text, size);
    if (!f) {
        fprintf(stderr, "ctrain: error: out of memory building %s\n", what);
        exit(CT_EXIT_FAILURE);
    }
    return f;
}

double ct_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Copy s without '_' digit separators into buf; -1 if it does not fit or is empty. */
static int strip_underscores(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '_') continue;
        if (n + 1 >= cap) return -1;
        buf[n++] = *p;
    }
    buf[n] = '\0';
    return n ? 0 : -1;
}

int ct_parse_int64(const char *s, int64_t *out) {
    char buf[64];
    if (strip_underscores(s, buf, sizeof buf) != 0) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || end == buf || *end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

int ct_parse_double(const char *s, double *out) {
    char buf[64];
    if (strip_underscores(s, buf, sizeof buf) != 0) return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno != 0 || end == buf || *end != '\0' || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int ct_env_nonneg_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return -1;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

int ct_ranks_may_share_gpu(void) {
    int v = 0;
    return ct_env_nonneg_int(CT_MULTI_RANK_GPU_VAR, &v) == 0 && v != 0;
}

int ct_mkdir_p(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return ct_fail("cannot create directory '%s': path empty or too long", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ct_fail("cannot create directory '%s': %s", buf, strerror(errno));
            buf[i] = saved;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_fail("'%s' exists but is not a directory", path);
    return 0;
}

FILE *ct_fopen_nofollow(const char *path, const char *mode) {
    int flags = O_NOFOLLOW | O_CLOEXEC;
    if (!strcmp(mode, "r")) flags |= O_RDONLY;
    else if (!strcmp(mode, "w")) flags |= O_WRONLY | O_CREAT | O_TRUNC;
    else if (!strcmp(mode, "a")) flags |= O_WRONLY | O_CREAT | O_APPEND;
    else {
        errno = EINVAL;
        return NULL;
    }
    int fd = open(path, flags, 0644);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *ct_open_error(int err) {
    if (err == ELOOP) return "it is a symbolic link, which ctrain does not follow for a run's own files (remove it)";
    return strerror(err);
}

const char *ct_shorten(const char *s, char *buf, size_t cap) {
    size_t n = strlen(s);
    if (n <= 200) return s;
    snprintf(buf, cap, "%.160s... (%zu bytes in all)", s, n);
    return buf;
}

int ct_mkdir_parent(const char *file_path) {
    const char *slash = strrchr(file_path, '/');
    if (!slash || slash == file_path) return 0; /* the current folder, or / */
    char dir[4096];
    size_t n = (size_t)(slash - file_path);
    if (n >= sizeof dir) return ct_fail("cannot create the folder of '%s': path too long", file_path);
    memcpy(dir, file_path, n);
    dir[n] = '\0';
    return ct_mkdir_p(dir); /* a folder that is there already is fine */
}

int ct_stderr_is_tty(void) { return isatty(STDERR_FILENO); }

const char *ct_nonfinite_name(double v) {
    if (isnan(v)) return "NaN";
    if (isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return "finite";
}
