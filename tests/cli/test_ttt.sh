#!/usr/bin/env bash
# test_ttt.sh — `ctrain eval` and the score-first test-time-training evaluation (issue 57,
# docs/running.md "Test-time training") on the CPU: bad values are errors naming the key or the
# file (a --dump over an input or into checkpoints/ too); the evaluation against the PyTorch
# reference of the same procedure (tests/parity/ttt_ref.py: every document's loss sum, one
# document's adapters, the base weights after each phase, val_bpb, within 1e-5) for AdamW and
# SGD adapters, several gradient steps, adapters switched off and phases; learning rate 0
# equals the `docs` evaluation bit for bit; prefix 0 is per-document LoRA alone (any phase
# count); CT_TTT_BASE_GRADS=1 (the chunks' backward making the base's weight gradients too)
# changes no bit; every target scored exactly once; changing one validation token changes no earlier
# score; 2 ranks give the bits of 1; the time budget stops adapting and says so; a run's end
# scores its artifact on every rank of its job, a stop there leaves the test-time training
# alone to its requeue, and an error on one rank (in a global step or a batch, with or without
# a stop on another) ends every rank at once with exit 1.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3

# ---- data: byte-level text with a BOS (token 1, never in text) starting every line: documents of
# 1 to ~80 predictions (empty lines give one-prediction documents) ----
"$CTRAIN" data from-text --out train0.h5 --val-out val0.h5 --val-fraction 0.25 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; finish; }
"$PY" - <<'PY' >data.out 2>&1 || { fail make_data "$(tail -3 data.out)"; finish; }
import h5py, numpy as np
def with_bos(src, dst, keep=None):
    with h5py.File(src, "r") as h:
        t = h["tokens"][:].astype(np.int64)
        attrs = dict(h["tokens"].attrs)
        tables = {k: h["tokenizer"][k][:] for k in h["tokenizer"]}
    if keep:
        t = t[:keep]
    at = np.flatnonzero(t[:-1] == 10) + 1
    t = np.insert(t, np.concatenate([[0], at[at < len(t)]]), 1)
    with h5py.File(dst, "w") as h:
        d = h.create_dataset("tokens", data=t.astype(np.uint16), chunks=True)
        for k, v in attrs.items():
            if k != "tokens_crc32":
                d.attrs[k] = v
        d.attrs["bos_id"] = np.int64(1)
        for k, v in tables.items():
            h.create_dataset("tokenizer/" + k, data=v)
    return t
with_bos("train0.h5", "train.h5")
t = with_bos("val0.h5", "val.h5", keep=2400)
# varied bytes per token, so that val_bpb checks the bytes rule
with h5py.File("val.h5", "r+") as f:
    v = np.arange(256)
    f["tokenizer/base_bytes"][...] = (v % 4 + 1).astype(np.int16)
    f["tokenizer/has_leading_space"][...] = (v % 3 == 0).astype(np.uint8)
    f["tokenizer/is_boundary_token"][...] = (v % 5 == 0).astype(np.uint8)
print("val documents:", int((t == 1).sum()))
# the same split without its first token: it starts inside a document
with h5py.File("val.h5", "r") as f, h5py.File("val_late.h5", "w") as g:
    d = g.create_dataset("tokens", data=f["tokens"][1:])
    for k, v in f["tokens"].attrs.items():
        d.attrs[k] = v
    for k in f["tokenizer"]:
        g.create_dataset("tokenizer/" + k, data=f["tokenizer"][k][:])
PY

# ---- a small model with the frontier's parts, trained a few steps ----
run=(train_files=train.h5 val_files=val.h5 vocab_size=256 num_layers=4 model_dim=32 num_heads=4 num_kv_heads=2
     train_seq_len=32 train_batch_tokens=256 grad_accum_slots=2 val_loss_every=0 checkpoint_every=0 threads=2
     iterations=6 warmdown_iters=2 smear_gate_enabled=1 gate_window=8 num_loops=1 loop_start=1 loop_end=2
     enable_looping_at=0.5 parallel_start_layer=3 xsa_last_n=1 skip_gates_enabled=1 mlp_negative_slope=0.5
     ln_scale=1 sparse_attn_gate_enabled=1 out_dir=m)
