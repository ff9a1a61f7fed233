/* ckpt_layout.c — what a checkpoint of a given model holds: the list of tensors (weights and
 * the optimizer buffer(s) of each parameter, by which optimizer owns it), where each lives in
 * the TrainState, and how configuration values are compared and shown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"

int ckpt_tensor_list(const ModelSpec *spec, CkptTensor **list, int *count) {
    /* at most three entries per parameter: the weights and two Adam moments */
    CkptTensor *t = ct_calloc((size_t)spec->num_params * 3, sizeof *t, "checkpoint tensor list");
    int n = 0;
    for (int i = 0; i < spec->num_params; i++) {
        const ParamInfo *p = &spec->params[i];
        snprintf(t[n].path, sizeof t[n].path, "/model/%s", p->name);
        t[n].param = p;
        t[n++].buffer = CKPT_BUF_PARAMS;
    }
    for (int i = 0; i < spec->num_params; i++) {
        const ParamInfo *p = &spec->params[i];
        /* torch's state names: Muon keeps "momentum_buffer", Adam "exp_avg" / "exp_avg_sq" */
        if (p->group == PARAM_MATRIX) {
            snprintf(t[n].path, sizeof t[n].path, "/optimizer/%s/momentum_buffer", p->name);
            t[n].param = p;
            t[n++].buffer = CKPT_BUF_MOMENTUM;
        } else {
            snprintf(t[n].path, sizeof t[n].path, "/optimizer/%s/exp_avg", p->name);
            t[n].param = p;
            t[n++].buffer = CKPT_BUF_EXP_AVG;
            snprintf(t[n].path, sizeof t[n].path, "/optimizer/%s/exp_avg_sq", p->name);
            t[n].param = p;
            t[n++].buffer = CKPT_BUF_EXP_AVG_SQ;
        }
    }
    *list = t;
    *count = n;
    return 0;
}

float *ckpt_tensor_buffer(const TrainState *st, CkptBuffer b) {
    switch (b) {
    case CKPT_BUF_PARAMS: return st->params;
    case CKPT_BUF_EXP_AVG: return st->exp_avg;
    case CKPT_BUF_EXP_AVG_SQ: return st->exp_avg_sq;
    case CKPT_BUF_MOMENTUM: return st->momentum;
    }
    return NULL;
}

void ckpt_format_shape(int ndim, const int64_t *dims, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* Shortest %g form that parses back to the same double, so messages say 0.04, not
 * 0.040000000000000001. */
static void format_double(double v, char *buf, size_t cap) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

const char *ckpt_config_value_text(const Config *cfg, const ConfigKey *k, char *buf, size_t cap) {
    const void *p = (const char *)cfg + k->offset;
    switch (k->type) {
    case CT_KEY_INT:
    case CT_KEY_BOOL: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); return buf;
    case CT_KEY_FLOAT: format_double(*(const double *)p, buf, cap); return buf;
    case CT_KEY_STR: return *(const char *const *)p ? *(const char *const *)p : "";
    }
    return "";
}

int ckpt_config_value_equal(const Config *a, const Config *b, const ConfigKey *k) {
    const void *pa = (const char *)a + k->offset, *pb = (const char *)b + k->offset;
    switch (k->type) {
    case CT_KEY_INT:
    case CT_KEY_BOOL: return *(const int64_t *)pa == *(const int64_t *)pb;
    case CT_KEY_FLOAT: return *(const double *)pa == *(const double *)pb;
    case CT_KEY_STR: {
        const char *sa = *(const char *const *)pa, *sb = *(const char *const *)pb;
        return !strcmp(sa ? sa : "", sb ? sb : "");
    }
    }
    return 0;
}
