#!/usr/bin/python3
# Converts a braid checkpoint (docs/checkpoints.md) to a PyTorch state_dict file (torch.save), keyed by braid's
# parameter and buffer names, which are PyTorch's ("fc.weight", "h.0.attn.in_proj_weight", "bn1.running_mean").
# Checks the checkpoint's header and every tensor's CRC-32 first (--no-verify skips that). With --check it also
# builds the run's model in PyTorch, generically (`braid check RUN --json` and tests/torch_ref/ops/*.py, as
# tests/torch_ref/train_ref.py does), loads the state_dict with load_state_dict(strict=True), checks dtypes,
# and prints the model's loss on a random batch (eval mode). No per-model code; optimizer state is not converted.
# A tied weight (linear's `tie: LAYER`) is one tensor in the checkpoint, under the named layer's name
# ("tok.weight"). Given --run, the state_dict also names it under each tying layer ("logits.weight", one storage
# with "tok.weight"), as PyTorch's own state_dict of a tied model does (GPT-2's lm_head.weight and
# transformer.wte.weight); without --run the script does not know the ties and writes the tensor once.
# Usage: ckpt_to_torch.py CKPT|FOLDER [-o OUT.pt] [--run RUN [--check] [--braid BRAID] [--set k=v]... [--batch B]]
# Exit status: 0 ok, 1 a damaged checkpoint or a failed check, 77 h5py/numpy/torch unavailable.
import argparse
import collections
import json
import math
import mmap
import os
import re
import subprocess
import sys
import zlib

try:
    import h5py
    import numpy as np
    import torch
except Exception as e:  # CTest turns 77 into a visible skip
    print(f"ckpt_to_torch: cannot import h5py/numpy/torch: {e}")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch_ref"))
import op_ref  # noqa: E402  (load_references, as_list: the op references of the PyTorch tests)


class Failure(Exception):
    """Ends the script with status 1 and a one-paragraph message."""


# ---- the checkpoint -----------------------------------------------------------------------------------------

def resolve(spec):
    """A checkpoint file, or a checkpoint folder (its `latest`)."""
    if os.path.isdir(spec):
        latest = os.path.join(spec, "latest")
        try:
            with open(latest) as f:
                name = f.read(256).strip()
        except OSError as e:
            raise Failure(f"{spec}: no checkpoint to use ({e})") from None
        if not re.fullmatch(r"step_\d{8,18}\.h5", name):
            raise Failure(f"{latest}: does not name a checkpoint file (it holds {name[:60]!r})")
        spec = os.path.join(spec, name)
    if not os.path.isfile(spec):
        raise Failure(f"checkpoint '{spec}' does not exist")
    return spec


