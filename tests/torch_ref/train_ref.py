#!/usr/bin/python3
# Acceptance test "single-device training equals PyTorch": trains a run file's model for a few steps with braid
# (on generated data, dropout off) and again with PyTorch from the same initial weights (braid's
# --save-init HDF5 file), then checks |braid - torch| <= rtol * |torch| for every step's loss.
# The torch side is built generically from `braid check --json` (layers in topological order, complete
# attrs, parameter names) with the per-op references of ops/*.py; there is no per-model torch code.
# It does not compare weights, gradients or metrics, and never runs with dropout or shuffling on.
# Usage: train_ref.py --braid BRAID --run RUN.yaml --workdir DIR [--steps 20] [--batch B] [--set k=v ...]
#        (exit 0: every step matches; 1: a mismatch or an error; 77: torch/h5py/numpy/yaml unavailable)
import argparse
import ast
import json
import math
import os
import subprocess
import sys

try:
    import h5py
    import numpy as np
    import torch
    import yaml
except Exception as e:  # CTest turns 77 into a visible skip (SKIP_RETURN_CODE)
    print(f"train_ref: cannot import torch/h5py/numpy/yaml: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import op_ref  # noqa: E402  (load_references, as_list: one way of importing ops/*.py)


class Failure(Exception):
    """An error that ends the test with status 1 and a one-paragraph message."""


# ---- numbers in run files ---------------------------------------------------------------------------------
# Plain YAML numbers, strings PyYAML leaves unparsed ("1e-3": YAML 1.1 floats need a dot), or braid's
# expressions over vars (+ - * / // % ( ) min max ceil).

_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_FUNCS = {"min": min, "max": max, "ceil": math.ceil}


def number(value, env, what):
    """value: a YAML scalar; env: name -> raw YAML value of a var (evaluated on demand)."""
    if isinstance(value, bool):
        raise Failure(f"{what}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        raise Failure(f"{what}: expected a number, got {value!r}")
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        pass

    def ev(node, depth):
        if depth > 50:
            raise Failure(f"{what}: vars refer to each other in a cycle")
        if isinstance(node, ast.Expression):
            return ev(node.body, depth)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand, depth)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left, depth), ev(node.right, depth))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                and not node.keywords):
            return _FUNCS[node.func.id](*[ev(a, depth) for a in node.args])
        if isinstance(node, ast.Name) and node.id in env:
            raw = env[node.id]
            if isinstance(raw, str):
                return ev(ast.parse(raw, mode="eval"), depth + 1)
            return number(raw, env, f"var '{node.id}'")
        raise Failure(f"{what}: cannot evaluate {value!r}")

    try:
        return ev(ast.parse(value, mode="eval"), 0)
    except SyntaxError:
        raise Failure(f"{what}: cannot evaluate {value!r}") from None


# ---- the run file ------------------------------------------------------------------------------------------

def load_yaml(path):
    try:
        with open(path) as f:
            doc = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise Failure(f"cannot read {path}: {e}") from None
    if not isinstance(doc, dict):
        raise Failure(f"{path}: expected a mapping at the top level")
    return doc


