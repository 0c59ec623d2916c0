#!/usr/bin/env python3
"""Pipeline bubble from a braid chrome trace: per device, the fraction of each training step it spends idle
(not in a forward or backward event), beside the textbook bubble (p - 1) / (v m + p - 1).

A step's window runs from the first forward of any device to the last backward of any device before the
step's optimizer events; a device's idle fraction is 1 - (its forward + backward time) / window. The first
step (warm-up) is left out; the figures are medians over the other steps.
Usage: bubble.py TRACE.json --stages P --micro-batches M [--virtual V]"""
import argparse
import json
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("trace")
ap.add_argument("--stages", type=int, required=True)
ap.add_argument("--micro-batches", type=int, required=True)
ap.add_argument("--virtual", type=int, default=1)
a = ap.parse_args()

with open(a.trace) as f:
    doc = json.load(f)
events = doc["traceEvents"] if isinstance(doc, dict) else doc
names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
compute = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("forward", "backward")),
                 key=lambda e: e["ts"])
# Step boundaries: the optimizer events of the lowest device, in time order.
opt = [e for e in events if e.get("ph") == "X" and e.get("cat") == "optimizer"]
dev0 = min(e["tid"] for e in opt)
bounds = sorted(e["ts"] for e in opt if e["tid"] == dev0)
devices = sorted({e["tid"] for e in compute})
idle = {d: [] for d in devices}
start = 0.0
for k, end in enumerate(bounds):
    step = [e for e in compute if start <= e["ts"] < end]
    start = end
    if k == 0 or not step:
        continue  # warm-up
    t0 = min(e["ts"] for e in step)
    t1 = max(e["ts"] + e["dur"] for e in step)
    for d in devices:
        busy = sum(e["dur"] for e in step if e["tid"] == d)
        idle[d].append(1 - busy / (t1 - t0))
p, m, v = a.stages, a.micro_batches, a.virtual
theory = (p - 1) / (v * m + p - 1)
print(f"pipeline of {p} stages, {m} micro-batches, {v} chunk(s) per device: textbook bubble "
      f"(p-1)/(vm+p-1) = {theory:.3f}")
print("| device | measured idle fraction (median over steps 2..) | min | max |")
print("|---|---|---|---|")
for d in devices:
    xs = idle[d]
    if xs:
        print(f"| {names.get(d, d)} | {statistics.median(xs):.3f} | {min(xs):.3f} | {max(xs):.3f} |")
