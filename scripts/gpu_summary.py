#!/usr/bin/env python3
"""gpu_summary.py — one Markdown summary of the GPU check (scripts/gpu-check.sh) from the stage
logs of one or more of its output folders, e.g. those of several device calls or days.

    python3 scripts/gpu_summary.py DIR [DIR ...] [-o summary.md]

Each DIR/<stage>.log ends with `GPU-CHECK key: value` lines (stage, result, why, what, started,
seconds, gpu, driver, cuda_runtime, nccl, commit, ...) and holds the stage's `BENCH name value`
figures. Per stage the latest run counts (a stage that failed and passed later shows the pass,
with the number of earlier runs). The summary: when and where it ran, one row per stage (PASS,
FAIL or NOT RUN and why), and the figures with the targets the issues set. Exits 1 when no
stage log is found."""
import argparse
import glob
import os
import re
import sys

# The targets the issues set for some figures: name -> (comparison, value, where it comes from).
TARGETS = {
    "nccl_overhead_percent": ("<", 2.0, "issue 33: nccl=on costs < 2% at world size 1"),
    "step_baseline_ratio": (">=", 1.5, "issue 14: train_gpt.py / ctrain >= 1.5"),
    "step_wide_ratio": (">=", 1.5, "issue 14: train_gpt.py / ctrain >= 1.5"),
}
RESULT_WORDS = {"PASS": "PASS", "FAIL": "**FAIL**", "NOT-RUN": "not run"}


def read_log(path):
    """The trailer's fields and the BENCH figures of one stage log, or None without a trailer."""
    fields, bench = {}, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^GPU-CHECK (\w+): ?(.*)$", line)
            if m:
                fields[m.group(1)] = m.group(2)
                continue
            m = re.match(r"^BENCH (\S+) (\S+)$", line)
            if m:
                bench.append((m.group(1), m.group(2)))
    if "stage" not in fields or fields.get("result") not in RESULT_WORDS:
        return None
    fields["bench"] = bench
    fields["log"] = path
    return fields


def target_note(name, value):
    if name not in TARGETS:
        return ""
    op, want, why = TARGETS[name]
    try:
        v = float(value)
    except ValueError:
        return f"target {op} {want:g} ({why})"
    met = v < want if op == "<" else v >= want
    return f"target {op} {want:g}: {'met' if met else '**missed**'} ({why})"


def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+", help="gpu-check output folders")
    ap.add_argument("-o", "--output", help="write the summary here (default: stdout)")
    a = ap.parse_args()

    runs = []
    for d in a.dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.log"))):
            r = read_log(path)
            if r:
                runs.append(r)
    if not runs:
        print(f"gpu_summary: no stage logs with a GPU-CHECK trailer in {' '.join(a.dirs)}", file=sys.stderr)
        return 1
    latest, earlier = {}, {}
    for r in sorted(runs, key=lambda r: r.get("started", "")):
        if r["stage"] in latest:
            earlier[r["stage"]] = earlier.get(r["stage"], 0) + 1
        latest[r["stage"]] = r
    # stages in gpu-check.sh's order
    order = sorted(latest, key=lambda s: (int(latest[s].get("order", "0") or 0), s))

    counts = {k: sum(1 for s in order if latest[s]["result"] == k) for k in RESULT_WORDS}
    out = ["# GPU check: summary", ""]
    out.append(f"Made by `scripts/gpu_summary.py` from {len(runs)} stage log(s) in {len(a.dirs)} folder(s) "
               f"(`scripts/gpu-check.sh`). {counts['PASS']} passed, {counts['FAIL']} failed, "
               f"{counts['NOT-RUN']} not run, of {len(order)} stages.")
    out.append("")
    machines = sorted({(latest[s].get("gpu", "?"), latest[s].get("driver", "?"), latest[s].get("cuda_runtime", "?"),
                        latest[s].get("nccl", "?"), latest[s].get("commit", "?"), latest[s].get("cpu", "?"),
                        latest[s].get("torch", "?")) for s in order})
    out += ["| GPU | driver | CUDA runtime | NCCL | commit | CPU | PyTorch |", "|---|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(cell(x) for x in m) + " |" for m in machines]
    out.append("")
    out += ["## Stages", "", "| stage | result | date (UTC) | GPU | commit | seconds | notes |",
            "|---|---|---|---|---|---|---|"]
    for s in order:
        r = latest[s]
        note = r.get("why", "") or r.get("what", "")
        if s in earlier:
            note += f" ({earlier[s]} earlier run{'s' if earlier[s] > 1 else ''})"
        out.append("| " + " | ".join(cell(x) for x in (
            s, RESULT_WORDS[r["result"]], r.get("started", "?").replace("T", " ").rstrip("Z"), r.get("gpu", "?"),
            r.get("commit", "?"), r.get("seconds", "?"), note)) + " |")
    out.append("")
    figures = [(s, n, v) for s in order for n, v in latest[s]["bench"]]
    out += ["## Figures", ""]
    if figures:
        out += ["| stage | figure | value | target |", "|---|---|---|---|"]
        out += [f"| {s} | {cell(n)} | {cell(v)} | {target_note(n, v)} |" for s, n, v in figures]
    else:
        out.append("No stage printed figures.")
    out.append("")
    waiting = [s for s in order if latest[s]["result"] != "PASS"]
    if waiting:
        out += ["## Still to do", ""]
        out += [f"- `{s}`: {RESULT_WORDS[latest[s]['result']]}: {latest[s].get('why', '')} "
                f"(log: {os.path.basename(latest[s]['log'])})" for s in waiting]
        out.append("")
    text = "\n".join(out)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
