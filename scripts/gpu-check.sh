#!/usr/bin/env bash
# gpu-check.sh — the GPU check (issue 33): every GPU claim of the docs measured or checked on the
# GPU at hand, in stages that each fit in one 10-minute command, so a short GPU lease can run
# them one call at a time (docs/testing.md, "The GPU check"). Runs in an unpacked
# `make gpu-pack` package (ctrain-gpu-pack/) or in a checkout with a CUDA build.
#
#   bash scripts/gpu-check.sh --list            the stages: what each checks, GPU or not, expected time
#   STAGE=test-gpu,nccl-w1 bash scripts/gpu-check.sh   those stages, in that order
#   bash scripts/gpu-check.sh                   every stage in order, as long as the time budget lasts
#
# Each stage writes OUT/<stage>.log: its whole output, with `BENCH name value` lines for its
# figures, ending with `GPU-CHECK key: value` lines (result PASS, FAIL or NOT-RUN, why, start,
# seconds, and the GPU, driver, CUDA, NCCL and commit it ran with). At the end
# scripts/gpu_summary.py turns every log in OUT into OUT/summary.md (and prints it); it also
# merges the OUT folders of several calls or days into one summary.
#
# A stage that cannot run here (no GPU visible, no compute-sanitizer, no TRAIN_GPT_PY, no NCCL
# >= 2.30 for two ranks on one GPU, no time left) says NOT-RUN and why; it never passes. A stage
# that runs past its limit is killed with everything it started and FAILs.
#
# Environment:
#   STAGE              comma- or space-separated stage names (default: all, in --list order)
#   GPU_CHECK_OUT      where the logs and summary go (default: $OUT when set, as on the device
#                      machine, else ./gpu-check-out)
#   GPU_CHECK_BUDGET   seconds this call may take (default 560, inside the device tool's 600):
#                      a stage starts only when its expected time is left, and is stopped at the
#                      budget's end
#   GPU_CHECK_STAGE_LIMIT  seconds any one stage may run (default: the budget)
#   TRAIN_GPT_PY       parameter-golf's train_gpt.py, for the step stages (never packed or committed)
#   RECORD_TRAIN_GPT_PY  the 1.1248 record's train_gpt.py, for record-side (never packed or committed)
#   GPU_CHECK_NCCL_XZ  NCCL >= 2.30 for the two-rank stage (default: the package's nccl/libnccl.so.2.*.xz)
#   GPU_CHECK_CPU_THREADS  thread counts for cpu-scaling (default: 1 2 4 8 16 ... up to the cores)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
self="$root/scripts/gpu-check.sh"
build=${GPU_CHECK_BUILD:-$root/build}

