/* paths.h — "inputs are never outputs": whether two paths name the same file, and the check
 * every command that writes files makes before writing anything, of each output against every
 * file it reads (and against its other outputs). Files are compared by identity, not by
 * spelling: another spelling of the path (./x, d/../x), a symbolic link or a hard link to the
 * same file is the same file. */
#ifndef CT_PATHS_H
#define CT_PATHS_H

#include <stddef.h>

/* Where path resolves to: realpath() of an existing path; for one that does not exist yet (an
 * output), its nearest existing ancestor resolved, followed by the rest of the path with "."
 * and ".." applied. -1 with a message when the path is empty or too long. */
int ct_path_resolve(const char *path, char *buf, size_t cap);

/* 1 when a and b name the same file: both exist and have the same device and inode (so also
 * through links and other spellings), or neither exists and both resolve (ct_path_resolve) to
 * the same path; 0 otherwise. */
int ct_same_file(const char *a, const char *b);

/* 1 when path (existing) lies inside the existing folder dir, at any depth, once links are
 * resolved; 0 otherwise (also when either does not exist). */
int ct_path_inside(const char *path, const char *dir);

/* A file a command reads or writes, as the user knows it: role is the option or key that named
 * it ("--out", "val_files"), what says what it is ("the checkpoint's validation data"). */
typedef struct {
    const char *role;
    const char *what;
    char *path; /* owned by the list */
} CtPathUse;

/* A growing list of them. */
typedef struct {
    CtPathUse *items;
    int count, cap;
} CtPathList;

/* Append a copy of path. */
void ct_path_list_add(CtPathList *list, const char *role, const char *what, const char *path);
/* Append every file a glob matches (a pattern without wildcards: that path, whether it exists or
 * not); a glob that matches nothing adds nothing (the command reports missing data itself). */
void ct_path_list_add_glob(CtPathList *list, const char *role, const char *what, const char *pattern);
void ct_path_list_free(CtPathList *list);

/* 0 when no output is the same file (ct_same_file) as an input or as another output; else -1
 * with a message naming both, e.g.
 *   --out 'd/val.h5' is the input 'data/val.h5' (the same file): writing it would destroy the
 *   input (val_files: the checkpoint's validation data); give another path
 *   --dequantized 'x' is the artifact's path too ('./x', the same file): give each output a path
 *   of its own
 * Call it before anything is written, so that a refused command leaves every file as it was. */
int ct_check_outputs(const CtPathList *outputs, const CtPathList *inputs);

#endif
