/* bench_golf_compress.c — the GPTQ golf artifacts' compressors on the same quantized weights of
 * the 1.0611 record's shape (vocab 8192, 11 blocks of 512, 8 heads / 4 KV heads, MLP 4x): the
 * gptq container made once, then gptq-brotli's brotli (quality 11) and gptq-pergroup's packing
 * (L1 row order, lrzip ZPAQ level 9 per group, brotli for the rest), each timed and sized, and
 * each read back. The weights are the model's random initialization and every matrix is rounded
 * at GPTQ's scales for the compressors' figures; LQER applies as configured. Random weights
 * compress worse than trained ones. Then GPTQ's own time on every matrix of that shape, with
 * synthetic Hessians (D K D, K[i][j] = 0.9^|i-j|, D a random positive diagonal: symmetric
 * positive definite with correlated neighbours, as activations have); the Hessians' collection is
 * timed by `ctrain ckpt hessians` (docs/performance.md). Usage: bench_golf_compress [DIR]
 * (default: $TMPDIR or /tmp). Prints BENCH lines (docs/performance.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "config.h"
#include "golf_artifact.h"
#include "golf_artifact_internal.h"
#include "golf_gptq.h"
#include "model.h"

int main(int argc, char **argv) {
    const char *base = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char br[1100], pg[1100];
    snprintf(br, sizeof br, "%s/bench-golf.%d.br", base, (int)getpid());
    snprintf(pg, sizeof pg, "%s/bench-golf.%d.pgrp", base, (int)getpid());
    Config cfg;
    config_init(&cfg);
    const char *keys[][2] = {{"vocab_size", "8192"}, {"num_layers", "11"},  {"model_dim", "512"},
                             {"num_heads", "8"},     {"num_kv_heads", "4"}, {"mlp_mult", "4"}};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        if (config_set(&cfg, keys[k][0], keys[k][1], 2, "bench") != 0) goto fail;
    ModelSpec spec;
    if (model_spec_init(&spec, &cfg) != 0) goto fail;
    float *params = ct_malloc(spec.total_floats * sizeof(float), "weights");
    model_init_weights(&spec, 1337, params);
    const float **none = ct_calloc((size_t)spec.num_params + 1, sizeof *none, "Hessians");
    const GolfGptqOptions o = {(int)cfg.matrix_bits, (int)cfg.embed_bits, (float)cfg.matrix_clip_sigmas,
                               (float)cfg.mlp_clip_sigmas, (float)cfg.attn_clip_sigmas, (float)cfg.embed_clip_sigmas,
                               (int)cfg.gated_attn_quant_gate, (int)cfg.lqer_enabled, (int)cfg.lqer_rank,
                               (int)cfg.lqer_top_k, (int)cfg.lqer_factor_bits, (int)cfg.lqer_asym_enabled,
                               (int)cfg.lqer_asym_group, (const float *const *)none};
    GolfStats g = {0};
    unsigned char *raw = NULL;
    size_t raw_len = 0;
    double t = ct_now_ms();
    if (golf_gptq_container(&spec, params, &o, br, &g, &raw, &raw_len) != 0) goto fail;
    const double quantize_ms = ct_now_ms() - t;
    printf("  frontier shape: %lld parameters in %lld tensors, container %zu bytes (quantized in %.1f s, "
           "rounding at GPTQ's scales)\n",
           (long long)g.param_count, (long long)g.num_tensors, raw_len, quantize_ms / 1000);

    t = ct_now_ms();
    int64_t br_bytes = 0;
    if (golf_gptq_pack(raw, raw_len, br, &br_bytes) != 0) goto fail;
    const double brotli_ms = ct_now_ms() - t;
    int64_t pg_bytes = 0;
    t = ct_now_ms();
    if (golf_pergroup_pack(&spec, raw, raw_len, pg, &pg_bytes) != 0) goto fail;
    const double pergroup_ms = ct_now_ms() - t;

    float *a = ct_malloc(spec.total_floats * sizeof(float), "weights");
    float *b = ct_malloc(spec.total_floats * sizeof(float), "weights");
    t = ct_now_ms();
    if (golf_read(&spec, GOLF_GPTQ_BROTLI, br, a) != 0) goto fail;
    const double brotli_read_ms = ct_now_ms() - t;
    t = ct_now_ms();
    if (golf_read(&spec, GOLF_GPTQ_PERGROUP, pg, b) != 0) goto fail;
    const double pergroup_read_ms = ct_now_ms() - t;
    const int same = !memcmp(a, b, spec.total_floats * sizeof(float));
    printf("  gptq-brotli  : %10lld bytes, written in %6.1f s, read in %5.1f s\n", (long long)br_bytes, brotli_ms / 1000,
           brotli_read_ms / 1000);
    printf("  gptq-pergroup: %10lld bytes, written in %6.1f s, read in %5.1f s (same weights: %s)\n",
           (long long)pg_bytes, pergroup_ms / 1000, pergroup_read_ms / 1000, same ? "yes" : "NO");
    printf("BENCH golf_container_bytes %zu\n", raw_len);
    printf("BENCH golf_brotli_bytes %lld\n", (long long)br_bytes);
    printf("BENCH golf_brotli_write_s %.1f\n", brotli_ms / 1000);
    printf("BENCH golf_brotli_read_s %.1f\n", brotli_read_ms / 1000);
    printf("BENCH golf_pergroup_bytes %lld\n", (long long)pg_bytes);
    printf("BENCH golf_pergroup_write_s %.1f\n", pergroup_ms / 1000);
    printf("BENCH golf_pergroup_read_s %.1f\n", pergroup_read_ms / 1000);
    /* GPTQ itself: every matrix the artifact quantizes, with synthetic Hessians */
    float **hess = ct_calloc((size_t)spec.num_params + 1, sizeof *hess, "Hessians");
    uint64_t r = 7;
    for (int i = 0; i < spec.num_params; i++) {
        const ParamInfo *p = &spec.params[i];
        if (p->ndim != 2 || p->count <= 65536) continue;
        const int c = (int)p->shape[1];
        float *h = hess[i] = ct_malloc((size_t)c * c * sizeof *h, "Hessian");
        float *d = ct_malloc((size_t)c * sizeof *d, "scales");
        for (int j = 0; j < c; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            d[j] = 0.5f + (float)(r >> 40) / (float)(1u << 24);
        }
        for (int x = 0; x < c; x++)
            for (int y = 0; y < c; y++) h[(size_t)x * c + y] = d[x] * d[y] * powf(0.9f, (float)abs(x - y));
        free(d);
    }
    GolfGptqOptions og = o;
    og.hessians = (const float *const *)hess;
    unsigned char *raw2 = NULL;
    size_t raw2_len = 0;
    GolfStats g2 = {0};
    t = ct_now_ms();
    if (golf_gptq_container(&spec, params, &og, br, &g2, &raw2, &raw2_len) != 0) goto fail;
    const double gptq_ms = ct_now_ms() - t;
    printf("  GPTQ of the %lld matrices (%lld with LQER), synthetic Hessians: %.1f s\n", (long long)g2.num_gptq,
           (long long)g2.num_lqer, gptq_ms / 1000);
    printf("BENCH golf_gptq_quantize_s %.1f\n", gptq_ms / 1000);
    for (int i = 0; i < spec.num_params; i++) free(hess[i]);
    free(hess), free(raw2);
    unlink(br);
    unlink(pg);
    free(a), free(b), free(raw), free(params), free(none);
    model_spec_free(&spec);
    return same ? 0 : 1;
fail:
    ct_print_error();
    unlink(br);
    unlink(pg);
    return 1;
}
