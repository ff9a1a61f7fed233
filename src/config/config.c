/* config.c — parsing, validation and printing of the configuration table (config_keys.h).
 *
 * Contents, in order:
 *   the key table and lookup (config_find_key, the nearest name for a typo)
 *   config_init / config_free, config_set (one key from any source, typed and checked)
 *   files, arguments and the environment (config_load_file, config_apply_args, config_apply_env)
 *   config_validate: every key's range and the cross-key rules, one message per failure naming
 *     the key, the value and what was expected (the 1.0611 record's schedule keys in
 *     config_frontier.c, test-time training's in config_ttt.c)
 *   config_uses_nccl; values as text and their comparison (config_value_text, config_value_equal)
 *   writing (config_write, config_write_file: config.txt) and the help and docs tables
 *     (config_print_help, config_print_markdown) */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "stop.h"

#define CT_KEY_ENTRY(name, type, def, group, resume, help) \
    {#name, CT_KEY_##type, def, group, CT_RESUME_##resume, help, offsetof(Config, name)},
const ConfigKey ct_config_keys[] = {CT_CONFIG_KEYS(CT_KEY_ENTRY)};
const int ct_config_num_keys = (int)(sizeof ct_config_keys / sizeof ct_config_keys[0]);

_Static_assert(sizeof ct_config_keys / sizeof ct_config_keys[0] <= sizeof(((Config *)0)->source),
               "Config.source must have one entry per key");

static const char *const group_order[] = {"model", "batch", "schedule", "optimizer", "data", "artifact", "ttt", "run"};
static const char *const group_titles[] = {"Model shape", "Batch geometry", "Schedule", "Optimizer",
                                           "Data and evaluation", "GPTQ artifact", "Test-time training", "Run"};

const ConfigKey *config_find_key(const char *name) {
    for (int i = 0; i < ct_config_num_keys; i++)
        if (strcmp(ct_config_keys[i].name, name) == 0) return &ct_config_keys[i];
    return NULL;
}

/* Levenshtein distance of two short names (longer ones count as far apart). */
static int edit_distance(const char *a, const char *b) {
    enum { MAX = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAX || m >= MAX) return MAX;
    int row[MAX + 1];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diagonal = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int above = row[j];
            int best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[m];
}

/* The key a misspelt name most likely meant (iteration, val_loss_evry, matrixlr), or NULL when
 * none is close: at most 2 edits, or a third of the name's length for long names. */
static const char *nearest_key(const char *name) {
    const char *best = NULL;
    int best_d = 0, limit = (int)strlen(name) / 3;
    if (limit < 2) limit = 2;
    for (int i = 0; i < ct_config_num_keys; i++) {
        int d = edit_distance(name, ct_config_keys[i].name);
        if (d <= limit && (!best || d < best_d)) best = ct_config_keys[i].name, best_d = d;
    }
    return best;
}

/* A key as given, or in lower case (train_gpt.py's spelling: TRAIN_SEQ_LEN is train_seq_len). */
static const ConfigKey *find_key_any_case(const char *name) {
    const ConfigKey *k = config_find_key(name);
    char lower[96];
    size_t n = strlen(name);
    if (k || n >= sizeof lower) return k;
    for (size_t i = 0; i <= n; i++) lower[i] = (char)tolower((unsigned char)name[i]);
    return config_find_key(lower);
}

static void *field(Config *cfg, const ConfigKey *k) { return (char *)cfg + k->offset; }
static const void *cfield(const Config *cfg, const ConfigKey *k) { return (const char *)cfg + k->offset; }

static const char *type_name(ConfigKeyType t) {
    switch (t) {
    case CT_KEY_INT: return "int";
    case CT_KEY_FLOAT: return "float";
    case CT_KEY_BOOL: return "bool";
    case CT_KEY_STR: return "string";
    }
    return "?";
}

void config_init(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < ct_config_num_keys; i++) {
        /* Defaults are part of the table and are known-good; a bad default is a programming
         * error caught by the config unit test. */
        if (config_set(cfg, ct_config_keys[i].name, ct_config_keys[i].default_value, CT_SOURCE_DEFAULT, "default") != 0) {
            ct_print_error();
            abort();
        }
    }
}

void config_free(Config *cfg) {
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        if (k->type == CT_KEY_STR) {
            char **s = field(cfg, k);
            free(*s);
            *s = NULL;
        }
    }
}

static int parse_bool(const char *v, int64_t *out) {
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) {
        *out = 1;
        return 0;
    }
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) {
        *out = 0;
        return 0;
    }
    return -1;
}