expect_ok train_model "$CTRAIN" train "${run[@]}"
ck=m/checkpoints/step_00000006.h5
# the evaluation's shape: the split in sequences of 32 (train_seq_len), windows of 32 in chunks of 8,
# batches of 4
# (learning rates small enough that the adapters' training is not chaotic: at ttt_lora_lr = 0.01
# Adam's sign-like steps on near-zero gradients magnify rounding into 1e-3 differences)
ttt=(ttt_eval_seq_len=32 ttt_chunk_size=8 ttt_batch_size=4 ttt_lora_rank=4 ttt_lora_lr=0.001
     ttt_weight_decay=0.5 ttt_beta2=0.99 phased_ttt_prefix_docs=0)
# phases: 12 prefix documents in 3 global steps, rows of 32 in chunks of 64 tokens, 2 rows a step,
# 2 warmup chunks
phased=(phased_ttt_prefix_docs=12 phased_ttt_num_phases=3 global_ttt_chunk_tokens=64 global_ttt_batch_seqs=2
        global_ttt_lr=0.003 global_ttt_warmup_chunks=2)

# ---- errors naming the key or the file ----
expect_fail rank_zero 2 'ttt_lora_rank = 0' "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" ttt_lora_rank=0
expect_fail rank_above_dim 2 'ttt_lora_rank = 33' "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" ttt_lora_rank=33
expect_fail chunk_zero 2 'ttt_chunk_size = 0' "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" ttt_chunk_size=0
expect_fail phases_above_prefix 2 'phased_ttt_num_phases = 5' \
    "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" phased_ttt_prefix_docs=3 phased_ttt_num_phases=5
expect_fail not_an_eval_key 2 "'iterations=3': not an evaluation key" "$CTRAIN" eval "$ck" iterations=3
expect_fail bad_mode 2 "--mode 'ttt,fast': 'fast' is not one of" "$CTRAIN" eval "$ck" --mode ttt,fast
expect_fail no_bos 1 "needs the validation data's bos_id: 'val0.h5' records none" "$CTRAIN" eval "$ck" --mode ttt --val-files val0.h5 "${ttt[@]}"
expect_fail bos_not_first 1 "val_late.h5' does not start with BOS" "$CTRAIN" eval "$ck" --mode ttt --val-files val_late.h5 \
    "${ttt[@]}"
# CTRAIN_FAULT's ERR (an injected error, for the ranks' cases below) is for a named stage only
expect_fail fault_err_needs_stage 1 "CTRAIN_FAULT: 'ERR@3.1': ERR is for a named stage" \
    env CTRAIN_FAULT=ERR@3.1 "$CTRAIN" train "${run[@]}" out_dir=m_fault
# the dump never over a file the evaluation reads, nor into checkpoints/ (it wrote them, exit 0)
mkdir -p din && cp val.h5 din/losses.f32
expect_fail dump_over_input 2 "--dump 'din/losses.f32' is the input 'din/losses.f32'" \
    "$CTRAIN" eval "$ck" --mode docs --dump din --val-files din/losses.f32 "${ttt[@]}"
cmp -s val.h5 din/losses.f32 && pass dump_input_kept || fail dump_input_kept "din/losses.f32 was written over"
expect_fail dump_in_checkpoints 2 "--dump 'm/checkpoints/[a-z_.]+' lies in a checkpoints/ folder" \
    "$CTRAIN" eval "$ck" --mode docs --dump m/checkpoints "${ttt[@]}"
# device = cuda takes test-time training (its hooks against the CPU's: tests/unit/test_gpu_step.c's
# ttt_* cases); with no GPU visible here it gets as far as choosing one (a refusal would exit 2)
expect_cuda_takes cuda_takes_ttt "$CTRAIN" eval "$ck" --mode ttt --device cuda "${ttt[@]}"

# ---- the evaluation, its lines and files ----
# a ttt_batch_size far above the split's documents sizes nothing for rows never used (it sized
# every buffer for all of them: some 500 GB here, exit 1) and scores as one batch of every
# document does; a --dump-doc past the documents is refused before the dump writes a file
expect_ok batch_above_docs "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" ttt_batch_size=1048576
sed -n 's/^\(ttt val_loss:[0-9.]* val_bpb:[0-9.]*\).*/\1/p' out >batch_huge.out
expect_ok batch_all_docs "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}" ttt_batch_size=4096
sed -n 's/^\(ttt val_loss:[0-9.]* val_bpb:[0-9.]*\).*/\1/p' out >batch_all.out
[ -s batch_all.out ] && cmp -s batch_huge.out batch_all.out && pass batch_above_docs_same_score ||
    fail batch_above_docs_same_score "$(cat batch_huge.out) vs $(cat batch_all.out)"
