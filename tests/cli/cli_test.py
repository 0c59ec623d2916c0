#!/usr/bin/env python3
"""End-to-end tests of the braid command: check on every shipped model and config, ops listing, and
training that is bit-identical for the same run file and seed, with a metrics file and eval.
Usage: cli_test.py BRAID_BINARY SOURCE_DIR WORK_DIR"""
import csv
import json
import os
import shutil
import subprocess
import sys

braid, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
results = []
# No calibration profile of the user's (~/.cache/braid) may steer the plans these tests expect: an empty cache.
os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")


def run(args, **kw):
    return subprocess.run([braid] + args, capture_output=True, text=True, timeout=600, **kw)


def case(name, ok, detail=""):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))


for d in ("models", "configs", "models/bench", "configs/bench"):
    for f in sorted(os.listdir(os.path.join(src, d))):
        if not f.endswith(".yaml"):
            continue
        r = run(["check", os.path.join(src, d, f)])
        case(f"check {d}/{f}", r.returncode == 0 and "total:" in r.stdout, r.stderr + r.stdout[-500:])

r = run(["check", os.path.join(src, "models", "tiny_gpt.yaml"), "--dot", os.path.join(work, "g.dot"), "--batch", "4"])
case("check --dot", r.returncode == 0 and open(os.path.join(work, "g.dot")).read().startswith("digraph"), r.stderr)
r = run(["check", os.path.join(src, "models", "tiny_gpt.yaml"), "--set", "vars.n_layer=3"])
case("check --set vars", r.returncode == 0 and "h.2.res2" in r.stdout, r.stderr)
r = run(["check", os.path.join(src, "models", "tiny_gpt.yaml"), "--set", "vars.n_layr=3"])
case("check --set unknown var", r.returncode == 2 and "n_layer" in r.stderr, r.stderr)
r = run(["check", os.path.join(src, "configs", "fashion_mlp.yaml"), "--set", "train.steps=10"])
case("--set train.steps replaces the file's epochs", r.returncode == 0, r.stderr)
r = run(["ops"])
case("ops", r.returncode == 0 and "attention" in r.stdout and "conv2d" in r.stdout, r.stderr)

run_file = os.path.join(work, "synthetic_run.yaml")
with open(run_file, "w") as f:
    f.write(f"""model: {os.path.join(src, 'models', 'tiny_gpt.yaml')}
vars: {{n_layer: 1, d: 32, seq: 16, dropout: 0.1}}
data:
  train: {{format: synthetic, samples: 256}}
  eval: {{format: synthetic, samples: 64}}
train: {{batch: 8, micro_batch: 4, steps: 12, seed: 3}}
optimizer: {{type: adamw, lr: 1.0e-3, clip_grad_norm: 1.0}}
lr_schedule: {{type: cosine, warmup_steps: 3}}
log: {{every_steps: 1}}
""")
losses = []
for k in range(2):
    m = os.path.join(work, f"metrics{k}.jsonl")
    if os.path.exists(m):
        os.remove(m)
    r = run(["train", run_file, "--no-progress", "--set", f"log.metrics={m}"])
    ok = r.returncode == 0 and os.path.exists(m)
    case(f"train synthetic run {k}", ok, r.stderr + r.stdout[-1000:])
    if ok:
        recs = [json.loads(l) for l in open(m)]
        losses.append([x["loss"] for x in recs if "loss" in x])
        case(f"metrics file run {k}", len(losses[-1]) == 12 and any("eval_loss" in x for x in recs), str(recs[-2:]))