int config_set(Config *cfg, const char *key, const char *value, int source, const char *origin) {
    const ConfigKey *k = find_key_any_case(key);
    if (!k) {
        const char *near = nearest_key(key);
        if (near)
            return ct_fail("%s: unknown configuration key '%s'; did you mean '%s'? (see `ctrain train --help`)", origin,
                           key, near);
        return ct_fail("%s: unknown configuration key '%s' (see `ctrain train --help`)", origin, key);
    }
    key = k->name; /* the key's own spelling in messages from here on */
    /* A newline or other control byte would break config.txt (one key per line), the printed
     * configuration and the checkpoint's /config for whoever reads them. */
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return ct_fail("%s: %s has a control character (byte 0x%02x at position %zu of its value); values are "
                           "one line of printable text",
                           origin, key, *p, (size_t)(p - (const unsigned char *)value));
    switch (k->type) {
    case CT_KEY_INT:
        if (ct_parse_int64(value, field(cfg, k)) != 0)
            return ct_fail("%s: %s = '%s' is not an integer", origin, key, value);
        break;
    case CT_KEY_FLOAT:
        if (ct_parse_double(value, field(cfg, k)) != 0)
            return ct_fail("%s: %s = '%s' is not a finite number", origin, key, value);
        break;
    case CT_KEY_BOOL:
        if (parse_bool(value, field(cfg, k)) != 0)
            return ct_fail("%s: %s = '%s' is not a boolean (expected 1/0, true/false)", origin, key, value);
        break;
    case CT_KEY_STR: {
        char **s = field(cfg, k);
        free(*s);
        *s = ct_strdup(value);
        break;
    }
    }
    cfg->source[k - ct_config_keys] = (unsigned char)source;
    return 0;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

/* Remove one pair of matching quotes around a value ("a b" or 'a b'). */
static char *unquote(char *v) {
    size_t n = strlen(v);
    if (n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0]) {
        v[n - 1] = '\0';
        return v + 1;
    }
    return v;
}

int config_load_file(Config *cfg, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return ct_fail("cannot open config file '%s': %s", path, strerror(errno));
    char buf[8192];
    int lineno = 0;
    int rc = 0;
    int set_on_line[sizeof cfg->source] = {0}; /* per key: the line that set it, 0 = not yet */
    while (fgets(buf, sizeof buf, f)) {
        lineno++;
        char origin[4200];
        snprintf(origin, sizeof origin, "%s:%d", path, lineno);
        if (!strchr(buf, '\n') && !feof(f)) {
            rc = ct_fail("%s: line longer than %zu characters", origin, sizeof buf - 2);
            break;
        }
        /* Editors on Windows start UTF-8 files with a byte-order mark; it is not part of a key. */
        char *line = buf;
        if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3)) line += 3;
        /* '#' starts a comment unless it is inside quotes. */
        char quote = 0;
        for (char *p = line; *p; p++) {
            if (quote) {
                if (*p == quote) quote = 0;
            } else if (*p == '"' || *p == '\'') {
                quote = *p;
            } else if (*p == '#') {
                *p = '\0';
                break;
            }
        }
        if (quote) {
            rc = ct_fail("%s: the %c quote is not closed on this line", origin, quote);
            break;
        }
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = ct_fail("%s: expected 'key = value', got '%s'", origin, s);
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        char *value = unquote(trim(eq + 1));
        if (!*key) {
            rc = ct_fail("%s: missing key before '='", origin);
            break;
        }
        const ConfigKey *k = find_key_any_case(key);
        if (k && set_on_line[k - ct_config_keys]) {
            rc = ct_fail("%s: %s is set twice in this file (first on line %d); keep one", origin, key,
                         set_on_line[k - ct_config_keys]);
            break;
        }
        if (k) set_on_line[k - ct_config_keys] = lineno;
        if (config_set(cfg, key, value, CT_SOURCE_FILE, origin) != 0) {
            rc = -1;
            break;
        }
        cfg->file_from[k - ct_config_keys] = path;
    }
    if (rc == 0 && ferror(f)) rc = ct_fail("error reading config file '%s'", path);
    fclose(f);
    return rc;
}

int config_apply_args(Config *cfg, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i])
            return ct_fail("command line: expected key=value, got '%s' (see `ctrain train --help`)", argv[i]);
        char key[128];
        size_t n = (size_t)(eq - argv[i]);
        if (n >= sizeof key) return ct_fail("command line: key too long in '%s'", argv[i]);
        memcpy(key, argv[i], n);
        key[n] = '\0';
        if (config_set(cfg, key, eq + 1, CT_SOURCE_COMMAND_LINE, "command line") != 0) return -1;
    }
    return 0;
}

