"""ref_gpt.py — an independent fp32 PyTorch implementation of the parameter-golf GPT, its data
order and its optimizers, used to check ctrain's CPU backend from the outside.

Written from the model description in docs/model.md (not from ctrain's C code): plain torch
ops, autograd for the backward, torch.optim.Adam for Adam, an fp32 Newton-Schulz Muon, and a
token stream read with h5py. Runs on torch 1.13 (Debian 12), which has neither F.rms_norm nor
F.scaled_dot_product_attention, so both are spelled out here.
"""
import glob
import math

import h5py
import numpy as np
import torch
import torch.nn.functional as F

EPS = torch.finfo(torch.float32).eps


def rms_norm(x):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)


def rope_tables(seq_len, head_dim, base):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def rope(x, cos, sin):
    # x: [B, heads, T, hd]; half-split layout on the first rd = 2 * cos.shape[-1] dims (partial
    # RoPE when rd < hd: the rest passes through)
    rd = 2 * cos.shape[-1]
    half = rd // 2
    a, b, rest = x[..., :half], x[..., half:rd], x[..., rd:]
    return torch.cat((a * cos + b * sin, b * cos - a * sin, rest), dim=-1)


def bigram_hash(tokens, buckets):
    # the record's hash of each (previous, current) token pair, in torch int32 arithmetic; the
    # first position of every sequence gets the last bucket
    t = tokens.to(torch.int32)
    mod = buckets - 1
    out = torch.empty_like(t)
    out[..., 0] = mod
    out[..., 1:] = torch.bitwise_xor(36313 * t[..., 1:], 27191 * t[..., :-1]) % mod
    return out.long()


def xsa(y, v):
    # exclusive self attention: y [B, H, T, hd] minus its component along its KV head's unit
    # value vector v [B, KV, T, hd] at the same position
    group = y.shape[1] // v.shape[1]
    vn = F.normalize(v, dim=-1).repeat_interleave(group, dim=1)
    return y - (y * vn).sum(dim=-1, keepdim=True) * vn


def causal_attention(q, k, v, allowed=None):
    # q: [B, H, T, hd]; k, v: [B, KV, T, hd]; query head h reads kv head h // (H / KV);
    # allowed: [B, T, T] (query, key) for packed documents, None = causal over the row
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool).tril() if allowed is None else allowed[:, None]
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def document_mask(inputs, bos, max_doc_len):
    """docs/model.md, "Document packing": a row's documents start at its first token and at
    every BOS; each is cut into chunks of max_doc_len tokens from its start. A query attends to
    the keys at or before it in its own chunk: [B, T, T] block-diagonal causal."""
    B, T = inputs.shape
    pos = torch.arange(T)
    starts = (inputs == bos) | (pos == 0)
    doc = torch.cumsum(starts.long(), dim=1)  # document number of each position
    doc_first = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):  # each position's document start
        first = 0
        for t in range(T):
            if starts[b, t]:
                first = t
            doc_first[b, t] = first
    chunk = (pos - doc_first) // max_doc_len
    same = (doc[:, :, None] == doc[:, None, :]) & (chunk[:, :, None] == chunk[:, None, :])
    return same & torch.ones(T, T, dtype=torch.bool).tril()


def data_bos_id(pattern):
    """The training files' bos_id (the /tokens attribute; -1 when absent)."""
    with h5py.File(sorted(glob.glob(pattern))[0], "r") as h:
        return int(h["tokens"].attrs.get("bos_id", -1))


# ---- late QAT (the record's CastedLinear with its QAT switch on) ----
# The weights of the linear layers (CastedLinear: every 2-D weight but the embeddings, which are
# nn.Embedding, also when tok_emb serves as the tied output layer) are fake-quantized to int6 per
# row in the training forward, straight through: the forward sees w_q, the gradient reaches w.
QAT_NOT_LINEAR = ("tok_emb.weight", "bigram.embed.weight")


def fake_quant_int6(w):
    with torch.no_grad():
        scale = (w.abs().amax(dim=1) / 31.0).clamp_min(1.0 / 31.0)
        w_q = torch.clamp(torch.round(w / scale[:, None]), -32, 31) * scale[:, None]
    return w + (w_q - w).detach()