case("same seed, bit-identical losses", len(losses) == 2 and losses[0] == losses[1], str(losses))
# --trace on cpu:2: a lane per device with forward, backward, gradient all-reduce and optimizer events.
trace_run = os.path.join(work, "trace_run.yaml")
with open(trace_run, "w") as f:
    f.write(f"""model: {os.path.join(src, 'models', 'tiny_gpt.yaml')}
vars: {{n_layer: 1, d: 32, seq: 16}}
data: {{train: {{format: synthetic, samples: 128}}}}
train: {{batch: 8, micro_batch: 4, steps: 3, seed: 1}}
optimizer: {{type: adamw, lr: 1.0e-3}}
devices: cpu:2
""")
trace_file = os.path.join(work, "trace.json")
r = run(["train", trace_run, "--no-progress", "--trace", trace_file])
ok = r.returncode == 0 and os.path.exists(trace_file)
cats = set()
if ok:
    events = [e for e in json.load(open(trace_file))["traceEvents"] if e.get("ph") == "X"]
    cats = {(e["tid"], e["cat"]) for e in events}
want = {(d, c) for d in (0, 1) for c in ("forward", "backward", "collective", "optimizer")}
case("train --trace on cpu:2: lanes 0 and 1 with forward/backward/all-reduce/optimizer events", ok and want <= cats,
     r.stderr + str(sorted(cats)))
r = run(["train", os.path.join(src, "models", "tiny_gpt.yaml")])
case("train refuses a model file", r.returncode == 2, r.stderr)

# braid bench: one CSV row and one JSON row per run and sweep point, windows as asked.
csv_path, json_path = os.path.join(work, "bench.csv"), os.path.join(work, "bench.json")
r = run(["bench", run_file, "--steps", "4", "--warmup", "1", "--window", "2", "--sweep", "train.batch=4,8",
         "--csv", csv_path, "--json", json_path, "--peak-gflops", "100"])
ok = r.returncode == 0 and os.path.exists(csv_path) and os.path.exists(json_path)
case("bench with a sweep", ok, r.stderr + r.stdout[-1000:])
if ok:
    lines = open(csv_path).read().splitlines()
    case("bench CSV: header and one row per sweep point", len(lines) == 3 and lines[0].startswith("run,sweep,")
         and "train.batch=4" in lines[1] and "train.batch=8" in lines[2], "\n".join(lines))
    rows = json.load(open(json_path))["rows"]
    ok = (len(rows) == 2 and all(len(x["window_samples_per_s"]) == 2 and len(x["step_ms"]) == 4 for x in rows)
          and all(x["samples_per_s_min"] <= x["samples_per_s_median"] <= x["samples_per_s_max"] for x in rows)
          and rows[0]["tokens_per_sample"] == 16 and rows[0]["train_flops_per_step"] > 0
          and 0 < rows[0]["mfu"] and rows[0]["peak_rss_bytes"] > 0 and rows[1]["batch"] == 8)
    case("bench JSON: windows, steps, tokens, FLOPs, MFU, RSS", ok, json.dumps(rows)[:1000])
# Without --peak-gflops the peak is the cores' FMA throughput measured at start (x86 with AVX2 + FMA: CI's and
# ours), at least the nominal flags x cpu MHz figure's order; the header says which, and the OpenMP wait.
r = run(["bench", run_file, "--steps", "2", "--warmup", "1", "--window", "1", "--json", json_path])
ok = r.returncode == 0
case("bench without --peak-gflops", ok, r.stderr + r.stdout[-1000:])
if ok:
    peak = json.load(open(json_path))["peak"]
    import platform
    measured = platform.machine() != "x86_64" or peak["source"].startswith("measured:")
    case("bench: the peak is measured and positive, the OpenMP wait named",
         peak["gflops"] > 0 and measured and "OpenMP wait:" in r.stdout, json.dumps(peak) + r.stdout[:400])
# bench on cpu:N runs the data-parallel step; the CSV says so (devices, data_parallel columns).
r = run(["bench", run_file, "--steps", "2", "--warmup", "1", "--window", "1", "--sweep", "devices=cpu,cpu:2",
         "--csv", csv_path, "--peak-gflops", "100"])
ok = r.returncode == 0
case("bench --sweep devices=cpu,cpu:2 (data parallel)", ok, r.stderr + r.stdout[-1000:])
if ok:
    rows = list(csv.DictReader(open(csv_path)))
    case("bench CSV: devices and data_parallel columns",
         [(x["devices"], x["data_parallel"]) for x in rows] == [("cpu", "1"), ("cpu:2", "2")]
         and all(float(x["samples_per_s_median"]) > 0 for x in rows), str(rows))