int config_apply_env(Config *cfg) {
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        char name[128], origin[160];
        config_env_name(k, name, sizeof name);
        const char *value = getenv(name);
        if (!value) continue;
        snprintf(origin, sizeof origin, "environment variable %s", name);
        if (config_set(cfg, k->name, value, CT_SOURCE_ENV, origin) != 0) return -1;
    }
    return 0;
}

const char *config_env_origin(const Config *cfg, int i, char *buf, size_t cap) {
    if (cfg->derived_from[i]) snprintf(buf, cap, "%s", cfg->derived_from[i]);
    else config_env_name(&ct_config_keys[i], buf, cap);
    return buf;
}

void config_env_name(const ConfigKey *k, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *p = k->name; *p && n + 1 < cap; p++) buf[n++] = (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

/* ---- validation ---- */

#define REQUIRE(cond, ...)                  \
    do {                                    \
        if (!(cond)) return ct_fail(__VA_ARGS__); \
    } while (0)

int config_validate(const Config *c, int world_size) {
    REQUIRE(c->vocab_size >= 2 && c->vocab_size <= 2147483647LL,
            "vocab_size = %lld: expected an integer in [2, 2^31-1]", (long long)c->vocab_size);
    /* Upper bounds keep every derived size (widths, per-layer counts, tokens of a micro-batch)
     * inside the int the kernels index with; they are far above anything trainable. */
    REQUIRE(c->num_layers >= 1 && c->num_layers <= 4096, "num_layers = %lld: expected in [1, 4096]",
            (long long)c->num_layers);
    REQUIRE(c->model_dim >= 2 && c->model_dim <= 1048576, "model_dim = %lld: expected in [2, 2^20]",
            (long long)c->model_dim);
    REQUIRE(c->num_heads >= 1, "num_heads = %lld: expected >= 1", (long long)c->num_heads);
    REQUIRE(c->num_kv_heads >= 1, "num_kv_heads = %lld: expected >= 1", (long long)c->num_kv_heads);
    REQUIRE(c->model_dim % c->num_heads == 0, "model_dim = %lld is not divisible by num_heads = %lld",
            (long long)c->model_dim, (long long)c->num_heads);
    REQUIRE(c->num_heads % c->num_kv_heads == 0, "num_heads = %lld is not divisible by num_kv_heads = %lld",
            (long long)c->num_heads, (long long)c->num_kv_heads);
    REQUIRE((c->model_dim / c->num_heads) % 2 == 0,
            "head_dim = model_dim / num_heads = %lld / %lld = %lld is odd; RoPE needs an even head_dim",
            (long long)c->model_dim, (long long)c->num_heads, (long long)(c->model_dim / c->num_heads));
    REQUIRE(c->mlp_mult > 0 && c->mlp_mult <= 1024 && (int64_t)(c->mlp_mult * (double)c->model_dim) >= 1,
            "mlp_mult = %.15g: expected in (0, 1024] with int(mlp_mult * model_dim) >= 1", c->mlp_mult);
    const int64_t head_dim = config_head_dim(c);
    REQUIRE(c->rope_dims >= 0 && c->rope_dims <= head_dim && c->rope_dims % 2 == 0,
            "rope_dims = %lld: expected an even number in [0, head_dim = %lld] (0 = all of head_dim)",
            (long long)c->rope_dims, (long long)head_dim);
    REQUIRE(c->rope_train_seq_len >= 0, "rope_train_seq_len = %lld: expected >= 0 (0 = train_seq_len)",
            (long long)c->rope_train_seq_len);
    const int64_t rotated = c->rope_dims ? c->rope_dims : head_dim;
    REQUIRE(c->rope_train_seq_len == 0 || c->rope_train_seq_len >= c->train_seq_len || rotated > 2,
            "rope_train_seq_len = %lld below train_seq_len = %lld scales the RoPE base by (T/%lld)^(r/(r-2)), "
            "which needs more than 2 rotated dims (rope_dims = %lld)",
            (long long)c->rope_train_seq_len, (long long)c->train_seq_len, (long long)c->rope_train_seq_len,
            (long long)rotated);
    REQUIRE(c->xsa_last_n >= 0 && c->xsa_last_n <= c->num_layers,
            "xsa_last_n = %lld: expected in [0, num_layers = %lld]", (long long)c->xsa_last_n, (long long)c->num_layers);
    REQUIRE(c->xsa_last_n == 0 || head_dim <= 1024, "xsa_last_n = %lld with head_dim = %lld: XSA supports head_dim <= 1024",
            (long long)c->xsa_last_n, (long long)head_dim);
    /* (the parser already refuses non-finite numbers) */
    REQUIRE(c->sparse_attn_gate_scale > 0, "sparse_attn_gate_scale = %g: expected > 0", c->sparse_attn_gate_scale);
    REQUIRE(c->sparse_attn_gate_init_std >= 0, "sparse_attn_gate_init_std = %g: expected >= 0 (0 = zero init)",
            c->sparse_attn_gate_init_std);
    REQUIRE(c->gate_window >= 1, "gate_window = %lld: expected >= 1", (long long)c->gate_window);
    REQUIRE(!c->sparse_attn_gate_enabled || c->gate_window <= c->model_dim,
            "gate_window = %lld with sparse_attn_gate_enabled: expected in [1, model_dim = %lld] (the gate reads "
            "the attention input's first gate_window channels)",
            (long long)c->gate_window, (long long)c->model_dim);
    REQUIRE(!c->smear_gate_enabled || c->gate_window <= c->model_dim,
            "gate_window = %lld with smear_gate_enabled: expected in [1, model_dim = %lld] (the SmearGate reads the "
            "embedding's first gate_window channels)",
            (long long)c->gate_window, (long long)c->model_dim);
    REQUIRE(!(c->smear_gate && c->smear_gate_enabled),
            "smear_gate = 1 and smear_gate_enabled = 1: expected at most one (smear_gate is the 1.1248 record's "
            "per-channel gate after the embedding norm, smear_gate_enabled the 1.0611 record's before it)");
    REQUIRE(c->bigram_vocab_size == 0 || (c->bigram_vocab_size >= 2 && c->bigram_vocab_size <= 2147483647LL),
            "bigram_vocab_size = %lld: expected 0 (off) or at least 2 (the hash is taken modulo bigram_vocab_size - 1)",
            (long long)c->bigram_vocab_size);
    REQUIRE(c->bigram_dim >= 1 && c->bigram_dim <= 1048576, "bigram_dim = %lld: expected in [1, 2^20]",
            (long long)c->bigram_dim);
    REQUIRE(c->mtp_num_heads >= 0 && c->mtp_num_heads <= CT_MTP_MAX_HEADS && c->mtp_num_heads < c->train_seq_len,
            "mtp_num_heads = %lld: expected in [0, %d] and below train_seq_len = %lld (head k predicts the token "
            "k+2 ahead, so each needs a sequence longer than k+1)",
            (long long)c->mtp_num_heads, CT_MTP_MAX_HEADS, (long long)c->train_seq_len);
    REQUIRE(c->mlp_negative_slope >= 0 && c->mlp_negative_slope < 1,
            "mlp_negative_slope = %.15g: expected in [0, 1) (0 = relu^2; the 1.0611 record uses 0.5)",
            c->mlp_negative_slope);
    /* (bounded before the plan's int arithmetic sees them) */
    REQUIRE(c->num_loops >= 0 && c->num_loops <= 1024, "num_loops = %lld: expected in [0, 1024] (0 = no depth recurrence)",
            (long long)c->num_loops);
    REQUIRE(c->loop_start >= 0 && c->loop_end >= 0 && c->loop_start < c->num_layers && c->loop_end < c->num_layers,
            "loop_start = %lld, loop_end = %lld: expected block indices in [0, num_layers = %lld)",
            (long long)c->loop_start, (long long)c->loop_end, (long long)c->num_layers);
    REQUIRE(c->parallel_start_layer >= 0 && c->parallel_start_layer < c->num_layers,
            "parallel_start_layer = %lld: expected 0 (off) or a block index below num_layers = %lld",
            (long long)c->parallel_start_layer, (long long)c->num_layers);
    {
        const BlockPlanSettings plan = config_block_plan_settings(c);
        if (block_plan_check(&plan) != 0) return -1;
    }
    REQUIRE(c->enable_looping_at >= 0 && c->enable_looping_at <= 1,
            "enable_looping_at = %.15g: expected in [0, 1] (the training progress at which depth recurrence "
            "switches on)", c->enable_looping_at);
    REQUIRE(!strcmp(c->parallel_final_lane, "mean") || !strcmp(c->parallel_final_lane, "attn") ||
                !strcmp(c->parallel_final_lane, "mlp"),
            "parallel_final_lane = '%s': expected mean, attn or mlp", c->parallel_final_lane);
    REQUIRE(c->mtp_loss_weight >= 0, "mtp_loss_weight = %g: expected >= 0 (0 = the heads get no gradient)",
            c->mtp_loss_weight);
    REQUIRE(c->rope_base > 0, "rope_base = %g: expected > 0", c->rope_base);
    REQUIRE(c->logit_softcap > 0, "logit_softcap = %g: expected > 0", c->logit_softcap);
    REQUIRE(c->tied_embed_init_std >= 0, "tied_embed_init_std = %g: expected >= 0", c->tied_embed_init_std);

    REQUIRE(c->grad_accum_slots >= 1 && c->grad_accum_slots <= 16777216,
            "grad_accum_slots = %lld: expected in [1, 2^24]", (long long)c->grad_accum_slots);
    REQUIRE(world_size >= 1 && c->grad_accum_slots % world_size == 0,
            "grad_accum_slots = %lld is not divisible by the world size %d (accumulation steps = "
            "grad_accum_slots / world_size must be a whole number)",
            (long long)c->grad_accum_slots, world_size);
    REQUIRE(c->train_seq_len >= 1 && c->train_seq_len <= 16777216, "train_seq_len = %lld: expected in [1, 2^24]",
            (long long)c->train_seq_len);
    REQUIRE(c->train_batch_tokens >= 1 && c->train_batch_tokens <= (1LL << 44),
            "train_batch_tokens = %lld: expected in [1, 2^44]", (long long)c->train_batch_tokens);
    REQUIRE(c->train_batch_tokens % c->grad_accum_slots == 0,
            "train_batch_tokens = %lld is not divisible by grad_accum_slots = %lld",
            (long long)c->train_batch_tokens, (long long)c->grad_accum_slots);
    int64_t local = c->train_batch_tokens / c->grad_accum_slots;
    REQUIRE(local % c->train_seq_len == 0,
            "train_seq_len = %lld does not divide the tokens per micro-batch train_batch_tokens / "
            "grad_accum_slots = %lld / %lld = %lld",
            (long long)c->train_seq_len, (long long)c->train_batch_tokens, (long long)c->grad_accum_slots,
            (long long)local);
    REQUIRE(local <= 2147483647LL,
            "train_batch_tokens / grad_accum_slots = %lld tokens per micro-batch: expected below 2^31 (raise "
            "grad_accum_slots)",
            (long long)local);

    REQUIRE(c->iterations >= 0, "iterations = %lld: expected >= 0", (long long)c->iterations);
    REQUIRE(c->warmdown_iters >= 0, "warmdown_iters = %lld: expected >= 0", (long long)c->warmdown_iters);
    REQUIRE(c->warmup_steps >= 0, "warmup_steps = %lld: expected >= 0", (long long)c->warmup_steps);
    REQUIRE(c->max_wallclock_seconds >= 0, "max_wallclock_seconds = %g: expected >= 0 (0 = off)",
            c->max_wallclock_seconds);
    if (config_validate_schedule_optim(c) != 0) return -1; /* the 1.0611 record's keys: config_frontier.c */
    const struct { const char *name; double v; } lrs[] = {
        {"embed_lr", c->embed_lr}, {"head_lr", c->head_lr}, {"tied_embed_lr", c->tied_embed_lr},
        {"matrix_lr", c->matrix_lr}, {"scalar_lr", c->scalar_lr}, {"grad_clip_norm", c->grad_clip_norm},
    };
    for (size_t i = 0; i < sizeof lrs / sizeof lrs[0]; i++)
        REQUIRE(lrs[i].v >= 0, "%s = %g: expected >= 0", lrs[i].name, lrs[i].v);
    REQUIRE(c->muon_momentum >= 0 && c->muon_momentum < 1, "muon_momentum = %g: expected in [0, 1)", c->muon_momentum);
    REQUIRE(c->muon_momentum_warmup_start >= 0 && c->muon_momentum_warmup_start < 1,
            "muon_momentum_warmup_start = %g: expected in [0, 1)", c->muon_momentum_warmup_start);
    REQUIRE(c->muon_momentum_warmup_steps >= 0, "muon_momentum_warmup_steps = %lld: expected >= 0",
            (long long)c->muon_momentum_warmup_steps);
    REQUIRE(c->muon_backend_steps >= 1 && c->muon_backend_steps <= 100,
            "muon_backend_steps = %lld: expected in [1, 100]", (long long)c->muon_backend_steps);
    REQUIRE(c->beta1 >= 0 && c->beta1 < 1, "beta1 = %g: expected in [0, 1)", c->beta1);
    REQUIRE(c->beta2 >= 0 && c->beta2 < 1, "beta2 = %g: expected in [0, 1)", c->beta2);
    REQUIRE(c->adam_eps > 0, "adam_eps = %g: expected > 0", c->adam_eps);
    REQUIRE(c->muon_wd >= 0, "muon_wd = %g: expected >= 0 (0 = no weight decay)", c->muon_wd);
    REQUIRE(c->adam_wd >= 0, "adam_wd = %g: expected >= 0 (0 = no weight decay)", c->adam_wd);
    REQUIRE(c->ema_decay > 0 && c->ema_decay < 1, "ema_decay = %g: expected in (0, 1), e.g. train_gpt.py's 0.997",
            c->ema_decay);
    REQUIRE(c->swa_every >= 1, "swa_every = %lld: expected >= 1", (long long)c->swa_every);
    REQUIRE(c->qat_threshold >= 0, "qat_threshold = %g: expected >= 0 (late_qat starts when lr_scale falls below it)",
            c->qat_threshold);

    REQUIRE(c->train_files[0] != '\0', "train_files is not set: give a glob of HDF5 token files, "
                                       "e.g. train_files='data/train_*.h5' (see `ctrain data --help`)");
    REQUIRE(c->val_loss_every >= 0, "val_loss_every = %lld: expected >= 0", (long long)c->val_loss_every);
    REQUIRE(c->train_log_every >= 1, "train_log_every = %lld: expected >= 1", (long long)c->train_log_every);
    REQUIRE(c->val_batch_size >= 0 && c->val_batch_size <= (1LL << 44), "val_batch_size = %lld: expected in [0, 2^44]",
            (long long)c->val_batch_size);
    REQUIRE(c->eval_stride >= 0 && c->eval_stride < c->train_seq_len,
            "eval_stride = %lld: expected 0 (non-overlapping validation) or a stride with 0 < eval_stride < "
            "train_seq_len = %lld",
            (long long)c->eval_stride, (long long)c->train_seq_len);
    REQUIRE(c->max_doc_len >= 0 && c->max_doc_len <= c->train_seq_len,
            "max_doc_len = %lld: expected 0 (train_seq_len) or a segment length in [1, train_seq_len = %lld]",
            (long long)c->max_doc_len, (long long)c->train_seq_len);
    REQUIRE(!c->doc_packing || c->eval_stride == 0,
            "eval_stride = %lld with doc_packing = 1: sliding-window validation of packed rows is not implemented; "
            "expected eval_stride = 0 (packed validation scores whole rows)",
            (long long)c->eval_stride);
    REQUIRE(c->eval_seq_len >= 0 && c->eval_seq_len <= (1LL << 24),
            "eval_seq_len = %lld: expected 0 (train_seq_len) or a sequence length in [1, 2^24]",
            (long long)c->eval_seq_len);
    REQUIRE(c->eval_seq_len == 0 || c->eval_stride < c->eval_seq_len,
            "eval_stride = %lld: expected a stride below eval_seq_len = %lld too (the round trip's windows)",
            (long long)c->eval_stride, (long long)c->eval_seq_len);
    if (config_validate_ttt(c) != 0) return -1; /* test-time training's keys: config_ttt.c */
    if (c->val_files[0]) {
        int64_t val_local = c->val_batch_size / c->grad_accum_slots;
        REQUIRE(val_local >= c->train_seq_len,
                "val_batch_size = %lld gives %lld tokens per micro-batch (val_batch_size / grad_accum_slots), "
                "fewer than one sequence of train_seq_len = %lld",
                (long long)c->val_batch_size, (long long)val_local, (long long)c->train_seq_len);
    }
    const int gptq_format = !strcmp(c->golf_format, "gptq-brotli") || !strcmp(c->golf_format, "gptq-pergroup");
    REQUIRE(!strcmp(c->golf_format, "int8-zlib") || !strcmp(c->golf_format, "int6-zstd") || gptq_format,
            "golf_format = '%s': expected int8-zlib, int6-zstd, gptq-brotli or gptq-pergroup", c->golf_format);
#ifndef CT_HAVE_BROTLI
    REQUIRE(!c->golf_artifact || !gptq_format,
            "golf_format = %s with golf_artifact = 1: this ctrain was built without libbrotli; install it "
            "(Debian: apt-get install libbrotli-dev, or run scripts/install-deps.sh) and rebuild with make",
            c->golf_format);
#endif
    REQUIRE(c->gptq_calibration_batches >= 1 && c->gptq_calibration_batches <= 1000000,
            "gptq_calibration_batches = %lld: expected in [1, 10^6]", (long long)c->gptq_calibration_batches);
    REQUIRE(c->matrix_bits >= 2 && c->matrix_bits <= 8, "matrix_bits = %lld: expected in [2, 8]",
            (long long)c->matrix_bits);
    REQUIRE(c->embed_bits >= 2 && c->embed_bits <= 8, "embed_bits = %lld: expected in [2, 8]", (long long)c->embed_bits);
    REQUIRE(c->matrix_clip_sigmas > 0 && c->mlp_clip_sigmas > 0 && c->attn_clip_sigmas > 0 && c->embed_clip_sigmas > 0,
            "matrix_clip_sigmas = %g, mlp_clip_sigmas = %g, attn_clip_sigmas = %g, embed_clip_sigmas = %g: expected "
            "each > 0", c->matrix_clip_sigmas, c->mlp_clip_sigmas, c->attn_clip_sigmas, c->embed_clip_sigmas);
    REQUIRE(c->lqer_rank >= 1 && c->lqer_rank <= 4096, "lqer_rank = %lld: expected in [1, 4096]", (long long)c->lqer_rank);
    REQUIRE(c->lqer_top_k >= 0 && c->lqer_top_k <= 1000000, "lqer_top_k = %lld: expected in [0, 10^6] (0 = none)",
            (long long)c->lqer_top_k);
    REQUIRE(c->lqer_factor_bits >= 2 && c->lqer_factor_bits <= 8, "lqer_factor_bits = %lld: expected in [2, 8]",
            (long long)c->lqer_factor_bits);
    REQUIRE(c->lqer_asym_group >= 1 && c->lqer_asym_group <= 1048576, "lqer_asym_group = %lld: expected in [1, 2^20]",
            (long long)c->lqer_asym_group);
#ifndef CT_HAVE_ZSTD
    REQUIRE(!c->golf_artifact || strcmp(c->golf_format, "int6-zstd") != 0,
            "golf_format = int6-zstd with golf_artifact = 1: this ctrain was built without libzstd; install it "
            "(Debian: apt-get install libzstd-dev, or run scripts/install-deps.sh) and rebuild with make");
#endif
    REQUIRE(c->out_dir[0] != '\0', "out_dir is empty: expected a directory path");
    REQUIRE(c->checkpoint_every >= 0, "checkpoint_every = %lld: expected >= 0", (long long)c->checkpoint_every);
    REQUIRE(c->keep_checkpoints >= 1 && c->keep_checkpoints <= 1000000, "keep_checkpoints = %lld: expected in [1, 10^6]",
            (long long)c->keep_checkpoints);
    REQUIRE(!strcmp(c->checkpoint_async, "auto") || !strcmp(c->checkpoint_async, "on") ||
                !strcmp(c->checkpoint_async, "off"),
            "checkpoint_async = '%s': expected on, off or auto", c->checkpoint_async);
    REQUIRE(c->lock_wait >= 0, "lock_wait = %g: expected >= 0 seconds (0 = fail at once)", c->lock_wait);
    REQUIRE(c->checkpoint_wait >= 0, "checkpoint_wait = %g: expected >= 0 seconds (0 = no limit)", c->checkpoint_wait);
    REQUIRE(c->resume[0] != '\0', "resume is empty: expected auto, none or a checkpoint path");
    REQUIRE(!strcmp(c->resume_data, "same") || !strcmp(c->resume_data, "moved") || !strcmp(c->resume_data, "changed"),
            "resume_data = '%s': expected same, moved or changed", c->resume_data);
    REQUIRE(stop_signal_number(c->stop_signal) > 0,
            "stop_signal = '%s': expected USR1, USR2, TERM, INT, HUP, QUIT, XCPU or ALRM (with or without SIG)",
            c->stop_signal);
    REQUIRE(c->stop_before_job_end >= 0, "stop_before_job_end = %g: expected >= 0 seconds (0 = off)",
            c->stop_before_job_end);
    REQUIRE(!strcmp(c->device, "auto") || !strcmp(c->device, "cpu") || !strcmp(c->device, "cuda"),
            "device = '%s': expected auto, cpu or cuda", c->device);
    REQUIRE(!strcmp(c->residual_dtype, "fp32") || !strcmp(c->residual_dtype, "bf16"),
            "residual_dtype = '%s': expected fp32 or bf16", c->residual_dtype);
    REQUIRE(c->collective_timeout >= 0, "collective_timeout = %g: expected >= 0 seconds (0 = wait forever)",
            c->collective_timeout);
    REQUIRE(!strcmp(c->nccl, "auto") || !strcmp(c->nccl, "on") || !strcmp(c->nccl, "off"),
            "nccl = '%s': expected auto, on or off", c->nccl);
    REQUIRE(strcmp(c->nccl, "on") != 0 || strcmp(c->device, "cpu") != 0,
            "nccl = on needs device = cuda (CPU jobs sum over MPI)");
    REQUIRE(strcmp(c->nccl, "off") != 0 || strcmp(c->device, "cuda") != 0 || world_size == 1,
            "nccl = off with device = cuda and %d ranks: GPU ranks reduce over NCCL only (set nccl = auto)", world_size);
    REQUIRE(c->grad_bucket_mb > 0 && c->grad_bucket_mb <= 4096, "grad_bucket_mb = %g: expected in (0, 4096]",
            c->grad_bucket_mb);
    REQUIRE(c->threads >= 0 && c->threads <= 4096, "threads = %lld: expected in [0, 4096] (0 = all cores)",
            (long long)c->threads);
    return 0;
}

int config_uses_nccl(const Config *cfg, int world_size) {
    if (strcmp(cfg->device, "cuda") != 0) return 0;
    return !strcmp(cfg->nccl, "on") || (!strcmp(cfg->nccl, "auto") && world_size > 1);
}

/* ---- printing ---- */

/* Shortest %g form that parses back to the same double. */
static void format_double_short(double v, char *buf, size_t cap) {
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

const char *config_value_text(const Config *cfg, const ConfigKey *k, char *buf, size_t cap) {
    const void *p = cfield(cfg, k);
    switch (k->type) {
    case CT_KEY_INT:
    case CT_KEY_BOOL: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); return buf;
    case CT_KEY_FLOAT:
        format_double_short(*(const double *)p, buf, cap);
        return buf;
    case CT_KEY_STR: return *(const char *const *)p ? *(const char *const *)p : "";
    }
    return "";
}

int config_value_equal(const Config *a, const Config *b, const ConfigKey *k) {
    const void *pa = cfield(a, k), *pb = cfield(b, k);
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

/* Strings are quoted when they would not survive an unquoted round trip. */
static int needs_quotes(const char *s) {
    if (!*s) return 1;
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[strlen(s) - 1])) return 1;
    return strpbrk(s, "#\"'") != NULL;
}

