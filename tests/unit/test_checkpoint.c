/* test_checkpoint.c — HDF5 checkpoints (checkpoint/): bitwise save/load round trips, `latest`
 * and pruning, detection of every kind of damage (truncation, a flipped byte inside a tensor,
 * a missing tensor, a wrong format attribute, an edited attribute), the resume checks (SHAPE
 * keys, data files, FREE keys reported; a file whose /config lacks newer FREE keys),
 * resume=auto's fallback to an older checkpoint, saves that fail or are killed (SIGKILL) at
 * every stage, HDF5_USE_FILE_LOCKING, and the exit codes of `ctrain ckpt`.
 *
 * Run as `test_checkpoint --fixture DIR` it only writes checkpoints for tests/cli/test_ckpt.sh
 * (see make_fixture). */
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"
#include "ckpt_internal.h"
#include "commands.h"
#include "common.h"
#include "data.h"
#include "h5util.h"
#include "harness.h"
#include "loader.h"

/* ---- helpers ---- */

static int error_has(const char *needle) { return strstr(ct_error(), needle) != NULL; }

static int copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return -1;
    }
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    fclose(in);
    return fclose(out);
}

static uint64_t rng_state = 88172645463325252ULL;
static float rand_float(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A data file of n byte tokens (vocab 64). */
static int make_data(const char *path, int64_t n, int salt) {
    TokenWriter *w;
    if (token_writer_create(&w, path, 2, 64, -1, "test") != 0) return -1;
    uint16_t *buf = malloc((size_t)n * sizeof *buf);
    for (int64_t i = 0; i < n; i++) buf[i] = (uint16_t)((i * 7 + salt) % 64);
    int rc = token_writer_append(w, buf, n);
    free(buf);
    if (rc != 0) {
        token_writer_abort(w);
        return -1;
    }
    return token_writer_close(w);
}

/* A set as a training run opens it: with the identity a checkpoint records. */
static int open_set(const char *pattern, TokenSet *set) {
    if (data_open_set(pattern, set) != 0) return -1;
    if (data_fingerprint(set) == 0) return 0;
    data_free_set(set);
    return -1;
}

/* The shared data set: two files, so the cursor can sit in the second. */
static const char *data_glob(void) {
    static char glob[800];
    if (!glob[0]) {
        char dir[700];
        snprintf(dir, sizeof dir, "%s/data", test_tmpdir());
        mkdir(dir, 0777);
        char a[760], b[760];
        snprintf(a, sizeof a, "%s/a.h5", dir);
        snprintf(b, sizeof b, "%s/b.h5", dir);
        if (make_data(a, 3000, 0) != 0 || make_data(b, 2000, 1) != 0) {
            ct_print_error();
            exit(1);
        }
        snprintf(glob, sizeof glob, "%s/*.h5", dir);
    }
    return glob;
}

static void make_config(Config *cfg, const char *train_files, int tied, int num_layers) {
    config_init(cfg);
    char layers[16];
    snprintf(layers, sizeof layers, "%d", num_layers);
    const char *kv[][2] = {{"vocab_size", "64"},      {"num_layers", layers},     {"model_dim", "16"},
                           {"num_heads", "2"},        {"num_kv_heads", "1"},      {"mlp_mult", "2"},
                           {"train_seq_len", "8"},    {"train_batch_tokens", "32"}, {"grad_accum_slots", "2"},
                           {"tie_embeddings", tied ? "1" : "0"}, {"iterations", "20"}, {"train_files", train_files}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if (config_set(cfg, kv[i][0], kv[i][1], CT_SOURCE_COMMAND_LINE, "test") != 0) {
            ct_print_error();
            exit(1);
        }
}

/* A state whose every saved number is distinctive: random weights, random optimizer entries
 * for exactly the entries each optimizer owns (as after training), adam_step 7. */
static void make_state(TrainState *st, const Config *cfg) {
    if (train_state_init(st, cfg) != 0) {
        ct_print_error();
        exit(1);
    }
    for (int i = 0; i < st->spec.num_params; i++) {
        const ParamInfo *p = &st->spec.params[i];
        for (size_t j = 0; j < p->count; j++) {
            st->params[p->offset + j] = rand_float();
            if (p->group == PARAM_MATRIX) {
                st->momentum[p->offset + j] = rand_float();
            } else {
                st->exp_avg[p->offset + j] = rand_float();
                st->exp_avg_sq[p->offset + j] = rand_float() * rand_float();
            }
        }
    }
    st->adam_step = 7;
}

static const char *const EXTRA_NAMES[] = {"last_val_loss", "last_val_bpb"};
static const double EXTRA_VALUES[] = {3.25, 1.0 / 3.0};

static CheckpointInfo make_info(const TokenSet *set, int64_t step) {
    CheckpointInfo info = {0};
    info.step = step;
    info.train_tokens = step * 34;
    info.world_size = 2;
    info.training_time_ms = 1234.5 * (double)step;
    info.device = "cpu";
    loader_cursor_advance(set, loader_cursor_start(), info.train_tokens, &info.cursor);
    info.num_extras = 2;
    info.extra_names = EXTRA_NAMES;
    info.extra_values = EXTRA_VALUES;
    return info;
}

/* Everything a test needs: config, data, state. */
typedef struct {
    Config cfg;
    TokenSet set;
    TrainState st;
} Fixture;

static void fixture_init(Fixture *f, int tied, int num_layers) {
    make_config(&f->cfg, data_glob(), tied, num_layers);
    if (open_set(f->cfg.train_files, &f->set) != 0) {
        ct_print_error();
        exit(1);
    }
    make_state(&f->st, &f->cfg);
}

static void fixture_free(Fixture *f) {
    train_state_free(&f->st);
    data_free_set(&f->set);
    config_free(&f->cfg);
}

static int save_step(Fixture *f, const char *dir, int64_t step, int keep, char *path, size_t cap) {
    CheckpointInfo info = make_info(&f->set, step);
    return checkpoint_save(dir, &f->cfg, &f->st, &info, &f->set, keep, path, cap);
}

static int same_floats(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void read_text(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Raw HDF5 edits of a copy, as a user with h5py (or a disk) would make them. */
static hid_t open_rw(const char *path) {
    ct_hdf5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    ct_hdf5_unlock();
    return f;
}

/* File offset of the first byte of a dataset's data (first chunk if chunked), or -1. */
static long long data_offset(const char *path, const char *dataset) {
    ct_hdf5_lock();
    long long offset = -1;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, dataset, H5P_DEFAULT) : -1;
    if (d >= 0) {
        hid_t dcpl = H5Dget_create_plist(d);
        if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
            hid_t space = H5Dget_space(d);
            hsize_t coords[2];
            unsigned mask;
            haddr_t addr;
            hsize_t size;
            if (H5Dget_chunk_info(d, space, 0, coords, &mask, &addr, &size) >= 0) offset = (long long)addr;
            H5Sclose(space);
        } else {
            haddr_t addr = H5Dget_offset(d);
            if (addr != HADDR_UNDEF) offset = (long long)addr;
        }
        H5Pclose(dcpl);
        H5Dclose(d);
    }
    if (f >= 0) H5Fclose(f);
    ct_hdf5_unlock();
    return offset;
}

static int flip_byte(const char *path, long long offset) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    unsigned char b;
    int ok = pread(fd, &b, 1, offset) == 1;
    b ^= 0x10;
    ok = ok && pwrite(fd, &b, 1, offset) == 1;
    close(fd);
    return ok ? 0 : -1;
}

/* Run ckpt_main with stdout and stderr captured into *out; returns its exit code. */
static int run_ckpt(char *out, size_t cap, int argc, const char **argv) {
    char *capture = test_path("ckpt_main.out");
    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    int fd = open(capture, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    int rc = ckpt_main(argc, (char **)argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    read_text(capture, out, cap);
    return rc;
}

/* ---- round trip ---- */

static void roundtrip(int tied, int num_layers) {
    Fixture f;
    fixture_init(&f, tied, num_layers);
    char dir[700], path[1024];
    snprintf(dir, sizeof dir, "%s", test_path(tied ? (num_layers == 1 ? "rt_one_layer" : "rt_tied") : "rt_untied"));
    int rc = save_step(&f, dir, 5, 3, path, sizeof path);
    if (rc != 0) fixture_free(&f);
    CHECK(rc == 0, "save failed: %.300s", ct_error());
    char want[1024];
    snprintf(want, sizeof want, "%s/step_00000005.h5", dir);
    CHECK(!strcmp(path, want), "path_out = '%.300s', expected '%.300s'", path, want);
    CHECK(checkpoint_verify(path, NULL) == 0, "verify failed: %.300s", ct_error());

    TrainState fresh;
    CHECK(train_state_init(&fresh, &f.cfg) == 0, "%.400s", ct_error());
    CheckpointInfo info;
    rc = checkpoint_load(path, 0, &f.cfg, &fresh, &f.set, &info, NULL);
    size_t n = f.st.spec.total_floats;
    int params = rc == 0 && same_floats(fresh.params, f.st.params, n);
    int m1 = rc == 0 && same_floats(fresh.exp_avg, f.st.exp_avg, n);
    int m2 = rc == 0 && same_floats(fresh.exp_avg_sq, f.st.exp_avg_sq, n);
    int mom = rc == 0 && same_floats(fresh.momentum, f.st.momentum, n);
    int64_t adam = fresh.adam_step;
    train_state_free(&fresh);
    CheckpointInfo want_info = make_info(&f.set, 5);
    fixture_free(&f);
    CHECK(rc == 0, "load failed: %.300s", ct_error());
    CHECK(params && m1 && m2 && mom, "buffers differ after load: params %d exp_avg %d exp_avg_sq %d momentum %d",
          params, m1, m2, mom);
    CHECK(adam == 7, "adam_step %lld, expected 7", (long long)adam);
    CHECK(info.step == 5 && info.train_tokens == want_info.train_tokens && info.world_size == 2 &&
              info.training_time_ms == want_info.training_time_ms && !strcmp(info.device, "cpu"),
          "info differs: step %lld tokens %lld world %d time %g device %s", (long long)info.step,
          (long long)info.train_tokens, info.world_size, info.training_time_ms, info.device);
    CHECK(!memcmp(&info.cursor, &want_info.cursor, sizeof info.cursor), "cursor differs: file %lld position %lld",
          (long long)info.cursor.file_index, (long long)info.cursor.position);
    CHECK(info.num_extras == 2, "%d extras", info.num_extras);
    /* /metrics is stored by attribute name, so the order is by name */
    int found = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            found += !strcmp(info.extra_names[i], EXTRA_NAMES[j]) && info.extra_values[i] == EXTRA_VALUES[j];
    checkpoint_info_free(&info);
    CHECK(found == 2, "extras do not round-trip");

    char latest[256];
    snprintf(want, sizeof want, "%s/latest", dir);
    read_text(want, latest, sizeof latest);
    CHECK(!strcmp(latest, "step_00000005.h5\n"), "latest holds '%s'", latest);
}

static void roundtrip_tied(void) { roundtrip(1, 3); }
static void roundtrip_untied_with_lm_head(void) { roundtrip(0, 2); }
/* One layer: skip_weights is [0, 16], an empty dataset. */
static void roundtrip_empty_tensor(void) { roundtrip(1, 1); }

static void info_round_trips_cursor_in_second_file(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], path[1024];
    snprintf(dir, sizeof dir, "%s", test_path("second_file"));
    int rc = save_step(&f, dir, 101, 1, path, sizeof path); /* 3434 tokens: past the first file */
    TrainState fresh;
    train_state_init(&fresh, &f.cfg);
    CheckpointInfo info = {0};
    if (rc == 0) rc = checkpoint_load(path, 0, &f.cfg, &fresh, &f.set, &info, NULL);
    train_state_free(&fresh);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(info.cursor.file_index == 1, "cursor file_index %lld, expected 1", (long long)info.cursor.file_index);
    checkpoint_info_free(&info);
}

/* ---- lineage ---- */

/* The lineage attributes round-trip through a save and a load (and checkpoint_read_lineage);
 * a file written without them (as an older ctrain did) verifies and loads with none. */
static void lineage_round_trips_and_is_optional(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], with[1024], without[1024];
    snprintf(dir, sizeof dir, "%s", test_path("lineage"));
    CheckpointLineage parent = {.id = "00000000000000aa", .origin_step = -1, .origin_crc32 = -1};
    CheckpointInfo info = make_info(&f.set, 7);
    checkpoint_lineage_start(&info.lineage, &parent, 5, 0xdeadbeefu, "runs/a/checkpoints/step_00000005.h5");
    int rc = checkpoint_save(dir, &f.cfg, &f.st, &info, &f.set, 5, with, sizeof with);
    if (rc == 0) rc = save_step(&f, dir, 8, 5, without, sizeof without);
    CheckpointInfo back[2];
    memset(back, 0, sizeof back);
    for (int i = 0; i < 2 && rc == 0; i++) {
        TrainState fresh;
        train_state_init(&fresh, &f.cfg);
        rc = checkpoint_load(i ? without : with, 0, &f.cfg, &fresh, &f.set, &back[i], NULL);
        train_state_free(&fresh);
    }
    CheckpointLineage peek;
    int64_t step = -1;
    uint32_t crc = 0;
    if (rc == 0) rc = checkpoint_read_lineage(with, &peek, &step, &crc);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    const CheckpointLineage *l = &back[0].lineage;
    CHECK(strlen(l->id) == 16 && strspn(l->id, "0123456789abcdef") == 16, "lineage id '%s'", l->id);
    CHECK(!strcmp(l->id, info.lineage.id) && !strcmp(l->origin, "00000000000000aa") && l->origin_step == 5 &&
              l->origin_crc32 == 0xdeadbeef && !strcmp(l->origin_path, "runs/a/checkpoints/step_00000005.h5"),
          "loaded lineage %s from %s step %lld crc %llx path %.300s", l->id, l->origin, (long long)l->origin_step,
          (long long)l->origin_crc32, l->origin_path);
    CHECK(!strcmp(peek.id, l->id) && step == 7 && crc == back[0].content_crc32, "read_lineage: %s step %lld crc %x",
          peek.id, (long long)step, crc);
    const CheckpointLineage *none = &back[1].lineage;
    CHECK(!none->id[0] && !none->origin[0] && none->origin_step == -1 && none->origin_crc32 == -1 &&
              !none->origin_path[0], "a file without lineage loaded as '%s' from step %lld", none->id,
          (long long)none->origin_step);
    checkpoint_info_free(&back[0]);
    checkpoint_info_free(&back[1]);
}

/* A new lineage from step 2 of lineage A: A's steps 1 and 2 are its history and stay; A's
 * steps 3 and 4, a file of lineage C and `latest` (naming step 4) move aside. */
static void lineage_sets_aside_the_abandoned(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], aside[800], path[1024], name[1100];
    snprintf(dir, sizeof dir, "%s", test_path("abandon"));
    snprintf(aside, sizeof aside, "%s.replaced-x", dir);
    CheckpointLineage a, b, c;
    checkpoint_lineage_start(&a, NULL, 0, 0, NULL);
    checkpoint_lineage_start(&c, NULL, 0, 0, NULL);
    int rc = 0;
    for (int step = 1; step <= 5 && rc == 0; step++) {
        CheckpointInfo info = make_info(&f.set, step);
        info.lineage = step == 5 ? c : a;
        rc = checkpoint_save(dir, &f.cfg, &f.st, &info, &f.set, 10, path, sizeof path);
    }
    /* step 5 (lineage C) last: latest names it */
    checkpoint_lineage_start(&b, &a, 2, 0x1234u, "x/step_00000002.h5");
    CHECK(strcmp(a.id, c.id) != 0 && strcmp(a.id, b.id) != 0, "two new lineages got the same id %s", a.id);
    CHECK(checkpoint_lineage_has(&b, &a, 2) && !checkpoint_lineage_has(&b, &a, 3) && checkpoint_lineage_has(&b, &b, 9) &&
              !checkpoint_lineage_has(&b, &c, 1) && !checkpoint_lineage_has(&a, &b, 1),
          "checkpoint_lineage_has gives the wrong history");
    int moved = -1;
    if (rc == 0) rc = checkpoint_set_aside(dir, &b, aside, &moved);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(moved == 3, "moved %d files, expected 3", moved);
    for (int step = 1; step <= 5; step++) {
        int stays = step <= 2;
        snprintf(name, sizeof name, "%s/step_%08d.h5", stays ? dir : aside, step);
        CHECK(test_file_exists(name), "%.300s missing", name);
        snprintf(name, sizeof name, "%s/step_%08d.h5", stays ? aside : dir, step);
        CHECK(!test_file_exists(name), "%.300s exists", name);
    }
    snprintf(name, sizeof name, "%s/latest", aside);
    CHECK(test_file_exists(name), "latest was not moved with the file it names");
}

