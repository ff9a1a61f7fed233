/* ckpt_cmd.c — `ctrain ckpt`: the command line of the checkpoint tools.
 *   info FILE         what a checkpoint holds: position, configuration summary, tensor table
 *   verify FILE...    full verification (checksums, completeness, shapes); exit 1 if invalid
 *   diff A B          per-tensor differences
 *   export FILE       the weights as safetensors
 *   golf FILE         the parameter-golf artifact (int8 + zlib or int6 + zstd) and its round-trip validation
 * The work is checkpoint/'s (checkpoint.h); this file parses arguments and prints.
 * Exit codes: 0 success, 1 invalid file or runtime error, 2 usage error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "common.h"
#include "config.h"
#include "golf_hessians.h"
#include "infer.h"
#include "stop.h"

static const char CKPT_USAGE[] =
    "usage: ctrain ckpt <command> [options]\n"
    "\n"
    "Inspect and check checkpoints (format: docs/checkpoint-format.md).\n"
    "\n"
    "commands:\n"
    "  info FILE              step, tokens, configuration summary and the table of tensors\n"
    "  verify FILE...         check checksums, completeness and shapes; exit 1 if invalid\n"
    "  diff A B [--exact]     per-tensor max abs / max rel differences of two checkpoints\n"
    "  export FILE --out F    the weights as safetensors, train_gpt.py's names and shapes\n"
    "  golf FILE              the parameter-golf artifact (int8 + zlib, int6 + zstd, GPTQ + brotli or\n"
    "                         GPTQ + per-group lrzip),\n"
    "                         its size and round-trip val_bpb\n"
    "  hessians FILE          GPTQ's calibration: the Hessians file the gptq-* artifacts read\n"
    "\n"
    "FILE may also be a run directory (out_dir), its checkpoints/ directory or a `latest` file:\n"
    "the checkpoint `latest` names (or the newest step_*.h5) is used.\n"
    "\n"
    "Run `ctrain ckpt <command> --help` for the options of a command.\n";

static const char INFO_USAGE[] =
    "usage: ctrain ckpt info FILE\n"
    "\n"
    "Print what a checkpoint holds: step, training tokens, world size, device, when and by which\n"
    "ctrain it was written, the model shape and batch geometry of its /config, the loader cursor,\n"
    "the weight averages and QAT switch it holds, the /metrics scalars, and a table of every\n"
    "tensor under /model, /optimizer, /ema and /swa with its shape and size. Reads only metadata:\n"
    "use `ctrain ckpt verify` to check the data.\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n";

static const char VERIFY_USAGE[] =
    "usage: ctrain ckpt verify FILE...\n"
    "\n"
    "Fully verify each checkpoint without needing a configuration: the format attributes, that\n"
    "every tensor of the model its own /config describes is present with the right shape (and\n"
    "nothing else is), the loader cursor against the recorded data files, the Fletcher32 checksum\n"
    "of every chunk of every dataset, and the file's content checksum (content_crc32).\n"
    "Prints 'FILE: valid ...' per good file; the reason for each bad one goes to stderr.\n"
    "Exit status 0 if every file is valid, 1 otherwise.\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n";

static const char DIFF_USAGE[] =
    "usage: ctrain ckpt diff A B [--exact] [--model-only]\n"
    "\n"
    "Compare two checkpoints: for every tensor under /model, /optimizer, /ema and /swa that\n"
    "differs, its max absolute and max relative difference (|a-b| / max(|a|,|b|)), its relative L2\n"
    "distance (||a-b|| / max(||a||,||b||)) and how many elements differ; tensors present in only\n"
    "one file; the training position (step, train_tokens, adam_step, loader cursor, SWA count,\n"
    "QAT switch); and, for information, differing configuration keys, metrics, world size and\n"
    "device. A summary line gives the model weights' distance as a whole (||A-B|| / ||A|| over\n"
    "every /model value) and the tensor farthest apart. Ends with 'identical: yes' when every\n"
    "tensor is bitwise equal and the training position is the same (what an exact resume must\n"
    "give), else 'identical: no'.\n"
    "Exit status 0 when both files could be read, whatever they hold; 1 on errors.\n"
    "\n"
    "options:\n"
    "  --exact       exit 1 unless identical (for scripts and tests)\n"
    "  --model-only  compare the weights (/model) only: identical when they are bitwise equal,\n"
    "                whatever the optimizer state and position (two runs' models)\n"
    "  -h, --help    show this help\n";

static const char EXPORT_USAGE[] =
    "usage: ctrain ckpt export FILE --out OUT.safetensors [--dtype fp32|bf16] [--live]\n"
    "\n"
    "Write the weights of a checkpoint as a safetensors file with train_gpt.py's parameter names\n"
    "and shapes, so that\n"
    "  model.load_state_dict(safetensors.torch.load_file(OUT), strict=True)\n"
    "works on train_gpt.py's GPT of the same configuration. The checkpoint is verified first.\n"
    "The weights are those its run ends with, as train_gpt.py exports them: the EMA weights\n"
    "(/ema) of a run with ema_enabled, the SWA average (/swa) of one with swa_enabled once it\n"
    "holds two snapshots, else the live weights (/model). The optimizer state is not exported.\n"
    "\n"
    "options:\n"
    "  --out FILE       the safetensors file to write (replaced atomically)\n"
    "  --dtype TYPE     fp32 (default: the master weights exactly) or bf16 (round to nearest even)\n"
    "  --live           the live training weights (/model) even when the checkpoint has averaged ones\n"
    "  -h, --help       show this help\n";

/* A checkpoint argument may also be a run directory, a checkpoints directory or a `latest`
 * file (checkpoint_resolve); prints the error and returns NULL when it names none. */
