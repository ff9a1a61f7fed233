/* train_outputs.h — `ctrain train`'s own outputs never over the files it reads: out_dir's
 * config.txt, metrics.jsonl, .lock, final_model.* and checkpoints/ against the --config files,
 * the training and validation data and the tokenizer model (paths.h). */
#ifndef CT_TRAIN_OUTPUTS_H
#define CT_TRAIN_OUTPUTS_H

#include "config.h"

/* 0, or CT_EXIT_USAGE after printing an error that names the output and the input: an output
 * of the run that is one of its inputs (the same file, by identity), or an input lying in
 * out_dir's checkpoints/ folder, where the run writes, prunes and moves aside its checkpoints.
 * config_files: the --config files read, whole, before this call; out_dir's own config.txt among
 * them is allowed (the run's record, replaced atomically by the resolved configuration). Called
 * before anything is written, and by --print-config, so that slurm/submit refuses a colliding
 * configuration before the job queues. */
int train_check_outputs(const Config *cfg, const char *const *config_files, int num_config_files);

#endif
