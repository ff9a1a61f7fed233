"""synthetic_tokens.py OUT.h5 [VOCAB] [COUNT] — a ctrain data file of uniformly random tokens (seed 0),
for the CPU benchmarks (tests/bench/run.sh, cpu_scaling.sh): speed does not depend on the text."""
import sys

import h5py
import numpy as np


def main():
    out = sys.argv[1]
    vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 4_000_000
    rng = np.random.default_rng(0)
    with h5py.File(out, "w") as f:
        d = f.create_dataset("tokens", data=rng.integers(0, vocab, size=count, dtype=np.uint16), chunks=(1 << 20,))
        d.attrs["vocab_size"] = vocab
        d.attrs["bos_id"] = -1
        d.attrs["tokenizer"] = "synthetic uniform tokens (benchmark)"


if __name__ == "__main__":
    main()
