#!/usr/bin/env bash
# test_record_optim.sh — the record's optimizer additions from the outside (issue 36): decoupled
# weight decay, the EMA of the weights, SWA and late QAT on the CPU backend. Their keys' errors;
# device=cuda taking them; what a run logs (train_gpt.py's lines) and ends with (the averaged
# weights replace the live ones for the final validation and the artifact); the checkpoint's
# new groups (/ema, /swa, /qat) seen by h5dump, verify, info and diff; interrupted runs that
# resume bit for bit with the EMA, SWA and QAT state; refused resumes across ema_enabled /
# swa_enabled; which weights `ckpt export`, `ckpt golf` and `sample` take (the averaged ones,
# --live for the others). Numbers against PyTorch: tests/cli/test_parity.sh.
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 &&
    "$CTRAIN" data from-text --out val.h5 /usr/share/common-licenses/Apache-2.0 >/dev/null 2>&1 ||
    { fail make_data "from-text failed"; exit 1; }
# 16 steps, warmdown over the last 8: lr_scale (16 - s) / 8 at the top of step s (0-based), so
# 0.5 at s = 12 and 0.375 at s = 13
cfg=(train_files="$WORK/train.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=2 model_dim=32 num_heads=4
     num_kv_heads=2 train_seq_len=32 train_batch_tokens=256 grad_accum_slots=8 val_batch_size=2048 iterations=16
     warmdown_iters=8 muon_momentum_warmup_steps=4 val_loss_every=8 checkpoint_every=2 keep_checkpoints=20
     train_log_every=1 threads=2)
# the EMA with weight decay, late QAT switching on at s = 12 (lr_scale 0.5 < 0.6)
ema=(muon_wd=0.04 adam_wd=0.02 ema_enabled=1 late_qat=1 qat_threshold=0.6)
# SWA every 2 steps from lr_scale < 0.5: snapshots after steps 14 and 16; QAT from step 0, untied
swa=(tie_embeddings=0 adam_wd=0.02 swa_enabled=1 swa_every=2 qat_enabled=1)

# ---- the keys' errors (exit 2, naming the key) ----
expect_fail bad_ema_decay_zero 2 'ema_decay = 0: expected in \(0, 1\)' "$CTRAIN" train "${cfg[@]}" ema_decay=0 out_dir=bad
expect_fail bad_ema_decay_one 2 'ema_decay = 1: expected in \(0, 1\)' "$CTRAIN" train "${cfg[@]}" ema_decay=1 out_dir=bad
expect_fail bad_swa_every 2 'swa_every = 0: expected >= 1' "$CTRAIN" train "${cfg[@]}" swa_every=0 out_dir=bad
expect_fail bad_muon_wd 2 'muon_wd = -0.1: expected >= 0' "$CTRAIN" train "${cfg[@]}" muon_wd=-0.1 out_dir=bad
expect_fail bad_adam_wd 2 'adam_wd = -1: expected >= 0' "$CTRAIN" train "${cfg[@]}" adam_wd=-1 out_dir=bad
expect_fail bad_qat_threshold 2 'qat_threshold = -0.5: expected >= 0' "$CTRAIN" train "${cfg[@]}" qat_threshold=-0.5 out_dir=bad
expect_fail bad_ema_env 2 'ema_decay = 1.5' env EMA_DECAY=1.5 "$CTRAIN" train "${cfg[@]}" out_dir=bad

# ---- device=cuda takes them (tests/unit/test_gpu_step.c's record_optim cases check it against
# the CPU backend) ----
for kv in muon_wd=0.04 adam_wd=0.02 ema_enabled=1 swa_enabled=1 qat_enabled=1 late_qat=1; do
    expect_cuda_takes "cuda_takes_${kv%%=*}" "$CTRAIN" train "${cfg[@]}" device=cuda "$kv" out_dir=cuda
done

# ---- reference runs, uninterrupted ----
expect_ok ema_reference "$CTRAIN" train "${cfg[@]}" "${ema[@]}" out_dir=ema_ref
cp out ema_ref.log
expect_ok swa_reference "$CTRAIN" train "${cfg[@]}" "${swa[@]}" out_dir=swa_ref
cp out swa_ref.log
expect_ok base_run "$CTRAIN" train "${cfg[@]}" out_dir=base
expect_grep late_qat_line '^late_qat:enabled step:12 scale:0\.5000$' ema_ref.log
expect_grep ema_applied_line '^ema:applying EMA weights$' ema_ref.log
expect_grep ema_final_validation '^final val_loss [0-9.]+  val_bpb [0-9.]+  \(EMA weights\)$' ema_ref.log
expect_grep swa_start_line '^swa:start step:14$' swa_ref.log
expect_grep swa_applied_line '^swa:applying averaged 2 checkpoints$' swa_ref.log
expect_grep swa_final_metrics '"final_val_loss": [0-9.]+, "final_val_bpb": [0-9.]+, "weights": "swa"' swa_ref/metrics.jsonl
# the final validation is of other weights than the last step's (live) one
live_val=$(grep -E '^step 16/16  val_loss' ema_ref.log | sed 's/.*val_loss \([0-9.]*\).*/\1/')
ema_val=$(grep -E '^final val_loss' ema_ref.log | sed 's/final val_loss \([0-9.]*\).*/\1/')
[ -n "$live_val" ] && [ -n "$ema_val" ] && [ "$live_val" != "$ema_val" ] && pass ema_validation_differs \
    || fail ema_validation_differs "live '$live_val', EMA '$ema_val'"