def plain_numbers(node):
    """Numbers PyYAML left as strings ("1e-3") become numbers again, so run.yaml does not quote them."""
    if isinstance(node, dict):
        return {k: plain_numbers(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain_numbers(v) for v in node]
    if isinstance(node, str):
        for conv in (int, float):
            try:
                return conv(node)
            except ValueError:
                pass
    return node


def apply_set(doc, kv):
    """--set a.b.c=v on a YAML tree, the value parsed as YAML (as braid does)."""
    if "=" not in kv:
        raise Failure(f"--set {kv!r}: expected key=value")
    key, text = kv.split("=", 1)
    parts = key.split(".")
    node = doc
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = yaml.safe_load(text) if text else ""


class Settings:
    """The optimizer, schedule and clipping of a run file, with braid's defaults applied."""

    def __init__(self, run, env):
        opt = dict(run.get("optimizer") or {})
        sched = dict(run.get("lr_schedule") or {})
        self.type = opt.get("type")
        if self.type not in ("sgd", "adamw"):
            raise Failure(f"optimizer.type: expected sgd or adamw, got {self.type!r}")
        if "lr" not in opt:
            raise Failure("optimizer.lr is required")

        def num(section, d, key, default):
            return float(number(d[key], env, f"{section}.{key}")) if key in d else default

        self.lr = num("optimizer", opt, "lr", None)
        if self.type == "sgd":
            self.momentum = num("optimizer", opt, "momentum", 0.0)
            self.dampening = num("optimizer", opt, "dampening", 0.0)
            self.nesterov = bool(opt.get("nesterov", False))
            self.weight_decay = num("optimizer", opt, "weight_decay", 0.0)
        else:
            betas = opt.get("betas", [0.9, 0.999])
            if not isinstance(betas, list) or len(betas) != 2:
                raise Failure(f"optimizer.betas: expected two numbers, got {betas!r}")
            self.betas = tuple(float(number(b, env, "optimizer.betas")) for b in betas)
            self.eps = num("optimizer", opt, "eps", 1e-8)
            self.weight_decay = num("optimizer", opt, "weight_decay", 0.01)
        self.clip = num("optimizer", opt, "clip_grad_norm", None)
        self.sched = sched.get("type", "constant")
        if self.sched not in ("constant", "step", "cosine"):
            raise Failure(f"lr_schedule.type: expected constant, step or cosine, got {self.sched!r}")
        self.step_size = int(num("lr_schedule", sched, "step_size", 1))
        self.gamma = num("lr_schedule", sched, "gamma", 0.1)
        self.warmup = int(num("lr_schedule", sched, "warmup_steps", 0))
        self.min_lr = num("lr_schedule", sched, "min_lr", 0.0)

    def lr_at(self, s, total):
        """braid's exec::lr_at: s is the 0-based step, total the number of steps."""
        if self.sched == "step":
            return self.lr * self.gamma ** (s // max(1, self.step_size))
        if self.sched == "cosine":
            if s < self.warmup:
                return self.lr * (s + 1) / self.warmup
            p = min(1.0, (s - self.warmup) / max(1, total - self.warmup))
            return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * p))
        return self.lr

    def describe(self):
        if self.type == "sgd":
            o = (f"sgd lr {self.lr:g} momentum {self.momentum:g} dampening {self.dampening:g} "
                 f"nesterov {self.nesterov} weight_decay {self.weight_decay:g}")
        else:
            o = f"adamw lr {self.lr:g} betas {self.betas} eps {self.eps:g} weight_decay {self.weight_decay:g}"
        if self.clip is not None:
            o += f" clip_grad_norm {self.clip:g}"
        s = {"constant": "constant", "step": f"step (step_size {self.step_size}, gamma {self.gamma:g})",
             "cosine": f"cosine (warmup_steps {self.warmup}, min_lr {self.min_lr:g})"}[self.sched]
        return f"{o}; lr_schedule {s}"

    def make(self, params):
        if self.type == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, dampening=self.dampening,
                                   weight_decay=self.weight_decay, nesterov=self.nesterov)
        return torch.optim.AdamW(params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)


# ---- running braid -----------------------------------------------------------------------------------------

def run_braid(cmd, what, timeout=540):
    print("+ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise Failure(f"{what}: cannot run {cmd[0]}") from None
    except subprocess.TimeoutExpired:
        raise Failure(f"{what}: no answer within {timeout} s") from None
    if p.returncode != 0:
        raise Failure(f"{what} exited with status {p.returncode}\n--- stdout\n{p.stdout.rstrip()}\n"
                      f"--- stderr\n{p.stderr.rstrip()}")
    return p.stdout


# ---- data --------------------------------------------------------------------------------------------------

_NP_DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}


