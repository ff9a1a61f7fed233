#!/usr/bin/env bash
# test_plot.sh — `ctrain plot`: a PNG of several runs' curves (matplotlib, scripts/plot_runs.py),
# the summary it prints matches each run's metrics.jsonl, the tokens axis, and clear errors.
source "$CT_ROOT/tests/cli/lib.sh"
PY=/usr/bin/python3
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then skip_rest_python "matplotlib not importable by $PY"; fi

"$CTRAIN" data from-text --out train.h5 --val-out val.h5 --val-fraction 0.2 /usr/share/common-licenses/GPL-3 \
    >/dev/null 2>&1 || { fail make_data "from-text failed"; exit 1; }
run=(train_files=train.h5 vocab_size=256 num_layers=2 model_dim=32 num_heads=4 num_kv_heads=2 train_seq_len=16
     train_batch_tokens=256 grad_accum_slots=2 val_batch_size=256 threads=1)
expect_ok plot_run_a "$CTRAIN" train "${run[@]}" val_files=val.h5 iterations=6 val_loss_every=3 out_dir=a
expect_ok plot_run_b "$CTRAIN" train "${run[@]}" iterations=4 matrix_lr=0.02 out_dir=b

expect_ok plot_two_runs "$CTRAIN" plot a b --out both.png
cp out plot.out
expect_grep plot_wrote '^wrote both.png$' plot.out
/usr/bin/python3 - plot.out <<'PY' && pass plot_summary_matches_metrics || fail plot_summary_matches_metrics "$(cat py.err)"
import json, re, sys
out = open(sys.argv[1]).read()
for run in ("a", "b"):
    rows = [json.loads(l) for l in open(run + "/metrics.jsonl")]
    train = [r for r in rows if "train_loss" in r]
    val = [r for r in rows if "val_loss" in r]
    line = re.search("^%s: (\\d+) steps, (\\d+) validations, last train_loss ([0-9.]+) \\(step (\\d+)\\)" % run, out, re.M)
    ok = line and int(line[1]) == len(train) and int(line[2]) == len(val) and \
        abs(float(line[3]) - train[-1]["train_loss"]) < 1e-4 and int(line[4]) == train[-1]["step"]
    if not ok:
        open("py.err", "w").write(f"{run}: {line and line[0]} vs {len(train)} steps, {len(val)} validations")
        sys.exit(1)
PY
/usr/bin/python3 - both.png <<'PY' && pass plot_png_drawn || fail plot_png_drawn "$(cat py.err)"
import sys
import matplotlib.image as mpimg
img = mpimg.imread(sys.argv[1])
h, w = img.shape[:2]
colors = len({tuple(p) for p in img.reshape(-1, img.shape[2])[::7].tolist()})
if (w, h) != (1200, 800) or colors < 20:
    open("py.err", "w").write(f"{w}x{h} with {colors} colours (expected 1200x800 with curves)")
    sys.exit(1)
PY
expect_ok plot_one_run_default "$CTRAIN" plot a
[ -s a/loss.png ] && pass plot_default_out || fail plot_default_out "no a/loss.png: $(ls a)"
expect_ok plot_tokens_axis "$CTRAIN" plot a --x tokens --out tokens.png

expect_fail plot_no_runs 2 'no run directory given' "$CTRAIN" plot
expect_fail plot_bad_axis 2 "--x 'time': expected step or tokens" "$CTRAIN" plot a --x time
expect_fail plot_missing_run 1 "plot: cannot read 'nope/metrics.jsonl': No such file or directory" "$CTRAIN" plot nope
mkdir -p empty && : >empty/metrics.jsonl
expect_fail plot_empty_run 1 "plot: 'empty/metrics.jsonl' holds no training or validation records yet" "$CTRAIN" plot empty
mkdir -p garbled && echo 'not json' >garbled/metrics.jsonl
expect_fail plot_garbled_run 1 "plot: 'garbled/metrics.jsonl' line 1 is not a metrics record" "$CTRAIN" plot garbled
expect_fail plot_unwritable 1 "plot: cannot write 'no/dir/x.png'" "$CTRAIN" plot a --out no/dir/x.png
expect_fail plot_no_python 1 "plot: cannot run '/nonexistent/python3'" env CTRAIN_PYTHON=/nonexistent/python3 "$CTRAIN" plot a

finish