expect_fail dump_doc_beyond 1 "--dump-doc 99999: the validation split has [0-9]+ documents" \
    "$CTRAIN" eval "$ck" --mode ttt --dump d_far --dump-doc 99999 "${ttt[@]}"
[ -z "$(ls -A d_far 2>/dev/null)" ] && pass dump_doc_beyond_nothing_written ||
    fail dump_doc_beyond_nothing_written "d_far holds: $(ls d_far)"
expect_ok ttt_runs "$CTRAIN" eval "$ck" --mode plain,docs,ttt --dump d_ttt --dump-doc 20 "${ttt[@]}"
cp out ttt.out
for mode in plain docs ttt; do
    expect_grep "line_$mode" "^$mode val_loss:[0-9.]+ val_bpb:[0-9.]+ tokens:[0-9]+ bytes:[0-9]+ eval_time:[0-9]+ms$" ttt.out
done
expect_grep progress '^ttt: batch [0-9]+/[0-9]+ segment 1/1 docs:[0-9]+ tokens:[0-9]+ running val_bpb:[0-9.]+' ttt.out
# every target of the split (after its first token, a BOS) scored exactly once: no NaN in losses.f32
"$PY" - d_ttt val.h5 <<'PY' >once.out 2>&1 && pass scored_once || fail scored_once "$(tail -2 once.out)"
import sys, h5py, numpy as np
l = np.fromfile(sys.argv[1] + "/losses.f32", dtype=np.float32)
n = len(h5py.File(sys.argv[2], "r")["tokens"])
S = 32
trim = (n - 1) // S * S + 1
assert len(l) == trim - 1, (len(l), trim)
assert not np.isnan(l).any(), np.flatnonzero(np.isnan(l))[:10]
PY

# ---- against PyTorch ----
ref() { # name dump keys...: ttt_ref.py's verdicts as this test's cases
    local name=$1 dump=$2; shift 2
    "$PY" "$CT_ROOT/tests/parity/ttt_ref.py" "$name" "$ck" "$dump" 1e-5 "$@" >"ref_$name.out" 2>&1
    local rc=$?
    sed "s/^\(PASS\|FAIL\) /\1 $TEST_NAME\//" "ref_$name.out" | grep -E '^(PASS|FAIL) '
    grep -qE '^(PASS|FAIL) ' "ref_$name.out" || fail "ref_$name" "ttt_ref.py exited $rc: $(tail -c 600 "ref_$name.out")"
}
if ! "$PY" -c 'import torch, h5py' 2>/dev/null; then
    skip_rest_python "python3-torch / python3-h5py not installed"
fi
ref adam d_ttt "${ttt[@]}"
expect_ok sgd_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_sgd --dump-doc 20 "${ttt[@]}" ttt_optimizer=sgd ttt_beta1=0.9
ref sgd d_sgd "${ttt[@]}" ttt_optimizer=sgd ttt_beta1=0.9
# two optimizer steps a chunk (the second forwards again), k, o and mlp adapters off
few=(ttt_grad_steps=2 ttt_beta1=0.5 ttt_k_lora=0 ttt_o_lora=0 ttt_mlp_lora=0)
expect_ok steps_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_steps --dump-doc 20 "${ttt[@]}" "${few[@]}"
ref steps d_steps "${ttt[@]}" "${few[@]}"
expect_ok phased_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_phased --dump-doc 20 "${ttt[@]}" "${phased[@]}"
cp out phased.out
expect_grep phased_steps_said '^ttt: global step 3/3 on 12 documents \([0-9]+ tokens\): [0-9]+ SGD steps' phased.out
ref phased d_phased "${ttt[@]}" "${phased[@]}"

