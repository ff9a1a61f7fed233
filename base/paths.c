/* paths.c — file identity and the check of a command's outputs against its inputs (paths.h). */
#include "paths.h"

#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

int ct_path_resolve(const char *path, char *buf, size_t cap) {
    char real[PATH_MAX], copy[PATH_MAX], parent[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof copy) return ct_fail("cannot resolve the path '%s': empty or too long", path);
    if (realpath(path, real)) {
        if (snprintf(buf, cap, "%s", real) >= (int)cap) return ct_fail("'%s' resolves to a path too long", path);
        return 0;
    }
    /* not there (yet): its folder resolved, then its own name */
    memcpy(copy, path, n + 1);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
    char *slash = strrchr(copy, '/');
    const char *dir = ".", *base = copy;
    if (slash == copy) dir = "/", base = copy + 1;
    else if (slash) *slash = '\0', dir = copy, base = slash + 1;
    /* "." and "/" always resolve unless the working folder is gone: no endless recursion */
    if (!strcmp(dir, ".") || !strcmp(dir, "/")) {
        if (!realpath(dir, parent)) return ct_fail("cannot resolve the path '%s': its folder '%s' is gone", path, dir);
    } else if (ct_path_resolve(dir, parent, sizeof parent) != 0) {
        return -1;
    }
    if (!strcmp(base, ".") || !base[0]) {
        /* the folder itself */
    } else if (!strcmp(base, "..")) {
        char *last = strrchr(parent, '/');
        if (last) last[last == parent ? 1 : 0] = '\0';
    } else {
        size_t p = strlen(parent);
        if (p + 1 + strlen(base) >= sizeof parent) return ct_fail("cannot resolve the path '%s': too long", path);
        snprintf(parent + p, sizeof parent - p, "%s%s", parent[p - 1] == '/' ? "" : "/", base);
    }
    if (snprintf(buf, cap, "%s", parent) >= (int)cap) return ct_fail("'%s' resolves to a path too long", path);
    return 0;
}

int ct_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    const int has_a = stat(a, &sa) == 0, has_b = stat(b, &sb) == 0;
    if (has_a && has_b) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (has_a || has_b) return 0;
    char ra[PATH_MAX], rb[PATH_MAX];
    if (ct_path_resolve(a, ra, sizeof ra) != 0 || ct_path_resolve(b, rb, sizeof rb) != 0) {
        ct_error_clear(); /* unresolvable: compared by spelling, as the OS would open them */
        return !strcmp(a, b);
    }
    return !strcmp(ra, rb);
}

int ct_path_inside(const char *path, const char *dir) {
    char rp[PATH_MAX], rd[PATH_MAX];
    if (!realpath(path, rp) || !realpath(dir, rd)) return 0;
    size_t n = strlen(rd);
    if (n == 1) return rp[1] != '\0'; /* everything but / lies in / */
    return !strncmp(rp, rd, n) && rp[n] == '/';
}

void ct_path_list_add(CtPathList *list, const char *role, const char *what, const char *path) {
    if (list->count == list->cap) {
        int cap = list->cap ? 2 * list->cap : 8;
        CtPathUse *grown = ct_calloc((size_t)cap, sizeof *grown, "path list");
        if (list->count) memcpy(grown, list->items, (size_t)list->count * sizeof *grown);
        free(list->items);
        list->items = grown;
        list->cap = cap;
    }
    list->items[list->count++] = (CtPathUse){role, what, ct_strdup(path)};
}

void ct_path_list_add_glob(CtPathList *list, const char *role, const char *what, const char *pattern) {
    if (!pattern || !pattern[0]) return;
    glob_t g;
    /* GLOB_NOCHECK: a plain path is listed as given, there or not */
    if (glob(pattern, GLOB_NOCHECK, NULL, &g) != 0) return;
    for (size_t i = 0; i < g.gl_pathc; i++) ct_path_list_add(list, role, what, g.gl_pathv[i]);
    globfree(&g);
}

void ct_path_list_free(CtPathList *list) {
    for (int i = 0; i < list->count; i++) free(list->items[i].path);
    free(list->items);
    memset(list, 0, sizeof *list);
}

int ct_check_outputs(const CtPathList *outputs, const CtPathList *inputs) {
    for (int o = 0; o < outputs->count; o++) {
        const CtPathUse *out = &outputs->items[o];
        for (int i = 0; i < inputs->count; i++) {
            const CtPathUse *in = &inputs->items[i];
            if (ct_same_file(out->path, in->path))
                return ct_fail("%s '%s' is the input '%s'%s: writing it would destroy the input (%s: %s); give "
                               "another path",
                               out->role, out->path, in->path, strcmp(out->path, in->path) ? " (the same file)" : "",
                               in->role, in->what);
        }
        for (int e = 0; e < o; e++) {
            const CtPathUse *earlier = &outputs->items[e];
            if (ct_same_file(out->path, earlier->path)) {
                const int same_text = !strcmp(out->path, earlier->path);
                return ct_fail("%s '%s' is %s too (%s '%s'%s): give each output a path of its own", out->role,
                               out->path, earlier->what, earlier->role, earlier->path,
                               same_text ? "" : ", the same file");
            }
        }
    }
    return 0;
}
