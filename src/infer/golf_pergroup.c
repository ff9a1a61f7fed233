/* golf_pergroup.c — the gptq-pergroup artifact (golf_artifact.h; docs/checkpoint-format.md,
 * "gptq-pergroup"): gptq-brotli's quantized container (golf_gptq_artifact.c) split as the 1.0611
 * record's COMPRESSOR=pergroup splits its tensors. The int8 values of the GPTQ matrices go by role
 * into seven groups (the record's order below; blocks in index order within a group), each matrix
 * column-major and, in the hot groups, its rows first put in L1 nearest-neighbour order (the
 * order stored as uint16), each group compressed by Debian's lrzip in ZPAQ mode at level 9 run as
 * a subprocess, as the record runs it (`lrzip -z -L 9`; its output depends on its input only: the
 * same bytes run to run). What is left of the container (its header, scales, LQER factors, gate
 * rows, float16 tensors) is one brotli stream, the row orders another. Reading splices the
 * groups back into the container, so the weights are gptq-brotli's exactly and the container's
 * CRC-32 checks every byte after lrzip's own MD5. The groups' lrzip processes run side by side
 * (each group's bytes depend on its input alone, so the artifact is the same whatever the order
 * they finish in; the record's reader likewise decompresses its groups in parallel threads); their
 * files live in a private temporary directory removed on every path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "common.h"
#include "golf_artifact_internal.h"

/* the record's group order; hot: rows reordered */
static const struct {
    const char *suffix; /* after "blocks.N." (tok_emb: the whole name) */
    int hot;
} GROUPS[] = {
    {"tok_emb.weight", 1}, {"attn.c_k.weight", 0}, {"attn.c_q.weight", 1}, {"attn.c_v.weight", 0},
    {"attn.proj.weight", 0}, {"mlp.fc.weight", 1},  {"mlp.proj.weight", 0},
};
enum {
    NUM_GROUPS = (int)(sizeof GROUPS / sizeof GROUPS[0]),
    NUM_STREAMS = NUM_GROUPS + 2, /* the groups, the remainder, the row orders */
    TABLE_BYTES = 8 + 4 * NUM_STREAMS,
    REMAINDER_WINDOW = 24, /* the record's lgwin for the remainder */
};
static const char MAGIC[4] = {'C', 'T', 'P', 'G'};

/* The group of parameter name, or -1. */
static int group_of(const char *name) {
    if (!strcmp(name, GROUPS[0].suffix)) return 0;
    if (strncmp(name, "blocks.", 7) != 0) return -1;
    const char *p = name + 7;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') p++;
    if (*p++ != '.') return -1;
    for (int g = 1; g < NUM_GROUPS; g++)
        if (!strcmp(p, GROUPS[g].suffix)) return g;
    return -1;
}

/* ---- the L1 row order ---- */

/* the rows' values biased to unsigned (x ^ 0x80 keeps |a - b|), a form the compiler sums with
 * SAD instructions */
static uint32_t l1_distance(const uint8_t *a, const uint8_t *b, int n) {
    uint32_t s = 0;
    for (int i = 0; i < n; i++) s += (uint32_t)abs((int)a[i] - (int)b[i]);
    return s;
}

void golf_l1_sort_rows(const int8_t *m, int rows, int cols, uint16_t *order) {
    if (rows <= 0) return;
    uint8_t *u = ct_malloc((size_t)rows * cols + 1, "L1 sort");
    for (size_t i = 0; i < (size_t)rows * cols; i++) u[i] = (uint8_t)m[i] ^ 0x80;
    int *unused = ct_malloc((size_t)rows * sizeof *unused, "L1 sort"); /* ascending, so ties go to the lowest */
    int left = rows - 1, cur = 0;
    for (int i = 0; i < left; i++) unused[i] = i + 1;
    order[0] = 0;
    for (int k = 1; k < rows; k++) {
        const uint8_t *a = u + (size_t)cur * cols;
        int best = 0;
        uint32_t best_d = UINT32_MAX;
        for (int j = 0; j < left; j++) {
            const uint32_t d = l1_distance(a, u + (size_t)unused[j] * cols, cols);
            if (d < best_d) best_d = d, best = j;
        }
        cur = unused[best];
        order[k] = (uint16_t)cur;
        memmove(unused + best, unused + best + 1, (size_t)(left - best - 1) * sizeof *unused);
        left--;
    }
    free(unused);
    free(u);
}