static const char *resolve_arg(const char *arg, char *buf, size_t cap) {
    if (checkpoint_resolve(arg, buf, cap) == 0) return buf;
    ct_print_error();
    return NULL;
}

/* name in the run directory of checkpoint file ckpt: the folder above checkpoints/, or the
 * file's own folder when it lies elsewhere (so two runs never share the default file). */
static const char *run_dir_file(const char *ckpt, const char *name, char *buf, size_t cap) {
    char dir[4400];
    snprintf(dir, sizeof dir, "%s", ckpt);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        snprintf(buf, cap, "%s", name);
        return buf;
    }
    *slash = '\0';
    const char *base = strrchr(dir, '/');
    if (!strcmp(base ? base + 1 : dir, "checkpoints")) {
        if (base) dir[base - dir] = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(buf, cap, "%s/%s", dir[0] ? dir : "/", name);
    return buf;
}

static const char GOLF_USAGE[] =
    "usage: ctrain ckpt golf FILE [KEY=VALUE...] [--format int8-zlib|int6-zstd|gptq-brotli|gptq-pergroup]\n"
    "                        [--out ARTIFACT] [--hessians FILE] [--code-bytes N|FILE] [--allow-oversize]\n"
    "                        [--val-files GLOB] [--device cpu|cuda] [--eval-stride N] [--eval-seq-len N]\n"
    "                        [--no-eval] [--dequantized OUT.safetensors] [--live]\n"
    "\n"
    "What train_gpt.py does at the end of a run: quantize the checkpoint's weights, compress them, write\n"
    "the artifact and report its size; then read the artifact back, dequantize it and evaluate val_loss\n"
    "and val_bpb with those weights; with ttt_enabled=1 (the checkpoint's, or given as KEY=VALUE with the\n"
    "other test-time-training keys) score them again with test-time training, as the 1.0611 record ends\n"
    "(`ctrain eval --help`). The formats (docs/checkpoint-format.md, \"The parameter-golf artifact\"):\n"
    "  int8-zlib   the baseline's: int8 with per-row scales for matrices, small and control tensors kept\n"
    "              as floats, zlib level 9; a zlib-compressed safetensors file\n"
    "  int6-zstd   the 1.1248 record's: int6 per row for the attention and MLP matrices, int8 for the\n"
    "              embeddings and the rest, small tensors kept as float16, zstd level 22; a\n"
    "              zstd-compressed safetensors file (scripts/stz_to_ptz.py makes the record's .ptz)\n"
    "  gptq-brotli the 1.0611 record's: GPTQ (int6 matrices, embed_bits for the embedding) with the\n"
    "              Hessians of the weights' inputs, LQER on the worst lqer_top_k matrices, int8 gate\n"
    "              rows with gated_attn_quant_gate, float16 for the rest, brotli quality 11; the\n"
    "              checkpoint's GPTQ keys (docs/configuration.md, \"GPTQ artifact\")\n"
    "  gptq-pergroup the same quantization in the record's per-group layout (COMPRESSOR=pergroup): the\n"
    "              GPTQ matrices grouped by role, the rows of tok_emb, c_q and mlp.fc in L1 nearest-\n"
    "              neighbour order, each group compressed by lrzip's ZPAQ (Debian's lrzip, run as a\n"
    "              subprocess), the rest brotli; final_model.gptq.pgrp\n"
    "\n"
    "options:\n"
    "  --format NAME     int8-zlib, int6-zstd, gptq-brotli or gptq-pergroup (default: the checkpoint's\n"
    "                    golf_format, int8-zlib unless the run set it)\n"
    "  --hessians FILE   gptq-*: the Hessians file (default: final_model.hessians.h5 in the run's\n"
    "                    directory, as `ctrain ckpt hessians` writes it, which must then be of this\n"
    "                    checkpoint's step)\n"
    "  --out FILE        the artifact to write (default: final_model.int8.stz,\n"
    "                    final_model.int6.safetensors.zst, final_model.gptq.safetensors.br or\n"
    "                    final_model.gptq.pgrp in the run's\n"
    "                    directory, beside checkpoints/, as a run with golf_artifact=1 writes it; replaced\n"
    "                    atomically)\n"
    "  --code-bytes N|FILE  the submission's code size, in bytes or as a file's (its train_gpt.py):\n"
    "                    printed with the total against the 16,000,000-byte cap, as train_gpt.py does\n"
    "                    (default: ctrain's own, its sources as a brotli-compressed tar, measured by\n"
    "                    the build; docs/model.md, \"The code's size\")\n"
    "  --allow-oversize  write the artifact even when it and the code exceed 16,000,000 bytes\n"
    "                    (without it that is an error and nothing is written)\n"
    "  --val-files GLOB  validation data (default: the checkpoint's val_files)\n"
    "  --device NAME     cpu (default) or cuda: where to evaluate\n"
    "  --eval-stride N   after the non-overlapping evaluation, the sliding-window one with this stride, as\n"
    "                    train_gpt.py's EVAL_STRIDE (default: the checkpoint's eval_stride; 0 = none)\n"
    "  --eval-seq-len N  evaluate on sequences (and windows) of N tokens, as train_gpt.py's EVAL_SEQ_LEN;\n"
    "                    above rope_train_seq_len the RoPE base is NTK-scaled (default: the checkpoint's\n"
    "                    eval_seq_len; 0 = its train_seq_len)\n"
    "  --no-eval         write the artifact and report its size only\n"
    "  --dequantized FILE  also write the weights read back from the artifact (what the round trip\n"
    "                    evaluates) as a float32 safetensors file with train_gpt.py's names\n"
    "  --live            a checkpoint with EMA (or SWA) weights: quantize the live training weights\n"
    "                    (/model) instead of the averaged ones its run ends with (the default, as\n"
    "                    train_gpt.py's artifact and a run's golf_artifact)\n"
    "  KEY=VALUE         a GPTQ artifact key instead of the checkpoint's (docs/configuration.md, \"GPTQ\n"
    "                    artifact\": matrix_bits, mlp_clip_sigmas, lqer_top_k, ...)\n"
    "  -h, --help        show this help\n";

