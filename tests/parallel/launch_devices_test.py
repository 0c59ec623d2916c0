#!/usr/bin/env python3
"""A run file that names one cpu device under braid launch (issue 24): `braid launch --nproc 2 -- braid train
configs/tiny_gpt.yaml` (devices: cpu) trains two cpu devices, one per process, planned as `devices: cpu:2`
would be: its per-step losses are those of the one-process `devices: cpu:2` run within the 1e-5 relative
tolerance of the data-parallel tests (tests/parallel/dp_test.py), and so are its final weights. An explicit
count that does not match the job (cpu:1 in a job of 2) is still a user error (exit status 2).
Usage: launch_devices_test.py BRAID SOURCE_DIR WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

from run_outputs import losses, weights

braid, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
STEPS = 8
RTOL = 1e-5
SETS = ["vars.n_layer=2", "vars.d=32", "vars.seq=16", "data.train.seq=16", "data.eval.seq=16", "train.batch=16",
        "train.micro_batch=4", f"train.steps={STEPS}", "data.train.limit=64", "eval.batches=1", "log.every_steps=1",
        "eval.every_steps=0"]
results = []


def case(name, ok, detail=""):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)[-3000:]), flush=True)


def cmd(name, extra=()):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    c = [braid, "train", os.path.join(src, "configs", "tiny_gpt.yaml"), "--no-progress",
         "--set", f"log.metrics={d}/metrics.jsonl", "--save-final", f"{d}/final.h5"]
    for kv in SETS + list(extra):
        c += ["--set", kv]
    return c, d


def run(c):
    return subprocess.run(c, capture_output=True, text=True, timeout=300)


c1, d1 = cmd("cpu2_one_process", ["devices=cpu:2"])
r1 = run(c1)
cn, dn = cmd("cpu_two_processes")  # the run file's devices: cpu
rn = run([braid, "launch", "--nproc", "2", "--"] + cn)
if r1.returncode or rn.returncode:
    case("devices cpu under braid launch --nproc 2 and devices cpu:2 in one process train", False,
         r1.stderr[-1500:] + rn.stdout[-1500:] + rn.stderr[-1500:])
else:
    l1, ln = losses(d1), losses(dn)
    rel = max((abs(a - b) / abs(b) for a, b in zip(ln, l1)), default=float("inf")) if len(ln) == len(l1) == STEPS else float("inf")
    case(f"devices cpu, 2 processes: the {STEPS} losses of devices cpu:2 in one process within {RTOL:g} "
         f"(max rel {rel:.1e}{', bit for bit' if ln == l1 else ''})", rel <= RTOL, f"{ln} vs {l1}")
    w1, wn = weights(d1), weights(dn)
    worst = max((float(np.max(np.abs(w1[k] - wn[k]) / np.maximum(1.0, np.abs(w1[k])))) for k in w1), default=float("inf")) \
        if w1.keys() == wn.keys() else float("inf")
    case(f"devices cpu, 2 processes: final weights within {RTOL:g} of cpu:2's (max {worst:.1e})", worst <= RTOL)
    case("rank 0 says it trains cpu:2, one device per process",
         "[rank 0] braid: devices cpu in a job of 2 processes: training as cpu:2, one device per process" in rn.stdout,
         rn.stdout[-1500:])

cx, dx = cmd("cpu1_two_processes", ["devices=cpu:1"])
rx = run([braid, "launch", "--nproc", "2", "--"] + cx)
case("devices cpu:1 in a job of 2 processes: exit status 2 naming both", rx.returncode == 2 and
     "a job of 2 processes needs a plan over 2 devices" in rx.stderr, f"{rx.returncode}: {rx.stderr[-1500:]}")

print(f"{sum(results)}/{len(results)} passed")
sys.exit(0 if results and all(results) else 1)
