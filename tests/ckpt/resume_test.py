#!/usr/bin/env python3
"""Exact resume and crash safety of checkpoints, through the braid command.

exact:  for fashion_lenet (batch norm running statistics) and tiny_gpt (dropout 0.1: random streams), train
        2N steps straight; then train with --stop-after N (a stop in the middle of an epoch), resume with
        --resume latest and finish: per-step losses and final weights must be bit-identical.
signal: SIGTERM mid-run saves a checkpoint and exits 143; --resume latest finishes bit-identically.
diverge: a run whose loss becomes NaN/Inf exits 2; `latest` never names a checkpoint holding NaN/Inf.
crash:  SIGKILL at random moments of a run that checkpoints every step (TRIALS times); each time
        --resume latest must succeed from a complete checkpoint and finish bit-identically to the straight run.
Usage: resume_test.py BRAID SOURCE_DIR WORK_DIR [--trials N]"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

braid, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
trials = int(sys.argv[sys.argv.index("--trials") + 1]) if "--trials" in sys.argv else 20
os.makedirs(work, exist_ok=True)
results = []


def case(name, ok, detail=""):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)[:2000]), flush=True)


SETUPS = {
    # 160 samples / batch 16 = 10 steps per epoch: N = 7 stops mid-epoch, 2N = 14 crosses an epoch.
    "fashion_lenet": ["--set", "train.batch=16", "--set", "train.steps=14", "--set", "data.train.limit=160",
                      "--set", "data.eval.limit=64", "--set", "vars.hidden=64", "--set", "vars.c1=8",
                      "--set", "vars.c2=16", "--set", "log.every_steps=1"],
    # 48 windows / batch 8 = 6 steps per epoch.
    "tiny_gpt": ["--set", "vars.n_layer=1", "--set", "vars.d=32", "--set", "vars.seq=16", "--set", "train.batch=8",
                 "--set", "train.micro_batch=4", "--set", "train.steps=14", "--set", "data.train.limit=48",
                 "--set", "data.train.seq=16", "--set", "data.eval.seq=16", "--set", "eval.batches=2",
                 "--set", "eval.every_steps=5", "--set", "log.every_steps=1"],
}
N = 7


def train(cfg, extra, name, check=True):
    d = os.path.join(work, name)
    metrics = os.path.join(d, "metrics.jsonl")
    cmd = [braid, "train", os.path.join(src, "configs", cfg + ".yaml"), "--no-progress",
           "--set", f"checkpoint.dir={d}/ckpt", "--set", f"log.metrics={metrics}"] + SETUPS[cfg] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}\n{r.stdout[-2000:]}")
    return r


def losses(name):
    out = {}
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by SIGKILL
            if "loss" in rec:
                out[rec["step"]] = rec["loss"]
    return out


def weights(path):
    out = {}
    with h5py.File(path, "r") as f:
        def visit(n, obj):
            if isinstance(obj, h5py.Dataset) and (n.startswith("params/") or n.startswith("buffers/")):
                out[n] = obj[()]
        f.visititems(visit)
    return out


def same_weights(a, b):
    wa, wb = weights(a), weights(b)
    if wa.keys() != wb.keys():
        return False, f"different tensors: {sorted(wa.keys() ^ wb.keys())}"
    for k in wa:
        if wa[k].dtype != wb[k].dtype or wa[k].shape != wb[k].shape or not np.array_equal(wa[k], wb[k]):
            diff = np.max(np.abs(wa[k].astype(np.float64) - wb[k].astype(np.float64))) if wa[k].shape == wb[k].shape else "shape"
            return False, f"tensor {k} differs (max abs {diff})"
    return True, ""


def fresh(name):
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    os.makedirs(os.path.join(work, name))


for cfg in SETUPS:
    fresh(cfg + "_straight")
    train(cfg, ["--save-final", os.path.join(work, cfg + "_straight", "final.h5")], cfg + "_straight")
    straight = losses(cfg + "_straight")
    # Stop after N (mid-epoch), resume, finish.
    fresh(cfg + "_resumed")
    r1 = train(cfg, ["--stop-after", str(N)], cfg + "_resumed")
    r2 = train(cfg, ["--resume", "latest", "--save-final", os.path.join(work, cfg + "_resumed", "final.h5")],
               cfg + "_resumed")
    resumed = losses(cfg + "_resumed")
    case(f"{cfg}: stop after {N} mid-epoch, resume: per-step losses bit-identical",
         len(straight) == 14 and resumed == straight, {"straight": straight, "resumed": resumed})
    ok, why = same_weights(os.path.join(work, cfg + "_straight", "final.h5"),
                           os.path.join(work, cfg + "_resumed", "final.h5"))
    case(f"{cfg}: final weights (and batch-norm buffers) bit-identical", ok, why)

# A checkpoint of another model: --resume refuses it naming the first differing tensor and both shapes;
# --init-from refuses it too unless --init-partial, which lists what it skipped.
ckpt = os.path.join(work, "tiny_gpt_straight", "ckpt", "latest")
other = ["--set", "vars.d=48"]
r = train("tiny_gpt", ["--resume", os.path.join(work, "tiny_gpt_straight", "ckpt", open(ckpt).read().strip())] + other,
          "tiny_gpt_other", check=False) if os.path.exists(ckpt) else None
case("resume with another model's checkpoint: exit 2 naming the tensor and both shapes",
     r is not None and r.returncode == 2 and "does not belong" in r.stderr and "[" in r.stderr, r and r.stderr)
src_ckpt = os.path.join(work, "tiny_gpt_straight", "final.h5")
fresh("tiny_gpt_other")
r = train("tiny_gpt", ["--init-from", src_ckpt] + other, "tiny_gpt_other", check=False)
case("--init-from another model's weights: exit 2 naming the tensor", r.returncode == 2 and "tensor '" in r.stderr, r.stderr)
fresh("tiny_gpt_other")
r = train("tiny_gpt", ["--init-from", src_ckpt, "--init-partial", "--set", "train.steps=2"] + other, "tiny_gpt_other",
          check=False)
case("--init-from --init-partial: trains and lists the skipped tensors",
     r.returncode == 0 and "not loaded" in r.stdout, r.stderr + r.stdout[-800:])

# SIGTERM: save, exit 143, resume.
cfg = "tiny_gpt"
straight = losses(cfg + "_straight")
fresh("sigterm")
cmd = [braid, "train", os.path.join(src, "configs", cfg + ".yaml"), "--no-progress", "--set",
       f"checkpoint.dir={work}/sigterm/ckpt", "--set", f"log.metrics={work}/sigterm/metrics.jsonl"] + SETUPS[cfg] + \
      ["--set", "train.steps=2000"]
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
time.sleep(1.5)
p.send_signal(signal.SIGTERM)
out, err = p.communicate(timeout=120)
latest = os.path.join(work, "sigterm", "ckpt", "latest")
case("SIGTERM: checkpoint saved, exit status 143", p.returncode == 143 and os.path.exists(latest),
     f"rc {p.returncode}\n{err}\n{out[-500:]}")

# Crash safety: SIGKILL at random moments while checkpoints are written every step. The reference is an
# uninterrupted run of the same command (40 steps, a checkpoint after each), which also times the run so
# that the kills land inside it.
rng = random.Random(1)
crash_ok = 0
killed_mid_run = 0
CRASH = SETUPS[cfg] + ["--set", "train.steps=40", "--set", "checkpoint.every_steps=1", "--set", "checkpoint.keep=2"]


def crash_cmd(d):
    return [braid, "train", os.path.join(src, "configs", cfg + ".yaml"), "--no-progress",
            "--set", f"checkpoint.dir={d}/ckpt", "--set", f"log.metrics={d}/metrics.jsonl"] + CRASH


fresh("crash_ref")
t0 = time.time()
subprocess.run(crash_cmd(f"{work}/crash_ref") + ["--save-final", f"{work}/crash_ref/final.h5"], check=True,
               capture_output=True)
duration = time.time() - t0
reference = losses("crash_ref")
for t in range(trials):
    name = f"crash{t}"
    fresh(name)
    d = os.path.join(work, name)
    cmd = crash_cmd(d)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Kill at a random moment of a random step: wait until checkpoint k exists (k random; timing alone is
    # unreliable on a loaded machine), then up to one more step's time, so kills land inside training and
    # inside checkpoint writes alike.
    k = rng.randint(0, 35)
    latest_file = os.path.join(d, "ckpt", "latest")
    deadline = time.time() + 120
    while k > 0 and p.poll() is None and time.time() < deadline:
        try:
            if int(open(latest_file).read().strip()[5:13]) >= k:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.002)
    time.sleep(rng.uniform(0, duration / 40))
    killed_mid_run += p.poll() is None
    p.kill()
    p.wait()
    had = os.path.exists(os.path.join(d, "ckpt", "latest"))
    step_at_kill = open(os.path.join(d, "ckpt", "latest")).read().strip() if had else "none"
    print(f"     trial {t}: killed at checkpoint {step_at_kill}", flush=True)
    r = subprocess.run(cmd + (["--resume", "latest"] if had else []) + ["--save-final", f"{d}/final.h5"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        case(f"crash trial {t}: resume", False, r.stderr)
        continue
    got = losses(name)
    ok_l = got == reference
    ok_w, why = same_weights(f"{work}/crash_ref/final.h5", f"{d}/final.h5")
    if ok_l and ok_w:
        crash_ok += 1
    else:
        case(f"crash trial {t}", False, why or {"got": got, "reference": reference})
case(f"SIGKILL at random moments ({killed_mid_run}/{trials} while running, run {duration:.2f} s): "
     f"{crash_ok}/{trials} trials resumed from a complete checkpoint, bit-identical",
     crash_ok == trials and killed_mid_run >= trials // 2)

# A run that diverges (SGD at lr 1e30) while checkpointing every step: it stops with exit 2 naming the step,
# and `latest` (if any) names a checkpoint with finite tensors only: a diverged state never replaces it.
fresh("diverge")
r = train("fashion_lenet", ["--set", "optimizer.lr=1e30", "--set", "checkpoint.every_steps=1",
                            "--set", "lr_schedule.warmup_steps=0"], "diverge", check=False)
latest = os.path.join(work, "diverge", "ckpt", "latest")
finite = True
if os.path.exists(latest):
    with h5py.File(os.path.join(work, "diverge", "ckpt", open(latest).read().strip()), "r") as f:
        def visit(n, obj):
            global finite
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f" and not np.all(np.isfinite(obj[()])):
                finite = False
        f.visititems(visit)
case("a diverging run: exit 2 naming the step, 'latest' never names a non-finite checkpoint",
     r.returncode == 2 and "at step" in r.stderr and finite, f"rc {r.returncode} finite {finite}\n{r.stderr}")

print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
