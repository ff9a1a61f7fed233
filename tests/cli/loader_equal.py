"""loader_equal.py A.h5 B.h5 — two checkpoints' loaders stand at the same place: every dataset
and attribute under /loader equal (what a resume on another world size or backend must keep:
the very same batches). Prints 'equal: N items' or 'differ: [...]'; exit 1 when they differ or
/loader is empty. For the GPU scripts test_nccl_gpu.sh and test_nccl_ranks.sh."""
import sys

import h5py
import numpy as np


def walk(g, out, prefix=""):
    for k, v in g.attrs.items():
        out[prefix + "@" + k] = np.asarray(v)
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            walk(v, out, prefix + k + "/")
        else:
            out[prefix + k] = v[()]


def main():
    a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
    la, lb = {}, {}
    walk(a["loader"], la)
    walk(b["loader"], lb)
    bad = [k for k in la if k not in lb or not np.array_equal(la[k], lb[k])] + [k for k in lb if k not in la]
    print("differ:", bad) if bad else print("equal:", len(la), "items")
    return 1 if bad or not la else 0


if __name__ == "__main__":
    sys.exit(main())
