#!/usr/bin/env python3
"""What a new user sees from `braid check` and `braid train` (issue 24): every mistake of a file in one pass
without cascades, `braid check RUN` refusing every run `braid train` refuses before its first step (malformed
data files above all) with the same message, `--init-from` taking every checkpoint form docs/checkpoints.md
names, and the exit-status rule (2: what you gave braid cannot work as given; 1: the machine failed while
carrying it out, e.g. a full disk).
Usage: diagnostics_test.py BRAID_BINARY SOURCE_DIR WORK_DIR"""
import gzip
import os
import shutil
import struct
import subprocess
import sys

braid, src, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")
results = []


def run(args):
    return subprocess.run([braid] + args, capture_output=True, text=True, timeout=300)


def case(name, ok, detail=""):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail[-1500:]))


def errors(stderr):
    return [l for l in stderr.splitlines() if ": error: " in l or l.startswith("error: ")]


# 1. Five mistakes in one model file: five errors in one run, each located, nothing cascaded.
five = os.path.join(src, "tests", "bad", "five_mistakes.yaml")
r = run(["check", five])
errs = errors(r.stderr)
case("five mistakes: exit 2 and exactly five located errors", r.returncode == 2 and len(errs) == 5
     and all(e.startswith(five + ":") for e in errs), r.stderr)
case("five mistakes: the block's error once, naming its copies",
     sum("unknown op 'gleu'" in e for e in errs) == 1 and "(in copies h.0..h.1)" in r.stderr, r.stderr)

# 2. `braid check RUN` refuses what `braid train` refuses before its first step, with the same message.
mlp = os.path.join(src, "tests", "bad", "support", "mlp.yaml")


def idx_images(n, rows=28, cols=28, magic=0x803, body=None):
    head = struct.pack(">IIII", magic, n, rows, cols)
    return head + (body if body is not None else bytes(n * rows * cols))


def idx_labels(values, magic=0x801, n=None):
    return struct.pack(">II", magic, len(values) if n is None else n) + bytes(values)


