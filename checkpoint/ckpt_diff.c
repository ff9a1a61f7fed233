/* ckpt_diff.c — `ctrain ckpt diff A B`: how far apart two checkpoints are, tensor by tensor
 * (max absolute, max relative and relative L2 difference) and as a whole (the model weights'
 * relative L2 distance, one summary line), and whether they are identical in the sense an
 * exact resume needs (every tensor bitwise equal and the same training position; with
 * --model-only, the weights alone). Other differences (configuration, metrics, world
 * size, device) are listed for information; timestamps and training time are ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"
#include "h5util.h"

typedef struct {
    const char *path;
    hid_t file;
    CkptMeta meta;
    CkptObjects objs;
} Side;

static int open_side(Side *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->file = ckpt_open_read(path);
    if (s->file < 0) return -1;
    if (ckpt_meta_read(s->file, path, &s->meta) != 0) return -1;
    return ckpt_list_objects(s->file, path, &s->objs);
}

static void close_side(Side *s) {
    if (s->file >= 0) H5Fclose(s->file);
    ckpt_meta_free(&s->meta);
    ckpt_objects_free(&s->objs);
}

/* The tensors compared: the weights, and unless model_only the optimizer state and the averaged
 * weights (/ema, /swa). */
static int is_tensor(const CkptObject *o, int model_only) {
    static const char *const state[] = {"/optimizer/", "/ema/", "/swa/"};
    if (!o->is_dataset) return 0;
    if (!strncmp(o->path, "/model/", 7)) return 1;
    for (size_t i = 0; !model_only && i < sizeof state / sizeof state[0]; i++)
        if (!strncmp(o->path, state[i], strlen(state[i]))) return 1;
    return 0;
}

/* A whole float tensor as float32 with its shape; NULL data for an empty one. Lock held. */
static int read_tensor(const Side *s, const char *name, float **data, int *rank, hsize_t *dims, size_t *count) {
    *data = NULL;
    hid_t dset = H5Dopen2(s->file, name, H5P_DEFAULT);
    if (dset < 0) return ct_h5_fail("'%s': cannot open %s", s->path, name);
    hid_t type = H5Dget_type(dset);
    H5T_class_t cls = H5Tget_class(type);
    H5Tclose(type);
    int rc = 0;
    *rank = ckpt_dataset_shape(dset, dims);
    *count = 1;
    for (int d = 0; d < *rank; d++) *count *= (size_t)dims[d];
    if (cls != H5T_FLOAT || *rank < 0) rc = ct_fail("'%s': %s is not a float tensor", s->path, name);
    else if (*count > 0) {
        *data = ct_malloc(*count * sizeof(float), "tensor");
        if (H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) < 0)
            rc = ct_h5_fail("'%s': %s: cannot read the data", s->path, name);
    }
    H5Dclose(dset);
    return rc;
}

typedef struct {
    int width;
    int header_printed;
    /* the model's weights (/model) as one vector, for the summary line: sums of squares of
     * A - B and of A, and the tensor whose relative L2 distance is largest */
    double model_diff_sq, model_a_sq;
    int64_t model_values;
    int model_tensors;
    double worst_rel_l2;
    char worst[200];
} Table;

static void table_row(Table *t, const char *name, const char *shape, const char *abs_text, const char *rel_text,
                      const char *l2_text, const char *count_text) {
    if (!t->header_printed) {
        printf("\n%-*s  %-14s %13s %13s %13s  %s\n", t->width, "tensor", "shape", "max_abs_diff", "max_rel_diff",
               "rel_l2", "differing");
        t->header_printed = 1;
    }
    printf("%-*s  %-14s %13s %13s %13s  %s\n", t->width, name, shape, abs_text, rel_text, l2_text, count_text);
}

/* Compare one tensor present in both files; returns 1 if it differs, 0 if bitwise equal, -1
 * on a read error. */