# weight decay and QAT change the training (each on its own, against the baseline's losses)
losses() { grep -o '"train_loss": [^,]*' "$1/metrics.jsonl" | tr '\n' ' '; }
"$CTRAIN" train "${cfg[@]}" muon_wd=0.04 out_dir=wd_only >/dev/null 2>&1
"$CTRAIN" train "${cfg[@]}" late_qat=1 qat_threshold=0.6 out_dir=qat_only >/dev/null 2>&1
[ "$(losses base)" != "$(losses wd_only)" ] && [ -n "$(losses wd_only)" ] && pass weight_decay_changes_training \
    || fail weight_decay_changes_training "the same losses with muon_wd=0.04"
# late QAT: the same losses up to step 12, others after
if [ "$(losses base | cut -d' ' -f1-24)" = "$(losses qat_only | cut -d' ' -f1-24)" ] &&
   [ "$(losses base)" != "$(losses qat_only)" ]; then pass late_qat_changes_late_steps_only
else fail late_qat_changes_late_steps_only "$(losses base) vs $(losses qat_only)"; fi

# ---- the checkpoint's new groups ----
E=ema_ref/checkpoints/step_00000016.h5 S=swa_ref/checkpoints/step_00000016.h5 B=base/checkpoints/step_00000016.h5
expect_ok verify_ema_swa "$CTRAIN" ckpt verify "$E" "$S"
if command -v h5dump >/dev/null; then
    h5dump -H "$E" >ema_dump.txt 2>&1
    expect_grep h5dump_ema_group 'GROUP "ema"' ema_dump.txt
    expect_grep h5dump_qat_group 'GROUP "qat"' ema_dump.txt
    h5dump -a /qat/active "$E" >qat_dump.txt 2>&1
    expect_grep h5dump_qat_active '\(0\): 1$' qat_dump.txt
    h5dump -a /swa/count "$S" >swa_dump.txt 2>&1
    expect_grep h5dump_swa_count '\(0\): 2$' swa_dump.txt
    h5dump -H "$B" >base_dump.txt 2>&1
    grep -qE 'GROUP "(ema|swa|qat)"' base_dump.txt && fail baseline_has_no_new_groups "$(grep GROUP base_dump.txt)" \
        || pass baseline_has_no_new_groups
else
    for c in h5dump_ema_group h5dump_qat_group h5dump_qat_active h5dump_swa_count baseline_has_no_new_groups; do
        skip $c "h5dump not installed (apt-get install hdf5-tools)"; done
fi
"$CTRAIN" ckpt info "$E" >info.txt 2>&1
expect_grep info_ema 'averaging: +EMA of the weights in /ema \(ema_decay 0\.997\)' info.txt
expect_grep info_qat 'qat: +active \(qat_enabled 0, late_qat 1, qat_threshold 0\.6\)' info.txt
expect_grep info_ema_tensor '^/ema/tok_emb\.weight +\[256, 32\]' info.txt
# /model holds the live weights, /ema others
/usr/bin/python3 - "$E" >live_vs_ema.txt 2>&1 <<'PY'
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], "r") as h:
    same = [k for k in h["model"] if np.array_equal(h["model"][k][...], h["ema"][k][...])]
    print("identical:", same if same else "none")
PY
expect_grep ema_is_not_the_live_weights '^identical: none$' live_vs_ema.txt

# a damaged file: a missing EMA tensor is named (and the content checksum would catch it too)
cp "$E" damaged.h5
/usr/bin/python3 -c 'import h5py, sys; h = h5py.File(sys.argv[1], "r+"); del h["ema/tok_emb.weight"]; h.close()' damaged.h5
expect_fail verify_names_missing_ema_tensor 1 '/ema/tok_emb\.weight is missing' "$CTRAIN" ckpt verify damaged.h5

