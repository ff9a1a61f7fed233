/* train_save.c — checkpoints of the running state: rank 0 writes, every rank learns the verdict.
 *
 * With checkpoint_async on (the default for device=cuda) the write happens in a child process
 * made by fork(): the state is brought to the host (the CUDA backend's copy is authoritative),
 * the child gets it as a copy-on-write snapshot and writes, checksums and publishes the file
 * with checkpoint_save's atomic protocol, while the parent trains on. Training pauses only for
 * the device-to-host copy and the fork. A process rather than a thread because the child then
 * needs no lock shared with the training process (HDF5 builds on clusters are often not
 * threadsafe, and the loader's prefetch thread reads HDF5 all the time) and a crash inside HDF5
 * cannot take the run down with it. The verdict is collected (and shared with the other ranks)
 * at the next save, at a stop and at the end of the run: a second save waits for the first. A
 * failed background write ends the run there, with the child's message; the previous
 * checkpoint stays the newest valid one, as with an in-line write. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "common.h"
#include "fault.h"
#include "h5util.h"
#include "isolate.h"
#include "stop.h"
#include "trainer.h"

/* What the writer needs beyond the Trainer (all of it read-only in the child). */
typedef struct {
    Trainer *t;
    CheckpointInfo info;
    const char *names[3];
    double values[3];
    double requested_ms;
} SaveJob;

static void fill_info(Trainer *t, SaveJob *job, double start) {
    memset(job, 0, sizeof *job);
    job->t = t;
    job->requested_ms = start;
    CheckpointInfo *info = &job->info;
    info->step = t->step;
    info->cursor = loader_cursor(&t->loader);
    info->train_tokens = info->cursor.stream_tokens;
    info->world_size = t->world;
    info->training_time_ms = t->training_ms + (start - t->t0);
    info->device = t->backend->name;
    info->stack = t->stack;
    info->lineage = t->lineage;
    /* the latest validation, for `ctrain ckpt info` and to continue after a resume */
    job->names[0] = "last_val_step", job->names[1] = "last_val_loss", job->names[2] = "last_val_bpb";
    job->values[0] = t->last_val_step, job->values[1] = t->last_val_loss, job->values[2] = t->last_val_bpb;
    if (t->last_val_step >= 0) {
        info->extra_names = job->names;
        info->extra_values = job->values;
        info->num_extras = isnan(t->last_val_bpb) ? 2 : 3; /* no bpb without tokenizer tables */
    }
}

static int write_checkpoint(SaveJob *job, char *path, size_t cap) {
    Trainer *t = job->t;
    return checkpoint_save(t->ckpt_dir, t->cfg, &t->st, &job->info, &t->train_set, (int)t->cfg->keep_checkpoints,
                           path, cap);
}

/* The child's work: write, then say so on the run's output. */
static int background_write(void *ctx, void *out) {
    SaveJob *job = ctx;
    /* the parent resumes training as soon as the fork returns: its pause ends about now */
    const double paused_ms = ct_now_ms() - job->requested_ms;
    char path[4400];
    if (write_checkpoint(job, path, sizeof path) != 0) return -1;
    printf("checkpoint: %s (%.0fms, written in the background; training paused %.0fms)\n", path,
           ct_now_ms() - job->requested_ms, paused_ms);
    fflush(stdout);
    *(double *)out = ct_now_ms(); /* when the write ended (one clock for the whole machine) */
    return 0;
}

static void writer_child_init(void) {
    ct_hdf5_lock_reset_in_child(); /* the parent held it across fork() */
    fault_forward_to_parent();
}

int trainer_save_async(const Trainer *t) {
    const char *mode = t->cfg->checkpoint_async;
    return !strcmp(mode, "on") || (!strcmp(mode, "auto") && !strcmp(t->cfg->device, "cuda"));
}

/* After a stop signal the writer's wait lasts at most this long: less than Slurm's default
 * KillWait (30 s) between its SIGTERM and SIGKILL, so the run still ends by itself and says why. */
#define WRITER_STOP_GRACE_S 20.0

static int finish_writer(Trainer *t) {
    t->writer.stop_grace_s = WRITER_STOP_GRACE_S;
    double end_ms = 0;
    if (ct_child_finish(&t->writer, "the background checkpoint writer", &end_ms, sizeof end_ms,
                        t->cfg->checkpoint_wait) != 0)
        return -1;
    t->written_end_ms = end_ms;
    return 0;
}

