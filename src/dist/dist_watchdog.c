/* dist_watchdog.c — turns a hang into a fast, named failure. PMI2_KVS_Fence, MPI_Init and MPI
 * collectives have no timeout of their own: if another rank died or never started they wait
 * forever, and srun (without --kill-on-bad-exit) lets them. Before such a call the caller arms
 * this watchdog with what it waits for; a background thread prints
 *   ctrain: error: rank 2 (n1): timed out after 30 s in PMI2_KVS_Fence (...)
 * when the deadline passes and ends the whole job (dist_watchdog_on_timeout). One thread per process,
 * started on first use, sleeping on a condition variable in between. */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "dist_internal.h"

static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wd_cv;
static pthread_t wd_thread;
static int wd_started, wd_stopping, wd_armed;
static struct timespec wd_deadline; /* CLOCK_MONOTONIC */
static double wd_timeout_s;
static char wd_what[384];
static int wd_rank = -1;
static char wd_host[64] = "?";
static void (*wd_end_job)(const char *msg);

void dist_watchdog_on_timeout(void (*end_job)(const char *msg)) {
    pthread_mutex_lock(&wd_mu);
    wd_end_job = end_job;
    pthread_mutex_unlock(&wd_mu);
}

void dist_watchdog_identity(int rank, const char *host) {
    pthread_mutex_lock(&wd_mu);
    wd_rank = rank;
    snprintf(wd_host, sizeof wd_host, "%s", host && *host ? host : "?");
    pthread_mutex_unlock(&wd_mu);
}

static int deadline_passed(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > wd_deadline.tv_sec ||
           (now.tv_sec == wd_deadline.tv_sec && now.tv_nsec >= wd_deadline.tv_nsec);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&wd_mu);
    while (!wd_stopping) {
        if (!wd_armed) {
            pthread_cond_wait(&wd_cv, &wd_mu);
            continue;
        }
        if (deadline_passed()) {
            char msg[640];
            char rank[16] = "?";
            if (wd_rank >= 0) snprintf(rank, sizeof rank, "%d", wd_rank);
            snprintf(msg, sizeof msg,
                     "rank %s (%s): timed out after %g s in %s; another rank probably died or hangs, "
                     "ending the job",
                     rank, wd_host, wd_timeout_s, wd_what);
            void (*end_job)(const char *) = wd_end_job;
            pthread_mutex_unlock(&wd_mu);
            fprintf(stderr, "ctrain: error: %s\n", msg);
            fflush(stderr);
            if (end_job) end_job(msg);
            _exit(CT_EXIT_FAILURE);
        }
        pthread_cond_timedwait(&wd_cv, &wd_mu, &wd_deadline);
    }
    pthread_mutex_unlock(&wd_mu);
    return NULL;
}

/* Called with wd_mu held. Returns 0 when the thread runs. */
static int start_locked(void) {
    if (wd_started) return 0;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wd_cv, &attr);
    pthread_condattr_destroy(&attr);
    /* Signals (SIGTERM for checkpoint-and-requeue, SIGINT) belong to the main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&wd_thread, NULL, watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&wd_cv);
        fprintf(stderr, "ctrain: warning: cannot start the distributed watchdog thread (%s); hangs "
                        "will not time out\n", strerror(rc));
        return -1;
    }
    wd_started = 1;
    wd_stopping = 0;
    return 0;
}

void dist_watchdog_arm(double timeout_s, const char *fmt, ...) {
    if (!(timeout_s > 0)) return;
    pthread_mutex_lock(&wd_mu);
    if (start_locked() == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(wd_what, sizeof wd_what, fmt, ap);
        va_end(ap);
        clock_gettime(CLOCK_MONOTONIC, &wd_deadline);
        double whole = (double)(long long)timeout_s;
        wd_deadline.tv_sec += (time_t)whole;
        wd_deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (wd_deadline.tv_nsec >= 1000000000L) {
            wd_deadline.tv_sec++;
            wd_deadline.tv_nsec -= 1000000000L;
        }
        wd_timeout_s = timeout_s;
        wd_armed = 1;
        pthread_cond_signal(&wd_cv);
    }
    pthread_mutex_unlock(&wd_mu);
}

void dist_watchdog_disarm(void) {
    pthread_mutex_lock(&wd_mu);
    wd_armed = 0; /* the thread notices at its next wake-up; no need to wake it now */
    pthread_mutex_unlock(&wd_mu);
}

void dist_watchdog_stop(void) {
    pthread_mutex_lock(&wd_mu);
    if (!wd_started) {
        pthread_mutex_unlock(&wd_mu);
        return;
    }
    wd_stopping = 1;
    wd_armed = 0;
    pthread_cond_signal(&wd_cv);
    pthread_mutex_unlock(&wd_mu);
    pthread_join(wd_thread, NULL);
    pthread_mutex_lock(&wd_mu);
    pthread_cond_destroy(&wd_cv);
    wd_started = 0;
    pthread_mutex_unlock(&wd_mu);
}