def make_data(path, inputs, n, seed=1234):
    """One dataset per model input, [n, per-sample...]; returns name -> numpy array (what the file holds).
    Floats: uniform [0, 1) for image-like inputs (per-sample rank >= 2 or a name with 'image'/'img'),
    standard normal otherwise. Integers: uniform in [0, int_bound)."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in inputs:
        name, dtype, per_sample = inp["name"], inp["dtype"], list(inp["shape"][1:])
        if dtype not in _NP_DTYPES:
            raise Failure(f"input '{name}' has dtype {dtype}, which this test does not compare (f32, f64, i32, i64)")
        shape = [n] + per_sample
        if dtype.startswith("i"):
            bound = int(inp.get("int_bound") or 0)
            if bound <= 0:
                bound = 2
                print(f"note: integer input '{name}' has no bound from its consumers; drawing from [0, 2)")
            a = rng.integers(0, bound, size=shape)
        elif len(per_sample) >= 2 or "image" in name.lower() or "img" in name.lower():
            a = rng.random(size=shape)
        else:
            a = rng.standard_normal(size=shape)
        out[name] = a.astype(_NP_DTYPES[dtype])
    with h5py.File(path, "w") as f:
        for name, a in out.items():
            f.create_dataset(name, data=a)
    return out


def read_idx(path):
    """An IDX file (gzip or not) as a numpy array of its element type."""
    import gzip
    import struct
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def real_idx_data(run, run_path, inputs, n):
    """The first n samples of the run's own idx training data (images scaled to [0, 1], labels), bound to
    the model inputs in order, or None when the run does not use idx files that exist here. Real images
    keep the comparison away from the chaotic regime of training on noise with random labels."""
    train = ((run.get("data") or {}).get("train")) or {}
    if train.get("format") != "idx":
        return None
    base = os.path.dirname(os.path.abspath(run_path))
    paths = [os.path.join(base, str(train.get(k, ""))) for k in ("images", "labels")]
    if not all(os.path.isfile(p) for p in paths) or len(inputs) != 2:
        return None
    images = read_idx(paths[0])[:n].astype(np.float32) / 255.0
    labels = read_idx(paths[1])[:n]
    img_in, lab_in = inputs
    return {img_in["name"]: images.reshape([n] + list(img_in["shape"][1:])).astype(_NP_DTYPES[img_in["dtype"]]),
            lab_in["name"]: labels.astype(_NP_DTYPES[lab_in["dtype"]])}


def read_group(f, group):
    """name -> numpy array for every dataset under /group (names relative to it; nested groups joined by '.')."""
    out = {}
    if group not in f:
        return out

    def visit(rel, obj):
        if isinstance(obj, h5py.Dataset):
            out[rel.replace("/", ".")] = obj[()]

    f[group].visititems(visit)
    return out


def read_metrics(path):
    """step -> record, for lines with a loss."""
    out = {}
    try:
        with open(path) as f:
            for k, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise Failure(f"{path}:{k}: not JSON: {e}") from None
                if "loss" in rec and "step" in rec:
                    out[int(rec["step"])] = rec
    except OSError as e:
        raise Failure(f"cannot read braid's metrics: {e}") from None
    return out


# ---- the torch model ---------------------------------------------------------------------------------------

class TorchModel:
    """The layers of `braid check --json` that the loss depends on, evaluated with the ops/*.py references."""

    def __init__(self, graph, init_path, ops_dir, dtype=torch.float32):
        self.loss_name = graph["outputs"][0]
        try:
            self.layers = op_ref.layers_for_loss(graph)
        except ValueError as e:
            raise Failure(str(e)) from None

        for l in self.layers:  # dropout must be off, or the losses cannot agree
            a = l["attrs"]
            if (l["op"] == "dropout" and a.get("p", 0) != 0) or a.get("dropout", 0) != 0:
                raise Failure(f"layer '{l['name']}' ({l['op']}) has dropout on ({a}); "
                              "set it to 0 (the model's var `dropout` or --set)")

        ops, _, _, problems = op_ref.load_references(ops_dir)
        missing = sorted({l["op"] for l in self.layers if l["op"] not in ops})
        if missing:
            raise Failure("no PyTorch reference for op(s) " + ", ".join(missing) + f" in {ops_dir}"
                          + "".join("\n  " + p.replace("\n", "\n  ") for p in problems))
        self.fns = {l["name"]: ops[l["op"]] for l in self.layers}

        with h5py.File(init_path, "r") as f:
            params, buffers = read_group(f, "params"), read_group(f, "buffers")
        self.params, self.buffers = {}, {}
        for l in self.layers:
            for name in l["params"]:
                if name in params:
                    t = torch.from_numpy(np.ascontiguousarray(params[name]))
                    self.params[name] = (t.to(dtype) if t.is_floating_point() else t).requires_grad_(True)
                elif name in buffers:
                    t = torch.from_numpy(np.ascontiguousarray(buffers[name]))
                    self.buffers[name] = t.to(dtype) if t.is_floating_point() else t
                else:
                    raise Failure(f"{init_path} has neither /params/{name} nor /buffers/{name} "
                                  f"(parameter of layer '{l['name']}')")
        unused = sorted(set(params) - set(self.params))
        if unused:
            print(f"note: parameters in {init_path} that the loss does not use: {', '.join(unused)}")

    def param_list(self):
        return list(self.params.values())  # layer order, then each op's parameter order

    def loss(self, batch):
        """batch: model input name -> tensor. Forward in training mode; returns the scalar loss."""
        values = dict(batch)
        for l in self.layers:
            xs = [values[s] for s in l["from"]]
            xs += [self.params[p] if p in self.params else self.buffers[p] for p in l["params"]]
            outs = op_ref.as_list(self.fns[l["name"]](l["attrs"], xs, True))
            if not outs:
                raise Failure(f"the reference of '{l['op']}' returned no output (layer '{l['name']}')")
            values[l["name"]] = outs[0]
        loss = values[self.loss_name]
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            raise Failure(f"the loss '{self.loss_name}' is not a scalar that requires grad: {loss!r}")
        return loss.reshape(())


def relerr(a, ref):
    return abs(a - ref) / abs(ref) if ref != 0 else (0.0 if a == ref else math.inf)


def to_torch(a, dtype=torch.float32):
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.to(torch.int64) if not t.is_floating_point() else t.to(dtype)


# ---- main --------------------------------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description="single-device training: braid vs PyTorch, loss per step")
    ap.add_argument("--braid", required=True, help="the braid binary")
    ap.add_argument("--run", required=True, help="run file (its model, optimizer and lr_schedule are used)")
    ap.add_argument("--workdir", required=True, help="where data.h5, run.yaml, init.h5, metrics.jsonl go")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=0, help="default: the run file's train.batch")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                    help="override a value of the run file (braid's --set syntax); repeatable")
    ap.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance per step loss")
    ap.add_argument("--ops-dir", default=os.path.join(HERE, "ops"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv[1:])

    torch.manual_seed(0)
    torch.set_num_threads(1)
    run_path = os.path.abspath(args.run)
    work = os.path.abspath(args.workdir)
    os.makedirs(work, exist_ok=True)

    # 1. The run file, with the overrides; the model's vars (for `dropout` and for expressions).
    run = load_yaml(run_path)
    for kv in args.sets:
        apply_set(run, kv)
    if "model" not in run:
        raise Failure(f"{run_path}: no `model:`")
    model_path = os.path.normpath(os.path.join(os.path.dirname(run_path), str(run["model"])))
    model = load_yaml(model_path)
    env = dict(model.get("vars") or {})
    env.update(run.get("vars") or {})
    has_dropout_var = "dropout" in (model.get("vars") or {})
    settings = Settings(run, env)
    batch = args.batch or int(number((run.get("train") or {}).get("batch", 0), env, "train.batch"))
    steps = args.steps
    if batch <= 0 or steps <= 0:
        raise Failure(f"batch ({batch}) and steps ({steps}) must be positive")
    print(f"model {model_path}; batch {batch}, {steps} steps; {settings.describe()}")

    # 2. The layer list.
    sets = list(args.sets) + (["vars.dropout=0"] if has_dropout_var else [])
    cmd = [args.braid, "check", run_path, "--json", "--batch", str(batch)]
    for kv in sets:
        cmd += ["--set", kv]
    out = run_braid(cmd, "braid check")
    try:
        graph = json.loads(out)
    except json.JSONDecodeError as e:
        raise Failure(f"braid check --json printed no JSON ({e}):\n{out}") from None
    with open(os.path.join(work, "graph.json"), "w") as f:
        json.dump(graph, f, indent=1)
    if graph.get("batch") != batch:
        raise Failure(f"braid check --json reports batch {graph.get('batch')}, asked for {batch}")

    # 3. Data: steps * batch samples, read in order.
    data_path = os.path.join(work, "data.h5")
    data = real_idx_data(run, run_path, graph["inputs"], steps * batch)
    if data is None:
        data = make_data(data_path, graph["inputs"], steps * batch)
    else:
        print(f"data: the first {steps * batch} samples of the run's own training set")
        with h5py.File(data_path, "w") as f:
            for name, a in data.items():
                f.create_dataset(name, data=a)

    # 4. braid's run: the same model and optimizer on that data.
    metrics_path = os.path.join(work, "metrics.jsonl")
    init_path = os.path.join(work, "init.h5")
    for p in (metrics_path, init_path):
        if os.path.exists(p):
            os.remove(p)
    vars_ = dict(run.get("vars") or {})
    if has_dropout_var:
        vars_["dropout"] = 0
    new_run = {"model": model_path}
    if vars_:
        new_run["vars"] = vars_
    new_run["data"] = {"train": {"format": "hdf5", "path": data_path,
                                 "fields": {i["name"]: "/" + i["name"] for i in graph["inputs"]}},
                       "shuffle": False}
    new_run["train"] = {"batch": batch, "steps": steps, "seed": 1}
    new_run["optimizer"] = plain_numbers(run["optimizer"])
    if "lr_schedule" in run:
        new_run["lr_schedule"] = plain_numbers(run["lr_schedule"])
    new_run["log"] = {"every_steps": 1, "metrics": metrics_path}
    new_run_path = os.path.join(work, "run.yaml")
    with open(new_run_path, "w") as f:
        f.write(f"# written by {os.path.basename(__file__)} from {run_path}\n")
        yaml.safe_dump(new_run, f, sort_keys=False, default_flow_style=None)
    run_braid([args.braid, "train", new_run_path, "--save-init", init_path, "--no-progress"], "braid train")
    braid_metrics = read_metrics(metrics_path)

    # 5. torch: the same start, batches and updates, in float32 (the reference) and float64 (the exact run,
    #    to measure how far float32 rounding alone carries a run: past a few steps, training with batch norm
    #    amplifies 1e-7 rounding differences, and PyTorch's own fp32 run departs from its fp64 run).
    def train_torch(dtype):
        net = TorchModel(graph, init_path, args.ops_dir, dtype)
        params = net.param_list()
        opt = settings.make(params)
        losses, norms_ = [], []
        for s in range(steps):
            for g in opt.param_groups:
                g["lr"] = settings.lr_at(s, steps)
            b = {name: to_torch(a[s * batch:(s + 1) * batch], dtype) for name, a in data.items()}
            opt.zero_grad(set_to_none=True)
            loss = net.loss(b)
            loss.backward()
            if settings.clip is not None:
                norms_.append(float(torch.nn.utils.clip_grad_norm_(params, settings.clip)))
            opt.step()
            losses.append(float(loss.detach()))
        return net, params, losses, norms_

    net, params, torch_losses, norms = train_torch(torch.float32)
    print(f"torch: {len(net.layers)} layers, {len(params)} parameter tensors "
          f"({sum(p.numel() for p in params)} values), {len(net.buffers)} buffers")
    _, _, exact_losses, _ = train_torch(torch.float64)
    lrs = [settings.lr_at(s, steps) for s in range(steps)]

    # 6. Compare: the loss of every step; also the gradient norm where braid logs it (clip_grad_norm set),
    # which checks all gradients at once. braid's lr is only reported when it differs (its losses would too).
    passed = failed = 0
    clipped = 0
    noise_floor_used = 0
    print("columns: braid's loss, PyTorch fp32's, their relative difference, braid vs the exact (fp64) run, "
          "PyTorch fp32 vs the exact run")
    print(f"{'step':>4}  {'braid loss':>14}  {'torch loss':>14}  {'rel err':>9}  {'vs fp64':>9}  {'torch fp32':>9}  {'lr':>11}"
          + (f"  {'grad norm':>10}  {'rel err':>9}" if norms else ""))
    for s in range(steps):
        t = torch_losses[s]
        rec = braid_metrics.get(s + 1)
        if rec is None:
            print(f"{s + 1:>4}  {'(missing)':>14}  {t:>14.8g}  {'':>9}  {lrs[s]:>11.5g}  FAIL")
            failed += 1
            continue
        bl = float(rec["loss"])
        e = exact_losses[s]
        # Within rtol of PyTorch's fp32 run; or, where PyTorch's own fp32 run is already further than rtol
        # from the exact (fp64) run, no further from the exact run than twice PyTorch's own distance.
        torch_noise = relerr(t, e)
        ok = math.isfinite(bl) and (abs(bl - t) <= args.rtol * abs(t) or
                                    (torch_noise > args.rtol / 2 and relerr(bl, e) <= 2 * torch_noise))
        noise_floor_used += ok and abs(bl - t) > args.rtol * abs(t)
        line = (f"{s + 1:>4}  {bl:>14.8g}  {t:>14.8g}  {relerr(bl, t):>9.2e}  {relerr(bl, e):>9.2e}  "
                f"{torch_noise:>9.2e}  {lrs[s]:>11.5g}")
        if norms:
            clipped += norms[s] > settings.clip
            if "grad_norm" in rec:
                bn = float(rec["grad_norm"])
                ok &= math.isfinite(bn) and abs(bn - norms[s]) <= args.rtol * abs(norms[s])
                line += f"  {norms[s]:>10.5g}  {relerr(bn, norms[s]):>9.2e}"
            else:
                line += f"  {norms[s]:>10.5g}  {'(none)':>9}"
        line += "  OK" if ok else "  FAIL"
        if "lr" in rec and not math.isclose(float(rec["lr"]), lrs[s], rel_tol=1e-5, abs_tol=1e-12):
            line += f"  (braid's lr {float(rec['lr']):.8g})"
        print(line)
        passed += ok
        failed += not ok
    if norms:
        print(f"clip_grad_norm {settings.clip:g} was active at {clipped} of {steps} steps")
    if noise_floor_used:
        print(f"{noise_floor_used} step(s) passed on the float32 noise floor: PyTorch's own fp32 run was more than "
              f"{args.rtol / 2:g} from the exact run there, and braid was within twice that distance of it")
    print(f"{passed} passed, {failed} failed (rtol {args.rtol:g})")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Failure as e:
        print(f"train_ref: FAIL: {e}")
        sys.exit(1)
