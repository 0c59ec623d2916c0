#!/usr/bin/python3
"""Plots for the benchmark scripts (matplotlib, Debian's python3-matplotlib; PNG, no display needed).

  plot.py throughput CSV [-o PNG] [--x KEY] [--series KEY] [--metric COLUMN]
      Rows of `braid bench --csv` (or scripts/bench/sweep.sh): the `sweep` column ("k1=v1 k2=v2") gives each
      row's point. x: the values of KEY (default: the first key of the sweep) in the order they first appear
      (categorical: device strings, plan files and sizes alike); one line per value of --series, or per
      combination of the remaining keys, and per run file when the CSV holds several. Error bars: the
      min-max over windows (for samples/s and tokens/s). When some rows have a `predicted_step_ms` value
      (the planner's prediction: runs on several devices or under a plan), a second panel plots predicted
      against measured step time for those rows.
  plot.py predicted CSV [-o PNG]
      Predicted (`predicted_step_ms`) against measured (`step_ms_median`) step time, one point per row, with
      the y = x line, for the rows that have a prediction; an error when none has.
  plot.py row CSV
      One line per row: samples/s (median and min-max over windows), step time, prediction (sweep.sh's log).
  plot.py loss METRICS.jsonl... [-o PNG] [--smooth N]
      One curve of `loss` against `step` per metrics file (`braid train`'s log.metrics), labelled by the
      file name; `eval_loss` dashed in the same colour where present. --smooth N: moving mean over N records.
"""
import argparse
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def point(row):
    """The sweep point of a CSV row as an ordered dict {key: value}."""
    out = {}
    for kv in (row.get("sweep") or "").split():
        k, _, v = kv.partition("=")
        out[k] = os.path.basename(v) if "/" in v else v  # plan files: their names
    return out


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {path} has no rows")
    return rows


def spread_cols(metric):
    if metric == "samples_per_s_median":
        return "samples_per_s_min", "samples_per_s_max", 1.0
    if metric == "tokens_per_s_median":
        return "samples_per_s_min", "samples_per_s_max", None  # scaled by tokens_per_sample per row
    return None, None, None


def throughput(args):
    rows = read_csv(args.csv)
    keys = []
    for r in rows:
        for k in point(r):
            if k not in keys:
                keys.append(k)
    xkey = args.x or (keys[0] if keys else None)
    if xkey and xkey not in keys:
        sys.exit(f"plot.py: --x {xkey}: the CSV's sweep keys are {', '.join(keys) or 'none'}")
    runs = sorted({r["run"] for r in rows})
    lines, xs = {}, []
    for r in rows:
        p = point(r)
        x = p.get(xkey, "-") if xkey else os.path.basename(r["run"])
        if x not in xs:
            xs.append(x)
        if args.series:
            label = f"{args.series}={p.get(args.series, '-')}"
        else:
            label = " ".join(f"{k}={v}" for k, v in p.items() if k != xkey)
        if len(runs) > 1 and xkey:
            label = (os.path.basename(r["run"]) + " " + label).strip()
        lines.setdefault(label or "all", []).append((x, r))
    predicted = bool(with_prediction(rows))
    fig, axes = plt.subplots(1, 2 if predicted else 1, figsize=(11 if predicted else 7, 4.5), squeeze=False)
    ax = axes[0][0]
    lo_col, hi_col, _ = spread_cols(args.metric)
    for label, pts in lines.items():
        xi = [xs.index(x) for x, _ in pts]
        y = [float(r[args.metric]) for _, r in pts]
        if lo_col:
            scale = [1.0 if args.metric != "tokens_per_s_median" else float(r["tokens_per_sample"]) for _, r in pts]
            lo = [yy - float(r[lo_col]) * s for yy, (_, r), s in zip(y, pts, scale)]
            hi = [float(r[hi_col]) * s - yy for yy, (_, r), s in zip(y, pts, scale)]
            ax.errorbar(xi, y, yerr=[lo, hi], marker="o", capsize=3, label=label)
        else:
            ax.plot(xi, y, marker="o", label=label)
    ax.set_xticks(range(len(xs)))
    ax.set_xticklabels(xs, rotation=20 if max(len(x) for x in xs) > 8 else 0)
    ax.set_xlabel(xkey or "run")
    ax.set_ylabel(args.metric.replace("_", " ") + (" (bars: min-max over windows)" if lo_col else ""))
    ax.set_ylim(bottom=0)
    models = sorted({r["model"] for r in rows})
    ax.set_title(f"braid bench: {', '.join(models)}")
    ax.grid(alpha=0.3)
    if len(lines) > 1 or list(lines)[0] != "all":
        ax.legend(fontsize=8)
    if predicted:
        predicted_panel(axes[0][1], rows)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot: {args.output}")


