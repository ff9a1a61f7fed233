/* test_paths.c — base/paths.h: files compared by identity (another spelling, a symbolic link, a
 * hard link, a folder reached through a link for files not made yet), and the check of a
 * command's outputs against its inputs and its other outputs, whose message names both. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "harness.h"
#include "paths.h"

static char dir[PATH_MAX]; /* a fresh folder per program run; every case works inside it */

static void touch(const char *name) {
    FILE *f = fopen(name, "w");
    if (f) {
        fputs("data\n", f);
        fclose(f);
    }
}

static void same_path_other_spellings(void) {
    touch("a.h5");
    mkdir("sub", 0777);
    CHECK(ct_same_file("a.h5", "a.h5") == 1, "a file is itself");
    CHECK(ct_same_file("a.h5", "./a.h5") == 1, "./a.h5 is a.h5");
    CHECK(ct_same_file("a.h5", "sub/../a.h5") == 1, "sub/../a.h5 is a.h5");
    char absolute[PATH_MAX + 8];
    snprintf(absolute, sizeof absolute, "%s/a.h5", dir);
    CHECK(ct_same_file(absolute, "a.h5") == 1, "the absolute path is a.h5");
}

static void links_are_the_same_file(void) {
    touch("b.h5");
    CHECK(symlink("b.h5", "b_sym.h5") == 0, "symlink");
    CHECK(link("b.h5", "b_hard.h5") == 0, "link");
    CHECK(ct_same_file("b_sym.h5", "b.h5") == 1, "a symbolic link is its target");
    CHECK(ct_same_file("b.h5", "b_hard.h5") == 1, "a hard link is the same file");
    CHECK(ct_same_file("b_sym.h5", "b_hard.h5") == 1, "a link to a hard link too");
}

static void different_files_differ(void) {
    touch("c1.h5");
    touch("c2.h5");
    CHECK(ct_same_file("c1.h5", "c2.h5") == 0, "two files with equal contents are two files");
    CHECK(ct_same_file("c1.h5", "c_missing.h5") == 0, "an existing file is not a missing one");
    CHECK(ct_same_file("c_missing1.h5", "c_missing2.h5") == 0, "two missing names differ");
}

static void missing_files_by_folder_and_name(void) {
    mkdir("real", 0777);
    CHECK(symlink("real", "linked") == 0, "symlink to a folder");
    /* outputs not written yet: the same folder reached through a link, the same name */
    CHECK(ct_same_file("real/out.bin", "linked/out.bin") == 1, "a folder's link: the same file-to-be");
    CHECK(ct_same_file("real/out.bin", "./real/x/../out.bin") == 1, "missing folders resolved by name");
    CHECK(ct_same_file("new/a/../b.bin", "new/b.bin") == 1, "missing parents: .. applied by name");
    char resolved[PATH_MAX + 16], expected[PATH_MAX + 16];
    CHECK(ct_path_resolve("linked/n1/n2/../f", resolved, sizeof resolved) == 0, "resolve: %s", ct_error());
    snprintf(expected, sizeof expected, "%s/real/n1/f", dir);
    CHECK(!strcmp(resolved, expected), "resolved '%.400s', expected '%.400s'", resolved, expected);
    CHECK(ct_path_resolve("", resolved, sizeof resolved) != 0 && strstr(ct_error(), "empty"), "an empty path");
}

static void inside_a_folder(void) {
    mkdir("run", 0777);
    mkdir("run/checkpoints", 0777);
    touch("run/checkpoints/data.h5");
    touch("run/config.txt");
    CHECK(symlink("run/checkpoints/data.h5", "data_link.h5") == 0, "symlink");
    CHECK(ct_path_inside("run/checkpoints/data.h5", "run/checkpoints") == 1, "a file in the folder");
    CHECK(ct_path_inside("data_link.h5", "run/checkpoints") == 1, "a link to a file in the folder");
    CHECK(ct_path_inside("run/config.txt", "run/checkpoints") == 0, "a file beside the folder");
    CHECK(ct_path_inside("run/checkpoints", "run/checkpoints") == 0, "the folder is not inside itself");
    CHECK(ct_path_inside("run/checkpoints/none.h5", "run/checkpoints") == 0, "a missing file is not");
}

static void outputs_against_inputs(void) {
    touch("val.h5");
    touch("train.h5");
    CHECK(symlink("val.h5", "val_link.h5") == 0, "symlink");
    CtPathList in = {0}, out = {0};
    ct_path_list_add(&in, "the checkpoint", "the weights", "train.h5");
    ct_path_list_add_glob(&in, "val_files", "the validation data", "va*.h5");
    CHECK(in.count == 3, "the glob adds val.h5 and val_link.h5: %d inputs", in.count);
    ct_path_list_add(&out, "--out", "the artifact's path", "art.stz");
    CHECK(ct_check_outputs(&out, &in) == 0, "a new file is no input: %s", ct_error());
    ct_path_list_add(&out, "--dequantized", "the weights' path", "./val.h5");
    int rc = ct_check_outputs(&out, &in);
    const char *e = ct_error();
    CHECK(rc == -1, "an output over the validation data is refused");
    CHECK(strstr(e, "--dequantized './val.h5' is the input 'val.h5' (the same file)") &&
              strstr(e, "val_files: the validation data"),
          "the message names both: %s", e);
    ct_path_list_free(&out);
    ct_path_list_free(&in);
    CHECK(out.count == 0 && out.items == NULL, "freed");
}

static void outputs_against_each_other(void) {
    CtPathList in = {0}, out = {0};
    ct_path_list_add(&out, "--out", "the training file's path", "fresh/t.h5");
    ct_path_list_add(&out, "--val-out", "the validation file's path", "fresh/../fresh/t.h5");
    CHECK(ct_check_outputs(&out, &in) == -1, "two outputs that are one file are refused");
    CHECK(strstr(ct_error(), "--val-out 'fresh/../fresh/t.h5' is the training file's path too (--out 'fresh/t.h5', "
                             "the same file)"),
          "the message names both: %s", ct_error());
    ct_path_list_free(&out);
    ct_path_list_add(&out, "--out", "the training file's path", "fresh/t.h5");
    ct_path_list_add(&out, "--val-out", "the validation file's path", "fresh/v.h5");
    CHECK(ct_check_outputs(&out, &in) == 0, "two outputs, two files: %s", ct_error());
    ct_path_list_free(&out);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s/test_paths.XXXXXX", getenv("CT_TEST_TMP") ? getenv("CT_TEST_TMP") : "/tmp");
    if (!mkdtemp(dir) || chdir(dir) != 0 || !getcwd(dir, sizeof dir)) {
        perror("test_paths: a scratch folder");
        return 1;
    }
    RUN(same_path_other_spellings);
    RUN(links_are_the_same_file);
    RUN(different_files_differ);
    RUN(missing_files_by_folder_and_name);
    RUN(inside_a_folder);
    RUN(outputs_against_inputs);
    RUN(outputs_against_each_other);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (chdir("/") != 0 || system(cmd) != 0) fprintf(stderr, "test_paths: could not remove %s\n", dir);
    TEST_EXIT();
}