# ---- interrupted runs resume bit for bit ----
run() { # out_dir, config array name, then one CTRAIN_FAULT per attempt ("-": none)
    local out=$1 extra=$2; shift 2
    local -n extra_keys=$extra
    : >"$out.codes"
    for fault in "$@"; do
        if [ "$fault" = - ]; then "$CTRAIN" train "${cfg[@]}" "${extra_keys[@]}" out_dir="$out" >>"$out.log" 2>&1
        else env CTRAIN_FAULT="$fault" "$CTRAIN" train "${cfg[@]}" "${extra_keys[@]}" out_dir="$out" >>"$out.log" 2>&1; fi
        echo $? >>"$out.codes"
    done
}
same_as() { # name, reference out_dir, out_dir
    if [ "$(losses "$2")" = "$(losses "$3")" ] && [ -n "$(losses "$3")" ]; then pass "$1_losses_bitwise"
    else fail "$1_losses_bitwise" "$(diff <(losses "$2" | tr ' ' '\n') <(losses "$3" | tr ' ' '\n') | head -4)"; fi
    if "$CTRAIN" ckpt diff --exact "$2/checkpoints/step_00000016.h5" "$3/checkpoints/step_00000016.h5" >"$3.diff" 2>&1
    then pass "$1_final_checkpoint_bitwise"; else fail "$1_final_checkpoint_bitwise" "$(tail -6 "$3.diff")"; fi
}
# EMA + late QAT: SIGTERM in step 4; SIGUSR1 in step 12 (checkpoint 12, QAT still off: the
# resumed run switches it on at the top of the next step); SIGKILL in step 15 after QAT is on
# (the resume starts from checkpoint 14, QAT on from the file)
run ema_int ema "TERM@4.5" "USR1@12.7" "KILL@15.3" "-"
[ "$(tr '\n' ' ' <ema_int.codes)" = "75 75 137 0 " ] && pass ema_interrupted_exit_codes \
    || fail ema_interrupted_exit_codes "$(tr '\n' ' ' <ema_int.codes)"
# the switch is printed once: by the run resumed from checkpoint 12, not by the one resumed from 14
[ "$(grep -c '^late_qat:enabled step:12 scale:0.5000$' ema_int.log)" = 1 ] &&
    grep -A12 'resumed from .*step_00000012.h5' ema_int.log | grep -q '^late_qat:enabled step:12' &&
    pass late_qat_switches_on_after_resume_from_12 || fail late_qat_switches_on_after_resume_from_12 "$(grep -E 'late_qat|resumed' ema_int.log)"
expect_grep resumed_with_qat_on 'resumed from .*step_00000014.h5: step 14' ema_int.log
same_as ema_interrupted ema_ref ema_int
# the switch is state, not recomputed: resumed from step 14 (QAT on) with qat_threshold 0.1,
# which the lr scale (0.25, 0.125) no longer falls below, QAT stays on as train_gpt.py's
# switch does, and the run ends as the uninterrupted one
expect_ok qat_latch_resume "$CTRAIN" train "${cfg[@]}" "${ema[@]}" qat_threshold=0.1 \
    resume="$WORK/ema_ref/checkpoints/step_00000014.h5" out_dir=latch
"$CTRAIN" ckpt diff --exact ema_ref/checkpoints/step_00000016.h5 latch/checkpoints/step_00000016.h5 >latch.diff 2>&1 &&
    pass qat_switch_kept_on_resume || fail qat_switch_kept_on_resume "$(tail -4 latch.diff)"
# SWA + QAT: a stop in step 15, between the two snapshots (the checkpoint holds the sum of one),
# and a kill in step 16
run swa_int swa "USR1@15.2" "KILL@16.6" "-"
[ "$(tr '\n' ' ' <swa_int.codes)" = "75 137 0 " ] && pass swa_interrupted_exit_codes \
    || fail swa_interrupted_exit_codes "$(tr '\n' ' ' <swa_int.codes)"
same_as swa_interrupted swa_ref swa_int

# ---- resumes that would change the averaging are refused, the checkpoints left as they were ----
cp -r base base_copy
expect_fail resume_adds_ema_refused 1 'ema_enabled: checkpoint 0, configured 1' \
    "$CTRAIN" train "${cfg[@]}" iterations=18 ema_enabled=1 out_dir=base
expect_fail resume_drops_ema_refused 1 'ema_enabled: checkpoint 1, configured 0' \
    "$CTRAIN" train "${cfg[@]}" "${ema[@]}" iterations=18 ema_enabled=0 out_dir=ema_ref
expect_fail resume_adds_swa_refused 1 'swa_enabled: checkpoint 0, configured 1' \
    "$CTRAIN" train "${cfg[@]}" iterations=18 swa_enabled=1 out_dir=base
