#!/usr/bin/env bash
# test_parity.sh — ctrain's CPU backend against an independent fp32 PyTorch implementation
# (tests/parity/ref_gpt.py): both start from ctrain's initial weights (a step-0 checkpoint),
# read the same token stream, and after several optimizer steps (accumulation over 8
# micro-batches, LR warmdown, Muon momentum warmup) every per-step loss, every parameter and
# the optimizer state must agree; with the record's optimizer additions (weight decay, EMA, SWA,
# late QAT) the averaged weights, the SWA count and the QAT switch too ("averages").
# The bounds: each case states the worst relative errors measured for it (the losses; the
# tensors: weights, optimizer state, averages) and is held to 10 times those, rounded up — the
# noise of fp32 arithmetic, not a blanket 1e-4 (two RoPE bugs that moved the loss by 5.2e-6
# passed a loss bound of 1e-4). Measured on 2026-11-28 (AMD EPYC, OpenBLAS's SkylakeX, Haswell
# and Sandybridge kernels, the worst of the three) with PyTorch 1.13. Runs with QAT are compared step by step (per_step: each
# step from ctrain's own checkpoint of the step before, parity.py says why): QAT's rounding is
# discontinuous, so two whole runs part ways once a weight lands within fp32 noise of a rounding
# boundary.
source "$CT_ROOT/tests/cli/lib.sh"
if ! /usr/bin/python3 -c 'import torch, h5py' 2>/dev/null; then
    skip_rest_python "python3-torch / python3-h5py not installed (scripts/install-deps.sh --test)"
fi
"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 || { fail data "from-text"; exit 1; }

parity() { # [--per-step] name loss_bound tensor_bound key=value ... (with ema/swa/qat keys parity.py also gives the "averages" verdict)
    local per_step=0
    [ "$1" = --per-step ] && { per_step=1; shift; }
    local name=$1 loss_tol=$2 tensor_tol=$3; shift 3
    local verdicts=losses\|weights\|optimizer_state expected=3
    case " $* " in *" ema_enabled=1 "*|*" swa_enabled=1 "*|*" qat_enabled=1 "*|*" late_qat=1 "*)
        verdicts=$verdicts\|averages expected=4;; esac
    local cfg=(train_files="$WORK/train.h5" vocab_size=256 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=8
               val_loss_every=0 threads=2 "$@")
    if ! "$CTRAIN" train "${cfg[@]}" iterations=0 out_dir="$name-init" >"$name-init.log" 2>&1; then
        fail "$name" "initial checkpoint: $(tail -3 "$name-init.log")"; return
    fi
    local every=()
    [ $per_step = 1 ] && every=(checkpoint_every=1 keep_checkpoints=1000)
    if ! "$CTRAIN" train "${cfg[@]}" "${every[@]}" out_dir="$name-run" >"$name-run.log" 2>&1; then
        fail "$name" "ctrain run: $(tail -3 "$name-run.log")"; return
    fi
    local init final args
    init=$(ls "$name-init"/checkpoints/step_*.h5) final=$(ls "$name-run"/checkpoints/step_*.h5 | tail -1)
    args=("$init" "$final")
    if [ $per_step = 1 ]; then # step 0 (the initial weights) joins the run's checkpoints 1..K
        cp "$init" "$name-run/checkpoints/" && args=(--per-step "$name-run/checkpoints")
    fi
    # parity.py prints its PASS/FAIL lines and exits 1 after a FAIL; any other end (an exception,
    # a missing file, a torch API change) is a failure of this test, never a silence.
    /usr/bin/python3 "$CT_ROOT/tests/parity/parity.py" "parity_$name" "${args[@]}" "$name-run/metrics.jsonl" "$loss_tol" "$tensor_tol" \
        >"$name-parity.out" 2>&1
    local rc=$?
    cat "$name-parity.out"
    if [ $rc -ne 0 ] && ! grep -q "^FAIL parity_$name/" "$name-parity.out"; then
        fail "${name}_checker" "parity.py exited with status $rc without a verdict: $(tail -c 600 "$name-parity.out" | tr '\n' ' ')"
    elif [ $rc -eq 0 ] && [ "$(grep -cE "^PASS parity_$name/($verdicts) " "$name-parity.out")" != $expected ]; then
        fail "${name}_checker" "parity.py exited 0 without passing ${verdicts//|/, }"
    fi
}

