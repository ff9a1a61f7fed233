/* golf_env.h — train_gpt.py's own environment variables that are not configuration keys, for
 * `ctrain train` (docs/configuration.md, "train_gpt.py's environment"):
 *   DATA_PATH       a folder of parameter-golf shards (fineweb_train_*.bin, fineweb_val_*.bin):
 *                   imported once into an HDF5 copy beside them (DATA_PATH/ctrain-h5/<copy>/,
 *                   or $CTRAIN_DATA_CACHE/<copy>/; golf_import.h), which then gives train_files
 *                   and val_files; with it, max_wallclock_seconds defaults to train_gpt.py's
 *                   600, and without RUN_ID or out_dir each run gets a folder of its own
 *                   (runs/<UTC time>-<random>, or runs/<Slurm job id> under Slurm);
 *   TOKENIZER_PATH  the SentencePiece model stored in that copy (bits per byte, decoding);
 *                   default train_gpt.py's ./data/tokenizers/fineweb_1024_bpe.model when present;
 *   RUN_ID          out_dir = runs/RUN_ID (train_gpt.py names its log after it).
 * They act at the environment's level: a key set on the command line (or OUT_DIR for RUN_ID)
 * wins over them, and they win over the config file. */
#ifndef CT_GOLF_ENV_H
#define CT_GOLF_ENV_H

#include "config.h"

/* Apply RUN_ID and DATA_PATH's defaults to cfg (after the file, environment and command line
 * have been applied); no file is touched. Returns 0, or -1 with a message naming the variable. */
int golf_env_apply(Config *cfg);

/* With DATA_PATH: say the run's folder when golf_env_apply chose it; when cfg's data comes from
 * DATA_PATH, install the stop handlers (cfg->stop_signal) and make (or reuse) the HDF5 copy of
 * its shards, held until the process ends, and point train_files / val_files at it. Several
 * processes (the ranks of a job) may call it at once: one imports, the others wait for it and
 * reuse its copy. Returns 0, or -1 with a message; stop_requested() then tells a stop (exit 75:
 * the partial import was removed) from a failure. */
int golf_env_prepare_data(Config *cfg);

#endif
