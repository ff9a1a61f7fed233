/* sample_cmd.c — `ctrain sample CHECKPOINT [--prompt TEXT | --prompt-ids IDS] [--tokens N]
 * [--temperature T] [--top-k K] [--seed S] [--ids] [--device D]`: text from a trained model. Byte-level
 * models (the data's tokenizer is "bytes") read the prompt as bytes and print bytes; others
 * take and print token ids. The work is train_sample's (src/train/train_sample.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "train.h"

static const char SAMPLE_USAGE[] =
    "usage: ctrain sample CHECKPOINT [--prompt TEXT | --prompt-ids IDS] [--tokens N] [--temperature T]\n"
    "                     [--top-k K] [--seed S] [--ids] [--device auto|cpu|cuda]\n"
    "\n"
    "Generate text from a checkpoint's model (CHECKPOINT may be a run directory: its newest\n"
    "checkpoint). Each token is drawn from the model's next-token distribution at temperature T,\n"
    "among the K most likely tokens; the same seed gives the same text. Byte-level models (data\n"
    "made by `ctrain data from-text`) read the prompt as bytes and print text; other models take\n"
    "--prompt-ids and print token ids. Runs on the GPU when one is visible (--device auto), else\n"
    "the CPU; the two compute in different precision, so their samples differ.\n"
    "\n"
    "options:\n"
    "  --prompt TEXT        the start of the text (byte-level models; default: a newline)\n"
    "  --prompt-ids IDS     the start as comma-separated token ids (any model)\n"
    "  --tokens N           tokens to generate (default 200)\n"
    "  --temperature T      0 = always the most likely token; default 0.8\n"
    "  --top-k K            draw among the K most likely tokens; 0 = all (default 40)\n"
    "  --seed S             random seed (default 1337)\n"
    "  --ids                print token ids (prompt, then generated), one line\n"
    "  --device D           auto (default: cuda if a GPU is visible), cpu or cuda\n"
    "  -h, --help           show this help\n";

typedef struct {
    int as_ids;
} Printer;

static void print_token(void *ctx, uint32_t token) {
    const Printer *p = ctx;
    if (p->as_ids) printf(" %u", token);
    else putchar((int)token);
    fflush(stdout);
}

/* Whether the model reads bytes: its training data says tokenizer "bytes" (or, the data being
 * gone, a vocabulary of 256). */
static int byte_level(const Config *cfg) {
    TokenSet set;
    if (data_open_set(cfg->train_files, &set) == 0) {
        int bytes = !strcmp(set.files[0].tokenizer, "bytes");
        data_free_set(&set);
        return bytes;
    }
    return cfg->vocab_size == 256;
}