# tied embeddings, 3 layers (one decoder block without a skip), GQA 4/2, warmdown over the
# last 3 of 6 steps, momentum warmup over 4
# measured: losses 4.3e-8, tensors 6.2e-6
parity tied 4.4e-7 6.2e-5 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 iterations=6 warmdown_iters=3 \
    muon_momentum_warmup_steps=4
# untied lm_head, global-norm clipping, 2 layers, MQA (1 kv head), mlp_mult 3
# measured: losses 1.72e-7, tensors 7.27e-6
parity untied_clip 1.8e-6 7.3e-5 num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 mlp_mult=3 tie_embeddings=0 \
    grad_clip_norm=0.3 iterations=4 warmdown_iters=2 muon_momentum_warmup_steps=2
# the record stack (issue 36): partial RoPE with NTK base scaling (T 32 > 16), LN scale, XSA in
# the last 2 of 4 blocks, SmearGate, the bigram hash embedding with its projection, orthogonal
# init, fractional mlp_mult
# measured: losses 2.5e-8, tensors 7.65e-6
parity record 2.5e-7 7.7e-5 num_layers=4 model_dim=64 num_heads=4 num_kv_heads=2 mlp_mult=2.5 rope_dims=8 rope_train_seq_len=16 \
    ln_scale=1 xsa_last_n=2 smear_gate=1 bigram_vocab_size=64 bigram_dim=32 ortho_init=1 iterations=5 warmdown_iters=2 \
    muon_momentum_warmup_steps=3
# untied, MQA, XSA in every block, a bigram table as wide as the model (no projection), the
# partial RoPE without scaling
# measured: losses 1.72e-7, tensors 6.9e-6
parity record_untied 1.8e-6 6.9e-5 num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 rope_dims=4 xsa_last_n=2 \
    bigram_vocab_size=5 bigram_dim=48 smear_gate=1 grad_clip_norm=0.3 iterations=4 warmdown_iters=2 \
    muon_momentum_warmup_steps=2

# The record's optimizer additions. muon_wd and adam_wd differ in every case (with them equal, a
# step that decayed Adam's parameters by muon_wd passed every case).
# Tied: decoupled weight decay on Muon (muon_wd) and on the
# AdamW groups (adam_wd: tok_emb, the scalars), the EMA (a fast decay, so that it moves well
# away from the initial weights), late QAT switching on at step 6 of 8 (lr scale 0.5 < 0.6)
# measured: losses 3.24e-8, tensors 6.24e-6
parity --per-step optim_tied 3.3e-7 6.3e-5 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 iterations=8 warmdown_iters=4 \
    muon_momentum_warmup_steps=4 muon_wd=0.5 adam_wd=0.1 ema_enabled=1 ema_decay=0.9 late_qat=1 qat_threshold=0.6
# untied (lm_head: plain Adam, no decay; fake-quantized in the forward), QAT from step 0, SWA
# every 2 steps once the lr scale is below 0.5: snapshots after steps 6 and 8 (not 7). A Muon lr
# of 8 (muon_wd 0.02) takes the block matrices' row maxima to 1-5 from step 4 on, so that QAT's
# scales rowmax/31 are above their 1/31 floor: at the default lr every row stays below 0.3, each
# scale sits at the floor and most weights quantize to 0, whatever the divisor or the clamp
# measured: losses 1.72e-7, tensors 9.5e-6
parity --per-step optim_untied_swa 1.8e-6 9.5e-5 num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 mlp_mult=3 tie_embeddings=0 \
    iterations=8 warmdown_iters=8 muon_momentum_warmup_steps=2 matrix_lr=8 muon_wd=0.02 adam_wd=0.5 qat_enabled=1 \
    swa_enabled=1 swa_every=2 grad_clip_norm=0.3
# the whole record stack at once, slurm/golf-record-8xh100.conf's features (small): every model
# feature with the bigram projection, weight decay, EMA, clipping, and late QAT switching on
# mid-run as the record's code asks (the file leaves it off, as the record's run had it; so late
# QAT quantizes bigram.proj too)
# measured: losses 3.33e-8, tensors 1.08e-5
parity --per-step record_full 3.4e-7 1.1e-4 num_layers=4 model_dim=64 num_heads=4 num_kv_heads=2 mlp_mult=3 rope_dims=8 rope_train_seq_len=16 \
    ln_scale=1 xsa_last_n=2 smear_gate=1 bigram_vocab_size=64 bigram_dim=32 ortho_init=1 iterations=8 warmdown_iters=4 \
    muon_momentum_warmup_steps=4 muon_wd=0.2 adam_wd=0.05 ema_enabled=1 ema_decay=0.9 late_qat=1 qat_threshold=0.6 \
    grad_clip_norm=0.3
