/* gpu_ops.h — the machinery of the table-driven CUDA op test (tests/unit/test_gpu_ops.c) and
 * benchmark (tests/bench/bench_gpu_ops.c), in the spirit of ggml's test-backend-ops: an op is
 * described once (OpDef: its tensors, CPU reference and CUDA call), a case is one row of
 * gpu_op_table.h (an op at one shape), and this file runs a case the same way for every op:
 *
 *   1. the op's `tensors` declares its tensors for the shape, inputs with random values (never
 *      all zeros; bf16 ones rounded on the host too, so the CPU sees what the GPU reads);
 *   2. inputs are uploaded; the op's `prepare` may derive inputs from others (rstd from x, a
 *      forward's output for a backward), on the host and/or the device;
 *   3. the CPU reference (`cpu`, the ops of kernels/cpu/) fills each output's reference: from 0
 *      for written outputs, from the start values for accumulated (+=) ones;
 *   4. the CUDA op runs (`gpu`) after every written output and scratch buffer is poisoned with
 *      NaN and every accumulated one holds its start values; each output is compared with its
 *      reference under its own bound (OpTensor.tol);
 *   5. it runs again from the same state and every output must be the same bytes (determinism);
 *   6. the op's `extra` makes the checks particular to it (in-place and aliasing forms, fused
 *      kernels bitwise the ops they replace, refused arguments), with CHECK.
 * Bench mode runs steps 1, 2 and 4 and times step 4 (bench_gpu_ops.c); bytes moved come from
 * the tensors (inputs read once, outputs written once, accumulated ones read and written,
 * scratch not counted) and FLOPs from the op's `flops`.
 *
 * Bounds (OpTensor.tol): ||gpu - ref|| / ||ref|| <= tol; OP_EXACT: equal values element by
 * element (NaN equal only to NaN); OP_BITWISE: the same bytes; per_element: |gpu - ref| <= tol *
 * max(1, |ref|) for every element; near_bf16 (an OP_BF16 output whose reference is the fp32
 * value before its rounding): every element is the bf16 rounding of a value within tol * max(1,
 * |ref|) of ref, i.e. the rounding of ref itself unless ref is that close to a tie (a bound of a
 * few fp32 ulps before the rounding that stays exact after it). An OP_I32 output (the bigram
 * hash's buckets) is poisoned with -1 before every run, its reference is written as int32 into the float array (the same 4
 * bytes per element) and it is compared OP_BITWISE. The bounds and why they hold are in the op families' files
 * (gpu_ops_*.h), the same as those of the per-family programs this replaced. Rules for GPU test
 * programs (skips without a device, CT_TEST_VERBOSE) in test_gpu.h. CUDA builds only. */
#ifndef CT_TEST_GPU_OPS_H
#define CT_TEST_GPU_OPS_H

#include "test_gpu.h"

#ifdef CT_HAVE_CUDA

#include <float.h>

#include "cpu_attention.h"
#include "cpu_ops.h"

enum { OP_F32, OP_BF16, OP_I32, OP_F64 };
enum {
    OP_IN,        /* read only: its values are set before the runs */
    OP_OUT,       /* written (=): NaN before every run; its reference starts at 0 */
    OP_ACC,       /* accumulated (+=) or updated in place: start values before every run; the
                     reference starts from them */
    OP_ACC_DELTA, /* as OP_ACC, but the increment (gpu - start) is compared with a reference from 0 */
    OP_CLOBBER,   /* read and left undefined by the op: start values before every run, not compared */
    OP_SCRATCH,   /* device scratch: NaN (fp32, bf16) before every run, not compared */
};
#define OP_EXACT 0.0
#define OP_BITWISE (-1.0)
#define OP_MAX_TENSORS 24
#define OP_MAX_DIMS 6