# ---- exactness rules ----
same_dump() { # name dir_a dir_b: losses.f32 and docs.tsv's loss sums bit for bit
    if cmp -s "$2/losses.f32" "$3/losses.f32" && [ "$(cut -f6 "$2/docs.tsv")" = "$(cut -f6 "$3/docs.tsv")" ]; then
        pass "$1"
    else fail "$1" "$2 and $3 differ: $(cmp "$2/losses.f32" "$3/losses.f32" 2>&1 | head -1)"; fi
}
exact() { grep -E "^$1_exact " "$2" | sed "s/^$1_exact //"; }
# learning rate 0 (adapters and global steps, 3 phases) is the docs evaluation, bit for bit
expect_ok docs_runs "$CTRAIN" eval "$ck" --mode docs --dump d_docs "${ttt[@]}"
cp out docs.out
# data without byte counts (no tokenizer tables): val_bpb is not a number, and summary.json still
# JSON (null)
"$PY" -c '
import h5py
with h5py.File("val.h5", "r") as f, h5py.File("val_nobytes.h5", "w") as g:
    d = g.create_dataset("tokens", data=f["tokens"][:])
    for k, v in f["tokens"].attrs.items():
        d.attrs[k] = v
'
expect_ok nobytes_runs "$CTRAIN" eval "$ck" --mode docs --val-files val_nobytes.h5 --dump d_nob "${ttt[@]}"
"$PY" - <<'PY' >nob.out 2>&1 && pass nobytes_summary_is_json || fail nobytes_summary_is_json "$(tail -2 nob.out)"
import json
s = json.load(open("d_nob/summary.json"))
assert s["val_bpb"] is None and isinstance(s["val_loss"], float) and s["bytes"] == 0, s
PY
expect_ok lr0_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_lr0 "${ttt[@]}" "${phased[@]}" ttt_lora_lr=0 global_ttt_lr=0
cp out lr0.out
same_dump lr0_equals_docs d_docs d_lr0
expect_same lr0_equals_docs_result "val_loss and val_bpb" "$(exact docs docs.out)" "$(exact ttt lr0.out)"
# with no prefix document the phase count changes nothing; a global step at learning rate 0 is
# no global step
expect_ok prefix0_phases3 "$CTRAIN" eval "$ck" --mode ttt --dump d_p3 "${ttt[@]}" phased_ttt_num_phases=3
same_dump prefix0_any_phases d_ttt d_p3
expect_ok global_lr0 "$CTRAIN" eval "$ck" --mode ttt --dump d_g0 "${ttt[@]}" "${phased[@]}" global_ttt_lr=0
same_dump global_lr0_is_no_step d_ttt d_g0
# CT_TTT_BASE_GRADS=1: the chunks' backward also makes the block matrices' weight gradients (into
# a scratch buffer; the earlier path, kept for timing): the adapters' gradients do not depend on
# them, so the same bits, phases included (their global steps make real gradients either way);
# any other value than 0 or 1 is refused, naming the variable
expect_ok base_grads_runs env CT_TTT_BASE_GRADS=1 "$CTRAIN" eval "$ck" --mode ttt --dump d_bg --dump-doc 20 "${ttt[@]}" \
    "${phased[@]}"
cp out bg.out
same_dump base_grads_same_bits d_phased d_bg
doc20() { if [ -s "$1/adapters_doc_20.safetensors" ]; then cksum <"$1/adapters_doc_20.safetensors"; else echo "none in $1"; fi; }
expect_same base_grads_same_result "val_loss and val_bpb, doc 20's adapters" "$(exact ttt phased.out) $(doc20 d_phased)" \
    "$(exact ttt bg.out) $(doc20 d_bg)"
expect_fail base_grads_bad_value 1 "CT_TTT_BASE_GRADS = 'yes': expected 0 .* or 1" \
    env CT_TTT_BASE_GRADS=yes "$CTRAIN" eval "$ck" --mode ttt "${ttt[@]}"

