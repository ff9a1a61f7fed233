#!/usr/bin/env bash
# test_cuda_archs.sh — without a GPU: what GPU code the build embeds. Every kernel object and
# the ctrain executable hold SASS for sm_90 (H100) and sm_80 (A100) and sm_90's PTX, which newer
# GPUs (sm_100, sm_120) compile at start-up instead of failing with "no kernel image"; `ctrain
# --version` names the three. The images are read from the .nv_fatbin section
# (tests/cli/fatbin_images.py; cuobjdump, which the GPU machine has, lists the same); the reader
# is also run on objects made with only SASS and only PTX and must tell them apart (so a pass
# means something), and its per-kernel mode (--kernels) must give a kernel the same line in
# another file and a different one when its code changes. Skips without nvcc, and for a ctrain
# built without CUDA (make asan's).
source "$CT_ROOT/tests/cli/lib.sh"
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || skip_rest "nvcc not found at $nvcc (no CUDA toolkit: the CUDA backend is not built)"
# a build made without CUDA on purpose (make asan builds with NVCC=) embeds no GPU code
"$CTRAIN" --version 2>&1 | grep -q '^cuda: no' &&
    skip_rest "this ctrain was built without the CUDA backend ($("$CTRAIN" --version 2>&1 | grep '^cuda:'))"
images() { python3 "$CT_ROOT/tests/cli/fatbin_images.py" "$1" 2>&1; }
want="elf sm_80 elf sm_90 ptx compute_90"

# ---- every kernel object: the three images ----
bad=() count=0
for cu in "$CT_ROOT"/kernels/cuda/*.cu; do
    obj="$CT_BUILD/obj/kernels/cuda/$(basename "$cu" .cu).o"
    got=$(images "$obj")
    count=$((count + 1))
    [ "$got" = "$want" ] || bad+=("$(basename "$obj"): ${got:-nothing}")
done
if [ ${#bad[@]} -eq 0 ]; then pass kernels_have_sm90_sm80_and_ptx90
else fail kernels_have_sm90_sm80_and_ptx90 "expected '$want'; ${bad[*]}"; fi

# ---- the executable: one container per kernel file it links, each with the three ----
# (a kernel file only the tests call yet, such as cuda_lora.cu before the backend uses it, is not
# pulled out of libctrain.a into ctrain: it is counted when one of its functions is in ctrain)
linked=0
ctrain_syms=$(nm --defined-only "$CTRAIN" 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u)
for cu in "$CT_ROOT"/kernels/cuda/*.cu; do
    obj="$CT_BUILD/obj/kernels/cuda/$(basename "$cu" .cu).o"
    if nm --defined-only -g "$obj" 2>/dev/null | awk '$2 == "T" {print $3}' | sort -u | comm -12 - <(echo "$ctrain_syms") |
        grep -q .; then linked=$((linked + 1)); fi
done
got=$(images "$CTRAIN" | sort | uniq -c | sed 's/^ *//')
if [ "$linked" -gt 0 ] && [ "$got" = "$linked $want" ]; then pass ctrain_embeds_every_kernel
else fail ctrain_embeds_every_kernel "expected '$linked $want' (containers of the $linked kernel files ctrain links, of $count; images), got: $got"; fi

# ---- the reader tells SASS-only and PTX-only objects from the build's ----
printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' >k.cu
if "$nvcc" -gencode arch=compute_90,code=sm_90 -c k.cu -o sass.o 2>nvcc.err &&
    "$nvcc" -gencode arch=compute_90,code=compute_90 -c k.cu -o ptx.o 2>>nvcc.err; then
    got="$(images sass.o) | $(images ptx.o)"
    if [ "$got" = "elf sm_90 | ptx compute_90" ]; then pass reader_tells_sass_from_ptx
    else fail reader_tells_sass_from_ptx "expected 'elf sm_90 | ptx compute_90', got '$got'"; fi
else
    fail reader_tells_sass_from_ptx "nvcc failed: $(head -c 400 nvcc.err)"
fi
# ---- --kernels: a kernel that moves to another file keeps its line; a changed one does not ----
# (the check for refactors that only move kernels: docs/architecture.md)
printf '__global__ void k(float *x) { x[threadIdx.x] *= 3.0f; }\n' >k3.cu
printf '__global__ void other(int *y) { y[0] = 1; }\n__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' >moved.cu
if "$nvcc" -gencode arch=compute_90,code=sm_90 -c k3.cu -o k3.o 2>>nvcc.err &&
    "$nvcc" -gencode arch=compute_90,code=sm_90 -c moved.cu -o moved.o 2>>nvcc.err; then
    line() { python3 "$CT_ROOT/tests/cli/fatbin_images.py" --kernels "$@" 2>&1 | grep ' _Z1kPf '; }
    before=$(line sass.o) after=$(line moved.o) changed=$(line k3.o)
    if [[ "$before" == "sm_90 _Z1kPf text="* ]] && [ "$before" = "$after" ] && [ -n "$changed" ] &&
        [ "$changed" != "$before" ]; then pass kernels_lines_follow_code_not_files
    else fail kernels_lines_follow_code_not_files "in sass.o: '$before'; moved: '$after'; changed body: '$changed'"; fi
else
    fail kernels_lines_follow_code_not_files "nvcc failed: $(head -c 400 nvcc.err)"
fi
# and refuses a file without GPU code
if out=$(python3 "$CT_ROOT/tests/cli/fatbin_images.py" /bin/true 2>&1); then
    fail reader_refuses_no_fatbin "accepted /bin/true: $out"
elif grep -q "no .nv_fatbin section" <<<"$out"; then pass reader_refuses_no_fatbin
else fail reader_refuses_no_fatbin "unexpected message: $out"; fi

# ---- what the binary says it was built for ----
"$CTRAIN" --version >version.txt 2>&1
expect_grep version_names_archs '^cuda: yes \([0-9.]+, archs sm_90,sm_80,compute_90\)' version.txt
finish