int config_write(const Config *cfg, FILE *out) {
    fprintf(out, "# ctrain %s resolved configuration (loadable with --config)\n", CT_VERSION);
    for (int i = 0; i < ct_config_num_keys; i++) {
        const ConfigKey *k = &ct_config_keys[i];
        char buf[64];
        const char *v = config_value_text(cfg, k, buf, sizeof buf);
        if (k->type == CT_KEY_STR && needs_quotes(v)) {
            char q = strchr(v, '"') ? '\'' : '"';
            fprintf(out, "%s = %c%s%c\n", k->name, q, v, q);
        } else {
            fprintf(out, "%s = %s\n", k->name, v);
        }
    }
    return ferror(out) ? ct_fail("error writing configuration") : 0;
}

int config_write_file(const Config *cfg, const char *path, const char *note) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return ct_fail("cannot write '%s': %s", tmp, strerror(errno));
    int rc = config_write(cfg, f);
    if (rc == 0 && note && note[0]) {
        /* after the keys: --config reads a comment anywhere; one line (a newline would end it) */
        fputs("# ", f);
        for (const char *c = note; *c; c++) fputc(*c == '\n' ? ' ' : *c, f);
        fputc('\n', f);
        if (ferror(f)) rc = ct_fail("error writing configuration");
    }
    if (fclose(f) != 0 && rc == 0) rc = ct_fail("cannot write '%s': %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = ct_fail("cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (rc != 0) remove(tmp);
    return rc;
}

