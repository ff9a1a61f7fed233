/* train.c — the training run, shared by every backend: prepares out_dir, opens the data,
 * builds the state and backend, resumes from a checkpoint when there is one, then runs
 * train_gpt.py's loop (validation at the start, every val_loss_every steps and at the end; lr
 * schedule and Muon momentum warmup; accumulation over grad_accum_slots / world_size
 * micro-batches), logging progress to stdout and every step to out_dir/metrics.jsonl, with
 * checkpoints every checkpoint_every steps, at the end, and when asked to stop (exit 75).
 *
 * Contents, in order: the start banner and small formatting helpers; validation
 * (validate_once, run_validation); one optimizer step over the micro-batches (train_step) and its
 * log line; the loop (train_loop); the run's end after the last step (the averaged weights,
 * finish_run: the golf artifact and its test-time training, train_end.c's); train_run, which
 * sets everything up and tears it down. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "common.h"
#include "config.h"
#include "data.h"
#include "dirlock.h"
#include "dist.h"
#include "fault.h"
#include "loader.h"
#include "schedule.h"
#include "stop.h"
#include "train.h"
#include "trainer.h"

/* The keys that differ from their defaults, each with where it came from (train_gpt.py users
 * see which environment variables were taken); --print-config lists every key. */
static void print_resolved(const Config *cfg) {
    int at_default = 0;
    printf("configuration (keys not at their defaults):\n");
    for (int i = 0; i < ct_config_num_keys; i++) {
        char buf[64], env[128];
        const ConfigKey *k = &ct_config_keys[i];
        if (cfg->source[i] == CT_SOURCE_DEFAULT) {
            at_default++;
            continue;
        }
        config_env_origin(cfg, i, env, sizeof env);
        printf("  %-27s = %s  (", k->name, config_value_text(cfg, k, buf, sizeof buf));
        if (cfg->source[i] == CT_SOURCE_ENV) printf("environment: %s)\n", env);
        else if (cfg->source[i] == CT_SOURCE_FILE) /* which file, when several are layered */
            printf("config file %s)\n", cfg->file_from[i] ? cfg->file_from[i] : "?");
        else printf("command line)\n");
    }
    printf("  (%d more keys at their defaults; `ctrain train --print-config ...` lists every key)\n", at_default);
    fflush(stdout);
}

static void format_duration(double seconds, char *buf, size_t cap) {
    if (!(seconds >= 0) || seconds > 360000) {
        snprintf(buf, cap, "--:--");
        return;
    }
    int s = (int)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, cap, "%d:%02d:%02d", s / 3600, (s / 60) % 60, s % 60);
    else snprintf(buf, cap, "%d:%02d", s / 60, s % 60);
}