def with_prediction(rows):
    """The rows that carry a prediction: a one-device run has none (its `predicted_step_ms` cell is empty)."""
    return [r for r in rows if (r.get("predicted_step_ms") or "").strip()]


def predicted_panel(ax, rows):
    rows = with_prediction(rows)
    meas = [float(r["step_ms_median"]) for r in rows]
    pred = [float(r["predicted_step_ms"]) for r in rows]
    ax.scatter(meas, pred)
    for r, m, p in zip(rows, meas, pred):
        ax.annotate(r.get("sweep") or os.path.basename(r["run"]), (m, p), fontsize=7)
    top = max(meas + pred) * 1.1
    ax.plot([0, top], [0, top], color="grey", lw=1, ls="--")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("measured step ms (median)")
    ax.set_ylabel("predicted step ms")
    ax.set_title("predicted against measured")
    ax.grid(alpha=0.3)


def row(args):
    """One line per CSV row: what sweep.sh prints for each point (read from the CSV, not bench's text)."""
    for r in read_csv(args.csv):
        print(f"   {r['samples_per_s_median']} samples/s (median; {r['samples_per_s_min']}-{r['samples_per_s_max']} "
              f"over windows), step {r['step_ms_median']} ms" +
              (f", predicted {r['predicted_step_ms']} ms" if (r.get("predicted_step_ms") or "").strip() else ""))


def predicted(args):
    rows = read_csv(args.csv)
    if not with_prediction(rows):
        sys.exit(f"plot.py: no row of {args.csv} has a predicted_step_ms value (braid bench predicts the step of "
                 "runs on several devices or under a plan; a one-device run has none)")
    fig, ax = plt.subplots(figsize=(6, 5))
    predicted_panel(ax, rows)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot: {args.output}")


def loss(args):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, path in enumerate(args.files):
        recs = [json.loads(line) for line in open(path) if line.strip()]
        color = f"C{i % 10}"
        label = os.path.basename(path).removesuffix(".jsonl")
        tr = [(r["step"], r["loss"]) for r in recs if "loss" in r]
        if tr:
            steps, vals = zip(*tr)
            if args.smooth > 1:
                vals = [sum(vals[max(0, j - args.smooth + 1): j + 1]) / (j + 1 - max(0, j - args.smooth + 1))
                        for j in range(len(vals))]
            ax.plot(steps, vals, color=color, label=label)
        ev = [(r["step"], r["eval_loss"]) for r in recs if "eval_loss" in r]
        if ev:
            steps, vals = zip(*ev)
            ax.plot(steps, vals, color=color, ls="--", marker=".", label=label + " (eval)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("training loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot: {args.output}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("csv")
    t.add_argument("-o", "--output", default="throughput.png")
    t.add_argument("--x")
    t.add_argument("--series")
    t.add_argument("--metric", default="samples_per_s_median")
    rw = sub.add_parser("row")
    rw.add_argument("csv")
    p = sub.add_parser("predicted")
    p.add_argument("csv")
    p.add_argument("-o", "--output", default="predicted.png")
    lo = sub.add_parser("loss")
    lo.add_argument("files", nargs="+")
    lo.add_argument("-o", "--output", default="loss.png")
    lo.add_argument("--smooth", type=int, default=1)
    args = ap.parse_args()
    {"throughput": throughput, "predicted": predicted, "loss": loss, "row": row}[args.cmd](args)


if __name__ == "__main__":
    main()
