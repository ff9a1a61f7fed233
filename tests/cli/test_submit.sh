#!/usr/bin/env bash
# test_submit.sh — slurm/submit before anything reaches the queue (no cluster needed; the array
# jobs themselves run on the test cluster in tests/slurm/test_train_ranks.sh): --help, --dry-run
# (sbatch and srun lines, world size, each sweep task's arguments and out_dir, the resolved
# configuration), a configuration refused for the job's world size or a bad sweep exits 2 and
# makes nothing, and a failed sbatch leaves no run folder behind. With a stand-in sbatch and srun:
# out_dir is ctrain's own (OUT_DIR, the config file, RUN_ID), every form of -n/-N in --sbatch sets
# the world size, and a sweep's out_dir may hold a comma (issue 61).
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
expect_grep refused_nothing_submitted 'the configuration is refused \(ctrain.s reason above; checked as a job of 16 ranks\); nothing submitted' err
expect_fail refused_task 2 "task 0 \(train_seq_len=1000\) is refused \(ctrain.s reason above; checked as a job of 4 ranks\)" \
    "$submit" --array 'train_seq_len=1000,1024' run.conf out_dir=wt
expect_fail bad_array_spec 2 "--array: 'matrix_lr' is not KEY=V1,V2" "$submit" --array matrix_lr run.conf
[ ! -e w16 ] && [ ! -e wt ] && pass refused_makes_nothing || fail refused_makes_nothing "$(ls)"

# ---- issue 61: what submit reports is what the job does ----
# A stand-in sbatch on PATH: it records its arguments, builds the job's environment as sbatch's
# --export does (a comma ends a NAME=value), and runs array task 0 (or the job) of the script at
# once with a stand-in srun that asks the job's ctrain (its arguments, its environment) for the
# configuration it would train with: the out_dir the job would train into.
mkdir fake
cat >fake/sbatch <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$FAKE_LOG/sbatch.calls"
while [ $# -gt 0 ]; do
    case "$1" in
        --export=*) IFS=, read -r -a ex <<<"${1#--export=}"
                    for e in "${ex[@]}"; do case "$e" in *=*) export "${e?}" ;; esac; done ;;
        --array=*) export SLURM_ARRAY_TASK_ID=0 ;;
        *.sbatch) break ;;
    esac
    shift
done
script=$1
shift
SLURM_JOB_ID=1 CTRAIN_LAUNCH_CHECK=0 bash "$script" "$@" >"$FAKE_LOG/job.out" 2>&1
echo "Submitted batch job 1"
EOF
printf '#!/usr/bin/env bash\nwhile [ "${1#-}" != "$1" ]; do shift; done\n"$@" --print-config >"$FAKE_LOG/job.config"\n' >fake/srun
chmod +x fake/sbatch fake/srun
export FAKE_LOG=$WORK
# the out_dir the job's ctrain resolved (none: the job did not start)
job_out_dir() { [ -f job.config ] && sed -n 's/^out_dir = //p' job.config; }
fake_submit() { rm -f job.config; PATH=$WORK/fake:$PATH "$submit" "$@"; }

# out_dir as ctrain resolves it: OUT_DIR in upper case on the line, in the environment, the config
# file's, RUN_ID; the job's log goes there and the job trains there
expect_ok out_dir_upper_case_arg fake_submit run.conf OUT_DIR=o61/up iterations=5
expect_grep out_dir_upper_case_reported '^out_dir: o61/up$' out
expect_same out_dir_upper_case_job 'out_dir' "$(job_out_dir)" o61/up
expect_grep out_dir_upper_case_log '--output=o61/up/slurm-%j\.out ' sbatch.calls
OUT_DIR=o61/env expect_ok out_dir_env fake_submit run.conf
expect_grep out_dir_env_reported '^out_dir: o61/env$' out
printf 'train_files = data/train.h5\nout_dir = o61/file\n' >dir.conf
expect_ok out_dir_config_file fake_submit dir.conf
expect_same out_dir_config_file_job 'out_dir' "$(grep '^out_dir: ' out) $(job_out_dir)" "out_dir: o61/file o61/file"
RUN_ID=r61 expect_ok out_dir_run_id fake_submit --dry-run --array 'seed=1,2' run.conf
expect_grep out_dir_run_id_tasks '^task 1: seed=2 -> out_dir runs/r61/1-seed=2$' out
expect_ok out_dir_default fake_submit --dry-run --name nm run.conf
expect_grep out_dir_default_stamp '--output=runs/nm-[0-9]{8}T[0-9]{6}Z/slurm-%j\.out ' out

