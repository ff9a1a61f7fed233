#!/usr/bin/env python3
"""stz_to_ptz.py ARTIFACT OUT.ptz — ctrain's parameter-golf artifact (`ctrain ckpt golf`, or a run
with golf_artifact=1) as the .ptz file the matching train_gpt.py writes and reads back. The
format is read from the file (a zlib or a zstd stream, then its __metadata__ "format"):

int8-zlib, final_model.int8.stz -> final_model.int8.ptz (the naive baseline's train_gpt.py):
zlib level 9 of torch.save(obj), obj being the dict its quantize_state_dict_int8 returns
("__quant_format__", "quantized", "scales", "dtypes", "passthrough", "qmeta",
"passthrough_orig_dtypes"), so its own round-trip code

    quant_state = torch.load(io.BytesIO(zlib.decompress(open(path, "rb").read())), map_location="cpu")
    base_model.load_state_dict(dequantize_state_dict_int8(quant_state), strict=True)

loads it. ctrain's weights are float32, so "dtypes" and "passthrough_orig_dtypes" say float32.

int6-zstd, final_model.int6.safetensors.zst -> final_model.int6.ptz (the 1.1248 record's
train_gpt.py): zstd level 22 of torch.save({"w": result, "m": meta}), the two dicts its
mixed_quantize_int6 returns (the artifact holds them as they are: the tensors under the record's
keys, "m" in its __metadata__), so the record's round trip

    quant_state = torch.load(io.BytesIO(zstandard.ZstdDecompressor().decompress(blob)), map_location="cpu")
    deq_state = dequantize_mixed_int6(quant_state["w"], quant_state["m"], sd_cpu)

loads it. Needs Python's zstandard module (Debian: python3-zstandard), as the record does.

The values are not quantized again: they are ctrain's, which are the bytes the train_gpt.py's
rule gives for ctrain's fp32 weights (tests/cli/test_golf.sh checks both). Needs PyTorch and
numpy; the container is read with the standard library (docs/checkpoint-format.md, "The
parameter-golf artifact").
"""
import io
import json
import struct
import sys
import zlib

import numpy as np
import torch

NUMPY_TYPES = {"I8": "<i1", "F16": "<f2", "F32": "<f4"}
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstandard_module():
    try:
        import zstandard
    except ImportError:
        raise SystemExit("stz_to_ptz: the int6-zstd artifact needs Python's zstandard module "
                         "(Debian: apt-get install python3-zstandard; pip: zstandard)")
    return zstandard


def read_artifact(path):
    """The artifact's tensors by container name, in file order, its __metadata__, and its codec."""
    blob = open(path, "rb").read()
    codec = "zstd" if blob[:4] == ZSTD_MAGIC else "zlib"
    try:
        raw = zstandard_module().ZstdDecompressor().decompress(blob) if codec == "zstd" else zlib.decompress(blob)
    except Exception as e:  # zlib.error, zstandard.ZstdError
        raise SystemExit(f"stz_to_ptz: {path}: not a {codec} stream or damaged ({e}): not a ctrain golf artifact")
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] not in NUMPY_TYPES:
            raise SystemExit(f"stz_to_ptz: {path}: tensor {name} has dtype {t['dtype']}, expected I8, F16 or F32")
        lo, hi = t["data_offsets"]
        a = np.frombuffer(data[lo:hi], NUMPY_TYPES[t["dtype"]]).reshape(t["shape"])
        tensors[name] = torch.from_numpy(a.copy())
    return tensors, meta, codec


def to_quant_obj(tensors):
    """The baseline train_gpt.py's quantize_state_dict_int8 result for the same weights."""
    quantized, scales, dtypes, passthrough, orig, qmeta = {}, {}, {}, {}, {}, {}
    for key, t in tensors.items():
        kind, _, name = key.partition("/")
        if kind == "quantized":
            quantized[name] = t
            dtypes[name] = "float32"
        elif kind == "scales":
            scales[name] = t
            if t.ndim > 0:
                qmeta[name] = {"scheme": "per_row", "axis": 0}
        elif kind == "passthrough":
            passthrough[name] = t
            if t.dtype == torch.float16:  # kept in fp16 to save bytes; the weight was fp32
                orig[name] = "float32"
        else:
            raise SystemExit(f"stz_to_ptz: unexpected tensor '{key}' (expected quantized/, scales/ or passthrough/)")
    missing = sorted(set(quantized) ^ set(scales))
    if missing:
        raise SystemExit(f"stz_to_ptz: quantized tensors without scales or the reverse: {missing[:5]}")
    obj = {"__quant_format__": "int8_clean_per_row_v1", "quantized": quantized, "scales": scales,
           "dtypes": dtypes, "passthrough": passthrough}
    if qmeta:
        obj["qmeta"] = qmeta
    if orig:
        obj["passthrough_orig_dtypes"] = orig
    return obj


def to_mixed_obj(tensors, meta, path):
    """The record's {"w": result, "m": meta} for the same weights."""
    m = json.loads(meta.get("m", "null") or "null")
    if not isinstance(m, dict):
        raise SystemExit(f"stz_to_ptz: {path}: no \"m\" (the record's meta dict) in its __metadata__")
    want = []
    for name, info in m.items():
        want += [name] if isinstance(info, str) else [name + ".q", name + ".scale"]
    if want != list(tensors):
        raise SystemExit(f"stz_to_ptz: {path}: its tensors do not match its meta dict "
                         f"(first difference: {sorted(set(want) ^ set(tensors))[:3]})")
    return {"w": tensors, "m": m}


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    src, out = sys.argv[1], sys.argv[2]
    tensors, meta, codec = read_artifact(src)
    fmt = meta.get("format")
    buf = io.BytesIO()
    if codec == "zlib" and fmt == "int8_clean_per_row_v1":
        torch.save(to_quant_obj(tensors), buf)
        blob, what = zlib.compress(buf.getvalue(), level=9), "the baseline train_gpt.py's final_model.int8.ptz"
    elif codec == "zstd" and fmt == "mixed_int6_v1":
        torch.save(to_mixed_obj(tensors, meta, src), buf)
        blob = zstandard_module().ZstdCompressor(level=22).compress(buf.getvalue())
        what = "the 1.1248 record's final_model.int6.ptz"
    else:
        raise SystemExit(f"stz_to_ptz: {src}: a {codec} stream of format '{fmt}', expected int8_clean_per_row_v1 "
                         "(zlib) or mixed_int6_v1 (zstd): not a ctrain golf artifact")
    with open(out, "wb") as f:
        f.write(blob)
    print(f"{src} -> {out}: {len(blob)} bytes ({what} format)")


if __name__ == "__main__":
    main()
