#!/usr/bin/env python3
"""The CUDA backend as a module (exec/backend.h), in CUDA builds: braid links no CUDA library, maps none for
CPU work, trains on the CPU with the module and every CUDA library out of reach, and a cuda run loads the module
(or, when it cannot, says what is missing, exit 2). Prints the whole-process time and peak RSS of `braid check`.
Usage: cuda_module_test.py BRAID SOURCE_DIR WORK_DIR"""
import os
import resource
import subprocess
import sys
import time

braid, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
results = []
CUDA_LIBS = ("libcudart", "libcublas", "libcudnn", "libnccl", "libcuda.so")


def case(name, ok, detail=""):
    results.append(bool(ok))
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + str(detail)[-2000:]), flush=True)


def run(args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([braid] + args, capture_output=True, text=True, timeout=600, env=e)


module = os.path.join(os.path.dirname(os.path.abspath(braid)), "libbraid_cuda.so")
case("the module is built beside braid", os.path.isfile(module), module)
ldd = subprocess.run(["ldd", braid], capture_output=True, text=True).stdout
case("braid links no CUDA library", not any(l in ldd for l in CUDA_LIBS), ldd)

# CPU training with the module gone and no library path: trains.
tiny = ["--set", "vars.n_layer=1", "--set", "vars.d=32", "--set", "vars.seq=16", "--set", "data.train.seq=16",
        "--set", "data.eval.seq=16", "--set", "train.batch=8", "--set", "train.steps=3", "--set", "eval.batches=1",
        "--set", f"log.metrics={work}/m.jsonl", "--no-progress"]
cfg = os.path.join(src, "configs", "tiny_gpt.yaml")
gone = {"BRAID_CUDA_MODULE": os.path.join(work, "absent", "libbraid_cuda.so"), "LD_LIBRARY_PATH": ""}
r = run(["train", cfg] + tiny, gone)
case("CPU training with the CUDA module and libraries out of reach", r.returncode == 0 and "steps in" in r.stdout,
     r.stderr + r.stdout)
r = run(["train", cfg, "--set", "devices=cuda:0"] + tiny, gone)
case("a cuda run without the module: exit 2 naming it", r.returncode == 2 and "no module" in r.stderr
     and gone["BRAID_CUDA_MODULE"] in r.stderr, r.stderr)
bogus = os.path.join(work, "libbraid_cuda.so")
with open(bogus, "w") as f:
    f.write("not a shared object\n")
r = run(["train", cfg, "--set", "devices=cuda:0"] + tiny, {"BRAID_CUDA_MODULE": bogus})
case("a module that cannot load: exit 2 with the loader's reason", r.returncode == 2 and "cannot load the cuda backend"
     in r.stderr and bogus in r.stderr, r.stderr)
# With the module: loaded (every symbol resolved against braid), then a GPU or a clear 'no device'.
r = run(["train", cfg, "--set", "devices=cuda:0", "--set", "train.precision=bf16"] + tiny)
case("a cuda run loads the module: trains on a GPU, or says no CUDA device is visible",
     r.returncode == 0 or (r.returncode == 2 and ("CUDA device" in r.stderr or "cuda" in r.stderr.lower())
                           and "module" not in r.stderr), r.stderr + r.stdout[-500:])
r = run(["--version"])
case("--version names the backends", r.returncode == 0 and "cuda (module" in r.stdout, r.stdout + r.stderr)

# Whole-process figures of `braid check` (median of 7): no CUDA library is mapped for it.
times, rss = [], []
for _ in range(7):
    t0 = time.monotonic()
    p = subprocess.Popen([braid, "check", os.path.join(src, "models", "tiny_gpt.yaml")], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    times.append(time.monotonic() - t0)
    rss.append(ru.ru_maxrss / 1024)
times.sort()
rss.sort()
print(f"braid check models/tiny_gpt.yaml: {times[3] * 1e3:.0f} ms, peak RSS {rss[3]:.1f} MiB (median of 7)")
print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
