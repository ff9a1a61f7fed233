"""plot_runs.py — the figure of `ctrain plot`: training curves of one or more runs from their
metrics.jsonl, made with matplotlib (what users of train_gpt.py know).

usage: plot_runs.py OUT.png X RUN_DIR...      (X: step or tokens)

Four panels: train loss with val_loss, val_bpb, lr_scale and step time, each run one colour.
Prints one summary line per run, then the path of the figure. Exit 1 with "error: ..." on
stderr for unreadable input (ctrain turns it into its own error line).
"""
import json
import os
import sys


def fail(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(1)


def batch_tokens(run):
    """train_batch_tokens from the run's config.txt (key = value lines), for the tokens axis."""
    path = os.path.join(run, "config.txt")
    try:
        for line in open(path, encoding="utf-8"):
            key, _, value = line.partition("=")
            if key.strip() == "train_batch_tokens":
                return int(value.split("#")[0].strip())
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror} (needed for --x tokens)")
    fail(f"'{path}' has no train_batch_tokens line")


def read_run(run):
    path = os.path.join(run, "metrics.jsonl")
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror} (is '{run}' a run directory, an out_dir of `ctrain train`?)")
    train, val = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            step = int(r["step"])
        except (ValueError, KeyError, TypeError):
            fail(f"'{path}' line {n} is not a metrics record: {line[:80]!r}")
        if "train_loss" in r:
            train.append((step, r["train_loss"], r.get("lr_scale"), r.get("step_ms")))
        elif "val_loss" in r:
            val.append((step, r["val_loss"], r.get("val_bpb")))
    if not train and not val:
        fail(f"'{path}' holds no training or validation records yet")
    return train, val


def main():
    if len(sys.argv) < 4 or sys.argv[2] not in ("step", "tokens"):
        fail("usage: plot_runs.py OUT.png step|tokens RUN_DIR...")
    out, xname, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    data = []
    for run in runs:
        train, val = read_run(run)
        scale = batch_tokens(run) if xname == "tokens" else 1
        data.append((run, train, val, scale))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("`ctrain plot` needs matplotlib for Python 3 (Debian: python3-matplotlib; "
             "scripts/install-deps.sh installs it)")

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), dpi=100)
    (ax_loss, ax_bpb), (ax_lr, ax_ms) = axes
    xlabel = "step" if xname == "step" else "tokens"
    have_bpb = False
    for i, (run, train, val, scale) in enumerate(data):
        color = f"C{i % 10}"
        label = run.rstrip("/")
        if train:
            x = [s * scale for s, *_ in train]
            ax_loss.plot(x, [r[1] for r in train], color=color, lw=1, alpha=0.8, label=f"{label} train")
            ax_lr.plot(x, [r[2] for r in train], color=color, lw=1, label=label)
            ax_ms.plot(x, [r[3] for r in train], color=color, lw=1, label=label)
        if val:
            x = [s * scale for s, *_ in val]
            ax_loss.plot(x, [r[1] for r in val], color=color, marker="o", ms=4, ls="--", label=f"{label} val")
            bpb = [(xx, r[2]) for xx, r in zip(x, val) if r[2] is not None]
            if bpb:
                have_bpb = True
                ax_bpb.plot([b[0] for b in bpb], [b[1] for b in bpb], color=color, marker="o", ms=4, label=label)
        last_train = f"last train_loss {train[-1][1]:.4f} (step {train[-1][0]})" if train else "no training steps"
        last_val = f"last val_loss {val[-1][1]:.4f}" if val else "no validation"
        if val and val[-1][2] is not None:
            last_val += f" val_bpb {val[-1][2]:.4f}"
        print(f"{label}: {len(train)} steps, {len(val)} validations, {last_train}, {last_val}")
    ax_loss.set_title("loss (nats per token)")
    ax_bpb.set_title("val_bpb (bits per byte)")
    if not have_bpb:
        ax_bpb.text(0.5, 0.5, "no val_bpb\n(validation data without /tokenizer tables)", ha="center",
                    va="center", transform=ax_bpb.transAxes, color="gray")
    ax_lr.set_title("lr_scale")
    ax_ms.set_title("step time (ms)")
    for ax in (ax_loss, ax_bpb, ax_lr, ax_ms):
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(out)
    except OSError as e:
        fail(f"cannot write '{out}': {e.strerror}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