r = run(["bench", run_file, "--sweep", "train.batch"])
case("bench --sweep without values is a user error", r.returncode == 2 and "--sweep" in r.stderr, r.stderr)
r = run(["bench", os.path.join(src, "models", "tiny_gpt.yaml"), "--steps", "1"])
case("bench refuses a model file", r.returncode == 2, r.stderr)

# braid time: every layer in model order with forward and backward times, and the step's other phases.
r = run(["time", run_file, "--steps", "2", "--warmup", "1"])
names = [l.split()[0] for l in r.stdout.splitlines()[2:] if l.strip()]
ok = r.returncode == 0 and names[:3] == ["tok", "pos", "h.0.ln1"] and "loss" in names
ok = ok and all(k in names for k in ("layers", "data", "clip", "step"))
case("time: per-layer table", ok, r.stderr + r.stdout)
by_op = r.stdout.split("by op (forward and backward ops apart), the most first:")[-1].strip().splitlines()
ms = [float(l.split()[1]) for l in by_op if len(l.split()) >= 3 and l.split()[2] == "ms"]
case("time: the ops summed by kind, the most first",
     "by op (forward" in r.stdout and any(l.split()[0] == "attention" for l in by_op) and len(ms) >= 5
     and ms == sorted(ms, reverse=True), r.stdout[-1500:])

# devices: cuda. Without a GPU (CI, this machine) or in a build without CUDA: a user error naming the devices and the
# reason, exit status 2, nothing written; with a visible GPU it trains and says where.
cuda_metrics = os.path.join(work, "cuda_metrics.jsonl")
r = run(["train", run_file, "--no-progress", "--set", "devices=cuda:0", "--set", "train.steps=2",
         "--set", f"log.metrics={cuda_metrics}"])
if r.returncode == 0:
    case("train on cuda:0 (a GPU is visible)", "training on cuda:0" in r.stdout, r.stdout[-1000:])
else:
    case("train on cuda:0 without a GPU or a CUDA build: exit 2 naming the devices, nothing written",
         r.returncode == 2 and "devices cuda:0" in r.stderr
         and ("no CUDA device is visible" in r.stderr or "has no cuda backend" in r.stderr)
         and not os.path.exists(cuda_metrics), r.stderr + r.stdout[-500:])
# braid plan --explain: the chosen shape, what bound it, the busiest stage's shares and tail, the pure strategies
# beside the chosen one, and for every layer not replicated its runner-up and the step time it would give.
tiny_gpt_run = os.path.join(src, "configs", "tiny_gpt.yaml")
plan_out = os.path.join(work, "explained_plan.yaml")
r = run(["plan", tiny_gpt_run, "--devices", "cpu:4", "--explain", "--out", plan_out])
pure = [l for l in r.stdout.splitlines() if l.strip().startswith(("all data parallel", "all tensor parallel", "all pipeline"))]
case("plan --explain: chosen, bound, shares, tail, three pure strategies with their times, the plan file written",
     r.returncode == 0 and "chosen: dp" in r.stdout and "bound by" in r.stdout and "busiest stage: compute" in r.stdout
     and "after the last backward: gradient sync" in r.stdout and len(pure) == 3 and all(" ms" in l for l in pure)
     and os.path.exists(plan_out), r.stdout[-2000:] + r.stderr)
pins = os.path.join(work, "tp2_pins.yaml")
with open(pins, "w") as f:
    f.write("summary: {devices: 2, data_parallel: 1, tensor_parallel: 2, pipeline_stages: 1, virtual_stages: 1, "
            "micro_batch: 32, micro_batches: 1, schedule: 1f1b}\nstages: []\nlayers: []\n")