/* --code-bytes: a byte count, or a file (the submission's train_gpt.py) whose size counts. */
static int code_size(const char *arg, int64_t *bytes) {
    struct stat st;
    if (ct_parse_int64(arg, bytes) == 0) {
        if (*bytes >= 0) return 0;
        return cli_usage_error("ckpt", "golf", "--code-bytes %s: expected a byte count >= 0 or a file", arg);
    }
    if (stat(arg, &st) != 0)
        return cli_usage_error("ckpt", "golf", "--code-bytes '%s' is neither a byte count nor a readable file (%s)",
                               arg, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return cli_usage_error("ckpt", "golf", "--code-bytes '%s' is not a regular file", arg);
    *bytes = (int64_t)st.st_size;
    return 0;
}

/* `ckpt golf` and `ckpt hessians`: name the checkpoint and take the weights its run ends with
 * (the EMA or SWA average, saying which), or with --live its live ones. */
static void use_weights(const char *ckpt, TrainState *st, int live) {
    printf("%s\n", ckpt);
    char averaged[96];
    if (!live && train_state_use_average(st, averaged, sizeof averaged))
        printf("weights: %s (--live for the live weights)\n", averaged);
}

/* KEY=VALUE arguments after the checkpoint (pos[1..npos)) of `ckpt golf` and `ckpt hessians`:
 * only the GPTQ artifact's keys, since the weights are the checkpoint's, and for golf the
 * test-time-training keys of the evaluation that ends its round trip. Checked before the
 * checkpoint is read (cli_set_keys without a Config), set once it is. */
static int artifact_key(const ConfigKey *k) { return !strcmp(k->group, "artifact"); }
static int golf_key(const ConfigKey *k) { return artifact_key(k) || !strcmp(k->group, "ttt"); }
static const CliKeyRule golf_keys = {golf_key, "not a GPTQ artifact key",
                                     "only the GPTQ artifact's keys and the test-time-training keys may be given "
                                     "here (docs/configuration.md, \"GPTQ artifact\", \"Test-time training\")"};
static const CliKeyRule hessians_keys = {artifact_key, "not a GPTQ artifact key",
                                         "only the GPTQ artifact's keys may be given here (docs/configuration.md, "
                                         "\"GPTQ artifact\")"};

/* The number of positional arguments that are not KEY=VALUE; the first must be one. */
static int count_files(char **pos, int npos) {
    int n = 0;
    for (int i = 0; i < npos; i++) n += strchr(pos[i], '=') == NULL;
    return npos > 0 && strchr(pos[0], '=') ? -1 : n;
}

static int cmd_golf(int argc, char **argv) {
    char **pos;
    const char *out = NULL, *val_files = NULL, *device = "cpu", *code = NULL, *format = NULL, *dequantized = NULL,
               *eval_stride = NULL, *eval_seq_len = NULL, *hessians = NULL;
    int no_eval = 0, live = 0, allow_oversize = 0;
    const CliOption options[] = {{"--out", &out, NULL},
                                 {"--code-bytes", &code, NULL},
                                 {"--allow-oversize", NULL, &allow_oversize},
                                 {"--val-files", &val_files, NULL}, {"--device", &device, NULL},
                                 {"--no-eval", NULL, &no_eval},     {"--format", &format, NULL},
                                 {"--dequantized", &dequantized, NULL}, {"--eval-stride", &eval_stride, NULL},
                                 {"--eval-seq-len", &eval_seq_len, NULL}, {"--live", NULL, &live},
                                 {"--hessians", &hessians, NULL}};
    int npos, rc = cli_parse("ckpt", argc, argv, GOLF_USAGE, options, 12, &pos, &npos);
    const int nfiles = rc == 0 ? count_files(pos, npos) : 0;
    if (rc != 0 || nfiles != 1) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("ckpt", "golf", "give one checkpoint file first, then any KEY=VALUE");
    }
    if (cli_set_keys("ckpt", "golf", &golf_keys, pos + 1, npos - 1, NULL) != 0) {
        free(pos);
        return CT_EXIT_USAGE;
    }
    GolfOptions golf = {GOLF_INT8_ZLIB, !no_eval, -1, dequantized, NULL, !allow_oversize, 0};
    if (format && golf_format_from_name(format, &golf.format) != 0) {
        free(pos);
        return cli_usage_error("ckpt", "golf", "--format '%s': expected " GOLF_FORMAT_NAMES, format);
    }
    if (code && code_size(code, &golf.code_bytes) != 0) {
        free(pos);
        return CT_EXIT_USAGE;
    }
    char path[4400];
    const char *ckpt = resolve_arg(pos[0], path, sizeof path);
    if (!ckpt) {
        free(pos);
        return CT_EXIT_FAILURE;
    }
    Config cfg;
    TrainState st;
    rc = checkpoint_read_weights(ckpt, &cfg, &st) == 0 ? 0 : CT_EXIT_FAILURE;
    if (rc != 0) ct_print_error();
    if (rc == 0 && cli_set_keys("ckpt", "golf", &golf_keys, pos + 1, npos - 1, &cfg) != 0) rc = CT_EXIT_USAGE;
    /* without --format, the format the run chose for its own artifact (config_validate below
     * names a bad one) */
    if (rc == 0 && !format && golf_format_from_name(cfg.golf_format, &golf.format) != 0) golf.format = GOLF_INT8_ZLIB;
    char default_out[4500], default_hessians[4500];
    if (!out) out = run_dir_file(ckpt, golf_default_file(golf.format), default_out, sizeof default_out);
    const int default_hessians_used = !hessians && golf_format_is_gptq(golf.format);
    if (default_hessians_used) hessians = run_dir_file(ckpt, GOLF_HESSIANS_FILE, default_hessians, sizeof default_hessians);
    if (hessians && !golf_format_is_gptq(golf.format) && rc == 0) {
        config_free(&cfg);
        train_state_free(&st);
        free(pos);
        return cli_usage_error("ckpt", "golf", "--hessians is for --format gptq-brotli or gptq-pergroup (the format is %s)",
                               golf_format_label(golf.format));
    }
    if (rc == 0 &&
        ((val_files && config_set(&cfg, "val_files", val_files, CT_SOURCE_COMMAND_LINE, "--val-files") != 0) ||
         (eval_stride && config_set(&cfg, "eval_stride", eval_stride, CT_SOURCE_COMMAND_LINE, "--eval-stride") != 0) ||
         (eval_seq_len &&
          config_set(&cfg, "eval_seq_len", eval_seq_len, CT_SOURCE_COMMAND_LINE, "--eval-seq-len") != 0) ||
         config_set(&cfg, "device", device, CT_SOURCE_COMMAND_LINE, "--device") != 0 || config_validate(&cfg, 1) != 0)) {
        ct_print_error();
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0) {
        /* the artifact (and the dequantized weights) never over a file the command reads */
        CtPathList outputs = {0}, inputs = {0};
        ct_path_list_add(&outputs, "--out", "the artifact's path", out);
        if (dequantized) ct_path_list_add(&outputs, "--dequantized", "the dequantized weights' path", dequantized);
        ct_path_list_add(&inputs, "the checkpoint", "the weights quantized", ckpt);
        if (hessians) ct_path_list_add(&inputs, "--hessians", "the GPTQ Hessians", hessians);
        ct_path_list_add_glob(&inputs, val_files ? "--val-files" : "val_files",
                              val_files ? "the validation data of the round trip" : "the checkpoint's validation data",
                              cfg.val_files);
        ct_path_list_add_glob(&inputs, "train_files", "the checkpoint's training data", cfg.train_files);
        int64_t code_count;
        if (code && ct_parse_int64(code, &code_count) != 0) /* a file, not a byte count */
            ct_path_list_add(&inputs, "--code-bytes", "the submission's code", code);
        rc = cli_check_outputs("ckpt", "golf", &outputs, &inputs);
        ct_path_list_free(&outputs);
        ct_path_list_free(&inputs);
    }
    /* SIGTERM/SIGINT/SIGUSR1 end the command between its parts or at an evaluation batch, exit
     * 75 (the artifact is published whole or not at all) */
    if (rc == 0 && cli_catch_stops() != 0) {
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    GolfHessians h = {0};
    if (rc == 0 && hessians) {
        if (golf_hessians_read(&st.spec, hessians, &h) != 0) {
            ct_print_error();
            rc = CT_EXIT_FAILURE;
        } else if (h.step != st.adam_step && default_hessians_used) {
            /* another checkpoint's: GPTQ would still run, but not with what these weights see */
            fprintf(stderr, "ctrain: error: '%s' holds the Hessians of the weights after step %lld, the checkpoint's "
                            "are after step %lld; collect them again (ctrain ckpt hessians %s) or name a file with "
                            "--hessians\n", hessians, (long long)h.step, (long long)st.adam_step, ckpt);
            rc = CT_EXIT_FAILURE;
        } else {
            golf.hessians = (const float *const *)h.h;
            printf("hessians: %s (%lld calibration batches, %lld tokens, step %lld%s)\n", hessians,
                   (long long)h.batches, (long long)h.tokens, (long long)h.step,
                   h.step != st.adam_step ? ", not the checkpoint's" : "");
        }
    }
    if (rc == 0) {
        use_weights(ckpt, &st, live);
        if (golf_write_and_evaluate(&cfg, &st, out, &golf) != 0) {
            ct_print_error();
            rc = stop_requested() ? CT_EXIT_REQUEUE : CT_EXIT_FAILURE;
        }
    }
    golf_hessians_free(&h);
    free(pos);
    config_free(&cfg);
    train_state_free(&st);
    return rc;
}

static int cmd_export(int argc, char **argv) {
    char **pos;
    const char *out = NULL, *dtype = "fp32";
    int live = 0;
    const CliOption options[] = {{"--out", &out, NULL}, {"--dtype", &dtype, NULL}, {"--live", NULL, &live}};
    int npos, rc = cli_parse("ckpt", argc, argv, EXPORT_USAGE, options, 3, &pos, &npos);
    if (rc != 0 || npos != 1 || !out || (strcmp(dtype, "fp32") && strcmp(dtype, "bf16"))) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        if (rc) return rc;
        if (npos != 1) return cli_usage_error("ckpt", "export", "give one checkpoint file (got %d)", npos);
        if (!out) return cli_usage_error("ckpt", "export", "--out is required (the .safetensors file to write)");
        return cli_usage_error("ckpt", "export", "--dtype '%s': expected fp32 or bf16", dtype);
    }
    char path[4400];
    const char *ckpt = resolve_arg(pos[0], path, sizeof path);
    free(pos);
    if (!ckpt) return CT_EXIT_FAILURE;
    /* the export never over the checkpoint or the data files it names (its run's data) */
    CtPathList outputs = {0}, inputs = {0};
    char *train_files = NULL, *val_files = NULL;
    ct_path_list_add(&outputs, "--out", "the export's path", out);
    ct_path_list_add(&inputs, "the checkpoint", "the weights exported", ckpt);
    if (checkpoint_data_globs(ckpt, &train_files, &val_files) == 0) {
        ct_path_list_add_glob(&inputs, "train_files", "the checkpoint's training data", train_files);
        ct_path_list_add_glob(&inputs, "val_files", "the checkpoint's validation data", val_files);
    } /* else: the export's verification names what is wrong with the file */
    rc = cli_check_outputs("ckpt", "export", &outputs, &inputs);
    free(train_files);
    free(val_files);
    ct_path_list_free(&outputs);
    ct_path_list_free(&inputs);
    if (rc != 0) return rc;
    char weights[128];
    rc = checkpoint_export_safetensors(ckpt, out, !strcmp(dtype, "bf16"), live, weights, sizeof weights);
    if (rc == 0) printf("%s -> %s (%s%s%s)\n", ckpt, out, dtype, weights[0] ? ", " : "", weights);
    else ct_print_error();
    return rc == 0 ? CT_EXIT_OK : CT_EXIT_FAILURE;
}