# multi-token prediction (the record's MTP_NUM_HEADS, off in the record): two heads on a tied
# model, their loss weighted 0.5 (zero-initialised heads: from step 2 on their gradient reaches x)
# measured: losses 7.9e-8, tensors 6.7e-6
parity mtp 8e-7 6.7e-5 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 mtp_num_heads=2 mtp_loss_weight=0.5 iterations=5 \
    warmdown_iters=2 muon_momentum_warmup_steps=3
# three heads on an untied model with QAT from step 0 (the heads are linear layers: quantized),
# Muon's weight decay (it reaches the heads; none on the Adam groups) and the EMA (it covers them)
# measured: losses 1.65e-7, tensors 7.23e-6
parity --per-step mtp_untied_qat 1.7e-6 7.3e-5 num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 mtp_num_heads=3 \
    iterations=5 warmdown_iters=3 muon_momentum_warmup_steps=2 qat_enabled=1 muon_wd=0.5 adam_wd=0 ema_enabled=1 \
    ema_decay=0.9
# the sparse attention head-output gate (issue 56, the 1.0611 record's SparseGate): zero init (every
# gate 0.5 at step 0), scale 0.5, XSA in every block before it, qk_gain_init 5, LN scale, GQA,
# the gate reading 12 of 64 channels of the attention input
# (the gate's weights are the worst tensor: zero at step 0, where c_proj's zeros give them no
# gradient, then small gradients that Adam normalises)
# measured: losses 6.33e-8, tensors 3.21e-5
parity sparse_gate 6.4e-7 3.3e-4 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 xsa_last_n=3 qk_gain_init=5 ln_scale=1 \
    sparse_attn_gate_enabled=1 gate_window=12 iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4 adam_wd=0.02
# untied, MQA, no XSA (the gate on the attention output itself), a random init (std 0.5), scale
# 2 and the gate reading every channel (gate_window = model_dim)
# measured: losses 1.72e-7, tensors 6.93e-6
parity sparse_gate_untied 1.8e-6 7e-5 num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 \
    sparse_attn_gate_enabled=1 sparse_attn_gate_scale=2 sparse_attn_gate_init_std=0.5 gate_window=48 iterations=4 \
    warmdown_iters=2 muon_momentum_warmup_steps=2 grad_clip_norm=0.3

# The 1.0611 record's schedule (issue 56): warmdown_frac 0.85 over 20 steps, so step 3 (progress
# 3/20 = 0.15, below 1 - 0.85 = 0.15000000000000002 in double) trains at 1 and step 4 starts the
# warmdown; min_lr 0.1 floors step 19 (progress 0.95). The logged lr scales are held to the
# formula evaluated by Python, exactly, besides the parity verdicts.
# measured (the worst of OpenBLAS's SkylakeX, Haswell, Sandybridge): losses 5.3e-8, tensors 6.0e-6
parity frac_schedule 5.3e-7 6e-5 num_layers=2 model_dim=32 num_heads=2 num_kv_heads=1 iterations=20 warmdown_frac=0.85 \
    min_lr=0.1 muon_momentum_warmup_steps=5
if /usr/bin/python3 - frac_schedule-run/metrics.jsonl >frac_lr.out 2>&1 <<'PY'
import json, sys
got = [json.loads(l)["lr_scale"] for l in open(sys.argv[1]) if '"lr_scale"' in l]
want = []
for step in range(20):
    frac = step / 20
    want.append(1.0 if frac < 1.0 - 0.85 else max((1.0 - frac) / 0.85, 0.1))
bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
if len(got) != 20 or bad:
    sys.exit(f"{len(got)} steps logged; differing (step, ctrain, formula): {bad[:4]}")
