#!/usr/bin/python3
"""SIGINT/SIGTERM at random moments of braid training runs: counts clean stops that resume bit-identically.

For each setting (run file x OpenMP threads x float GEMM library) one reference run trains S steps without
interruption. Each trial starts the same run, waits for its training banner and then for the line of a random
step k (0 <= k <= S - 2; 0: right after the banner), sleeps a random part of the last step's time (so that the
signal lands anywhere inside step k + 1, its save included), sends SIGINT or SIGTERM, and expects a clean stop:
exit status 130 (SIGINT) or 143 (SIGTERM) and a `latest` checkpoint. Moments are chosen by the run's own
progress, not by a clock, so a machine whose load changes between the reference and the trials still gets
signals inside training. It then resumes that checkpoint to step S and compares every tensor of the
final checkpoint (params, buffers, optimizer state, random streams, sampler) with the reference's, bit for bit.
Checkpoints are saved every few steps, so many signals arrive during a save.

A trial whose run finished before the signal left is run again (up to five times). The figure is
clean / trials; every other outcome (a crash, another exit status, no checkpoint, a resume that differs) is
listed with its output.

usage: scripts/signal_trials.py [--trials 100] [--steps 30] [--braid build/braid] [--seed 1] [--out DIR]
                                [--configs tiny_gpt,fashion_lenet] [--threads 1,2] [--sgemm onednn,openblas]
Environment: BRAID_SIGNAL_THREAD=0 turns braid's signal thread off (exec/signals.h), for the A/B figure.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sets(steps, ckpt, out):
    return ["--set", f"train.steps={steps}", "--set", f"checkpoint.dir={ckpt}",
            "--set", "checkpoint.every_steps=4", "--set", "checkpoint.keep=2", "--set", "eval.every_steps=0",
            "--set", "eval.batches=1", "--set", f"log.metrics={out}/metrics.jsonl", "--set", "log.every_steps=1",
            "--no-progress"]


def env_for(threads, sgemm):
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = str(threads)
    e["BRAID_SGEMM"] = sgemm
    return e


def tensors(path):
    """Every dataset of a checkpoint except /meta (wall time, creation date), as bytes."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith("meta"):
                out[name] = np.asarray(obj[()]).tobytes()
        f.visititems(visit)
        for g in ("data", "optimizer"):
            if g in f:
                for k, v in f[g].attrs.items():
                    if k != "checksum":
                        out[f"{g}@{k}"] = repr(v)
    return out


def final_ckpt(ckpt_dir, steps):
    return os.path.join(ckpt_dir, f"step_{steps:08d}.h5")


def start(braid, cfg, steps, ckpt, out, env, extra=()):
    cmd = [braid, "train", cfg, *sets(steps, ckpt, out), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                            text=True, bufsize=1)


def wait_banner(p, lines):
    """Reads output until the training banner; False if the process ended first."""
    for line in p.stdout:
        lines.append(line)
        if line.startswith("braid: training "):
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--braid", default=os.path.join(ROOT, "build", "braid"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "scripts", "bench", "out", "signal_trials"))
    ap.add_argument("--configs", default="tiny_gpt,fashion_lenet")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--sgemm", default="onednn,openblas")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    settings = [(c, int(t), g) for c in a.configs.split(",") for t in a.threads.split(",") for g in a.sgemm.split(",")]

    # 1. References: S uninterrupted steps per setting, and how long training takes after the banner.
    refs = {}
    for (c, t, g) in settings:
        d = os.path.join(a.out, f"ref_{c}_t{t}_{g}")
        cfg = os.path.join(ROOT, "configs", f"{c}.yaml")
        p = start(a.braid, cfg, a.steps, os.path.join(d, "ckpt"), d, env_for(t, g))
        lines = []
        if not wait_banner(p, lines):
            sys.exit(f"signal_trials: the reference run of {c} did not start:\n{''.join(lines)}")
        t0 = time.monotonic()
        rest = p.stdout.read()
        rc = p.wait()
        train_s = time.monotonic() - t0
        if rc != 0:
            sys.exit(f"signal_trials: the reference run of {c} failed ({rc}):\n{''.join(lines)}{rest}")
        refs[(c, t, g)] = (tensors(final_ckpt(os.path.join(d, "ckpt"), a.steps)), train_s)
        print(f"reference {c} threads={t} sgemm={g}: {a.steps} steps in {train_s:.2f} s after the banner",
              flush=True)

    # 2. Trials, round-robin over the settings.
    clean, bad, during_first = 0, [], 0
    for i in range(a.trials):
        c, t, g = settings[i % len(settings)]
        ref, train_s = refs[(c, t, g)]
        sig = rnd.choice([signal.SIGINT, signal.SIGTERM])
        cfg = os.path.join(ROOT, "configs", f"{c}.yaml")
        env = env_for(t, g)
        for attempt in range(5):
            d = os.path.join(a.out, f"trial_{i:03d}")
            shutil.rmtree(d, ignore_errors=True)
            ckpt = os.path.join(d, "ckpt")
            k = rnd.randint(0, a.steps - 2)
            part = rnd.random()
            p = start(a.braid, cfg, a.steps, ckpt, d, env)
            lines = []
            started = wait_banner(p, lines)
            delay = 0.0
            if started:
                last = time.monotonic()
                dt = train_s / a.steps
                if k > 0:
                    for line in p.stdout:
                        lines.append(line)
                        if line.startswith("step "):
                            now = time.monotonic()
                            dt, last = now - last, now
                            if line.startswith(f"step {k}/"):
                                break
                delay = part * dt
                time.sleep(delay)
                if p.poll() is None:
                    p.send_signal(sig)
            rest = p.stdout.read()
            rc = p.wait()
            if rc == 0 and started:
                continue  # finished before the signal: try another moment
            break
        what = (f"trial {i} {c} threads={t} sgemm={g} {signal.Signals(sig).name} in step {k + 1} "
                f"({delay:.3f} s after step {k}'s line)")
        out = "".join(lines) + rest
        if rc != 128 + sig:
            bad.append(f"{what}: exit status {rc}\n{out[-2000:]}")
            continue
        if not os.path.exists(os.path.join(ckpt, "latest")):
            bad.append(f"{what}: exit {rc} but no checkpoint\n{out[-2000:]}")
            continue
        with open(os.path.join(ckpt, "latest")) as f:
            at = f.read().strip()
        if at == f"step_{1:08d}.h5":
            during_first += 1
        r = subprocess.run([a.braid, "train", cfg, *sets(a.steps, ckpt, d), "--resume", "latest"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT, text=True)
        if r.returncode != 0:
            bad.append(f"{what}: resume from {at} failed ({r.returncode})\n{r.stdout[-2000:]}")
            continue
        got = tensors(final_ckpt(ckpt, a.steps))
        diff = sorted(k for k in set(ref) | set(got) if ref.get(k) != got.get(k))
        if diff:
            bad.append(f"{what}: resumed from {at}, final checkpoint differs in {', '.join(diff[:8])}")
            continue
        clean += 1
        print(f"{what}: exit {rc}, {at}, resumed bit-identically", flush=True)
        shutil.rmtree(d, ignore_errors=True)
    for b in bad:
        print("NOT CLEAN:", b, flush=True)
    print(f"signal_trials: {clean} of {a.trials} clean stops resumed bit-identically "
          f"({during_first} stopped after step 1); {len(bad)} not clean")
    sys.exit(0 if not bad else 1)


if __name__ == "__main__":
    main()