def verify_header(path):
    """braid's header in the HDF5 user block: size, and the CRC-32 of every byte outside the tensor data
    (src/io/checkpoint_header.cpp). Checked before h5py parses the file, which a damaged file can crash."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise Failure(f"checkpoint '{path}': is empty (0 bytes)")
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    if bytes(data[:17]) != b"braid checkpoint\n":
        raise Failure(f"checkpoint '{path}': is not a braid checkpoint (no braid header in its first bytes)")
    m = re.match(rb"braid checkpoint\nformat \d+\nuserblock (\d+)\n", bytes(data[:512]))
    if not m or int(m.group(1)) > len(data):
        raise Failure(f"checkpoint '{path}': its header is corrupt (no user block size)")
    head = bytes(data[:int(m.group(1))])
    end = head.find(b"header-crc32 ")
    if end < 0 or "%08x" % zlib.crc32(head[:end]) != head[end + 13:end + 21].decode("ascii", "replace"):
        raise Failure(f"checkpoint '{path}': its header is corrupt (checksum mismatch)")
    words = head[:end].decode("ascii").split()
    fields = dict(zip(words[2:12:2], words[3:12:2]))  # format, userblock, size, metadata-crc32, ranges
    userblock, size, count = int(fields["userblock"]), int(fields["size"]), int(fields["ranges"])
    if len(data) != size:
        raise Failure(f"checkpoint '{path}': has {len(data)} bytes, {size} were written (truncated or damaged)")
    nums = [int(w) for w in words[12:12 + 2 * count]]
    crc, at = 0, userblock
    for off, n in zip(nums[0::2], nums[1::2]):
        crc = zlib.crc32(data[at:off], crc)
        at = off + n
    crc = zlib.crc32(data[at:size], crc)
    if "%08x" % crc != fields["metadata-crc32"]:
        raise Failure(f"checkpoint '{path}': is corrupt: its HDF5 structure fails its checksum")


def read_group(f, path, group, verify):
    """name -> numpy array for the datasets of /group, in name order, each checked against its checksum."""
    out = collections.OrderedDict()
    if group not in f:
        raise Failure(f"checkpoint '{path}': has no group '/{group}'")
    for name in sorted(f[group]):
        ds = f[group][name]
        if not isinstance(ds, h5py.Dataset):
            raise Failure(f"checkpoint '{path}': '/{group}/{name}' is not a dataset")
        a = np.asarray(ds[()])
        if verify:
            stored = ds.attrs.get("checksum")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            actual = "crc32:%08x" % zlib.crc32(a.tobytes())  # C order, as braid stores it
            if stored != actual:
                raise Failure(f"tensor '/{group}/{name}' in {path} is corrupt (checksum mismatch: stored {stored}, "
                              f"data {actual})")
        out[name] = a
    return out


def load_state_dict(path, verify=True):
    """(state_dict, buffer names, meta) of a checkpoint: params then buffers, torch tensors."""
    if verify:
        verify_header(path)
    try:
        with h5py.File(path, "r") as f:
            if "meta" not in f:
                raise Failure(f"checkpoint '{path}': is not a braid checkpoint (it has no /meta group)")
            meta = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["meta"].attrs.items()}
            params = read_group(f, path, "params", verify)
            buffers = read_group(f, path, "buffers", verify)
    except OSError as e:
        raise Failure(f"checkpoint '{path}': cannot read it with h5py: {e}") from None
    sd = collections.OrderedDict()
    for name, a in list(params.items()) + list(buffers.items()):
        sd[name] = torch.from_numpy(a if a.flags.c_contiguous else a.copy())  # 0-d arrays stay 0-d
    return sd, set(buffers), meta


# ---- the PyTorch model --------------------------------------------------------------------------------------

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64,
           "bf16": torch.bfloat16, "f16": torch.float16}


class BraidModel(torch.nn.Module):
    """The model of `braid check --json` as a torch.nn.Module: its parameters and buffers registered under
    braid's names (nested modules split at the dots, as PyTorch names them), the forward pass evaluated layer
    by layer with the ops/*.py references. Only the layers the loss needs are kept."""

    def __init__(self, graph, ops):
        super().__init__()
        specs = graph.get("param_specs")
        if specs is None:
            raise Failure("`braid check --json` printed no param_specs (a braid older than this script)")

        def owner(name):
            *path, leaf = name.split(".")
            mod = self
            for part in path:
                if not hasattr(mod, part):
                    mod.add_module(part, torch.nn.Module())
                mod = getattr(mod, part)
            return mod, leaf

        for s in specs:
            mod, leaf = owner(s["name"])
            t = torch.zeros(s["shape"], dtype=_DTYPES[s["dtype"]])
            if s["buffer"]:
                mod.register_buffer(leaf, t)
            else:
                mod.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=t.is_floating_point()))
        for alias, target in tied_aliases(graph).items():  # one Parameter under both names, as PyTorch ties
            mod, leaf = owner(alias)
            mod.register_parameter(leaf, self.get_parameter(target))
        self.specs = {s["name"]: s for s in specs}
        self.loss_name = graph["outputs"][0]
        try:
            self.layers = op_ref.layers_for_loss(graph)
        except ValueError as e:
            raise Failure(str(e)) from None
        missing = sorted({l["op"] for l in self.layers if l["op"] not in ops})
        if missing:
            raise Failure("no PyTorch reference for op(s) " + ", ".join(missing))
        self.fns = {l["name"]: ops[l["op"]] for l in self.layers}

    def tensor(self, name):
        return self.get_buffer(name) if self.specs[name]["buffer"] else self.get_parameter(name)

    def loss(self, batch):
        values = dict(batch)
        for l in self.layers:
            xs = [values[s] for s in l["from"]] + [self.tensor(p) for p in l["params"]]
            values[l["name"]] = op_ref.as_list(self.fns[l["name"]](l["attrs"], xs, False))[0]
        return values[self.loss_name]


def tied_aliases(graph):
    """{tying layer's name for the weight: the tied parameter} from `braid check --json`: a layer with a `tie`
    attribute uses a parameter of another layer ("logits" with tie: tok uses "tok.weight": "logits.weight")."""
    out = {}
    for l in graph["layers"]:
        if "tie" not in l.get("attrs", {}):
            continue
        for p in l["params"]:
            if not p.startswith(l["name"] + "."):
                out[l["name"] + "." + p.rsplit(".", 1)[-1]] = p
    return out


def braid_json(args):
    cmd = [args.braid, "check", args.run, "--json", "--batch", str(args.batch)]
    for kv in args.sets:
        cmd += ["--set", kv]
    print("+ " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Failure(f"cannot run braid check: {e}") from None
    if p.returncode != 0:
        raise Failure(f"braid check exited with status {p.returncode}:\n{p.stderr.rstrip()}")
    return json.loads(p.stdout)


def random_batch(inputs, batch, seed=0):
    """Floats uniform in [0, 1) (image-like) or standard normal; integers uniform below the input's bound."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in inputs:
        shape = [batch] + list(inp["shape"][1:])
        if inp["dtype"].startswith("i"):
            out[inp["name"]] = torch.from_numpy(rng.integers(0, max(int(inp.get("int_bound") or 0), 2), size=shape))
        elif len(shape) >= 3:
            out[inp["name"]] = torch.from_numpy(rng.random(size=shape)).to(_DTYPES[inp["dtype"]])
        else:
            out[inp["name"]] = torch.from_numpy(rng.standard_normal(size=shape)).to(_DTYPES[inp["dtype"]])
    return out


def check(sd, graph, args):
    ops, _, _, problems = op_ref.load_references(args.ops_dir)
    if problems:
        raise Failure("the op references do not load:\n  " + "\n  ".join(problems))
    model = BraidModel(graph, ops)
    try:
        model.load_state_dict(sd, strict=True)
    except RuntimeError as e:
        raise Failure(f"the checkpoint does not fit model '{graph['model']}': {e}") from None
    wrong = [f"'{k}': checkpoint {sd[k].dtype}, model {model.state_dict()[k].dtype}"
             for k in sd if sd[k].dtype != model.state_dict()[k].dtype]
    if wrong:
        raise Failure("dtypes differ: " + "; ".join(wrong))
    model.eval()
    with torch.no_grad():
        loss = float(model.loss(random_batch(graph["inputs"], args.batch)))
    print(f"model '{graph['model']}': all {len(sd)} tensors loaded (load_state_dict, strict); "
          f"{len(model.layers)} layers; loss on a random batch of {args.batch} (eval mode): {loss:.6g}")
    if not math.isfinite(loss):
        raise Failure("the loss is not finite")


def main(argv):
    ap = argparse.ArgumentParser(description="braid checkpoint -> PyTorch state_dict")
    ap.add_argument("checkpoint", help="a checkpoint file, or a checkpoint folder (its latest)")
    ap.add_argument("-o", "--output", help="the .pt file to write (default: the checkpoint's name with .pt)")
    ap.add_argument("--no-verify", action="store_true", help="skip the header and checksum checks")
    ap.add_argument("--check", action="store_true", help="load into the run's model in PyTorch and print its loss")
    ap.add_argument("--run", help="the run (or model) file the checkpoint belongs to: its ties, and for --check its model")
    ap.add_argument("--braid", default=os.path.join(ROOT, "build", "braid"), help="the braid binary (for --check)")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                    help="with --check: braid's --set overrides of the run file")
    ap.add_argument("--batch", type=int, default=2, help="with --check: batch size of the random batch")
    ap.add_argument("--ops-dir", default=os.path.join(ROOT, "tests", "torch_ref", "ops"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv[1:])
    if args.check and not args.run:
        ap.error("--check needs --run RUN")

    path = resolve(args.checkpoint)
    sd, buffers, meta = load_state_dict(path, verify=not args.no_verify)
    graph = braid_json(args) if args.run else None
    tensors = len(sd)
    aliases = tied_aliases(graph) if graph else {}
    for alias, target in aliases.items():
        if target not in sd:
            raise Failure(f"the checkpoint has no '{target}', which layer '{alias.rsplit('.', 1)[0]}' ties to")
        sd[alias] = sd[target]  # one storage: torch.save writes it once
    out = args.output or os.path.splitext(path)[0] + ".pt"
    torch.save(sd, out)
    tied = f"; tied: {', '.join(f'{a} = {t}' for a, t in aliases.items())}" if aliases else ""
    print(f"{path}: step {meta.get('step')}, {tensors - len(buffers)} parameters and {len(buffers)} buffers "
          f"({sum(t.numel() for k, t in sd.items() if k not in aliases)} values){tied} -> {out}")
    if args.check:
        check(sd, graph, args)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Failure as e:
        print(f"ckpt_to_torch: error: {e}")
        sys.exit(1)