/* ---- latest and pruning ---- */

static void prune_keeps_newest(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], path[1024], name[800];
    snprintf(dir, sizeof dir, "%s", test_path("prune"));
    int rc = 0;
    for (int step = 1; step <= 5 && rc == 0; step++) rc = save_step(&f, dir, step * 10, 2, path, sizeof path);
    CHECK(rc == 0, "%.400s", ct_error());
    for (int step = 1; step <= 5; step++) {
        snprintf(name, sizeof name, "%s/step_%08d.h5", dir, step * 10);
        int want = step >= 4;
        if (test_file_exists(name) != want) fixture_free(&f);
        CHECK(test_file_exists(name) == want, "%.300s %s", name, want ? "was deleted" : "was kept");
    }
    /* Saving an older step (a run resumed from an earlier checkpoint) never deletes the file
     * just written, even when keep newer ones are there. */
    rc = save_step(&f, dir, 5, 1, path, sizeof path);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(test_file_exists(path), "the checkpoint just written was pruned");
    snprintf(name, sizeof name, "%s/step_00000050.h5", dir);
    CHECK(test_file_exists(name), "newest kept by keep=1 was deleted");
    snprintf(name, sizeof name, "%s/step_00000040.h5", dir);
    CHECK(!test_file_exists(name), "step 40 beyond keep=1 was kept");
    char latest[256];
    snprintf(name, sizeof name, "%s/latest", dir);
    read_text(name, latest, sizeof latest);
    CHECK(!strcmp(latest, "step_00000005.h5\n"), "latest holds '%s'", latest);
    CHECK(checkpoint_dir_has_checkpoints(dir) == 1, "dir_has_checkpoints != 1");
}

