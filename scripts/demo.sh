#!/usr/bin/env bash
# demo.sh — the main job on the embedded default: installs what is missing, builds, makes a
# small byte-level dataset from the license texts every Debian machine has
# (/usr/share/common-licenses), and trains a small model, writing runs/demo/ (device = auto: on
# the GPU when one is visible, else the CPU).
# Extra key=value arguments override scripts/demo.conf, e.g. `scripts/demo.sh iterations=50`.
# Idempotent: the dataset is made once; a second run resumes from runs/demo's newest checkpoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash scripts/install-deps.sh
echo "== building"
make --no-print-directory -j2 build/ctrain >/tmp/ctrain-demo-build.log 2>&1 || {
    tail -n 30 /tmp/ctrain-demo-build.log >&2
    echo "demo: build failed (full log: /tmp/ctrain-demo-build.log)" >&2
    exit 1
}

data=runs/demo-data
if [ ! -f "$data/train.h5" ] || [ ! -f "$data/val.h5" ]; then
    echo "== making the byte-level dataset from /usr/share/common-licenses"
    mkdir -p "$data"
    mapfile -t texts < <(find /usr/share/common-licenses -maxdepth 1 -type f | LC_ALL=C sort)
    build/ctrain data from-text --out "$data/train.h5" --val-out "$data/val.h5" --val-fraction 0.1 "${texts[@]}"
fi
build/ctrain data info "$data/train.h5"

echo "== training (config: scripts/demo.conf)"
rc=0
build/ctrain train --config scripts/demo.conf "$@" || rc=$?
out=$(sed -n 's/^out_dir *= *//p' scripts/demo.conf)
for a in "$@"; do case "$a" in out_dir=*) out=${a#out_dir=} ;; esac; done
if [ -s "$out/metrics.jsonl" ]; then
    echo "== plotting"
    build/ctrain plot "$out" || { [ "$rc" = 0 ] && rc=1; }
fi
if [ "$rc" = 0 ]; then
    echo "== a sample of what the model learned (ctrain sample $out --prompt 'The ')"
    build/ctrain sample "$out" --prompt "The " --tokens 300 || rc=1
fi
exit "$rc"
