#!/usr/bin/env bash
# run.sh — runs the CUDA backend's test programs (tests/unit/test_gpu_*.c) on the CPU, through a
# host emulation of CUDA: the unchanged kernels/cuda/cuda_*.cu (launches rewritten by
# launch_to_cpp.py), src/backend/backend_cuda*.c and the tests, compiled with g++/gcc against shim/
# (CUDA runtime + cuBLAS subset, one std::thread per CUDA thread; see shim/emu_device.h and
# emu_runtime.cpp). It checks index math, masking, launch shapes, shuffles in uniform control
# flow, the backend's wiring and the test programs themselves on a machine without a GPU.
# It does NOT check real-GPU behaviour: the warp/memory model, real cuBLAS, nvcc's code
# generation (FMA contraction), CUDA's expf/tanhf, performance. docs/cuda.md has the results.
#
# Usage: tests/gpu_emu/run.sh [--exact-bf16] [program[:case,case...] ...]
#   program: ops optim step (tests/unit/test_gpu_<program>.c; default: all); ":cases" runs only
#            those cases of it (CT_TEST_CASES for that program alone), e.g.
#            ops:rmsnorm_fwd_ragged,attention_fwd_single_token; an item starting with "--" is an
#            argument instead (ops:--quick, the rows not marked CASE_SLOW)
#            or a benchmark, bench_gpu_ops[:arg,arg...] (tests/bench/<program>.c, run with those
#            arguments, e.g. bench_gpu_ops:--repeats,2,rmsnorm_fwd_ragged: speeds mean nothing
#            here, but it must run)
#   --exact-bf16: "bf16" keeps fp32 values (isolates the backend's wiring from bf16 rounding;
#                 meaningful for `step` only, which is then the default)
# Needs `make` to have built build/libctrain.a (for the CPU reference ops; $CT_BUILD names another
# build folder) and writes to build/gpu_emu[-exact]/. Slow: every CUDA
# thread is an OS thread; `step` takes ~10-30 minutes on 2 cores, `ops` over an hour (its
# attention cases at T >= 200 are slow, attention_*_baseline_head_shape (T=1024) the slowest:
# ops:name,name picks cases).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/tests/gpu_emu"
exact=0
if [ "${1:-}" = --exact-bf16 ]; then exact=1; shift; fi
progs=("$@")
if [ ${#progs[@]} -eq 0 ]; then
    if [ $exact = 1 ]; then progs=(step); else progs=(ops optim step); fi
fi
build=${CT_BUILD:-$root/build}
out="$build/gpu_emu$([ $exact = 1 ] && echo -exact || true)"
mkdir -p "$out/k" "$out/gen" "$out/obj"
[ -f "$build/libctrain.a" ] || { echo "run.sh: $build/libctrain.a missing: run make first" >&2; exit 2; }

# Every CUDA header is copied (and found there first: they include each other by quotes), so the
# exact-bf16 mode's ct_bf16 (cuda_common.h) is the one every source sees.
rm -f "$out"/k/*
cp "$root"/kernels/cuda/*.h "$root"/kernels/cuda/*.cuh "$out/k/"
defs=(-DCT_HAVE_CUDA=1 -DCT_GPU_EMU=1)
if [ $exact = 1 ]; then
    sed -i 's/typedef uint16_t ct_bf16;/typedef uint32_t ct_bf16;/' "$out/k/cuda_common.h"
    grep -q 'typedef uint32_t ct_bf16;' "$out/k/cuda_common.h" || { echo "run.sh: ct_bf16 typedef not found" >&2; exit 2; }
    defs+=(-DEMU_EXACT_BF16=1)
fi
# The build's include folders (make flags), after the copies above so that those are found first.
inc=(-I"$here/shim" -I"$out/k" $(cd "$root" && make -s flags | sed -n 's/^INCLUDES=//p' | sed "s#-I#-I$root/#g") -I"$root/tests")
libs=$(cd "$root" && make -s flags | sed -n 's/^LDLIBS=//p' | tr ' ' '\n' |
       grep -vE '^-l(cublasLt|cublas|cudart|nccl)$|cuda' | tr '\n' ' ')

objs=()
for cu in "$root"/kernels/cuda/cuda_*.cu; do
    name=$(basename "$cu" .cu)
    python3 "$here/launch_to_cpp.py" "$cu" "$out/gen/$name.cpp"
    # emu_mma.h: the warp-level instructions that kernels/cuda/cuda_mma.cuh leaves to the emulator
    g++ -std=c++20 -O2 -fopenmp -w "${defs[@]}" "${inc[@]}" -include emu_mma.h -c "$out/gen/$name.cpp" \
        -o "$out/obj/$name.o"
    objs+=("$out/obj/$name.o")
done
g++ -std=c++20 -O2 -w "${defs[@]}" -I"$here/shim" -c "$here/emu_runtime.cpp" -o "$out/obj/emu_runtime.o"
objs+=("$out/obj/emu_runtime.o")
# the CUDA backend, every file of it (backend_cuda_private.h lists them)
for c in "$root"/src/backend/backend_cuda*.c; do
    name=$(basename "$c" .c)
    gcc -std=c11 -O2 -D_GNU_SOURCE -fopenmp -Wall -Wextra "${defs[@]}" "${inc[@]}" -c "$c" -o "$out/obj/$name.o"
    objs+=("$out/obj/$name.o")
done

status=0
for p in "${progs[@]}"; do
    cases= args=()
    if [[ "$p" == *:* ]]; then cases=${p#*:}; p=${p%%:*}; fi
    items=()
    [ -n "$cases" ] && IFS=, read -r -a items <<<"$cases"
    if [[ "$p" == bench_* ]]; then # a benchmark: ":..." are its arguments
        prog=$p src="$root/tests/bench/$p.c" args=(${items[@]+"${items[@]}"}) cases=
    else
        prog=test_gpu_$p src="$root/tests/unit/test_gpu_$p.c" cases=
        for item in ${items[@]+"${items[@]}"}; do
            if [[ "$item" == --* ]]; then args+=("$item"); else cases+=${cases:+,}$item; fi
        done
    fi
    [ -f "$src" ] || { echo "run.sh: no $src" >&2; exit 2; }
    gcc -std=c11 -O2 -D_GNU_SOURCE -fopenmp "${defs[@]}" -DTEST_PROGRAM="\"$prog\"" "${inc[@]}" -c "$src" \
        -o "$out/obj/$prog.o"
    # shellcheck disable=SC2086
    g++ -fopenmp "$out/obj/$prog.o" "${objs[@]}" "$build/libctrain.a" $libs -lpthread -o "$out/$prog"
    echo "== emulated $prog$([ $exact = 1 ] && echo ' (exact bf16)' || true)"
    env ${cases:+CT_TEST_CASES=$cases} OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" CT_TEST_VERBOSE="${CT_TEST_VERBOSE:-1}" \
        "$out/$prog" ${args[@]+"${args[@]}"} || status=1
done
exit $status