r = run(["plan", tiny_gpt_run, "--devices", "cpu:2", "--set", f"parallel.plan={pins}", "--explain",
         "--out", os.path.join(work, "tp2_plan.yaml")])
rows = r.stdout.split("layers not replicated")[-1].strip().splitlines()[1:] if "layers not replicated" in r.stdout else []
case("plan --explain with tensor_parallel 2 pinned: every split layer with its runner-up and step-time difference",
     r.returncode == 0 and len(rows) >= 10 and all(len(l.split()) >= 4 and l.split()[-1] in ("ms", "memory")
                                                    or l.split()[-1].endswith("ms") for l in rows),
     r.stdout[-2000:] + r.stderr)

# Feeding a run back: calibrate (short), train under plan auto on cpu:2 with a metrics file, fit the profile's
# feedback from its closed-loop record, and plan with it; in a cache of its own (the other cases expect none).
fb_env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "feedback_cache"))
shutil.rmtree(fb_env["XDG_CACHE_HOME"], ignore_errors=True)
fb_metrics = os.path.join(work, "feedback_metrics.jsonl")
if os.path.exists(fb_metrics):
    os.remove(fb_metrics)
r = run(["calibrate", "--devices", "cpu:2", "--from-run", fb_metrics], env=fb_env)
case("calibrate --from-run without a profile: exit 2, says to calibrate first",
     r.returncode == 2 and "no calibration profile" in r.stderr and "braid calibrate --devices cpu:2" in r.stderr, r.stderr)
r = run(["calibrate", "--devices", "cpu:2", "--budget", "0.5"], env=fb_env)
ok = r.returncode == 0
mlp_sets = ["--set", "vars.hidden1=128", "--set", "vars.hidden2=128", "--set", "train.batch=64", "--set", "devices=cpu:2",
            "--set", "parallel.plan=auto"]
mlp_run = os.path.join(src, "configs", "bench", "mlp.yaml")
r = run(["train", mlp_run, "--no-progress", "--set", "train.steps=14", "--set", f"log.metrics={fb_metrics}"] + mlp_sets,
        env=fb_env) if ok else r
recs = [json.loads(l) for l in open(fb_metrics)] if ok and os.path.exists(fb_metrics) else []
loop = [x for x in recs if "predicted_step_s" in x]
case("train under plan auto: the closed-loop record with devices, tail and the model's scales",
     r.returncode == 0 and len(loop) == 1 and loop[0]["devices"] == 2 and loop[0]["busy_scale"] == 1
     and loop[0]["predicted_tail_s"] > 0 and loop[0]["measured_busy_s_0"] > 0, r.stderr[-1000:] + r.stdout[-1000:])
r = run(["calibrate", "--devices", "cpu:2", "--from-run", fb_metrics, "--print"], env=fb_env)
case("calibrate --from-run: fits the feedback for cpu:2 and writes it into the profile",
     r.returncode == 0 and "1 closed-loop record(s) of cpu:2 runs fitted: busy x" in r.stdout
     and "- {devices: 2, records: 1, busy_scale: " in r.stdout, r.stdout[-1500:] + r.stderr)
r = run(["plan", mlp_run, "--explain", "--out", os.path.join(work, "fed_back_plan.yaml")] + mlp_sets, env=fb_env)
case("plan after feeding a run back: the cost model says so", r.returncode == 0 and "1 run record(s) fed back" in r.stdout,
     r.stdout[-1500:] + r.stderr)
r = run(["calibrate", "--devices", "cpu:4", "--from-run", fb_metrics], env=fb_env)
case("calibrate --from-run with no record of that device count: exit 2",
     r.returncode == 2 and "no closed-loop record of a cpu:4 run" in r.stderr, r.stderr)

# precision on a CPU run: trained in f32, and said so (a run file written for a GPU may be tried on a CPU).
r = run(["train", run_file, "--no-progress", "--set", "devices=cpu", "--set", "train.precision=bf16",
         "--set", "train.steps=2"])
