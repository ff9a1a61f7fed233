#!/usr/bin/env bash
# test_record.sh — the record stack's model keys (issue 36) end to end on the CPU backend: a run
# with all of them trains, checkpoints the new parameters (readable with h5dump), resumes bit
# for bit after a stop, exports and samples; the multi-token-prediction heads add their loss,
# resume bit for bit and stay out of the golf artifact; device=cuda takes them (no key refused); bad
# values are errors naming the key; a checkpoint written while mlp_mult was an integer key
# still loads. (The math is checked against PyTorch in test_parity.sh, the ops in
# test_cpu_record_ops.)
source "$CT_ROOT/tests/cli/lib.sh"

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 &&
    "$CTRAIN" data from-text --out val.h5 /usr/share/common-licenses/Apache-2.0 >/dev/null 2>&1 ||
    { fail make_data "from-text failed"; exit 1; }
cfg=(train_files="$WORK/train.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=4 model_dim=64 num_heads=4
     num_kv_heads=2 mlp_mult=2.5 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=4 val_batch_size=512
     warmdown_iters=3 muon_momentum_warmup_steps=4 val_loss_every=4 checkpoint_every=2 train_log_every=1 threads=2
     rope_dims=8 rope_train_seq_len=16 ln_scale=1 xsa_last_n=2 smear_gate=1 bigram_vocab_size=64 bigram_dim=32
     ortho_init=1)

expect_ok reference "$CTRAIN" train "${cfg[@]}" iterations=8 out_dir=ref
final=ref/checkpoints/step_00000008.h5
# the banner lists the keys the run sets
expect_grep banner_lists_keys 'xsa_last_n += 2 +\(command line\)' "$WORK/out"
# the new parameters are in /model with their shapes (h5dump reads them)
if command -v h5dump >/dev/null; then
    h5dump -H "$final" >ref.h5dump 2>&1
    expect_grep h5dump_bigram_embed 'DATASET "bigram.embed.weight"' ref.h5dump
    grep -A3 'DATASET "bigram.proj.weight"' ref.h5dump | grep -q '( 64, 32 )' && pass h5dump_bigram_proj_shape ||
        fail h5dump_bigram_proj_shape "$(grep -A3 'bigram.proj' ref.h5dump | head -4)"
    expect_grep h5dump_smear_gate 'DATASET "smear.gate"' ref.h5dump
else skip h5dump_bigram_embed "no h5dump"; skip h5dump_bigram_proj_shape "no h5dump"; skip h5dump_smear_gate "no h5dump"; fi
# the loss went down (the features train, not just run)
/usr/bin/python3 - ref/metrics.jsonl >loss.txt <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
print(rows[0]["train_loss"], rows[-1]["train_loss"])
EOF
read -r first last <loss.txt
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$last') < float('$first') - 0.3 else 1)" &&
    pass loss_decreases || fail loss_decreases "first $first, last $last"

# a stop signal in step 5 (checkpoint 5, exit 75), resumed: the same bits as the uninterrupted run
env CTRAIN_FAULT="USR1@5.2" "$CTRAIN" train "${cfg[@]}" iterations=8 out_dir=stopped >stopped.log 2>&1
code=$?
[ $code = 75 ] && pass stop_exit_75 || fail stop_exit_75 "exit $code: $(tail -3 stopped.log)"
"$CTRAIN" train "${cfg[@]}" iterations=8 out_dir=stopped >>stopped.log 2>&1 || fail resume_run "$(tail -3 stopped.log)"
if "$CTRAIN" ckpt diff --exact "$final" stopped/checkpoints/step_00000008.h5 >diff.out 2>&1; then pass resume_bitwise
else fail resume_bitwise "$(tail -5 diff.out)"; fi

# a resume must keep the model keys: changing one is refused, naming it
expect_fail resume_key_fixed 1 'xsa_last_n: checkpoint 2, configured 1' "$CTRAIN" train "${cfg[@]}" iterations=10 \
    out_dir=ref xsa_last_n=1

# export and sample work on such a model
expect_ok export "$CTRAIN" ckpt export "$final" --out model.safetensors
/usr/bin/python3 - model.safetensors <<'EOF' >export.txt 2>&1 && pass export_has_record_tensors || fail export_has_record_tensors "$(cat export.txt)"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
# bigram.scale is 0-d in the record's GPT (the checkpoint keeps it as [1])
want = {"bigram.scale": [], "bigram.embed.weight": [64, 32], "bigram.proj.weight": [64, 32], "smear.gate": [64]}
for k, shape in want.items():
    assert h[k]["shape"] == shape, (k, h.get(k))