# ---- causality: one token changed; every score before it, and every document scored before the
# global step that could have read it, keeps its bits ----
"$PY" - d_phased <<'PY' >pick.out 2>&1 || fail causality_pick "$(tail -2 pick.out)"
import sys, csv
rows = list(csv.DictReader(open(sys.argv[1] + "/docs.tsv"), delimiter="\t"))
# a document scored before every global step (segment 0) that the first global step trains on
# (the step takes the shortest of what has been scored: segment 0's lowest batch), the longest
# there; its token 21 changes (a mid-chunk target)
first = [r for r in rows if r["segment"] == "0"]
low = min(int(r["batch"]) for r in first)
pick = max((r for r in first if int(r["batch"]) == low), key=lambda r: int(r["predictions"]))
assert int(pick["predictions"]) > 30, pick
print(pick["doc"], int(pick["start"]) + 21, pick["batch"])
PY
read -r cdoc cpos cbatch <pick.out
"$PY" - "$cpos" <<'PY' || fail causality_data "could not write val_changed.h5"
import sys, shutil, h5py
shutil.copy("val.h5", "val_changed.h5")
with h5py.File("val_changed.h5", "r+") as f:
    t = f["tokens"]
    p = int(sys.argv[1])
    assert t[p] != 1
    t[p] = 120 if t[p] != 120 else 121
PY
expect_ok causality_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_changed --val-files val_changed.h5 "${ttt[@]}" "${phased[@]}"
"$PY" - d_phased d_changed "$cdoc" "$cpos" "$cbatch" <<'PY' >causal.out 2>&1 && pass causality || fail causality "$(tail -3 causal.out)"
import sys, csv
import numpy as np
a_dir, b_dir, doc, pos, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
a = np.fromfile(a_dir + "/losses.f32", dtype=np.float32)
b = np.fromfile(b_dir + "/losses.f32", dtype=np.float32)
rows = {int(r["doc"]): r for r in csv.DictReader(open(a_dir + "/docs.tsv"), delimiter="\t")}
d = rows[doc]
start = int(d["start"])
# entry j scores target token j + 1: the changed document's targets before position pos
assert (a[start:pos - 1].view(np.uint32) == b[start:pos - 1].view(np.uint32)).all(), "an earlier score changed"
assert a[pos - 1] != b[pos - 1], "the changed token's own score did not change"
# every other document of its batch (scored side by side with it) and of its segment (scored before
# any global step could read it) unchanged; documents of later segments may change (the global
# steps train on it)
assert d["segment"] == "0", d
later = 0
for r in rows.values():
    s, n = int(r["start"]), int(r["predictions"])
    same = (a[s:s + n].view(np.uint32) == b[s:s + n].view(np.uint32)).all()
    if int(r["doc"]) != doc and r["segment"] == "0":
        assert same, f"doc {r['doc']} of segment 0 changed"
    later += r["segment"] != "0" and not same
assert later > 0, "no later document changed: the global steps did not read the changed token"
print("ok")
PY

# ---- 2 ranks: the plan's batches shared out; the same bits as 1 rank without global steps, and
# with them within the rounding of the gradients' sum across ranks ----
if command -v mpiexec >/dev/null 2>&1; then
    for v in $(compgen -e | grep -E '^(SLURM_|SLURMD_|PMI_|PMIX_|HYDI_|MPI_LOCAL)'); do unset "$v"; done
    expect_ok ranks_2 timeout 300 mpiexec -launcher fork -n 2 "$CTRAIN" eval "$ck" --mode ttt --dump d_r2 "${ttt[@]}" \
        threads=1
    cp out r2.out
    expect_grep ranks_2_said '^ttt: 43 documents, .* 2 ranks$' r2.out
    same_dump ranks_2_equal_1 d_ttt d_r2
    expect_ok ranks_2_phased timeout 300 mpiexec -launcher fork -n 2 "$CTRAIN" eval "$ck" --mode ttt --dump d_r2p \
        "${ttt[@]}" "${phased[@]}" threads=1
    "$PY" - d_phased d_r2p <<'PY' >r2p.out 2>&1 && pass ranks_2_phased_close || fail ranks_2_phased_close "$(tail -2 r2p.out)"
import sys, json, csv
import numpy as np
a, b = (json.load(open(d + "/summary.json")) for d in sys.argv[1:3])
rel = abs(a["val_loss"] - b["val_loss"]) / a["val_loss"]
print(f"val_loss 1 rank {a['val_loss']!r}, 2 ranks {b['val_loss']!r}: relative {rel:.1e}")
assert rel <= 1e-6 and a["tokens"] == b["tokens"] and a["bytes"] == b["bytes"]
# segment 0, scored before any global step, the same bits; both ranks scored some of it
la, lb = (np.fromfile(d + "/losses.f32", dtype=np.uint32) for d in sys.argv[1:3])
ranks = set()
for r in csv.DictReader(open(sys.argv[2] + "/docs.tsv"), delimiter="\t"):
    if r["segment"] == "0":
        s, n = int(r["start"]), int(r["predictions"])
        assert (la[s:s + n] == lb[s:s + n]).all(), f"doc {r['doc']} of segment 0 differs"
        ranks.add(r["rank"])
