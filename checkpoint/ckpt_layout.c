/* ckpt_layout.c — what a checkpoint of a given model holds: the list of tensors (weights and
 * the optimizer buffer(s) of each parameter, by which optimizer owns it), where each lives in
 * the TrainState, and how shapes are shown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_internal.h"
#include "common.h"

CkptOptional ckpt_optional(const Config *cfg) {
    CkptOptional opt = {cfg->ema_enabled != 0, train_state_has_swa(cfg), cfg->qat_enabled || cfg->late_qat,
                        cfg->num_loops > 0};
    return opt;
}

int ckpt_tensor_list(const ModelSpec *spec, CkptOptional opt, CkptTensor **list, int *count) {
    /* at most five entries per parameter: the weights, two Adam moments, the EMA and SWA's sum */
    CkptTensor *t = ct_calloc((size_t)spec->num_params * 5, sizeof *t, "checkpoint tensor list");
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
    /* the averaged weights, named and shaped as /model (train_gpt.py's ema_state / swa_state) */
    for (int pass = 0; pass < 2; pass++) {
        if (!(pass == 0 ? opt.ema : opt.swa)) continue;
        for (int i = 0; i < spec->num_params; i++) {
            snprintf(t[n].path, sizeof t[n].path, "/%s/%s", pass == 0 ? "ema" : "swa", spec->params[i].name);
            t[n].param = &spec->params[i];
            t[n++].buffer = pass == 0 ? CKPT_BUF_EMA : CKPT_BUF_SWA;
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
    case CKPT_BUF_EMA: return st->ema;
    case CKPT_BUF_SWA: return st->swa_sum;
    }
    return NULL;
}

void ckpt_format_shape(int ndim, const int64_t *dims, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
}
