/* ckpt_lineage.c — a checkpoint's lineage (docs/checkpoint-format.md "Lineage"): new lineage
 * ids, their root attributes and which checkpoints belong to a lineage's history, so that
 * neither pruning nor a fallback to an older file ever mixes two lines of training in one
 * directory (ckpt_aside.c moves an abandoned lineage's files out of the way). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"
#include "isolate.h"

/* 64 random bits: two runs started the same second on two nodes must not share an id. */
static uint64_t random_bits(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, &v, sizeof v);
        close(fd);
        if (n == (ssize_t)sizeof v) return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    return v ^ (v >> 33);
}

void checkpoint_lineage_start(CheckpointLineage *l, const CheckpointLineage *from, int64_t from_step,
                              uint32_t from_crc32, const char *from_path) {
    memset(l, 0, sizeof *l);
    snprintf(l->id, sizeof l->id, "%016llx", (unsigned long long)random_bits());
    l->origin_step = l->origin_crc32 = -1;
    if (!from_path) return;
    snprintf(l->origin, sizeof l->origin, "%s", from ? from->id : "");
    l->origin_step = from_step;
    l->origin_crc32 = from_crc32;
    snprintf(l->origin_path, sizeof l->origin_path, "%s", from_path);
}

int checkpoint_lineage_has(const CheckpointLineage *l, const CheckpointLineage *c, int64_t c_step) {
    if (!strcmp(c->id, l->id)) return 1;
    return l->origin_step >= 0 && !strcmp(c->id, l->origin) && c_step <= l->origin_step;
}

/* An optional root string attribute into buf (left as it is when the file lacks it). */
static int read_optional_str(hid_t file, const char *path, const char *name, char *buf, size_t cap) {
    hid_t attr;
    int found = ct_h5_attr_find(file, path, "/", name, &attr);
    if (found <= 0) return found;
    char *s = NULL;
    int rc = ct_h5_attr_read_str(attr, path, "/", name, &s);
    H5Aclose(attr);
    if (rc == 0 && strlen(s) >= cap)
        rc = ct_fail("'%s': root attribute %s holds %zu bytes, expected at most %zu", path, name, strlen(s), cap - 1);
    if (rc == 0) snprintf(buf, cap, "%s", s);
    free(s);
    return rc;
}

static int read_optional_i64(hid_t file, const char *path, const char *name, int64_t min, int64_t max,
                             int64_t *value) {
    hid_t attr;
    int found = ct_h5_attr_find(file, path, "/", name, &attr);
    if (found <= 0) return found;
    int rc = ct_h5_attr_read_i64(attr, path, "/", name, value);
    H5Aclose(attr);
    if (rc == 0 && (*value < min || *value > max))
        rc = ct_fail("'%s': root attribute %s is %lld, expected %lld .. %lld", path, name, (long long)*value,
                     (long long)min, (long long)max);
    return rc;
}

int ckpt_lineage_read(hid_t file, const char *path, CheckpointLineage *l) {
    memset(l, 0, sizeof *l);
    l->origin_step = l->origin_crc32 = -1;
    if (read_optional_str(file, path, "lineage", l->id, sizeof l->id) < 0 ||
        read_optional_str(file, path, "lineage_origin", l->origin, sizeof l->origin) < 0 ||
        read_optional_i64(file, path, "lineage_origin_step", -1, INT64_MAX, &l->origin_step) < 0 ||
        read_optional_i64(file, path, "lineage_origin_crc32", -1, UINT32_MAX, &l->origin_crc32) < 0 ||
        read_optional_str(file, path, "lineage_origin_path", l->origin_path, sizeof l->origin_path) < 0)
        return -1;
    return 0;
}

int ckpt_lineage_write(hid_t file, const CheckpointLineage *l) {
    if (!l->id[0]) return 0;
    return ct_h5_attr_write_str(file, "lineage", l->id) != 0 ||
                   ct_h5_attr_write_str(file, "lineage_origin", l->origin) != 0 ||
                   ct_h5_attr_write_i64(file, "lineage_origin_step", l->origin_step) != 0 ||
                   ct_h5_attr_write_i64(file, "lineage_origin_crc32", l->origin_crc32) != 0 ||
                   ct_h5_attr_write_str(file, "lineage_origin_path", l->origin_path) != 0
               ? -1
               : 0;
}

int ckpt_read_lineage_here(const char *path, CheckpointLineage *l, int64_t *step, uint32_t *content_crc32) {
    ct_hdf5_lock();
    hid_t file = ckpt_open_read(path);
    int rc = file < 0 ? -1 : ckpt_lineage_read(file, path, l);
    int64_t crc = 0;
    if (rc == 0 && (ckpt_attr_read_i64(file, path, "/", "step", step) != 0 ||
                    ckpt_attr_read_i64(file, path, "/", "content_crc32", &crc) != 0))
        rc = -1;
    if (file >= 0) H5Fclose(file);
    H5Eclear2(H5E_DEFAULT);
    ct_hdf5_unlock();
    if (rc == 0 && content_crc32) *content_crc32 = (uint32_t)crc;
    return rc;
}

typedef struct {
    CheckpointLineage lineage;
    int64_t step;
    uint32_t crc;
} LineageRead;

static int read_in_child(void *ctx, void *out) {
    LineageRead *r = out;
    return ckpt_read_lineage_here(ctx, &r->lineage, &r->step, &r->crc);
}

int checkpoint_read_lineage(const char *path, CheckpointLineage *l, int64_t *step, uint32_t *content_crc32) {
    /* in a child process: the file may be one whose damaged metadata crashes HDF5 (a fallback
     * reads the lineage of the file that just failed verification) */
    char what[4300];
    snprintf(what, sizeof what, "reading the lineage of '%s' (damaged HDF5 structure?)", path);
    LineageRead r;
    memset(&r, 0, sizeof r);
    if (ct_run_isolated(what, read_in_child, (void *)path, &r, sizeof r, 60.0) != 0) return -1;
    *l = r.lineage;
    *step = r.step;
    if (content_crc32) *content_crc32 = r.crc;
    return 0;
}
