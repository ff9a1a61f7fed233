#!/usr/bin/env bash
# test_launch.sh — `ctrain launch-check` under real launchers: plainly, MPICH's mpiexec (hydra,
# no Slurm), and srun --mpi=pmi2 on a throwaway two-node Slurm cluster (tests/slurm/cluster.sh):
# rank maps with the right local ranks and node indices, the KVS exchange (PMI2, no MPI), the
# MPI collectives, a clear error without PMI2, the GPU path's start-up checks (two ranks on one
# GPU, refused unless NCCL_MULTI_RANK_GPU_ENABLE=1; --nccl without a GPU), an sbatch script,
# and a rank killed with SIGKILL during a hang ending the whole job within seconds. Takes about
# 30 seconds.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli/lib.sh"

# Whatever launched the test run (an outer Slurm job, mpiexec) must not leak into ours.
for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL|NCCL_MULTI_RANK)'); do unset "$v"; done

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# map_is NAME FILE "0=n1/0 1=n1/1": the rank map line lists exactly these entries.
map_is() {
    local got
    got=$(sed -n 's/^rank map (rank=host\/local_rank): //p' "$2" | head -n 1)
    if [ "$got" = "$3" ]; then pass "$1"; else fail "$1" "rank map '$got', expected '$3' :: $(tail -c 300 "$WORK/err")"; fi
}

# run_ok NAME CMD...: CMD exits 0 and prints the OK line; output in $WORK/out, $WORK/err.
run_ok() {
    local name=$1; shift
    timeout 90 "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    if [ $rc -ne 0 ]; then fail "$name" "exit $rc from: $* :: $(tail -c 600 "$WORK/err")"; return 1; fi
    if ! grep -qE '^launch-check: [0-9]+ ranks on [0-9]+ nodes OK$' "$WORK/out"; then
        fail "$name" "no OK line from: $* :: $(tail -c 400 "$WORK/out")"; return 1
    fi
    pass "$name"
}

if ! "$CTRAIN" launch-check --help >/dev/null 2>&1; then
    fail launch_check_exists "'$CTRAIN launch-check' is not a command (src/cli/main.c must dispatch it to launch_check_main)"
    exit 1
fi

# ---- without Slurm ----
run_ok plain_single "$CTRAIN" launch-check --timeout 10 &&
    expect_grep plain_single_output '^launch-check: 1 ranks on 1 nodes OK$' "$WORK/out"
expect_grep plain_single_launcher 'launcher single,' "$WORK/out"

if command -v mpiexec >/dev/null 2>&1; then
    # -launcher fork: start the ranks here even if this runs inside an allocation.
    run_ok mpiexec_2_mpi mpiexec -launcher fork -n 2 "$CTRAIN" launch-check --timeout 20 &&
        map_is mpiexec_2_map "$WORK/out" "0=$(hostname)/0 1=$(hostname)/1"
    expect_grep mpiexec_2_uses_mpi 'launcher pmi2 \+ MPI, 2 ranks on 1 nodes' "$WORK/out"
    run_ok mpiexec_3_pmi2_kvs mpiexec -launcher fork -n 3 "$CTRAIN" launch-check --no-mpi --timeout 20 &&
        expect_grep mpiexec_3_pmi2_launcher 'launcher pmi2, 3 ranks on 1 nodes' "$WORK/out"
    # two ranks on one GPU with NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL >= 2.30): allowed, with one
    # warning (the refusals are checked under srun below: hydra may drop a rank's last words
    # when another rank's abort ends the job)
    run_ok mpiexec_shared_gpu_enabled env NCCL_MULTI_RANK_GPU_ENABLE=1 mpiexec -launcher fork -n 2 "$CTRAIN" launch-check \
        --no-mpi --gpu-id GPU-same --timeout 20
    expect_grep mpiexec_shared_gpu_warns '^ctrain: warning: ranks 0, 1 share GPU GPU-same on .* because NCCL_MULTI_RANK_GPU_ENABLE=1' "$WORK/err"
    if [ "$(grep -c 'share GPU' "$WORK/err")" = 1 ]; then pass mpiexec_shared_gpu_warns_once
    else fail mpiexec_shared_gpu_warns_once "$(grep 'share GPU' "$WORK/err")"; fi
else
    for c in mpiexec_2_mpi mpiexec_2_map mpiexec_2_uses_mpi mpiexec_3_pmi2_kvs mpiexec_3_pmi2_launcher \
             mpiexec_shared_gpu_enabled mpiexec_shared_gpu_warns mpiexec_shared_gpu_warns_once; do
        skip "$c" "mpiexec not installed (apt-get install mpich)"
    done
fi

# ---- the Slurm cluster ----
cluster=$WORK/cluster
if [ "$(id -u)" != 0 ]; then
    skip_rest "needs root to run slurmd (it starts job steps as the submitting user)"
