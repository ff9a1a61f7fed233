#!/usr/bin/env bash
# test_device_pack.sh — the GPU check without a GPU (issue 33): scripts/gpu-pack.sh (`make
# gpu-pack`) makes its tarball from this build, under the size cap; unpacked elsewhere, every
# packed program finds its non-system libraries inside the package, and its ctrain runs
# (--version, a tiny CPU training) and its mpiexec starts two ranks with nothing else on PATH.
# The package's scripts/gpu-check.sh, run here, reports every GPU stage as not run (never
# PASS), stops a stage at its time limit with everything it started, passes a stage that can run
# here (cpu-scaling, cut down), refuses an unknown stage; scripts/gpu_summary.py lists what ran
# and what did not, merges two calls' folders (the latest run of a stage counts) and fails on a
# folder without logs. Packing takes about 15 s.
source "$CT_ROOT/tests/cli/lib.sh"
command -v patchelf >/dev/null || skip_rest "patchelf is not installed (scripts/install-deps.sh)"
"$CTRAIN" --version | grep -q '^cuda: yes' || skip_rest "this build has no CUDA (nvcc not found): there is nothing to pack"
git -C "$CT_ROOT" rev-parse HEAD >/dev/null 2>&1 || skip_rest "$CT_ROOT is not a git checkout"
PY=/usr/bin/python3

# a stand-in for NCCL >= 2.30 (the real one is a test dependency built by scripts/build-nccl.sh)
mkdir -p nccl && echo "not a library" | xz >nccl/libnccl.so.2.99.0.xz && echo "license" >nccl/LICENSE.txt
expect_ok pack_made bash "$CT_ROOT/scripts/gpu-pack.sh" "$CT_BUILD" "$WORK/p/pack.tar.gz" "$WORK/nccl"
size=$(stat -c %s p/pack.tar.gz 2>/dev/null || echo 0)
if [ "$size" -gt 0 ] && [ "$size" -le $((60 * 1048576)) ]; then pass pack_under_cap; echo "package: $((size / 1048576)) MiB"
else fail pack_under_cap "$size bytes (cap 60 MiB)"; fi
mkdir -p elsewhere && tar -xzf p/pack.tar.gz -C elsewhere && pass pack_unpacks || fail pack_unpacks "tar failed"
top=$WORK/elsewhere/ctrain-gpu-pack
missing=
for f in PACK.txt build/ctrain build/tests/test_gpu_ops build/tests/test_gpu_optim build/tests/test_gpu_step \
         build/bench/bench_gpu_step build/bench/bench_gpu_attention build/bench/bench_gpu_ops bin/mpiexec \
         bin/hydra_pmi_proxy scripts/gpu-check.sh scripts/gpu_summary.py tests/run.sh tests/manifest.txt \
         tests/cli/lib.sh tests/cli/test_nccl_gpu.sh tests/cli/test_nccl_ranks.sh tests/bench/step_vs_train_gpt.sh \
         tests/bench/attention_vs_sdpa.sh tests/bench/nccl_overhead.sh tests/bench/checkpoint_stall.sh \
         tests/bench/cpu_scaling.sh tests/bench/graph_vs_launches.sh tests/bench/step_profile.sh tests/bench/ncu_ops.py \
         tests/parity/ref_gpt.py nccl/libnccl.so.2.99.0.xz \
         nccl/LICENSE.txt; do
    [ -e "$top/$f" ] || missing+=" $f"
done
[ -z "$missing" ] && pass pack_layout || fail pack_layout "missing:$missing"
expect_grep pack_names_commit "^commit: $(git -C "$CT_ROOT" rev-parse HEAD)" "$top/PACK.txt"
expect_grep pack_names_nccl '^nccl_multi_rank: nccl/libnccl.so.2.99.0.xz' "$top/PACK.txt"

