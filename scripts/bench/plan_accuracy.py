#!/usr/bin/env python3
"""Helper of plan_accuracy.sh (Debian's /usr/bin/python3, standard library only).

measure BRAID ROOT WORK N STEPS WARMUP [REPEAT]: for every (model, plan) pair below on cpu:N, writes the pins of the
  plan's shape (a plan file with only summary fields), lets `braid plan` complete it (the best plan of that
  shape), runs `braid bench --set parallel.plan=FILE` (the planner's own choice: parallel.plan=auto) and
  writes WORK/rows_cpuN.csv: model, devices, plan, shape, predicted and measured step ms (median), error.
  With REPEAT > 1 every pair is benchmarked REPEAT times (all pairs in turn) and the least median is kept.
  Measurements beside other processes' work (braid bench's other_load_cores > QUIET) are kept only when no
  quiet one exists after RETRIES more tries; such rows are flagged.
summarise CSV ROWS...: joins the rows, prints the table, the median absolute error, the count within +-25%,
  and per (model, devices) whether the chosen plan is the fastest measured or within 10% of it."""
import csv
import os
import statistics
import subprocess
import sys
import time

QUIET = 0.25   # cores of other processes' work during a measurement that still count as a quiet machine
RETRIES = 5

# Small variants of the shipped runs, so that every plan runs in a few seconds on a shared 2-core machine.
MODELS = {
    "tiny_gpt": ("configs/tiny_gpt.yaml", ["vars.n_layer=4", "vars.d=64", "vars.seq=32", "data.train.seq=32",
                                           "train.batch=16", "vars.dropout=0.0"]),
    "mlp": ("configs/bench/mlp.yaml", ["vars.hidden1=512", "vars.hidden2=512", "train.batch=128"]),
}
# Plan shapes (dp, tp, pp, micro-batches, schedule), written as a plan file's summary: every field is a pin,
# `braid plan` completes the stages and layer splits. None: the planner's choice (parallel.plan=auto).
PLANS = {
    2: {"chosen": None, "dp": (2, 1, 1, 1, "1f1b"), "tp": (1, 2, 1, 1, "1f1b"), "pp": (1, 1, 2, 4, "1f1b")},
    4: {"chosen": None, "dp": (4, 1, 1, 1, "1f1b"), "tp": (1, 4, 1, 1, "1f1b"), "pp": (1, 1, 4, 8, "1f1b"),
        "dp2xpp2": (2, 1, 2, 4, "1f1b"), "dp2xtp2": (2, 2, 1, 1, "1f1b"), "tp2xpp2": (1, 2, 2, 4, "gpipe")},
}


def disturbed(other):
    return f"  [disturbed: other processes used {other:.2f} cores]" if other > QUIET else ""


def batch_of(sets):
    return int(next(s for s in sets if s.startswith("train.batch=")).split("=")[1])


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}\n{r.stdout[-3000:]}")
    return r.stdout