fi
for b in munged slurmctld slurmd srun sbatch; do
    if ! command -v $b >/dev/null 2>&1; then
        skip_rest "$b not installed (apt-get install munge slurm-wlm)"
    fi
done
trap 'bash "$here/cluster.sh" stop "$cluster" >/dev/null 2>&1' EXIT
if ! bash "$here/cluster.sh" start "$cluster" --nodes 2 >"$WORK/cluster.log" 2>&1; then
    tail -n 40 "$WORK/cluster.log"
    fail cluster_start "the test cluster did not start on this machine: $(grep '^cluster.sh:' "$WORK/cluster.log" | tail -n 1)"
    exit 1
fi
pass cluster_start
. "$cluster/env.sh"

# One node (pinned to n1 so that the map is known), 1/2/4 ranks (MPI for 2 and 4).
run_ok srun_1 srun -N 1 -n 1 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --timeout 20 &&
    map_is srun_1_map "$WORK/out" "0=n1/0"
run_ok srun_2 srun -N 1 -n 2 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --timeout 20 &&
    map_is srun_2_map "$WORK/out" "0=n1/0 1=n1/1"
run_ok srun_4 srun -N 1 -n 4 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --timeout 20 &&
    map_is srun_4_map "$WORK/out" "0=n1/0 1=n1/1 2=n1/2 3=n1/3"
expect_grep srun_4_uses_mpi 'launcher pmi2 \+ MPI, 4 ranks on 1 nodes' "$WORK/out"

# Two nodes, two ranks each: local ranks restart at 0 on n2, node indices 0 and 1.
run_ok srun_2x2_mpi srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmi2 "$CTRAIN" launch-check --timeout 20 &&
    map_is srun_2x2_mpi_map "$WORK/out" "0=n1/0 1=n1/1 2=n2/0 3=n2/1"
expect_grep srun_2x2_mpi_nodes '^launch-check: 4 ranks on 2 nodes OK$' "$WORK/out"

# The GPU path: libpmi2 only, the blob travels through the PMI2 KVS (put, fence, get).
run_ok srun_2x2_kvs srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --timeout 20 &&
    map_is srun_2x2_kvs_map "$WORK/out" "0=n1/0 1=n1/1 2=n2/0 3=n2/1"
expect_grep srun_2x2_kvs_launcher 'launcher pmi2, 4 ranks on 2 nodes' "$WORK/out"

# Cyclic distribution over 2 nodes: the PMI_process_mapping vector repeats.
run_ok srun_cyclic srun -N 2 -n 4 --ntasks-per-node=2 -m cyclic --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --timeout 20 &&
    map_is srun_cyclic_map "$WORK/out" "0=n1/0 1=n2/0 2=n1/1 3=n2/1"

# Without PMI2 the ranks cannot find each other: a clear error, not 2 separate trainings.
expect_fail srun_without_pmi2 1 'without PMI2.*--mpi=pmi2' \
    timeout 60 srun -N 1 -n 2 --mpi=none "$CTRAIN" launch-check --timeout 10

# The GPU path's start-up checks, on nodes without GPUs: each failure within seconds, naming ranks
# and host. fails_fast NAME PATTERN CMD...: non-zero exit in under 30 s, PATTERN on stderr.
fails_fast() {
    local name=$1 pattern=$2; shift 2
    local t0; t0=$(now)
    timeout 90 "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$? took; took=$(elapsed "$t0")
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name" "exit $rc after ${took} s :: $(tail -c 400 "$WORK/err")"
    elif awk -v t="$took" 'BEGIN { exit !(t >= 30) }'; then fail "$name" "took ${took} s (limit 30 s)"
    elif ! grep -qE -- "$pattern" "$WORK/err"; then fail "$name" "stderr lacks /$pattern/: $(tail -c 400 "$WORK/err")"
    else pass "$name"; fi
}
# two ranks on one GPU (the placement check over the PMI2 KVS, GPU identities given)
fails_fast gpu_placement_duplicate 'ranks 0 and 1 both use GPU GPU-test-1 on n1 ' \
    srun -N 1 -n 2 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --gpu-id GPU-test-1 --timeout 10
expect_grep gpu_placement_says_what_to_do 'srun --gpus-per-task=1' "$WORK/err"
expect_grep gpu_placement_names_sharing 'to let two ranks share a GPU for a test: NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL >= 2\.30' "$WORK/err"
fails_fast gpu_placement_zero_refused 'ranks 0 and 1 both use GPU GPU-test-1 on n1 ' \
    env NCCL_MULTI_RANK_GPU_ENABLE=0 srun -N 1 -n 2 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --gpu-id GPU-test-1 --timeout 10
# ... shared when NCCL_MULTI_RANK_GPU_ENABLE=1, two per GPU at most
run_ok gpu_placement_shared_enabled env NCCL_MULTI_RANK_GPU_ENABLE=1 \
    srun -N 1 -n 2 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --gpu-id GPU-test-1 --timeout 20