static void same_step_replaced_atomically(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], path[1024];
    snprintf(dir, sizeof dir, "%s", test_path("same_step"));
    int rc = save_step(&f, dir, 3, 2, path, sizeof path);
    f.st.params[0] += 1.0f;
    if (rc == 0) rc = save_step(&f, dir, 3, 2, path, sizeof path);
    TrainState fresh;
    train_state_init(&fresh, &f.cfg);
    CheckpointInfo info = {0};
    if (rc == 0) rc = checkpoint_load(path, 0, &f.cfg, &fresh, &f.set, &info, NULL);
    float got = fresh.params[0], want = f.st.params[0];
    train_state_free(&fresh);
    fixture_free(&f);
    checkpoint_info_free(&info);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(got == want, "the second save of step 3 did not replace the first");
}

static void dir_has_checkpoints_cases(void) {
    CHECK(checkpoint_dir_has_checkpoints(test_path("no_such_dir")) == 0, "missing dir should hold none");
    char *empty = test_path("empty_dir");
    mkdir(empty, 0777);
    char other[800];
    snprintf(other, sizeof other, "%s/step_1.h5.tmp.99", empty); /* a leftover temporary is not a checkpoint */
    fclose(fopen(other, "w"));
    CHECK(checkpoint_dir_has_checkpoints(empty) == 0, "dir with only a temporary file should hold none");
    char path[1024];
    CHECK(checkpoint_find_resumable(empty, path, sizeof path, NULL) == 0, "find_resumable on an empty dir: %s",
          ct_error());
    CHECK(checkpoint_find_resumable(test_path("no_such_dir"), path, sizeof path, NULL) == 0,
          "find_resumable on a missing dir");
}