typedef struct {
    const char *name;
    int type, role;
    size_t n;         /* elements */
    int offset;       /* elements between the allocation's (256-byte aligned) start and the tensor */
    double tol;       /* outputs: the bound (above) */
    int per_element;  /* outputs: tol bounds each element, not the norm */
    int near_bf16;    /* OP_BF16 outputs: the reference is the value before its bf16 rounding */
    float *host;      /* OP_F32/OP_BF16 inputs: the values; outputs: the reference; else start values */
    float *start;     /* OP_ACC, OP_ACC_DELTA, OP_CLOBBER: the start values */
    double *host64;   /* OP_F64: the reference */
    int32_t *ids;     /* OP_I32: the values */
    float *got;       /* outputs after the first run (bf16 widened to fp32) */
    double *got64;
    void *dev, *base; /* device tensor; its allocation */
} OpTensor;

struct OpCase;
typedef struct OpRun {
    const struct OpCase *c;
    int d[OP_MAX_DIMS]; /* the shape (meaning per op, named in its family's file) */
    int bench;          /* 1: timing only (no reference, no checks) */
    uint64_t rng;
    int n_t;
    OpTensor t[OP_MAX_TENSORS];
    int aux;            /* an op's host-side value (embedding: the index's number of rows) */
} OpRun;

typedef struct {
    const char *name;           /* the op, e.g. rmsnorm_fwd; a case is named <name>_<shape> */
    int variant;                /* what the adapters shared by several ops tell them apart by */
    void (*tensors)(OpRun *r);  /* declares the tensors for r->d (NULL: `extra` does it all) */
    void (*prepare)(OpRun *r);  /* optional: derives inputs after the upload */
    void (*cpu)(OpRun *r);      /* the CPU reference (NULL: no reference, e.g. bench-only ops) */
    int (*gpu)(OpRun *r);       /* the CUDA op: 0, or non-zero with ct_error() */
    void (*extra)(OpRun *r);    /* optional: the op's own further checks */
    double (*flops)(const int *d); /* optional: FLOPs of a perfect kernel (bench) */
    int host_only;              /* 1: the case needs no device (runs where others SKIP) */
} OpDef;

/* CASE_TEST: a case of test_gpu_ops; CASE_SLOW: one that test_gpu_ops --quick leaves out (the
 * host emulator's quick set, tests/cli/test_cuda_emulated.sh); CASE_BENCH: timed by default by
 * bench_gpu_ops. */
enum { CASE_TEST = 1, CASE_SLOW = 2, CASE_BENCH = 4 };
typedef struct OpCase {
    const OpDef *op;
    const char *shape;
    int d[OP_MAX_DIMS];
    int flags;
    int per_seq; /* bench: d[0] = per_seq * sequences (0: d[0] as given) */
} OpCase;

static inline void op_case_name(const OpCase *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s_%s", c->op->name, c->shape);
}

/* ---- declaring tensors (from an op's `tensors`) ---- */

static inline size_t op_type_bytes(int type) {
    return type == OP_BF16 ? sizeof(ct_bf16) : type == OP_F64 ? 8 : 4;
}

static inline OpTensor *op_new(OpRun *r, const char *name, int type, int role, size_t n) {
    if (r->n_t == OP_MAX_TENSORS) {
        fprintf(stderr, "gpu_ops: more than %d tensors\n", OP_MAX_TENSORS);
        exit(1);
    }
    OpTensor *t = &r->t[r->n_t++];
    memset(t, 0, sizeof *t);
    t->name = name, t->type = type, t->role = role, t->n = n;
    return t;
}
/* Random values in [lo, hi) (bf16 tensors rounded to bf16); lo == hi: all lo. */
static inline float *op_values(OpRun *r, int type, size_t n, double lo, double hi) {
    float *x = random_host(n, lo, hi, &r->rng);
    if (type == OP_BF16) host_round_bf16(x, n);
    return x;
}
static inline OpTensor *op_in(OpRun *r, const char *name, int type, size_t n, double lo, double hi) {
    OpTensor *t = op_new(r, name, type, OP_IN, n);
    t->host = op_values(r, type, n, lo, hi);
    return t;
}
/* An fp32 input holding bf16 values (a product's output the op reads in fp32 here). */
static inline OpTensor *op_in_bf16_values(OpRun *r, const char *name, size_t n, double lo, double hi) {
    OpTensor *t = op_in(r, name, OP_F32, n, lo, hi);
    host_round_bf16(t->host, n);
    return t;
}
/* Token ids in [0, vocab): uniform, or skewed (a few very frequent ids, like real text); vocab 0:
 * zeros, for `prepare` to fill. */