static int cmd_info(int argc, char **argv) {
    char **pos;
    int npos, rc = cli_parse("ckpt", argc, argv, INFO_USAGE, NULL, 0, &pos, &npos);
    if (rc != 0 || npos != 1) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        if (rc) return rc;
        if (npos == 0) return cli_usage_error("ckpt", "info", "no checkpoint file given");
        return cli_usage_error("ckpt", "info", "give one checkpoint file (got %d arguments)", npos);
    }
    char path[4400];
    const char *ckpt = resolve_arg(pos[0], path, sizeof path);
    rc = ckpt ? checkpoint_print_info(ckpt) : -1;
    free(pos);
    if (rc != 0) {
        if (ckpt) ct_print_error();
        return CT_EXIT_FAILURE;
    }
    return CT_EXIT_OK;
}

/* ---- verify ---- */

static int cmd_verify(int argc, char **argv) {
    char **pos;
    int npos, rc = cli_parse("ckpt", argc, argv, VERIFY_USAGE, NULL, 0, &pos, &npos);
    if (rc != 0 || npos == 0) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("ckpt", "verify", "no checkpoint file given");
    }
    int bad = 0;
    for (int i = 0; i < npos; i++) {
        CheckpointSummary sum;
        char path[4400];
        const char *ckpt = checkpoint_resolve(pos[i], path, sizeof path) == 0 ? path : NULL;
        if (ckpt && checkpoint_verify(ckpt, &sum) == 0) {
            printf("%s: valid (step %lld, %d tensors, content_crc32 0x%08x)\n", ckpt, (long long)sum.step,
                   sum.num_tensors, sum.content_crc32);
        } else {
            printf("%s: INVALID\n", ckpt ? ckpt : pos[i]);
            fflush(stdout);
            ct_print_error();
            bad++;
        }
        fflush(stdout);
    }
    free(pos);
    return bad ? CT_EXIT_FAILURE : CT_EXIT_OK;
}

