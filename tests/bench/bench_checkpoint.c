/* bench_checkpoint.c — save, verify and load time of a checkpoint of the baseline model
 * (9 layers x 512, vocab 1024: 17.06M parameters, with Adam and Muon state), against the raw
 * disk write speed measured in the same run (the same number of bytes written and fsynced
 * with plain write(2)). Usage: bench_checkpoint [DIR] (default: $TMPDIR or /tmp). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "data.h"

static double raw_write_ms(const char *path, size_t bytes) {
    size_t block = (size_t)1 << 20;
    char *buf = ct_malloc(block, "write buffer");
    for (size_t i = 0; i < block; i++) buf[i] = (char)(i * 131u);
    double t = ct_now_ms();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    for (size_t done = 0; done < bytes; done += block) {
        size_t n = bytes - done < block ? bytes - done : block;
        if (write(fd, buf, n) != (ssize_t)n) return -1;
    }
    fsync(fd);
    close(fd);
    t = ct_now_ms() - t;
    unlink(path);
    free(buf);
    return t;
}

int main(int argc, char **argv) {
    const char *base = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[1024], data[1100], ckdir[1100], path[1300];
    snprintf(dir, sizeof dir, "%s/ctrain-bench-ckpt.%d", base, (int)getpid());
    snprintf(data, sizeof data, "%s/data.h5", dir);
    snprintf(ckdir, sizeof ckdir, "%s/checkpoints", dir);
    if (ct_mkdir_p(dir) != 0) goto fail;

    TokenWriter *w;
    uint16_t tokens[4096];
    for (int i = 0; i < 4096; i++) tokens[i] = (uint16_t)(i % 1024);
    if (token_writer_create(&w, data, 2, 1024, -1, "bench") != 0 || token_writer_append(w, tokens, 4096) != 0 ||
        token_writer_close(w) != 0)
        goto fail;
    Config cfg;
    config_init(&cfg);
    if (config_set(&cfg, "train_files", data, 2, "bench") != 0) goto fail;
    TokenSet set;
    TrainState st;
    if (data_open_set(data, &set) != 0 || data_fingerprint(&set) != 0 || train_state_init(&st, &cfg) != 0) goto fail;
    size_t n = st.spec.total_floats;
    for (size_t i = 0; i < n; i++) {
        st.exp_avg[i] = st.params[i] * 0.5f;
        st.exp_avg_sq[i] = st.params[i] * st.params[i];
        st.momentum[i] = -st.params[i];
    }
    st.adam_step = 1000;
    CheckpointInfo info;
    memset(&info, 0, sizeof info);
    info.step = 1000;
    info.world_size = 8;
    info.device = "cpu";
    info.cursor = (LoaderCursor){0, 0, 0};

    double best_save = 1e30, best_verify = 1e30, best_load = 1e30, best_raw = 1e30;
    struct stat sb;
    for (int rep = 0; rep < 3; rep++) {
        double t = ct_now_ms();
        if (checkpoint_save(ckdir, &cfg, &st, &info, &set, 1, path, sizeof path) != 0) goto fail;
        t = ct_now_ms() - t;
        if (t < best_save) best_save = t;
        t = ct_now_ms();
        if (checkpoint_verify(path, NULL) != 0) goto fail;
        t = ct_now_ms() - t;
        if (t < best_verify) best_verify = t;
        CheckpointInfo back;
        t = ct_now_ms();
        if (checkpoint_load(path, 0, &cfg, &st, &set, &back, NULL) != 0) goto fail;
        t = ct_now_ms() - t;
        checkpoint_info_free(&back);
        if (t < best_load) best_load = t;
        if (stat(path, &sb) != 0) goto fail;
        char raw[1400];
        snprintf(raw, sizeof raw, "%s/raw.bin", dir);
        t = raw_write_ms(raw, (size_t)sb.st_size);
        if (t > 0 && t < best_raw) best_raw = t;
    }
    double mb = (double)sb.st_size / 1e6;
    printf("checkpoint of %zu parameters (%.1f MB file, %s)\n", n, mb, dir);
    printf("  save   %7.0f ms  %6.0f MB/s   (write + fsync + rename + latest)\n", best_save, mb / best_save * 1e3);
    printf("  verify %7.0f ms  %6.0f MB/s   (Fletcher32 + content CRC)\n", best_verify, mb / best_verify * 1e3);
    printf("  load   %7.0f ms  %6.0f MB/s   (verify + read into the state)\n", best_load, mb / best_load * 1e3);
    printf("  raw write of the same bytes + fsync: %7.0f ms  %6.0f MB/s\n", best_raw, mb / best_raw * 1e3);
    printf("BENCH checkpoint_save_ms %.0f\nBENCH checkpoint_load_ms %.0f\nBENCH checkpoint_verify_ms %.0f\n"
           "BENCH raw_write_ms %.0f\nBENCH checkpoint_mb %.1f\n",
           best_save, best_load, best_verify, best_raw, mb);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return 0;
fail:
    ct_print_error();
    return 1;
}