static inline OpTensor *op_ids(OpRun *r, const char *name, size_t n, int vocab, int skewed) {
    OpTensor *t = op_new(r, name, OP_I32, OP_IN, n);
    t->ids = calloc(n ? n : 1, sizeof(int32_t));
    for (size_t i = 0; i < n && vocab > 0; i++) {
        double u = ref_rand01(&r->rng);
        if (skewed) u = u * u * u;
        t->ids[i] = (int32_t)(u * vocab);
        if (t->ids[i] >= vocab) t->ids[i] = vocab - 1;
    }
    return t;
}
static inline OpTensor *op_out(OpRun *r, const char *name, int type, size_t n, double tol) {
    OpTensor *t = op_new(r, name, type, OP_OUT, n);
    t->tol = tol;
    return t;
}
static inline OpTensor *op_acc_role(OpRun *r, const char *name, int role, int type, size_t n, double lo, double hi,
                                    double tol) {
    OpTensor *t = op_new(r, name, type, role, n);
    t->start = op_values(r, type, n, lo, hi);
    t->tol = tol;
    return t;
}
static inline OpTensor *op_acc(OpRun *r, const char *name, int type, size_t n, double lo, double hi, double tol) {
    return op_acc_role(r, name, OP_ACC, type, n, lo, hi, tol);
}
static inline OpTensor *op_acc_delta(OpRun *r, const char *name, int type, size_t n, double lo, double hi, double tol) {
    return op_acc_role(r, name, OP_ACC_DELTA, type, n, lo, hi, tol);
}
static inline OpTensor *op_clobber(OpRun *r, const char *name, size_t n, double lo, double hi) {
    return op_acc_role(r, name, OP_CLOBBER, OP_F32, n, lo, hi, 0);
}
static inline OpTensor *op_scratch(OpRun *r, const char *name, int type, size_t n) {
    return op_new(r, name, type, OP_SCRATCH, n);
}

/* ---- reaching tensors (from the adapters) ---- */

static inline OpTensor *op_find(OpRun *r, const char *name) {
    for (int i = 0; i < r->n_t; i++)
        if (strcmp(r->t[i].name, name) == 0) return &r->t[i];
    return NULL;
}
static inline OpTensor *op_t(OpRun *r, const char *name) {
    OpTensor *t = op_find(r, name);
    if (!t) {
        fprintf(stderr, "gpu_ops: the op has no tensor '%s'\n", name);
        exit(1);
    }
    return t;
}
/* The device tensor; op_dev_opt: NULL when the op did not declare it (an optional argument). */
static inline void *op_dev(OpRun *r, const char *name) { return op_t(r, name)->dev; }
static inline void *op_dev_opt(OpRun *r, const char *name) {
    OpTensor *t = op_find(r, name);
    return t ? t->dev : NULL;
}
/* Host values: an input's, an output's reference (in `cpu`), an OP_ACC's start values elsewhere. */
static inline float *op_host(OpRun *r, const char *name) { return op_t(r, name)->host; }
static inline float *op_host_opt(OpRun *r, const char *name) {
    OpTensor *t = op_find(r, name);
    return t ? t->host : NULL;
}
static inline float *op_start(OpRun *r, const char *name) { return op_t(r, name)->start; }
/* An output after the first run. */
static inline float *op_got(OpRun *r, const char *name) { return op_t(r, name)->got; }
/* Short forms for the adapters, where the run is `r`. */
#define DEV(name) op_dev(r, name)
#define DEV_OPT(name) op_dev_opt(r, name)
#define HOST(name) op_host(r, name)
#define HOST_OPT(name) op_host_opt(r, name)
#define GOT(name) op_got(r, name)