static int diff_tensor(const Side *a, const Side *b, const char *name, Table *t) {
    float *x = NULL, *y = NULL;
    int ra, rb;
    hsize_t da[8], db[8];
    size_t na, nb;
    int rc = -1;
    if (read_tensor(a, name, &x, &ra, da, &na) != 0 || read_tensor(b, name, &y, &rb, db, &nb) != 0) goto done;
    char shape_a[96], shape_b[96];
    int64_t d64[8];
    for (int d = 0; d < ra; d++) d64[d] = (int64_t)da[d];
    ckpt_format_shape(ra, d64, shape_a, sizeof shape_a);
    for (int d = 0; d < rb; d++) d64[d] = (int64_t)db[d];
    ckpt_format_shape(rb, d64, shape_b, sizeof shape_b);
    if (strcmp(shape_a, shape_b) != 0) {
        char text[256];
        snprintf(text, sizeof text, "shape %s vs %s", shape_a, shape_b);
        table_row(t, name, shape_a, "-", "-", "-", text);
        rc = 1;
        goto done;
    }
    /* every value of the model's weights counts in the summary, equal ones too */
    const int is_model = !strncmp(name, "/model/", 7);
    double diff_sq = 0, a_sq = 0, b_sq = 0;
    for (size_t i = 0; i < na; i++) {
        double u = x[i], v = y[i];
        diff_sq += (u - v) * (u - v);
        a_sq += u * u;
        b_sq += v * v;
    }
    if (is_model) {
        t->model_diff_sq += diff_sq;
        t->model_a_sq += a_sq;
        t->model_values += (int64_t)na;
        t->model_tensors++;
    }
    if (na == 0 || memcmp(x, y, na * sizeof(float)) == 0) {
        rc = 0;
        goto done;
    }
    /* ||A - B|| / max(||A||, ||B||): how far apart the tensors are as a whole (max_rel_diff is
     * dominated by elements near zero) */
    const double norm = sqrt(fmax(a_sq, b_sq)), rel_l2 = norm > 0 ? sqrt(diff_sq) / norm : INFINITY;
    if (is_model && !(rel_l2 <= t->worst_rel_l2)) {
        t->worst_rel_l2 = rel_l2;
        snprintf(t->worst, sizeof t->worst, "%s", name);
    }
    double max_abs = 0, max_rel = 0;
    size_t differing = 0;
    for (size_t i = 0; i < na; i++) {
        if (memcmp(&x[i], &y[i], sizeof(float)) == 0) continue;
        differing++;
        double u = x[i], v = y[i], abs_diff = fabs(u - v);
        double scale = fmax(fabs(u), fabs(v));
        double rel = scale > 0 ? abs_diff / scale : 0; /* +0 vs -0: differ in bits only */
        if (isnan(abs_diff)) abs_diff = rel = INFINITY; /* NaN against a number */
        if (abs_diff > max_abs) max_abs = abs_diff;
        if (rel > max_rel) max_rel = rel;
    }
    char abs_text[32], rel_text[32], l2_text[32], count_text[64];
    snprintf(abs_text, sizeof abs_text, "%.3e", max_abs);
    snprintf(rel_text, sizeof rel_text, "%.3e", max_rel);
    snprintf(l2_text, sizeof l2_text, "%.3e", rel_l2);
    snprintf(count_text, sizeof count_text, "%zu/%zu", differing, na);
    table_row(t, name, shape_a, abs_text, rel_text, l2_text, count_text);
    rc = 1;
done:
    free(x);
    free(y);
    return rc;
}

/* The training position: must be equal for "identical". Prints each difference. */
static int diff_position(const CkptMeta *a, const CkptMeta *b) {
    struct {
        const char *name;
        int64_t x, y;
    } f[] = {
        {"step", a->step, b->step},
        {"train_tokens", a->train_tokens, b->train_tokens},
        {"adam_step", a->adam_step, b->adam_step},
        {"loader file_index", a->cursor.file_index, b->cursor.file_index},
        {"loader position", a->cursor.position, b->cursor.position},
        {"loader stream_tokens", a->cursor.stream_tokens, b->cursor.stream_tokens},
        {"swa count", a->swa_count, b->swa_count},
        {"qat active", a->qat_active, b->qat_active},
        {"loop active", a->loop_active, b->loop_active},
    };
    int differ = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].x != f[i].y) {
            printf("position differs: %s %lld vs %lld\n", f[i].name, (long long)f[i].x, (long long)f[i].y);
            differ++;
        }
    return differ;
}

