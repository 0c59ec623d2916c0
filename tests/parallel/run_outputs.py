"""What a `braid train` run left in its folder, for the parallel tests: the per-step losses of its metrics file
(records of kind train, in order) and the tensors of its --save-final checkpoint."""
import json
import os

import h5py


def losses(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [rec["loss"] for rec in map(json.loads, f) if "loss" in rec]


def weights(d, buffers=False):
    """params/* (and buffers/* when asked) of d/final.h5, by name."""
    prefixes = ("params/", "buffers/") if buffers else ("params/",)
    out = {}
    with h5py.File(os.path.join(d, "final.h5"), "r") as f:
        def visit(n, obj):
            if isinstance(obj, h5py.Dataset) and n.startswith(prefixes):
                out[n] = obj[()]
        f.visititems(visit)
    return out