PY
then pass frac_schedule_lr_scales; else fail frac_schedule_lr_scales "$(tail -2 frac_lr.out)"; fi
# The record's Muon and embedding decay: Polar Express (4 of its 5 triples), MuonEq-R, embed_wd
# apart from adam_wd (the bigram table decays with tok_emb), on a tied model with the bigram
# projection and a tall MLP matrix
# measured (the worst of the three; a reference without the row normalisation, Polar Express or
# embed_wd is off by 2e-3 to 4e-3 in the losses): losses 5.7e-8, tensors 1.87e-5
parity frontier_optim 5.7e-7 1.9e-4 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 mlp_mult=3 bigram_vocab_size=64 \
    bigram_dim=32 iterations=6 warmdown_frac=0.5 min_lr=0.2 muon_momentum_warmup_steps=3 muon_backend_steps=4 \
    muon_polar_express=1 muon_row_normalize=1 muon_wd=0.2 adam_wd=0.05 embed_wd=0.3
# the 1.0611 record's MLP and skip gates (issue 56): leaky relu^2 at the record's slope 0.5 and
# sigmoid gates on the U-Net skips; 5 layers: two gated skips and a decoder block without one;
# adam_wd decays skip_gates (scalar group), clipping
# measured: losses 7.22e-8, tensors 6.70e-6
parity frontier_mlp 7.3e-7 6.7e-5 num_layers=5 model_dim=64 num_heads=4 num_kv_heads=2 mlp_negative_slope=0.5 \
    skip_gates_enabled=1 iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4 adam_wd=0.1 grad_clip_norm=0.3
# untied, MQA, a slope whose products round (0.3), beside the 1.1248 record's LN scale, XSA and
# SmearGate
# measured: losses 1.72e-7, tensors 5.85e-6
parity frontier_mlp_untied 1.8e-6 5.9e-5 num_layers=4 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 \
    mlp_negative_slope=0.3 skip_gates_enabled=1 ln_scale=1 xsa_last_n=2 smear_gate=1 grad_clip_norm=0.3 iterations=5 \
    warmdown_iters=2 muon_momentum_warmup_steps=2
# depth recurrence (issue 56): looping (blocks 1..2 once more: 0,1,2,1,2,3,4, three gated skip
# rows) switches on at step 3 of 6, mid-run; and a run that loops from step 0 on 3 layers
# measured: losses 4.61e-8, tensors 6.38e-6 (switch); losses 3.57e-8, tensors 5.81e-6 (always)
parity layer_loop_switch 4.7e-7 6.4e-5 num_layers=5 model_dim=64 num_heads=4 num_kv_heads=2 num_loops=1 loop_start=1 \
    loop_end=2 enable_looping_at=0.5 skip_gates_enabled=1 iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4
parity layer_loop_always 3.6e-7 5.9e-5 num_layers=3 model_dim=48 num_heads=4 num_kv_heads=2 num_loops=2 loop_start=1 \
    loop_end=1 iterations=4 warmdown_iters=2 muon_momentum_warmup_steps=2

# parallel residual lanes (issue 56): lane 0 through the attention, lane 1 through the MLP, both
# taking both outputs through parallel_post_lambdas / parallel_resid_lambdas. adam_eps 1e-5 in
# every case: at step 0 (attn.proj and mlp.proj zero) every lane is a multiple of x0 row by row,
# which the final RMSNorm does not see, so the resid lambdas' exact gradient is 0 and each side
# computes ~1e-10 of rounding noise, which Adam at eps 1e-8 would blow up into different steps of
# ~1e-3 (measured: 2.4 relative in their exp_avg after one step); from step 1 on their gradients
# are ~1e-3, far above 1e-5.
# tied, 4 layers, both decoder blocks parallel (the first one's lane 0 with the skip), mean
# measured (OpenBLAS Cooperlake kernels): losses 6.75e-8, tensors 5.83e-5 (resid lambdas' exp_avg_sq)
parity lanes_mean 6.8e-7 5.9e-4 num_layers=4 model_dim=64 num_heads=4 num_kv_heads=2 parallel_start_layer=2 adam_eps=1e-5 \
    iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4
# untied, MQA, LN scale, XSA in both parallel blocks, clipping; lane 0 leaves
# measured: losses 1.72e-7, tensors 6.54e-5
parity lanes_attn 1.8e-6 6.6e-4 num_layers=3 model_dim=48 num_heads=4 num_kv_heads=1 mlp_mult=3 tie_embeddings=0 ln_scale=1 \
    xsa_last_n=2 parallel_start_layer=1 parallel_final_lane=attn adam_eps=1e-5 iterations=5 warmdown_iters=2 \
    muon_momentum_warmup_steps=3 grad_clip_norm=0.3