assert ranks == {"0", "1"}, ranks
PY
else
    for c in ranks_2 ranks_2_said ranks_2_equal_1 ranks_2_phased ranks_2_phased_close; do
        skip "$c" "mpiexec not installed (apt-get install mpich)"
    done
fi

# ---- the time budget: past it, documents are scored without adapting, and the run says so ----
expect_ok budget_runs "$CTRAIN" eval "$ck" --mode ttt --dump d_budget "${ttt[@]}" "${phased[@]}" ttt_time_budget=1e-9
cp out budget.out
expect_grep budget_said '^ttt: time budget ttt_time_budget = 1e-09s reached: 11 of 11 batches scored without adapting, global steps taken 0 of 3$' budget.out
same_dump budget_equals_docs d_docs d_budget

# ---- an artifact's weights: ckpt golf's round trip, then its test-time training, equal ctrain
# eval --artifact's ----
expect_ok golf_ttt "$CTRAIN" ckpt golf "$ck" --out g.ptz ttt_enabled=1 "${ttt[@]}" "${phased[@]}"
cp out golf.out
expect_grep golf_ttt_line '^final_int8_zlib_ttt_phased val_loss:[0-9.]+ val_bpb:[0-9.]+ tokens:[0-9]+ bytes:[0-9]+ eval_time:[0-9]+ms$' golf.out
expect_ok artifact_eval "$CTRAIN" eval "$ck" --artifact g.ptz --mode plain,ttt "${ttt[@]}" "${phased[@]}"
cp out artifact.out
expect_same artifact_plain_equals_round_trip "val_loss and val_bpb" "$(exact final_int8_zlib_roundtrip golf.out)" \
    "$(exact plain artifact.out)"
expect_same artifact_ttt_equals_golf_ttt "val_loss and val_bpb" "$(exact final_int8_zlib_ttt_phased golf.out)" \
    "$(exact ttt artifact.out)"
# a run's end (golf_artifact = 1) ends the same way
expect_ok run_end_ttt "$CTRAIN" train "${run[@]}" out_dir=m2 iterations=2 golf_artifact=1 ttt_enabled=1 "${ttt[@]}"
cp out run_end.out
expect_grep run_end_ttt_line '^final_int8_zlib_ttt_phased val_loss:[0-9.]+ val_bpb:[0-9.]+ tokens:[0-9]+ bytes:[0-9]+ eval_time:[0-9]+ms$' run_end.out
expect_ok run_end_artifact_eval "$CTRAIN" eval m2 --artifact m2/final_model.int8.stz --mode ttt
expect_same run_end_ttt_equals_eval "val_loss and val_bpb" "$(exact final_int8_zlib_ttt_phased run_end.out)" \
    "$(exact ttt out)"

