"""synthetic_tokens.py OUT.h5 [VOCAB] [COUNT] [DOC_TOKENS] — a ctrain data file of uniformly random
tokens (seed 0), for the CPU benchmarks (tests/bench/run.sh, cpu_scaling.sh): speed does not
depend on the text. With DOC_TOKENS, documents of random lengths around it (uniform in
[1, 2 * DOC_TOKENS]) each start with the BOS id 1 (bos_id = 1): data for document packing and
the BOS-masked SmearGate (frontier_step.sh)."""
import sys

import h5py
import numpy as np


def main():
    out = sys.argv[1]
    vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4_000_000
    doc = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, size=count, dtype=np.uint16)
    if doc:
        tokens[tokens == 1] = 2  # BOS only where a document starts
        starts = np.cumsum(rng.integers(1, 2 * doc + 1, size=count // doc + 1))
        tokens[0] = 1
        tokens[starts[starts < count]] = 1
    with h5py.File(out, "w") as f:
        d = f.create_dataset("tokens", data=tokens, chunks=(1 << 20,))
        d.attrs["vocab_size"] = vocab
        d.attrs["bos_id"] = 1 if doc else -1
        d.attrs["tokenizer"] = "synthetic uniform tokens (benchmark)"


if __name__ == "__main__":
    main()
