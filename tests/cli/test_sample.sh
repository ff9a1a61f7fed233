#!/usr/bin/env bash
# test_sample.sh — `ctrain sample`: with temperature 0 every generated token is the most likely
# next token of the project's PyTorch model (tests/parity/ref_gpt.py) on the same window
# (including windows that slide past train_seq_len); a seed fixes the text; top-k 1 is greedy;
# bytes in and out for byte-level models; clear usage errors.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

"$CTRAIN" data from-text --out train.h5 /usr/share/common-licenses/GPL-3 >/dev/null 2>&1 \
    || { fail make_data "from-text failed"; exit 1; }
run=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16
     train_batch_tokens=256 grad_accum_slots=2 iterations=20 val_loss_every=0 threads=1)
expect_ok sample_train "$CTRAIN" train "${run[@]}" out_dir=run

expect_ok sample_greedy "$CTRAIN" sample run --prompt "Copyright" --tokens 12 --temperature 0 --ids
greedy=$(cat out)
if "$PY" -c 'import h5py, torch' 2>/dev/null; then
    "$PY" - run/checkpoints/step_00000020.h5 "$greedy" "$CT_ROOT/tests/parity" >py.out 2>&1 <<'PY' \
        && pass greedy_is_model_argmax || fail greedy_is_model_argmax "$(tail -c 600 py.out)"
import sys, h5py, torch
sys.path.insert(0, sys.argv[3])
from ref_gpt import RefGPT, rms_norm
with h5py.File(sys.argv[1], "r") as f:
    params = {k: torch.from_numpy(f["model"][k][()]) for k in f["model"]}
    a = {k: f["config"].attrs[k] for k in f["config"].attrs}
cfg = {k: (float(a[k]) if k in ("rope_base", "logit_softcap") else int(a[k]))
       for k in ("num_layers", "num_heads", "num_kv_heads", "model_dim", "rope_base", "logit_softcap",
                 "tie_embeddings", "train_seq_len")}
m, T = RefGPT(cfg, params), cfg["train_seq_len"]
def logits(window):  # the forward of RefGPT.loss, up to the softcapped logits
    x = rms_norm(m.p["tok_emb.weight"][torch.tensor([window])])
    x0, skips = x, []
    for i in range(m.enc):
        x = m.block(i, x, x0); skips.append(x)
    for j in range(m.dec):
        if skips: x = x + m.p["skip_weights"][j] * skips.pop()
        x = m.block(m.enc + j, x, x0)
    z = rms_norm(x) @ m.p["tok_emb.weight"].T
    c = cfg["logit_softcap"]
    return c * torch.tanh(z / c)
ids = [int(t) for t in sys.argv[2].split()]
prompt = len("Copyright")
assert len(ids) == prompt + 12, ids
with torch.no_grad():
    for n in range(prompt, len(ids)):
        ctx = ids[max(0, n - T):n]
        window = ctx + [0] * (T - len(ctx))
        row = logits(window)[0, len(ctx) - 1]
        assert row[ids[n]] >= row.max() - 1e-4, (n, ids[n], int(row.argmax()), float(row[ids[n]]), float(row.max()))
print("ok")
PY
else
    skip_rest_python "h5py/torch not importable by $PY"
fi
expect_ok sample_topk1 "$CTRAIN" sample run --prompt "Copyright" --tokens 12 --top-k 1 --temperature 1 --ids
expect_same topk1_is_greedy "token ids" "$(cat out)" "$greedy"

expect_ok sample_seed_a "$CTRAIN" sample run --tokens 40 --temperature 1 --top-k 0 --seed 7 --ids
a=$(cat out)
expect_ok sample_seed_a_again "$CTRAIN" sample run --tokens 40 --temperature 1 --top-k 0 --seed 7 --ids
expect_same same_seed_same_text "token ids" "$(cat out)" "$a"
expect_ok sample_seed_b "$CTRAIN" sample run --tokens 40 --temperature 1 --top-k 0 --seed 8 --ids
[ -s out ] && [ -n "$a" ] && [ "$(cat out)" != "$a" ] && pass other_seed_other_text \
    || fail other_seed_other_text "seeds 7 and 8 gave '$a' and '$(cat out)'"

# bytes in, bytes out: the text starts with the prompt and has prompt + N bytes (+ newline)
expect_ok sample_text "$CTRAIN" sample run --prompt "GNU " --tokens 30
n=$(head -c 4 out)
[ "$n" = "GNU " ] && [ "$(wc -c <out)" = 35 ] && pass sample_text_bytes || fail sample_text_bytes "$(od -c out | head -3)"

expect_fail sample_bad_id 2 "--prompt-ids '1,999': expected comma-separated token ids below vocab_size 256" \
    "$CTRAIN" sample run --prompt-ids 1,999
expect_fail sample_both_prompts 2 'give --prompt or --prompt-ids, not both' "$CTRAIN" sample run --prompt a --prompt-ids 1
expect_fail sample_empty_prompt 2 "--prompt is empty: give some text, or leave --prompt out" "$CTRAIN" sample run --prompt ""
expect_fail sample_zero_tokens 2 "--tokens '0': expected an integer in \[1, 1000000\]" "$CTRAIN" sample run --tokens 0
expect_fail sample_bad_temperature 2 "--temperature 'hot'" "$CTRAIN" sample run --temperature hot
expect_fail sample_bad_device 2 "device = 'tpu': expected auto, cpu or cuda" "$CTRAIN" sample run --device tpu
# auto picks the CPU here (lib.sh hides GPUs) and says so on stderr; stdout holds only the sample
expect_ok sample_auto_device "$CTRAIN" sample run --prompt "Copyright" --tokens 12 --temperature 0 --ids
expect_same sample_auto_is_cpu_sample "token ids" "$(cat out)" "$greedy"
expect_grep sample_auto_note '^device: auto -> cpu \(' err
expect_fail sample_cuda_without_gpu 1 'cuda' "$CTRAIN" sample run --device cuda --tokens 2
expect_fail sample_no_checkpoint 1 "'nope' is a directory without checkpoints|cannot open" "$CTRAIN" sample nope

finish