/* ---- device side ---- */

static inline void op_upload(OpTensor *t) {
    if (t->type == OP_I32) dev_put(t->dev, t->ids, t->n * sizeof(int32_t));
    else if (t->type == OP_BF16) dev_put_bf16(t->dev, t->host, t->n);
    else if (t->type == OP_F32) dev_put(t->dev, t->host, t->n * sizeof(float));
}
/* The input's host values again (after `prepare` changed them). */
static inline void op_reupload(OpRun *r, const char *name) { op_upload(op_t(r, name)); }
/* Host fp32 values of a device tensor (bf16 widened); the caller frees them. */
static inline float *op_download(OpTensor *t) {
    return t->type == OP_BF16 ? host_from_dev_bf16(t->dev, t->n) : host_from_dev(t->dev, t->n);
}
/* An input the device made (in `prepare`): its host values become the device's. */
static inline void op_take_from_device(OpRun *r, const char *name) {
    OpTensor *t = op_t(r, name);
    float *h = op_download(t);
    free(t->host);
    t->host = h;
}

static inline void op_alloc(OpRun *r) {
    for (int i = 0; i < r->n_t; i++) {
        OpTensor *t = &r->t[i];
        const size_t es = op_type_bytes(t->type);
        t->base = dev_alloc((t->n + (size_t)t->offset) * es);
        t->dev = (char *)t->base + (size_t)t->offset * es;
        if (t->role == OP_IN) op_upload(t);
    }
}

/* Before a run: written outputs and scratch NaN, accumulated and clobbered tensors at their start. */
static inline void op_reset(OpRun *r) {
    for (int i = 0; i < r->n_t; i++) {
        OpTensor *t = &r->t[i];
        if (t->role == OP_OUT || t->role == OP_SCRATCH) {
            if (t->type == OP_F32) dev_poison(t->dev, t->n);
            else if (t->type == OP_BF16) dev_poison_bf16(t->dev, t->n);
            else if (t->type == OP_I32) {
                int32_t *h = malloc((t->n ? t->n : 1) * sizeof(int32_t));
                for (size_t k = 0; k < t->n; k++) h[k] = -1;
                dev_put(t->dev, h, t->n * sizeof(int32_t));
                free(h);
            } else if (t->type == OP_F64) {
                double *h = malloc((t->n ? t->n : 1) * sizeof(double));
                for (size_t k = 0; k < t->n; k++) h[k] = NAN;
                dev_put(t->dev, h, t->n * sizeof(double));
                free(h);
            }
        } else if (t->role != OP_IN) {
            float *keep = t->host;
            t->host = t->start;
            op_upload(t);
            t->host = keep;
        }
    }
}

/* One run of the CUDA op from the reset state; 0 or -1 (message in ct_error() or on stderr). */
static inline int op_run_gpu(OpRun *r, const OpDef *op) {
    op_reset(r);
    if (op->gpu(r) != 0) return -1;
    return dev_sync_ok() ? 0 : -1;
}

static inline int op_is_output(const OpTensor *t) {
    return t->role == OP_OUT || t->role == OP_ACC || t->role == OP_ACC_DELTA;
}

/* Bytes a perfect kernel moves: inputs read once, outputs written once, accumulated and
 * clobbered tensors read and written; scratch not counted. */
static inline double op_bytes(const OpRun *r) {
    double b = 0;
    for (int i = 0; i < r->n_t; i++) {
        const OpTensor *t = &r->t[i];
        const double size = (double)t->n * (double)op_type_bytes(t->type);
        if (t->role == OP_IN || t->role == OP_OUT) b += size;
        else if (t->role != OP_SCRATCH) b += 2 * size;
    }
    return b;
}