# 2 layers (one parallel block), lane 1 leaves, adam_wd on the lambdas
# measured: losses 1.56e-8, tensors 5.89e-6
parity lanes_mlp 1.6e-7 5.9e-5 num_layers=2 model_dim=32 num_heads=2 num_kv_heads=1 parallel_start_layer=1 \
    parallel_final_lane=mlp adam_eps=1e-5 adam_wd=0.1 iterations=5 warmdown_iters=2 muon_momentum_warmup_steps=3
# the frontier stack: depth recurrence switching on at step 3 of 6 (blocks 1..2 once more:
# 0,1,2,1,2,3,4,5; before: 0..5), gated skips (the looped plan's 4 rows), leaky relu^2, LN scale,
# XSA in the last 2 blocks, which are parallel in both plans (mean)
# measured: losses 4.33e-8, tensors 2.60e-5
parity lanes_frontier 4.4e-7 2.6e-4 num_layers=6 model_dim=64 num_heads=4 num_kv_heads=2 num_loops=1 loop_start=1 \
    loop_end=2 enable_looping_at=0.5 skip_gates_enabled=1 mlp_negative_slope=0.5 ln_scale=1 xsa_last_n=2 \
    parallel_start_layer=4 adam_eps=1e-5 iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4
# lanes inside the loop: parallel_start_layer = loop_start = 1, so every decoder run of both plans
# is parallel (looped 0,1,2,1,2,3,4: the first parallel run repeats block 1; the lambdas'
# gradients are final after block 2's first run), gated skips into lane 0, lane 0 leaves
# measured: losses 1.19e-7, tensors 5.79e-5
parity lanes_in_loop 1.2e-6 5.8e-4 num_layers=5 model_dim=48 num_heads=4 num_kv_heads=2 num_loops=1 loop_start=1 \
    loop_end=2 enable_looping_at=0.5 parallel_start_layer=1 parallel_final_lane=attn skip_gates_enabled=1 adam_eps=1e-5 \
    iterations=6 warmdown_iters=3 muon_momentum_warmup_steps=4

# The 1.0611 record's SmearGate with the BOS mask (issue 56). The byte-level data has no BOS, so
# bos.h5 is train.h5 with a token 1 (recorded as bos_id) inserted before every paragraph and
# sentence (219 of them: segments of varied lengths, most rows starting mid-document);
# nobos.h5 holds the same tokens with bos_id 0, a token that never occurs (the unmasked formula).
# smear_lambda starts at 0 (the identity, and no gradient for smear_gate.weight): scalar_lr 0.2
# moves it to ~0.8 within the run so that the gate and its weights are exercised.
if ! /usr/bin/python3 - train.h5 <<'PY' >smear_data.out 2>&1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as h:
    t = h["tokens"][:].astype(np.int64)
    attrs = dict(h["tokens"].attrs)
    tables = {k: h["tokenizer"][k][:] for k in h["tokenizer"]}
at = np.flatnonzero(((t[:-1] == 10) & (t[1:] == 10)) | ((t[:-1] == 46) & (t[1:] == 32))) + 2
t = np.insert(t, np.concatenate([[0], at[at < len(t)]]), 1)
for name, bos in (("bos.h5", 1), ("nobos.h5", 0)):
    with h5py.File(name, "w") as h:
        d = h.create_dataset("tokens", data=t.astype(np.uint16), chunks=True)
        for k, v in attrs.items():
            if k != "tokens_crc32":
                d.attrs[k] = v
        d.attrs["bos_id"] = np.int64(bos)
        for k, v in tables.items():
            h.create_dataset("tokenizer/" + k, data=v)
PY
then fail smear_bos_data "$(tail -3 smear_data.out)"; fi
# tied, GQA, the gate reading 12 of 64 channels
# measured (OpenBLAS Haswell kernels only): losses 2.58e-8, tensors 6.31e-6
parity smear_bos 2.6e-7 6.4e-5 train_files="$WORK/bos.h5" num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 \
    smear_gate_enabled=1 gate_window=12 iterations=6 warmdown_iters=3 scalar_lr=0.2 muon_momentum_warmup_steps=4
# untied, MQA, the bigram branch (with its projection: the gate smears the embedding sum), the
# gate reading every channel (gate_window = model_dim), clipping
# measured (OpenBLAS Haswell kernels only): losses 1.72e-7, tensors 9.25e-6
parity smear_bos_bigram 1.8e-6 9.3e-5 train_files="$WORK/bos.h5" num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 \
    tie_embeddings=0 bigram_vocab_size=64 bigram_dim=32 smear_gate_enabled=1 gate_window=48 iterations=5 \
    warmdown_iters=2 scalar_lr=0.2 muon_momentum_warmup_steps=2 grad_clip_norm=0.3
