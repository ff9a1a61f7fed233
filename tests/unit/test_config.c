/* test_config.c — configuration table, parsing (file and key=value), validation messages and
 * the round trip through config.txt. */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "config.h"
#include "harness.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void defaults_follow_train_gpt(void) {
    Config c;
    config_init(&c);
    CHECK(c.vocab_size == 1024 && c.num_layers == 9 && c.model_dim == 512, "model defaults");
    CHECK(c.num_heads == 8 && c.num_kv_heads == 4 && c.mlp_mult == 2 && c.tie_embeddings == 1, "head defaults");
    CHECK(c.train_batch_tokens == 524288 && c.train_seq_len == 1024 && c.grad_accum_slots == 8, "batch defaults");
    CHECK(c.iterations == 20000 && c.warmdown_iters == 1200 && c.warmup_steps == 20, "schedule defaults");
    CHECK(c.max_wallclock_seconds == 0.0, "max_wallclock_seconds must default to off");
    CHECK(c.embed_lr == 0.6 && c.head_lr == 0.008 && c.tied_embed_lr == 0.05 && c.matrix_lr == 0.04, "lrs");
    CHECK(c.scalar_lr == 0.04 && c.muon_momentum == 0.95 && c.muon_backend_steps == 5, "muon");
    CHECK(c.muon_momentum_warmup_start == 0.85 && c.muon_momentum_warmup_steps == 500, "muon warmup");
    CHECK(c.beta1 == 0.9 && c.beta2 == 0.95 && c.adam_eps == 1e-8 && c.grad_clip_norm == 0.0, "adam");
    CHECK(c.seed == 1337 && c.val_loss_every == 1000 && c.val_batch_size == 524288 && c.train_log_every == 200,
          "misc");
    CHECK(c.rope_base == 10000.0 && c.logit_softcap == 30.0 && c.qk_gain_init == 1.5 &&
              c.tied_embed_init_std == 0.005, "model floats");
    CHECK(!strcmp(c.device, "auto") && !strcmp(c.resume, "auto") && c.train_files[0] == '\0', "ours");
    config_free(&c);
}

/* Several files: applied in order, every file's keys taken, a later file's value winning over an
 * earlier one's, and each value's file recorded (the banner names it); a key set twice in one
 * file is still refused. */
static void files_layered_in_order(void) {
    char a[600], b[600];
    snprintf(a, sizeof a, "%s/layer_a.conf", test_tmpdir());
    snprintf(b, sizeof b, "%s/layer_b.conf", test_tmpdir());
    write_file(a, "num_layers = 4\nmodel_dim = 256\n");
    write_file(b, "model_dim = 128\nmatrix_lr = 0.02\n");
    Config c;
    config_init(&c);
    CHECK(config_load_file(&c, a) == 0 && config_load_file(&c, b) == 0, "load: %s", ct_error());
    const int layers = (int)(config_find_key("num_layers") - ct_config_keys),
              dim = (int)(config_find_key("model_dim") - ct_config_keys),
              lr = (int)(config_find_key("matrix_lr") - ct_config_keys),
              seq = (int)(config_find_key("train_seq_len") - ct_config_keys);
    CHECK(c.num_layers == 4, "the first file's key is kept: num_layers = %lld", (long long)c.num_layers);
    CHECK(c.model_dim == 128, "the later file wins: model_dim = %lld", (long long)c.model_dim);
    CHECK(c.matrix_lr == 0.02, "the second file's own key: matrix_lr = %g", c.matrix_lr);
    CHECK(c.source[layers] == CT_SOURCE_FILE && c.source[dim] == CT_SOURCE_FILE, "sources");
    CHECK(c.file_from[layers] && !strcmp(c.file_from[layers], a), "num_layers from %s", a);
    CHECK(c.file_from[dim] && !strcmp(c.file_from[dim], b), "model_dim from %s", b);
    CHECK(c.file_from[lr] && !strcmp(c.file_from[lr], b), "matrix_lr from %s", b);
    CHECK(c.file_from[seq] == NULL, "a key no file set names no file");
    config_free(&c);
}

static void file_then_command_line(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/a.conf", test_tmpdir());
    write_file(path,
               "# a comment\n"
               "num_layers = 4   # trailing comment\n"
               "\n"
               "model_dim=256\n"
               "train_files = \"data/train #1/*.h5\"\n"
               "train_batch_tokens = 16_384\n"
               "tie_embeddings = false\n");
    Config c;
    config_init(&c);
    CHECK(config_load_file(&c, path) == 0, "load: %s", ct_error());
    /* the environment (train_gpt.py's upper-case names) overrides the file, the command line both */
    setenv("NUM_LAYERS", "5", 1);
    setenv("TRAIN_BATCH_TOKENS", "32768", 1);
    CHECK(config_apply_env(&c) == 0, "env: %s", ct_error());
    unsetenv("NUM_LAYERS");
    unsetenv("TRAIN_BATCH_TOKENS");
    CHECK(c.num_layers == 5 && c.train_batch_tokens == 32768, "environment must override the file");
    char *args[] = {"num_layers=6", "matrix_lr=0.02"};
    CHECK(config_apply_args(&c, 2, args) == 0, "args: %s", ct_error());
    CHECK(c.num_layers == 6, "command line must override the file and environment (got %lld)", (long long)c.num_layers);
    CHECK(c.model_dim == 256 && c.train_batch_tokens == 32768 && c.tie_embeddings == 0, "file and env values");
    CHECK(c.source[config_find_key("train_batch_tokens") - ct_config_keys] == CT_SOURCE_ENV, "source of train_batch_tokens");
    CHECK(!strcmp(c.train_files, "data/train #1/*.h5"), "quoted value with '#': '%s'", c.train_files);
    CHECK(c.matrix_lr == 0.02, "float override");
    const ConfigKey *k = config_find_key("num_layers");
    CHECK(c.source[k - ct_config_keys] == CT_SOURCE_COMMAND_LINE, "source of num_layers");
    CHECK(c.source[config_find_key("model_dim") - ct_config_keys] == CT_SOURCE_FILE, "source of model_dim");
    config_free(&c);
}

