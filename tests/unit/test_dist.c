/* test_dist.c — the single-process parts of the distributed layer: launcher detection for a
 * plain start and an srun task without PMI, collectives as no-ops with one rank, the
 * PMI_process_mapping and tasks-per-node parsers, hex, the rank-map line, the agreement with one
 * rank (dist_agree) and the watchdog.
 * Multi-rank behaviour (PMI2, MPI, hangs) is tested under Slurm in tests/slurm/test_launch.sh. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "dist.h"
#include "dist_internal.h"
#include "harness.h"
#include "stop.h"

/* Forget whatever launcher ran this test program (make test may itself run under Slurm). */
static void clear_launch_env(void) {
    static const char *vars[] = {"PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_JOBID", "HYDI_CONTROL_FD",
                                 "MPI_LOCALRANKID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
                                 "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NUM_NODES",
                                 "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS", "SLURMD_NODENAME", "SLURM_MPI_TYPE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

static void set_srun_env(const char *procid, const char *ntasks, const char *localid, const char *nodeid,
                         const char *nnodes, const char *tpn) {
    setenv("SLURM_JOB_ID", "77", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_PROCID", procid, 1);
    setenv("SLURM_STEP_NUM_TASKS", ntasks, 1);
    setenv("SLURM_LOCALID", localid, 1);
    setenv("SLURM_NODEID", nodeid, 1);
    setenv("SLURM_STEP_NUM_NODES", nnodes, 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", tpn, 1);
    setenv("SLURMD_NODENAME", "tn7", 1);
}

static void single_launch(void) {
    clear_launch_env();
    DistInfo d;
    CHECK(dist_init(&d, 1, 5) == 0, "dist_init: %s", ct_error());
    CHECK(!strcmp(d.launcher, "single"), "launcher %s", d.launcher);
    CHECK(d.rank == 0 && d.world_size == 1, "rank %d of %d", d.rank, d.world_size);
    CHECK(d.local_rank == 0 && d.local_size == 1, "local %d of %d", d.local_rank, d.local_size);
    CHECK(d.node_index == 0 && d.num_nodes == 1, "node %d of %d", d.node_index, d.num_nodes);
    CHECK(d.mpi == 0 && d.srun == 0, "mpi %d srun %d", d.mpi, d.srun);
    CHECK(d.host[0] != '\0', "empty host");
    char map[512], want[320];
    CHECK(dist_rank_map(&d, map, sizeof map) == 0, "rank map: %s", ct_error());
    DistEntry e;
    dist_entry_set(&e, 0, 0, d.host);
    snprintf(want, sizeof want, "rank map (rank=host/local_rank): 0=%s/0", e.host);
    CHECK(!strcmp(map, want), "rank map '%s', expected '%s'", map, want);
    dist_finalize(&d);
    dist_finalize(&d); /* twice is fine */
}

static void single_collectives_are_noops(void) {
    clear_launch_env();
    DistInfo d;
    CHECK(dist_init(&d, 1, 5) == 0, "dist_init: %s", ct_error());
    float f[3] = {1.5f, -2.0f, 3.25f};
    double g[2] = {0.1, 1e300};
    int v = 42;
    unsigned char blob[16], copy[16];
    for (int i = 0; i < 16; i++) blob[i] = copy[i] = (unsigned char)(i * 17);
    CHECK(dist_allreduce_sum_f32(&d, f, 3) == 0, "f32: %s", ct_error());
    CHECK(f[0] == 1.5f && f[1] == -2.0f && f[2] == 3.25f, "f32 changed: %g %g %g", f[0], f[1], f[2]);
    CHECK(dist_allreduce_sum_f32(&d, NULL, 0) == 0, "f32 empty: %s", ct_error());
    CHECK(dist_allreduce_sum_f64(&d, g, 2) == 0, "f64: %s", ct_error());
    CHECK(g[0] == 0.1 && g[1] == 1e300, "f64 changed");
    CHECK(dist_allreduce_max_i32(&d, &v) == 0 && v == 42, "max: %d %s", v, ct_error());
    CHECK(dist_bcast(&d, blob, sizeof blob, 0) == 0, "bcast: %s", ct_error());
    CHECK(dist_barrier(&d) == 0, "barrier: %s", ct_error());
    CHECK(dist_kvs_broadcast(&d, "nccl-id", blob, sizeof blob, 0, 5) == 0, "kvs: %s", ct_error());
    CHECK(!memcmp(blob, copy, sizeof blob), "blob changed");
    CHECK(dist_kvs_broadcast(&d, "nccl-id", blob, sizeof blob, 1, 5) < 0, "root 1 of 1 accepted");
    CHECK(strstr(ct_error(), "root 1"), "message: %s", ct_error());
    CHECK(dist_bcast(&d, blob, sizeof blob, -1) < 0, "root -1 accepted");
    CHECK(dist_kvs_broadcast(&d, "a=b", blob, sizeof blob, 0, 5) < 0, "key with '=' accepted");
    CHECK(dist_kvs_broadcast(&d, "", blob, sizeof blob, 0, 5) < 0, "empty key accepted");
    CHECK(dist_kvs_broadcast(&d, "k123456789012345678901234567890123456789x", blob, 1, 0, 5) < 0,
          "41-character key accepted");
    dist_finalize(&d);
}

static void batch_script_is_single(void) {
    /* A bare sbatch script: SLURM_NTASKS=4 and SLURM_PROCID=0, but no step: one process. */
    clear_launch_env();
    setenv("SLURM_JOB_ID", "77", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURMD_NODENAME", "tn7", 1);
    DistInfo d;
    CHECK(dist_init(&d, 1, 5) == 0, "dist_init: %s", ct_error());
    CHECK(!strcmp(d.launcher, "single") && d.world_size == 1, "launcher %s world %d", d.launcher, d.world_size);
    CHECK(!strcmp(d.host, "tn7"), "host %s", d.host);
    dist_finalize(&d);
    clear_launch_env();
}

static void srun_without_pmi(void) {
    clear_launch_env();
    set_srun_env("3", "4", "1", "1", "2", "2(x2)");
    DistInfo d;
    CHECK(dist_init(&d, 0, 5) == 0, "dist_init: %s", ct_error());
    CHECK(!strcmp(d.launcher, "slurm-env") && d.srun == 1, "launcher %s srun %d", d.launcher, d.srun);
    CHECK(d.rank == 3 && d.world_size == 4, "rank %d of %d", d.rank, d.world_size);
    CHECK(d.local_rank == 1 && d.local_size == 2, "local %d of %d", d.local_rank, d.local_size);
    CHECK(d.node_index == 1 && d.num_nodes == 2, "node %d of %d", d.node_index, d.num_nodes);
    CHECK(!strcmp(d.host, "tn7"), "host %s", d.host);
    char map[256];
    CHECK(dist_rank_map(&d, map, sizeof map) == 0 && strstr(map, " 3=tn7/1"), "map %s", map);
    /* Without PMI the ranks cannot reach each other: every collective says so. */
    float f = 1;
    CHECK(dist_allreduce_sum_f32(&d, &f, 1) < 0, "allreduce without PMI succeeded");
    CHECK(strstr(ct_error(), "srun --mpi=pmi2"), "message: %s", ct_error());
    unsigned char id[128] = {0};
    CHECK(dist_kvs_broadcast(&d, "nccl", id, sizeof id, 0, 5) < 0, "kvs without PMI succeeded");
    CHECK(strstr(ct_error(), "rank 3") && strstr(ct_error(), "srun --mpi=pmi2"), "message: %s", ct_error());
    dist_finalize(&d);

    /* The CPU backend needs MPI, which cannot connect tasks started without PMI. */
    CHECK(dist_init(&d, 1, 5) < 0, "use_mpi without PMI accepted");
    CHECK(strstr(ct_error(), "rank 3") && strstr(ct_error(), "without PMI2") && strstr(ct_error(), "--mpi=pmi2"),
          "message: %s", ct_error());
    dist_finalize(&d);

    /* One task: fine either way. */
    set_srun_env("0", "1", "0", "0", "1", "1");
    CHECK(dist_init(&d, 1, 5) == 0, "one srun task: %s", ct_error());
    CHECK(!strcmp(d.launcher, "slurm-env") && d.world_size == 1 && d.mpi == 0, "launcher %s", d.launcher);
    float g = 2.5f;
    CHECK(dist_allreduce_sum_f32(&d, &g, 1) == 0 && g == 2.5f, "one-rank allreduce: %s", ct_error());
    dist_finalize(&d);

    /* Inconsistent variables are an error naming them. */
    set_srun_env("0", "2", "5", "0", "1", "2");
    CHECK(dist_init(&d, 0, 5) < 0, "SLURM_LOCALID=5 of 2 accepted");
    CHECK(strstr(ct_error(), "SLURM_LOCALID"), "message: %s", ct_error());
    dist_finalize(&d);
    clear_launch_env();
}

/* Parse into nodes[] and compare with want[] (world entries). */
static int mapping_is(const char *s, int world, const int *want) {
    int nodes[64];
    if (dist_parse_process_mapping(s, world, nodes) < 0) return 0;
    return !memcmp(nodes, want, (size_t)world * sizeof *want);
}

static void process_mapping(void) {
    CHECK(mapping_is("(vector,(0,2,2))", 4, (int[]){0, 0, 1, 1}), "2 nodes x 2: %s", ct_error());
    CHECK(mapping_is("(vector,(0,1,4))", 4, (int[]){0, 0, 0, 0}), "1 node x 4: %s", ct_error());
    CHECK(mapping_is("(vector,(0,2,3),(2,1,2))", 8, (int[]){0, 0, 0, 1, 1, 1, 2, 2}), "uneven: %s", ct_error());
    /* Cyclic distributions: the vector repeats until every rank is placed. */
    CHECK(mapping_is("(vector,(0,2,1))", 4, (int[]){0, 1, 0, 1}), "cyclic: %s", ct_error());
    CHECK(mapping_is("(vector,(0,3,1))", 5, (int[]){0, 1, 2, 0, 1}), "cyclic, 5 on 3: %s", ct_error());
    CHECK(mapping_is("(vector,(0,2,2),(0,1,1))", 5, (int[]){0, 0, 1, 1, 0}), "plane: %s", ct_error());
    CHECK(mapping_is(" ( vector , ( 0 , 2 , 1 ) ) ", 2, (int[]){0, 1}), "spaces: %s", ct_error());
    CHECK(mapping_is("(vector,(0,1,1))", 1, (int[]){0}), "one rank: %s", ct_error());

    static const struct {
        const char *s;
        int world;
    } bad[] = {
        {"", 4},
        {"vector,(0,2,2)", 4},
        {"(vector)", 4},
        {"(list,(0,2,2))", 4},
        {"(vector,(0,2))", 4},
        {"(vector,(0,2,2)", 4},
        {"(vector,(0,2,2)) trailing", 4},
        {"(vector,(0,2,2)(2,1,1))", 4},
        {"(vector,(0,0,2))", 4},
        {"(vector,(0,2,0))", 4},
        {"(vector,(a,2,2))", 4},
        {"(vector,(0,2,-2))", 4},
        {"(vector,(3,2,1))", 4},
        {"(vector,(0,99999999,1))", 4},
        {"(vector,(0,2,2))", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int nodes[8];
        ct_error_clear();
        CHECK(dist_parse_process_mapping(bad[i].s, bad[i].world, nodes) < 0, "'%s' accepted", bad[i].s);
        CHECK(strstr(ct_error(), "PMI_process_mapping"), "'%s': message '%s'", bad[i].s, ct_error());
    }
    CHECK(dist_parse_process_mapping(NULL, 4, (int[4]){0}) < 0, "NULL accepted");
}

static void layout(void) {
    int lr, ls, ni, nn;
    int two_by_two[] = {0, 0, 1, 1};
    CHECK(dist_layout_from_nodes(two_by_two, 4, 3, &lr, &ls, &ni, &nn) == 0, "%s", ct_error());
    CHECK(lr == 1 && ls == 2 && ni == 1 && nn == 2, "rank 3: local %d/%d node %d/%d", lr, ls, ni, nn);
    int cyclic[] = {0, 1, 0, 1, 0};
    CHECK(dist_layout_from_nodes(cyclic, 5, 4, &lr, &ls, &ni, &nn) == 0, "%s", ct_error());
    CHECK(lr == 2 && ls == 3 && ni == 0 && nn == 2, "cyclic rank 4: local %d/%d node %d/%d", lr, ls, ni, nn);
    int sparse[] = {9, 5, 5}; /* ids need not be dense: index = order among distinct ids */
    CHECK(dist_layout_from_nodes(sparse, 3, 0, &lr, &ls, &ni, &nn) == 0, "%s", ct_error());
    CHECK(lr == 0 && ls == 1 && ni == 1 && nn == 2, "sparse rank 0: local %d/%d node %d/%d", lr, ls, ni, nn);
    int negative[] = {0, -1};
    CHECK(dist_layout_from_nodes(negative, 2, 0, &lr, &ls, &ni, &nn) < 0, "negative node id accepted");
    CHECK(dist_layout_from_nodes(two_by_two, 4, 4, &lr, &ls, &ni, &nn) < 0, "rank 4 of 4 accepted");
}

static void tasks_per_node(void) {
    CHECK(dist_tasks_on_node("2(x3),1", 0) == 2, "node 0");
    CHECK(dist_tasks_on_node("2(x3),1", 2) == 2, "node 2");
    CHECK(dist_tasks_on_node("2(x3),1", 3) == 1, "node 3");
    CHECK(dist_tasks_on_node("4,1", 1) == 1, "4,1 node 1");
    CHECK(dist_tasks_on_node("8", 0) == 8, "8 node 0");
    CHECK(dist_tasks_on_node("2(x3),1", 4) < 0, "node 4 of 4 accepted");
    CHECK(strstr(ct_error(), "no entry for node 4"), "message: %s", ct_error());
    const char *bad[] = {"", "x", "2(x)", "2(3)", "2(x0)", "2,,1", "2,", "2(x2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(dist_tasks_on_node(bad[i], 0) < 0 || dist_tasks_on_node(bad[i], 5) < 0, "'%s' accepted", bad[i]);
    CHECK(dist_tasks_on_node(NULL, 0) < 0, "NULL accepted");
}

static void hex(void) {
    unsigned char all[256], back[256];
    char text[513];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
    dist_hex_encode(all, sizeof all, text);
    CHECK(strlen(text) == 512 && !strncmp(text, "000102", 6) && !strcmp(text + 506, "fdfeff"), "text %.12s", text);
    CHECK(dist_hex_decode(text, back, sizeof back) == 0 && !memcmp(all, back, sizeof all), "%s", ct_error());
    CHECK(dist_hex_decode("ABcd", back, 2) == 0 && back[0] == 0xab && back[1] == 0xcd, "upper case");
    CHECK(dist_hex_decode("abc", back, 2) < 0, "odd length accepted");
    CHECK(dist_hex_decode("abcdef", back, 2) < 0, "too long accepted");
    CHECK(dist_hex_decode("zz", back, 1) < 0 && strstr(ct_error(), "non-hex"), "zz accepted: %s", ct_error());
    dist_hex_encode(all, 0, text);
    CHECK(text[0] == '\0', "empty");
}

static void rank_map_line(void) {
    DistEntry e[4];
    dist_entry_set(&e[0], 0, 0, "n1");
    dist_entry_set(&e[1], 1, 1, "n1");
    dist_entry_set(&e[2], 2, 0, "n2");
    dist_entry_set(&e[3], 3, 1, "bad;name=x y");
    char buf[256];
    CHECK(dist_format_rank_map(e, 4, buf, sizeof buf) == 0, "%s", ct_error());
    CHECK(!strcmp(buf, "rank map (rank=host/local_rank): 0=n1/0 1=n1/1 2=n2/0 3=bad_name_x_y/1"), "'%s'", buf);

    /* 1000 ranks do not fit in 200 bytes: the line is cut with a count of what is missing. */
    DistEntry *many = malloc(1000 * sizeof *many);
    for (int i = 0; i < 1000; i++) dist_entry_set(&many[i], i, i % 8, "node-with-a-long-name");
    char small[200];
    int rc = dist_format_rank_map(many, 1000, small, sizeof small);
    free(many);
    CHECK(rc == 0, "%s", ct_error());
    CHECK(strlen(small) < sizeof small && strstr(small, "more)") && strstr(small, " 0=node-with-a-long-name/0"),
          "'%s'", small);
    CHECK(dist_format_rank_map(e, 4, buf, 16) < 0, "16-byte buffer accepted");
}

/* dist_agree with one rank: no collective; a failure keeps its message; a stop asked for fails
 * through stop_abandon (exit 75's path) unless only errors are agreed on; an error after a stop
 * undone is an error. In a child process: it installs the stop handlers and signals itself. */
static void single_rank_agreement(void) {
    clear_launch_env();
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        DistInfo d;
        if (dist_init(&d, 1, 5) != 0) _exit(2);
        if (dist_agree(&d, 0, "the work") != 0 || dist_agree_errors(&d, 0, "the work") != 0) _exit(3);
        ct_fail("boom");
        if (dist_agree(&d, -1, "the work") != -1 || strcmp(ct_error(), "boom") != 0 || stop_abandoned()) _exit(4);
        if (stop_install("USR1") != 0 || raise(SIGTERM) != 0 || !stop_requested()) _exit(5);
        if (dist_agree_errors(&d, 0, "the work") != 0) _exit(6); /* the stop is the caller's */
        if (dist_agree(&d, 0, "the work") != -1 || !stop_abandoned() ||
            strcmp(ct_error(), "stopped by a signal during the work") != 0)
            _exit(7);
        stop_abandon_undo();
        if (stop_abandoned()) _exit(8);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d (exit %d: the check that failed)", status,
          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* A step that outlasts its timeout ends the process with a message naming rank and step. */
static void watchdog_ends_a_hang(void) {
    clear_launch_env();
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        DistInfo d;
        if (dist_init(&d, 0, 0.2) < 0) _exit(3);
        dist_watchdog_arm(0.2, "a test wait (%s)", "nobody comes");
        sleep(20);
        _exit(0);
    }
    close(fds[1]);
    char out[2048];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fds[0], out + len, sizeof out - 1 - len)) > 0) len += (size_t)r;
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status %d", status);
    CHECK(strstr(out, "ctrain: error: rank 0 (") && strstr(out, "timed out after 0.2 s in a test wait (nobody comes)"),
          "stderr: %.400s", out);
}

static void watchdog_disarm_in_time(void) {
    clear_launch_env();
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dist_watchdog_arm(0.3, "short");
        usleep(50 * 1000);
        dist_watchdog_disarm();
        usleep(500 * 1000);
        dist_watchdog_stop();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "disarmed watchdog fired (status %d)", status);
}

int main(void) {
    RUN(single_launch);
    RUN(single_collectives_are_noops);
    RUN(batch_script_is_single);
    RUN(srun_without_pmi);
    RUN(process_mapping);
    RUN(layout);
    RUN(tasks_per_node);
    RUN(hex);
    RUN(rank_map_line);
    RUN(single_rank_agreement);
    RUN(watchdog_ends_a_hang);
    RUN(watchdog_disarm_in_time);
    TEST_EXIT();
}
