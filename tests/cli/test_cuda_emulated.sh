#!/usr/bin/env bash
# test_cuda_emulated.sh — the CUDA backend's test programs (tests/unit/test_gpu_*.c) on the CPU,
# through the host emulator (tests/gpu_emu): on a machine without a GPU, the only run of the
# CUDA code. The quick set, a few minutes on 2 cores: every case of the op table
# (test_gpu_ops --quick: all but the rows marked CASE_SLOW in tests/unit/gpu_op_table.h, the
# larger attention shapes), every case of optim and the step cases that train no steps. (All of
# it, with the large attention shapes and the training steps, takes over an hour:
# tests/gpu_emu/run.sh.) Every emulated program must run to its completion line, and a case
# skipped in the emulator (which always has its one device) is a failure.
source "$CT_ROOT/tests/cli/lib.sh"
for tool in g++ python3; do command -v $tool >/dev/null || skip_rest "$tool not installed (the emulator compiles with it)"; done

quick=(ops:--quick optim
       step:creation_reports_memory,device_auto_picks_cuda,position_logits_match_cpu,grad_buffer_and_sync_round_trip,bf16_stream_halves_stream_buffers,row_normalize_long_rows_refused)
bash "$CT_ROOT/tests/gpu_emu/run.sh" "${quick[@]}" >emu.out 2>&1
rc=$?
# the emulated programs' own case lines, counted by tests/run.sh
grep -E '^(PASS|FAIL) ' emu.out
sed -n 's/^SKIP \([^:]*\): \(.*\)/FAIL \1: skipped in the emulator, which has a device: \2/p' emu.out
for q in "${quick[@]}"; do
    p=${q%%:*}
    if grep -qx "END test_gpu_$p" emu.out; then pass "emulated_${p}_ran_to_end"
    else fail "emulated_${p}_ran_to_end" "no 'END test_gpu_$p' line (emulator exit $rc): $(grep -A3 "== emulated test_gpu_$p" emu.out | tail -c 300)$(tail -c 600 emu.out)"; fi
done
if [ $rc -ne 0 ] && ! grep -q '^FAIL ' emu.out; then fail emulator_exit "tests/gpu_emu/run.sh exited $rc: $(tail -c 800 emu.out)"; fi
finish
