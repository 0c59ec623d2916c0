#!/usr/bin/python3
# Compares braid's ops with PyTorch: reads the manifest.json and .npy files that tests/ops/torch_ref_test.cpp
# dumped (inputs, forward outputs in training and eval mode, dy, braid's input gradients), recomputes them
# with the references in tests/torch_ref/ops/*.py (OPS = {"op": fn(attrs, inputs, training) -> [outputs]},
# optional SKIP = {"op": "reason"} for an op whose training-mode forward cannot be compared, e.g. a random
# mask) and checks |braid - torch| <= atol + rtol * |torch| elementwise. A public op without a reference fails.
# Usage: op_ref.py DIR [OP ...]   (exit 0: all passed; 1: some failed; 77: torch unavailable)
import importlib.util
import json
import math
import os
import sys
import traceback

try:
    import numpy as np
    import torch
except Exception as e:  # the C++ test turns status 77 into a visible GTEST_SKIP
    print(f"torch_ref: cannot import torch/numpy: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def load_references(ops_dir):
    """Merges OPS and SKIP of every module in ops_dir; returns (ops, skip, origin, problems)."""
    ops, skip, origin, problems = {}, {}, {}, []
    for fname in sorted(os.listdir(ops_dir)):
        if not fname.endswith(".py") or fname.startswith("_"):
            continue
        path = os.path.join(ops_dir, fname)
        try:
            spec = importlib.util.spec_from_file_location("torch_ref_ops_" + fname[:-3], path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except Exception:
            problems.append(f"{fname}: failed to import:\n{traceback.format_exc().rstrip()}")
            continue
        for name, fn in getattr(mod, "OPS", {}).items():
            if name in ops:
                problems.append(f"{fname}: op '{name}' already has a reference in {origin[name]}")
            ops[name], origin[name] = fn, fname
        for name, reason in getattr(mod, "SKIP", {}).items():
            skip[name] = reason
            if name not in getattr(mod, "OPS", {}):
                problems.append(f"{fname}: SKIP names '{name}' but OPS has no reference for it")
    return ops, skip, origin, problems


def layers_for_loss(graph):
    """The layers of `braid check --json` output that the loss (the first output) depends on, in model
    order (the JSON also lists metric layers, e.g. accuracy). Raises ValueError naming a dangling name."""
    loss = graph["outputs"][0]
    by_name = {l["name"]: l for l in graph["layers"]}
    inputs = {i["name"] for i in graph["inputs"]}
    if loss not in by_name:
        raise ValueError(f"the loss '{loss}' is not a layer of the JSON")
    needed, stack = set(), [loss]
    while stack:
        n = stack.pop()
        if n in needed or n in inputs:
            continue
        if n not in by_name:
            raise ValueError(f"'{n}' is neither a model input nor a layer of the JSON")
        needed.add(n)
        stack.extend(by_name[n]["from"])
    return [l for l in graph["layers"] if l["name"] in needed]


def load_input(path, requires_grad):
    a = np.load(path)
    if a.dtype.kind in "iu":
        return torch.from_numpy(a.astype(np.int64))
    t = torch.from_numpy(a.astype(np.float32))
    return t.requires_grad_(True) if requires_grad else t


def as_list(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return list(out)


def compare(name, braid, ref, rtol, atol):
    """Returns (max_abs, max_rel, error or None). braid: numpy array; ref: torch tensor or None."""
    if ref is None:
        return 0.0, 0.0, f"{name}: the reference returned None"
    if not isinstance(ref, torch.Tensor):
        ref = torch.as_tensor(ref)
    ref = ref.detach()
    if ref.dtype == torch.bool:
        ref = ref.to(torch.int64)
    b_int = braid.dtype.kind in "iub"
    r_int = not (ref.is_floating_point() or ref.is_complex())
    r = ref.to(torch.float64).cpu().numpy()
    if tuple(r.shape) != tuple(braid.shape):
        return 0.0, 0.0, f"{name}: shape braid {list(braid.shape)} vs torch {list(r.shape)}"
    if b_int != r_int:
        return 0.0, 0.0, (f"{name}: dtype braid {braid.dtype} vs torch {ref.dtype} "
                          "(one is integer, the other floating point)")
    a = braid.astype(np.float64)
    if a.size == 0:
        return 0.0, 0.0, None
    nan_a, nan_r = np.isnan(a), np.isnan(r)
    diff = np.where(nan_a & nan_r, 0.0, np.abs(a - r))
    diff = np.where(nan_a ^ nan_r, np.inf, diff)
    with np.errstate(invalid="ignore"):
        diff = np.where(np.isinf(a) & np.isinf(r) & (a == r), 0.0, diff)
    tol = atol + rtol * np.abs(np.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0))
    bad = ~(diff <= tol)
    max_abs = float(np.max(diff))
    big = np.abs(r) > atol
    max_rel = float(np.max(diff[big] / np.abs(r[big]))) if big.any() else 0.0
    if bad.any():
        worst = np.unravel_index(int(np.argmax(np.where(bad, diff - tol, -np.inf))), a.shape)
        return max_abs, max_rel, (f"{name}: {int(bad.sum())} of {a.size} elements outside tolerance; worst at "
                                  f"{list(map(int, worst))}: braid {a[worst]!r} torch {r[worst]!r}")
    return max_abs, max_rel, None


def run_case(case, d, ops, skip):
    """Returns (errors, summary text)."""
    op = case["op"]
    if op not in ops:
        return [f"no PyTorch reference for op '{op}': add it to OPS in tests/torch_ref/ops/<family>.py"], ""
    fn, attrs = ops[op], case["attrs"]
    rtol, atol = case["torch_rtol"], case["torch_atol"]
    diff = case["differentiable"]
    n_out = case["num_public_outputs"]
    errors, notes = [], []
    stats = {"fwd": [0.0, 0.0], "grad": [0.0, 0.0]}

    def record(kind, name, braid, ref):
        ab, rel, err = compare(name, braid, ref, rtol, atol)
        stats[kind][0] = max(stats[kind][0], ab)
        stats[kind][1] = max(stats[kind][1], rel)
        if err:
            errors.append(err)

    def inputs(requires_grad):
        return [load_input(os.path.join(d, f), requires_grad and diff[i]) for i, f in enumerate(case["inputs"])]

    def forward(mode, training, xs):
        outs = as_list(fn(attrs, xs, training))
        if len(outs) != n_out:
            errors.append(f"{mode}: the reference returned {len(outs)} outputs, braid's op has {n_out} public")
            return None
        for k, (f, ref) in enumerate(zip(case["outputs"][mode], outs)):
            record("fwd", f"{mode} output {k}", np.load(os.path.join(d, f)), ref)
        return outs

    try:  # eval mode: always compared
        with torch.no_grad():
            forward("eval", False, inputs(False))
    except Exception:
        errors.append(f"eval: the reference raised:\n{traceback.format_exc().rstrip()}")

    if op in skip:
        notes.append(f"training mode skipped: {skip[op]}")
    else:
        try:
            xs = inputs(True)
            n_errors = len(errors)
            outs = forward("train", True, xs)
            if outs is not None and case["dy"] is not None and len(errors) == n_errors:
                want = [i for i, dflag in enumerate(diff) if dflag]
                dy = torch.from_numpy(np.load(os.path.join(d, case["dy"])).astype(np.float32)).contiguous()
                if not isinstance(outs[0], torch.Tensor) or not outs[0].requires_grad:
                    errors.append("backward: output 0 of the reference does not require grad "
                                  "(computed under no_grad or detached?)")
                else:
                    gs = torch.autograd.grad(outs[0], [xs[i] for i in want], grad_outputs=dy, allow_unused=True)
                    for i, g in zip(want, gs):
                        name = f"grad of {case['input_names'][i]}"
                        if case["grads"][i] is None:
                            errors.append(f"{name}: braid produced no gradient for a differentiable input")
                            continue
                        if g is None:
                            g = torch.zeros_like(xs[i])
                        record("grad", name, np.load(os.path.join(d, case["grads"][i])), g)
        except Exception:
            errors.append(f"train: the reference raised:\n{traceback.format_exc().rstrip()}")

    text = "fwd abs %.2e rel %.2e" % tuple(stats["fwd"])
    if case["dy"] is not None and op not in skip:
        text += "  grad abs %.2e rel %.2e" % tuple(stats["grad"])
    text += f"  (rtol {rtol:g} atol {atol:g})"
    if notes:
        text += "  [" + "; ".join(notes) + "]"
    return errors, text


def main(argv):
    if len(argv) < 2:
        print("usage: op_ref.py DIR [OP ...]")
        return 2
    d, only = argv[1], set(argv[2:])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with open(os.path.join(d, "manifest.json")) as f:
        manifest = json.load(f)
    ops, skip, origin, problems = load_references(os.path.join(HERE, "ops"))
    passed, failed = 0, 0
    for p in problems:
        print(f"FAIL {p}")
        failed += 1
    public = set(manifest["public_ops"])
    for name in sorted(set(ops) - public):
        print(f"FAIL {origin[name]}: reference for '{name}', which is not a public braid op (typo?)")
        failed += 1
    with_cases = {c["op"] for c in manifest["cases"]}
    if not manifest.get("filtered") and not only:
        for name in sorted(public - with_cases):
            print(f"FAIL {name}: public op without any dumped sample")
            failed += 1
    width = max([len(c["op"]) + len(c["sample"]) + 1 for c in manifest["cases"]] + [10])
    for case in manifest["cases"]:
        if only and case["op"] not in only:
            continue
        label = f"{case['op']}/{case['sample']}"
        errors, text = run_case(case, d, ops, skip)
        status = "FAIL" if errors else "OK  "
        if not text and errors:  # nothing was compared: the reason goes on the case's line
            text, errors = errors[0], errors[1:]
        print(f"{status} {label:<{width}}  {text}")
        for e in errors:
            print("       " + e.replace("\n", "\n       "))
        failed += bool(errors)
        passed += not errors
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