# the mask matters: the same run on nobos.h5 (no position masked) has the same first loss
# (lambda = 0) and different later ones
"$CTRAIN" train train_files="$WORK/nobos.h5" vocab_size=256 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=8 \
    val_loss_every=0 threads=2 num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 smear_gate_enabled=1 gate_window=12 \
    iterations=6 warmdown_iters=3 scalar_lr=0.2 muon_momentum_warmup_steps=4 out_dir=smear_nobos >smear_nobos.log 2>&1
if /usr/bin/python3 - smear_bos-run/metrics.jsonl smear_nobos/metrics.jsonl >smear_mask.out 2>&1 <<'PY'
import json, sys
a, b = ([json.loads(l)["train_loss"] for l in open(f) if '"train_loss"' in l] for f in sys.argv[1:3])
if len(a) != 6 or len(b) != 6 or a[0] != b[0] or any(x == y for x, y in zip(a[1:], b[1:])):
    sys.exit(f"masked {a} vs unmasked {b}: expected 6 losses each, equal at step 1 only")
PY
then pass smear_bos_mask_matters; else fail smear_bos_mask_matters "$(tail -2 smear_mask.out)"; fi
# data without a BOS: refused at the start, naming the key and the file
if "$CTRAIN" train train_files="$WORK/train.h5" vocab_size=256 train_seq_len=32 train_batch_tokens=512 \
    grad_accum_slots=8 val_loss_every=0 num_layers=2 model_dim=32 num_heads=2 num_kv_heads=1 smear_gate_enabled=1 \
    iterations=1 out_dir=smear_none >smear_none.log 2>&1; then
    fail smear_bos_needs_bos "trained on data without a bos_id"
elif grep -q "smear_gate_enabled = 1: train_files: '.*train.h5' records no bos_id" smear_none.log; then
    pass smear_bos_needs_bos
else
    fail smear_bos_needs_bos "$(tail -2 smear_none.log)"
fi
# the other paths that run the forward get the data's bos_id: sampling (from the checkpoint's
# training files) and the golf round trip with its sliding window (from the validation files;
# validation data without a bos_id is refused)
if "$CTRAIN" sample smear_bos-run --tokens 8 >smear_sample.out 2>&1; then pass smear_bos_sample
else fail smear_bos_sample "$(tail -2 smear_sample.out)"; fi
smear_final=$(ls smear_bos-run/checkpoints/step_*.h5 | tail -1)
if "$CTRAIN" ckpt golf "$smear_final" --val-files "$WORK/bos.h5" --eval-stride 16 --out smear.stz >smear_golf.out 2>&1 &&
    grep -q "_sliding_window_exact val_loss" smear_golf.out; then pass smear_bos_round_trip
else fail smear_bos_round_trip "$(tail -2 smear_golf.out)"; fi
expect_fail smear_bos_round_trip_needs_bos 1 "smear_gate_enabled = 1: the validation data '.*train.h5' records no bos_id" \
    "$CTRAIN" ckpt golf "$smear_final" --val-files "$WORK/train.h5" --out smear2.stz
# Document packing (issue 56): each micro-batch one row of 64 tokens (512 / 8 slots), cut at every
# BOS and into chunks of max_doc_len; attention within the chunks, row-absolute RoPE positions
# at train_seq_len's base (NTK-scaled: 32 > rope_train_seq_len 16). The byte-level data gets a
# bos_id: byte 10 (newline), so lines are the documents (lengths 1 to ~75: rows hold several,
# and long lines are cut at 16)
# measured (OpenBLAS's Cooperlake kernels): losses 2.24e-8, tensors 5.06e-6
/usr/bin/python3 - "$WORK/train.h5" "$WORK/train_bos.h5" <<'PY' || fail packing_data "could not write train_bos.h5"
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as h:
    h["tokens"].attrs["bos_id"] = np.int64(10)
PY
parity packing 2.3e-7 5.1e-5 train_files="$WORK/train_bos.h5" doc_packing=1 max_doc_len=16 num_layers=3 model_dim=64 num_heads=4 \
    num_kv_heads=2 rope_dims=8 rope_train_seq_len=16 xsa_last_n=1 iterations=5 warmdown_iters=2 muon_momentum_warmup_steps=3