meta = h["__metadata__"]
assert meta["xsa_last_n"] == "2" and meta["rope_dims"] == "8" and meta["mlp_mult"] == "2.5", meta
print("ok")
EOF
expect_ok sample "$CTRAIN" sample "$final" --prompt "The " --tokens 8 --seed 1

# device=cuda implements them (tests/unit/test_gpu_step.c's record_keys cases check it against the
# CPU backend): no key is refused
expect_cuda_takes cuda_takes_record_keys "$CTRAIN" train "${cfg[@]}" iterations=2 out_dir=cuda1 device=cuda
expect_cuda_takes cuda_takes_bigram "$CTRAIN" train train_files="$WORK/train.h5" vocab_size=256 num_layers=2 \
    model_dim=64 num_heads=2 num_kv_heads=1 train_seq_len=32 train_batch_tokens=512 iterations=2 out_dir=cuda2 \
    device=cuda bigram_vocab_size=64

# bad values name the key and the value
expect_fail bad_rope_dims 2 'rope_dims = 7' "$CTRAIN" train "${cfg[@]}" rope_dims=7 out_dir=bad
expect_fail bad_xsa_last_n 2 'xsa_last_n = 5: expected in \[0, num_layers = 4\]' "$CTRAIN" train "${cfg[@]}" \
    xsa_last_n=5 out_dir=bad
expect_fail bad_bigram_size 2 'bigram_vocab_size = 1' "$CTRAIN" train "${cfg[@]}" bigram_vocab_size=1 out_dir=bad

# ---- multi-token prediction (MTP_NUM_HEADS; off in the record) ----
# the heads start at zero, so at step 1 each scores every position ln(256): the logged loss is
# the plain model's plus mtp_loss_weight * ln(256) (the same weights otherwise)
small=(train_files="$WORK/train.h5" val_files="$WORK/val.h5" vocab_size=256 num_layers=2 model_dim=64 num_heads=4
       num_kv_heads=2 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=4 val_batch_size=512 threads=2
       warmdown_iters=2 val_loss_every=0 checkpoint_every=2)
expect_ok mtp_plain_run "$CTRAIN" train "${small[@]}" iterations=1 out_dir=plain1
expect_ok mtp_run "$CTRAIN" train "${small[@]}" iterations=1 out_dir=mtp1 mtp_num_heads=2 mtp_loss_weight=0.5
/usr/bin/python3 - plain1/metrics.jsonl mtp1/metrics.jsonl <<'EOF' >mtp_loss.txt 2>&1 && pass mtp_loss_adds_heads || fail mtp_loss_adds_heads "$(cat mtp_loss.txt)"
import json, math, sys
loss = lambda f: [json.loads(l) for l in open(f) if '"train_loss"' in l][0]["train_loss"]
plain, mtp = loss(sys.argv[1]), loss(sys.argv[2])
want = plain + 0.5 * math.log(256)
assert abs(mtp - want) < 1e-5, (plain, mtp, want)
print(plain, mtp)
EOF
# the heads are checkpointed (h5dump reads them) and Muon's: they have a momentum buffer
if command -v h5dump >/dev/null; then
    h5dump -H mtp1/checkpoints/step_00000001.h5 >mtp.h5dump 2>&1
    grep -A3 'DATASET "mtp_heads.1.weight"' mtp.h5dump | grep -q '( 256, 64 )' && pass h5dump_mtp_heads ||
        fail h5dump_mtp_heads "$(grep -A3 'mtp_heads' mtp.h5dump | head -8)"
else skip h5dump_mtp_heads "no h5dump"; fi
"$CTRAIN" ckpt info mtp1/checkpoints/step_00000001.h5 >mtp_info.txt 2>&1
expect_grep mtp_heads_use_muon '^/optimizer/mtp_heads.0.weight/momentum_buffer ' mtp_info.txt
# stopped in step 3 and resumed: the same bits as an uninterrupted run
expect_ok mtp_reference "$CTRAIN" train "${small[@]}" iterations=5 out_dir=mtp_ref mtp_num_heads=2 qat_enabled=1
env CTRAIN_FAULT="USR1@3.2" "$CTRAIN" train "${small[@]}" iterations=5 out_dir=mtp_stop mtp_num_heads=2 qat_enabled=1 \
    >mtp_stop.log 2>&1
code=$?
"$CTRAIN" train "${small[@]}" iterations=5 out_dir=mtp_stop mtp_num_heads=2 qat_enabled=1 >>mtp_stop.log 2>&1 ||
    fail mtp_resume_run "$(tail -3 mtp_stop.log)"
if [ $code = 75 ] && "$CTRAIN" ckpt diff --exact mtp_ref/checkpoints/step_00000005.h5 \
    mtp_stop/checkpoints/step_00000005.h5 >mtp_diff.out 2>&1; then pass mtp_resume_bitwise
