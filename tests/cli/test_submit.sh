#!/usr/bin/env bash
# test_submit.sh — slurm/submit before anything reaches the queue (no cluster needed; the array
# jobs themselves run on the test cluster in tests/slurm/test_train_ranks.sh): --help, --dry-run
# (sbatch and srun lines, world size, each sweep task's arguments and out_dir, the resolved
# configuration), a configuration refused for the job's world size or a bad sweep exits 2 and
# makes nothing, and a failed sbatch leaves no run folder behind.
source "$CT_ROOT/tests/cli/lib.sh"
submit=$CT_ROOT/slurm/submit
export CTRAIN
printf 'train_files = data/train.h5\nnum_layers = 2\n' >run.conf

expect_ok help "$submit" --help
expect_grep help_usage '^usage: slurm/submit ' out
if grep -qE '^(set -|here=|while |done)' out; then fail help_only_help "$(head -c 300 out)"; else pass help_only_help; fi

expect_ok dry_run_sweep "$submit" --dry-run --array 'matrix_lr=0.02,0.04 seed=1,2' run.conf iterations=5 out_dir=sw
cp out dry.out
expect_grep dry_sbatch_line '^sbatch: sbatch .*--array=0-3 .*slurm/train-cpu\.sbatch --config run\.conf out_dir=sw iterations=5' dry.out
expect_grep dry_srun_line '^srun \(in the job\): srun --mpi=pmi2 --kill-on-bad-exit=1 --cpu-bind=cores .* train device=cpu --config run\.conf' dry.out
expect_grep dry_world '^world size: 4 ranks \(1 node\(s\)\)$' dry.out
expect_grep dry_task_grid '^task 3: matrix_lr=0\.04 seed=2 -> out_dir sw/3-matrix_lr=0\.04_seed=2$' dry.out
expect_grep dry_resolved_config '^  matrix_lr = 0\.02$' dry.out
expect_grep dry_resolved_task_out_dir '^  out_dir = sw/0-matrix_lr=0\.02_seed=1$' dry.out
expect_grep dry_nothing_submitted '^dry run: nothing submitted$' dry.out
[ ! -e sw ] && pass dry_run_makes_nothing || fail dry_run_makes_nothing "$(ls -R sw)"

printf '# lr sweep\nmatrix_lr=0.01 num_layers=3\n\nmatrix_lr=0.05   # the high one\n' >sweep.lines
expect_ok dry_run_file "$submit" --dry-run --array-file sweep.lines run.conf out_dir=sf
expect_grep file_tasks '^task 1: matrix_lr=0\.05 -> out_dir sf/1-matrix_lr=0\.05$' out
expect_ok dry_run_nodes "$submit" --dry-run --sbatch "-N 2 -p cpu" run.conf
expect_grep sbatch_nodes_world '^world size: 8 ranks \(2 node\(s\)\)$' out

# refused before the queue: 16 ranks do not divide grad_accum_slots = 8; a task's bad value
expect_fail refused_for_world 2 "grad_accum_slots = 8 is not divisible by the world size 16" \
    "$submit" --nodes 2 run.conf out_dir=w16
expect_grep refused_nothing_submitted 'the configuration is refused for 16 ranks; nothing submitted' err
expect_fail refused_task 2 "task 0 \(train_seq_len=1000\) is refused for 4 ranks" \
    "$submit" --array 'train_seq_len=1000,1024' run.conf out_dir=wt
expect_fail bad_array_spec 2 "--array: 'matrix_lr' is not KEY=V1,V2" "$submit" --array matrix_lr run.conf
[ ! -e w16 ] && [ ! -e wt ] && pass refused_makes_nothing || fail refused_makes_nothing "$(ls)"

# sbatch fails (no cluster here): no run folder, nor its new parent, is left behind. The real
# sbatch, given a slurm.conf it cannot use: it fails at once (with no slurm.conf at all it would
# look for a configless controller for a minute first)
echo "not a slurm.conf" >no-cluster.conf
SLURM_CONF=$WORK/no-cluster.conf expect_fail sbatch_failure 1 'sbatch failed; nothing submitted' \
    "$submit" run.conf out_dir=new/parent/run
[ ! -e new ] && pass sbatch_failure_leaves_nothing || fail sbatch_failure_leaves_nothing "$(ls -R new)"
SLURM_CONF=$WORK/no-cluster.conf expect_fail sbatch_failure_sweep 1 'sbatch failed' \
    "$submit" --array 'seed=1,2' run.conf
[ ! -e runs ] && pass sbatch_failure_sweep_leaves_nothing || fail sbatch_failure_sweep_leaves_nothing "$(ls -R runs)"
finish
