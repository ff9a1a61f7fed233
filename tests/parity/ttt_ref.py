"""ttt_ref.py — a PyTorch reference of ctrain's score-first phased LoRA test-time training (issue 57),
written from its description (the design's "What the record does" with ctrain's deterministic
rules, the contracts src/infer/ttt_plan.h and src/model/lora.h), not from ctrain's C code, on the
project's independent model (ref_gpt.py and its adapter hook).

The procedure, as this file runs it:
  split     the config's val_files, trimmed to ((n - 1) // S) * S + 1 tokens, S = eval_seq_len
            (train_seq_len when 0); a document starts at every BOS (the files' bos_id), its slice
            runs through the next BOS (the last: to the split's end), predictions = slice - 1.
  batches   documents by predictions ascending (ties: split order), cut into ttt_batch_size; the
            queue = batches by their longest document, descending (ties: batch index).
  segments  prefix = min(docs, phased_ttt_prefix_docs), b_k = floor(prefix (k+1) / K); segment k
            ends at the first queue position whose cumulative documents reach b_k; step k's
            documents = those of segments 0..k in (batch, slot) order, the first b_k.
  documents each scored alone from A = A0 (lora_init.safetensors), B = 0, a fresh optimizer:
            chunk c predicts [cC, e_c), window [w_c, e_c), w_c = max(0, e_c - E), RoPE positions
            from 0 (tables for E = ttt_eval_seq_len, 0 = S), plain causal attention; its losses
            (full softcapped softmax) summed in fp64; every chunk but the last then takes
            ttt_grad_steps steps on the mean of those losses (step 0 on the scoring graph) of
            torch.optim.AdamW (ttt_optimizer adam: eps 1e-10) or SGD (momentum ttt_beta1).
  global    after segment k < K: the step's slices joined, chunks of global_ttt_chunk_tokens
            targets, the last skipped, each other as floor(targets / S) rows of S (a packed row
            each: cut at every BOS, row-absolute positions, tables for S), optimizer steps of
            global_ttt_batch_seqs rows (loss = mean of the rows' mean CE), global_ttt_epochs times
            per chunk, clip_grad_norm_ when global_ttt_grad_clip > 0, one torch SGD per phase over
            every parameter, lr by ttt_plan.h's ttt_global_lr rule.
  sums      val_loss = sum of losses / targets, val_bpb = val_loss / ln 2 * targets / bytes
            (bytes: /bytes_per_token when the files have it, else the tokenizer tables).

Usage:
  ttt_ref.py NAME CHECKPOINT DUMP_DIR TOL [key=value ...]
      the real check: compares ctrain's dump (`ctrain eval CHECKPOINT --mode ttt --dump DUMP_DIR
      [--dump-doc N] key=value ...`, the same key=value overrides) with this reference:
      docs.tsv (the document list exactly, each loss_sum within TOL of max(1, |ours|)),
      summary.json (val_loss, val_bpb within TOL relative; tokens, bytes exactly),
      adapters_doc_<N>.safetensors and phase_<k>.safetensors when present (max abs difference
      <= TOL * max(1, max abs value), per tensor). A0 comes from DUMP_DIR/lora_init.safetensors.
      Prints one PASS/FAIL line per check group (tests/run.sh counts them); exits 1 after a FAIL.
  ttt_ref.py --emit OUT_DIR CHECKPOINT [key=value ...]
      writes THIS reference's results in the dump's format, with A0 drawn by torch from a fixed
      seed (written as lora_init.safetensors): only for checking this script's comparison against
      itself (PASS) and against a deliberately changed copy (FAIL). It is not a test of ctrain.
  ttt_ref.py --check-lr0 NAME CHECKPOINT [key=value ...]
      a check of the reference itself: with ttt_lora_lr = global_ttt_lr = 0 (forced) every
      document's loss sum equals, bit for bit, the plain model's (no adapters) on its windows.

Resolved where the description leaves room (see docs/testing.md's note):
  - RoPE: TTT windows use tables for E (base NTK-scaled when E > rope_train_seq_len), the global
    step's rows tables for S (scaled when S > rope_train_seq_len), as eval_seq_len's evaluation.
  - The global step's loss is the main cross-entropy only (no multi-token-prediction heads), QAT
    off, depth recurrence on when num_loops > 0.
  - global_ttt_epochs repeats each chunk's steps (the epoch loop inside the chunk loop).
  - The BOS-masked SmearGate uses the validation files' bos_id; with
    global_ttt_respect_doc_boundaries = 0 the global step's rows are plain causal rows.
"""
import glob
import json
import math
import os
import struct
import sys