static inline void op_free(OpRun *r) {
    for (int i = 0; i < r->n_t; i++) {
        OpTensor *t = &r->t[i];
        dev_free(t->base);
        free(t->host), free(t->start), free(t->host64), free(t->ids), free(t->got), free(t->got64);
    }
    r->n_t = 0;
}

/* The program's cuBLAS handle, with a 32 MiB workspace (made on first use). */
static inline cublasHandle_t op_blas(void) {
    static cublasHandle_t handle;
    if (!handle) {
        void *ws = dev_alloc(32 << 20);
        if (cuda_blas_create(&handle, 0, ws, 32 << 20) != 0) {
            fprintf(stderr, "%s\n", ct_error());
            exit(1);
        }
    }
    return handle;
}

/* The case's seed: its name hashed (FNV-1a), so a case's inputs do not depend on the table's order. */
static inline uint64_t op_seed(const char *name) {
    uint64_t h = 1469598103934665603ULL;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ULL;
    return h | 1;
}

/* Sets up r for case c (shape d): tensors declared, allocated and uploaded, `prepare` done. */
static inline void op_setup(OpRun *r, const OpCase *c, const int *d, int bench) {
    char name[128];
    op_case_name(c, name, sizeof name);
    memset(r, 0, sizeof *r);
    r->c = c;
    r->bench = bench;
    memcpy(r->d, d, sizeof r->d);
    r->rng = op_seed(name);
    if (c->op->tensors) c->op->tensors(r);
    op_alloc(r);
    if (c->op->prepare) c->op->prepare(r);
}

/* ---- test mode ---- */

/* An output against its reference under its bound: 1 if within, else 0 with the failure in
 * `what`. CT_TEST_VERBOSE=1 prints every measured error. */
static inline int op_compare(OpTensor *t, const char *case_name, char *what, size_t cap) {
    char label[160];
    snprintf(label, sizeof label, "%s %s%s", case_name, t->name,
             t->role == OP_ACC ? " (+=)" : t->role == OP_ACC_DELTA ? " (+=, increment)" : "");
    if (t->type == OP_F64) {
        size_t bad = 0;
        double worst = 0;
        for (size_t i = 0; i < t->n; i++) {
            const double d = fabs(t->got64[i] - t->host64[i]);
            const double e = t->per_element ? d / fmax(1.0, fabs(t->host64[i])) : d / fabs(t->host64[i]);
            if (!(e <= t->tol)) bad++;
            if (!(e <= worst)) worst = e;
        }
        report(label, worst, t->tol);
        snprintf(what, cap, "%s: error %.3e > %.1e (%.17g vs %.17g)", label, worst, t->tol, t->got64[0], t->host64[0]);
        return bad == 0;
    }
    float *got = t->got, *delta = NULL;
    if (t->role == OP_ACC_DELTA) {
        delta = copy_host(t->got, t->n);
        for (size_t i = 0; i < t->n; i++) delta[i] -= t->start[i];
        got = delta;
    }
    int ok;
    if (t->tol == OP_BITWISE || t->tol == OP_EXACT || t->per_element || t->near_bf16) {
        size_t bad = 0, off = 0; /* off (near_bf16): elements not the rounding of ref itself */
        for (size_t i = 0; i < t->n; i++) {
            const float a = got[i], b = t->host[i];
            if (t->near_bf16) {
                const float w = (float)t->tol * fmaxf(1.0f, fabsf(b));
                bad += !(a >= host_bf16_value(b - w) && a <= host_bf16_value(b + w));
                off += a != host_bf16_value(b);
            } else if (t->tol == OP_BITWISE) bad += memcmp(&a, &b, sizeof a) != 0;
            else if (t->tol == OP_EXACT) bad += !(a == b || (isnan(a) && isnan(b)));
            else bad += !(fabsf(a - b) <= (float)t->tol * fmaxf(1.0f, fabsf(b)));
        }
        const char *how = t->near_bf16           ? "the bf16 rounding of a value near the reference"
                          : t->tol == OP_BITWISE ? "expected the same bytes"
                          : t->tol == OP_EXACT   ? "expected the same values"
                                                 : "per-element bound";
        if (gpu_verbose() && t->near_bf16)
            fprintf(stderr, "  %-40s %zu of %zu elements differ (%s; %zu not the rounding of the reference)\n",
                    label, bad, t->n, how, off);
        else if (gpu_verbose()) fprintf(stderr, "  %-40s %zu of %zu elements differ (%s)\n", label, bad, t->n, how);
        snprintf(what, cap, "%s: %zu of %zu elements differ from the CPU's (%s)", label, bad, t->n, how);
        ok = bad == 0;
    } else {
        const double err = rel_err(got, t->host, t->n);
        report(label, err, t->tol);
        snprintf(what, cap, "%s: relative error %.3e > %.1e", label, err, t->tol);
        ok = err <= t->tol;
    }
    free(delta);
    return ok;
}

