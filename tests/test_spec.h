/* test_spec.h — a ModelSpec made from a table of tensors (name, rank, shape), for the tests of the
 * golf artifacts, which need models of chosen tensors rather than the GPT's: the tensors laid out
 * back to back in table order, as model.c lays the parameters out; a dimension left 0 past the
 * rank is 1 (ParamInfo's convention). */
#ifndef CT_TEST_SPEC_H
#define CT_TEST_SPEC_H

#include <stdio.h>
#include <string.h>

#include "model.h"

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
} TestTensor;

/* spec (with params[0..n) as its parameters, the caller's storage) from t[0..n). */
static inline void test_spec_from_table(ModelSpec *spec, ParamInfo *params, const TestTensor *t, int n) {
    memset(spec, 0, sizeof *spec);
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        ParamInfo *p = &params[i];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", t[i].name);
        p->ndim = t[i].ndim;
        p->count = 1;
        for (int d = 0; d < 3; d++) {
            p->shape[d] = t[i].shape[d] > 0 ? t[i].shape[d] : 1;
            p->count *= (size_t)p->shape[d];
        }
        p->offset = offset;
        offset += p->count;
    }
    spec->num_params = n;
    spec->params = params;
    spec->total_floats = offset;
}

#endif
