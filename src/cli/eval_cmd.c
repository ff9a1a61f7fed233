/* eval_cmd.c — `ctrain eval CHECKPOINT [--artifact FILE [--format F]] [--mode MODES] [--val-files
 * GLOB] [--device D] [--live] [--dump DIR [--dump-doc N]] [KEY=VALUE ...]`: a checkpoint's model
 * (or the golf artifact made from it) evaluated on validation data, plainly, with the sliding
 * window, document by document, or with score-first test-time training (issue 57). Runs alone or
 * as every rank of an srun / mpiexec launch. The work is src/infer's (eval.c, ttt_eval.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "dist.h"
#include "infer.h"
#include "stop.h"

static const char EVAL_USAGE[] =
    "usage: ctrain eval CHECKPOINT [--mode MODES] [--artifact FILE [--format F]] [--val-files GLOB]\n"
    "                   [--device auto|cpu|cuda] [--live] [--dump DIR [--dump-doc N]] [KEY=VALUE ...]\n"
    "\n"
    "Evaluate a checkpoint's model on validation data (CHECKPOINT may be a run directory: its\n"
    "newest checkpoint). MODES is a comma-separated list, run in this order:\n"
    "  plain    non-overlapping sequences (train_gpt.py's eval_val; a packing run's packed rows)\n"
    "  sliding  the sliding window of eval_stride (the record's eval_val_sliding; eval_stride > 0)\n"
    "  docs     every document alone, in the test-time-training evaluation's windows and batches,\n"
    "           the base model only\n"
    "  ttt      score-first test-time training (docs/running.md \"Test-time training\"): each\n"
    "           document's adapters learn from what it has scored, the base weights take the\n"
    "           phases' global steps; the ttt_* keys\n"
    "Default: plain, then sliding when eval_stride > 0, then ttt when ttt_enabled = 1.\n"
    "Each prints \"<mode> val_loss:... val_bpb:... tokens:N bytes:N eval_time:Nms\" and an _exact\n"
    "line. ttt changes the weights it evaluates (its global steps), so it runs last; the\n"
    "checkpoint is only read.\n"
    "\n"
    "options:\n"
    "  --mode MODES        the evaluations (above)\n"
    "  --artifact FILE     evaluate the weights of this golf artifact (`ctrain ckpt golf`'s\n"
    "                      output) instead of the checkpoint's; the checkpoint gives the model\n"
    "  --format F          the artifact's format (default: the checkpoint's golf_format)\n"
    "  --val-files GLOB    validation data (default: the checkpoint's val_files)\n"
    "  --device D          auto (cuda if a GPU is visible; the default), cpu or cuda\n"
    "  --live              a checkpoint with EMA (or SWA) weights: its live weights, not the\n"
    "                      averaged ones its run ends with (the default)\n"
    "  --dump DIR          ttt/docs: write what tests/parity/ttt_ref.py checks (docs.tsv,\n"
    "                      losses.f32, lora_init.safetensors, phase_K.safetensors, summary.json;\n"
    "                      with both modes, ttt's replace docs')\n"
    "  --dump-doc N        with --dump: also document N's adapters after its last step\n"
    "  KEY=VALUE           the test-time-training keys (ttt_*, phased_ttt_*, global_ttt_*),\n"
    "                      eval_seq_len, eval_stride, seed (the adapters' starting values) and\n"
    "                      threads\n"
    "  -h, --help          show this help\n";

enum { MODE_PLAIN = 1, MODE_SLIDING = 2, MODE_DOCS = 4, MODE_TTT = 8 };

static int parse_modes(const char *s, int *modes) {
    static const struct { const char *name; int bit; } names[] = {
        {"plain", MODE_PLAIN}, {"sliding", MODE_SLIDING}, {"docs", MODE_DOCS}, {"ttt", MODE_TTT}};
    *modes = 0;
    for (const char *p = s; *p;) {
        const size_t len = strcspn(p, ",");
        int found = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == len && !strncmp(p, names[i].name, len)) *modes |= names[i].bit, found = 1;
        if (!found)
            return cli_usage_error("eval", NULL, "--mode '%s': '%.*s' is not one of plain, sliding, docs, ttt", s,
                                   (int)len, p);
        p += len + (p[len] == ',');
    }
    return *modes ? 0 : cli_usage_error("eval", NULL, "--mode is empty: give plain, sliding, docs or ttt");
}

/* The keys KEY=VALUE may set: the test-time-training group and what evaluation reads. */
static int key_allowed(const ConfigKey *k) {
    return !strcmp(k->group, "ttt") || !strcmp(k->name, "eval_seq_len") || !strcmp(k->name, "eval_stride") ||
           !strcmp(k->name, "seed") || !strcmp(k->name, "threads");
}

