#!/usr/bin/env python3
"""Helper of plan_accuracy.sh (Debian's /usr/bin/python3, standard library only).

measure BRAID ROOT WORK N STEPS WARMUP [REPEAT]: for every (model, plan) pair below on cpu:N, writes the pins of the
  plan's shape (a plan file with only summary fields), lets `braid plan` complete it (the best plan of that
  shape), runs `braid bench --set parallel.plan=FILE` (the planner's own choice: parallel.plan=auto) and
  writes WORK/rows_cpuN.csv: model, devices, plan, shape, predicted and measured step ms (median), error.
  With REPEAT > 1 every pair is benchmarked REPEAT times (all pairs in turn) and the median of its quiet medians is kept.
  Measurements beside other processes' work (braid bench's other_load_cores > QUIET) are kept only when no
  quiet one exists after RETRIES more tries; such rows are flagged.
reference BRAID ROOT WORK N: the machine's speed now: the median step of REFERENCE_RUNS runs of a fixed single-device
  benchmark (the MLP below on `cpu`), written to WORK/reference_cpuN.txt right after calibration. Before each pair's
  measurement `measure` runs it once more; a measurement whose reference step is more than DRIFT away from the
  calibration's is not quiet either (on this VM the host's other tenants slow everything by 20-60% for seconds
  to minutes, unseen by other_load_cores, and a calibration and a measurement minutes apart then disagree).
summarise CSV ROWS...: joins the rows, prints the table, the median absolute error, the count within +-25%,
  and per (model, devices) whether the chosen plan is the fastest measured or within 10% of it."""
import csv
import os
import statistics
import subprocess
import sys
import time

DRIFT = 0.10   # the largest relative change of the reference step since calibration for a quiet measurement
REFERENCE_RUNS = 3
QUIET = 0.25   # cores of other processes' work during a measurement that still count as a quiet machine
RETRIES = 5

# Small variants of the shipped runs, so that every plan runs in a few seconds on a shared 2-core machine.
MODELS = {
    "tiny_gpt": ("configs/tiny_gpt.yaml", ["vars.n_layer=4", "vars.d=64", "vars.seq=32", "data.train.seq=32",
                                           "train.batch=16", "vars.dropout=0.0"]),
    "mlp": ("configs/bench/mlp.yaml", ["vars.hidden1=512", "vars.hidden2=512", "train.batch=128"]),
}
# Plan shapes (dp, tp, pp, micro-batches, schedule[, memory strategies]), written as a plan file's summary: every
# field is a pin, `braid plan` completes the stages and layer splits. None: the planner's choice (parallel.plan=auto).
# The memory strategies (issue 21) are summary fields too: ZeRO stages and recomputation modes.
PLANS = {
    2: {"chosen": None, "dp": (2, 1, 1, 1, "1f1b"), "tp": (1, 2, 1, 1, "1f1b"), "pp": (1, 1, 2, 4, "1f1b"),
        "dp_zero1": (2, 1, 1, 1, "1f1b", "zero: 1"), "dp_zero3": (2, 1, 1, 1, "1f1b", "zero: 3"),
        "pp_full": (1, 1, 2, 4, "1f1b", "recompute: full")},
    4: {"chosen": None, "dp": (4, 1, 1, 1, "1f1b"), "tp": (1, 4, 1, 1, "1f1b"), "pp": (1, 1, 4, 8, "1f1b"),
        "dp2xpp2": (2, 1, 2, 4, "1f1b"), "dp2xtp2": (2, 2, 1, 1, "1f1b"), "tp2xpp2": (1, 2, 2, 4, "gpipe"),
        "dp_zero2": (4, 1, 1, 1, "1f1b", "zero: 2"), "dp2xpp2_zero1_selective": (2, 1, 2, 4, "1f1b", "zero: 1, recompute: selective")},
}


def disturbed(other, drift=0.0):
    said = []
    if other > QUIET:
        said.append(f"other processes used {other:.2f} cores")
    if abs(drift) > DRIFT:
        said.append(f"the reference step was {100 * drift:+.0f}% off its calibration-time figure")
    return f"  [disturbed: {'; '.join(said)}]" if said else ""


def batch_of(sets):
    return int(next(s for s in sets if s.startswith("train.batch=")).split("=")[1])


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}\n{r.stdout[-3000:]}")
    return r.stdout


def reference_cmd(braid, root, csv_file):
    cfg, sets = MODELS["mlp"]
    return [braid, "bench", os.path.join(root, cfg)] + sum((["--set", s] for s in sets), []) + \
        ["--set", "devices=cpu", "--steps", "40", "--warmup", "3", "--window", "1", "--csv", csv_file]


def reference_step_ms(braid, root, work):
    csv_file = os.path.join(work, "reference.csv")
    run(reference_cmd(braid, root, csv_file))
    with open(csv_file) as f:
        return float(next(csv.DictReader(f))["step_ms_median"])


def reference(braid, root, work, n):
    ms = statistics.median(reference_step_ms(braid, root, work) for _ in range(REFERENCE_RUNS))
    with open(os.path.join(work, f"reference_cpu{n}.txt"), "w") as f:
        f.write(f"{ms}\n")
    print(f"  reference step after calibration: {ms:.3f} ms")