class RefGPT:
    """Parameters live in a dict keyed by the state_dict names of train_gpt.py's GPT."""

    def __init__(self, cfg, params):
        self.cfg = cfg
        self.p = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        self.qat = False  # late QAT's switch (train() sets it)
        self.L = cfg["num_layers"]
        self.enc = self.L // 2
        self.dec = self.L - self.enc
        self.H = cfg["num_heads"]
        self.KV = cfg["num_kv_heads"]
        self.D = cfg["model_dim"]
        self.hd = self.D // self.H
        # the record stack (keys absent from older checkpoints are off)
        self.rd = cfg.get("rope_dims", 0) or self.hd
        T, base, rtl = cfg["train_seq_len"], cfg["rope_base"], cfg.get("rope_train_seq_len", 0)
        if rtl > 0 and T > rtl:  # NTK-aware base scaling, as the record's Rotary
            base = base * ((T / rtl) ** (self.rd / (self.rd - 2)))
        # document packing: one row per micro-batch, row-absolute RoPE positions 0 .. row-1 at
        # train_seq_len's base; attention within documents (document_mask)
        self.packing = bool(cfg.get("doc_packing", 0))
        self.max_doc_len = cfg.get("max_doc_len", 0) or T
        self.bos = data_bos_id(cfg["train_files"]) if self.packing else -1
        self.row = cfg["train_batch_tokens"] // cfg["grad_accum_slots"] if self.packing else T
        self.allowed = None
        self.cos, self.sin = rope_tables(self.row, self.rd, base)
        self.ln_scale = bool(cfg.get("ln_scale", 0))
        self.xsa_from = self.L - cfg.get("xsa_last_n", 0)
        self.smear = bool(cfg.get("smear_gate", 0))
        self.bigram = cfg.get("bigram_vocab_size", 0)
        self.slope = cfg.get("mlp_negative_slope", 0.0)  # the 1.0611 record's MLP and skip gates
        self.skip_gates = bool(cfg.get("skip_gates_enabled", 0))
        self.attn_gate = bool(cfg.get("sparse_attn_gate_enabled", 0))  # the 1.0611 record's sparse gate
        self.gate_window = cfg.get("gate_window", 12)
        self.gate_scale = cfg.get("sparse_attn_gate_scale", 0.5)
        self.smear_bos = bool(cfg.get("smear_gate_enabled", 0))  # the 1.0611 record's SmearGate
        if self.smear_bos:  # its mask: the training data's bos_id attribute
            with h5py.File(sorted(glob.glob(cfg["train_files"]))[0], "r") as h:
                self.bos_id = int(h["tokens"].attrs["bos_id"])
        # depth recurrence (docs/model.md): blocks loop_start..loop_end run num_loops more times
        # once self.loop is on (train() switches it at enable_looping_at)
        n, a, b = cfg.get("num_loops", 0), cfg.get("loop_start", 0), cfg.get("loop_end", 0)
        self.looped = list(range(a)) + list(range(a, b + 1)) * (n + 1) + list(range(b + 1, self.L))
        self.loop = False
        # parallel residual lanes (docs/model.md): decoder runs of blocks >= this run as two lanes
        self.lanes_from = cfg.get("parallel_start_layer", 0)
        self.final_lane = cfg.get("parallel_final_lane", "mean")
        # GPTQ's calibration (docs/model.md, "The GPTQ quantizer"): when set, called with each
        # matrix's name and its input, flattened to (tokens, features), as the forward forms it
        self.capture = None
        # test-time training's adapters (issue 57, tests/parity/ttt_ref.py): when set, called as
        # lora(run, kind, x) -> the term to add, or None; run = the place in the plan's runs
        # (self.run, a looped block's runs apart; "head" for the head), kind q/k/v/o/mlp/head, x
        # the normed input the adapter reads. None (the default) leaves every product as it was.
        self.lora = None
        self.run = 0

    def adapt(self, kind, x, y):
        """y plus the adapter (self.run, kind)'s term on x, y itself without one."""
        d = None if self.lora is None else self.lora(self.run, kind, x)
        return y if d is None else y + d

    def inputs_of(self, name, x):
        if self.capture is not None:
            self.capture(name, x.reshape(-1, x.shape[-1]))
    def w(self, name):
        """A linear layer's weight as the forward uses it: fake-quantized while QAT is on."""
        t = self.p[name]
        if self.qat and t.dim() == 2 and name not in QAT_NOT_LINEAR:
            return fake_quant_int6(t)
        return t

    def attention(self, i, x):
        """Block i's attention branch on its (mixed) input x, before attn_scale."""
        p = lambda n: self.p[f"blocks.{i}.{n}"]
        B, T, D = x.shape
        s = 1.0 / math.sqrt(i + 1) if self.ln_scale else 1.0
        h = rms_norm(x) * s if self.ln_scale else rms_norm(x)
        self.inputs_of(f"blocks.{i}.attn.c_q.weight", h)
        # the adapters add to the raw projections, before QK-norm, RoPE and XSA
        q = self.adapt("q", h, h @ self.w(f"blocks.{i}.attn.c_q.weight").T).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.adapt("k", h, h @ self.w(f"blocks.{i}.attn.c_k.weight").T).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.adapt("v", h, h @ self.w(f"blocks.{i}.attn.c_v.weight").T).view(B, T, self.KV, self.hd).transpose(1, 2)
        q = rope(rms_norm(q), self.cos, self.sin) * p("attn.q_gain").view(1, -1, 1, 1)
        k = rope(rms_norm(k), self.cos, self.sin)
        y = causal_attention(q, k, v, self.allowed)
        if i >= self.xsa_from:
            y = xsa(y, v)
        if self.attn_gate:  # each head's output times sigmoid(scale * W[h] . h[t, :gate_window])
            g = torch.sigmoid(self.gate_scale * (h[..., :self.gate_window] @ p("attn.attn_gate_w").T))
            y = y * g.transpose(1, 2).unsqueeze(-1)
        y = y.transpose(1, 2).reshape(B, T, D)
        self.inputs_of(f"blocks.{i}.attn.proj.weight", y)
        return self.adapt("o", h, y @ self.w(f"blocks.{i}.attn.proj.weight").T)  # "o" reads h, not y

    def mlp(self, i, x):
        """Block i's MLP branch on its input x, before mlp_scale."""
        s = 1.0 / math.sqrt(i + 1) if self.ln_scale else 1.0
        h = rms_norm(x) * s if self.ln_scale else rms_norm(x)
        self.inputs_of(f"blocks.{i}.mlp.fc.weight", h)
        m = F.leaky_relu(h @ self.w(f"blocks.{i}.mlp.fc.weight").T, self.slope).square()
        self.inputs_of(f"blocks.{i}.mlp.proj.weight", m)
        return self.adapt("mlp", h, m @ self.w(f"blocks.{i}.mlp.proj.weight").T)  # a bypass of the whole MLP

    def block(self, i, x, x0):
        p = lambda n: self.p[f"blocks.{i}.{n}"]
        mix = p("resid_mix")
        x = mix[0] * x + mix[1] * x0
        x = x + p("attn_scale") * self.attention(i, x)
        return x + p("mlp_scale") * self.mlp(i, x)

    def parallel_block(self, i, lanes, x0):
        """Block i on two lanes: the attention reads lane 0 through resid_mix, the MLP lane 1
        as it is; each lane keeps resid[i, lane] of itself and takes post[i, branch, lane] of
        each branch's output."""
        p = lambda n: self.p[f"blocks.{i}.{n}"]
        a_lane, m_lane = lanes
        mix = p("resid_mix")
        a = p("attn_scale") * self.attention(i, mix[0] * a_lane + mix[1] * x0)
        m = p("mlp_scale") * self.mlp(i, m_lane)
        resid, post = self.p["parallel_resid_lambdas"][i], self.p["parallel_post_lambdas"][i]
        return (resid[0] * a_lane + post[0, 0] * a + post[1, 0] * m,
                resid[1] * m_lane + post[0, 1] * a + post[1, 1] * m)

    def embed(self, inputs):
        x = self.p["tok_emb.weight"][inputs]
        if self.bigram:  # + scale * proj(bigram table row of each token pair)
            h = self.p["bigram.embed.weight"][bigram_hash(inputs, self.bigram)]
            if "bigram.proj.weight" in self.p:
                h = h @ self.w("bigram.proj.weight").T
            x = x + h * self.p["bigram.scale"]
        if self.smear_bos:  # e_t + lambda sigmoid(w . e_t[:W]) e_{t-1}, not at BOS nor a row's first position
            g = self.p["smear_lambda"] * torch.sigmoid(x[..., :self.gate_window] @ self.p["smear_gate.weight"].T)
            mask = (inputs[:, 1:] != self.bos_id).unsqueeze(-1).to(x.dtype)
            x = torch.cat([x[:, :1], x[:, 1:] + g[:, 1:] * mask * x[:, :-1]], dim=1)
        x = rms_norm(x)
        if self.smear:  # SmearGate: blend in the previous position (zeros before the first)
            g = torch.sigmoid(self.p["smear.gate"])
            prev = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
            x = (1 - g) * x + g * prev
        return x

    def loss(self, inputs, targets, training=False):
        """The mean cross-entropy; training adds the multi-token-prediction heads' share: head k
        scores positions t < T-k-1 against targets[:, t+k+1], and the loss is main +
        mtp_loss_weight * (mean over heads of each head's mean cross-entropy)."""
        self.allowed = document_mask(inputs, self.bos, self.max_doc_len) if self.packing else None
        x = self.embed(inputs)
        x0 = x
        skips = []
        runs = self.looped if self.loop else list(range(self.L))
        enc = len(runs) // 2
        rows = self.p["skip_weights"].shape[0]
        for r, i in enumerate(runs[:enc]):
            self.run = r
            x = self.block(i, x, x0)
            skips.append(x)
        lanes = None  # (lane 0, lane 1) from the first parallel run on
        for j, i in enumerate(runs[enc:]):
            self.run = enc + j
            if lanes is None and 0 < self.lanes_from <= i:
                lanes = (x, x)
            if lanes is not None:  # the skip goes into lane 0 alone
                x = lanes[0]
            if j >= rows:
                pass
            elif skips and self.skip_gates:  # g weights the decoder stream, 1 - g the weighted skip
                g = torch.sigmoid(self.p["skip_gates"][j])
                x = g * x + (1 - g) * (self.p["skip_weights"][j] * skips.pop())
            elif skips:
                x = x + self.p["skip_weights"][j] * skips.pop()
            if lanes is not None:
                lanes = self.parallel_block(i, (x, lanes[1]), x0)
            else:
                x = self.block(i, x, x0)
        if lanes is not None:
            x = {"attn": lanes[0], "mlp": lanes[1]}.get(self.final_lane, None)
            if x is None:
                x = 0.5 * (lanes[0] + lanes[1])
        x = rms_norm(x)
        self.inputs_of("tok_emb.weight" if self.cfg["tie_embeddings"] else "lm_head.weight", x)
        head = self.p["tok_emb.weight"] if self.cfg["tie_embeddings"] else self.w("lm_head.weight")
        c = self.cfg["logit_softcap"]
        self.run = "head"
        logits = c * torch.tanh(self.adapt("head", x, x @ head.T) / c)
        main = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        heads, weight = self.cfg.get("mtp_num_heads", 0), self.cfg.get("mtp_loss_weight", 0.0)
        if not training or heads == 0 or weight == 0:
            return main
        T = x.shape[1]
        extra = []
        for k in range(heads):
            z = x[:, :T - k - 1] @ self.w(f"mtp_heads.{k}.weight").T
            z = c * torch.tanh(z / c)
            extra.append(F.cross_entropy(z.reshape(-1, z.shape[-1]), targets[:, k + 1:].reshape(-1)))
        return main + weight * (sum(extra) / len(extra))