static const CliKeyRule eval_keys = {key_allowed, "not an evaluation key",
                                      "only the test-time-training keys, eval_seq_len, eval_stride, seed and threads "
                                      "may be given here (docs/configuration.md)"};

static int run_modes(const Config *cfg, TrainState *st, const DistInfo *d, int modes, const char *dump,
                     int64_t dump_doc) {
    if ((modes & MODE_PLAIN) && print_weights_evaluation(cfg, st, d, "plain", 0) != 0) return -1;
    if (modes & MODE_SLIDING) {
        if (cfg->eval_stride <= 0)
            return ct_fail("--mode sliding needs eval_stride > 0 (the checkpoint's is %lld; give eval_stride=N)",
                           (long long)cfg->eval_stride);
        if (print_weights_evaluation(cfg, st, d, "sliding", cfg->eval_stride) != 0) return -1;
    }
    for (int adapt = 0; adapt <= 1; adapt++) {
        if (!(modes & (adapt ? MODE_TTT : MODE_DOCS))) continue;
        const TttOptions o = {adapt, adapt ? "ttt" : "docs", dump, dump_doc};
        TttResult r;
        if (ttt_evaluate(cfg, st, d, &o, &r) != 0) return -1;
    }
    return 0;
}

int eval_main(int argc, char **argv) {
    char **pos;
    const char *mode_s = NULL, *artifact = NULL, *format_s = NULL, *val_files = NULL, *device = NULL, *dump = NULL,
               *dump_doc_s = NULL;
    int live = 0;
    const CliOption options[] = {{"--mode", &mode_s, NULL},         {"--artifact", &artifact, NULL},
                                 {"--format", &format_s, NULL},     {"--val-files", &val_files, NULL},
                                 {"--device", &device, NULL},       {"--live", NULL, &live},
                                 {"--dump", &dump, NULL},           {"--dump-doc", &dump_doc_s, NULL}};
    int npos, rc = cli_parse("eval", argc, argv, EVAL_USAGE, options, 8, &pos, &npos);
    if (rc != 0 || npos < 1 || strchr(pos[0], '=')) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("eval", NULL, "give one checkpoint first, then any KEY=VALUE");
    }
    int modes = 0;
    int64_t dump_doc = -1;
    if (mode_s && parse_modes(mode_s, &modes) != 0) rc = CT_EXIT_USAGE;
    if (rc == 0 && dump_doc_s && (!dump || ct_parse_int64(dump_doc_s, &dump_doc) != 0 || dump_doc < 0))
        rc = cli_usage_error("eval", NULL, "--dump-doc '%s': expected a document index >= 0, with --dump", dump_doc_s);
    if (rc == 0 && format_s && !artifact) rc = cli_usage_error("eval", NULL, "--format is for --artifact FILE");
    char path[4400];
    if (rc == 0 && checkpoint_resolve(pos[0], path, sizeof path) != 0) {
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    Config cfg;
    TrainState st;
    int loaded = 0;
    if (rc == 0) {
        if (checkpoint_read_weights(path, &cfg, &st) != 0) {
            ct_print_error();
            rc = CT_EXIT_FAILURE;
        } else {
            loaded = 1;
        }
    }
    if (rc == 0) rc = cli_set_keys("eval", NULL, &eval_keys, pos + 1, npos - 1, &cfg);
    free(pos);
    if (rc == 0 && !mode_s)
        modes = MODE_PLAIN | (cfg.eval_stride > 0 ? MODE_SLIDING : 0) | (cfg.ttt_enabled ? MODE_TTT : 0);
    if (!device) device = "auto"; /* every mode runs on either backend */
    if (rc == 0 && ((val_files && config_set(&cfg, "val_files", val_files, CT_SOURCE_COMMAND_LINE, "--val-files")) ||
                    config_set(&cfg, "device", device, CT_SOURCE_COMMAND_LINE, "--device") != 0)) {
        ct_print_error();
        rc = CT_EXIT_USAGE;
    }
    /* docs and ttt run the test-time-training evaluation: its keys are checked as when a run
     * asks for it (against model_dim and the evaluation's length too) */
    if (rc == 0 && (modes & (MODE_DOCS | MODE_TTT)) &&
        config_set(&cfg, "ttt_enabled", "1", CT_SOURCE_COMMAND_LINE, "--mode") != 0) {
        ct_print_error();
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0 && config_validate(&cfg, 1) != 0) {
        ct_print_error();
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0 && dump) { /* the dump never over a file the evaluation reads, nor into checkpoints/ */
        CtPathList outputs = {0}, inputs = {0};
        ttt_dump_outputs(dump, &cfg, dump_doc, &outputs);
        ct_path_list_add(&inputs, "the checkpoint", "the model evaluated", path);
        if (artifact) ct_path_list_add(&inputs, "--artifact", "the weights evaluated", artifact);
        ct_path_list_add_glob(&inputs, val_files ? "--val-files" : "val_files", "the validation data", cfg.val_files);
        rc = cli_check_outputs("eval", NULL, &outputs, &inputs);
        ct_path_list_free(&outputs);
        ct_path_list_free(&inputs);
    }
    DistInfo d;
    int dist_up = 0;
    if (rc == 0 && stop_install(cfg.stop_signal) != 0) { /* a stop ends the evaluation at its next batch */
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    if (rc == 0) {
        char note[400];
        backend_resolve_device(&cfg, note, sizeof note);
        if (dist_init(&d, !strcmp(cfg.device, "cpu"), 120.0) != 0) {
            ct_print_error();
            rc = CT_EXIT_FAILURE;
        } else {
            dist_up = 1;
            if (note[0] && d.rank == 0) printf("%s\n", note);
        }
    }
    if (rc == 0) {
        char averaged[96];
        if (d.rank == 0) printf("%s\n", path);
        if (artifact) {
            GolfFormat format;
            const char *name = format_s ? format_s : cfg.golf_format;
            if (golf_format_from_name(name, &format) != 0)
                rc = cli_usage_error("eval", NULL, "--format '%s': expected " GOLF_FORMAT_NAMES, name);
            else if (golf_read(&st.spec, format, artifact, st.params) != 0)
                rc = CT_EXIT_FAILURE;
            else if (d.rank == 0)
                printf("weights: the %s artifact %s\n", golf_format_label(format), artifact);
        } else if (!live && train_state_use_average(&st, averaged, sizeof averaged) && d.rank == 0) {
            printf("weights: %s (--live for the live weights)\n", averaged);
        }
        if (rc == CT_EXIT_FAILURE) ct_print_error();
    }
    if (rc == 0 && run_modes(&cfg, &st, &d, modes, dump, dump_doc) != 0) {
        ct_print_error();
        rc = stop_abandoned() ? CT_EXIT_REQUEUE : CT_EXIT_FAILURE;
    }
    if (dist_up) dist_finalize(&d);
    if (loaded) {
        config_free(&cfg);
        train_state_free(&st);
    }
    return rc;
}