expect_grep gpu_placement_shared_warns '^ctrain: warning: ranks 0, 1 share GPU GPU-test-1 on n1 .*NCCL_MULTI_RANK_GPU_ENABLE=1' "$WORK/err"
fails_fast gpu_placement_three_refused 'ranks 0, 1, 2 all use GPU GPU-test-1 on n1 .*at most 2 ranks share a GPU' \
    env NCCL_MULTI_RANK_GPU_ENABLE=1 srun -N 1 -n 3 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --no-mpi --gpu-id GPU-test-1 --timeout 10
# ... and one GPU each, on two nodes
run_ok gpu_placement_distinct srun -N 2 -n 4 --ntasks-per-node=2 --mpi=pmi2 \
    bash -c 'exec "$0" launch-check --no-mpi --gpu-id "GPU-test-$SLURM_PROCID" --timeout 20' "$CTRAIN"
# the NCCL path on nodes without a GPU: every rank names itself
fails_fast nccl_without_gpu 'rank [01] \(n1\): device = cuda: (no CUDA device found|this ctrain was built without CUDA)' \
    srun -N 1 -n 2 -w n1 --mpi=pmi2 "$CTRAIN" launch-check --nccl --timeout 10

# As users run it: the first step of an sbatch script.
cat >"$WORK/job.sh" <<EOF
#!/bin/bash
#SBATCH -N 2 -n 4 --ntasks-per-node=2 -o $WORK/job.out
srun --mpi=pmi2 "$CTRAIN" launch-check --timeout 20 || exit 1
EOF
if timeout 90 sbatch -W "$WORK/job.sh" >"$WORK/out" 2>"$WORK/err"; then
    expect_grep sbatch_script '^launch-check: 4 ranks on 2 nodes OK$' "$WORK/job.out"
else
    fail sbatch_script "sbatch -W failed: $(cat "$WORK/err") $(tail -c 400 "$WORK/job.out" 2>/dev/null)"
fi

# A rank killed with SIGKILL while the others wait for it: the others time out after 5 s,
# name themselves and the step, and end the step (MPI_Abort / PMI2_Abort), even though srun
# without --kill-on-bad-exit would let them wait forever.
killed_rank_ends_job() { # NAME "SRUN ARGS" ["LAUNCH-CHECK ARGS"]
    local name=$1 srun_args=$2 lc_args=${3:-}
    local err=$WORK/$name.err
    : >"$err"
    # shellcheck disable=SC2086 # word splitting of the argument lists is intended
    timeout 90 srun $srun_args --mpi=pmi2 "$CTRAIN" launch-check $lc_args --hang-rank 1 --timeout 5 \
        >"$WORK/$name.out" 2>"$err" &
    local srun_pid=$! pid=""
    for _ in $(seq 1 200); do
        pid=$(sed -n 's/.*hangs now as asked by --hang-rank (pid \([0-9]*\)).*/\1/p' "$err")
        [ -n "$pid" ] && break
        sleep 0.1
    done
    if [ -z "$pid" ]; then
        kill "$srun_pid" 2>/dev/null; wait "$srun_pid"
        fail "$name" "rank 1 never reported its pid :: $(tail -c 600 "$err")"; return
    fi
    local t0; t0=$(now)
    kill -KILL "$pid"
    wait "$srun_pid"
    local rc=$? took; took=$(elapsed "$t0")
    echo "$name: job ended ${took} s after SIGKILL of rank 1 (srun exit $rc)"
    if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then fail "$name" "srun exit $rc after ${took} s :: $(tail -c 600 "$err")"
    elif awk -v t="$took" 'BEGIN { exit !(t >= 30) }'; then fail "$name" "job took ${took} s to end (limit 30 s)"
    elif ! grep -qE 'ctrain: error: rank [023] \((n1|n2)\): timed out after 5 s in ' "$err"; then
        fail "$name" "no timeout message naming a rank and step :: $(tail -c 600 "$err")"
    else pass "$name"; fi
}
killed_rank_ends_job killed_rank_mpi "-N 1 -n 4"
killed_rank_ends_job killed_rank_pmi2_kvs "-N 2 -n 4 --ntasks-per-node=2" --no-mpi
grep -h 'timed out' "$WORK"/killed_rank_*.err | head -n 2 | sed 's/^/  example: /'

daemons=$(awk '{print $2}' "$cluster/run/pids")
if bash "$here/cluster.sh" stop "$cluster" >"$WORK/stop.log" 2>&1; then pass cluster_stop
else fail cluster_stop "$(cat "$WORK/stop.log")"; fi
trap - EXIT
still=""
for p in $daemons; do kill -0 "$p" 2>/dev/null && still="$still $p"; done
if [ -n "$daemons" ] && [ -z "$still" ]; then pass cluster_gone
else fail cluster_gone "daemons still running after stop: '$still' (started: '$daemons')"; fi

finish
