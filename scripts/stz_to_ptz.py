#!/usr/bin/env python3
"""stz_to_ptz.py ARTIFACT.stz OUT.ptz — ctrain's parameter-golf artifact (`ctrain ckpt golf`,
final_model.int8.stz) as the final_model.int8.ptz file train_gpt.py writes and reads back:
zlib level 9 of torch.save(obj), obj being the dict train_gpt.py's quantize_state_dict_int8
returns ("__quant_format__", "quantized", "scales", "dtypes", "passthrough", "qmeta",
"passthrough_orig_dtypes"), so train_gpt.py's own round-trip code

    quant_state = torch.load(io.BytesIO(zlib.decompress(open(path, "rb").read())), map_location="cpu")
    base_model.load_state_dict(dequantize_state_dict_int8(quant_state), strict=True)

loads it. The values are not quantized again: the int8 values, scales and kept tensors are
ctrain's, which are the bytes train_gpt.py's rule gives for ctrain's fp32 weights
(tests/cli/test_golf.sh checks both). ctrain's weights are float32, so "dtypes" and
"passthrough_orig_dtypes" say float32. Needs PyTorch (and numpy); the .stz container is read
with the standard library: docs/checkpoint-format.md, "The parameter-golf artifact".
"""
import io
import json
import struct
import sys
import zlib

import numpy as np
import torch

NUMPY_TYPES = {"I8": "<i1", "F16": "<f2", "F32": "<f4"}


def read_stz(path):
    """The artifact's tensors by container name, in file order, and its __metadata__."""
    raw = zlib.decompress(open(path, "rb").read())
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
    return tensors, meta


def to_quant_obj(tensors):
    """train_gpt.py's quantize_state_dict_int8 result for the same weights."""
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


def main():
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    src, out = sys.argv[1], sys.argv[2]
    tensors, meta = read_stz(src)
    if meta.get("format") != "int8_clean_per_row_v1":
        raise SystemExit(f"stz_to_ptz: {src}: format '{meta.get('format')}', expected int8_clean_per_row_v1 "
                         "(a ctrain golf artifact)")
    buf = io.BytesIO()
    torch.save(to_quant_obj(tensors), buf)
    blob = zlib.compress(buf.getvalue(), level=9)
    with open(out, "wb") as f:
        f.write(blob)
    print(f"{src} -> {out}: {len(blob)} bytes (train_gpt.py's final_model.int8.ptz format)")


if __name__ == "__main__":
    main()