# name | needs a GPU | expected seconds on an H100 machine (about 1.5-4x what the stage took on
# 2026-11-25, docs/testing.md; cpu-scaling from its one- and two-thread times there, its run
# having been cut short; record took about 70 s as a script before it was a stage; profile and
# record-side are estimates, not yet run; ttt an estimate from the record's TTT speed per GPU (47.9 M tokens in about 480 s on 8) at a third of it, plus its shards and model, plus 90 s for its second TTT run with CT_TTT_BASE_GRADS=1 (about 1.4x the first); frontier is an estimate from record's (17 block runs
# of a 4x MLP against 11 of a 3x one, about 1.8x its step; plus 90 s for its calibration and GPTQ artifact); convergence, and the bf16 runs added to step-baseline,
# step-wide and record, estimated from their step times there) | what
stage_table=(
    "test-gpu|1|60|make test-gpu: the *gpu* test programs (op table, optimizers, step, NCCL at world size 1, CUDA graph vs launches) with CT_REQUIRE_GPU=1, so a skip fails"
    "memcheck|1|60|compute-sanitizer memcheck on test_gpu_step"
    "racecheck|1|120|compute-sanitizer racecheck on every attention case of test_gpu_ops, one at a time"
    "nccl-w1|1|60|NCCL at world size 1: nccl=on (Muon updates broadcast, and summed with CT_MUON_COMBINE=allreduce) vs nccl=off over 20 baseline steps, final checkpoints bitwise, step-time overhead (target < 2%)"
    "two-ranks|1|120|two ranks on one GPU over real NCCL >= 2.30 (NCCL_MULTI_RANK_GPU_ENABLE=1) started by mpiexec: tests/cli/test_nccl_ranks.sh"
    "cuda-graph|1|60|CUDA graph vs launch by launch with real cuBLAS: 20 baseline steps bitwise, the step time of each; bench_gpu_step's small shape both ways"
    "attention|1|60|attention vs PyTorch SDPA (flash, cuDNN) at docs/performance.md's three shapes; the one-tile and two-tile forward builds in the same run"
    "checkpoint|1|60|the checkpoint stall: in-line vs background writes during baseline training"
    "step-baseline|1|260|whole step 9x512/T1024 beside train_gpt.py (TRAIN_GPT_PY) and ref_gpt.py: ms/step, MFU, peak memory (expected 9.3 GiB), ctrain with the residual stream in fp32 and in bf16"
    "step-wide|1|390|whole step 12x768/T2048 beside train_gpt.py and ref_gpt.py (20 steps), ctrain with the residual stream in fp32 and in bf16"
    "convergence|1|330|residual_dtype bf16 against fp32 (two seeds each) and train_gpt.py (TRAIN_GPT_PY): val_bpb on held-out text after 300 steps of 131,072 tokens (tests/bench/convergence_vs_train_gpt.sh)"
    "profile|1|180|where one baseline step's GPU time goes: every kernel of a whole step under ncu, per op class its time, DRAM bytes and floor (bytes over the copy rate, FLOPs over the product rate): tests/bench/step_profile.sh"
    "record|1|300|the 1.1248 record's configuration (slurm/golf-record-8xh100.conf) at its 786,432 tokens per step on one GPU, and a run stopped by SIGTERM and resumed, bitwise, each with the residual stream in fp32 and in bf16: tests/bench/record_gpu.sh"
    "frontier|1|510|the 1.0611 record's configuration (slurm/golf-frontier-8xh100.conf: packed rows, the BOS-masked SmearGate, depth recurrence, the parallel lanes) at its 786,432 tokens per step on one GPU before and after looping switches on, GPTQ's calibration on the GPU (ckpt hessians, 16 slots) and the gptq-brotli artifact, and a run stopped by SIGTERM and resumed across the switch, bitwise, each with the residual stream in fp32 and in bf16: tests/bench/frontier_gpu.sh; then its own ops against their floors (bench_gpu_ops: the BOS SmearGate, the lanes' block end and mean at the record's shape, and test-time training's LoRA, low-rank head and SGD at its TTT shape)"
    "ttt|1|290|the 1.0611 record's test-time training (ctrain eval --mode docs,ttt --device cuda: per-document LoRA rank 80, chunks of 48 in windows of 2,048, 64 documents a batch, 3 phases of global SGD) on 262,144 synthetic validation tokens at the record's vocabulary: tokens/s, and the seconds of the record's whole split on one GPU and on 8 beside its 455-509 s; again with CT_TTT_BASE_GRADS=1 (the chunks' backward making the base's weight gradients, the earlier path): its tokens/s, the saving, the same score bits (tests/bench/ttt_gpu.sh)"
    "record-side|1|420|the record's configuration side by side with the record's own train_gpt.py (RECORD_TRAIN_GPT_PY) from the same initial weights on the same shards, 200 steps: per-step losses, ms/step (tests/bench/record_vs_train_gpt.sh)"
    "cpu-scaling|0|300|the CPU backend's thread scaling beside PyTorch fp32 on this machine's cores"
)
field() { cut -d'|' -f"$2" <<<"$1"; }
stage_names() { local s; for s in "${stage_table[@]}"; do field "$s" 1; done; }
stage_row() { local s; for s in "${stage_table[@]}"; do [ "$(field "$s" 1)" = "$1" ] && { echo "$s"; return 0; }; done; return 1; }