# docs/model.md, "The 1.0611 record's Muon and schedule": Polar Express's (a, b, c) per iteration
POLAR_EXPRESS = [
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
]


def newton_schulz(g, steps, polar_express=False):
    coeffs = POLAR_EXPRESS[:steps] if polar_express else [(3.4445, -4.7750, 2.0315)] * steps
    x = g / (g.norm() + 1e-7)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    for a, b, c in coeffs:
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def row_normalize(u):
    """MuonEq-R: each output-feature row (weights are [out, in]) over max(its L2 norm, 1e-7)."""
    return u / u.norm(dim=1, keepdim=True).clamp_min(1e-7)


def is_matrix(name):
    return ((name.startswith("blocks.") and name.endswith(".weight")) or name == "bigram.proj.weight"
            or name.startswith("mtp_heads."))


def token_stream(pattern):
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(pattern)
    parts = []
    for f in files:
        with h5py.File(f, "r") as h:
            parts.append(np.asarray(h["tokens"][:], dtype=np.int64))
    return np.concatenate(parts)


def slot_tokens(stream, step, slot, slots, span):
    start = (step * slots + slot) * span
    idx = (start + np.arange(span)) % len(stream)
    return torch.from_numpy(stream[idx])


def lr_scale(step, iterations, warmdown, warmdown_frac=0.0, min_lr=0.0):
    if warmdown_frac > 0:  # the 1.0611 record's form, progress by steps (docs/model.md)
        frac = step / max(iterations, 1)
        return 1.0 if frac < 1.0 - warmdown_frac else max((1.0 - frac) / warmdown_frac, min_lr)
    if warmdown <= 0:
        return 1.0
    if max(iterations - warmdown, 0) <= step < iterations:
        return max((iterations - step) / max(warmdown, 1), 0.0)
    return 1.0