int trainer_save_wait(Trainer *t) {
    if (!t->save_pending) return 0;
    t->save_pending = 0;
    int rc = 0;
    char message[2048] = "";
    if (t->rank == 0) {
        rc = finish_writer(t);
        if (rc != 0) snprintf(message, sizeof message, "%s", ct_error());
    }
    if (t->world > 1 && dist_bcast(t->dist, &rc, sizeof rc, 0) != 0) return -1;
    if (rc == 0) {
        t->written_step = t->pending_step;
        return 0;
    }
    if (t->rank != 0)
        return ct_fail("rank 0 failed to write the checkpoint of step %lld", (long long)t->pending_step);
    return ct_fail("checkpoint of step %lld: %s", (long long)t->pending_step, message);
}

int trainer_stop_at_written(Trainer *t, int *yes, int64_t *step) {
    if (trainer_save_wait(t) != 0) return -1;
    int during = 0;
    if (t->rank == 0) during = stop_requested() && t->written_step >= 0 && stop_requested_ms() <= t->written_end_ms;
    if (t->world > 1 && dist_bcast(t->dist, &during, sizeof during, 0) != 0) return -1;
    *yes = during;
    *step = t->written_step;
    return 0;
}

void trainer_save_abandon(Trainer *t) {
    if (t->rank == 0 && t->save_pending && t->writer.pid > 0) {
        /* let it finish: a complete checkpoint is worth keeping. Its own failure is printed
         * here; the run's failure message (ct_error) is kept for the caller to report. */
        char failure[2048];
        snprintf(failure, sizeof failure, "%s", ct_error());
        if (finish_writer(t) != 0) ct_print_error();
        ct_fail("%s", failure);
    }
    t->save_pending = 0;
}

int trainer_save(Trainer *t) {
    /* a checkpoint of this step exists, unless a validation has run since it was written (the
     * final one, after the checkpoint_every save of the last step): then it is replaced, so that
     * the final checkpoint holds the final validation */
    if (t->last_saved_step == t->step && t->saved_val_step == t->last_val_step) return 0;
    double start = ct_now_ms();
    /* one write at a time: the previous one's verdict first */
    if (trainer_save_wait(t) != 0) return -1;
    const int async = trainer_save_async(t);
    if (t->rank != 0) { /* rank 0 writes; wait for its verdict (now, or at the next wait) */
        if (async) {
            t->save_pending = 1;
            t->pending_step = t->step;
        } else {
            int rc = 0;
            if (dist_bcast(t->dist, &rc, sizeof rc, 0) != 0) return -1;
            if (rc != 0) return ct_fail("rank 0 failed to write the checkpoint of step %lld", (long long)t->step);
            t->written_step = t->step;
        }
        t->last_saved_step = t->step;
        t->saved_val_step = t->last_val_step;
        t->t0 += ct_now_ms() - start;
        return 0;
    }
    SaveJob job;
    fill_info(t, &job, start);
    /* a backend whose own copy is authoritative (CUDA) brings the host state up to date first */
    if (t->backend->sync_to_host && t->backend->sync_to_host(t->backend) != 0)
        return ct_fail_prefix("checkpoint at step %lld", (long long)t->step);
    if (async) {
        /* holding the HDF5 lock across fork() keeps the loader's prefetch thread out of HDF5,
         * so the child inherits HDF5 in a consistent state */
        ct_hdf5_lock();
        double end_ms = 0; /* the child's, sent back through ct_child_finish */
        int rc = ct_child_start(&t->writer, "the background checkpoint writer", background_write, &job, &end_ms,
                                sizeof end_ms, writer_child_init);
        ct_hdf5_unlock();
        if (rc != 0) return ct_fail_prefix("checkpoint at step %lld", (long long)t->step);
        t->save_pending = 1;
        t->pending_step = t->step;
        t->last_saved_step = t->step;
        t->saved_val_step = t->last_val_step;
        t->t0 += ct_now_ms() - start; /* only the pause is not training time */
        return 0;
    }
    char path[4400];
    int rc = write_checkpoint(&job, path, sizeof path);
    char saved_error[2048];
    snprintf(saved_error, sizeof saved_error, "%s", ct_error());
    if (dist_bcast(t->dist, &rc, sizeof rc, 0) != 0) return -1;
    if (rc != 0) return ct_fail("checkpoint at step %lld: %s", (long long)t->step, saved_error);
    t->written_step = t->last_saved_step = t->step;
    t->written_end_ms = ct_now_ms();
    t->saved_val_step = t->last_val_step;
    printf("checkpoint: %s (%.0fms)\n", path, ct_now_ms() - start);
    fflush(stdout);
    /* checkpoint time is not training time: the time budget measures the steps */
    t->t0 += ct_now_ms() - start;
    return 0;
}