static const char *signal_name(int sig) {
    static char buf[16];
    const char *names[] = {"SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP", "SIGQUIT", "SIGXCPU", "SIGALRM"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (stop_signal_number(names[i]) == sig) return names[i];
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

/* After writing a line of metrics.jsonl: the line must have reached the file (a full disk, a
 * quota or a vanished mount is an error of the run, not a silently shorter history). */
static int metrics_written(Trainer *t) {
    if (fflush(t->metrics) == 0 && !ferror(t->metrics)) return 0;
    return ct_fail("cannot write '%s/metrics.jsonl': %s", t->cfg->out_dir, strerror(errno));
}

/* One evaluation of the current weights (stride 0: eval_val's sequences; else the sliding
 * windows), printed and logged. With eval_stride set, the line says which evaluation it was and
 * how long it took (metrics.jsonl: eval_stride, eval_time_ms); without, it is as it always was. */
static int validate_once(Trainer *t, int64_t stride) {
    const Config *cfg = t->cfg;
    double vl, vb, start = ct_now_ms();
    if (val_evaluate_with_stride(t->backend, &t->val, t->dist, config_seq_len(cfg), stride, &vl, &vb) != 0) return -1;
    const double eval_ms = ct_now_ms() - start;
    /* val_bpb is NaN by design when the data has no tokenizer tables */
    const int bad_loss = !isfinite(vl), bad_bpb = isinf(vb);
    if (bad_loss || bad_bpb)
        return ct_fail("step %lld: the validation %s is %s: training diverged; no checkpoint is written from this "
                       "state (lower the learning rates or enable grad_clip_norm)",
                       (long long)t->step, bad_loss ? "loss" : "bits per byte", ct_nonfinite_name(bad_loss ? vl : vb));
    t->last_val_step = (double)t->step;
    t->last_val_loss = vl;
    t->last_val_bpb = vb;
    const int labelled = cfg->eval_stride > 0;
    printf("step %lld/%lld  val_loss %.4f", (long long)t->step, (long long)cfg->iterations, vl);
    if (!isnan(vb)) printf("  val_bpb %.4f", vb);
    if (labelled && stride > 0) printf("  sliding_window stride %lld  eval_time %.0fms", (long long)stride, eval_ms);
    else if (labelled) printf("  non-overlapping  eval_time %.0fms", eval_ms);
    printf("  train_time %.0fms\n", t->training_ms);
    if (t->metrics) {
        fprintf(t->metrics, "{\"step\": %lld, \"val_loss\": %.17g", (long long)t->step, vl);
        if (!isnan(vb)) fprintf(t->metrics, ", \"val_bpb\": %.17g", vb);
        if (labelled)
            fprintf(t->metrics, ", \"eval_stride\": %lld, \"eval_time_ms\": %.1f", (long long)stride, eval_ms);
        fprintf(t->metrics, ", \"train_time_ms\": %.1f}\n", t->training_ms);
        if (metrics_written(t) != 0) return -1;
    }
    fflush(stdout);
    return 0;
}

/* The validation of a step: eval_stride's; at the last step with eval_stride set, first the
 * non-overlapping one too, as train_gpt.py prints both at its end (it costs 1/(train_seq_len /
 * eval_stride) of the sliding one). The checkpoint keeps the last, the sliding one. */
static int run_validation(Trainer *t, int last) {
    const Config *cfg = t->cfg;
    t->training_ms += ct_now_ms() - t->t0;
    fault_point_stage("val", t->step);
    int rc = last && cfg->eval_stride > 0 ? validate_once(t, 0) : 0;
    if (rc == 0) rc = validate_once(t, cfg->eval_stride);
    t->t0 = ct_now_ms(); /* also after a stop, which then writes a checkpoint */
    return rc;
}

static int combine_updates(void *ctx, float *buf, size_t n) { return dist_allreduce_sum_f32(ctx, buf, n); }
static int combine_updates_device(void *ctx, float *buf, size_t n, void *stream) {
    return dist_nccl_allreduce_device(ctx, buf, n, stream, "combining the Muon updates");
}
static int share_updates_device(void *ctx, float *const *bufs, const size_t *counts, const int *roots, int count,
                                void *stream) {
    return dist_nccl_broadcast_device(ctx, bufs, counts, roots, count, stream, "sharing the Muon updates (ncclBroadcast)");
}

/* One optimizer step: accumulation over this rank's micro-batches, one sum of the gradients
 * across ranks, then the optimizers. */
static int train_step(Trainer *t, double scale, double *train_loss, double *grad_norm) {
    const Config *cfg = t->cfg;
    Backend *b = t->backend;
    /* Each of the grad_accum_slots micro-batches of the step weighs 1/slots, whichever rank
     * runs it, so the sum across ranks is the mean train_gpt.py's DDP averaging gives. */
    const float loss_weight = 1.0f / (float)cfg->grad_accum_slots;
    double loss_sum = 0;
    for (int m = 0; m < t->accum; m++) {
        const uint32_t *tokens;
        double mean_loss;
        fault_point_micro(t->step + 1, m);
        if (loader_next(&t->loader, &tokens) != 0) return -1;
        /* NCCL jobs: the last micro-batch's backward starts each bucket's sum as it completes it */
        if (t->reducer && m == t->accum - 1) {
            b->grad_ready = dist_grad_reducer_stage;
            b->grad_ready_ctx = t->reducer;
        }
        int rc = b->forward_backward(b, tokens, loss_weight, &mean_loss);
        b->grad_ready = NULL;
        if (rc != 0) return ct_fail_prefix("step %lld, micro-batch %d", (long long)t->step + 1, m);
        loss_sum += mean_loss;
    }
    if (t->reducer) {
        if (dist_grad_reducer_finish(t->reducer) != 0 || dist_allreduce_sum_f64(t->dist, &loss_sum, 1) != 0)
            return ct_fail_prefix("step %lld: reducing gradients across %d ranks", (long long)t->step + 1, t->world);
    } else if (t->world > 1) {
        if (dist_allreduce_sum_f32(t->dist, b->grad_buffer(b), t->st.spec.total_floats) != 0 ||
            dist_allreduce_sum_f64(t->dist, &loss_sum, 1) != 0)
            return ct_fail_prefix("step %lld: reducing gradients across %d ranks", (long long)t->step + 1, t->world);
    }
    *train_loss = loss_sum / (double)cfg->grad_accum_slots;
    StepHyper h = step_hyper_from_config(cfg, t->step, scale);
    h.shard_rank = t->rank;
    h.shard_world = t->world;
    h.combine = t->world > 1 ? combine_updates : NULL;
    h.combine_ctx = t->dist;
    h.combine_device = t->reducer ? combine_updates_device : NULL;
    h.share_device = t->reducer && t->muon_share ? share_updates_device : NULL;
    return b->optimizer_step(b, &h, grad_norm);
}

static int log_step(Trainer *t, double train_loss, double scale, double step_ms, double grad_norm) {
    const Config *cfg = t->cfg;
    double train_time = t->training_ms + (ct_now_ms() - t->t0);
    double tokens_per_s = (double)cfg->train_batch_tokens / (step_ms / 1000.0);
    if (!t->metrics) return 0; /* ranks other than 0 log nothing */
    fprintf(t->metrics,
            "{\"step\": %lld, \"train_loss\": %.17g, \"lr_scale\": %.17g, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, "
            "\"train_time_ms\": %.1f",
            (long long)t->step, train_loss, scale, step_ms, tokens_per_s, train_time);
    if (cfg->grad_clip_norm > 0) fprintf(t->metrics, ", \"grad_norm\": %.9g", grad_norm);
    fprintf(t->metrics, "}\n");
    if (metrics_written(t) != 0) return -1;
    /* the ETA follows an average of recent step times, not the last one alone (a step that
     * waited on I/O or shared a node would make it jump); the first step of a process (warm-up
     * of allocations and caches) is left out of it */
    if (t->steps_timed++ == 1 || t->step_ms_avg <= 0) t->step_ms_avg = step_ms;
    else t->step_ms_avg += 0.1 * (step_ms - t->step_ms_avg);
    if (t->step <= 10 || t->step % cfg->train_log_every == 0 || t->step == cfg->iterations) {
        char eta[32];
        format_duration((double)(cfg->iterations - t->step) * t->step_ms_avg / 1000.0, eta, sizeof eta);
        printf("step %lld/%lld  loss %.4f  lr_scale %.3f  step %.0fms  %.0f tok/s  eta %s\n", (long long)t->step,
               (long long)cfg->iterations, train_loss, scale, step_ms, tokens_per_s, eta);
        fflush(stdout);
    }
    return 0;
}

/* The loop proper; returns the exit code. */
static int train_loop(Trainer *t) {
    const Config *cfg = t->cfg;
    /* the record's effective cap: its GPTQ reserve comes off the budget (0 by default) */
    const double max_wallclock_ms = cfg->max_wallclock_seconds > 0
                                        ? 1000.0 * cfg->max_wallclock_seconds - 1000.0 * cfg->gptq_reserve_seconds
                                        : 0;
    const int wallclock_progress = !strcmp(cfg->progress_clock, "wallclock");
    char no_end[256] = "";
    double job_end = cfg->stop_before_job_end > 0 ? stop_slurm_job_end_time(no_end, sizeof no_end) : 0;
    if (cfg->stop_before_job_end > 0 && job_end > 0)
        printf("stop_before_job_end: the job ends at unix time %.0f; stopping %.0fs before\n", job_end,
               cfg->stop_before_job_end);
    else if (cfg->stop_before_job_end > 0)
        fprintf(stderr, "ctrain: warning: stop_before_job_end: no Slurm job end time (%s); ignored\n", no_end);
    /* Stopping before the first step would checkpoint, exit 75 and be requeued into the same
     * situation forever: with no time to train, the run fails instead. */
    int no_time = job_end > 0 && (double)time(NULL) + cfg->stop_before_job_end >= job_end;
    if (t->world > 1 && dist_allreduce_max_i32(t->dist, &no_time) != 0) return CT_EXIT_FAILURE;
    if (no_time) {
        t->failed_together = 1;
        ct_fail("stop_before_job_end = %.0f s, but the job ends in %.0f s: no time to train; lower "
                "stop_before_job_end or give the job more time (sbatch --time)",
                cfg->stop_before_job_end, job_end > 0 ? job_end - (double)time(NULL) : 0.0);
        return CT_EXIT_FAILURE;
    }
    int64_t stop_after = -1;
    t->t0 = ct_now_ms();
    for (;;) {
        int last = t->step >= cfg->iterations || (stop_after >= 0 && t->step >= stop_after);
        /* validation first, then the checkpoint of the step, so that the checkpoint holds the
         * step's validation and is written once; a resumed run does not validate again the step
         * whose validation its checkpoint holds. A stop asked for during the validation ends it
         * (every rank at the same batch): the checkpoint is then written without it, and the
         * resumed run validates the step. */
        int val_stopped = 0;
        if (t->val.tokens && (last || (cfg->val_loss_every > 0 && t->step % cfg->val_loss_every == 0)) &&
            t->last_val_step != (double)t->step && run_validation(t, last) != 0) {
            if (!stop_abandoned()) return CT_EXIT_FAILURE;
            val_stopped = 1;
        }
        const int due = !val_stopped && t->step > 0 && cfg->checkpoint_every > 0 && t->step % cfg->checkpoint_every == 0;
        /* A stop that came while the background writer was still writing an earlier checkpoint
         * ends the run at that checkpoint once written: no other write is started, since a
         * second one would double the time the stop takes (Slurm's SIGKILL follows its SIGTERM),
         * and the steps trained since are trained again, to the same bits, by the requeued run.
         * Asked of every rank together, once per checkpoint (save_pending is the same on all). */
        int stop_at_written = 0;
        int64_t written = t->step;
        if (due && t->save_pending) {
            /* the earlier write's verdict first (trainer_save would wait for it too): a stop may
             * come while the run waits for it */
            const double wait_start = ct_now_ms();
            if (trainer_save_wait(t) != 0) return CT_EXIT_FAILURE;
            t->t0 += ct_now_ms() - wait_start; /* checkpoint time is not training time */
            int asked = stop_requested() != 0;
            if (t->world > 1 && dist_allreduce_max_i32(t->dist, &asked) != 0) return CT_EXIT_FAILURE;
            if (asked && trainer_stop_at_written(t, &stop_at_written, &written) != 0) return CT_EXIT_FAILURE;
        }
        if (due && !stop_at_written && trainer_save(t) != 0) return CT_EXIT_FAILURE;
        /* the stop is looked at after the step's checkpoint: one asked for while it was written
         * ends the run right after it (no further step, no second checkpoint) */
        int sig = stop_requested();
        int deadline = job_end > 0 && (double)time(NULL) + cfg->stop_before_job_end >= job_end;
        /* every rank stops at the same step: a signal may reach only some of them, and the
         * clocks of the ranks may see the deadline a second apart (2 = signal, 1 = deadline) */
        int stop = sig ? 2 : deadline ? 1 : 0;
        if (t->world > 1 && dist_allreduce_max_i32(t->dist, &stop) != 0) return CT_EXIT_FAILURE;
        /* at the last step a stop is honoured after the final checkpoint (train_run), unless it
         * cut the last validation short */
        if (stop && (!last || val_stopped)) {
            /* (as above: the stop may have come during the newest checkpoint's write) */
            if (!stop_at_written && !val_stopped && t->written_step < t->step &&
                trainer_stop_at_written(t, &stop_at_written, &written) != 0)
                return CT_EXIT_FAILURE;
            if (!stop_at_written) {
                written = t->step;
                if (trainer_save(t) != 0 || trainer_save_wait(t) != 0) return CT_EXIT_FAILURE;
            }
            if (stop_at_written && written < t->step)
                printf("the stop came while the checkpoint of step %lld was being written: the run stops there; "
                       "step(s) %lld to %lld are trained again when it continues\n",
                       (long long)written, (long long)written + 1, (long long)t->step);
            /* Ctrl-C at a terminal: the person at it wants to know how to go on; a batch job's
             * script wants the exit code that asks Slurm to requeue it */
            char how[64];
            if (sig == SIGINT && isatty(STDERR_FILENO)) snprintf(how, sizeof how, "run the same command again to continue");
            else snprintf(how, sizeof how, "exit %d = requeue to continue", CT_EXIT_REQUEUE);
            printf("stopped at step %lld/%lld (%s%s): checkpoint written; %s\n", (long long)written,
                   (long long)cfg->iterations,
                   sig ? signal_name(sig) : stop == 1 ? "stop_before_job_end: the job's time limit is near"
                                                      : "another rank was asked to stop",
                   val_stopped ? ", during the validation of this step" : "", how);
            return CT_EXIT_REQUEUE;
        }
        if (last) break;

        double step_start = ct_now_ms();
        const double elapsed_ms = t->training_ms + (step_start - t->t0);
        /* warmdown_frac's form (the 1.0611 record) or warmdown_iters' (train_gpt.py's) */
        double scale = cfg->warmdown_frac > 0
                           ? lr_scale_frac(wallclock_progress ? progress_wallclock(elapsed_ms, max_wallclock_ms)
                                                              : progress_steps(t->step, cfg->iterations),
                                           cfg->warmdown_frac, cfg->min_lr)
                           : lr_scale(t->step, cfg->iterations, cfg->warmdown_iters, elapsed_ms, max_wallclock_ms);
        /* late QAT switches on for good once the lr scale falls below the threshold (as
         * train_gpt.py, at the top of the step, with the scale this step trains with) */
        if (cfg->late_qat && !t->st.qat_active && scale < cfg->qat_threshold) {
            t->st.qat_active = 1;
            printf("late_qat:enabled step:%lld scale:%.4f\n", (long long)t->step, scale);
        }
        /* depth recurrence switches on for good at the top of the first step whose progress
         * reaches enable_looping_at (that step already loops), as the 1.0611 record */
        if (cfg->num_loops > 0 && !t->st.loop_active) {
            const double frac = wallclock_progress ? progress_wallclock(elapsed_ms, max_wallclock_ms)
                                                   : progress_steps(t->step, cfg->iterations);
            if (frac >= cfg->enable_looping_at) {
                t->st.loop_active = 1;
                char plan[1024];
                block_plan_describe(&t->st.spec.plan_looped, plan, sizeof plan);
                printf("layer_loop:enabled step:%lld frac:%.3f %s\n", (long long)t->step, frac, plan);
            }
        }
        double train_loss = 0, grad_norm = 0;
        const int continues = stop_continues();
        const int64_t swa_before = t->st.swa_count;
        if (train_step(t, scale, &train_loss, &grad_norm) != 0) return CT_EXIT_FAILURE;
        t->step++;
        if (swa_before == 0 && t->st.swa_count == 1) printf("swa:start step:%lld\n", (long long)t->step);
        double step_ms = ct_now_ms() - step_start;
        if (stop_continues() != continues && t->step_ms_avg > 0 && step_ms > t->step_ms_avg) {
            /* Suspended during the step (Slurm's suspend: SIGSTOP ... SIGCONT). Slurm does not
             * count suspended time against a job's limit, and train_time (max_wallclock_seconds,
             * the lr warmdown by time) does not either: the step counts as a typical one. */
            const double suspended_ms = step_ms - t->step_ms_avg;
            t->t0 += suspended_ms;
            step_ms = t->step_ms_avg;
            printf("note: suspended for about %.1f s during step %lld (continued by SIGCONT); not counted in "
                   "train_time\n",
                   suspended_ms / 1000.0, (long long)t->step);
        }
        if (log_step(t, train_loss, scale, step_ms, grad_norm) != 0) return CT_EXIT_FAILURE;
        double train_time = t->training_ms + (ct_now_ms() - t->t0);
        int reached_cap = max_wallclock_ms > 0 && train_time >= max_wallclock_ms;
        if (max_wallclock_ms > 0 && t->world > 1 && dist_allreduce_max_i32(t->dist, &reached_cap) != 0)
            return CT_EXIT_FAILURE;
        if (reached_cap && stop_after < 0) {
            stop_after = t->step;
            printf("stopping early: wallclock cap, train_time %.0fms at step %lld/%lld\n", train_time,
                   (long long)t->step, (long long)cfg->iterations);
        }
    }
    if (trainer_save(t) != 0 || trainer_save_wait(t) != 0) return CT_EXIT_FAILURE;
    t->training_ms += ct_now_ms() - t->t0;
    printf("done: %lld steps, train_time %.0fms\n", (long long)t->step, t->training_ms);
    return CT_EXIT_OK;
}

/* train_gpt.py's ending, after the final checkpoint has saved the live weights and the
 * averages: the EMA weights (else SWA's average of at least two snapshots) replace the live
 * ones for what follows, their validation here and the golf artifact. Every rank. */
static int use_averaged_weights(Trainer *t, int validate) {
    const Config *cfg = t->cfg;
    char what[96];
    /* a backend whose own copy is authoritative (CUDA) brings the averages to the host first
     * (on rank 0 the final checkpoint did; the other ranks have not written one) */
    if ((t->st.ema || t->st.swa_sum) && t->backend->sync_to_host && t->backend->sync_to_host(t->backend) != 0)
        return ct_fail_prefix("the run's averaged weights");
    const char *used = train_state_use_average(&t->st, what, sizeof what);
    if (used && t->backend->weights_from_host && t->backend->weights_from_host(t->backend) != 0)
        return ct_fail_prefix("the run's %s", used);
    if (!used) {
        if (t->st.swa_sum)
            printf("swa: %lld snapshot(s) taken (swa_every = %lld, from lr_scale < 0.5 on), fewer than 2: the live "
                   "weights stay\n", (long long)t->st.swa_count, (long long)cfg->swa_every);
        return 0;
    }
    if (t->st.ema) printf("ema:applying EMA weights\n");
    else printf("swa:applying averaged %lld checkpoints\n", (long long)t->st.swa_count);
    if (!t->val.tokens || !validate) { /* !validate: done by an earlier call of the run */
        fflush(stdout);
        return 0;
    }
    double vl, vb;
    fault_point_stage("ema_val", t->step);
    if (val_evaluate(t->backend, &t->val, t->dist, config_seq_len(cfg), &vl, &vb) != 0)
        return ct_fail_prefix("validating the %s", used);
    printf("final val_loss %.4f", vl);
    if (!isnan(vb)) printf("  val_bpb %.4f", vb);
    printf("  (%s)\n", used);
    fflush(stdout);
    if (t->metrics) {
        fprintf(t->metrics, "{\"step\": %lld, \"final_val_loss\": %.17g", (long long)t->step, vl);
        if (!isnan(vb)) fprintf(t->metrics, ", \"final_val_bpb\": %.17g", vb);
        fprintf(t->metrics, ", \"weights\": \"%s\"}\n", t->st.ema ? "ema" : "swa");
        if (metrics_written(t) != 0) return -1;
    }
    return 0;
}

/* A stop asked for after the final checkpoint: the parts of the end left stay recorded. */
static int end_stopped(Trainer *t, unsigned left) {
    char what[400];
    trainer_end_describe(left, what, sizeof what);
    const int sig = stop_requested();
    printf("stopped after step %lld/%lld (%s%s%s): the final checkpoint is written; left: %s (recorded in "
           "%s/end_of_run.txt); exit %d = requeue: the same command does what is left\n",
           (long long)t->step, (long long)t->cfg->iterations, sig ? signal_name(sig) : "another rank was asked to stop",
           stop_abandoned() ? "; " : "", stop_abandoned() ? ct_error() : "", what, t->cfg->out_dir, CT_EXIT_REQUEUE);
    fflush(stdout);
    return CT_EXIT_REQUEUE;
}

/* The end of the run after its final checkpoint: the parts in left (TRAINER_END_AVERAGED,
 * _ARTIFACT, _TTT), each recorded done once done; a stop asked for before or during one of them
 * ends the run with exit 75 and the rest recorded. Returns the exit code. */
static int finish_run(Trainer *t, unsigned left) {
    int stop = stop_requested() != 0;
    if (t->world > 1 && dist_allreduce_max_i32(t->dist, &stop) != 0) return CT_EXIT_FAILURE;
    if (stop && left) return end_stopped(t, left);
    if (use_averaged_weights(t, (left & TRAINER_END_AVERAGED) != 0) != 0)
        return stop_abandoned() ? end_stopped(t, left) : CT_EXIT_FAILURE;
    left &= ~(unsigned)TRAINER_END_AVERAGED;
    if (trainer_end_record(t, left) != 0) return CT_EXIT_FAILURE;
    /* the golf artifact (rank 0), then its test-time-training score (every rank) */
    if (trainer_end_golf(t, &left) != 0) return stop_abandoned() ? end_stopped(t, left) : CT_EXIT_FAILURE;
    return trainer_end_record(t, 0) != 0 ? CT_EXIT_FAILURE : CT_EXIT_OK;
}

int train_run(Config *cfg) {
    Trainer t;
    DistInfo dist;
    memset(&t, 0, sizeof t);
    t.lock_fd = -1;
    t.last_val_step = t.saved_val_step = -1;
    t.last_val_loss = t.last_val_bpb = NAN;
    t.cfg = cfg;
    t.dist = &dist;
    int rc = CT_EXIT_FAILURE;
    char device_note[400];
    backend_resolve_device(cfg, device_note, sizeof device_note);
    /* CPU jobs reduce over MPI; GPU jobs over NCCL, bootstrapped through the PMI2 KVS */
    if (dist_init(&dist, !strcmp(cfg->device, "cpu"), 120.0) != 0) dist_abort(&dist, CT_EXIT_FAILURE, ct_error());
    t.rank = dist.rank;
    t.world = dist.world_size;
    dist.op_timeout_s = cfg->collective_timeout;
    if (config_validate(cfg, t.world) != 0) {
        if (t.rank == 0) ct_print_error();
        dist_finalize(&dist);
        return CT_EXIT_USAGE;
    }
    /* signals asking for a stop are caught from here on (a preemption during NCCL's start-up
     * must not kill the process before it can exit 75) */
    if (stop_install(cfg->stop_signal) != 0) dist_abort(&dist, CT_EXIT_FAILURE, ct_error());
    /* a GPU rank without a GPU of its own fails now, before any data is read */
    if (config_uses_nccl(cfg, t.world) && train_nccl_connect(cfg, &dist, t.nccl_note, sizeof t.nccl_note) != 0)
        dist_abort(&dist, CT_EXIT_FAILURE, ct_error());
    t.accum = (int)(cfg->grad_accum_slots / t.world);
    /* rank 0 speaks for the job; the others report only errors (on stderr) */
    if (t.rank != 0 && !freopen("/dev/null", "w", stdout)) dist_abort(&dist, 1, "cannot silence stdout");

    if (device_note[0]) printf("%s\n", device_note);
    print_resolved(cfg);
    if (t.world > 1) {
        char map[4096];
        dist_rank_map(&dist, map, sizeof map);
        printf("%d ranks (%s): %s\n", t.world, dist.launcher, map);
    }
    char path[4200];
    if (fault_init(t.rank) != 0) goto fail;
    if (ct_mkdir_p(cfg->out_dir) != 0) goto fail;
    /* one run per out_dir: two would interleave checkpoints and prune each other's files */
    if (t.rank == 0 && (t.lock_fd = ct_dir_lock(cfg->out_dir, cfg->lock_wait)) < 0) {
        rc = stop_requested() ? CT_EXIT_REQUEUE : CT_EXIT_FAILURE; /* stopped while waiting: requeue */
        goto fail_rc;
    }
    if (train_open_data(cfg, &t.train_set, &t.val_set) != 0) goto fail;
    printf("train data: %d file(s), %lld tokens, vocab %lld (%s)\n", t.train_set.num_files,
           (long long)t.train_set.total_tokens, (long long)t.train_set.vocab_size, cfg->train_files);
    if (t.val_set.num_files) {
        if (val_load(cfg, &t.val_set, &t.val) != 0) goto fail;
        const char *bytes = val_bytes_source(&t.val);
        printf("val data:   %d file(s), %lld sequences of %lld%s%s (%s)\n", t.val_set.num_files,
               (long long)t.val.num_seqs, (long long)config_seq_len(cfg), bytes ? ", val_bpb from its " : "",
               bytes ? bytes : "", cfg->val_files);
    }
    /* what the run's end needs is checked now, not after the last step (every rank alike) */
    if (trainer_end_check(cfg, &t.val_set) != 0) {
        rc = CT_EXIT_USAGE;
        t.failed_together = 1;
        goto fail_rc;
    }
    if (train_state_init(&t.st, cfg) != 0) goto fail;
    if (trainer_resume(&t, &rc) != 0) goto fail_rc;
    /* QAT from the start, or late QAT's switch as the checkpoint left it (off when neither key
     * is set any more) */
    t.st.qat_active = cfg->qat_enabled || (cfg->late_qat && t.st.qat_active);
    t.st.loop_active = cfg->num_loops > 0 && t.st.loop_active; /* depth recurrence's switch, likewise */
    unsigned end_left = trainer_end_asked(&t); /* the parts of the run's end still to do */
    if (t.step > 0 && t.step >= cfg->iterations) {
        /* a requeue or a rerun of a run whose steps are done: finished, or its end goes on */
        if (trainer_end_left(&t, &end_left) != 0) goto fail;
        if (!end_left) {
            printf("the run in %s is already finished: step %lld of iterations = %lld; nothing to do (raise "
                   "iterations to train further)\n", cfg->out_dir, (long long)t.step, (long long)cfg->iterations);
            rc = CT_EXIT_OK;
            goto out;
        }
        char what[400];
        trainer_end_describe(end_left, what, sizeof what);
        printf("the run in %s has done its %lld steps, but its end is not complete: doing what is left: %s\n",
               cfg->out_dir, (long long)t.step, what);
    }
    /* a fresh run reads all of its data once, so that a bad token is found now and not at step
     * 5,000; a resume trusts the files the checkpoint's checksums identify */
    if (t.step == 0 && cfg->check_train_tokens && train_check_tokens(&t.train_set, t.dist, t.rank, t.world) != 0) {
        t.failed_together = 1;
        goto fail;
    }
    if (backend_create(&t.backend, cfg, &t.st) != 0) goto fail;
    t.backend->bos_id = t.train_set.files[0].bos_id; /* the SmearGate's mask, packing's cuts (train_data.c checked it) */
    printf("model: %lld parameters, %d layers, dim %d, %d heads / %d kv heads; device %s; world %d, accumulation "
           "%d x %d sequences of %lld\n",
           (long long)t.st.spec.total_floats, t.st.spec.num_layers, t.st.spec.dim, t.st.spec.num_heads,
           t.st.spec.num_kv_heads, t.backend->name, t.world, t.accum, t.backend->micro_batch_seqs,
           (long long)config_seq_len(cfg));
    if (t.backend->detail[0]) printf("%s backend: %s\n", t.backend->name, t.backend->detail);
    if (cfg->num_loops > 0) { /* both block plans, in the record's format */
        char plain[1024], looped[1024];
        block_plan_describe(&t.st.spec.plan_plain, plain, sizeof plain);
        block_plan_describe(&t.st.spec.plan_looped, looped, sizeof looped);
        printf("layer_loop: %s from progress %g (before: %s)%s\n", looped, cfg->enable_looping_at, plain,
               t.st.loop_active ? "; active" : "");
    }
    trainer_note_stack(&t);
    /* config.txt is written only once the run is known to go ahead, so a refused resume leaves
     * the earlier run's files as they were; it ends with the stack the run's bits depend on */
    snprintf(path, sizeof path, "%s/config.txt", cfg->out_dir);
    if (t.rank == 0) {
        char note[1100];
        snprintf(note, sizeof note, "stack: %s", t.stack);
        if (config_write_file(cfg, path, t.stack[0] ? note : NULL) != 0) goto fail;
    }
    if (trainer_end_record(&t, end_left & ~(unsigned)TRAINER_END_FINAL_VAL) != 0) goto fail;
    if (t.nccl_note[0]) printf("%s\n", t.nccl_note);
    if (t.dist->nccl && trainer_reducer_init(&t) != 0) goto fail;
    if (cfg->warmup_steps > 0 && cfg->source[config_find_key("warmup_steps") - ct_config_keys] != CT_SOURCE_DEFAULT)
        printf("note: warmup_steps = %lld ignored (ctrain has no compile warmup to prime)\n", (long long)cfg->warmup_steps);
    if (cfg->swa_enabled && cfg->ema_enabled)
        printf("note: swa_enabled = 1 has no effect with ema_enabled = 1 (as in train_gpt.py, the EMA is used)\n");
    if (!strcmp(cfg->device, "cpu") && strcmp(cfg->residual_dtype, "fp32") != 0)
        printf("note: residual_dtype = %s applies to device = cuda; the CPU backend keeps its fp32 residual stream\n",
               cfg->residual_dtype);
    fflush(stdout);
    if (loader_init(&t.loader, &t.train_set, t.rank, t.world, config_local_tokens(cfg), t.start_cursor, 1) != 0)
        goto fail;
    if (t.rank == 0 && trainer_open_metrics(&t) != 0) goto fail;
    rc = train_loop(&t);
    if (rc == CT_EXIT_OK) rc = finish_run(&t, end_left & ~(unsigned)TRAINER_END_FINAL_VAL);
    if (rc == CT_EXIT_FAILURE) goto fail;
    goto out;
fail:
    rc = CT_EXIT_FAILURE;
fail_rc:
    trainer_save_abandon(&t);
    /* with several ranks, the others may be waiting in a collective for this one: end the job */
    if (t.world > 1 && !t.failed_together) dist_abort(&dist, rc, ct_error());
    if (t.rank == 0 || !t.failed_together) ct_print_error();
out:
    if (t.metrics && fclose(t.metrics) != 0 && rc != CT_EXIT_FAILURE) {
        ct_fail("cannot write '%s/metrics.jsonl': %s", cfg->out_dir, strerror(errno));
        ct_print_error();
        rc = CT_EXIT_FAILURE;
    }
    loader_free(&t.loader);
    trainer_reducer_free(&t);
    if (t.backend) t.backend->destroy(t.backend);
    train_state_free(&t.st);
    val_free(&t.val);
    data_free_set(&t.train_set);
    data_free_set(&t.val_set);
    dist_finalize(&dist);
    if (t.lock_fd >= 0) close(t.lock_fd);
    return rc;
}