static void bad_values_name_key_and_value(void) {
    Config c;
    config_init(&c);
    char *a1[] = {"num_layers=abc"};
    CHECK(config_apply_args(&c, 1, a1) != 0, "non-integer accepted");
    CHECK(strstr(ct_error(), "num_layers") && strstr(ct_error(), "abc"), "message: %s", ct_error());
    char *a2[] = {"no_such_key=1"};
    CHECK(config_apply_args(&c, 1, a2) != 0 && strstr(ct_error(), "no_such_key"), "unknown key: %s", ct_error());
    char *a3[] = {"just_a_word"};
    CHECK(config_apply_args(&c, 1, a3) != 0 && strstr(ct_error(), "key=value"), "no '=': %s", ct_error());
    char *a4[] = {"matrix_lr=nan"};
    CHECK(config_apply_args(&c, 1, a4) != 0, "nan accepted");
    char *a5[] = {"tie_embeddings=2"};
    CHECK(config_apply_args(&c, 1, a5) != 0 && strstr(ct_error(), "boolean"), "bool: %s", ct_error());
    char *a6[] = {"seed=12x"};
    CHECK(config_apply_args(&c, 1, a6) != 0, "trailing garbage accepted");
    config_free(&c);

    char path[600];
    snprintf(path, sizeof path, "%s/bad.conf", test_tmpdir());
    write_file(path, "num_layers = 4\nthis line has no equals\n");
    config_init(&c);
    CHECK(config_load_file(&c, path) != 0, "bad line accepted");
    CHECK(strstr(ct_error(), "bad.conf:2"), "message must name file and line: %s", ct_error());
    CHECK(config_load_file(&c, "/nonexistent/x.conf") != 0 && strstr(ct_error(), "/nonexistent/x.conf"),
          "missing file: %s", ct_error());
    config_free(&c);
}

/* Load `text` as a config file; returns config_load_file's result (message in ct_error()). */
static int load_text(const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/syntax.conf", test_tmpdir());
    write_file(path, text);
    Config c;
    config_init(&c);
    int rc = config_load_file(&c, path);
    config_free(&c);
    return rc;
}

static void file_syntax_errors_name_file_and_line(void) {
    CHECK(load_text("num_layers = 4\nmodel_dim = 256\nnum_layers = 6\n") != 0, "a key set twice was accepted");
    CHECK(strstr(ct_error(), "syntax.conf:3") && strstr(ct_error(), "num_layers is set twice") &&
              strstr(ct_error(), "first on line 1"),
          "%s", ct_error());
    CHECK(load_text("num_layers = 4\ntrain_files = \"data/*.h5\n") != 0, "an unclosed quote was accepted");
    CHECK(strstr(ct_error(), "syntax.conf:2") && strstr(ct_error(), "quote is not closed"), "%s", ct_error());
    CHECK(load_text("out_dir = 'runs/a\n") != 0 && strstr(ct_error(), "' quote is not closed"), "%s", ct_error());
    /* quotes that close are fine, also around a '#' */
    CHECK(load_text("out_dir = 'runs/#1'  # comment\n") == 0, "%s", ct_error());

    /* a UTF-8 byte-order mark before the first key is not part of it */
    char path[600];
    snprintf(path, sizeof path, "%s/bom.conf", test_tmpdir());
    write_file(path, "\xEF\xBB\xBFnum_layers = 3\nmodel_dim = 128\n");
    Config c;
    config_init(&c);
    CHECK(config_load_file(&c, path) == 0, "BOM: %s", ct_error());
    CHECK(c.num_layers == 3 && c.model_dim == 128, "BOM file values %lld %lld", (long long)c.num_layers,
          (long long)c.model_dim);
    config_free(&c);

    /* control characters in a value (a newline would add a line to config.txt) */
    config_init(&c);
    char *nl[] = {"out_dir=runs/a\nresume=none"};
    CHECK(config_apply_args(&c, 1, nl) != 0, "a newline in a value was accepted");
    CHECK(strstr(ct_error(), "out_dir has a control character (byte 0x0a at position 6"), "%s", ct_error());
    char *tab[] = {"train_files=a\tb"};
    CHECK(config_apply_args(&c, 1, tab) != 0 && strstr(ct_error(), "0x09"), "%s", ct_error());
    config_free(&c);
    CHECK(load_text("out_dir = runs/\x01x\n") != 0 && strstr(ct_error(), "syntax.conf:1") &&
              strstr(ct_error(), "0x01"),
          "%s", ct_error());
    /* the command line still overrides the file, and a later argument an earlier one */
    config_init(&c);
    char *twice[] = {"num_layers=2", "num_layers=5"};
    CHECK(config_apply_args(&c, 2, twice) == 0 && c.num_layers == 5, "%s", ct_error());
    config_free(&c);
}