else fail mtp_resume_bitwise "stop exit $code: $(tail -5 mtp_diff.out)"; fi
# the golf artifact leaves the heads out (as the record's export_sd), and its round trip runs;
# ckpt export keeps them (the whole model, for GPT(mtp_num_heads=2).load_state_dict)
expect_ok mtp_golf "$CTRAIN" ckpt golf mtp_ref/checkpoints/step_00000005.h5 --out mtp.stz
expect_grep mtp_golf_round_trip '^final_int8_zlib_roundtrip val_loss:[0-9.]+ ' "$WORK/out"
expect_ok mtp_export "$CTRAIN" ckpt export mtp_ref/checkpoints/step_00000005.h5 --out mtp.safetensors
/usr/bin/python3 - mtp.stz mtp.safetensors <<'EOF' >mtp_art.txt 2>&1 && pass mtp_artifact_without_heads || fail mtp_artifact_without_heads "$(cat mtp_art.txt)"
import json, struct, sys, zlib
def header(b):
    return json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
art = header(zlib.decompress(open(sys.argv[1], "rb").read()))
assert not [k for k in art if "mtp" in k], sorted(art)
assert any(k.endswith("tok_emb.weight") for k in art), sorted(art)
exp = header(open(sys.argv[2], "rb").read())
assert exp["mtp_heads.0.weight"]["shape"] == [256, 64] and "mtp_heads.1.weight" in exp, sorted(exp)
assert exp["__metadata__"]["mtp_num_heads"] == "2", exp["__metadata__"]
print("ok")
EOF
expect_cuda_takes cuda_takes_mtp "$CTRAIN" train "${small[@]}" iterations=2 out_dir=cuda3 device=cuda mtp_num_heads=2
expect_fail bad_mtp_heads 2 'mtp_num_heads = 17: expected in \[0, 16\]' "$CTRAIN" train "${small[@]}" mtp_num_heads=17 \
    out_dir=bad
expect_fail bad_mtp_heads_seq 2 'mtp_num_heads = 4: .*below train_seq_len = 4' "$CTRAIN" train "${small[@]}" \
    mtp_num_heads=4 train_seq_len=4 out_dir=bad
expect_fail bad_mtp_weight 2 'mtp_loss_weight = -0.5: expected >= 0' "$CTRAIN" train "${small[@]}" mtp_num_heads=1 \
    mtp_loss_weight=-0.5 out_dir=bad

# the record's configuration file: every key valid, and with its sizes cut down it trains on the
# CPU (the 11 blocks, 3x MLP, partial RoPE with NTK scaling, XSA, SmearGate, bigram, and the rest)
conf="$CT_ROOT/slurm/golf-record-8xh100.conf"
expect_ok record_conf_valid "$CTRAIN" train --config "$conf" --print-config
expect_grep record_conf_xsa '^xsa_last_n = 4$' "$WORK/out"
expect_ok record_conf_trains "$CTRAIN" train --config "$conf" device=cpu train_files="$WORK/train.h5" \
    val_files="$WORK/val.h5" vocab_size=256 model_dim=128 num_heads=4 num_kv_heads=2 train_seq_len=64 \
    train_batch_tokens=1024 val_batch_size=1024 iterations=3 warmdown_iters=1 max_wallclock_seconds=0 eval_stride=16 \
    out_dir=record_small threads=2
expect_grep record_conf_done '^done: 3 steps' "$WORK/out"
# it ends as the record does: the EMA weights replace the live ones, the int6 artifact's round
# trip is evaluated plain and with the sliding window
expect_grep record_conf_ema '^ema:applying EMA weights' "$WORK/out"
expect_grep record_conf_artifact '^final_int6_sliding_window val_loss:[0-9.]+ val_bpb:[0-9.]+ stride:16 ' "$WORK/out"

# a checkpoint from before mlp_mult took fractional values holds it as an integer attribute
"$CTRAIN" train train_files="$WORK/train.h5" vocab_size=256 num_layers=2 model_dim=32 num_heads=2 num_kv_heads=1 \
    mlp_mult=3 train_seq_len=32 train_batch_tokens=512 iterations=2 out_dir=old threads=2 >old.log 2>&1 ||
    fail old_run "$(tail -3 old.log)"
/usr/bin/python3 - old/checkpoints/step_00000002.h5 <<'EOF' >old.txt 2>&1 || fail old_rewrite "$(cat old.txt)"
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], "r+") as h:
    del h["config"].attrs["mlp_mult"]
    h["config"].attrs.create("mlp_mult", np.int64(3))
EOF
expect_ok old_int_mlp_mult_info "$CTRAIN" ckpt info old/checkpoints/step_00000002.h5
expect_grep old_int_mlp_mult_read 'mlp_mult 3,' "$WORK/out"

finish