# every packed program's libraries: inside the package, or the system's (C library, compiler
# runtime, CUDA); nothing missing
system='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'
bad=
for p in "$top"/build/ctrain "$top"/build/tests/* "$top"/build/bench/* "$top"/bin/mpiexec.hydra "$top"/bin/hydra_pmi_proxy; do
    while read -r lib arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [[ "$lib" =~ $system ]] && continue
        case "$(readlink -f "$path" 2>/dev/null)" in "$top"/lib/*) ;; *) bad+=" $(basename "$p"):$lib=>$path" ;; esac
    done < <(env -u LD_LIBRARY_PATH ldd "$p")
done
[ -z "$bad" ] && pass pack_libraries_inside || fail pack_libraries_inside "$bad"

# run from elsewhere with only the package's libraries
cd /tmp
expect_ok pack_version env LD_LIBRARY_PATH="$top/lib" "$top/build/ctrain" --version
expect_grep pack_version_hdf5 '^hdf5: 1\.' "$WORK/out"
cd "$WORK"
"$CTRAIN" data from-text --out train.h5 --val-out val.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || fail pack_data "from-text failed"
expect_ok pack_trains env LD_LIBRARY_PATH="$top/lib" "$top/build/ctrain" train train_files=train.h5 val_files=val.h5 \
    vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16 train_batch_tokens=256 \
    grad_accum_slots=2 iterations=3 val_loss_every=0 threads=1 device=cpu out_dir=run
expect_ok pack_mpiexec env -i PATH="$top/bin" HOME="$WORK" "$top/bin/mpiexec" -launcher fork -n 2 "$top/build/ctrain" \
    launch-check --no-mpi --timeout 30
expect_grep pack_mpiexec_two_ranks '^launch-check: 2 ranks on 1 nodes OK$' "$WORK/out"

# the check itself, here: no GPU, so every GPU stage is not run; cpu-scaling (300 s expected)
# does not fit a 60 s budget
check="$top/scripts/gpu-check.sh"
GPU_CHECK_OUT=$WORK/c1 GPU_CHECK_BUDGET=60 bash "$check" >c1.out 2>&1
rc=$?
gpu_stages=$(bash "$check" --list | awk 'NR > 1 && $2 == "yes" {print $1}')
verdicts=$(for s in $gpu_stages; do sed -n "s/^GPU-CHECK result: //p" "c1/$s.log" 2>/dev/null | sed "s/^/$s /"; done)
if [ $rc -eq 0 ] && [ "$(echo "$verdicts" | grep -c ' NOT-RUN$')" -eq "$(echo "$gpu_stages" | wc -w)" ] &&
    [ "$(echo "$gpu_stages" | wc -w)" -ge 10 ]; then pass check_gpu_stages_not_run
else fail check_gpu_stages_not_run "exit $rc; $(echo "$verdicts" | tr '\n' ';') :: $(tail -c 300 c1.out)"; fi
if grep -h '^GPU-CHECK result: PASS' c1/*.log >/dev/null 2>&1; then fail check_nothing_passes "$(grep -l 'result: PASS' c1/*.log)"
else pass check_nothing_passes; fi
expect_grep check_says_no_gpu '^GPU-CHECK why: no GPU visible' c1/test-gpu.log
expect_grep check_budget_not_run '^GPU-CHECK why: no time left in this call: [0-9]+ s of the budget remain, the stage expects 300 s' c1/cpu-scaling.log
n_stages=$(bash "$check" --list | awk 'NR > 1' | wc -l)
expect_grep summary_counts "Made by .* 0 passed, 0 failed, $n_stages not run, of $n_stages stages" c1/summary.md
expect_grep summary_rows '^\| two-ranks \| not run \| .* \| no GPU visible' c1/summary.md
expect_grep summary_still_to_do '^- `step-wide`: not run: no GPU visible' c1/summary.md
STAGE=test-gpu,bogus GPU_CHECK_OUT=$WORK/c0 bash "$check" >c0.out 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "unknown stage 'bogus'; the stages: test-gpu memcheck" c0.out && [ ! -e c0/test-gpu.log ]; then
    pass check_unknown_stage
else fail check_unknown_stage "exit $rc: $(tail -c 300 c0.out)"; fi

# a stage past its limit fails and takes what it started with it
GPU_CHECK_OUT=$WORK/c2 STAGE=cpu-scaling GPU_CHECK_STAGE_LIMIT=4 GPU_CHECK_CPU_THREADS=1 bash "$check" >c2.out 2>&1
expect_grep check_stage_limit '^GPU-CHECK why: stopped at its time limit of 4 s' c2/cpu-scaling.log
sleep 1
if pgrep -f "ctrain-scaling" >/dev/null; then fail check_stage_limit_kills "$(pgrep -af ctrain-scaling | head -3)"
else pass check_stage_limit_kills; fi
# ... and one that runs here passes, with its figures (2 steps of the benchmark model, 1 thread)
GPU_CHECK_OUT=$WORK/c3 STAGE=cpu-scaling GPU_CHECK_CPU_THREADS=1 BENCH_STEPS=1 CTRAIN_PYTHON=$PY bash "$check" >c3.out 2>&1
expect_grep check_cpu_stage_passes '^GPU-CHECK result: PASS' c3/cpu-scaling.log
expect_grep check_cpu_stage_figures '^BENCH cpu_scaling_ctrain_t1 [0-9]' c3/cpu-scaling.log

# the summary of both calls: the later pass counts, the earlier failure is noted
expect_ok summary_merges "$PY" "$top/scripts/gpu_summary.py" c2 c3 -o merged.md
expect_grep summary_latest_run '^\| cpu-scaling \| PASS \| .*\(1 earlier run\) \|$' merged.md
expect_grep summary_figures '^\| cpu-scaling \| cpu_scaling_ctrain_t1 \| [0-9]' merged.md
mkdir -p empty
expect_fail summary_without_logs 1 'no stage logs' "$PY" "$top/scripts/gpu_summary.py" empty

# the profile stage's table (tests/bench/ncu_ops.py) on a made-up ncu CSV of five kernels: ours
# by their function names (demangled, in nvcc's namespace for a static kernel, or bare), cuBLAS's
# two families merged, an unknown name listed by itself; floors from the bench's rates
cat >bench.log <<'EOF_'
BENCH gpu_peak_bf16_tflops 800
BENCH gpu_copy_tbps 2.5
BENCH gpu_baseline_step_ms 10
BENCH gpu_baseline_tokens_per_step 1000000
BENCH gpu_baseline_flops_per_token 2000000
BENCH gpu_baseline_attention_flops_per_token 600000
EOF_
ncu_csv() { # TIME_UNIT BYTE_UNIT SCALE_TIME SCALE_BYTES: the same five kernels in other units
    echo '"ID","Process ID","Kernel Name","Stream","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"'
    echo "\"\",\"\",\"\",\"\",\"$2\",\"$2\",\"$1\""
    awk -v st="$3" -v sb="$4" -F'|' '{printf "\"%d\",\"1\",\"%s\",\"7\",\"%s\",\"%s\",\"%s\"\n", NR-1, $1, $2/sb, $3/sb, $4/st}' <<'EOF_'
void attention_forward_kernel<64, 2>(const __nv_bfloat16 *, float *, int)|100000000|50000000|500000
void _INTERNAL_9a_cuda_rmsnorm_cu::rmsnorm_forward_kernel<true>(float *, const float *)|1000000000|1000000000|1000000
void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_32x4_nn_align8>(Params)|4000000|4000000|1500000
nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNT|4000000|4000000|1500000
mystery_kernel|1000|1000|100000
EOF_
}
ncu_csv nsecond byte 1 1 >ns.csv
ncu_csv usecond Kbyte 1000 1000 >us.csv
expect_ok profile_table "$PY" "$top/tests/bench/ncu_ops.py" ns.csv bench.log baseline
cp out profile.out
# products: 1.4e12 FLOPs at 800 TFLOP/s = 1.75 ms floor for 3 ms; the norm: 2 GB at 2.5 TB/s =
# 0.8 ms for 1 ms; attention forward: 2e11 FLOPs = 0.25 ms; 10 ms step less 4.6 ms of kernels
if grep -qx '| cuBLAS matrix products (model, Newton-Schulz) | 2 | 3.00 | 65.2% | 0.02 | 1.75 (0.01 / 1.75) | 1.7x |' profile.out &&
    grep -qx '| norms, residual mixes, scaled adds | 1 | 1.00 | 21.7% | 2.00 | 0.80 (0.80 / 0.00) | 1.2x |' profile.out &&
    grep -qx '| attention forward | 1 | 0.50 | 10.9% | 0.15 | 0.25 (0.06 / 0.25) | 2.0x |' profile.out &&
    grep -q '^| other: mystery_kernel | 1 | 0.10 |' profile.out &&
    grep -q '^| between kernels (launches, host, waits): step time less kernel time | | 5.40 |' profile.out &&
    grep -qx 'BENCH profile_kernel_ms_per_step 4.60' profile.out; then pass profile_table_rows
else fail profile_table_rows "$(head -c 1500 profile.out)"; fi
"$PY" "$top/tests/bench/ncu_ops.py" us.csv bench.log baseline >profile_us.out 2>&1
if cmp -s profile.out profile_us.out; then pass profile_units_converted
else fail profile_units_converted "$(diff profile.out profile_us.out | head -8)"; fi
cut -d, -f1-4,6- ns.csv >no_read.csv
expect_fail profile_names_missing_metric 1 "no_read.csv: no 'dram__bytes_read.sum' column" "$PY" "$top/tests/bench/ncu_ops.py" \
    no_read.csv bench.log baseline

finish