/* ---- diff ---- */

static int cmd_diff(int argc, char **argv) {
    char **pos;
    int exact = 0, model_only = 0;
    const CliOption options[] = {{"--exact", NULL, &exact}, {"--model-only", NULL, &model_only}};
    int npos, rc = cli_parse("ckpt", argc, argv, DIFF_USAGE, options, 2, &pos, &npos);
    if (rc != 0 || npos != 2) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : cli_usage_error("ckpt", "diff", "give two checkpoint files (got %d)", npos);
    }
    char a[4400], b[4400];
    const char *pa = resolve_arg(pos[0], a, sizeof a), *pb = pa ? resolve_arg(pos[1], b, sizeof b) : NULL;
    rc = pb ? checkpoint_diff(pa, pb, exact, model_only) : CT_EXIT_FAILURE;
    free(pos);
    return rc;
}

/* ---- hessians ---- */

static const char HESSIANS_USAGE[] =
    "usage: ctrain ckpt hessians FILE [gptq_calibration_batches=N] [--out HESSIANS.h5] [--device cpu|cuda]\n"
    "                            [--live]\n"
    "\n"
    "GPTQ's calibration for the gptq-brotli golf artifact: runs the checkpoint's weights (those its run\n"
    "ends with, as `ckpt golf`) over gptq_calibration_batches micro-batch slots at the start of its\n"
    "train_files and writes, for every matrix the artifact quantizes, the mean X^T X of its input:\n"
    "the Hessians file `ctrain ckpt golf FILE --format gptq-brotli` reads (docs/checkpoint-format.md,\n"
    "\"The Hessians file\"). Training data only, as the challenge requires.\n"
    "\n"
    "options:\n"
    "  gptq_calibration_batches=N  how many slots (default: the checkpoint's, 16 unless its run set it)\n"
    "  --out FILE        the Hessians file (default: final_model.hessians.h5 in the run's directory,\n"
    "                    beside checkpoints/, where `ckpt golf` looks; replaced atomically)\n"
    "  --device NAME     cpu (default) or cuda: where to run the forward\n"
    "  --live            the live training weights (/model) instead of the averaged ones\n"
    "  -h, --help        show this help\n";