import h5py
import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_gpt  # noqa: E402
from parity import read_config  # noqa: E402
from sliding import _UnreducedF  # noqa: E402  (RefGPT.loss keeping every position's loss)

# one thread: the shapes are tiny, and two threads on a busy machine spend most of the time waiting
# for each other (a 4 ms repeat_interleave of 512 floats measured)
torch.set_num_threads(1)

# the TTT keys' defaults (the design's key table) for checkpoints written before they existed
TTT_DEFAULTS = {
    "ttt_enabled": 0, "ttt_lora_rank": 96, "ttt_lora_alpha": 144.0, "ttt_lora_lr": 1e-4, "ttt_chunk_size": 48,
    "ttt_eval_seq_len": 2048, "ttt_batch_size": 64, "ttt_grad_steps": 1, "ttt_weight_decay": 1.0,
    "ttt_beta1": 0.0, "ttt_beta2": 0.999, "ttt_k_lora": 1, "ttt_mlp_lora": 1, "ttt_o_lora": 1,
    "ttt_optimizer": "adam", "phased_ttt_prefix_docs": 2000, "phased_ttt_num_phases": 1, "global_ttt_lr": 1e-3,
    "global_ttt_momentum": 0.9, "global_ttt_epochs": 1, "global_ttt_chunk_tokens": 32768,
    "global_ttt_batch_seqs": 32, "global_ttt_warmup_start_lr": 0.0, "global_ttt_warmup_chunks": 0,
    "global_ttt_grad_clip": 1.0, "global_ttt_respect_doc_boundaries": 1, "ttt_time_budget": 0.0,
}
KINDS = ("q", "k", "v", "o", "mlp")
EMIT_SEED = 1234


# ---- inputs: the checkpoint, the overrides, the validation split ----

def parse_overrides(cfg, pairs):
    """cfg with key=value pairs applied, each value parsed as the key's type (the checkpoint's
    value, else TTT_DEFAULTS'); TTT keys the checkpoint lacks get their defaults."""
    cfg = dict(cfg)
    for k, v in TTT_DEFAULTS.items():
        cfg.setdefault(k, v)
    for pair in pairs:
        if "=" not in pair:
            raise SystemExit(f"ttt_ref.py: '{pair}': expected key=value")
        k, v = pair.split("=", 1)
        if k not in cfg:
            raise SystemExit(f"ttt_ref.py: {k} = {v}: not a key of the checkpoint's config nor a TTT key")
        kind = type(cfg[k])
        try:
            cfg[k] = int(v) if kind is int else float(v) if kind is float else v
        except ValueError:
            raise SystemExit(f"ttt_ref.py: {k} = {v}: expected a {kind.__name__}")
    return cfg


def load_checkpoint(path, pairs):
    with h5py.File(path, "r") as h:
        cfg = read_config(h)
        params = {k: torch.from_numpy(np.array(v[...], dtype=np.float32)) for k, v in h["model"].items()}
    return parse_overrides(cfg, pairs), params


def eval_len(cfg):
    return int(cfg.get("eval_seq_len", 0)) or int(cfg["train_seq_len"])