def write(name, data):
    p = os.path.join(work, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


good_images = write("good-images", idx_images(16))
good_labels = write("good-labels", idx_labels([k % 10 for k in range(16)]))
data_cases = {
    "idx images: bad magic": (idx_images(16, magic=0x1234), None),
    "idx images: truncated": (idx_images(16)[:-100], None),
    "idx images: 27x27 for an input of 784": (idx_images(16, 27, 27), None),
    "idx images: empty file": (b"", None),
    "idx images: not gzip after the gzip magic": (b"\x1f\x8b" + b"garbage" * 20, None),
    "idx images: fewer samples than a batch": (idx_images(4), idx_labels([1, 2, 3, 4])),
    "idx labels: count differs from the images": (None, idx_labels([1] * 15)),
    "idx labels: a label of 12 for 10 classes": (None, idx_labels([1] * 15 + [12])),
    "idx labels: text": (None, b"1,2,3\n" * 10),
    "idx labels: header claims more labels": (None, idx_labels([1] * 16, n=20)),
}
for k, (name, (images, labels)) in enumerate(data_cases.items()):
    im = write(f"images{k}", images) if images is not None else good_images
    lb = write(f"labels{k}", labels) if labels is not None else good_labels
    run_file = write(f"run{k}.yaml", f"""model: {mlp}
data: {{train: {{format: idx, images: {im}, labels: {lb}}}}}
train: {{batch: 8, steps: 1}}
optimizer: {{type: sgd, lr: 0.1}}
""".encode())
    c, t = run(["check", run_file]), run(["train", run_file, "--no-progress"])
    ec, et = errors(c.stderr), errors(t.stderr)
    case(f"check and train refuse alike: {name}", c.returncode == 2 and t.returncode == 2 and ec and ec == et,
         f"check {c.returncode}: {c.stderr}\ntrain {t.returncode}: {t.stderr}")

gz = write("good-images.gz", gzip.compress(idx_images(16)))
for name, spec in {
    "bytes: a file shorter than one window": "{format: bytes, path: %s, seq: 64}" % write("short.txt", b"abc"),
    "hdf5: not an HDF5 file": "{format: hdf5, path: %s, fields: {tokens: /x, targets: /y}}" % write("bad.h5", b"x" * 4096),
}.items():
    run_file = write(name.split(":")[0] + ".yaml", f"""model: {os.path.join(src, 'models', 'tiny_gpt.yaml')}
data: {{train: {spec}}}
train: {{batch: 2, steps: 1}}
optimizer: {{type: sgd, lr: 0.1}}
""".encode())
    c, t = run(["check", run_file]), run(["train", run_file, "--no-progress"])
    case(f"check and train refuse alike: {name}", c.returncode == 2 and t.returncode == 2 and errors(c.stderr)
         and errors(c.stderr) == errors(t.stderr), f"check {c.returncode}: {c.stderr}\ntrain {t.returncode}: {t.stderr}")

gpt_run = os.path.join(src, "configs", "tiny_gpt.yaml")
c = run(["check", gpt_run, "--set", "data.train.seq=32"])
t = run(["train", gpt_run, "--no-progress", "--set", "data.train.seq=32", "--set", "train.steps=1"])
case("check refuses windows of seq 32 for an input of [64], as train does",
     c.returncode == 2 and t.returncode == 2 and errors(c.stderr) == errors(t.stderr) and "32" in c.stderr, c.stderr + t.stderr)
bad_plan = ["--set", "devices=cpu:4", "--set", "train.batch=8", "--set",
            "parallel.plan=" + os.path.join(src, "tests", "bad_plans", "data_parallel_not_dividing.yaml")]
c = run(["check", gpt_run] + bad_plan)
t = run(["train", gpt_run, "--no-progress", "--set", "train.steps=1"] + bad_plan)
case("check validates the plan file against the graph, as train does",
     c.returncode == 2 and t.returncode == 2 and "does not split evenly" in c.stderr and errors(c.stderr) == errors(t.stderr),
     c.stderr + t.stderr)
c = run(["check", gpt_run, "--set", f"checkpoint.dir={good_images}/ckpt"])
t = run(["train", gpt_run, "--no-progress", "--set", f"checkpoint.dir={good_images}/ckpt", "--set", "train.steps=1"])
case("check and train refuse a checkpoint.dir inside a file (exit 2)",
     c.returncode == 2 and t.returncode == 2 and "is not a folder" in c.stderr and errors(c.stderr) == errors(t.stderr),
     c.stderr + t.stderr)

# 3. --init-from: a file, a checkpoint folder (its latest), a latest file, or the word latest.
small = write("small.yaml", f"""model: {os.path.join(src, 'models', 'tiny_gpt.yaml')}
vars: {{n_layer: 1, d: 16, seq: 8}}
data: {{train: {{format: synthetic, samples: 32}}}}
train: {{batch: 4, steps: 2}}
optimizer: {{type: adamw, lr: 1.0e-3}}
checkpoint: {{dir: {os.path.join(work, 'ckpt')}}}
""".encode())
r = run(["train", small, "--no-progress"])
case("a run that writes checkpoints", r.returncode == 0, r.stderr)
ck = os.path.join(work, "ckpt")
latest = os.path.join(ck, open(os.path.join(ck, "latest")).read().strip()) if os.path.exists(os.path.join(ck, "latest")) else ""
for form in (latest, ck, os.path.join(ck, "latest"), "latest"):
    into = ck if form == "latest" else os.path.join(work, "ckpt2")  # `latest`: the run's own checkpoint.dir
    r = run(["train", small, "--no-progress", "--init-from", form, "--set", "checkpoint.dir=" + into])
    label = form if form in ("latest", "") else os.path.relpath(form, work)
    case(f"--init-from {label or '(no checkpoint was written)'}", r.returncode == 0 and form != "", r.stderr)
no_ckpt = write("no_ckpt.yaml", open(small, "rb").read().split(b"checkpoint:")[0])
r = run(["train", no_ckpt, "--no-progress", "--init-from", "latest"])
case("--init-from latest without checkpoint.dir: exit 2 saying so",
     r.returncode == 2 and "--init-from latest needs checkpoint.dir" in r.stderr, r.stderr)

# 4. Exit status: a full disk is the machine's failure (1), not a mistake in the files (2).
r = run(["train", small, "--no-progress", "--set", "log.metrics=/dev/full", "--set", "checkpoint.dir=" + os.path.join(work, "ckpt3")])
case("a full disk while writing the metrics: exit 1 naming it",
     r.returncode == 1 and "No space left on device" in r.stderr and "/dev/full" in r.stderr, f"{r.returncode}: {r.stderr}")

# A save past the file-size limit (`ulimit -f`): braid ignores SIGXFSZ, so the write fails as on a full disk:
# exit 1 naming the checkpoint, no temporary left, the previous checkpoint and `latest` intact.
import resource
ck4 = os.path.join(work, "ckpt4")
r = run(["train", small, "--no-progress", "--set", "checkpoint.dir=" + ck4, "--set", "checkpoint.every_steps=1",
         "--set", "train.steps=1"])
first = os.path.join(ck4, "step_00000001.h5")
limit = os.path.getsize(first) // 2 if r.returncode == 0 else 1 << 20
r = subprocess.run([braid, "train", small, "--no-progress", "--set", "checkpoint.dir=" + ck4, "--set",
                    "checkpoint.every_steps=1", "--set", "train.steps=3", "--resume", first],
                   capture_output=True, text=True, timeout=300,
                   preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
left = sorted(f for f in os.listdir(ck4) if not f.startswith("metrics"))
case("a save past `ulimit -f`: exit 1 naming it, no temporary, the previous checkpoint intact",
     r.returncode == 1 and "File too large" in r.stderr and "step_00000002.h5" in r.stderr
     and left == ["latest", "step_00000001.h5"] and open(os.path.join(ck4, "latest")).read().strip() == "step_00000001.h5",
     f"exit {r.returncode}: {r.stderr} {left}")

print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