# every form sbatch reads -n/--ntasks and -N/--nodes in sets the world size checked
for form in -n8 '-n 8' --ntasks=8 '--ntasks 8' '-N2 --ntasks-per-node=4' '--nodes 2' '-N 2-4'; do
    "$submit" --dry-run --sbatch "$form" run.conf >form.out 2>&1
    echo "$form: $(grep '^world size' form.out || tail -1 form.out)"
done >forms.txt
expect_same sbatch_forms_world 'world sizes' "$(cat forms.txt)" "$(printf '%s\n' '-n8: world size: 8 ranks (1 node(s))' \
    '-n 8: world size: 8 ranks (1 node(s))' '--ntasks=8: world size: 8 ranks (1 node(s))' \
    '--ntasks 8: world size: 8 ranks (1 node(s))' '-N2 --ntasks-per-node=4: world size: 8 ranks (2 node(s))' \
    '--nodes 2: world size: 8 ranks (2 node(s))' '-N 2-4: world size: 8 ranks (2 node(s))')"
expect_ok sbatch_attached_nodes "$submit" --dry-run --sbatch "-p cpu" --sbatch "-N2" run.conf
expect_grep sbatch_attached_nodes_world '^world size: 8 ranks \(2 node\(s\)\)$' out
# -N4 makes 16 ranks, which grad_accum_slots = 8 refuses: before the queue, not after it
expect_fail sbatch_attached_refused 2 'checked as a job of 16 ranks\); nothing submitted' fake_submit --sbatch "-N4" run.conf out_dir=n4
expect_fail sbatch_n_equals 2 "'-N=2': sbatch would read '=2' as -N's value.*write -N2 or -N 2" \
    "$submit" --dry-run --sbatch "-N=2" run.conf
expect_fail sbatch_bad_count 2 "'--ntasks=eight': sbatch would read 'eight' as --ntasks's value, which is not a number" \
    "$submit" --dry-run --sbatch "--ntasks=eight" run.conf

# sweeps: a comma in out_dir reaches the array task whole; a key twice, a quote, or out_dir as a
# task's key are refused naming the spec or the line, and nothing is submitted
expect_ok sweep_comma_out_dir fake_submit --array 'seed=1,2' run.conf out_dir=o61/a,b
expect_same sweep_comma_out_dir_job 'out_dir' "$(job_out_dir)" 'o61/a,b/0-seed=1'
rm -f sbatch.calls
expect_fail sweep_key_twice 2 "--array 'seed=1,2 SEED=3': seed is given twice \('seed=1,2' and 'SEED=3'\)" \
    fake_submit --array 'seed=1,2 SEED=3' run.conf out_dir=k2
printf 'seed=1\nseed=2 matrix_lr=0.1 seed=3\n' >twice.lines
expect_fail sweep_file_key_twice 2 "twice\.lines:2: seed is given twice \('seed=2' and 'seed=3'\)" \
    fake_submit --array-file twice.lines run.conf out_dir=k3
printf "seed=1\n# a note\nseed=2 tag=it's\n" >quote.lines
expect_fail sweep_file_quote 2 "quote\.lines:3: a quote in 'seed=2 tag=it's'" \
    fake_submit --array-file quote.lines run.conf out_dir=k4
expect_fail sweep_out_dir_key 2 "'OUT_DIR=x,y': each task trains into <out_dir>/<index>-<its key values>" \
    fake_submit --array 'OUT_DIR=x,y' run.conf out_dir=k5
if [ ! -e sbatch.calls ] && [ ! -e n4 ] && [ ! -e k2 ] && [ ! -e k3 ] && [ ! -e k4 ] && [ ! -e k5 ]; then
    pass refusals_submit_nothing
else fail refusals_submit_nothing "$(ls; cat sbatch.calls 2>&1)"; fi

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
