/* golf_artifact_file.c — the artifact formats' whole-file reads and atomic writes
 * (golf_artifact_internal.h), shared by golf_artifact.c and golf_gptq_artifact.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "golf_artifact_internal.h"

int golf_file_write_atomically(const char *path, const void *const *parts, const size_t *lens, int n) {
    if (ct_mkdir_parent(path) != 0) return -1;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return ct_fail("cannot write '%s': %s", tmp, strerror(errno));
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) bad = lens[i] && fwrite(parts[i], 1, lens[i], f) != lens[i];
    bad = bad || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno, rc = 0;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) rc = ct_fail("cannot write '%s': %s", tmp, strerror(err));
    else if (rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (rc != 0) unlink(tmp);
    return rc;
}

int golf_file_read(const char *path, unsigned char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        int e = errno;
        if (f) fclose(f);
        return ct_fail("cannot open artifact '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) { /* a directory opens, and its read fails with no word of why */
        fclose(f);
        return ct_fail("artifact '%s' is %s, not a file", path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    }
    *len = (size_t)st.st_size;
    *buf = ct_malloc(*len + 1, "compressed artifact");
    int bad = fread(*buf, 1, *len, f) != *len, e = errno;
    if (bad && !ferror(f)) e = 0; /* shorter than its size: it changed while read */
    fclose(f);
    if (bad) {
        free(*buf);
        *buf = NULL;
        return ct_fail("cannot read artifact '%s': %s", path, e ? strerror(e) : "it ended before its size (changed while read?)");
    }
    return 0;
}