/* Differences that do not make the states different: listed only. */
static void diff_other(const CkptMeta *a, const CkptMeta *b) {
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        if (config_value_equal(&a->cfg, &b->cfg, k)) continue;
        char x[64], y[64];
        printf("config differs: %s %s vs %s\n", k->name, config_value_text(&a->cfg, k, x, sizeof x),
               config_value_text(&b->cfg, k, y, sizeof y));
    }
    if (a->world_size != b->world_size)
        printf("world_size differs: %lld vs %lld\n", (long long)a->world_size, (long long)b->world_size);
    if (strcmp(a->device, b->device) != 0) printf("device differs: %s vs %s\n", a->device, b->device);
    if ((a->stack || b->stack) && (!a->stack || !b->stack || strcmp(a->stack, b->stack) != 0))
        printf("stack differs: %s vs %s\n", a->stack ? a->stack : "(not recorded)",
               b->stack ? b->stack : "(not recorded)");
    for (int i = 0; i < a->num_extras; i++) {
        int j = 0;
        while (j < b->num_extras && strcmp(a->extra_names[i], b->extra_names[j]) != 0) j++;
        if (j == b->num_extras) printf("metric only in A: %s = %.9g\n", a->extra_names[i], a->extra_values[i]);
        else if (memcmp(&a->extra_values[i], &b->extra_values[j], sizeof(double)) != 0)
            printf("metric differs: %s %.17g vs %.17g\n", a->extra_names[i], a->extra_values[i], b->extra_values[j]);
    }
    for (int j = 0; j < b->num_extras; j++) {
        int i = 0;
        while (i < a->num_extras && strcmp(a->extra_names[i], b->extra_names[j]) != 0) i++;
        if (i == a->num_extras) printf("metric only in B: %s = %.9g\n", b->extra_names[j], b->extra_values[j]);
    }
}

int checkpoint_diff(const char *path_a, const char *path_b, int exact, int model_only) {
    Side a, b;
    memset(&b, 0, sizeof b);
    b.file = H5I_INVALID_HID;
    int rc = 0, tensors = 0, differing = 0, position = 0;
    Table t;
    ct_hdf5_lock();
    if (open_side(&a, path_a) != 0 || open_side(&b, path_b) != 0) rc = -1;
    if (rc == 0) {
        printf("A: %s (step %lld, written %s)\n", path_a, (long long)a.meta.step, a.meta.created);
        printf("B: %s (step %lld, written %s)\n", path_b, (long long)b.meta.step, b.meta.created);
        position = diff_position(&a.meta, &b.meta);
        diff_other(&a.meta, &b.meta);
        memset(&t, 0, sizeof t);
        t.width = 6;
        t.worst_rel_l2 = -1;
        for (int s = 0; s < 2; s++) {
            const CkptObjects *o = s ? &b.objs : &a.objs;
            for (int i = 0; i < o->count; i++)
                if (is_tensor(&o->items[i], model_only) && (int)strlen(o->items[i].path) > t.width)
                    t.width = (int)strlen(o->items[i].path);
        }
        /* Merge the two sorted object lists. */
        int i = 0, j = 0;
        while (rc == 0 && (i < a.objs.count || j < b.objs.count)) {
            const CkptObject *x = i < a.objs.count ? &a.objs.items[i] : NULL;
            const CkptObject *y = j < b.objs.count ? &b.objs.items[j] : NULL;
            int c = !x ? 1 : !y ? -1 : strcmp(x->path, y->path);
            if (c == 0) {
                i++;
                j++;
                if (!is_tensor(x, model_only) || !is_tensor(y, model_only)) continue;
                tensors++;
                int d = diff_tensor(&a, &b, x->path, &t);
                if (d < 0) rc = -1;
                differing += d > 0;
            } else if (c < 0) {
                i++;
                if (!is_tensor(x, model_only)) continue;
                tensors++;
                differing++;
                table_row(&t, x->path, "", "-", "-", "-", "only in A");
            } else {
                j++;
                if (!is_tensor(y, model_only)) continue;
                tensors++;
                differing++;
                table_row(&t, y->path, "", "-", "-", "-", "only in B");
            }
        }
    }
    close_side(&a);
    close_side(&b);
    ct_hdf5_unlock();
    if (rc != 0) {
        fflush(stdout);
        ct_print_error();
        return CT_EXIT_FAILURE;
    }
    if (differing) printf("\ntensors: %d of %d differ, %d bitwise equal\n", differing, tensors, tensors - differing);
    else printf("\ntensors: all %d bitwise equal\n", tensors);
    /* one line for two runs compared: how far apart their weights are as a whole */
    if (t.model_tensors > 0) {
        const double rel = t.model_a_sq > 0 ? sqrt(t.model_diff_sq / t.model_a_sq) : (t.model_diff_sq > 0 ? INFINITY : 0);
        printf("summary: model weights ||A-B||/||A|| = %.3e over %d tensors (%lld values)", rel, t.model_tensors,
               (long long)t.model_values);
        if (t.worst_rel_l2 >= 0) printf("; farthest apart: %s (rel_l2 %.3e)", t.worst, t.worst_rel_l2);
        printf("\n");
    }
    /* --model-only: the weights alone decide (two runs' models, whatever their positions) */
    int identical = !differing && (model_only || !position);
    printf("identical%s: %s\n", model_only ? " (model weights)" : "", identical ? "yes" : "no");
    return exact && !identical ? CT_EXIT_FAILURE : CT_EXIT_OK;
}