/* Apply args to a fresh config with train_files set; return validate's result. */
static int validate_with(const char *arg, int world) {
    Config c;
    config_init(&c);
    char *base[] = {"train_files=x.h5"};
    config_apply_args(&c, 1, base);
    char *args[] = {(char *)arg};
    int rc = config_apply_args(&c, 1, args);
    if (rc == 0) rc = config_validate(&c, world);
    config_free(&c);
    return rc;
}

static int validate_pair(const char *a, const char *b, int world) {
    Config c;
    config_init(&c);
    char *args[] = {"train_files=x.h5", (char *)a, (char *)b};
    int rc = config_apply_args(&c, 3, args);
    if (rc == 0) rc = config_validate(&c, world);
    config_free(&c);
    return rc;
}

/* residual_dtype: fp32 (the default) or bf16, anything else refused with the key and value */
static void residual_dtype_settings(void) {
    Config c;
    config_init(&c);
    CHECK(!strcmp(c.residual_dtype, "fp32"), "residual_dtype defaults to '%s', expected fp32", c.residual_dtype);
    config_free(&c);
    CHECK(validate_with("residual_dtype=bf16", 1) == 0, "bf16: %s", ct_error());
    CHECK(validate_with("residual_dtype=fp32", 1) == 0, "fp32: %s", ct_error());
    CHECK(validate_with("residual_dtype=fp16", 1) != 0 &&
              strstr(ct_error(), "residual_dtype = 'fp16': expected fp32 or bf16"),
          "%s", ct_error());
    CHECK(validate_with("residual_dtype=BF16", 1) != 0, "BF16 accepted");
}

/* nccl and its bucket size: which device and world size each setting allows */
static void nccl_settings(void) {
    CHECK(validate_with("nccl=maybe", 1) != 0 && strstr(ct_error(), "nccl = 'maybe': expected auto, on or off"), "%s",
          ct_error());
    CHECK(validate_pair("device=cpu", "nccl=on", 1) != 0 && strstr(ct_error(), "nccl = on needs device = cuda"), "%s",
          ct_error());
    CHECK(validate_pair("device=cuda", "nccl=on", 1) == 0, "nccl=on, one GPU: %s", ct_error());
    CHECK(validate_pair("device=cuda", "nccl=off", 1) == 0, "nccl=off, one GPU: %s", ct_error());
    CHECK(validate_pair("device=cuda", "nccl=off", 2) != 0 && strstr(ct_error(), "nccl = off with device = cuda and 2"),
          "%s", ct_error());
    CHECK(validate_pair("device=cpu", "nccl=off", 2) == 0, "cpu ranks ignore nccl=off: %s", ct_error());
    CHECK(validate_with("grad_bucket_mb=0", 1) != 0 && strstr(ct_error(), "grad_bucket_mb = 0"), "%s", ct_error());
    CHECK(validate_with("grad_bucket_mb=0.5", 1) == 0, "%s", ct_error());
    Config c;
    config_init(&c);
    char *cuda[] = {"device=cuda"}, *on[] = {"nccl=on"}, *cpu[] = {"device=cpu"};
    config_apply_args(&c, 1, cuda);
    CHECK(!config_uses_nccl(&c, 1) && config_uses_nccl(&c, 2), "auto: NCCL only with ranks");
    config_apply_args(&c, 1, on);
    CHECK(config_uses_nccl(&c, 1), "nccl=on: NCCL with one rank too");
    config_apply_args(&c, 1, cpu);
    CHECK(!config_uses_nccl(&c, 8), "cpu: never NCCL");
    config_free(&c);
}

static void inconsistent_combinations(void) {
    CHECK(validate_with("seed=1", 1) == 0, "defaults must validate: %s", ct_error());
    CHECK(validate_with("seed=1", 8) == 0, "world 8 divides 8 slots: %s", ct_error());
    CHECK(validate_with("seed=1", 3) != 0 && strstr(ct_error(), "grad_accum_slots"), "world 3: %s", ct_error());
    CHECK(validate_with("num_heads=7", 1) != 0 && strstr(ct_error(), "num_heads"), "%s", ct_error());
    CHECK(validate_with("num_kv_heads=3", 1) != 0 && strstr(ct_error(), "num_kv_heads"), "%s", ct_error());
    /* 512/256 = 2 is even; 504/8 = 63 is odd */
    CHECK(validate_with("model_dim=504", 1) != 0 && strstr(ct_error(), "head_dim"), "%s", ct_error());
    CHECK(validate_with("train_seq_len=1000", 1) != 0 && strstr(ct_error(), "train_seq_len"), "%s", ct_error());
    CHECK(validate_with("train_batch_tokens=524289", 1) != 0 && strstr(ct_error(), "train_batch_tokens"), "%s",
          ct_error());
    CHECK(validate_with("device=tpu", 1) != 0 && strstr(ct_error(), "device"), "%s", ct_error());
    CHECK(validate_with("logit_softcap=0", 1) != 0 && strstr(ct_error(), "logit_softcap"), "%s", ct_error());
    CHECK(validate_with("beta2=1", 1) != 0 && strstr(ct_error(), "beta2"), "%s", ct_error());
    /* sizes that would overflow the kernels' int widths are refused before any allocation */
    CHECK(validate_with("mlp_mult=4294967296", 1) != 0 && strstr(ct_error(), "mlp_mult = 4294967296"), "%s",
          ct_error());
    CHECK(validate_with("num_layers=100000", 1) != 0 && strstr(ct_error(), "num_layers"), "%s", ct_error());
    CHECK(validate_with("model_dim=4294967296", 1) != 0 && strstr(ct_error(), "model_dim"), "%s", ct_error());
    CHECK(validate_with("train_seq_len=33554432", 1) != 0 && strstr(ct_error(), "train_seq_len"), "%s", ct_error());
    CHECK(validate_with("train_batch_tokens=9223372036854775807", 1) != 0 && strstr(ct_error(), "train_batch_tokens"),
          "%s", ct_error());
    CHECK(validate_with("keep_checkpoints=9223372036854775807", 1) != 0 && strstr(ct_error(), "keep_checkpoints"),
          "%s", ct_error());
    Config c;
    config_init(&c);
    CHECK(config_validate(&c, 1) != 0 && strstr(ct_error(), "train_files"), "train_files required: %s", ct_error());
    config_free(&c);
}