usage() { sed -n '2,/^set -u$/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------- the stages' bodies
# Each runs in a process of its own (`gpu-check.sh --body NAME`) under the stage's time limit,
# in a scratch folder: exit 0 passes, 3 is "could not run" (after a line "NOT-RUN: why"), any
# other status fails.
not_run() { echo "NOT-RUN: $*"; exit 3; }

# the tests/run.sh summary as BENCH lines
run_sh_figures() { sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/BENCH tests_passed \1\nBENCH tests_failed \2\nBENCH tests_skipped \3/p' "$1"; }

# tool_path NAME PATH...: the NAME on PATH, else the first of the PATHs that is executable
# (the CUDA tools are often installed outside PATH); prints nothing when there is none.
tool_path() {
    command -v "$1" && return 0
    local p
    for p in "${@:2}"; do
        [ -x "$p" ] && { echo "$p"; return 0; }
    done
}
sanitizer() {
    tool_path compute-sanitizer /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer
}

body_test-gpu() {
    CT_REQUIRE_GPU=1 bash "$root/tests/run.sh" "$build" gpu 2>&1 | tee run.out
    local rc=${PIPESTATUS[0]}
    run_sh_figures run.out
    return "$rc"
}

body_memcheck() {
    local cs; cs=$(sanitizer)
    [ -n "$cs" ] || not_run "compute-sanitizer is not installed"
    # API errors are not reported: the step test provokes a failed stream capture on purpose
    # (cuda_graph_matches_launches' third run), and it checks every CUDA call's status itself;
    # this stage is for memory accesses. The summary line carries the tool's "========= " prefix.
    "$cs" --tool memcheck --report-api-errors no --error-exitcode 99 "$build/tests/test_gpu_step" 2>&1 | tee ms.out
    local rc=${PIPESTATUS[0]}
    grep -qE '^(=+ )?ERROR SUMMARY: 0 errors' ms.out || { echo "memcheck: no 'ERROR SUMMARY: 0 errors' line"; rc=1; }
    grep -qE '^(FAIL|SKIP) ' ms.out && { echo "memcheck: test_gpu_step did not pass every case"; rc=1; }
    grep -qx 'END test_gpu_step' ms.out || { echo "memcheck: test_gpu_step stopped early"; rc=1; }
    echo "BENCH memcheck_step_cases_passed $(grep -c '^PASS ' ms.out)"
    return "$rc"
}

body_racecheck() {
    local cs; cs=$(sanitizer)
    [ -n "$cs" ] || not_run "compute-sanitizer is not installed"
    local cases c bad=0 clean=0 t0
    cases=$("$build/tests/test_gpu_ops" --list | grep '^attention_') || { echo "test_gpu_ops --list failed"; return 1; }
    for c in $cases; do
        t0=$SECONDS
        CT_TEST_CASES=$c "$cs" --tool racecheck --error-exitcode 99 "$build/tests/test_gpu_ops" >"rc-$c.out" 2>&1
        local rc=$?
        if [ $rc -eq 0 ] && grep -q "^PASS test_gpu_ops/$c\$" "rc-$c.out" &&
            grep -qE 'RACECHECK SUMMARY: 0 hazards' "rc-$c.out"; then
            clean=$((clean + 1)); echo "racecheck $c: clean ($((SECONDS - t0)) s)"
        else
            bad=$((bad + 1)); echo "racecheck $c: FAILED (exit $rc, $((SECONDS - t0)) s):"; tail -n 30 "rc-$c.out" | sed 's/^/  | /'
        fi
    done
    echo "BENCH racecheck_attention_cases_clean $clean"
    echo "BENCH racecheck_attention_cases_failed $bad"
    [ $bad -eq 0 ] && [ $clean -gt 0 ]
}

body_nccl-w1() {
    bash "$root/tests/bench/nccl_overhead.sh" "$build" 20
}

body_two-ranks() {
    local gpus xz
    gpus=$("$build/ctrain" --version | sed -n 's/.*gpus visible: \([0-9]*\).*/\1/p')
    command -v mpiexec >/dev/null || not_run "no mpiexec (MPICH's hydra): the package's bin/ lacks it and none is installed"
    if [ "${gpus:-0}" -lt 2 ]; then
        xz=${GPU_CHECK_NCCL_XZ:-$(ls "$root"/nccl/libnccl.so.2.*.xz 2>/dev/null | head -1)}
        [ -n "$xz" ] && [ -f "$xz" ] ||
            not_run "one GPU and no NCCL >= 2.30 to share it (make gpu-pack GPU_PACK_NCCL=DIR, scripts/build-nccl.sh)"
        mkdir -p nccl
        xz -dc "$xz" >"nccl/$(basename "$xz" .xz)" || { echo "cannot unpack $xz"; return 1; }
        ln -sf "$(basename "$xz" .xz)" nccl/libnccl.so.2
        export LD_LIBRARY_PATH="$PWD/nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-8}
        echo "two ranks share the one GPU: $(basename "$xz" .xz) first on LD_LIBRARY_PATH, NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_MAX_CTAS=$NCCL_MAX_CTAS"
    fi
    CT_REQUIRE_GPU=1 bash "$root/tests/run.sh" "$build" all cli/test_nccl_ranks 2>&1 | tee run.out
    local rc=${PIPESTATUS[0]}
    run_sh_figures run.out
    return "$rc"
}

body_cuda-graph() {
    bash "$root/tests/bench/graph_vs_launches.sh" "$build" 20 || return 1
    local mode
    for mode in 1 0; do
        "$build/bench/bench_gpu_step" 10 small cuda_graph=$mode | sed "s/^BENCH gpu_small_/BENCH gpu_small_graph${mode}_/"
        [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
    done
}

body_attention() {
    # the last: the 1.0611 record's packed slot, one row of 98,304 tokens in documents of 2,048
    local shapes=(64,8,4,1024,64 16,12,4,2048,64 16,8,4,2048,128 1,8,4,98304,64,2048)
    bash "$root/tests/bench/attention_vs_sdpa.sh" "$build" 30 "${shapes[@]}" || return 1
    if [ -x "$build/bench/bench_gpu_attention_fwd1" ]; then
        echo "== the one-tile attention forward (-DCT_ATT_FWD_MT=1), same shapes, same run"
        "$build/bench/bench_gpu_attention_fwd1" 30 "${shapes[@]}" | sed 's/^BENCH attn_ctrain_/BENCH attn_onetile_/' | tee fwd1.out
        [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
    else
        echo "(no build/bench/bench_gpu_attention_fwd1: the one-tile forward is not timed; make gpu-pack builds it)"
    fi
}

body_checkpoint() {
    bash "$root/tests/bench/checkpoint_stall.sh" "$build" cuda
}

# A stage beside a fetched train_gpt.py: VAR (the environment variable naming it) must name a
# file, and python3 must have PyTorch with CUDA and sentencepiece. what: where to fetch it.
need_train_gpt() { # VAR what
    [ -n "${!1:-}" ] || not_run "$1 is not set ($2; carry the file)"
    [ -f "${!1}" ] || not_run "$1=${!1} is not a file"
    python3 -c 'import torch, sentencepiece; assert torch.cuda.is_available()' 2>/dev/null ||
        not_run "python3 lacks PyTorch with CUDA or sentencepiece"
}

step_stage() { # shape steps
    need_train_gpt TRAIN_GPT_PY "parameter-golf's train_gpt.py; fetch openai/parameter-golf"
    bash "$root/tests/bench/step_vs_train_gpt.sh" "$build" "$TRAIN_GPT_PY" "$2" "$1"
}
body_step-baseline() { step_stage baseline 30; }
body_step-wide() { step_stage wide 20; }
body_convergence() {
    need_train_gpt TRAIN_GPT_PY "parameter-golf's train_gpt.py; fetch openai/parameter-golf"
    bash "$root/tests/bench/convergence_vs_train_gpt.sh" "$build" "$TRAIN_GPT_PY" 300 131072
}

body_profile() {
    local n; n=$(tool_path ncu /usr/local/cuda/bin/ncu /usr/local/cuda/nsight-compute*/ncu /opt/nvidia/nsight-compute/*/ncu)
    [ -n "$n" ] || not_run "ncu (Nsight Compute) is not installed"
    NCU=$n bash "$root/tests/bench/step_profile.sh" "$build" baseline
}

body_record() {
    python3 -c 'import sentencepiece, numpy' 2>/dev/null || not_run "python3 lacks sentencepiece or numpy (for the synthetic shards)"
    bash "$root/tests/bench/record_gpu.sh" "$build" 12
}

body_frontier() {
    python3 -c 'import sentencepiece, numpy' 2>/dev/null || not_run "python3 lacks sentencepiece or numpy (for the synthetic shards)"
    bash "$root/tests/bench/frontier_gpu.sh" "$build" 12
    # the frontier's own kernels, each against its floor (their op-table rows at the record's shape)
    "$build/bench/bench_gpu_ops" --repeats 20 smear_bos_fwd_record smear_bos_bwd_record lane_mix_fwd_record \
        lane_mix_fwd_record_bf16s lane_mix_bwd_record lane_mix_bwd_record_bf16s lane_mean_fwd_record lane_mean_bwd_record \
        lora_fwd_record lora_bwd_record logits_lowrank_record sgd_step_record
}

body_ttt() {
    python3 -c 'import sentencepiece, numpy' 2>/dev/null || not_run "python3 lacks sentencepiece or numpy (for the synthetic shards)"
    bash "$root/tests/bench/ttt_gpu.sh" "$build" 262144
}

body_record-side() {
    need_train_gpt RECORD_TRAIN_GPT_PY "the 1.1248 record's train_gpt.py: openai/parameter-golf records/track_10min_16mb/2026-03-21_11L_XSA4_EMA_PartialRoPE_LateQAT_1.1248"
    bash "$root/tests/bench/record_vs_train_gpt.sh" "$build" "$RECORD_TRAIN_GPT_PY" 200
}

# the Python with PyTorch, h5py and numpy (the GPU machines' python3; /usr/bin/python3 elsewhere)
torch_python() {
    local py
    for py in ${CTRAIN_PYTHON:-} python3 /usr/bin/python3; do
        "$py" -c 'import torch, h5py, numpy' 2>/dev/null && { echo "$py"; return 0; }
    done
    echo python3
}

body_cpu-scaling() {
    # shellcheck disable=SC2086
    CTRAIN_PYTHON=$(torch_python) bash "$root/tests/bench/cpu_scaling.sh" "$build" ${GPU_CHECK_CPU_THREADS:-}
}

# ---------------------------------------------------------------- what this machine is
facts() { # key: value lines about the machine, the software and the package
    local v
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if command -v nvidia-smi >/dev/null && v=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null) && [ -n "$v" ]; then
        echo "gpu: $(echo "$v" | head -1 | cut -d, -f1 | sed 's/^ *//')$([ "$(echo "$v" | wc -l)" -gt 1 ] && echo " (x$(echo "$v" | wc -l))")"
        echo "driver: $(echo "$v" | head -1 | cut -d, -f2 | sed 's/^ *//')"
        echo "cuda_driver: $(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
    else
        echo "gpu: none visible (nvidia-smi: $(command -v nvidia-smi >/dev/null && echo 'no GPU' || echo 'not installed'))"
        echo "driver: none"
    fi
    echo "cuda_runtime: $(sed -n 's/^cuda: yes (\([0-9.]*\).*/\1/p' "$work_root/version.txt")"
    echo "nccl: $(sed -n 's/^nccl: //p' "$work_root/version.txt")"
    echo "gpus_visible: $(sed -n 's/.*gpus visible: \(.*\)/\1/p' "$work_root/version.txt")"
    echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "torch: $("$(torch_python)" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)"
    if [ -f "$root/PACK.txt" ]; then
        echo "commit: $(sed -n 's/^commit_short: //p' "$root/PACK.txt")"
        echo "package: $(sed -n 's/^built: //p' "$root/PACK.txt")"
    else
        echo "commit: $(git -C "$root" rev-parse --short=7 HEAD 2>/dev/null || echo unknown)$([ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo +)"
        echo "package: none (a checkout)"
    fi
}

# CUDA's libraries where the build's search path does not find them (a machine whose CUDA is a
# Python package, or another prefix): their folders go on LD_LIBRARY_PATH, after any already there.
find_cuda_libs() {
    local missing lib d found
    missing=$(ldd "$build/ctrain" 2>/dev/null | awk '$3 == "not" {print $1}')
    [ -n "$missing" ] || return 0
    for lib in $missing; do
        found=
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
                 $(python3 -c 'import nvidia, os; [print(os.path.join(p, d, "lib")) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null); do
            if [ -e "$d/$lib" ]; then found=$d; break; fi
        done
        if [ -n "$found" ]; then
            case ":${LD_LIBRARY_PATH:-}:" in *":$found:"*) ;; *) export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$found" ;; esac
            echo "gpu-check: $lib from $found (LD_LIBRARY_PATH)"
        else
            echo "gpu-check: $lib: not found anywhere here"
        fi
    done
}

# ---------------------------------------------------------------- one stage, judged
run_stage() { # row, seconds left of the budget, seconds it may take
    local row=$1 left=$2 limit=$3 name needs_gpu what log started t0 rc result why
    name=$(field "$row" 1); needs_gpu=$(field "$row" 2); what=$(field "$row" 4)
    log="$out/$name.log"
    started=$(date -u +%Y-%m-%dT%H:%M:%SZ); t0=$SECONDS
    echo "== gpu-check: stage $name: $what"
    if [ -n "$ctrain_broken" ]; then
        result=FAIL why="ctrain does not start here: $ctrain_broken"
        echo "$why" >"$log"
    elif [ "$needs_gpu" = 1 ] && [ "$gpus" -lt 1 ]; then
        result=NOT-RUN why="no GPU visible (ctrain --version: gpus visible: $gpus_line)"
        echo "$why" >"$log"
    elif [ "$left" -lt "$(field "$row" 3)" ]; then
        result=NOT-RUN why="no time left in this call: $left s of the budget remain, the stage expects $(field "$row" 3) s (run STAGE=$name on its own)"
        echo "$why" >"$log"
    else
        local dir; dir=$(mktemp -d "$work_root/$name.XXXXXX")
        ( cd "$dir" && exec timeout -k 15 "$limit" bash "$self" --body "$name" ) 2>&1 | tee "$log"
        rc=${PIPESTATUS[0]}
        if [ "$rc" = 0 ] && [ "$needs_gpu" = 1 ] && grep -qE '^SKIP |no CUDA device' "$log"; then
            result=FAIL why="a GPU program skipped (no CUDA device?): $(grep -m1 -E '^SKIP |no CUDA device' "$log" | cut -c1-200)"
        elif [ "$rc" = 0 ]; then result=PASS why=""
        elif [ "$rc" = 3 ] && grep -q '^NOT-RUN: ' "$log"; then result=NOT-RUN why=$(grep '^NOT-RUN: ' "$log" | tail -1 | cut -c10-)
        elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=FAIL why="stopped at its time limit of $limit s"
        else result=FAIL why="exit status $rc: $(grep -vE '^(BENCH|PASS|  \|)' "$log" | grep -iE 'fail|error|differ|not ' | tail -1 | cut -c1-200)"
        fi
        rm -rf "$dir"
    fi
    {
        echo "GPU-CHECK stage: $name"
        echo "GPU-CHECK result: $result"
        echo "GPU-CHECK why: $why"
        echo "GPU-CHECK what: $what"
        echo "GPU-CHECK order: $(stage_names | grep -nx -- "$name" | cut -d: -f1)"
        echo "GPU-CHECK started: $started"
        echo "GPU-CHECK seconds: $((SECONDS - t0))"
        sed -n 's/^/GPU-CHECK /p' "$work_root/facts.txt" | grep -v '^GPU-CHECK date: '
    } >>"$log"
    echo "== gpu-check: stage $name: $result${why:+ ($why)} in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- main
case "${1:-}" in
    --body)
        name=$2
        stage_row "$name" >/dev/null || { echo "gpu-check: unknown stage '$name'"; exit 2; }
        set -o pipefail
        "body_$name"
        exit $? ;;
    --list)
        printf '%-14s %-4s %-9s %s\n' stage gpu expected what
        for s in "${stage_table[@]}"; do
            printf '%-14s %-4s %-9s %s\n' "$(field "$s" 1)" "$([ "$(field "$s" 2)" = 1 ] && echo yes || echo no)" \
                "$(( ($(field "$s" 3) + 59) / 60 )) min" "$(field "$s" 4)"
        done
        exit 0 ;;
    -h|--help) usage; exit 0 ;;
    "") ;;
    *) echo "gpu-check: unknown argument '$1' (--list, --help; stages are chosen with STAGE=...)" >&2; exit 2 ;;