/* ---- lrzip, a subprocess in a private directory ---- */

typedef struct {
    char dir[4200]; /* "" until made */
    const char *path; /* the artifact, for messages */
} Scratch;

static int scratch_open(Scratch *s, const char *path) {
    const char *tmp = getenv("TMPDIR");
    s->path = path;
    snprintf(s->dir, sizeof s->dir, "%s/ctrain-pgrp-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->dir)) {
        const int e = errno;
        char tried[4200];
        snprintf(tried, sizeof tried, "%s", s->dir);
        s->dir[0] = 0;
        return ct_fail("'%s': cannot make a temporary directory for lrzip (%s): %s", path, tried, strerror(e));
    }
    return 0;
}

static void scratch_file(const Scratch *s, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", s->dir, name);
}

static void scratch_close(Scratch *s) {
    static const char *const names[] = {"in", "out", "log"};
    char f[4300], name[32];
    if (!s->dir[0]) return;
    for (int g = 0; g < NUM_GROUPS; g++)
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "%s-%d", names[i], g);
            scratch_file(s, name, f, sizeof f), unlink(f);
        }
    rmdir(s->dir);
    s->dir[0] = 0;
}

static int write_whole(const char *file, const unsigned char *b, size_t n) {
    FILE *f = fopen(file, "wb");
    int bad = !f || (n && fwrite(b, 1, n, f) != n);
    if (f && fclose(f) != 0) bad = 1;
    return bad ? ct_fail("cannot write '%s': %s", file, strerror(errno)) : 0;
}

/* lrzip's complaint for a message: its first line saying "error" or "failed", else its last line */
static void log_complaint(const char *log, char *buf, size_t cap) {
    char line[512];
    buf[0] = 0;
    FILE *f = fopen(log, "r");
    if (!f) return;
    while (fgets(line, (int)sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[strspn(line, " ")]) continue;
        snprintf(buf, cap, "%s", line);
        if (strstr(line, "rror") || strstr(line, "ailed")) break;
    }
    fclose(f);
}

/* One group's lrzip process: its files in the scratch directory, its pid while it runs. */
typedef struct {
    char in[4300], out[4300], log[4300];
    pid_t pid; /* 0: not started (an empty group) */
} LrzipJob;

/* Starts lrzip (compress: -z -L 9; else -d) on in[len] as group g's job. */
static int lrzip_start(Scratch *s, int compress, int g, const unsigned char *in, size_t len, LrzipJob *j) {
    char name[32];
    snprintf(name, sizeof name, "in-%d", g), scratch_file(s, name, j->in, sizeof j->in);
    snprintf(name, sizeof name, "out-%d", g), scratch_file(s, name, j->out, sizeof j->out);
    snprintf(name, sizeof name, "log-%d", g), scratch_file(s, name, j->log, sizeof j->log);
    unlink(j->out);
    if (write_whole(j->in, in, len) != 0) return -1;
    const char *argv_z[] = {"lrzip", "-q", "-f", "-z", "-L", "9", "-o", j->out, j->in, NULL};
    const char *argv_d[] = {"lrzip", "-q", "-f", "-d", "-o", j->out, j->in, NULL};
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        const int nul = open("/dev/null", O_RDONLY), log = open(j->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (nul >= 0) dup2(nul, STDIN_FILENO);
        if (log >= 0) dup2(log, STDOUT_FILENO), dup2(log, STDERR_FILENO);
        execvp("lrzip", (char *const *)(compress ? argv_z : argv_d));
        _exit(127);
    }
    if (pid < 0) return ct_fail("'%s': cannot start lrzip: %s", s->path, strerror(errno));
    j->pid = pid;
    return 0;
}