void config_print_help(FILE *out) {
    for (size_t g = 0; g < sizeof group_order / sizeof group_order[0]; g++) {
        fprintf(out, "\n%s:\n", group_titles[g]);
        for (int i = 0; i < ct_config_num_keys; i++) {
            const ConfigKey *k = &ct_config_keys[i];
            if (strcmp(k->group, group_order[g]) != 0) continue;
            char def[80];
            snprintf(def, sizeof def, "%s", k->default_value[0] ? k->default_value : "\"\"");
            fprintf(out, "  %-27s %-6s %-9s %s%s\n", k->name, type_name(k->type), def, k->help,
                    k->resume == CT_RESUME_SHAPE ? " [fixed on resume]" : "");
        }
    }
}

void config_print_markdown(FILE *out) {
    for (size_t g = 0; g < sizeof group_order / sizeof group_order[0]; g++) {
        fprintf(out, "\n### %s\n\n| key | type | default | on resume | meaning |\n|---|---|---|---|---|\n",
                group_titles[g]);
        for (int i = 0; i < ct_config_num_keys; i++) {
            const ConfigKey *k = &ct_config_keys[i];
            if (strcmp(k->group, group_order[g]) != 0) continue;
            fprintf(out, "| `%s` | %s | `%s` | %s | ", k->name, type_name(k->type), k->default_value,
                    k->resume == CT_RESUME_SHAPE ? "must match" : "may change");
            /* a '|' in the help (alternatives: "cpu | cuda") would end the table cell */
            for (const char *c = k->help; *c; c++) {
                if (*c == '|') fputc('\\', out);
                fputc(*c, out);
            }
            fputs(" |\n", out);
        }
    }
}
