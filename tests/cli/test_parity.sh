#!/usr/bin/env bash
# test_parity.sh — ctrain's CPU backend against an independent fp32 PyTorch implementation
# (tests/parity/ref_gpt.py): both start from ctrain's initial weights (a step-0 checkpoint),
# read the same token stream, and after several optimizer steps (accumulation over 8
# micro-batches, LR warmdown, Muon momentum warmup) every per-step loss, every parameter and
# the optimizer state must agree to a relative error of 1e-4 per tensor; with the record's
# optimizer additions (weight decay, EMA, SWA, late QAT) the averaged weights, the SWA count
# and the QAT switch too ("averages"). Runs with QAT are compared step by step (per_step: each
# step from ctrain's own checkpoint of the step before, parity.py says why): QAT's rounding is
# discontinuous, so two whole runs part ways once a weight lands within fp32 noise of a rounding
# boundary.
source "$CT_ROOT/tests/cli/lib.sh"
if ! /usr/bin/python3 -c 'import torch, h5py' 2>/dev/null; then
    skip_rest "python3-torch / python3-h5py not installed (scripts/install-deps.sh --test)"
fi
"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 || { fail data "from-text"; exit 1; }

parity() { # [--per-step] name, key=value ... (with ema/swa/qat keys parity.py also gives the "averages" verdict)
    local per_step=0
    [ "$1" = --per-step ] && { per_step=1; shift; }
    local name=$1; shift
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
    /usr/bin/python3 "$CT_ROOT/tests/parity/parity.py" "parity_$name" "${args[@]}" "$name-run/metrics.jsonl" 1e-4 \
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
parity tied num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 iterations=6 warmdown_iters=3 \
    muon_momentum_warmup_steps=4
# untied lm_head, global-norm clipping, 2 layers, MQA (1 kv head), mlp_mult 3
parity untied_clip num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 mlp_mult=3 tie_embeddings=0 \
    grad_clip_norm=0.3 iterations=4 warmdown_iters=2 muon_momentum_warmup_steps=2
# the record stack (issue 36): partial RoPE with NTK base scaling (T 32 > 16), LN scale, XSA in
# the last 2 of 4 blocks, SmearGate, the bigram hash embedding with its projection, orthogonal
# init, fractional mlp_mult
parity record num_layers=4 model_dim=64 num_heads=4 num_kv_heads=2 mlp_mult=2.5 rope_dims=8 rope_train_seq_len=16 \
    ln_scale=1 xsa_last_n=2 smear_gate=1 bigram_vocab_size=64 bigram_dim=32 ortho_init=1 iterations=5 warmdown_iters=2 \
    muon_momentum_warmup_steps=3
# untied, MQA, XSA in every block, a bigram table as wide as the model (no projection), the
# partial RoPE without scaling
parity record_untied num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 rope_dims=4 xsa_last_n=2 \
    bigram_vocab_size=5 bigram_dim=48 smear_gate=1 grad_clip_norm=0.3 iterations=4 warmdown_iters=2 \
    muon_momentum_warmup_steps=2

# the record's optimizer additions, tied: decoupled weight decay on Muon (muon_wd) and on the
# AdamW groups (adam_wd: tok_emb, the scalars), the EMA (a fast decay, so that it moves well
# away from the initial weights), late QAT switching on at step 6 of 8 (lr scale 0.5 < 0.6)
parity --per-step optim_tied num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 iterations=8 warmdown_iters=4 \
    muon_momentum_warmup_steps=4 muon_wd=0.5 adam_wd=0.5 ema_enabled=1 ema_decay=0.9 late_qat=1 qat_threshold=0.6
# untied (lm_head: plain Adam, no decay; fake-quantized in the forward), QAT from step 0, SWA
# every 2 steps once the lr scale is below 0.5: snapshots after steps 6 and 8 (not 7)
parity --per-step optim_untied_swa num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 mlp_mult=3 tie_embeddings=0 \
    iterations=8 warmdown_iters=8 muon_momentum_warmup_steps=2 muon_wd=0.5 adam_wd=0.5 qat_enabled=1 \
    swa_enabled=1 swa_every=2 grad_clip_norm=0.3
# the whole record stack at once, as slurm/golf-record-8xh100.conf trains it (small): every model
# feature with the bigram projection (so late QAT quantizes bigram.proj too), weight decay, EMA,
# late QAT switching on mid-run, clipping
parity --per-step record_full num_layers=4 model_dim=64 num_heads=4 num_kv_heads=2 mlp_mult=3 rope_dims=8 rope_train_seq_len=16 \
    ln_scale=1 xsa_last_n=2 smear_gate=1 bigram_vocab_size=64 bigram_dim=32 ortho_init=1 iterations=8 warmdown_iters=4 \
    muon_momentum_warmup_steps=4 muon_wd=0.5 adam_wd=0.5 ema_enabled=1 ema_decay=0.9 late_qat=1 qat_threshold=0.6 \
    grad_clip_norm=0.3
# multi-token prediction (the record's MTP_NUM_HEADS, off in the record): two heads on a tied
# model, their loss weighted 0.5 (zero-initialised heads: from step 2 on their gradient reaches x)
parity mtp num_layers=3 model_dim=64 num_heads=4 num_kv_heads=2 mtp_num_heads=2 mtp_loss_weight=0.5 iterations=5 \
    warmdown_iters=2 muon_momentum_warmup_steps=3
# three heads on an untied model with QAT from step 0 (the heads are linear layers: quantized),
# weight decay (Muon's reaches the heads) and the EMA (it covers them)
parity --per-step mtp_untied_qat num_layers=2 model_dim=48 num_heads=4 num_kv_heads=1 tie_embeddings=0 mtp_num_heads=3 \
    iterations=5 warmdown_iters=3 muon_momentum_warmup_steps=2 qat_enabled=1 muon_wd=0.5 adam_wd=0.5 ema_enabled=1 \
    ema_decay=0.9

finish
