#!/usr/bin/env bash
# test_cuda_tensor_cores.sh — without a GPU: the attention kernels (kernels/cuda/cuda_attention_fwd.cu
# and cuda_attention_bwd.cu) really run on tensor cores and keep their working set in registers. From nvcc's PTX, every
# attention kernel entry holds mma.sync m16n8k16 (bf16), ldmatrix and cp.async; from ptxas -v,
# no entry of the file spills or has a stack frame, for sm_90 and sm_80; where cuobjdump is
# installed, the SASS holds HMMA. The checker is also run on a small kernel without mma and on
# one that spills, and must reject both (so a pass means something). Skips without nvcc.
source "$CT_ROOT/tests/cli/lib.sh"
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [ ! -x "$nvcc" ]; then
    skip_rest "nvcc not found at $nvcc (no CUDA toolkit: the CUDA backend is not built)"
fi
# shellcheck disable=SC2046
inc=$(make -s -C "$CT_ROOT" --no-print-directory layer-flags DIR=kernels/cuda | sed "s#-I#-I$CT_ROOT/#g")
entries='attention_forward_kernel|attention_backward_dq_kernel|attention_backward_dkv_kernel'

# check_ptx FILE.cu LABEL : every kernel entry matching $entries has the tensor-core instructions
check_ptx() {
    local src=$1 label=$2
    # shellcheck disable=SC2086
    if ! "$nvcc" -std=c++17 -O3 -arch=sm_90 -DCT_HAVE_CUDA=1 $inc -ptx "$src" -o "$label.ptx" 2>"$label.ptx.err"; then
        echo "nvcc -ptx failed: $(head -c 600 "$label.ptx.err")"; return 1
    fi
    python3 - "$label.ptx" "$entries" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
parts = re.split(r"^\.(?:visible )?\.?entry\s+", text, flags=re.M)
found, bad = 0, []
for body in parts[1:]:
    name = body.split("(", 1)[0].strip()
    if not re.search(sys.argv[2], name):
        continue
    found += 1
    for ins in ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "ldmatrix.sync.aligned.m8n8.x4", "cp.async.cg.shared.global"):
        if ins not in body:
            bad.append(f"{name} lacks {ins}")
if found == 0:
    bad.append("no attention kernel entry in the PTX")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
}

# check_ptxas FILE.cu LABEL : ptxas reports no spill and no stack frame for any entry
check_ptxas() {
    local src=$1 label=$2 arch
    for arch in 90 80; do
        # shellcheck disable=SC2086
        if ! "$nvcc" -std=c++17 -O3 -gencode "arch=compute_$arch,code=sm_$arch" -Xptxas -v -DCT_HAVE_CUDA=1 $inc \
            -c "$src" -o "$label.$arch.o" >"$label.$arch.ptxas" 2>&1; then
            echo "nvcc failed: $(head -c 600 "$label.$arch.ptxas")"; return 1
        fi
        if grep -E "bytes stack frame|spill" "$label.$arch.ptxas" | grep -qvE "^ *0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"; then
            echo "sm_$arch: $(grep -B1 -E '[1-9][0-9]* bytes (stack frame|spill)' "$label.$arch.ptxas" | head -c 600)"; return 1
        fi
    done
}

# both files of the attention (forward, backward): every check holds for each
srcs=(fwd bwd)
ptx_out="" ptxas_out=""
for part in "${srcs[@]}"; do
    src="$CT_ROOT/kernels/cuda/cuda_attention_$part.cu"
    out=$(check_ptx "$src" "attention_$part") || ptx_out+="$part: $out "
    out=$(check_ptxas "$src" "attention_$part") || ptxas_out+="$part: $out "
done
if [ -z "$ptx_out" ]; then pass attention_ptx_uses_mma_ldmatrix_cp_async
else fail attention_ptx_uses_mma_ldmatrix_cp_async "$ptx_out"; fi
if [ -z "$ptxas_out" ]; then pass attention_kernels_do_not_spill
else fail attention_kernels_do_not_spill "$ptxas_out"; fi
if command -v cuobjdump >/dev/null; then
    n_hmma=$(( $(cuobjdump -sass attention_fwd.90.o | grep -c HMMA) ))
    (( $(cuobjdump -sass attention_bwd.90.o | grep -c HMMA) > 0 )) || n_hmma=0
    if [ "$n_hmma" -gt 0 ]; then pass attention_sass_has_hmma; else fail attention_sass_has_hmma "no HMMA in the SASS"; fi
else
    skip attention_sass_has_hmma "cuobjdump is not installed (the PTX check above stands in)"
fi

# The checker must catch a kernel without tensor cores and one that spills.
cat >plain.cu <<'CU'
__global__ void attention_forward_kernel(float *y, const float *x) { y[threadIdx.x] = x[threadIdx.x] * 2.0f; }
CU
if check_ptx plain.cu plain >/dev/null; then fail checker_rejects_simt_kernel "a kernel without mma passed"
else pass checker_rejects_simt_kernel; fi
cat >spill.cu <<'CU'
__global__ void __launch_bounds__(1024, 2) attention_backward_dq_kernel(float *y, const float *x, int n) {
    float r[96];
#pragma unroll
    for (int i = 0; i < 96; i++) r[i] = x[threadIdx.x + i * n];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 96; i++) s += r[i] * r[95 - i] + r[(i * 7) % 96];
    y[threadIdx.x] = s;
}
CU
if check_ptxas spill.cu spill >/dev/null; then fail checker_rejects_spilling_kernel "a spilling kernel passed"
else pass checker_rejects_spilling_kernel; fi

finish