diff -r --exclude=.lock base base_copy >/dev/null && pass refused_resume_leaves_run || fail refused_resume_leaves_run "base changed"
# late_qat may change: switched off on resume, the run goes on without QAT (reported)
cp -r ema_ref qat_off
expect_ok resume_qat_off "$CTRAIN" train "${cfg[@]}" "${ema[@]}" iterations=18 late_qat=0 out_dir=qat_off
expect_grep resume_reports_late_qat 'resume: late_qat changed from 1 to 0' out
/usr/bin/python3 -c 'import h5py, sys; print("active", int(h5py.File(sys.argv[1], "r")["qat"].attrs["active"]) if "qat" in h5py.File(sys.argv[1], "r") else "none")' \
    qat_off/checkpoints/step_00000018.h5 >qat_off.txt 2>&1
expect_grep resume_qat_off_not_saved '^active none$' qat_off.txt

# ---- which weights the tools take ----
safetensors_vs() { # safetensors file, checkpoint, "ema" | "live" | "swa": bitwise equal to that
    /usr/bin/python3 - "$@" <<'PY'
import h5py, json, numpy as np, struct, sys
path, ckpt, which = sys.argv[1:4]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
with h5py.File(ckpt, "r") as h:
    for name, t in header.items():
        a, b = t["data_offsets"]
        got = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"])
        if which == "swa":
            want = h["swa"][name][...] / np.float32(h["swa"].attrs["count"])
        else:
            want = h["ema" if which == "ema" else "model"][name][...]
        if not np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)):
            sys.exit(f"{name} differs from the checkpoint's {which} weights")
print("weights", meta["weights"])
PY
}
expect_ok export_ema "$CTRAIN" ckpt export "$E" --out ema.safetensors
expect_grep export_says_ema '\(fp32, EMA weights, /ema\)' out
safetensors_vs ema.safetensors "$E" ema >export_ema.txt 2>&1
expect_grep export_default_is_ema '^weights ema$' export_ema.txt
"$CTRAIN" ckpt export "$E" --out live.safetensors --live >/dev/null 2>&1
safetensors_vs live.safetensors "$E" live >export_live.txt 2>&1
expect_grep export_live_is_model '^weights live$' export_live.txt
"$CTRAIN" ckpt export "$S" --out swa.safetensors >/dev/null 2>&1
safetensors_vs swa.safetensors "$S" swa >export_swa.txt 2>&1
expect_grep export_swa_is_average '^weights swa$' export_swa.txt
# SWA with one snapshot (the checkpoint of step 14): the live weights, as train_gpt.py
"$CTRAIN" ckpt export swa_ref/checkpoints/step_00000014.h5 --out swa14.safetensors >swa14.txt 2>&1
expect_grep export_swa_one_snapshot_is_live '\(fp32, live weights, /model\)' swa14.txt
# golf: the run's artifact (golf_artifact=1) is the one `ckpt golf` makes of the final checkpoint
# by default (the EMA weights), not the one of the live weights
expect_ok ema_golf_run "$CTRAIN" train "${cfg[@]}" "${ema[@]}" golf_artifact=1 out_dir=ema_golf
"$CTRAIN" ckpt golf ema_golf --out golf_default.stz --no-eval >golf_default.txt 2>&1
"$CTRAIN" ckpt golf ema_golf --out golf_live.stz --no-eval --live >golf_live.txt 2>&1
expect_grep golf_says_ema '^weights: EMA weights \(--live for the live weights\)$' golf_default.txt
if cmp -s ema_golf/final_model.int8.stz golf_default.stz && ! cmp -s golf_default.stz golf_live.stz; then
    pass run_artifact_is_of_ema_weights
else fail run_artifact_is_of_ema_weights "run's artifact vs ckpt golf (default, --live)"; fi
"$CTRAIN" sample ema_ref --tokens 5 --device cpu >sample.txt 2>sample.err
expect_grep sample_says_ema '^weights: EMA weights \(--live for the live weights\)$' sample.err
# diff: two EMA decays, the same live weights: the /ema rows differ, /model does not
"$CTRAIN" train "${cfg[@]}" "${ema[@]}" ema_decay=0.99 out_dir=ema_099 >/dev/null 2>&1
"$CTRAIN" ckpt diff "$E" ema_099/checkpoints/step_00000016.h5 >diff.txt 2>&1
if grep -qE '^/ema/tok_emb\.weight ' diff.txt && ! grep -qE '^/model/' diff.txt; then pass diff_shows_ema_only
else fail diff_shows_ema_only "$(grep -E '^/' diff.txt | head -4)"; fi
"$CTRAIN" ckpt diff "$S" swa_ref/checkpoints/step_00000014.h5 >diff_swa.txt 2>&1
expect_grep diff_swa_count 'position differs: swa count 2 vs 1' diff_swa.txt

finish