static int cmd_hessians(int argc, char **argv) {
    char **pos;
    const char *out = NULL, *device = "cpu";
    int live = 0;
    const CliOption options[] = {{"--out", &out, NULL}, {"--device", &device, NULL}, {"--live", NULL, &live}};
    int npos, rc = cli_parse("ckpt", argc, argv, HESSIANS_USAGE, options, 3, &pos, &npos);
    const int nfiles = rc == 0 ? count_files(pos, npos) : 0;
    if (rc != 0 || nfiles != 1 || cli_set_keys("ckpt", "hessians", &hessians_keys, pos + 1, npos - 1, NULL) != 0) {
        free(pos);
        if (rc == CLI_HELP_SHOWN) return CT_EXIT_OK;
        return rc ? rc : nfiles != 1 ? cli_usage_error("ckpt", "hessians", "give one checkpoint file first, then any "
                                                       "KEY=VALUE") : CT_EXIT_USAGE;
    }
    char path[4400], default_out[4500];
    const char *ckpt = resolve_arg(pos[0], path, sizeof path);
    if (!ckpt) {
        free(pos);
        return CT_EXIT_FAILURE;
    }
    if (!out) out = run_dir_file(ckpt, GOLF_HESSIANS_FILE, default_out, sizeof default_out);
    Config cfg;
    TrainState st;
    rc = checkpoint_read_weights(ckpt, &cfg, &st) == 0 ? 0 : CT_EXIT_FAILURE;
    if (rc != 0) ct_print_error();
    if (rc == 0 && (cli_set_keys("ckpt", "hessians", &hessians_keys, pos + 1, npos - 1, &cfg) != 0 ||
                    config_set(&cfg, "device", device, CT_SOURCE_COMMAND_LINE, "--device") != 0 ||
                    config_validate(&cfg, 1) != 0)) {
        if (ct_error()[0]) ct_print_error();
        rc = CT_EXIT_USAGE;
    }
    if (rc == 0) { /* the Hessians never over the checkpoint or its data */
        CtPathList outputs = {0}, inputs = {0};
        ct_path_list_add(&outputs, "--out", "the Hessians file", out);
        ct_path_list_add(&inputs, "the checkpoint", "the weights calibrated", ckpt);
        ct_path_list_add_glob(&inputs, "train_files", "the checkpoint's training data", cfg.train_files);
        ct_path_list_add_glob(&inputs, "val_files", "the checkpoint's validation data", cfg.val_files);
        rc = cli_check_outputs("ckpt", "hessians", &outputs, &inputs);
        ct_path_list_free(&outputs);
        ct_path_list_free(&inputs);
    }
    if (rc == 0 && cli_catch_stops() != 0) {
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    if (rc == 0 && golf_hessians_check_writable(out) != 0) { /* before the calibration's minutes, not after */
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    GolfHessians h = {0};
    if (rc == 0) {
        use_weights(ckpt, &st, live);
        if (golf_collect_hessians(&cfg, &st, &h) != 0 || golf_hessians_write(&st.spec, &h, out) != 0) {
            ct_print_error();
            rc = stop_requested() ? CT_EXIT_REQUEUE : CT_EXIT_FAILURE;
        } else {
            printf("hessians -> %s\n", out);
        }
    }
    golf_hessians_free(&h);
    free(pos);
    config_free(&cfg);
    train_state_free(&st);
    return rc;
}

int ckpt_main(int argc, char **argv) {
    static const CliCommand commands[] = {
        {"info", cmd_info},     {"verify", cmd_verify}, {"diff", cmd_diff},
        {"export", cmd_export}, {"golf", cmd_golf},     {"hessians", cmd_hessians}};
    return cli_dispatch("ckpt", argc, argv, CKPT_USAGE, commands, 6);
}