case("train.precision bf16 on cpu: trains in f32 with a warning naming the setting",
     r.returncode == 0 and "train.precision bf16" in r.stderr and "train in f32" in r.stderr, r.stderr[-1000:])
r = run(["bench", run_file, "--set", "devices=cuda:0", "--steps", "2", "--warmup", "1"])
if r.returncode == 0:
    case("bench on cuda:0 (a GPU is visible): the device and its MFU peak", "on cuda:0" in r.stdout, r.stdout[-1000:])
else:
    case("bench on cuda:0 without a GPU or a CUDA build: exit 2 naming the devices (never CPU figures)",
         r.returncode == 2 and "devices cuda:0" in r.stderr, r.stderr + r.stdout[-500:])
r = run(["time", run_file, "--set", "devices=cuda:0", "--steps", "2", "--warmup", "1"])
if r.returncode == 0:
    case("time on cuda:0 (a GPU is visible): the layers and the ops by kind",
         "by op (forward" in r.stdout and "on cuda:0" in r.stdout, r.stdout[-1000:])
else:
    case("time on cuda:0 without a GPU or a CUDA build: exit 2 naming the devices",
         r.returncode == 2 and "cuda:0" in r.stderr, r.stderr)
# Several GPUs train under the planner's plan; without four GPUs (CI, this machine) or a CUDA build: a user error naming them.
r = run(["train", run_file, "--no-progress", "--set", "devices=cuda:0-3", "--set", "train.steps=2"])
if r.returncode == 0:
    case("train on cuda:0-3 (four GPUs visible): the planner's plan", "training on cuda:0,1,2,3" in r.stdout, r.stdout[-1000:])
else:
    case("train on cuda:0-3 without four GPUs or a CUDA build: exit 2 naming the devices",
         r.returncode == 2 and "devices cuda:0-3" in r.stderr
         and any(m in r.stderr for m in ("no CUDA device is visible", "there is no CUDA device",
                                          "has no cuda backend")), r.stderr)

# Messages that must not mislead (issue 24, item 10).
r = run(["frobnicate"])
case("an unknown command is named, with the commands", r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr
     and "train" in r.stderr, r.stderr)
r = run(["trian", run_file])
case("a misspelt command gets a did-you-mean", r.returncode == 2 and "did you mean 'train'" in r.stderr, r.stderr)
m = os.path.join(work, "kinds.jsonl")
r = run(["train", run_file, "--no-progress", "--set", "devices=cpu:2", "--set", "train.steps=3", "--set",
         f"log.metrics={m}"])
banner = next((l for l in r.stdout.splitlines() if l.startswith("braid: training ")), "")
plan_line = next((l for l in r.stdout.splitlines() if l.startswith("braid: plan ")), "")
case("under a plan the banner gives the plan's micro-batching, as the plan line does",
     r.returncode == 0 and "replica(s) x" in banner and "micro-batch" in plan_line, r.stdout[-1500:] + r.stderr)
kinds = set()
ok = r.returncode == 0
for line in open(m) if os.path.exists(m) else []:
    rec = json.loads(line)
    kinds.add(rec.get("kind"))
    ok = ok and (rec.get("kind") != "train" or "loss" in rec) and (rec.get("kind") != "prediction" or "predicted_step_s" in rec)
case("every metrics record has its kind (train, eval, prediction)", ok and {"train", "eval", "prediction"} <= kinds,
     str(kinds))
r = run(["calibrate", "--help"])
case("calibrate --help says the budget bounds the op measurements only",
     r.returncode == 0 and "seconds for the op measurements" in r.stdout and "a minute more" in r.stdout, r.stdout)
quoted = os.path.join(work, "quoted_bool.yaml")
with open(os.path.join(src, "models", "tiny_gpt.yaml")) as f:
    open(quoted, "w").write(f.read().replace("causal: true", 'causal: "yes please"'))
r = run(["check", quoted])
case("a quoted non-boolean is not told to remove its quotes", r.returncode == 2 and "remove the quotes" not in r.stderr
     and "true or false" in r.stderr, r.stderr)

print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