static int parse_int(const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi)
        return cli_usage_error("sample", NULL, "%s '%s': expected an integer in [%lld, %lld]", name, text,
                               (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

int sample_main(int argc, char **argv) {
    char **pos;
    const char *prompt = NULL, *prompt_ids = NULL, *tokens_s = "200", *temp_s = "0.8", *topk_s = "40",
               *seed_s = "1337", *device = "auto";
    int as_ids = 0;
    const CliOption options[] = {{"--prompt", &prompt, NULL},    {"--prompt-ids", &prompt_ids, NULL},
                                 {"--tokens", &tokens_s, NULL},  {"--temperature", &temp_s, NULL},
                                 {"--top-k", &topk_s, NULL},     {"--seed", &seed_s, NULL},
                                 {"--ids", NULL, &as_ids},       {"--device", &device, NULL}};
    int npos, rc = cli_parse("sample", argc, argv, SAMPLE_USAGE, options, 8, &pos, &npos);
    if (rc != 0 || npos != 1) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("sample", NULL, "give one checkpoint (got %d)", npos);
    }
    SampleOptions o;
    int64_t seed = 0;
    char *end;
    o.temperature = strtod(temp_s, &end);
    if (*end || end == temp_s || !(o.temperature >= 0 && o.temperature <= 100)) {
        free(pos);
        return cli_usage_error("sample", NULL, "--temperature '%s': expected a number in [0, 100]", temp_s);
    }
    if (parse_int("--tokens", tokens_s, 1, 1000000, &o.num_tokens) || parse_int("--top-k", topk_s, 0, 1 << 30, &o.top_k) ||
        parse_int("--seed", seed_s, 0, INT64_MAX, &seed) || (prompt && prompt_ids)) {
        free(pos);
        return prompt && prompt_ids ? cli_usage_error("sample", NULL, "give --prompt or --prompt-ids, not both")
                                    : CT_EXIT_USAGE;
    }
    o.seed = (uint64_t)seed;
    char path[4400];
    rc = checkpoint_resolve(pos[0], path, sizeof path);
    free(pos);
    if (rc != 0) {
        ct_print_error();
        return CT_EXIT_FAILURE;
    }
    Config cfg;
    TrainState st;
    Backend *b = NULL;
    uint32_t *ids = NULL;
    int64_t n = 0;
    rc = CT_EXIT_FAILURE;
    /* one sequence at a time: the backend needs room for a micro-batch of one */
    if (checkpoint_read_weights(path, &cfg, &st) != 0) goto done;
    char seq_len[32];
    snprintf(seq_len, sizeof seq_len, "%lld", (long long)cfg.train_seq_len);
    if (config_set(&cfg, "device", device, 2, "--device") != 0 ||
        config_set(&cfg, "train_batch_tokens", seq_len, 2, "sample") != 0 ||
        config_set(&cfg, "grad_accum_slots", "1", 2, "sample") != 0)
        goto done;
    if (config_validate(&cfg, 1) != 0) { /* names a bad --device */
        rc = CT_EXIT_USAGE;
        goto done;
    }
    char note[400];
    backend_resolve_device(&cfg, note, sizeof note);
    if (note[0]) fprintf(stderr, "%s\n", note);
    int bytes = byte_level(&cfg);
    if (prompt_ids) { /* comma-separated ids */
        ids = ct_calloc(strlen(prompt_ids) + 1, sizeof *ids, "prompt");
        for (const char *p = prompt_ids; *p;) {
            char *stop;
            errno = 0;
            unsigned long long v = strtoull(p, &stop, 10);
            if (stop == p || errno || v >= (unsigned long long)cfg.vocab_size || (*stop && *stop != ',')) {
                ct_fail("--prompt-ids '%s': expected comma-separated token ids below vocab_size %lld", prompt_ids,
                        (long long)cfg.vocab_size);
                rc = CT_EXIT_USAGE;
                goto done;
            }
            ids[n++] = (uint32_t)v;
            p = *stop ? stop + 1 : stop;
        }
    } else if (!bytes) {
        if (prompt) {
            ct_fail("this model's tokenizer is not byte-level ('%s'): give the prompt as --prompt-ids",
                    cfg.train_files);
            rc = CT_EXIT_USAGE;
            goto done;
        }
        ids = ct_calloc(1, sizeof *ids, "prompt"); /* token 0 */
        n = 1;
    } else {
        const char *text = prompt && *prompt ? prompt : "\n";
        n = (int64_t)strlen(text);
        ids = ct_calloc((size_t)n, sizeof *ids, "prompt");
        for (int64_t i = 0; i < n; i++) ids[i] = (unsigned char)text[i];
    }
    if (n == 0) {
        ct_fail("--prompt-ids is empty");
        rc = CT_EXIT_USAGE;
        goto done;
    }
    if (backend_create(&b, &cfg, &st) != 0) goto done;
    Printer printer = {as_ids || !bytes};
    for (int64_t i = 0; i < n; i++) {
        if (printer.as_ids) printf("%s%u", i ? " " : "", ids[i]);
        else putchar((int)ids[i]);
    }
    if (train_sample(b, ids, n, &o, print_token, &printer) != 0) {
        putchar('\n');
        goto done;
    }
    putchar('\n');
    rc = CT_EXIT_OK;
done:
    if (rc != CT_EXIT_OK) ct_print_error();
    if (b) b->destroy(b);
    free(ids);
    config_free(&cfg);
    train_state_free(&st);
    return rc;
}