/* Waits for a started job; its output -> *out (malloc'd) when rc is 0 and it succeeded. what
 * names the group. Always waits (no process is left behind), whatever rc says. */
static int lrzip_finish(const Scratch *s, int compress, LrzipJob *j, int rc, unsigned char **out, size_t *out_len,
                        const char *what) {
    int status = 0;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR) {
    }
    j->pid = 0;
    unlink(j->in);
    if (rc == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127)
        rc = ct_fail("'%s': gptq-pergroup runs lrzip (its groups' ZPAQ compression) and none was found on PATH; "
                     "install it (Debian: apt-get install lrzip, or run scripts/install-deps.sh)", s->path);
    /* killed (a kill, the OOM killer): no fault of the data, and lrzip had no time to say a word */
    if (rc == 0 && WIFSIGNALED(status))
        rc = ct_fail("'%s': lrzip was killed by signal %d (%s) while %s the %s group; run the command again",
                     s->path, WTERMSIG(status), strsignal(WTERMSIG(status)), compress ? "compressing" : "decompressing",
                     what);
    if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        char why[512];
        log_complaint(j->log, why, sizeof why);
        rc = compress ? ct_fail("'%s': lrzip failed compressing the %s group (exit status %d): %s", s->path, what,
                                WEXITSTATUS(status), *why ? why : "(no message)")
                      : ct_fail("'%s' is damaged: lrzip cannot decompress its %s group: %s", s->path, what,
                                *why ? why : "(no message)");
    }
    struct stat st;
    if (rc == 0 && stat(j->out, &st) != 0)
        rc = ct_fail("'%s': lrzip exited 0 but wrote no output for the %s group (%s: %s); is the lrzip on PATH "
                     "Debian's?", s->path, what, j->out, strerror(errno));
    if (rc == 0) rc = golf_file_read(j->out, out, out_len);
    unlink(j->out);
    return rc;
}

/* in[g] -> lrzip -> out[g] (malloc'd) for every group with len[g] > 0, all processes side by
 * side; the first failure in group order is the error. */
static int lrzip_groups(Scratch *s, int compress, unsigned char *const *in, const size_t *len, unsigned char **out,
                        size_t *out_len) {
    LrzipJob jobs[NUM_GROUPS];
    int rc = 0;
    for (int g = 0; g < NUM_GROUPS; g++) {
        jobs[g].pid = 0;
        out[g] = NULL, out_len[g] = 0;
        if (rc == 0 && len[g]) rc = lrzip_start(s, compress, g, in[g], len[g], &jobs[g]);
    }
    for (int g = 0; g < NUM_GROUPS; g++)
        if (jobs[g].pid > 0) rc = lrzip_finish(s, compress, &jobs[g], rc, &out[g], &out_len[g], GROUPS[g].suffix);
    return rc;
}

/* ---- the layout ---- */