# the documents matter: the same rows (train_seq_len 64, so max_doc_len cuts nothing) packed and
# unpacked start from the same weights and differ only by the BOS cuts: their losses after 3
# steps must part by far more than fp32 noise (measured 2.5e-4 relative at step 4; the first
# loss is equal, as attn.proj starts at zero)
pack_vs_plain() { # name doc_packing
    "$CTRAIN" train train_files="$WORK/train_bos.h5" vocab_size=256 train_seq_len=64 train_batch_tokens=512 grad_accum_slots=8 \
        val_loss_every=0 threads=2 num_layers=2 model_dim=32 num_heads=2 num_kv_heads=1 iterations=4 warmdown_iters=1 \
        doc_packing=$2 out_dir="$1" >"$1.log" 2>&1 && grep -o '"train_loss": *[0-9.e+-]*' "$1/metrics.jsonl" | tail -1 | sed 's/.*: *//'
}
packed=$(pack_vs_plain bos_packed 1) plain=$(pack_vs_plain bos_plain 0)
if [ -n "$packed" ] && [ -n "$plain" ] && /usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) <= 1e-5 * abs(b))" "$packed" "$plain"; then
    pass packing_cuts_matter
else
    fail packing_cuts_matter "packed loss '$packed' vs unpacked '$plain': expected to differ by > 1e-5 relative ($(tail -2 bos_packed.log))"
fi

# packing needs the data's BOS: byte-level data records bos_id -1, refused at the start naming
# the file and the key
expect_fail packing_needs_bos 1 "doc_packing = 1: train_files: '.*train.h5' records no bos_id" "$CTRAIN" train \
    train_files="$WORK/train.h5" vocab_size=256 train_seq_len=32 train_batch_tokens=512 grad_accum_slots=8 doc_packing=1 \
    iterations=1 out_dir=nobos

# packed rows at world 2 (MPICH's mpiexec) are the slots of world 1, with the same segments: the
# first training loss and the initial packed validation (rows shared out to ranks) agree to
# 1e-12, later ones to fp32 noise (measured: the first two equal, the rest 1.2e-9 to 1.03e-8 relative)
if command -v mpiexec >/dev/null 2>&1; then
    for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL)'); do unset "$v"; done
    /usr/bin/python3 - "$WORK/train_bos.h5" "$WORK/val_bos.h5" <<'PY' || fail packing_ranks_data "could not write val_bos.h5"
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as h:  # the last 20 % as the validation split
    t = h["tokens"][:]
    attrs = dict(h["tokens"].attrs)
    del h["tokens"]
    d = h.create_dataset("tokens", data=t[len(t) * 4 // 5:])
    for k, v in attrs.items():
        if k != "tokens_crc32":
            d.attrs[k] = v
PY
    pr=(train_files="$WORK/train_bos.h5" val_files="$WORK/val_bos.h5" vocab_size=256 train_seq_len=32 train_batch_tokens=256
        grad_accum_slots=2 doc_packing=1 max_doc_len=16 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2
        iterations=3 warmdown_iters=1 threads=1 tied_embed_init_std=0.5)
    expect_ok packing_ranks_1 "$CTRAIN" train "${pr[@]}" out_dir=pw1
    expect_ok packing_ranks_2 timeout 120 mpiexec -launcher fork -n 2 "$CTRAIN" train "${pr[@]}" out_dir=pw2 collective_timeout=60
    /usr/bin/python3 - pw1/metrics.jsonl pw2/metrics.jsonl <<'PY' >pclose.out 2>&1 && pass packing_ranks_2_equal_1 || fail packing_ranks_2_equal_1 "$(cat pclose.out)"
import json, sys
def vals(p):
    return [r.get("train_loss", r.get("val_loss")) for r in map(json.loads, open(p)) if "train_loss" in r or "val_loss" in r]
a, b = vals(sys.argv[1]), vals(sys.argv[2])
assert len(a) == len(b) == 5, (a, b)
rel = [abs(x - y) / abs(y) for x, y in zip(a, b)]
print("relative differences", rel)
assert rel[0] <= 1e-12 and rel[1] <= 1e-12 and max(rel) <= 1e-6, (a, b)
PY
else
    for c in packing_ranks_1 packing_ranks_2 packing_ranks_2_equal_1; do skip "$c" "mpiexec not installed (apt-get install mpich)"; done
fi

finish
