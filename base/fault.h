/* fault.h — deterministic fault injection for the interruption tests: CTRAIN_FAULT names
 * points at which the process sends itself a real signal, so a test can stop or kill a run
 * mid-accumulation or in the middle of a checkpoint write, every time at the same place.
 *
 *   CTRAIN_FAULT="TERM@4.3"        SIGTERM while step 4 (1-based) runs micro-batch 3 (0-based)
 *   CTRAIN_FAULT="KILL@7.0"        SIGKILL at micro-batch 0 of step 7
 *   CTRAIN_FAULT="KILL@ckpt:10"    SIGKILL half-way through writing the step-10 checkpoint
 *   CTRAIN_FAULT="KILL@3.1%2"      only on rank 2 (multi-rank tests: one rank dies)
 *   CTRAIN_FAULT="TERM@import:70000"  SIGTERM once a shard import has written its 70,000th token
 *                                  (DATA_PATH's import in `ctrain train`; the file it is writing
 *                                  is then half made)
 *   CTRAIN_FAULT="STOP@ckpt:4"     SIGSTOP in the background writer of step 4 (a stuck writer;
 *                                  not sent to the training process, unlike the others)
 *   CTRAIN_FAULT="TERM@val:6"      SIGTERM as the validation of step 6 starts; the other stages
 *                                  of a run's end: TERM@ema_val (the EMA/SWA validation),
 *                                  TERM@artifact (the golf artifact's write), TERM@round_trip
 *                                  (its evaluation), TERM@ttt:N (as batch N, 1-based in queue
 *                                  order, of the test-time-training evaluation of a run's
 *                                  end or of `ckpt golf` starts), TERM@calibration:N (as
 *                                  GPTQ's calibration batch N, 1-based, starts); a stage
 *                                  without :STEP fires at any step
 *                                  TERM@ttt_global:N as SGD step N (1-based, counted across
 *                                  the phases) of its global steps starts
 *   CTRAIN_FAULT="ERR@ttt:3%1"     not a signal: rank 1's part of the stage fails there with an
 *                                  error (fault_error_stage), as a failing forward pass would;
 *                                  for the stages that call it (ttt, ttt_global, ttt_sgd: SGD
 *                                  step N's update, after the ranks' agreement, and resume: a
 *                                  run's load of the checkpoint it resumes from)
 *   several, comma-separated.      Signals: TERM, INT, KILL, USR1, USR2, STOP; ERR: an error.
 * Unset (the normal case), every hook is one branch on a flag. */
#ifndef CT_FAULT_H
#define CT_FAULT_H

#include <stdint.h>

/* Parse CTRAIN_FAULT for this rank; fails naming the bad entry. */
int fault_init(int rank);
/* Called before each micro-batch; step is 1-based (the step being computed). */
void fault_point_micro(int64_t step, int micro);
/* Called by the checkpoint writer after the data is written but before the file is renamed
 * into place. */
void fault_point_checkpoint(int64_t step);
/* Called as a named stage (see above) starts; step -1 where the stage has no step. */
void fault_point_stage(const char *stage, int64_t step);
/* An injected error (ERR@STAGE[:STEP]): -1 with "CTRAIN_FAULT: injected error ERR@STAGE:STEP"
 * (ERR@STAGE for step -1) when an entry names this stage and step, else 0. The stage's work
 * calls it where it could fail, after fault_point_stage. */
int fault_error_stage(const char *stage, int64_t step);
/* In the background checkpoint writer's child process: a checkpoint fault signals the parent
 * (the training process) too, so that "killed half-way through a checkpoint write" still means
 * the whole run dies there, as a crash of the node would. */
void fault_forward_to_parent(void);
/* Called by the shard import after each block of tokens (and by from-text after each block of
 * bytes): the import had written `before` tokens and has now written `after`. */
void fault_point_import(int64_t before, int64_t after);

#endif
