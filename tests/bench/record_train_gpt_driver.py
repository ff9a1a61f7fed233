"""record_train_gpt_driver.py TRAIN_GPT_PY INIT.safetensors [--check-names] — runs the 1.1248
record's own train_gpt.py (openai/parameter-golf, fetched, never committed) from ctrain's initial
weights, for the side-by-side run of tests/bench/record_vs_train_gpt.sh (issue 36). Two stand-ins,
both announced in its output:

- FlashAttention 3: train_gpt.py imports flash_attn_interface.flash_attn_func, which the GPU
  machines here lack; this module provides it through PyTorch's scaled_dot_product_attention
  (causal, grouped-query), with FA3's layout [batch, time, heads, head_dim] in and out.
- The initial weights: the two programs initialise differently, so per-step losses could only
  agree in distribution. After train_gpt.py has cast its model (bf16 body, then CastedLinear and
  the control tensors back to fp32: the first call of its restore_low_dim_params_to_fp32) every
  parameter is overwritten with ctrain's step-0 weights (`ctrain ckpt export --live`: train_gpt.py's
  names and shapes), rounded to that parameter's dtype. A name or shape that does not match is an
  error naming it.

The rest of train_gpt.py runs unchanged, its hyperparameters from the environment. With
--check-names it only builds the record's GPT from the environment's hyperparameters on the CPU
and checks that INIT holds exactly its parameters, names and shapes (no GPU, no training; it runs
on Debian's torch 1.13 too): record_vs_train_gpt.sh runs it first. The record's file is never
committed, so no test of the suite can run this.

The safetensors file is read here (8-byte header length, JSON header, raw little-endian data)
rather than with the safetensors package, which the GPU machines need not have.
"""
import importlib.util
import json
import struct
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F

NUMPY_DTYPES = {"F32": np.float32, "F16": np.float16}  # BF16, which numpy lacks, is widened by hand


def read_safetensors(path):
    """name -> float32 torch tensor (CPU) of every tensor in the file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            begin, end = meta["data_offsets"]
            f.seek(base + begin)
            raw = f.read(end - begin)
            if meta["dtype"] == "BF16":
                bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                arr = bits.view(np.float32)
            elif meta["dtype"] in NUMPY_DTYPES:
                arr = np.frombuffer(raw, dtype=NUMPY_DTYPES[meta["dtype"]]).astype(np.float32)
            else:
                raise SystemExit(f"{path}: tensor {name}: dtype {meta['dtype']} (expected F32, F16 or BF16)")
            out[name] = torch.from_numpy(arr.reshape(meta["shape"]).copy())
    return out


def sdpa_flash_attn_func(q, k, v, causal=False, **_):
    """FlashAttention 3's flash_attn_func by SDPA: [B, T, H, D] in and out, K/V with fewer heads."""
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                       is_causal=causal, enable_gqa=k.size(2) != q.size(2))
    return y.transpose(1, 2)


def load_train_gpt(path):
    """train_gpt.py as a module (not run), with the FlashAttention 3 stand-in importable."""
    fa = types.ModuleType("flash_attn_interface")
    fa.flash_attn_func = sdpa_flash_attn_func
    sys.modules["flash_attn_interface"] = fa
    spec = importlib.util.spec_from_file_location("record_train_gpt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def overwrite(model, init, where):
    """Every parameter of model from init (same names, same shapes), in the parameter's dtype."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(init))
    extra = sorted(set(init) - set(params))
    if missing or extra:
        raise SystemExit(f"{where}: the record's GPT and ctrain's export differ: "
                         f"missing from the export {missing[:8]}, not in the GPT {extra[:8]}")
    with torch.no_grad():
        for name, p in params.items():
            if tuple(p.shape) != tuple(init[name].shape):
                raise SystemExit(f"{where}: {name}: the GPT's shape {tuple(p.shape)}, "
                                 f"the export's {tuple(init[name].shape)}")
            p.copy_(init[name].to(dtype=p.dtype, device=p.device))
    return len(params)


def build_model(mod):
    """The record's GPT from its Hyperparameters (the environment), as its main() builds it."""
    a = mod.Hyperparameters()
    return mod.GPT(vocab_size=a.vocab_size, num_layers=a.num_layers, model_dim=a.model_dim, num_heads=a.num_heads,
                   num_kv_heads=a.num_kv_heads, mlp_mult=a.mlp_mult, tie_embeddings=a.tie_embeddings,
                   tied_embed_init_std=a.tied_embed_init_std, logit_softcap=a.logit_softcap, rope_base=a.rope_base,
                   qk_gain_init=a.qk_gain_init, mtp_num_heads=a.mtp_num_heads, mtp_loss_weight=a.mtp_loss_weight,
                   bigram_vocab_size=a.bigram_vocab_size, bigram_dim=a.bigram_dim, xsa_last_n=a.xsa_last_n,
                   rope_dims=a.rope_dims, ln_scale=a.ln_scale)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[0])
    train_gpt, init_path = sys.argv[1], sys.argv[2]
    mod = load_train_gpt(train_gpt)
    init = read_safetensors(init_path)
    if "--check-names" in sys.argv[3:]:
        n = overwrite(build_model(mod), init, init_path)
        print(f"record GPT: all {n} parameters of {train_gpt}'s GPT found in {init_path}, names and shapes equal")
        return
    original = mod.restore_low_dim_params_to_fp32
    state = {"done": False}

    def restore_then_load(module):
        original(module)
        if not state["done"]:  # the training model; later calls build the evaluation model
            state["done"] = True
            n = overwrite(module, init, init_path)
            print(f"record_train_gpt_driver: {n} parameters set from ctrain's initial weights ({init_path})",
                  flush=True)

    mod.restore_low_dim_params_to_fp32 = restore_then_load
    print("record_train_gpt_driver: flash_attn_interface.flash_attn_func = torch SDPA (causal, GQA): "
          "FlashAttention 3 is not installed here", flush=True)
    mod.main()


if __name__ == "__main__":
    main()