def measure(braid, root, work, n, steps, warmup, repeat="1"):
    n = int(n)
    out = []
    pairs = []  # (model, name, command, csv file), measured `repeat` times in turn; the least median is kept
    for model, (cfg, sets) in MODELS.items():
        run_file = os.path.join(root, cfg)
        base = sum((["--set", s] for s in sets), []) + ["--set", f"devices=cpu:{n}"]
        for name, pins in PLANS[n].items():
            plan = "auto"
            if pins is not None:
                pin_file = os.path.join(work, f"{model}_cpu{n}_{name}_pins.yaml")
                dp, tp, pp, m, sched = pins
                mb = batch_of(sets) // dp // m
                with open(pin_file, "w") as f:
                    f.write(f"summary: {{devices: {n}, data_parallel: {dp}, tensor_parallel: {tp}, pipeline_stages: {pp}, "
                            f"virtual_stages: 1, micro_batch: {mb}, micro_batches: {m}, schedule: {sched}}}\n"
                            "stages: []\nlayers: []\n")
                plan = os.path.join(work, f"{model}_cpu{n}_{name}.yaml")
                run([braid, "plan", run_file] + base + ["--set", f"parallel.plan={pin_file}", "--out", plan])
            csv_file = os.path.join(work, f"{model}_cpu{n}_{name}.csv")
            cmd = [braid, "bench", run_file] + base + ["--set", f"parallel.plan={plan}", "--steps", str(steps),
                                                      "--warmup", str(warmup), "--window", "1", "--csv", csv_file]
            pairs.append((model, name, cmd, csv_file))
    # Repeats go round all pairs in turn, so that a burst of other work on a shared machine slows one
    # measurement of several pairs rather than every measurement of one.
    # A measurement during which other processes used more than QUIET cores (braid bench's other_load_cores) is
    # not kept while a quiet one exists; a pair with no quiet measurement after the rounds is measured again,
    # after a pause, up to RETRIES times; if none is quiet then, the least disturbed is kept and flagged.
    best = {}

    def better(r, old):
        if old is None:
            return True
        quiet, old_quiet = float(r["other_load_cores"]) <= QUIET, float(old["other_load_cores"]) <= QUIET
        if quiet != old_quiet:
            return quiet
        if not quiet:
            return float(r["other_load_cores"]) < float(old["other_load_cores"])
        return float(r["step_ms_median"]) < float(old["step_ms_median"])

    def measure_once(model, name, cmd, csv_file):
        run(cmd)
        with open(csv_file) as f:
            r = next(csv.DictReader(f))
        if better(r, best.get((model, name))):
            best[(model, name)] = r

    for rep in range(int(repeat)):
        for pair in pairs:
            measure_once(*pair)
    for pair in pairs:
        for retry in range(RETRIES):
            if float(best[pair[:2]]["other_load_cores"]) <= QUIET:
                break
            time.sleep(2 * (retry + 1))
            measure_once(*pair)
    for model, name, cmd, csv_file in pairs:
        r = best[(model, name)]
        pred, meas = float(r["predicted_step_ms"]), float(r["step_ms_median"])
        other = float(r["other_load_cores"])
        out.append(dict(model=model, devices=f"cpu:{n}", plan=name, shape=r["plan"].split(";")[0],
                        predicted_ms=f"{pred:.3f}", measured_ms=f"{meas:.3f}", error=f"{pred / meas - 1:+.4f}",
                        other_load=f"{other:.2f}"))
        print(f"  {model:9s} cpu:{n} {name:8s} predicted {pred:8.2f} ms  measured {meas:8.2f} ms  "
              f"{100 * (pred / meas - 1):+6.1f}%  ({out[-1]['shape']}){disturbed(other)}", flush=True)
    with open(os.path.join(work, f"rows_cpu{n}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(out[0].keys()))
        w.writeheader()
        w.writerows(out)


def summarise(csv_out, *row_files):
    rows = []
    for p in row_files:
        with open(p) as f:
            rows += list(csv.DictReader(f))
    with open(csv_out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{'model':9s} {'devices':7s} {'plan':8s} {'predicted ms':>12s} {'measured ms':>11s} {'error':>7s}  shape")
    for r in rows:
        print(f"{r['model']:9s} {r['devices']:7s} {r['plan']:8s} {float(r['predicted_ms']):12.2f} "
              f"{float(r['measured_ms']):11.2f} {100 * float(r['error']):+6.1f}%  {r['shape']}"
              f"{disturbed(float(r.get('other_load', 0)))}")
    errs = [abs(float(r["error"])) for r in rows]
    within = sum(e <= 0.25 for e in errs)
    print(f"\n{len(rows)} pairs; median absolute error {100 * statistics.median(errs):.1f}% (target <= 15%); "
          f"{within}/{len(rows)} within +-25%; worst {100 * max(errs):.1f}%")
    noisy = sum(float(r.get("other_load", 0)) > QUIET for r in rows)
    if noisy:
        print(f"{noisy} pair(s) measured only beside other work (no quiet measurement after {RETRIES} retries)")
    for key in sorted({(r["model"], r["devices"]) for r in rows}):
        group = [r for r in rows if (r["model"], r["devices"]) == key]
        best = min(group, key=lambda r: float(r["measured_ms"]))
        chosen = next(r for r in group if r["plan"] == "chosen")
        ratio = float(chosen["measured_ms"]) / float(best["measured_ms"])
        verdict = "fastest" if chosen is best else ("within 10%" if ratio <= 1.10 else "NOT within 10%")
        print(f"{key[0]} on {key[1]}: chosen {float(chosen['measured_ms']):.2f} ms, fastest {best['plan']} "
              f"{float(best['measured_ms']):.2f} ms: chosen is {verdict} ({100 * (ratio - 1):+.1f}%)")
    print(f"CSV written to {csv_out}")


if __name__ == "__main__":
    if sys.argv[1] == "measure":
        measure(*sys.argv[2:9])
    else:
        summarise(*sys.argv[2:])