def load_split(cfg):
    """(tokens of the trimmed split, bos_id, bytes of each position as a target [n], 0 at 0)."""
    files = sorted(glob.glob(cfg["val_files"]))
    if not files:
        raise SystemExit(f"ttt_ref.py: val_files = '{cfg['val_files']}': no file matches")
    parts, sidecar, bos, luts = [], [], None, None
    for f in files:
        with h5py.File(f, "r") as h:
            parts.append(np.asarray(h["tokens"][:], dtype=np.int64))
            b = int(h["tokens"].attrs.get("bos_id", -1))
            if bos is not None and b != bos:
                raise SystemExit(f"ttt_ref.py: {f}: bos_id {b}, the first file's is {bos}")
            bos = b
            sidecar.append(np.asarray(h["bytes_per_token"][:], dtype=np.int64) if "bytes_per_token" in h else None)
            if luts is None and "tokenizer/base_bytes" in h:
                luts = (np.asarray(h["tokenizer/base_bytes"][:], dtype=np.int64),
                        np.asarray(h["tokenizer/has_leading_space"][:], dtype=bool),
                        np.asarray(h["tokenizer/is_boundary_token"][:], dtype=bool))
    if bos < 0:
        raise SystemExit(f"ttt_ref.py: {files[0]}: no bos_id (TTT needs the validation data's documents)")
    tokens = np.concatenate(parts)
    S = eval_len(cfg)
    n = ((len(tokens) - 1) // S) * S + 1
    tokens = tokens[:n]
    tb = np.zeros(n, dtype=np.int64)
    if any(s is not None for s in sidecar):
        if any(s is None for s in sidecar):
            raise SystemExit(f"ttt_ref.py: {files[sidecar.index(None)]}: no /bytes_per_token, other files have it")
        tb[1:] = np.concatenate(sidecar)[1:n]
    elif luts is not None:
        base, space, boundary = luts
        tb[1:] = base[tokens[1:]] + (space[tokens[1:]] & ~boundary[tokens[:-1]])
    else:
        raise SystemExit(f"ttt_ref.py: {files[0]}: neither /bytes_per_token nor tokenizer tables")
    if tokens[0] != bos:
        raise SystemExit(f"ttt_ref.py: {files[0]}: the split does not start with BOS ({bos})")
    return tokens, bos, tb


# ---- the plan (ttt_plan.h's rules, written here again) ----

class Plan:
    def __init__(self, tokens, cfg, bos):
        n = len(tokens)
        starts = [int(i) for i in np.nonzero(tokens == bos)[0] if i < n - 1]  # a last-token BOS starts nothing
        self.start = starts
        self.pred = [(starts[i + 1] if i + 1 < len(starts) else n - 1) - s for i, s in enumerate(starts)]
        nd = len(starts)
        size = int(cfg["ttt_batch_size"])
        order = sorted(range(nd), key=lambda d: (self.pred[d], d))
        self.batches = [order[i:i + size] for i in range(0, nd, size)]
        self.batch = [0] * nd
        self.slot = [0] * nd
        for b, docs in enumerate(self.batches):
            for s, d in enumerate(docs):
                self.batch[d], self.slot[d] = b, s
        self.queue = sorted(range(len(self.batches)), key=lambda b: (-self.pred[self.batches[b][-1]], b))
        prefix = min(nd, int(cfg["phased_ttt_prefix_docs"]))
        K = int(cfg["phased_ttt_num_phases"]) if prefix > 0 else 0
        self.phase_docs = [prefix * (k + 1) // K for k in range(K)]
        cum, self.segment_end = [0], []
        for b in self.queue:
            cum.append(cum[-1] + len(self.batches[b]))
        for bk in self.phase_docs:
            self.segment_end.append(next(e for e in range(len(cum)) if cum[e] >= bk))
        self.segment_end.append(len(self.queue))

    def segment(self, k):
        """Queue positions of segment k."""
        return range(self.segment_end[k - 1] if k > 0 else 0, self.segment_end[k])

    def step_docs(self, k):
        docs = [d for q in range(self.segment_end[k]) for d in self.batches[self.queue[q]]]
        return sorted(docs, key=lambda d: (self.batch[d], self.slot[d]))[:self.phase_docs[k]]


def chunk_window(P, c, C, E):
    """(window start, window length, scored from, scored length) of chunk c, document offsets."""
    e = min((c + 1) * C, P)
    w = max(0, e - E)
    return w, e - w, c * C - w, e - c * C


def global_lr(i, n, lr, warm_lr, warm_chunks):
    w = max(min(warm_chunks, n - 1), 0)
    if i < w:
        return warm_lr + (lr - warm_lr) * i / max(w - 1, 1)
    return lr * 0.5 * (1.0 + math.cos(math.pi * (i - w) / max(n - 1 - w, 1)))


# ---- the model ----

def position_losses(model, x, y):
    saved = ref_gpt.F
    ref_gpt.F = _UnreducedF()
    try:
        return model.loss(x, y).reshape(-1)
    finally:
        ref_gpt.F = saved


def rope_for(cfg, rd, n):
    """RoPE tables for sequences of n tokens (the base NTK-scaled above rope_train_seq_len)."""
    base, rtl = cfg["rope_base"], cfg.get("rope_train_seq_len", 0)
    if rtl > 0 and n > rtl:
        base = base * ((n / rtl) ** (rd / (rd - 2)))
    return ref_gpt.rope_tables(n, rd, base)


class Ttt:
    def __init__(self, cfg, params, bos):
        c = dict(cfg, doc_packing=0, smear_gate_enabled=0)  # set below without reading train_files
        self.model = m = ref_gpt.RefGPT(c, params)
        m.cfg = cfg
        m.smear_bos, m.bos_id = bool(cfg.get("smear_gate_enabled", 0)), bos
        m.loop = cfg.get("num_loops", 0) > 0
        m.qat = False
        self.cfg, self.bos = cfg, bos
        self.S = eval_len(cfg)
        self.E = int(cfg["ttt_eval_seq_len"]) or self.S
        self.C = int(cfg["ttt_chunk_size"])
        self.rope_ttt = rope_for(cfg, m.rd, self.E)
        self.rope_global = rope_for(cfg, m.rd, self.S)
        self.runs = len(m.looped) if m.loop else m.L
        self.rank = int(cfg["ttt_lora_rank"])
        self.scale = float(np.float32(cfg["ttt_lora_alpha"] / cfg["ttt_lora_rank"]))
        kv = m.KV * m.hd
        on = {"q": 1, "k": cfg["ttt_k_lora"], "v": 1, "o": cfg["ttt_o_lora"], "mlp": cfg["ttt_mlp_lora"]}
        out = {"q": m.D, "k": kv, "v": kv, "o": m.D, "mlp": m.D}
        V = params["tok_emb.weight"].shape[0]
        self.shapes = {}  # adapter name -> (in, out)
        for r in range(self.runs):
            for k in KINDS:
                if on[k]:
                    self.shapes[f"lora.{r}.{k}"] = (m.D, out[k])
        self.shapes["lora.head"] = (m.D, V)

    def draw_a0(self, seed):
        g = torch.Generator().manual_seed(seed)
        return {f"{n}.A": (torch.rand(self.rank, i, generator=g) * 2 - 1) / math.sqrt(i)
                for n, (i, _) in self.shapes.items()}

    def check_a0(self, a0):
        want = {f"{n}.A": (self.rank, i) for n, (i, _) in self.shapes.items()}
        bad = [f"{k}: missing" for k in want if k not in a0]
        bad += [f"{k}: not expected" for k in a0 if k not in want]
        bad += [f"{k}: shape {list(a0[k].shape)}, expected {list(s)}" for k, s in want.items()
                if k in a0 and tuple(a0[k].shape) != s]
        return bad

    def forward(self, toks, w, n):
        m = self.model
        x = torch.from_numpy(toks[w:w + n]).view(1, n)
        y = torch.from_numpy(toks[w + 1:w + n + 1]).view(1, n)
        m.cos, m.sin = self.rope_ttt[0][:n], self.rope_ttt[1][:n]
        return position_losses(m, x, y)

    def document(self, toks, P, a0, adapt=True):
        """(loss sum in fp64, adapters after the last step) of a document: toks its slice."""
        m, cfg = self.model, self.cfg
        ad = {}
        for n, (_, o) in self.shapes.items():
            ad[n] = (a0[f"{n}.A"].clone().requires_grad_(True), torch.zeros(o, self.rank, requires_grad=True))
        s = self.scale

        def lora(run, kind, x):
            p = ad.get("lora.head" if kind == "head" else f"lora.{run}.{kind}")
            return None if p is None else ((x @ p[0].T) @ p[1].T) * s

        m.lora = lora if adapt else None
        leaves = [t for p in ad.values() for t in p]
        if cfg["ttt_optimizer"] == "adam":
            opt = torch.optim.AdamW(leaves, lr=cfg["ttt_lora_lr"], betas=(cfg["ttt_beta1"], cfg["ttt_beta2"]),
                                    eps=1e-10, weight_decay=cfg["ttt_weight_decay"], foreach=False)
        elif cfg["ttt_optimizer"] == "sgd":
            opt = torch.optim.SGD(leaves, lr=cfg["ttt_lora_lr"], momentum=cfg["ttt_beta1"],
                                  weight_decay=cfg["ttt_weight_decay"], foreach=False)
        else:
            raise SystemExit(f"ttt_ref.py: ttt_optimizer = {cfg['ttt_optimizer']}: expected adam or sgd")
        chunks = -(-P // self.C)
        total = 0.0
        for c in range(chunks):
            w, n, f, k = chunk_window(P, c, self.C, self.E)
            trained = adapt and c < chunks - 1 and cfg["ttt_grad_steps"] > 0
            with torch.set_grad_enabled(trained):
                losses = self.forward(toks, w, n)
            total += float(losses[f:f + k].double().sum())
            if not trained:
                continue
            for g in range(int(cfg["ttt_grad_steps"])):
                if g > 0:
                    losses = self.forward(toks, w, n)
                grads = torch.autograd.grad(losses[f:f + k].mean(), leaves)  # every adapter must be reached
                for t, gr in zip(leaves, grads):
                    t.grad = gr
                opt.step()
        m.lora = None
        return total, {f"{n}.{ab}": t.detach().clone() for n, p in ad.items() for ab, t in zip("AB", p)}

    def global_step(self, plan, tokens, k):
        """Phase k's SGD on the base (the model's parameters, in place)."""
        m, cfg, S = self.model, self.cfg, self.S
        stream = np.concatenate([tokens[plan.start[d]:plan.start[d] + plan.pred[d] + 1] for d in plan.step_docs(k)])
        N, Tc = len(stream) - 1, int(cfg["global_ttt_chunk_tokens"])
        chunks = -(-N // Tc)
        params = list(m.p.values())
        opt = torch.optim.SGD(params, lr=0.0, momentum=cfg["global_ttt_momentum"], foreach=False)
        # each row a packed row (cut at its start and every BOS), or plain causal rows without
        # global_ttt_respect_doc_boundaries
        m.packing, m.bos, m.max_doc_len = bool(cfg["global_ttt_respect_doc_boundaries"]), self.bos, S
        m.cos, m.sin = self.rope_global
        for i in range(chunks - 1):
            lr = global_lr(i, chunks, cfg["global_ttt_lr"], cfg["global_ttt_warmup_start_lr"],
                           int(cfg["global_ttt_warmup_chunks"]))
            rows = min(Tc, N - i * Tc) // S
            for _ in range(int(cfg["global_ttt_epochs"])):
                for r0 in range(0, rows, int(cfg["global_ttt_batch_seqs"])):
                    group = range(r0, min(r0 + int(cfg["global_ttt_batch_seqs"]), rows))
                    for j in group:
                        a = i * Tc + j * S
                        x = torch.from_numpy(stream[a:a + S]).view(1, S)
                        y = torch.from_numpy(stream[a + 1:a + S + 1]).view(1, S)
                        (m.loss(x, y) / len(group)).backward()
                    if cfg["global_ttt_grad_clip"] > 0:
                        torch.nn.utils.clip_grad_norm_(params, cfg["global_ttt_grad_clip"])
                    for pg in opt.param_groups:
                        pg["lr"] = lr
                    opt.step()
                    opt.zero_grad(set_to_none=True)
        m.packing, m.allowed = False, None

    def run(self, tokens, tb, a0, keep_docs=(), adapt=True):
        """Everything the dump holds: per-document sums, the summary, the kept documents' adapters,
        the base after each global step."""
        plan = Plan(tokens, self.cfg, self.bos)
        m = self.model
        res = {"plan": plan, "loss": {}, "bytes": {}, "adapters": {}, "phases": []}
        for k in range(len(plan.phase_docs) + 1):
            for t in m.p.values():
                t.requires_grad_(False)
            for q in plan.segment(k):
                for d in plan.batches[plan.queue[q]]:
                    s, P = plan.start[d], plan.pred[d]
                    res["loss"][d], ad = self.document(tokens[s:s + P + 1], P, a0, adapt)
                    res["bytes"][d] = int(tb[s + 1:s + P + 1].sum())
                    if d in keep_docs:
                        res["adapters"][d] = ad
            if k < len(plan.phase_docs):
                for t in m.p.values():
                    t.requires_grad_(True)
                self.global_step(plan, tokens, k)
                res["phases"].append({n: t.detach().clone() for n, t in m.p.items()})
        docs = range(len(plan.start))
        L = sum(res["loss"][d] for d in docs)
        T = sum(plan.pred[d] for d in docs)
        B = sum(res["bytes"][d] for d in docs)
        res["summary"] = {"val_loss": L / T, "val_bpb": L / T / math.log(2.0) * T / B, "tokens": T, "bytes": B}
        return res


# ---- safetensors (the dump's tensor files), without the package ----

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for k, v in header.items():
        if v["dtype"] not in DTYPES:
            raise SystemExit(f"ttt_ref.py: {path}: {k}: dtype {v['dtype']}, expected one of {sorted(DTYPES)}")
        a, b = v["data_offsets"]
        out[k] = torch.from_numpy(np.frombuffer(data[a:b], DTYPES[v["dtype"]]).astype(np.float32)
                                  .reshape(v["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for k in sorted(tensors):
        b = tensors[k].detach().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(tensors[k].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the comparison ----

def compare_tensors(mine, theirs, tol):
    """(ok, line) for one file's tensors: the same names, each max |a - b| <= tol * max(1, max |ours|)."""
    bad, worst, where = [], 0.0, ""
    if set(mine) != set(theirs):
        bad.append(f"names differ: ctrain only {sorted(set(theirs) - set(mine))[:4]}, "
                   f"reference only {sorted(set(mine) - set(theirs))[:4]}")
    for k in sorted(set(mine) & set(theirs)):
        a, b = mine[k], theirs[k]
        if tuple(a.shape) != tuple(b.shape):
            bad.append(f"{k}: shape {list(b.shape)}, reference {list(a.shape)}")
            continue
        err = float((a.double() - b.double()).abs().max()) / max(1.0, float(a.abs().max())) if a.numel() else 0.0
        if not err <= tol:
            bad.append(f"{k} {err:.2e}")
        if not err < worst:
            worst, where = err, k
    return bad, worst, where


def compare(name, res, dump, tol):
    plan, ok = res["plan"], True

    def verdict(group, bad, detail):
        nonlocal ok
        if bad:
            ok = False
            print(f"FAIL {name}/{group}: {'; '.join(bad[:6])}{' ...' if len(bad) > 6 else ''} (bound {tol:g})")
        else:
            print(f"PASS {name}/{group} ({detail}; bound {tol:g})")

    # docs.tsv
    path = os.path.join(dump, "docs.tsv")
    lines = [ln.rstrip("\n").split("\t") for ln in open(path) if ln.strip()]
    cols = {c: i for i, c in enumerate(lines[0])}
    need = ("doc", "start", "predictions", "batch", "slot", "loss_sum", "bytes")
    missing = [c for c in need if c not in cols]
    if missing:
        verdict("doc_list", [f"{path}: header {lines[0]} lacks {missing}"], "")
        return False
    rows = [{c: r[cols[c]] for c in need} for r in lines[1:]]
    nd = len(plan.start)
    bad = [] if len(rows) == nd else [f"{len(rows)} documents in {path}, {nd} in the reference"]
    for i, r in enumerate(rows[:nd]):
        want = (i, plan.start[i], plan.pred[i], plan.batch[i], plan.slot[i], res["bytes"][i])
        got = tuple(int(r[c]) for c in ("doc", "start", "predictions", "batch", "slot", "bytes"))
        if got != want:
            bad.append(f"line {i + 2}: (doc, start, predictions, batch, slot, bytes) {got}, reference {want}")
    verdict("doc_list", bad, f"{nd} documents in {len(plan.batches)} batches, {len(plan.phase_docs)} global steps: "
            "start, predictions, batch, slot, bytes equal")
    bad, worst, where = [], 0.0, 0
    for i, r in enumerate(rows[:nd]):
        ours = res["loss"][i]
        err = abs(float(r["loss_sum"]) - ours) / max(1.0, abs(ours))
        if not err <= tol:
            bad.append(f"doc {i}: ctrain {float(r['loss_sum']):.10g} reference {ours:.10g} ({err:.1e})")
        if not err < worst:
            worst, where = err, i
    verdict("doc_losses", bad, f"{min(len(rows), nd)} loss sums, worst {worst:.2e} at doc {where}")
    # summary.json
    s = json.load(open(os.path.join(dump, "summary.json")))
    ref = res["summary"]
    bad, errs = [], {}
    for k in ("val_loss", "val_bpb"):
        errs[k] = abs(s[k] - ref[k]) / abs(ref[k])
        if not errs[k] <= tol:
            bad.append(f"{k} ctrain {s[k]:.10f} reference {ref[k]:.10f} ({errs[k]:.1e})")
    for k in ("tokens", "bytes"):
        if int(s[k]) != ref[k]:
            bad.append(f"{k} ctrain {s[k]} reference {ref[k]}")
    verdict("summary", bad, f"val_loss {ref['val_loss']:.8f} ({errs['val_loss']:.1e}), val_bpb {ref['val_bpb']:.8f} "
            f"({errs['val_bpb']:.1e}), {ref['tokens']} tokens, {ref['bytes']} bytes")
    # adapters and phases
    for group, files, mine in (("adapters", sorted(glob.glob(os.path.join(dump, "adapters_doc_*.safetensors"))),
                                res["adapters"]),
                               ("phases", sorted(glob.glob(os.path.join(dump, "phase_*.safetensors"))),
                                dict(enumerate(res["phases"])))):
        if not files:
            continue
        bad, worst, where, count = [], 0.0, "", 0
        for f in files:
            idx = int(f.rsplit("_", 1)[1].split(".")[0])
            if idx not in mine:
                what = "document" if group == "adapters" else "global step"
                bad.append(f"{os.path.basename(f)}: the reference has no {what} {idx}")
                continue
            b, w, at = compare_tensors(mine[idx], read_safetensors(f), tol)
            bad += [f"{os.path.basename(f)}: {x}" for x in b]
            count += len(mine[idx])
            if not w < worst:
                worst, where = w, f"{os.path.basename(f)} {at}"
        verdict(group, bad, f"{len(files)} files, {count} tensors, worst {worst:.2e} in {where}")
    return ok


def emit(out, res, a0):
    os.makedirs(out, exist_ok=True)
    plan = res["plan"]
    write_safetensors(os.path.join(out, "lora_init.safetensors"), a0)
    with open(os.path.join(out, "docs.tsv"), "w") as f:
        f.write("doc\tstart\tpredictions\tbatch\tslot\tloss_sum\tbytes\n")
        for d in range(len(plan.start)):
            f.write(f"{d}\t{plan.start[d]}\t{plan.pred[d]}\t{plan.batch[d]}\t{plan.slot[d]}\t"
                    f"{res['loss'][d]:.17g}\t{res['bytes'][d]}\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(res["summary"], f)
    for d, ad in res["adapters"].items():
        write_safetensors(os.path.join(out, f"adapters_doc_{d}.safetensors"), ad)
    for k, p in enumerate(res["phases"]):
        write_safetensors(os.path.join(out, f"phase_{k}.safetensors"), p)


def setup(ckpt, pairs):
    cfg, params = load_checkpoint(ckpt, pairs)
    tokens, bos, tb = load_split(cfg)
    return Ttt(cfg, params, bos), tokens, tb


def main(argv):
    if len(argv) >= 2 and argv[0] == "--emit":
        out, ckpt, pairs = argv[1], argv[2], argv[3:]
        t, tokens, tb = setup(ckpt, pairs)
        a0 = t.draw_a0(EMIT_SEED)
        res = t.run(tokens, tb, a0, keep_docs=range(len(tokens)))
        emit(out, res, a0)
        print(f"wrote {out}: {len(res['loss'])} documents, {len(res['phases'])} global steps, "
              f"val_bpb {res['summary']['val_bpb']:.8f}")
        return 0
    if len(argv) >= 2 and argv[0] == "--check-lr0":
        name, ckpt, pairs = argv[1], argv[2], argv[3:] + ["ttt_lora_lr=0", "global_ttt_lr=0"]
        t, tokens, tb = setup(ckpt, pairs)
        a0 = t.draw_a0(EMIT_SEED)
        base = {k: v.detach().clone() for k, v in t.model.p.items()}
        res = t.run(tokens, tb, a0)
        plain = t.run(tokens, tb, a0, adapt=False)
        bad = [f"doc {d}: {res['loss'][d]!r} vs plain {plain['loss'][d]!r}" for d in res["loss"]
               if res["loss"][d] != plain["loss"][d]]
        unchanged = all(torch.equal(p[k], base[k]) for p in res["phases"] for k in p)
        if bad or not unchanged:
            print(f"FAIL {name}/lr0_equals_plain: {'; '.join(bad[:4])}{'' if unchanged else ' base weights moved'}")
            return 1
        print(f"PASS {name}/lr0_equals_plain ({len(bad) + len(res['loss'])} documents' loss sums bitwise equal to the "
              f"plain model's on the same windows, {len(res['phases'])} global steps left the base unchanged)")
        return 0
    if len(argv) < 4:
        raise SystemExit(__doc__)
    name, ckpt, dump, tol, pairs = argv[0], argv[1], argv[2], float(argv[3]), argv[4:]
    t, tokens, tb = setup(ckpt, pairs)
    path = os.path.join(dump, "lora_init.safetensors")
    if not os.path.exists(path):
        print(f"FAIL {name}/setup: {path}: missing (ctrain eval --dump writes the adapters' starting values there)")
        return 1
    a0 = read_safetensors(path)
    bad = t.check_a0(a0)
    if bad:
        print(f"FAIL {name}/setup: {path}: {'; '.join(bad[:6])}")
        return 1
    keep = [int(f.rsplit("_", 1)[1].split(".")[0]) for f in glob.glob(os.path.join(dump, "adapters_doc_*.safetensors"))]
    res = t.run(tokens, tb, a0, keep_docs=set(keep))
    try:
        return 0 if compare(name, res, dump, tol) else 1
    except (OSError, KeyError, ValueError, IndexError) as e:  # a dump file missing or malformed
        print(f"FAIL {name}/dump: {dump}: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