static inline void op_download_outputs(OpRun *r, int again, float **f, double **g) {
    for (int i = 0; i < r->n_t; i++) {
        OpTensor *t = &r->t[i];
        if (!op_is_output(t)) continue;
        if (t->type == OP_F64) {
            double *h = malloc(t->n * sizeof(double));
            dev_get(h, t->dev, t->n * sizeof(double));
            if (again) g[i] = h;
            else t->got64 = h;
        } else {
            float *h = op_download(t);
            if (again) f[i] = h;
            else t->got = h;
        }
    }
}

/* Steps 3 to 6 of the header on a set-up run (CHECK fails the case). */
static inline void op_check(OpRun *r, const char *name) {
    const OpDef *op = r->c->op;
    char what[256];
    if (op->cpu) {
        for (int i = 0; i < r->n_t; i++) {
            OpTensor *t = &r->t[i];
            if (!op_is_output(t)) continue;
            if (t->type == OP_F64) t->host64 = calloc(t->n ? t->n : 1, sizeof(double));
            else t->host = t->role == OP_ACC ? copy_host(t->start, t->n) : calloc(t->n ? t->n : 1, sizeof(float));
        }
        op->cpu(r);
        if (harness_case_failed) return;
    }
    if (op->gpu) {
        CHECK(op_run_gpu(r, op) == 0, "%s: the CUDA op failed: %s", name, ct_error());
        op_download_outputs(r, 0, NULL, NULL);
        for (int i = 0; i < r->n_t && op->cpu; i++)
            if (op_is_output(&r->t[i])) CHECK(op_compare(&r->t[i], name, what, sizeof what), "%s", what);
        /* the same op from the same state: the same bytes */
        CHECK(op_run_gpu(r, op) == 0, "%s: the second run failed: %s", name, ct_error());
        float *again[OP_MAX_TENSORS] = {0};
        double *again64[OP_MAX_TENSORS] = {0};
        op_download_outputs(r, 1, again, again64);
        int same = 1;
        const char *differs = "";
        for (int i = 0; i < r->n_t; i++) {
            OpTensor *t = &r->t[i];
            if (!op_is_output(t)) continue;
            const int eq = t->type == OP_F64 ? memcmp(again64[i], t->got64, t->n * sizeof(double)) == 0
                                             : memcmp(again[i], t->got, t->n * sizeof(float)) == 0;
            if (!eq && same) same = 0, differs = t->name;
            free(again[i]), free(again64[i]);
        }
        CHECK(same, "%s: not deterministic: %s differs between two runs", name, differs);
    }
    if (op->extra) op->extra(r);
}

/* One test case: skips without a device (unless the op is host-only), else checks. */
static inline void op_test_case(const OpCase *c) {
    if (!c->op->host_only) REQUIRE_GPU();
    char name[128];
    op_case_name(c, name, sizeof name);
    OpRun *r = calloc(1, sizeof *r);
    op_setup(r, c, c->d, 0);
    if (!harness_case_failed) op_check(r, name);
    op_free(r);
    free(r);
}

#endif /* CT_HAVE_CUDA */
#endif