# ---- a run's end on 2 ranks: rank 0 writes the artifact, then both ranks score it with test-time
# training (the batches shared out), the line printed once; the score of a 1-rank evaluation of the
# same artifact (the same bits without global steps, with them within the ranks_2 cases' bound). A
# stop (rank 1's, as batch 3 starts) exits 75 with the test-time training left; the requeued run
# does it without writing the artifact again ----
close() { # name a b: the _exact val_loss of a and b within the ranks_2 cases' relative 1e-6
    "$PY" - "$2" "$3" <<'PY' >close.out 2>&1 && pass "$1" || fail "$1" "$(tail -2 close.out)"
import sys
a, b = (float(x.split()[0].split(":")[1]) for x in sys.argv[1:3])
rel = abs(a - b) / a
print(f"val_loss {a!r} and {b!r}: relative {rel:.1e}")
assert rel <= 1e-6
PY
}
if command -v mpiexec >/dev/null 2>&1; then
    r2=(timeout 300 mpiexec -launcher fork -n 2 "$CTRAIN" train "${run[@]}" iterations=2 golf_artifact=1 ttt_enabled=1
        "${ttt[@]}" threads=1)
    expect_ok run_end_ranks_2 "${r2[@]}" out_dir=e2
    cp out e2.out
    expect_same run_end_ranks_2_line_once "final_int8_zlib_ttt_phased lines" 1 \
        "$(grep -c '^final_int8_zlib_ttt_phased val_loss:' e2.out)"
    expect_grep run_end_ranks_2_said '^final_int8_zlib_ttt_phased: 43 documents, .* 2 ranks$' e2.out
    expect_ok run_end_ranks_2_eval "$CTRAIN" eval e2 --artifact e2/final_model.int8.stz --mode ttt
    expect_same run_end_ranks_2_equals_1 "val_loss and val_bpb" "$(exact final_int8_zlib_ttt_phased e2.out)" \
        "$(exact ttt out)"
    # with global steps, stopped during the test-time training
    CTRAIN_FAULT='TERM@ttt:3%1' "${r2[@]}" "${phased[@]}" out_dir=e2p >stop.out 2>stop.err
    rc=$?
    if [ $rc -eq 75 ] && grep -qx 'left: golf_ttt' e2p/end_of_run.txt 2>/dev/null &&
        grep -q "^final_int8_zlib_ttt_phased: batch 3/11 " stop.out &&
        ! grep -q '^final_int8_zlib_ttt_phased val_loss:' stop.out &&
        grep -q "left: the golf artifact's test-time-training evaluation (recorded in" stop.out; then
        pass run_end_ttt_stop
    else fail run_end_ttt_stop "exit $rc, end_of_run.txt: $(cat e2p/end_of_run.txt 2>&1 | tail -1) :: $(tail -c 300 stop.out) $(tail -c 300 stop.err)"; fi
    artifact() { stat -c '%i %y %s' e2p/final_model.int8.stz; cksum <e2p/final_model.int8.stz; }
    before=$(artifact)
    expect_ok run_end_ttt_requeue "${r2[@]}" "${phased[@]}" out_dir=e2p
    cp out requeue.out
    expect_grep run_end_ttt_requeue_said "doing what is left: the golf artifact's test-time-training evaluation$" \
        requeue.out
    if ! grep -q 'Serialized model' requeue.out && [ "$(artifact)" = "$before" ] && [ ! -e e2p/end_of_run.txt ] &&
        [ "$(grep -c '^final_int8_zlib_ttt_phased val_loss:' requeue.out)" = 1 ]; then
        pass run_end_ttt_requeue_kept_artifact
    else fail run_end_ttt_requeue_kept_artifact "before: $before; after: $(artifact); $(grep -c Serialized requeue.out) \
Serialized line(s); end_of_run.txt $([ -e e2p/end_of_run.txt ] && echo left || echo removed)"; fi
    expect_ok run_end_phased_eval "$CTRAIN" eval e2p --artifact e2p/final_model.int8.stz --mode ttt
    close run_end_phased_close "$(exact final_int8_zlib_ttt_phased requeue.out)" "$(exact ttt out)"
    # rank 0's artifact fails (its GPTQ Hessians' path is a folder): both ranks end at once, exit 1,
    # the error said once, the artifact and its test-time training left
    mkdir -p e2x/final_model.hessians.h5
    "${r2[@]}" out_dir=e2x golf_format=gptq-brotli collective_timeout=60 >err_run.out 2>err_run.err
    rc=$?
    if [ $rc -eq 1 ] && [ "$(grep -c "cannot rename .*final_model.hessians.h5': Is a directory" err_run.err)" = 1 ] &&
        grep -qx 'left: golf_artifact golf_ttt' e2x/end_of_run.txt 2>/dev/null; then pass run_end_error_together
    else fail run_end_error_together "exit $rc :: $(tail -c 400 err_run.err)"; fi
    # an error on rank 1 alone (CTRAIN_FAULT's ERR) in a global step's SGD step (its forward and
    # backward passes) and in a per-document batch, and with a stop on rank 0 at the same point:
    # the ranks agree before each gradient sum and after each batch, so both ranks exit 1 (an
    # error outranks a stop) within seconds, well before collective_timeout = 600 would end a rank
    # left waiting; rank 0 says once that rank 1 failed and why; the artifact as written, its
    # test-time training left, no score printed
    ranks_fail() { # name fault what
        local name=$1 start=$SECONDS
        rm -f codes
        CTRAIN_FAULT=$2 timeout 300 mpiexec -launcher fork -n 2 sh -c '"$@"; rc=$?; echo "$PMI_RANK $rc" >>codes; exit $rc' \
            sh "$CTRAIN" train "${run[@]}" iterations=2 golf_artifact=1 ttt_enabled=1 "${ttt[@]}" threads=1 \
            "${phased[@]}" out_dir="$name" collective_timeout=600 >"$name.out" 2>"$name.err"
        local rc=$? took=$((SECONDS - start))
        local said="ctrain: error: rank 1 failed during $3: CTRAIN_FAULT: injected error ERR@${2##*ERR@}"
        said=${said%\%1}
        if [ $rc -eq 1 ] && [ "$(sort codes 2>/dev/null | tr '\n' ' ')" = "0 1 1 1 " ] && [ $took -lt 60 ] &&
            [ "$(grep -cxF "$said" "$name.err")" = 1 ]; then pass "$name"
        else fail "$name" "exit $rc after ${took}s, ranks' exits: $(tr '\n' ' ' <codes 2>&1) :: $(tail -c 400 "$name.err")"; fi
        if grep -qx 'left: golf_ttt' "$name/end_of_run.txt" 2>/dev/null && cmp -s e2p/final_model.int8.stz \
            "$name/final_model.int8.stz" && ! grep -q '^final_int8_zlib_ttt_phased val_loss:' "$name.out"; then
            pass "${name}_kept"
        else fail "${name}_kept" "end_of_run.txt: $(tail -1 "$name/end_of_run.txt" 2>&1); artifact $(cmp \
e2p/final_model.int8.stz "$name/final_model.int8.stz" 2>&1 || true); $(grep -c '_ttt_phased val_loss:' "$name.out") score line(s)"; fi
    }
    ranks_fail run_end_ttt_error_global 'ERR@ttt_global:2%1' "the test-time-training evaluation's global step 1"
    ranks_fail run_end_ttt_error_batch 'ERR@ttt:3%1' "the test-time-training evaluation"
    # an SGD step's update failing on rank 1 after the ranks agreed: rank 1's next agreement (the
    # step's last) meets rank 0's next SGD step's
    ranks_fail run_end_ttt_error_sgd 'ERR@ttt_sgd:2%1' "the test-time-training evaluation's global step 1"
    ranks_fail run_end_ttt_stop_and_error_global 'TERM@ttt_global:2%0,ERR@ttt_global:2%1' \
        "the test-time-training evaluation's global step 1"
    ranks_fail run_end_ttt_stop_and_error_batch 'TERM@ttt:3%0,ERR@ttt:3%1' "the test-time-training evaluation"
    # a stop alone in a global step ends it at the next SGD step's agreement, not at the step's end
    CTRAIN_FAULT='TERM@ttt_global:2%1' "${r2[@]}" "${phased[@]}" out_dir=e2g >stop_g.out 2>stop_g.err
    rc=$?
    if [ $rc -eq 75 ] && grep -qx 'left: golf_ttt' e2g/end_of_run.txt 2>/dev/null &&
        grep -q "stopped by a signal during the test-time-training evaluation's global step 1)" stop_g.out &&
        ! grep -q '^final_int8_zlib_ttt_phased: global step 1/3' stop_g.out; then pass run_end_ttt_stop_global
    else fail run_end_ttt_stop_global "exit $rc :: $(tail -c 300 stop_g.out) $(tail -c 300 stop_g.err)"; fi
else
    for c in run_end_ranks_2 run_end_ranks_2_line_once run_end_ranks_2_said run_end_ranks_2_eval \
        run_end_ranks_2_equals_1 run_end_ttt_stop run_end_ttt_requeue run_end_ttt_requeue_said \
        run_end_ttt_requeue_kept_artifact run_end_phased_eval run_end_phased_close run_end_error_together \
        run_end_ttt_error_global{,_kept} run_end_ttt_error_batch{,_kept} run_end_ttt_error_sgd{,_kept} run_end_ttt_stop_and_error_global{,_kept} \
        run_end_ttt_stop_and_error_batch{,_kept} run_end_ttt_stop_global; do
        skip "$c" "mpiexec not installed (apt-get install mpich)"
    done
fi

finish