def train(cfg, params, stream, steps, start=0, state=None):
    """Train `steps` optimizer steps from params; return (per-step losses, model, adam opts, muon
    state, averages), averages = {"ema": EMA dict or None, "swa": SWA sum dict or None,
    "swa_count": n, "qat": the QAT switch at the end}.

    start, state: continue a run at step `start` from its optimizer state (a checkpoint's:
    "exp_avg" / "exp_avg_sq" / "momentum_buffer" per parameter name, "adam_step", "ema" and "swa"
    dicts or None, "swa_count", "qat"), for the step-by-step comparison (parity.py --per-step).

    The record's optimizer additions (its train_gpt.py): decoupled weight decay (AdamW for the
    token-embedding and scalar groups with adam_wd, lm_head plain Adam; Muon: p *= 1 - lr*muon_wd
    before its update), the EMA of every parameter from step 0 (ema = d*ema + (1-d)*w after each
    step), SWA without EMA (a snapshot sum when lr scale < 0.5 and the step count after the step
    is a multiple of swa_every) and late QAT (on from the first step whose lr scale is below
    qat_threshold; qat_enabled: from step 0). The 1.0611 record's (docs/model.md): warmdown_frac
    and min_lr (progress by steps), embed_wd (the token group's AdamW decay; -1 = adam_wd),
    Muon's row normalisation and Polar Express coefficients."""
    model = RefGPT(cfg, params)
    muon_wd, adam_wd = cfg.get("muon_wd", 0.0), cfg.get("adam_wd", 0.0)
    embed_wd = cfg.get("embed_wd", -1.0)
    group_wd = {"tok": embed_wd if embed_wd >= 0 else adam_wd, "scalar": adam_wd, "head": 0.0}
    muon_pe, muon_rows = bool(cfg.get("muon_polar_express", 0)), bool(cfg.get("muon_row_normalize", 0))
    ema = {k: v.detach().clone() for k, v in model.p.items()} if cfg.get("ema_enabled", 0) else None
    swa, swa_count = None, 0
    model.qat = bool(cfg.get("qat_enabled", 0))
    tied = cfg["tie_embeddings"]
    groups = {"tok": [], "head": [], "scalar": [], "matrix": []}
    for name, t in model.p.items():
        if name in ("tok_emb.weight", "bigram.embed.weight"):
            groups["tok"].append(t)
        elif name == "lm_head.weight":
            groups["head"].append(t)
        elif is_matrix(name):
            groups["matrix"].append((name, t))
        else:
            groups["scalar"].append(t)
    betas = (cfg["beta1"], cfg["beta2"])
    base_lr = {"tok": cfg["tied_embed_lr"] if tied else cfg["embed_lr"], "head": cfg["head_lr"],
               "scalar": cfg["scalar_lr"]}
    def adam(g):
        if group_wd[g] > 0:
            return torch.optim.AdamW(groups[g], lr=base_lr[g], betas=betas, eps=cfg["adam_eps"],
                                     weight_decay=group_wd[g], foreach=False)
        return torch.optim.Adam(groups[g], lr=base_lr[g], betas=betas, eps=cfg["adam_eps"], foreach=False)
    adams = {g: adam(g) for g in ("tok", "head", "scalar") if groups[g]}
    momentum_bufs = {name: torch.zeros_like(t) for name, t in groups["matrix"]}
    if state is not None:
        names = {id(t): k for k, t in model.p.items()}
        for opt in adams.values():
            for t in opt.param_groups[0]["params"]:
                k = names[id(t)]
                opt.state[t] = {"step": torch.tensor(float(state["adam_step"])),
                                "exp_avg": state["exp_avg"][k].clone(), "exp_avg_sq": state["exp_avg_sq"][k].clone()}
        for k in momentum_bufs:
            momentum_bufs[k] = state["momentum_buffer"][k].clone()
        if ema is not None:
            ema = {k: v.clone() for k, v in state["ema"].items()}
        swa_count = state["swa_count"]
        if swa_count > 0:
            swa = {k: v.clone() for k, v in state["swa"].items()}
        model.qat = state["qat"]
    slots, T = cfg["grad_accum_slots"], model.row  # a packed micro-batch is one row
    local = cfg["train_batch_tokens"] // slots
    span = local + 1
    losses = []
    for step in range(start, start + steps):
        scale = lr_scale(step, cfg["iterations"], cfg["warmdown_iters"], cfg.get("warmdown_frac", 0.0),
                         cfg.get("min_lr", 0.0))
        if cfg.get("late_qat", 0) and scale < cfg.get("qat_threshold", 0.1):
            model.qat = True
        if cfg.get("num_loops", 0) > 0 and step / max(cfg["iterations"], 1) >= cfg.get("enable_looping_at", 0.0):
            model.loop = True  # for good, from the top of this step
        total = 0.0
        for slot in range(slots):
            tok = slot_tokens(stream, step, slot, slots, span)
            x = tok[:-1].view(-1, T)
            y = tok[1:].view(-1, T)
            loss = model.loss(x, y, training=True)
            (loss * (1.0 / slots)).backward()
            total += loss.item()
        losses.append(total / slots)
        warm = cfg["muon_momentum_warmup_steps"]
        frac = min(step / warm, 1.0) if warm > 0 else 1.0
        mu = (1 - frac) * cfg["muon_momentum_warmup_start"] + frac * cfg["muon_momentum"]
        if cfg["grad_clip_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(list(model.p.values()), cfg["grad_clip_norm"])
        for g, opt in adams.items():
            for pg in opt.param_groups:
                pg["lr"] = base_lr[g] * scale
            opt.step()
        with torch.no_grad():
            for name, t in groups["matrix"]:
                buf = momentum_bufs[name]
                buf.mul_(mu).add_(t.grad)
                u = t.grad.add(buf, alpha=mu)
                if muon_rows:
                    u = row_normalize(u)
                u = newton_schulz(u, cfg["muon_backend_steps"], muon_pe)
                u *= max(1, t.shape[0] / t.shape[1]) ** 0.5
                if muon_wd > 0:
                    t.mul_(1.0 - cfg["matrix_lr"] * scale * muon_wd)
                t.add_(u, alpha=-cfg["matrix_lr"] * scale)
            if ema is not None:
                d = cfg["ema_decay"]
                for k, t in model.p.items():
                    ema[k].mul_(d).add_(t, alpha=1.0 - d)
            elif cfg.get("swa_enabled", 0) and scale < 0.5 and (step + 1) % cfg["swa_every"] == 0:
                if swa is None:
                    swa = {k: t.detach().clone() for k, t in model.p.items()}
                else:
                    for k, t in model.p.items():
                        swa[k].add_(t)
                swa_count += 1
        for t in model.p.values():
            t.grad = None
    averages = {"ema": ema, "swa": swa, "swa_count": swa_count, "qat": model.qat}
    return losses, model, adams, momentum_bufs, averages