static void put_u32(unsigned char *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

typedef struct {
    int n;
    GolfGptqValues *values; /* per parameter: its ".q" in the container's data (bytes 0: not grouped) */
    size_t header_len, data_bytes, grouped_bytes, order_rows; /* order_rows: rows of the hot matrices */
} Split;

/* Which parameters go to groups: the GPTQ matrices of a group's role; the rest stays. */
static int split_of(const ModelSpec *spec, const unsigned char *container, size_t len, const char *path, Split *sp) {
    sp->n = model_artifact_params(spec);
    sp->values = ct_calloc((size_t)sp->n + 1, sizeof *sp->values, "artifact groups");
    if (golf_gptq_values(spec, container, len, path, &sp->header_len, &sp->data_bytes, sp->values) != 0) return -1;
    sp->grouped_bytes = sp->order_rows = 0;
    for (int i = 0; i < sp->n; i++) {
        const int g = group_of(spec->params[i].name);
        if (g < 0 || !sp->values[i].bytes) {
            sp->values[i].bytes = 0;
            continue;
        }
        if (GROUPS[g].hot && spec->params[i].shape[0] > 65536)
            return ct_fail("'%s': %s has %lld rows, more than a uint16 row order can hold", path,
                           spec->params[i].name, (long long)spec->params[i].shape[0]);
        sp->grouped_bytes += sp->values[i].bytes;
        if (GROUPS[g].hot) sp->order_rows += (size_t)spec->params[i].shape[0];
    }
    return 0;
}

/* The remainder's data: the container's data without the grouped ranges, in data order. to_rest:
 * from the container's data (src) to the remainder's (dst); else back. */
static void remainder_copy(const Split *sp, const unsigned char *src, unsigned char *dst, int to_rest) {
    size_t at = 0, r = 0;
    for (int i = 0; i <= sp->n; i++) {
        const size_t end = i < sp->n ? (sp->values[i].bytes ? sp->values[i].offset : at) : sp->data_bytes;
        if (end > at) {
            if (to_rest) memcpy(dst + r, src + at, end - at);
            else memcpy(dst + at, src + r, end - at);
            r += end - at;
            at = end;
        }
        if (i < sp->n && sp->values[i].bytes) at = sp->values[i].offset + sp->values[i].bytes;
    }
}

/* ---- writing ---- */

int golf_pergroup_pack(const ModelSpec *spec, const unsigned char *raw, size_t raw_len, const char *path,
                       int64_t *file_bytes) {
    Split sp = {0};
    Scratch scratch = {{0}, path};
    unsigned char *stream[NUM_STREAMS] = {0};
    size_t stream_len[NUM_STREAMS] = {0};
    int rc = split_of(spec, raw, raw_len, path, &sp);
    if (rc == 0) rc = scratch_open(&scratch, path);
    uint16_t *orders = rc == 0 ? ct_malloc(sp.order_rows * sizeof *orders + 2, "row orders") : NULL;
    size_t orders_used = 0;
    const unsigned char *data = raw + sp.header_len;
    unsigned char *blobs[NUM_GROUPS] = {0};
    size_t blob_len[NUM_GROUPS] = {0};
    for (int g = 0; rc == 0 && g < NUM_GROUPS; g++) {
        size_t bytes = 0;
        for (int i = 0; i < sp.n; i++)
            if (sp.values[i].bytes && group_of(spec->params[i].name) == g) bytes += sp.values[i].bytes;
        if (!bytes) continue; /* an empty stream */
        unsigned char *blob = ct_malloc(bytes, "artifact group"), *at = blob;
        blobs[g] = blob, blob_len[g] = bytes;
        for (int i = 0; i < sp.n; i++) {
            if (!sp.values[i].bytes || group_of(spec->params[i].name) != g) continue;
            const int rows = (int)spec->params[i].shape[0], cols = (int)spec->params[i].shape[1];
            const int8_t *m = (const int8_t *)(data + sp.values[i].offset);
            uint16_t *order = orders + orders_used;
            if (GROUPS[g].hot) golf_l1_sort_rows(m, rows, cols, order), orders_used += (size_t)rows;
            for (int c = 0; c < cols; c++) /* column-major: stored row k is the matrix's row order[k] */
                for (int k = 0; k < rows; k++)
                    *at++ = (unsigned char)m[(size_t)(GROUPS[g].hot ? order[k] : k) * cols + c];
        }
    }
    if (rc == 0) rc = lrzip_groups(&scratch, 1, blobs, blob_len, stream, stream_len);
    for (int g = 0; g < NUM_GROUPS; g++) free(blobs[g]);
    if (rc == 0) {
        const size_t rest_len = sp.header_len + sp.data_bytes - sp.grouped_bytes;
        unsigned char *rest = ct_malloc(rest_len + 1, "artifact remainder");
        memcpy(rest, raw, sp.header_len);
        remainder_copy(&sp, raw + sp.header_len, rest + sp.header_len, 1);
        rc = golf_brotli_compress(rest, rest_len, REMAINDER_WINDOW, &stream[NUM_GROUPS], &stream_len[NUM_GROUPS], path);
        free(rest);
    }
    if (rc == 0 && orders_used) {
        unsigned char *b = ct_malloc(orders_used * 2, "row orders");
        for (size_t i = 0; i < orders_used; i++)
            b[2 * i] = (unsigned char)orders[i], b[2 * i + 1] = (unsigned char)(orders[i] >> 8);
        rc = golf_brotli_compress(b, orders_used * 2, GOLF_BROTLI_WINDOW, &stream[NUM_GROUPS + 1],
                                  &stream_len[NUM_GROUPS + 1], path);
        free(b);
    }
    scratch_close(&scratch);
    unsigned char table[TABLE_BYTES];
    size_t total = TABLE_BYTES;
    memcpy(table, MAGIC, 4);
    put_u32(table + 4, NUM_STREAMS);
    for (int k = 0; k < NUM_STREAMS; k++) {
        if (rc == 0 && stream_len[k] > UINT32_MAX)
            rc = ct_fail("'%s': a stream of %zu bytes is too long for the length table", path, stream_len[k]);
        put_u32(table + 8 + 4 * k, (uint32_t)stream_len[k]);
        total += stream_len[k];
    }
    *file_bytes = rc == 0 ? (int64_t)total : 0;
    if (rc == 0) {
        const void *parts[NUM_STREAMS + 1] = {table};
        size_t lens[NUM_STREAMS + 1] = {TABLE_BYTES};
        for (int k = 0; k < NUM_STREAMS; k++) parts[k + 1] = stream[k], lens[k + 1] = stream_len[k];
        rc = golf_file_write_atomically(path, parts, lens, NUM_STREAMS + 1);
    }
    for (int k = 0; k < NUM_STREAMS; k++) free(stream[k]);
    free(orders);
    free(sp.values);
    return rc;
}

int golf_pergroup_write(const ModelSpec *spec, const float *params, const GolfGptqOptions *o, const char *path,
                        GolfStats *stats) {
    unsigned char *raw = NULL;
    size_t raw_len = 0;
    int rc = golf_gptq_container(spec, params, o, path, stats, &raw, &raw_len);
    if (rc == 0) rc = golf_pergroup_pack(spec, raw, raw_len, path, &stats->file_bytes);
    free(raw);
    return rc;
}

/* ---- reading ---- */

/* A group's bytes back into the container's data (the row orders from *orders on). */
static int unpack_group(const ModelSpec *spec, const Split *sp, int g, const unsigned char *blob,
                        const uint16_t **orders, unsigned char *data, unsigned char *seen, const char *path) {
    for (int i = 0; i < sp->n; i++) {
        if (!sp->values[i].bytes || group_of(spec->params[i].name) != g) continue;
        const int rows = (int)spec->params[i].shape[0], cols = (int)spec->params[i].shape[1];
        const uint16_t *order = GROUPS[g].hot ? *orders : NULL;
        if (order) {
            memset(seen, 0, (size_t)rows);
            for (int k = 0; k < rows; k++) {
                if (order[k] >= rows || seen[order[k]])
                    return ct_fail("'%s' is damaged: the row order of %s is not a permutation", path,
                                   spec->params[i].name);
                seen[order[k]] = 1;
            }
            *orders += rows;
        }
        unsigned char *m = data + sp->values[i].offset;
        for (int c = 0; c < cols; c++)
            for (int k = 0; k < rows; k++) m[(size_t)(order ? order[k] : k) * cols + c] = *blob++;
    }
    return 0;
}

int golf_pergroup_read(const ModelSpec *spec, const char *path, float *params) {
    unsigned char *file = NULL, *rest = NULL, *raw = NULL, *ob = NULL, *seen = NULL;
    size_t len = 0, rest_len = 0, ob_len = 0;
    uint16_t *orders = NULL;
    Split sp = {0};
    Scratch scratch = {{0}, path};
    if (golf_file_read(path, &file, &len) != 0) return -1;
    size_t offset[NUM_STREAMS + 1] = {TABLE_BYTES};
    int rc = 0;
    if (len < TABLE_BYTES || memcmp(file, MAGIC, 4) != 0 || get_u32(file + 4) != NUM_STREAMS)
        rc = ct_fail("'%s' is not a gptq-pergroup artifact (it does not start with \"CTPG\" and %d streams)", path,
                     NUM_STREAMS);
    for (int k = 0; rc == 0 && k < NUM_STREAMS; k++) offset[k + 1] = offset[k] + get_u32(file + 8 + 4 * k);
    if (rc == 0 && offset[NUM_STREAMS] != len)
        rc = ct_fail("'%s' is damaged or truncated: its length table adds up to %zu bytes, the file has %zu", path,
                     offset[NUM_STREAMS], len);
    const unsigned char *st = file;
    if (rc == 0)
        rc = golf_brotli_decompress(st + offset[NUM_GROUPS], offset[NUM_GROUPS + 1] - offset[NUM_GROUPS],
                                    golf_gptq_container_cap(spec), &rest, &rest_len, path);
    if (rc == 0) rc = split_of(spec, rest, rest_len, path, &sp);
    if (rc == 0 && rest_len != sp.header_len + sp.data_bytes - sp.grouped_bytes)
        rc = ct_fail("'%s' is damaged: its remainder holds %zu bytes, this model's plan %zu", path, rest_len,
                     sp.header_len + sp.data_bytes - sp.grouped_bytes);
    const size_t ob_stored = rc == 0 ? offset[NUM_GROUPS + 2] - offset[NUM_GROUPS + 1] : 0;
    if (rc == 0 && ob_stored)
        rc = golf_brotli_decompress(st + offset[NUM_GROUPS + 1], ob_stored, sp.order_rows * 2 + 1, &ob, &ob_len, path);
    if (rc == 0 && ob_len != sp.order_rows * 2)
        rc = ct_fail("'%s' is damaged: its row orders hold %zu bytes, this model's hot matrices %zu", path, ob_len,
                     sp.order_rows * 2);
    if (rc == 0) {
        orders = ct_malloc(sp.order_rows * sizeof *orders + 2, "row orders");
        for (size_t i = 0; i < sp.order_rows; i++) orders[i] = (uint16_t)(ob[2 * i] | ob[2 * i + 1] << 8);
        raw = ct_malloc(sp.header_len + sp.data_bytes + 1, "artifact");
        memcpy(raw, rest, sp.header_len);
        remainder_copy(&sp, rest + sp.header_len, raw + sp.header_len, 0);
        seen = ct_malloc(65537, "row orders");
        rc = scratch_open(&scratch, path);
    }
    const uint16_t *next_order = orders;
    unsigned char *stored_at[NUM_GROUPS] = {0}, *blobs[NUM_GROUPS] = {0};
    size_t stored[NUM_GROUPS] = {0}, got[NUM_GROUPS] = {0};
    for (int g = 0; g < NUM_GROUPS; g++)
        if (rc == 0) stored_at[g] = file + offset[g], stored[g] = offset[g + 1] - offset[g];
    if (rc == 0) rc = lrzip_groups(&scratch, 0, stored_at, stored, blobs, got);
    for (int g = 0; rc == 0 && g < NUM_GROUPS; g++) {
        size_t want = 0;
        for (int i = 0; i < sp.n; i++) want += group_of(spec->params[i].name) == g ? sp.values[i].bytes : 0;
        if (got[g] != want)
            rc = ct_fail("'%s' is damaged or not of this model: its %s group holds %zu bytes, this model's plan %zu",
                         path, GROUPS[g].suffix, got[g], want);
        if (rc == 0) rc = unpack_group(spec, &sp, g, blobs[g], &next_order, raw + sp.header_len, seen, path);
    }
    for (int g = 0; g < NUM_GROUPS; g++) free(blobs[g]);
    scratch_close(&scratch);
    if (rc == 0) rc = golf_gptq_decode(spec, raw, sp.header_len + sp.data_bytes, path, params);
    free(seen), free(orders), free(ob), free(raw), free(rest), free(sp.values), free(file);
    return rc;
}