esac

budget=${GPU_CHECK_BUDGET:-560}
[[ "$budget" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: GPU_CHECK_BUDGET='$budget': expected seconds > 0" >&2; exit 2; }
stage_limit=${GPU_CHECK_STAGE_LIMIT:-$budget}
[[ "$stage_limit" =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: GPU_CHECK_STAGE_LIMIT='$stage_limit': expected seconds > 0" >&2; exit 2; }
wanted=${STAGE:-all}
wanted=${wanted//,/ }
[ "$wanted" = all ] && wanted=$(stage_names)
for name in $wanted; do
    stage_row "$name" >/dev/null || { echo "gpu-check: unknown stage '$name'; the stages: $(stage_names | tr '\n' ' ')" >&2; exit 2; }
done
out=${GPU_CHECK_OUT:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
[ -x "$build/ctrain" ] || { echo "gpu-check: $build/ctrain is not there (unpack the package, or make)" >&2; exit 1; }
for var in TRAIN_GPT_PY RECORD_TRAIN_GPT_PY; do # absolute: the stages run in scratch folders
    if [ -n "${!var:-}" ] && [ -f "${!var}" ]; then printf -v "$var" '%s' "$(readlink -f "${!var}")"; export "$var"; fi
done
work_root=$(mktemp -d /tmp/gpu-check.XXXXXX)
trap 'rm -rf "$work_root"' EXIT
export PATH="$root/bin:$PATH" # the package's mpiexec
find_cuda_libs
ctrain_broken=
"$build/ctrain" --version >"$work_root/version.txt" 2>&1 || ctrain_broken=$(tail -c 300 "$work_root/version.txt")
gpus_line=$(sed -n 's/.*gpus visible: \(.*\)/\1/p' "$work_root/version.txt")
gpus=$(echo "$gpus_line" | sed -n 's/^\([0-9]*\).*/\1/p')
gpus=${gpus:-0}
facts >"$work_root/facts.txt"
sed 's/^/gpu-check: /' "$work_root/facts.txt"

start=$SECONDS
for name in $wanted; do
    left=$((budget - (SECONDS - start)))
    [ "$left" -lt 0 ] && left=0
    limit=$((left < stage_limit ? left : stage_limit))
    run_stage "$(stage_row "$name")" "$left" "$limit"
done
python3 "$root/scripts/gpu_summary.py" "$out" -o "$out/summary.md" && cat "$out/summary.md"
