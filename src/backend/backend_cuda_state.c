/* backend_cuda_state.c — copies of the training state between the CUDA backend's device buffers
 * (authoritative after creation) and the host TrainState: every buffer either way
 * (backend_cuda_sync_to_host / _from_host, and the first upload at creation), only what a
 * checkpoint holds before one is written, the weights alone after the host replaced them (the
 * run's averaged weights); and the bf16 weight shadows, bf16(w) or late QAT's quantized ones. */
#include "backend_cuda.h"

#ifdef CT_HAVE_CUDA

#include <stdio.h>

#include "common.h"

#include "backend_cuda_private.h"

/* The bf16 shadow of every parameter that has one: bf16(w), or with `quantized` late QAT's
 * bf16(fake_quant(w)) for the weights it quantizes. */
static int write_shadows(CudaBackend *cb, int quantized) {
    const ModelSpec *s = &cb->base.state->spec;
    for (int i = 0; i < s->num_params; i++) {
        const ParamInfo *p = &s->params[i];
        if (!cb->w16[i]) continue;
        if (quantized && backend_qat_quantizes(p))
            RETURN_ON_FAILURE(cuda_fake_quant_int6_rows(NULL, cb->w16[i], cb->d_params + p->offset, (int)p->shape[0],
                                                        (int)p->shape[1], cb->stream));
        else
            RETURN_ON_FAILURE(cuda_f32_to_bf16(cb->w16[i], cb->d_params + p->offset, p->count, cb->stream));
    }
    cb->shadows_quantized = quantized;
    return 0;
}

int cuda_use_shadows(CudaBackend *cb, int training) {
    const int quantized = training && cb->base.state->qat_active;
    return quantized == cb->shadows_quantized ? 0 : write_shadows(cb, quantized);
}

int cuda_copy_state(CudaBackend *cb, int to_host) {
    TrainState *st = cb->base.state;
    const size_t bytes = st->spec.total_floats * sizeof(float);
    float *host[7] = {st->params, st->grads, st->exp_avg, st->exp_avg_sq, st->momentum, st->ema, st->swa_sum};
    float *dev[7] = {cb->d_params, cb->d_grads, cb->d_exp_avg, cb->d_exp_avg_sq, cb->d_momentum, cb->d_ema,
                     cb->d_swa_sum};
    const char *names[7] = {"params", "grads", "exp_avg", "exp_avg_sq", "momentum", "ema", "swa_sum"};
    for (int i = 0; i < 7; i++) {
        if (!host[i]) continue; /* a weight average this run does not keep */
        if (i == 1 && to_host && cb->grads_on_host) continue; /* the host copy is the current one */
        char what[96];
        snprintf(what, sizeof what, "cuda: %s %s", to_host ? "download of" : "upload of", names[i]);
        RETURN_ON_FAILURE(
            cuda_check(cudaMemcpyAsync(to_host ? (void *)host[i] : (void *)dev[i],
                                       to_host ? (void *)dev[i] : (void *)host[i], bytes,
                                       to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, cb->stream),
                       what));
    }
    if (!to_host) {
        cb->grads_on_host = 0;
        RETURN_ON_FAILURE(write_shadows(cb, 0));
    }
    return sync_stream(cb, to_host ? "cuda: state download" : "cuda: state upload");
}

int cuda_weights_from_host(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    const ModelSpec *s = &b->state->spec;
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(cb->d_params, b->state->params, s->total_floats * sizeof(float),
                                                 cudaMemcpyHostToDevice, cb->stream),
                                 "cuda: upload of params"));
    RETURN_ON_FAILURE(write_shadows(cb, 0));
    return sync_stream(cb, "cuda: weights upload");
}

int backend_cuda_sync_to_host(Backend *b) { return cuda_copy_state((CudaBackend *)b, 1); }

/* Backend.sync_to_host, before a checkpoint: only what a checkpoint holds (ckpt_layout.c) — the
 * weights and their averages, Muon's momentum of the matrices, Adam's moments of the others, in
 * runs of neighbouring parameters; not the gradients (zero after every step) nor the unused
 * halves of the optimizer buffers. For the baseline that is 138 MB instead of 341 MB, which
 * shortens the pause of a background checkpoint. */
int cuda_sync_for_checkpoint(Backend *b) {
    CudaBackend *cb = (CudaBackend *)b;
    TrainState *st = b->state;
    const ModelSpec *s = &st->spec;
    RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(st->params, cb->d_params, s->total_floats * sizeof(float),
                                                 cudaMemcpyDeviceToHost, cb->stream),
                                 "cuda: download of params"));
    float *average_host[2] = {st->ema, st->swa_sum};
    const float *average_dev[2] = {cb->d_ema, cb->d_swa_sum};
    for (int k = 0; k < 2; k++)
        if (average_host[k])
            RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(average_host[k], average_dev[k],
                                                         s->total_floats * sizeof(float), cudaMemcpyDeviceToHost,
                                                         cb->stream),
                                         k ? "cuda: download of swa_sum" : "cuda: download of ema"));
    for (int i = 0; i < s->num_params;) {
        const int matrix = s->params[i].group == PARAM_MATRIX;
        const size_t begin = s->params[i].offset;
        int j = i + 1;
        while (j < s->num_params && (s->params[j].group == PARAM_MATRIX) == matrix) j++;
        const size_t bytes = (s->params[j - 1].offset + s->params[j - 1].count - begin) * sizeof(float);
        if (matrix) {
            RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(st->momentum + begin, cb->d_momentum + begin, bytes,
                                                         cudaMemcpyDeviceToHost, cb->stream),
                                         "cuda: download of momentum"));
        } else {
            RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(st->exp_avg + begin, cb->d_exp_avg + begin, bytes,
                                                         cudaMemcpyDeviceToHost, cb->stream),
                                         "cuda: download of exp_avg"));
            RETURN_ON_FAILURE(cuda_check(cudaMemcpyAsync(st->exp_avg_sq + begin, cb->d_exp_avg_sq + begin, bytes,
                                           cudaMemcpyDeviceToHost, cb->stream),
                           "cuda: download of exp_avg_sq"));
        }
        i = j;
    }
    return sync_stream(cb, "cuda: state download for a checkpoint");
}
int backend_cuda_sync_from_host(Backend *b) { return cuda_copy_state((CudaBackend *)b, 0); }

#endif /* CT_HAVE_CUDA */