/* The record stack's keys (issue 36): each bad value is refused naming the key and the value. */
static void record_keys_rejected(void) {
    static const struct {
        const char *arg, *expect;
    } bad[] = {
        {"rope_dims=7", "rope_dims = 7"},          /* odd */
        {"rope_dims=66", "rope_dims = 66"},        /* above head_dim 64 */
        {"rope_dims=-2", "rope_dims = -2"},
        {"xsa_last_n=10", "xsa_last_n = 10"},      /* above num_layers 9 */
        {"xsa_last_n=-1", "xsa_last_n = -1"},
        {"bigram_vocab_size=1", "bigram_vocab_size = 1"},
        {"bigram_vocab_size=-5", "bigram_vocab_size = -5"},
        {"bigram_dim=0", "bigram_dim = 0"},
        {"rope_train_seq_len=-1", "rope_train_seq_len = -1"},
        {"mlp_mult=0", "mlp_mult = 0"},
        {"mlp_mult=0.001", "mlp_mult = 0.001"},    /* int(0.001 * 512) = 0 hidden units */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_with(bad[i].arg, 1) != 0 && strstr(ct_error(), bad[i].expect), "%s: %s", bad[i].arg, ct_error());
    /* partial RoPE on 2 dims cannot take the NTK exponent r/(r-2) */
    CHECK(validate_pair("rope_dims=2", "rope_train_seq_len=512", 1) != 0 && strstr(ct_error(), "rope_train_seq_len"),
          "%s", ct_error());
    CHECK(validate_pair("rope_dims=2", "rope_train_seq_len=1024", 1) == 0, "no scaling at T = 1024: %s", ct_error());
    CHECK(validate_pair("rope_dims=16", "rope_train_seq_len=512", 1) == 0, "%s", ct_error());
    static const char *const good[] = {"rope_dims=16", "rope_dims=64",  "xsa_last_n=9", "bigram_vocab_size=2",
                                       "mlp_mult=2.75", "ln_scale=1", "smear_gate=1", "ortho_init=1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(validate_with(good[i], 1) == 0, "%s refused: %s", good[i], ct_error());
}

/* Validate train_files plus up to four settings. */
static int validate_args(const char *a, const char *b, const char *c3, const char *d) {
    Config c;
    config_init(&c);
    char *args[5] = {"train_files=x.h5"};
    int n = 1;
    const char *given[] = {a, b, c3, d};
    for (int i = 0; i < 4; i++)
        if (given[i]) args[n++] = (char *)given[i];
    int rc = config_apply_args(&c, n, args);
    if (rc == 0) rc = config_validate(&c, 1);
    config_free(&c);
    return rc;
}

/* The 1.0611 record's schedule and optimizer keys (issue 56): off by default; each bad value or
 * combination refused naming the key(s) and the value. */
static void frontier_schedule_and_optimizer_keys(void) {
    Config c;
    config_init(&c);
    CHECK(c.warmdown_frac == 0 && c.min_lr == 0 && !strcmp(c.progress_clock, "steps") && c.gptq_reserve_seconds == 0 &&
              c.embed_wd == -1 && !c.muon_polar_express && !c.muon_row_normalize,
          "defaults: every new key off");
    config_free(&c);
    static const struct {
        const char *a, *b, *c, *d, *expect;
    } bad[] = {
        {"warmdown_frac=1.5", NULL, NULL, NULL, "warmdown_frac = 1.5"},
        {"warmdown_frac=-0.1", NULL, NULL, NULL, "warmdown_frac = -0.1"},
        {"min_lr=1.5", "warmdown_frac=0.85", NULL, NULL, "min_lr = 1.5: expected in [0, 1]"},
        {"min_lr=-0.1", "warmdown_frac=0.85", NULL, NULL, "min_lr = -0.1: expected in [0, 1]"},
        {"min_lr=0.1", NULL, NULL, NULL, "min_lr = 0.1 needs warmdown_frac > 0"},
        {"progress_clock=time", NULL, NULL, NULL, "progress_clock = 'time': expected steps or wallclock"},
        {"progress_clock=wallclock", "warmdown_frac=0.85", NULL, NULL,
         "progress_clock = wallclock needs max_wallclock_seconds > 0"},
        {"progress_clock=wallclock", "max_wallclock_seconds=600", NULL, NULL,
         "progress_clock = wallclock needs warmdown_frac > 0"},
        {"gptq_reserve_seconds=-1", NULL, NULL, NULL, "gptq_reserve_seconds = -1"},
        {"gptq_reserve_seconds=0.5", NULL, NULL, NULL,
         "gptq_reserve_seconds = 0.5: expected below max_wallclock_seconds = 0"},
        {"gptq_reserve_seconds=600", "max_wallclock_seconds=600", NULL, NULL, "gptq_reserve_seconds = 600"},
        {"embed_wd=-0.5", NULL, NULL, NULL, "embed_wd = -0.5"},
        {"muon_polar_express=1", "muon_backend_steps=6", NULL, NULL,
         "muon_backend_steps = 6: expected <= 5 with muon_polar_express"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_args(bad[i].a, bad[i].b, bad[i].c, bad[i].d) != 0 && strstr(ct_error(), bad[i].expect),
              "%s %s: %s", bad[i].a, bad[i].b ? bad[i].b : "", ct_error());
    static const struct {
        const char *a, *b, *c, *d;
    } good[] = {
        {"warmdown_frac=0.85", "min_lr=0.1", NULL, NULL},
        {"warmdown_frac=1", "min_lr=1", NULL, NULL},
        {"warmdown_frac=0.85", "min_lr=0.1", "max_wallclock_seconds=600", "progress_clock=steps"},
        {"warmdown_frac=0.85", "progress_clock=wallclock", "max_wallclock_seconds=600", "gptq_reserve_seconds=0.5"},
        {"max_wallclock_seconds=600", "gptq_reserve_seconds=0.5", NULL, NULL},
        {"progress_clock=wallclock", "max_wallclock_seconds=600", "num_loops=1", NULL},
        {"embed_wd=0.085", "adam_wd=0.02", NULL, NULL},
        {"embed_wd=0", NULL, NULL, NULL},
        {"muon_polar_express=1", "muon_backend_steps=5", "muon_row_normalize=1", NULL},
        {"muon_polar_express=1", "muon_backend_steps=3", NULL, NULL},
        {"muon_backend_steps=6", "muon_row_normalize=1", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(validate_args(good[i].a, good[i].b, good[i].c, good[i].d) == 0, "%s %s %s refused: %s", good[i].a,
              good[i].b ? good[i].b : "", good[i].c ? good[i].c : "", ct_error());
}

/* The 1.0611 record's MLP slope and skip gates (issue 56): bad values refused naming the key. */
static void frontier_mlp_keys(void) {
    static const struct {
        const char *arg, *expect;
    } bad[] = {
        {"mlp_negative_slope=-0.5", "mlp_negative_slope = -0.5"}, /* leaky(h, -s)^2 = leaky(h, s)^2: one sign */
        {"mlp_negative_slope=1", "mlp_negative_slope = 1"},       /* 1 = plain h^2, no longer an activation */
        {"mlp_negative_slope=2.5", "mlp_negative_slope = 2.5"},
        {"skip_gates_enabled=2", "skip_gates_enabled"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_with(bad[i].arg, 1) != 0 && strstr(ct_error(), bad[i].expect), "%s: %s", bad[i].arg, ct_error());
    static const char *const good[] = {"mlp_negative_slope=0", "mlp_negative_slope=0.5", "mlp_negative_slope=0.999",
                                       "skip_gates_enabled=1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(validate_with(good[i], 1) == 0, "%s refused: %s", good[i], ct_error());
}

/* The sparse attention gate's keys (issue 56): bad values refused naming the key and the value;
 * gate_window is held to model_dim only when the gate is on (a small model without it is fine). */
static void sparse_attn_gate_keys_rejected(void) {
    static const struct {
        const char *arg, *expect;
    } bad[] = {
        {"sparse_attn_gate_scale=0", "sparse_attn_gate_scale = 0: expected > 0"},
        {"sparse_attn_gate_scale=-0.5", "sparse_attn_gate_scale = -0.5"},
        {"sparse_attn_gate_init_std=-0.01", "sparse_attn_gate_init_std = -0.01: expected >= 0"},
        {"gate_window=0", "gate_window = 0: expected >= 1"},
        {"gate_window=-3", "gate_window = -3"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_with(bad[i].arg, 1) != 0 && strstr(ct_error(), bad[i].expect), "%s: %s", bad[i].arg, ct_error());
    CHECK(validate_pair("sparse_attn_gate_enabled=1", "gate_window=513", 1) != 0 &&
              strstr(ct_error(), "gate_window = 513") && strstr(ct_error(), "model_dim = 512"),
          "%s", ct_error());
    CHECK(validate_pair("sparse_attn_gate_enabled=1", "gate_window=512", 1) == 0, "%s", ct_error());
    CHECK(validate_pair("sparse_attn_gate_enabled=0", "gate_window=513", 1) == 0, "gate off: %s", ct_error());
    CHECK(validate_pair("sparse_attn_gate_enabled=1", "sparse_attn_gate_init_std=0.02", 1) == 0, "%s", ct_error());
}

/* The 1.0611 SmearGate (issue 56): gate_window held to model_dim when it is on; with the 1.1248
 * record's smear_gate both on is refused naming both keys. */
static void smear_gate_enabled_rejected(void) {
    CHECK(validate_pair("smear_gate_enabled=1", "gate_window=513", 1) != 0 && strstr(ct_error(), "gate_window = 513") &&
              strstr(ct_error(), "smear_gate_enabled") && strstr(ct_error(), "model_dim = 512"),
          "%s", ct_error());
    CHECK(validate_pair("smear_gate_enabled=1", "gate_window=512", 1) == 0, "%s", ct_error());
    CHECK(validate_pair("smear_gate_enabled=0", "gate_window=513", 1) == 0, "gate off: %s", ct_error());
    CHECK(validate_pair("smear_gate_enabled=1", "smear_gate=1", 1) != 0 && strstr(ct_error(), "smear_gate = 1") &&
              strstr(ct_error(), "smear_gate_enabled = 1"),
          "%s", ct_error());
    CHECK(validate_pair("smear_gate_enabled=0", "smear_gate=1", 1) == 0, "%s", ct_error());
}

/* Document packing's keys (issue 56): max_doc_len held to [0, train_seq_len]; sliding-window
 * validation refused with packing; the packed row is the micro-batch (config_seq_len). */
static void doc_packing_keys(void) {
    static const struct {
        const char *a, *b, *expect;
    } bad[] = {
        {"max_doc_len=-1", NULL, "max_doc_len = -1: expected 0 (train_seq_len) or a segment length in [1, "},
        {"max_doc_len=1025", "doc_packing=1", "max_doc_len = 1025"},
        {"max_doc_len=1025", NULL, "train_seq_len = 1024"},
        {"doc_packing=1", "eval_stride=64", "eval_stride = 64 with doc_packing = 1"},
        {"doc_packing=2", NULL, "doc_packing"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK((bad[i].b ? validate_pair(bad[i].a, bad[i].b, 1) : validate_with(bad[i].a, 1)) != 0 &&
                  strstr(ct_error(), bad[i].expect),
              "%s %s: %s", bad[i].a, bad[i].b ? bad[i].b : "", ct_error());
    CHECK(validate_pair("doc_packing=1", "max_doc_len=1024", 1) == 0, "%s", ct_error());
    CHECK(validate_pair("doc_packing=1", "max_doc_len=1", 1) == 0, "%s", ct_error());
    Config c;
    config_init(&c);
    char *args[] = {"doc_packing=1", "train_batch_tokens=16384", "grad_accum_slots=4", "train_seq_len=512"};
    CHECK(config_apply_args(&c, 4, args) == 0, "%s", ct_error());
    CHECK(config_seq_len(&c) == 4096 && config_max_doc_len(&c) == 512, "seq %lld, max_doc_len %lld",
          (long long)config_seq_len(&c), (long long)config_max_doc_len(&c));
    c.doc_packing = 0;
    CHECK(config_seq_len(&c) == 512, "unpacked seq %lld", (long long)config_seq_len(&c));
    config_free(&c);
}

/* Validate train_files plus the settings of a NULL-ended list. */
static int validate_list(const char *const *given) {
    Config c;
    config_init(&c);
    char *args[16] = {"train_files=x.h5"};
    int n = 1;
    for (; given[n - 1] && n < 16; n++) args[n] = (char *)given[n - 1];
    int rc = config_apply_args(&c, n, args);
    if (rc == 0) rc = config_validate(&c, 1);
    config_free(&c);
    return rc;
}

/* Test-time training's keys (issue 57): off by default with the record's code defaults; the
 * 1.0611 record's logged values validate; the window helpers. */
static void ttt_defaults(void) {
    Config c;
    config_init(&c);
    CHECK(!c.ttt_enabled && c.ttt_lora_rank == 96 && c.ttt_lora_alpha == 144 && c.ttt_lora_lr == 1e-4 &&
              c.ttt_chunk_size == 48 && c.ttt_eval_seq_len == 2048 && c.ttt_batch_size == 64 && c.ttt_grad_steps == 1 &&
              c.ttt_weight_decay == 1.0 && c.ttt_beta1 == 0 && c.ttt_beta2 == 0.999,
          "per-document LoRA defaults");
    CHECK(c.ttt_k_lora && c.ttt_mlp_lora && c.ttt_o_lora && !strcmp(c.ttt_optimizer, "adam"), "adapter defaults");
    CHECK(c.phased_ttt_prefix_docs == 2000 && c.phased_ttt_num_phases == 1 && c.global_ttt_lr == 1e-3 &&
              c.global_ttt_momentum == 0.9 && c.global_ttt_epochs == 1 && c.global_ttt_chunk_tokens == 32768 &&
              c.global_ttt_batch_seqs == 32 && c.global_ttt_warmup_start_lr == 0 && c.global_ttt_warmup_chunks == 0 &&
              c.global_ttt_grad_clip == 1.0 && c.ttt_time_budget == 0,
          "global step defaults");
    CHECK(config_eval_seq_len(&c) == 1024 && config_ttt_eval_seq_len(&c) == 2048, "windows %lld %lld",
          (long long)config_eval_seq_len(&c), (long long)config_ttt_eval_seq_len(&c));
    c.ttt_eval_seq_len = 0;
    CHECK(config_ttt_eval_seq_len(&c) == 1024, "0 = train_seq_len: %lld", (long long)config_ttt_eval_seq_len(&c));
    c.eval_seq_len = 4096;
    CHECK(config_eval_seq_len(&c) == 4096 && config_ttt_eval_seq_len(&c) == 4096, "0 = eval_seq_len");
    config_free(&c);
    static const char *const record[] = {
        "ttt_enabled=1", "ttt_lora_rank=80", "ttt_weight_decay=0.5", "ttt_beta2=0.99", "phased_ttt_prefix_docs=2500",
        "phased_ttt_num_phases=3", "eval_seq_len=2048", "train_seq_len=2048", "train_batch_tokens=786432", NULL};
    CHECK(validate_list(record) == 0, "the record's values: %s", ct_error());
}

/* Each bad value of a ttt key is refused naming the key, the value and what was expected. */
static void ttt_keys_rejected(void) {
    static const struct {
        const char *a, *b, *c, *expect;
    } bad[] = {
        {"ttt_lora_rank=0", NULL, NULL, "ttt_lora_rank = 0: expected in [1, "},
        {"ttt_lora_rank=-3", NULL, NULL, "ttt_lora_rank = -3"},
        {"ttt_lora_alpha=-1", NULL, NULL, "ttt_lora_alpha = -1: expected >= 0"},
        {"ttt_lora_lr=-0.0001", NULL, NULL, "ttt_lora_lr = -0.0001: expected >= 0"},
        {"ttt_chunk_size=0", NULL, NULL, "ttt_chunk_size = 0: expected in [1, "},
        {"ttt_chunk_size=2049", NULL, NULL, "ttt_chunk_size = 2049: expected at most the TTT window, ttt_eval_seq_len = 2048"},
        {"ttt_eval_seq_len=-1", NULL, NULL, "ttt_eval_seq_len = -1"},
        {"ttt_batch_size=0", NULL, NULL, "ttt_batch_size = 0: expected in [1, "},
        {"ttt_grad_steps=-1", NULL, NULL, "ttt_grad_steps = -1"},
        {"ttt_weight_decay=-1", NULL, NULL, "ttt_weight_decay = -1: expected >= 0"},
        {"ttt_beta1=1", NULL, NULL, "ttt_beta1 = 1: expected in [0, 1)"},
        {"ttt_beta1=-0.1", NULL, NULL, "ttt_beta1 = -0.1"},
        {"ttt_beta2=1", NULL, NULL, "ttt_beta2 = 1: expected in [0, 1)"},
        {"ttt_optimizer=lion", NULL, NULL, "ttt_optimizer = 'lion': expected adam or sgd"},
        {"ttt_k_lora=2", NULL, NULL, "ttt_k_lora"},
        {"phased_ttt_prefix_docs=-1", NULL, NULL, "phased_ttt_prefix_docs = -1: expected >= 0"},
        {"phased_ttt_num_phases=0", NULL, NULL, "phased_ttt_num_phases = 0: expected in [1, "},
        {"phased_ttt_num_phases=3", "phased_ttt_prefix_docs=2", NULL,
         "phased_ttt_num_phases = 3: more phases than prefix documents (phased_ttt_prefix_docs = 2)"},
        {"global_ttt_lr=-0.001", NULL, NULL, "global_ttt_lr = -0.001: expected >= 0"},
        {"global_ttt_momentum=-0.9", NULL, NULL, "global_ttt_momentum = -0.9: expected >= 0"},
        {"global_ttt_epochs=-1", NULL, NULL, "global_ttt_epochs = -1"},
        {"global_ttt_chunk_tokens=0", NULL, NULL, "global_ttt_chunk_tokens = 0: expected >= 1"},
        {"global_ttt_batch_seqs=0", NULL, NULL, "global_ttt_batch_seqs = 0: expected in [1, "},
        {"global_ttt_warmup_start_lr=-1", NULL, NULL, "global_ttt_warmup_start_lr = -1: expected >= 0"},
        {"global_ttt_warmup_chunks=-1", NULL, NULL, "global_ttt_warmup_chunks = -1: expected >= 0"},
        {"global_ttt_grad_clip=-1", NULL, NULL, "global_ttt_grad_clip = -1: expected >= 0"},
        {"ttt_time_budget=-5", NULL, NULL, "ttt_time_budget = -5: expected >= 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_args(bad[i].a, bad[i].b, bad[i].c, NULL) != 0 && strstr(ct_error(), bad[i].expect), "%s %s: %s",
              bad[i].a, bad[i].b ? bad[i].b : "", ct_error());
    static const struct {
        const char *a, *b, *c;
    } good[] = {
        {"ttt_enabled=1", NULL, NULL},
        {"ttt_optimizer=sgd", "ttt_beta1=0.9", NULL},
        {"ttt_grad_steps=0", "global_ttt_epochs=0", "ttt_lora_lr=0"},
        {"phased_ttt_prefix_docs=0", "phased_ttt_num_phases=5", NULL}, /* no prefix: the phases do not run */
        {"phased_ttt_prefix_docs=3", "phased_ttt_num_phases=3", NULL},
        {"ttt_chunk_size=2048", "ttt_lora_rank=1", "global_ttt_grad_clip=0"},
        {"ttt_time_budget=450", "global_ttt_warmup_chunks=4", "global_ttt_warmup_start_lr=0.0001"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(validate_args(good[i].a, good[i].b, good[i].c, NULL) == 0, "%s %s %s refused: %s", good[i].a,
              good[i].b ? good[i].b : "", good[i].c ? good[i].c : "", ct_error());
}

/* The checks against other groups' keys (model_dim, the evaluation's sequence length) run only
 * with ttt_enabled: a small model or a long eval_seq_len without TTT is not held to the TTT
 * defaults; with it each names both keys. */
static void ttt_keys_checked_with_ttt_enabled(void) {
    static const struct {
        const char *a, *b, *c, *expect;
    } bad[] = {
        {"ttt_enabled=1", "ttt_lora_rank=513", NULL,
         "ttt_lora_rank = 513 with ttt_enabled = 1: expected in [1, model_dim = 512]"},
        {"ttt_enabled=1", "ttt_eval_seq_len=0", "ttt_chunk_size=1025",
         "ttt_chunk_size = 1025: expected at most the TTT window, train_seq_len (ttt_eval_seq_len = eval_seq_len = 0) = 1024"},
        {"ttt_enabled=1", "ttt_eval_seq_len=0", "eval_seq_len=32",
         "ttt_chunk_size = 48: expected at most the TTT window, eval_seq_len (ttt_eval_seq_len = 0) = 32"},
        {"ttt_enabled=1", "global_ttt_chunk_tokens=1023", NULL,
         "global_ttt_chunk_tokens = 1023 with ttt_enabled = 1: expected at least the evaluation's sequence length, "
         "train_seq_len = 1024"},
        {"ttt_enabled=1", "global_ttt_chunk_tokens=4095", "eval_seq_len=4096", "eval_seq_len = 4096"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(validate_args(bad[i].a, bad[i].b, bad[i].c, NULL) != 0 && strstr(ct_error(), bad[i].expect), "%s %s: %s",
              bad[i].b, bad[i].c ? bad[i].c : "", ct_error());
    static const struct {
        const char *a, *b, *c;
    } good[] = {
        {"ttt_lora_rank=513", NULL, NULL},
        {"ttt_eval_seq_len=0", "ttt_chunk_size=1025", NULL},
        {"global_ttt_chunk_tokens=1023", NULL, NULL},
        {"eval_seq_len=100000", NULL, NULL}, /* beyond 32768-token chunks, as tests/cli/test_stop_stages.sh runs */
        {"ttt_enabled=1", "global_ttt_chunk_tokens=1024", "ttt_lora_rank=512"},
        {"ttt_enabled=1", "ttt_eval_seq_len=0", "ttt_chunk_size=1024"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        CHECK(validate_args(good[i].a, good[i].b, good[i].c, NULL) == 0, "%s %s %s refused: %s", good[i].a,
              good[i].b ? good[i].b : "", good[i].c ? good[i].c : "", ct_error());
}

static void written_config_loads_back_identically(void) {
    Config a, b;
    config_init(&a);
    char *args[] = {"train_files=dir with space/*.h5", "matrix_lr=0.0123456789012345", "out_dir=o'dir",
                    "num_layers=3"};
    CHECK(config_apply_args(&a, 4, args) == 0, "%s", ct_error());
    char path[600];
    snprintf(path, sizeof path, "%s/config.txt", test_tmpdir());
    CHECK(config_write_file(&a, path, NULL) == 0, "%s", ct_error());
    config_init(&b);
    CHECK(config_load_file(&b, path) == 0, "%s", ct_error());
    for (int i = 0; i < ct_config_num_keys; i++) {
        char x[64], y[64];
        const ConfigKey *k = &ct_config_keys[i];
        const char *va = config_value_text(&a, k, x, sizeof x), *vb = config_value_text(&b, k, y, sizeof y);
        CHECK(!strcmp(va, vb), "key %s: wrote '%s', read '%s'", k->name, va, vb);
    }
    config_free(&a);
    config_free(&b);
}

static void every_key_has_help_and_valid_default(void) {
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        CHECK(k->help[0] != '\0', "key %s has no help", k->name);
        for (int j = 0; j < i; j++) CHECK(strcmp(k->name, ct_config_keys[j].name) != 0, "duplicate %s", k->name);
    }
}

int main(void) {
    RUN(defaults_follow_train_gpt);
    RUN(file_then_command_line);
    RUN(files_layered_in_order);
    RUN(bad_values_name_key_and_value);
    RUN(residual_dtype_settings);
    RUN(file_syntax_errors_name_file_and_line);
    RUN(inconsistent_combinations);
    RUN(nccl_settings);
    RUN(record_keys_rejected);
    RUN(frontier_schedule_and_optimizer_keys);
    RUN(frontier_mlp_keys);
    RUN(sparse_attn_gate_keys_rejected);
    RUN(smear_gate_enabled_rejected);
    RUN(doc_packing_keys);
    RUN(ttt_defaults);
    RUN(ttt_keys_rejected);
    RUN(ttt_keys_checked_with_ttt_enabled);
    RUN(written_config_loads_back_identically);
    RUN(every_key_has_help_and_valid_default);
    TEST_EXIT();
}