def measure(braid, root, work, n, steps, warmup, repeat="1"):
    n = int(n)
    out = []
    pairs = []  # (model, name, command, csv file), measured `repeat` times in turn; the median is kept
    plan_text = {}  # (model, name) -> its plan file's text: the same plan under two names is measured as one
    for model, (cfg, sets) in MODELS.items():
        run_file = os.path.join(root, cfg)
        base = sum((["--set", s] for s in sets), []) + ["--set", f"devices=cpu:{n}"]
        for name, pins in PLANS[n].items():
            plan = os.path.join(work, f"{model}_cpu{n}_{name}.yaml")
            if pins is None:  # the planner's choice (parallel.plan auto), written out so that it can be compared
                run([braid, "plan", run_file] + base + ["--out", plan])
            else:
                pin_file = os.path.join(work, f"{model}_cpu{n}_{name}_pins.yaml")
                dp, tp, pp, m, sched = pins[:5]
                extra = f", {pins[5]}" if len(pins) > 5 else ""
                mb = batch_of(sets) // dp // m
                with open(pin_file, "w") as f:
                    f.write(f"summary: {{devices: {n}, data_parallel: {dp}, tensor_parallel: {tp}, pipeline_stages: {pp}, "
                            f"virtual_stages: 1, micro_batch: {mb}, micro_batches: {m}, schedule: {sched}{extra}}}\n"
                            "stages: []\nlayers: []\n")
                run([braid, "plan", run_file] + base + ["--set", f"parallel.plan={pin_file}", "--out", plan])
            with open(plan) as f:
                plan_text[(model, name)] = f.read()
            csv_file = os.path.join(work, f"{model}_cpu{n}_{name}.csv")
            cmd = [braid, "bench", run_file] + base + ["--set", f"parallel.plan={plan}", "--steps", str(steps),
                                                      "--warmup", str(warmup), "--window", "1", "--csv", csv_file]
            pairs.append((model, name, cmd, csv_file))
    # Repeats go round all pairs in turn, so that a burst of other work on a shared machine slows one
    # measurement of several pairs rather than every measurement of one.
    # A measurement during which other processes used more than QUIET cores (braid bench's other_load_cores) is
    # not kept while a quiet one exists; a pair with no quiet measurement after the rounds is measured again,
    # after a pause, up to RETRIES times; if none is quiet then, the least disturbed is kept and flagged.
    # Of a pair's quiet measurements the median one is kept (the least would bias every measured time low
    # against a calibration built from medians).
    taken = {}

    with open(os.path.join(work, f"reference_cpu{n}.txt")) as f:
        calibrated_ms = float(f.read())

    def drift(r):
        return abs(r["reference_ms"] / calibrated_ms - 1)

    def quiet(r):
        return float(r["other_load_cores"]) <= QUIET and drift(r) <= DRIFT

    def measure_once(model, name, cmd, csv_file):
        ref = reference_step_ms(braid, root, work)
        run(cmd)
        with open(csv_file) as f:
            r = next(csv.DictReader(f))
        r["reference_ms"] = ref
        taken.setdefault((model, name), []).append(r)

    # Pairs whose plan files are identical (the planner's choice is often one of the named shapes) are one plan:
    # their measurements are pooled, so a plan is never "slower than itself" by the process-to-process spread
    # (mlp cpu:2: the chosen tp 2 at 2.70 ms and the same plan as "tp" at 2.44 ms in one run).
    def same_plan(key):
        return [k for k in taken if k[0] == key[0] and plan_text[k] == plan_text[key]]

    def kept(key):
        pooled = [r for k in same_plan(key) for r in taken[k]]
        rows = [r for r in pooled if quiet(r)]
        if not rows:
            return min(pooled, key=lambda r: float(r["other_load_cores"]) + drift(r))
        rows.sort(key=lambda r: float(r["step_ms_median"]))
        return rows[(len(rows) - 1) // 2]

    for rep in range(int(repeat)):
        for pair in pairs:
            measure_once(*pair)
    for pair in pairs:
        for retry in range(RETRIES):
            if any(quiet(r) for r in taken[pair[:2]]):
                break
            time.sleep(2 * (retry + 1))
            measure_once(*pair)
    best = {key: kept(key) for key in taken}
    for model, name, cmd, csv_file in pairs:
        r = best[(model, name)]
        pred, meas = float(r["predicted_step_ms"]), float(r["step_ms_median"])
        other = float(r["other_load_cores"])
        ref_drift = r["reference_ms"] / calibrated_ms - 1
        out.append(dict(model=model, devices=f"cpu:{n}", plan=name, shape=r["plan"].split(";")[0],
                        predicted_ms=f"{pred:.3f}", measured_ms=f"{meas:.3f}", error=f"{pred / meas - 1:+.4f}",
                        other_load=f"{other:.2f}", reference_drift=f"{ref_drift:+.4f}",
                        measurements=sum(len(taken[k]) for k in same_plan((model, name))),
                        quiet_measurements=sum(quiet(x) for k in same_plan((model, name)) for x in taken[k]),
                        same_plan_as=" ".join(k[1] for k in same_plan((model, name)) if k[1] != name)))
        print(f"  {model:9s} cpu:{n} {name:8s} predicted {pred:8.2f} ms  measured {meas:8.2f} ms  "
              f"{100 * (pred / meas - 1):+6.1f}%  ({out[-1]['shape']}){disturbed(other, ref_drift)}", flush=True)
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
              f"{disturbed(float(r.get('other_load', 0)), float(r.get('reference_drift', 0)))}")
    errs = [abs(float(r["error"])) for r in rows]
    within = sum(e <= 0.25 for e in errs)
    print(f"\n{len(rows)} pairs; median absolute error {100 * statistics.median(errs):.1f}% (target <= 15%); "
          f"{within}/{len(rows)} within +-25%; worst {100 * max(errs):.1f}%")
    noisy = sum(disturbed(float(r.get("other_load", 0)), float(r.get("reference_drift", 0))) != "" for r in rows)
    if noisy:
        print(f"{noisy} pair(s) measured only while disturbed (no quiet measurement after {RETRIES} retries)")
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
    elif sys.argv[1] == "reference":
        reference(*sys.argv[2:6])
    else:
        summarise(*sys.argv[2:])