/* ---- damage ---- */

/* A good checkpoint to damage copies of (written once). */
static const char *good_checkpoint(void) {
    static char path[1024];
    if (!path[0]) {
        Fixture f;
        fixture_init(&f, 1, 2);
        if (save_step(&f, test_path("good"), 9, 3, path, sizeof path) != 0) {
            ct_print_error();
            exit(1);
        }
        fixture_free(&f);
    }
    return path;
}

static void verify_detects_truncation(void) {
    char *copy = test_path("truncated.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    struct stat st;
    stat(copy, &st);
    CHECK(truncate(copy, st.st_size / 2) == 0, "truncate failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "a truncated file verified");
    CHECK(error_has("truncated.h5") && error_has("truncated"), "message: %.400s", ct_error());
}

static void verify_detects_flipped_tensor_byte(void) {
    const char *tensor = "/model/blocks.0.attn.c_q.weight";
    char *copy = test_path("flipped.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    long long offset = data_offset(copy, tensor);
    CHECK(offset > 0, "no data offset for %s", tensor);
    CHECK(flip_byte(copy, offset + 21) == 0, "flip failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "a flipped byte verified");
    CHECK(error_has(tensor) && error_has("flipped.h5"), "message does not name the tensor: %s", ct_error());
    CHECK(error_has("letcher"), "message does not say the Fletcher32 check failed: %s", ct_error());
}

static void verify_detects_flipped_optimizer_byte(void) {
    const char *tensor = "/optimizer/tok_emb.weight/exp_avg_sq";
    char *copy = test_path("flipped_opt.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    long long offset = data_offset(copy, tensor);
    CHECK(offset > 0 && flip_byte(copy, offset + 100) == 0, "flip failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "a flipped byte verified");
    CHECK(error_has(tensor), "message does not name the tensor: %s", ct_error());
}

static void verify_detects_missing_tensor(void) {
    char *copy = test_path("missing.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    hid_t f = open_rw(copy);
    ct_hdf5_lock();
    herr_t e = H5Ldelete(f, "/model/blocks.1.mlp.fc.weight", H5P_DEFAULT);
    H5Fclose(f);
    ct_hdf5_unlock();
    CHECK(e >= 0, "delete failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "a file without a tensor verified");
    CHECK(error_has("/model/blocks.1.mlp.fc.weight is missing") && error_has("[32, 16]"), "message: %.400s", ct_error());
}

static void verify_detects_wrong_format(void) {
    char *copy = test_path("format.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    hid_t f = open_rw(copy);
    ct_hdf5_lock();
    H5Adelete(f, "format");
    int rc = ct_h5_attr_write_str(f, "format", "something-else");
    H5Fclose(f);
    ct_hdf5_unlock();
    CHECK(rc == 0, "rewrite failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "a wrong format verified");
    CHECK(error_has("format is 'something-else'") && error_has("not a ctrain checkpoint"), "message: %.400s", ct_error());
}

/* An attribute edited to another plausible value: only the content checksum can tell. */
static void verify_detects_edited_attribute(void) {
    char *copy = test_path("edited.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    hid_t f = open_rw(copy);
    ct_hdf5_lock();
    hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
    H5Adelete(g, "matrix_lr");
    int rc = ct_h5_attr_write_f64(g, "matrix_lr", 0.5);
    H5Gclose(g);
    H5Fclose(f);
    ct_hdf5_unlock();
    CHECK(rc == 0, "rewrite failed");
    CHECK(checkpoint_verify(copy, NULL) != 0, "an edited attribute verified");
    CHECK(error_has("content checksum mismatch"), "message: %.400s", ct_error());
}

static void verify_detects_unexpected_object(void) {
    char *copy = test_path("extra.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    hid_t f = open_rw(copy);
    ct_hdf5_lock();
    hid_t g = H5Gcreate2(f, "/model/blocks.7.attn.c_q.weight", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(f);
    ct_hdf5_unlock();
    CHECK(checkpoint_verify(copy, NULL) != 0, "an unexpected object verified");
    CHECK(error_has("unexpected group /model/blocks.7.attn.c_q.weight"), "message: %.400s", ct_error());
}

static void verify_rejects_non_checkpoints(void) {
    CHECK(checkpoint_verify(test_path("nothing.h5"), NULL) != 0 && error_has("No such file"), "%.400s", ct_error());
    char *text = test_path("text.h5");
    FILE *t = fopen(text, "w");
    fputs("hello\n", t);
    fclose(t);
    CHECK(checkpoint_verify(text, NULL) != 0 && error_has("not an HDF5 file"), "%.400s", ct_error());
    /* an HDF5 file of something else: a token data file */
    char data[800];
    snprintf(data, sizeof data, "%s/data/a.h5", test_tmpdir());
    data_glob();
    CHECK(checkpoint_verify(data, NULL) != 0 && error_has("not a ctrain checkpoint"), "%.400s", ct_error());
}

/* ---- resume checks ---- */

static void load_refuses_changed_shape_key(void) {
    Config cfg;
    make_config(&cfg, data_glob(), 1, 2);
    config_set(&cfg, "model_dim", "32", CT_SOURCE_COMMAND_LINE, "test");
    config_set(&cfg, "seed", "7", CT_SOURCE_COMMAND_LINE, "test");
    TokenSet set;
    TrainState st;
    int rc = open_set(cfg.train_files, &set);
    if (rc == 0) rc = train_state_init(&st, &cfg);
    CHECK(rc == 0, "%.400s", ct_error());
    CheckpointInfo info;
    rc = checkpoint_load(good_checkpoint(), 0, &cfg, &st, &set, &info, NULL);
    train_state_free(&st);
    data_free_set(&set);
    config_free(&cfg);
    CHECK(rc != 0, "loaded with a different model_dim");
    CHECK(error_has("model_dim: checkpoint 16, configured 32") && error_has("seed: checkpoint 1337, configured 7"),
          "message: %.400s", ct_error());
    CHECK(info.device == NULL && info.num_extras == 0, "info filled on failure");
}

/* A checkpoint an older ctrain wrote, before a SHAPE key existed (issue 56's model keys: the MLP
 * slope, the skip gates, the sparse attention gate's four, the 1.0611 SmearGate, document
 * packing's two): the attributes absent from /config (and the content checksum made again, as
 * that ctrain made it without them). It verifies,
 * resumes as the keys' defaults (the model it trained), and refuses a configuration that turns
 * one of the features on, naming its key. */
static void load_takes_absent_keys_as_default(void) {
    static const char *const absent[] = {"mlp_negative_slope",       "skip_gates_enabled",
                                         "sparse_attn_gate_enabled", "sparse_attn_gate_scale",
                                         "sparse_attn_gate_init_std", "gate_window", "smear_gate_enabled",
                                         "doc_packing",              "max_doc_len"};
    static const char *const turned_on[] = {NULL, "skip_gates_enabled", "sparse_attn_gate_enabled",
                                            "smear_gate_enabled", "doc_packing"};
    char *old = test_path("before_keys.h5");
    CHECK(copy_file(good_checkpoint(), old) == 0, "copy failed");
    hid_t f = open_rw(old);
    ct_hdf5_lock();
    hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
    herr_t e = 0;
    for (size_t i = 0; i < sizeof absent / sizeof absent[0] && e >= 0; i++) e = H5Adelete(g, absent[i]);
    H5Gclose(g);
    ct_hdf5_unlock();
    CkptObjects objs;
    uint32_t crc = 0;
    int rc = e >= 0 ? ckpt_list_objects(f, old, &objs) : -1;
    if (rc == 0) {
        rc = ckpt_content_crc(f, old, &objs, &crc);
        ckpt_objects_free(&objs);
    }
    ct_hdf5_lock();
    if (rc == 0) rc = H5Adelete(f, "content_crc32") < 0 ? -1 : ct_h5_attr_write_u32(f, "content_crc32", crc);
    H5Fclose(f);
    ct_hdf5_unlock();
    CHECK(rc == 0, "rewrite failed: %.400s", ct_error());
    CHECK(checkpoint_verify(old, NULL) == 0, "the older checkpoint does not verify: %.400s", ct_error());
    for (size_t k = 0; k < sizeof turned_on / sizeof turned_on[0]; k++) {
        Config cfg;
        make_config(&cfg, data_glob(), 1, 2);
        if (turned_on[k]) config_set(&cfg, turned_on[k], "1", CT_SOURCE_COMMAND_LINE, "test");
        TokenSet set;
        TrainState st;
        rc = open_set(cfg.train_files, &set);
        if (rc == 0) rc = train_state_init(&st, &cfg);
        CHECK(rc == 0, "%.400s", ct_error());
        CheckpointInfo info;
        memset(&info, 0, sizeof info);
        rc = checkpoint_load(old, 0, &cfg, &st, &set, &info, NULL);
        if (rc == 0) checkpoint_info_free(&info);
        train_state_free(&st);
        data_free_set(&set);
        config_free(&cfg);
        if (!turned_on[k]) {
            CHECK(rc == 0, "the older checkpoint does not resume with the defaults: %.400s", ct_error());
        } else {
            char want[96];
            snprintf(want, sizeof want, "%s: checkpoint 0, configured 1", turned_on[k]);
            CHECK(rc != 0 && error_has(want), "resumed with %s on, which the checkpoint's model lacks (rc %d): %.400s",
                  turned_on[k], rc, ct_error());
        }
    }
}

/* dir/a.h5 and dir/b.h5 with the shared set's lengths; salts 0 and 1 give its very tokens. */
static void make_data_dir(const char *name, int salt_a, int salt_b, char *pattern, size_t cap) {
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), name);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/a.h5", dir);
    CHECK(make_data(path, 3000, salt_a) == 0, "%.400s", ct_error());
    snprintf(path, sizeof path, "%s/b.h5", dir);
    CHECK(make_data(path, 2000, salt_b) == 0, "%.400s", ct_error());
    snprintf(pattern, cap, "%s/*.h5", dir);
}

static int load_with(Fixture *f, const TokenSet *set, const char *resume_data) {
    config_set(&f->cfg, "resume_data", resume_data, CT_SOURCE_COMMAND_LINE, "test");
    CheckpointInfo info;
    int rc = checkpoint_load(good_checkpoint(), 0, &f->cfg, &f->st, set, &info, NULL);
    checkpoint_info_free(&info);
    return rc;
}

static void load_refuses_different_data(void) {
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/data2", test_tmpdir());
    mkdir(dir, 0777);
    /* same glob shape and names, one file one token shorter */
    snprintf(path, sizeof path, "%s/a.h5", dir);
    CHECK(make_data(path, 3000, 0) == 0, "%.400s", ct_error());
    snprintf(path, sizeof path, "%s/b.h5", dir);
    CHECK(make_data(path, 1999, 1) == 0, "%.400s", ct_error());
    Fixture f;
    fixture_init(&f, 1, 2);
    TokenSet other;
    snprintf(path, sizeof path, "%s/*.h5", dir);
    CHECK(open_set(path, &other) == 0, "%.400s", ct_error());
    /* the checkpoint's data, but a set that differs in the second file's length */
    free(other.files[0].path);
    other.files[0].path = ct_strdup(f.set.files[0].path);
    free(other.files[1].path);
    other.files[1].path = ct_strdup(f.set.files[1].path);
    CheckpointInfo info;
    int rc = checkpoint_load(good_checkpoint(), 0, &f.cfg, &f.st, &other, &info, NULL);
    CHECK(rc != 0, "loaded against different data");
    CHECK(error_has("b.h5' had 2000 tokens") && error_has("has 1999 now"), "message: %.400s", ct_error());
    /* no resume_data lets the token counts differ: the cursor would mean nothing */
    CHECK(load_with(&f, &other, "changed") != 0 && error_has("has 1999 now"), "changed: %.400s", ct_error());
    /* a different file list */
    data_free_set(&other);
    snprintf(path, sizeof path, "%s/a.h5", dir);
    CHECK(open_set(path, &other) == 0, "%.400s", ct_error());
    rc = load_with(&f, &other, "same");
    data_free_set(&other);
    CHECK(rc != 0, "loaded against different files");
    CHECK(error_has("the checkpoint lists 2 file(s), train_files now matches 1"), "message: %.400s", ct_error());
    /* a file fewer: the message names the missing one */
    CHECK(open_set(f.set.files[0].path, &other) == 0, "%.400s", ct_error());
    rc = checkpoint_load(good_checkpoint(), 0, &f.cfg, &f.st, &other, &info, NULL);
    data_free_set(&other);
    fixture_free(&f);
    CHECK(rc != 0, "loaded against fewer files");
    CHECK(error_has("lists 2 file(s), train_files now matches 1") && error_has("data/b.h5', is only in the checkpoint"),
          "message: %.400s", ct_error());
}

/* resume_data: the same tokens at other paths need "moved"; other tokens of the same count
 * need "changed"; the recorded checksums tell them apart. */
static void load_checks_data_identity(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char moved[800], changed[800];
    make_data_dir("data_moved", 0, 1, moved, sizeof moved);
    make_data_dir("data_changed", 0, 2, changed, sizeof changed);
    TokenSet set;
    CHECK(open_set(moved, &set) == 0, "%.400s", ct_error());
    CHECK(load_with(&f, &set, "same") != 0 && error_has("the training data differs: file 0 is") &&
              error_has("its tokens are the same, so if the data was moved, set resume_data=moved"),
          "moved data, same: %.400s", ct_error());
    CHECK(load_with(&f, &set, "moved") == 0, "moved data, moved: %.400s", ct_error());
    CHECK(load_with(&f, &set, "changed") == 0, "moved data, changed: %.400s", ct_error());
    data_free_set(&set);

    CHECK(open_set(changed, &set) == 0, "%.400s", ct_error());
    /* at the checkpoint's own paths, so that only the content differs */
    for (int i = 0; i < 2; i++) {
        free(set.files[i].path);
        set.files[i].path = ct_strdup(f.set.files[i].path);
    }
    CHECK(load_with(&f, &set, "same") != 0 && error_has("b.h5' holds other tokens than when the checkpoint was written") &&
              error_has("its first and last tokens differ") && error_has("set resume_data=changed"),
          "changed data, same: %.400s", ct_error());
    CHECK(load_with(&f, &set, "moved") != 0 && error_has("holds other tokens"), "changed data, moved: %.400s",
          ct_error());
    CHECK(load_with(&f, &set, "changed") == 0, "changed data, changed: %.400s", ct_error());
    data_free_set(&set);

    /* equal ends but another full checksum (a change in the middle of a long file), and a file
     * that lost its tokens_crc32 attribute */
    CHECK(open_set(f.cfg.train_files, &set) == 0, "%.400s", ct_error());
    CHECK(load_with(&f, &set, "same") == 0, "the checkpoint's own data: %.400s", ct_error());
    set.files[0].tokens_crc32 ^= 0x10;
    CHECK(load_with(&f, &set, "same") != 0 && error_has("a.h5' holds other tokens") && error_has("tokens_crc32 is 0x"),
          "middle changed: %.400s", ct_error());
    set.files[0].tokens_crc32 = -1;
    CHECK(load_with(&f, &set, "same") != 0 && error_has("no longer has the tokens_crc32 attribute"),
          "attribute lost: %.400s", ct_error());
    data_free_set(&set);
    fixture_free(&f);
}

/* A damaged `latest` is described in one readable line. */
static void latest_damage_described(void) {
    char dir[700], path[800];
    snprintf(dir, sizeof dir, "%s/bad_latest", test_tmpdir());
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/latest", dir);
    char name[64];
    FILE *f = fopen(path, "w");
    fclose(f);
    CHECK(ckpt_read_latest(dir, name, sizeof name) < 0 && error_has("latest' is empty, expected the name"), "%.300s",
          ct_error());
    f = fopen(path, "w");
    fputs("step_1\x01\nxyz\n", f);
    fclose(f);
    CHECK(ckpt_read_latest(dir, name, sizeof name) < 0 && error_has("latest' holds 'step_1??xyz', expected"), "%.300s",
          ct_error());
}

/* A set whose identity was never computed cannot be recorded. */
static void save_needs_data_identity(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[800], path[1024];
    snprintf(dir, sizeof dir, "%s/no_identity", test_tmpdir());
    f.set.files[1].sample_crc32 = -1;
    CHECK(save_step(&f, dir, 1, 3, path, sizeof path) != 0 && error_has("identity of training file") &&
              error_has("b.h5"),
          "%.400s", ct_error());
    fixture_free(&f);
}

static char reported[1024];
static void collect_report(const char *key, const char *old_value, const char *new_value) {
    size_t n = strlen(reported);
    snprintf(reported + n, sizeof reported - n, "%s:%s->%s;", key, old_value, new_value);
}

static void load_reports_free_keys(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    config_set(&f.cfg, "iterations", "40", CT_SOURCE_COMMAND_LINE, "test");
    config_set(&f.cfg, "matrix_lr", "0.02", CT_SOURCE_COMMAND_LINE, "test");
    reported[0] = '\0';
    CheckpointInfo info;
    int rc = checkpoint_load(good_checkpoint(), 0, &f.cfg, &f.st, &f.set, &info, collect_report);
    fixture_free(&f);
    checkpoint_info_free(&info);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(!strcmp(reported, "iterations:20->40;matrix_lr:0.04->0.02;"), "reported '%.400s'", reported);
}

/* A checkpoint written before issue 56's schedule and optimizer keys (its /config without them,
 * its content checksum made again as that ctrain wrote it) verifies and loads: FREE keys come
 * from the run's configuration, and a key absent from the file is not reported as changed, even
 * at a non-default value. */
static void load_without_newer_free_keys(void) {
    static const char *const newer[] = {"warmdown_frac", "min_lr", "progress_clock", "gptq_reserve_seconds",
                                        "embed_wd", "muon_polar_express", "muon_row_normalize"};
    char *copy = test_path("before_keys.h5");
    CHECK(copy_file(good_checkpoint(), copy) == 0, "copy failed");
    hid_t file = open_rw(copy);
    ct_hdf5_lock();
    hid_t g = H5Gopen2(file, "/config", H5P_DEFAULT);
    int deleted = 0;
    for (size_t i = 0; i < sizeof newer / sizeof newer[0]; i++) deleted += H5Adelete(g, newer[i]) >= 0;
    H5Gclose(g);
    CkptObjects objs;
    uint32_t crc = 0;
    int sealed = ckpt_list_objects(file, copy, &objs) == 0;
    if (sealed) {
        sealed = ckpt_content_crc(file, copy, &objs, &crc) == 0 && H5Adelete(file, "content_crc32") >= 0 &&
                 ct_h5_attr_write_u32(file, "content_crc32", crc) == 0;
        ckpt_objects_free(&objs);
    }
    H5Fclose(file);
    ct_hdf5_unlock();
    CHECK(deleted == (int)(sizeof newer / sizeof newer[0]) && sealed, "deleted %d of the keys; resealed %d: %.300s",
          deleted, sealed, ct_error());
    CHECK(checkpoint_verify(copy, NULL) == 0, "the file without the keys does not verify: %.400s", ct_error());
    Fixture f;
    fixture_init(&f, 1, 2);
    config_set(&f.cfg, "embed_wd", "0.085", CT_SOURCE_COMMAND_LINE, "test");
    config_set(&f.cfg, "muon_row_normalize", "1", CT_SOURCE_COMMAND_LINE, "test");
    reported[0] = '\0';
    CheckpointInfo info;
    int rc = checkpoint_load(copy, 0, &f.cfg, &f.st, &f.set, &info, collect_report);
    fixture_free(&f);
    if (rc == 0) checkpoint_info_free(&info);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(reported[0] == '\0', "reported '%.400s'", reported);
}

/* ---- resume=auto ---- */

static int warnings;
static char last_warned[1024];
static void collect_warn(const char *path, const char *reason) {
    (void)reason;
    warnings++;
    snprintf(last_warned, sizeof last_warned, "%s", path);
}

static void find_resumable_falls_back(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], p1[1024], p2[1024], found[1024];
    snprintf(dir, sizeof dir, "%s", test_path("fallback"));
    int rc = save_step(&f, dir, 1, 3, p1, sizeof p1);
    if (rc == 0) rc = save_step(&f, dir, 2, 3, p2, sizeof p2);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    warnings = 0;
    CHECK(checkpoint_find_resumable(dir, found, sizeof found, collect_warn) == 1 && !strcmp(found, p2),
          "newest not found: %.300s", ct_error());
    CHECK(warnings == 0, "warned about good checkpoints");
    CHECK(flip_byte(p2, data_offset(p2, "/model/tok_emb.weight") + 5) == 0, "flip failed");
    CHECK(checkpoint_find_resumable(dir, found, sizeof found, collect_warn) == 1, "%.400s", ct_error());
    CHECK(!strcmp(found, p1), "found '%.300s', expected the previous checkpoint '%.300s'", found, p1);
    CHECK(warnings == 1 && !strcmp(last_warned, p2), "warn not called for the corrupt one (%d, '%.300s')", warnings,
          last_warned);
    /* latest naming a missing file: warned, the others are still tried */
    char latest[800];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE *l = fopen(latest, "w");
    fputs("step_00000077.h5\n", l);
    fclose(l);
    warnings = 0;
    CHECK(checkpoint_find_resumable(dir, found, sizeof found, collect_warn) == 1 && !strcmp(found, p1),
          "%.400s", ct_error());
    CHECK(warnings == 2, "expected warnings for the missing latest and the corrupt file, got %d", warnings);
    /* nothing valid left: an error, not "start from scratch" */
    CHECK(flip_byte(p1, data_offset(p1, "/model/tok_emb.weight") + 5) == 0, "flip failed");
    CHECK(checkpoint_find_resumable(dir, found, sizeof found, NULL) == -1, "all corrupt should be an error");
    CHECK(error_has("none of the 2 checkpoint file(s)"), "message: %.400s", ct_error());
}

/* ---- failed and killed saves ---- */

/* dir/latest names a file that verifies, and it is `want` (a name). */
static int latest_is(const char *dir, const char *want) {
    char name[256], path[1024];
    if (ckpt_read_latest(dir, name, sizeof name) != 1) return 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return !strcmp(name, want) && checkpoint_verify(path, NULL) == 0;
}

static int count_tmp_files(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '\\.tmp\\.'", dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

static void failed_save_keeps_previous(void) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], path[1024], blocker[800];
    snprintf(dir, sizeof dir, "%s", test_path("failing"));
    int rc = save_step(&f, dir, 1, 3, path, sizeof path);
    CHECK(rc == 0, "%.400s", ct_error());
    /* the final name is taken by a non-empty directory: everything is written, the rename fails */
    snprintf(blocker, sizeof blocker, "%s/step_00000002.h5/x", dir);
    ct_mkdir_p(blocker);
    rc = save_step(&f, dir, 2, 3, path, sizeof path);
    char message[1024];
    snprintf(message, sizeof message, "%.400s", ct_error());
    int tmp_left = count_tmp_files(dir);
    /* a directory under a regular file cannot be created */
    char bad_dir[1024];
    snprintf(bad_dir, sizeof bad_dir, "%s/latest/sub", dir);
    int rc2 = save_step(&f, bad_dir, 2, 3, path, sizeof path);
    fixture_free(&f);
    CHECK(rc != 0, "save over a directory succeeded");
    CHECK(strstr(message, "cannot rename") && strstr(message, "step_00000002.h5"), "message: %.300s", message);
    CHECK(tmp_left == 0, "%d temporary file(s) left behind", tmp_left);
    CHECK(rc2 != 0, "save under a regular file succeeded");
    CHECK(latest_is(dir, "step_00000001.h5"), "latest no longer names the valid step 1");
}

static const char *kill_stage;
static void kill_at_stage(const char *stage) {
    if (!strcmp(stage, kill_stage)) raise(SIGKILL);
}

/* Save step 2 over a directory holding step 1 in a child killed at `stage`; then the
 * directory must hold a valid checkpoint that latest names (want_latest). */
static void killed_at(const char *stage, const char *want_latest) {
    Fixture f;
    fixture_init(&f, 1, 2);
    char dir[700], path[1024], found[1024];
    snprintf(dir, sizeof dir, "%s/killed_%s", test_tmpdir(), stage);
    int rc = save_step(&f, dir, 1, 1, path, sizeof path);
    fflush(stdout);
    pid_t pid = rc == 0 ? fork() : -1;
    if (pid == 0) {
        kill_stage = stage;
        ckpt_test_stage_hook = kill_at_stage;
        save_step(&f, dir, 2, 1, path, sizeof path);
        _exit(0);
    }
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    int killed = pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    int resumable = checkpoint_find_resumable(dir, found, sizeof found, NULL);
    int good_latest = latest_is(dir, want_latest);
    /* the next save cleans up after the killed one */
    int rc2 = save_step(&f, dir, 3, 1, path, sizeof path);
    int tmp_left = count_tmp_files(dir);
    fixture_free(&f);
    CHECK(rc == 0, "%.400s", ct_error());
    CHECK(killed, "the child was not killed at stage %s (status %d)", stage, status);
    CHECK(resumable == 1, "no resumable checkpoint after a kill at %s: %.300s", stage, ct_error());
    CHECK(good_latest, "latest does not name a valid %s after a kill at %s", want_latest, stage);
    CHECK(rc2 == 0 && tmp_left == 0, "next save: rc %d, %d temporary file(s) left", rc2, tmp_left);
}

static void killed_half_written(void) { killed_at("tmp-half-written", "step_00000001.h5"); }
static void killed_after_tmp_written(void) { killed_at("tmp-written", "step_00000001.h5"); }
static void killed_after_rename(void) { killed_at("renamed", "step_00000001.h5"); }
static void killed_with_latest_tmp(void) { killed_at("latest-tmp-written", "step_00000001.h5"); }
static void killed_after_latest(void) { killed_at("latest-renamed", "step_00000002.h5"); }
static void killed_while_pruning(void) { killed_at("pruning", "step_00000002.h5"); }

/* ---- HDF5_USE_FILE_LOCKING ---- */

/* HDF5 reads the variable when the library initialises, so each case runs in a fresh process:
 * this program re-executed as `--verify-under-flock FILE` or `--fixture DIR`. */
static int run_self(const char *locking, const char *mode, const char *arg, char *out, size_t cap) {
    char exe[1024], cmd[4096], *log = test_path("self.log");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    snprintf(cmd, sizeof cmd, "%s%s%s '%s' %s '%s' >'%s' 2>&1", locking ? "HDF5_USE_FILE_LOCKING=" : "",
             locking ? locking : "", locking ? "" : "unset HDF5_USE_FILE_LOCKING;", exe, mode, arg, log);
    int status = system(cmd);
    read_text(log, out, cap);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --verify-under-flock: verify FILE while this process holds an exclusive flock on it, as a
 * writer would; HDF5's own lock attempt then fails unless locking is off. */
static int verify_under_flock(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
        perror(path);
        return 2;
    }
    int rc = checkpoint_verify(path, NULL);
    if (rc != 0) ct_print_error();
    close(fd);
    return rc ? 1 : 0;
}

static void file_locking_env_honoured(void) {
    char out[2048];
    const char *good = good_checkpoint();
    int locked = run_self(NULL, "--verify-under-flock", good, out, sizeof out);
    CHECK(locked == 1 && strstr(out, "unable to lock file"),
          "with locking on, opening a flock'ed file should fail (exit %d: %.300s)", locked, out);
    int unlocked = run_self("FALSE", "--verify-under-flock", good, out, sizeof out);
    CHECK(unlocked == 0, "HDF5_USE_FILE_LOCKING=FALSE was not honoured (exit %d: %.300s)", unlocked, out);
    /* a whole save with locking off, then verified here */
    int fixture = run_self("FALSE", "--fixture", test_path("nolock"), out, sizeof out);
    CHECK(fixture == 0, "saving with HDF5_USE_FILE_LOCKING=FALSE failed (exit %d: %.300s)", fixture, out);
    char path[1024];
    snprintf(path, sizeof path, "%s/run/checkpoints/step_00000003.h5", test_path("nolock"));
    CHECK(checkpoint_verify(path, NULL) == 0, "%.400s", ct_error());
}

/* ---- ctrain ckpt ---- */

static void ckpt_command_exit_codes(void) {
    static char out[65536];
    const char *good = good_checkpoint();
    char *flipped = test_path("cmd_flipped.h5");
    CHECK(copy_file(good, flipped) == 0 && flip_byte(flipped, data_offset(flipped, "/model/skip_weights") + 2) == 0,
          "flip failed");
    const char *info[] = {"ckpt", "info", good};
    CHECK(run_ckpt(out, sizeof out, 3, info) == 0, "info failed: %.400s", out);
    CHECK(strstr(out, "step:           9") && strstr(out, "/model/blocks.0.attn.c_q.weight") &&
              strstr(out, "[16, 16]"),
          "info output: %.400s", out);
    const char *verify_ok[] = {"ckpt", "verify", good};
    CHECK(run_ckpt(out, sizeof out, 3, verify_ok) == 0 && strstr(out, ": valid (step 9"), "verify: %.400s", out);
    const char *verify_bad[] = {"ckpt", "verify", good, flipped};
    CHECK(run_ckpt(out, sizeof out, 4, verify_bad) == 1 && strstr(out, "/model/skip_weights"), "verify bad: %.400s", out);
    const char *diff_same[] = {"ckpt", "diff", "--exact", good, good};
    CHECK(run_ckpt(out, sizeof out, 5, diff_same) == 0 && strstr(out, "identical: yes"), "diff same: %.400s", out);
    const char *usage[] = {"ckpt", "diff", good};
    CHECK(run_ckpt(out, sizeof out, 3, usage) == 2, "diff with one file should be a usage error: %.400s", out);
    const char *unknown[] = {"ckpt", "frob"};
    CHECK(run_ckpt(out, sizeof out, 2, unknown) == 2 && strstr(out, "unknown ckpt command 'frob'"), "%.400s", out);
    const char *help[] = {"ckpt", "verify", "--help"};
    CHECK(run_ckpt(out, sizeof out, 3, help) == 0 && strstr(out, "usage: ctrain ckpt verify"), "%.400s", out);
}

/* ---- fixture for tests/cli/test_ckpt.sh ---- */

/* DIR/run/checkpoints: steps 1..3 (keep 3) of a tied 3-layer model on DIR/data/train.h5;
 * DIR/other/checkpoints/step_00000003.h5: the same but one tensor and the step changed. */
static int make_fixture(const char *dir) {
    char data_dir[700], data[800], run[800], other[800], path[1024];
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(data, sizeof data, "%s/train.h5", data_dir);
    snprintf(run, sizeof run, "%s/run/checkpoints", dir);
    snprintf(other, sizeof other, "%s/other/checkpoints", dir);
    if (ct_mkdir_p(data_dir) != 0 || make_data(data, 4000, 0) != 0) return -1;
    Fixture f;
    make_config(&f.cfg, data, 1, 3);
    if (open_set(data, &f.set) != 0) return -1;
    make_state(&f.st, &f.cfg);
    int rc = 0;
    for (int step = 1; step <= 3 && rc == 0; step++) rc = save_step(&f, run, step, 3, path, sizeof path);
    if (rc == 0) {
        f.st.params[model_block_param(&f.st.spec, 1, BLK_FC)->offset + 3] += 0.5f;
        rc = save_step(&f, other, 4, 3, path, sizeof path);
    }
    fixture_free(&f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--verify-under-flock")) return verify_under_flock(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--fixture")) {
        if (make_fixture(argv[2]) != 0) {
            ct_print_error();
            return 1;
        }
        return 0;
    }
    RUN(roundtrip_tied);
    RUN(roundtrip_untied_with_lm_head);
    RUN(roundtrip_empty_tensor);
    RUN(info_round_trips_cursor_in_second_file);
    RUN(lineage_round_trips_and_is_optional);
    RUN(lineage_sets_aside_the_abandoned);
    RUN(prune_keeps_newest);
    RUN(same_step_replaced_atomically);
    RUN(dir_has_checkpoints_cases);
    RUN(verify_detects_truncation);
    RUN(verify_detects_flipped_tensor_byte);
    RUN(verify_detects_flipped_optimizer_byte);
    RUN(verify_detects_missing_tensor);
    RUN(verify_detects_wrong_format);
    RUN(verify_detects_edited_attribute);
    RUN(verify_detects_unexpected_object);
    RUN(verify_rejects_non_checkpoints);
    RUN(load_refuses_changed_shape_key);
    RUN(load_without_newer_free_keys);
    RUN(load_takes_absent_keys_as_default);
    RUN(load_refuses_different_data);
    RUN(load_checks_data_identity);
    RUN(save_needs_data_identity);
    RUN(latest_damage_described);
    RUN(load_reports_free_keys);
    RUN(find_resumable_falls_back);
    RUN(failed_save_keeps_previous);
    RUN(killed_half_written);
    RUN(killed_after_tmp_written);
    RUN(killed_after_rename);
    RUN(killed_with_latest_tmp);
    RUN(killed_after_latest);
    RUN(killed_while_pruning);
    RUN(file_locking_env_honoured);
    RUN(ckpt_command_exit_codes);
    TEST_EXIT();
}
