# PyTorch references of the conv family files (src/ops/defs/conv.cpp, pool.cpp, batch_norm.cpp), run by
# ../op_ref.py: conv2d (F.conv2d), max_pool2d / avg_pool2d (ceil_mode=False, count_include_pad=True),
# global_avg_pool (mean over H and W), batch_norm (F.batch_norm on the running-stat tensors: batch statistics
# and in-place running updates in training, running statistics in eval). fn(attrs, inputs, training) returns
# the public outputs. MUTATED (not read by op_ref.py yet) gives batch_norm's buffers after a forward, for a
# harness that compares braid's in-place updates (running_mean, running_var, num_batches_tracked) too.
import torch
import torch.nn.functional as F


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _conv2d(attrs, inputs, training):
    x, weight, *bias = inputs  # bias only when attrs["bias"]
    return [F.conv2d(x, weight, bias[0] if bias else None, stride=_pair(attrs["stride"]),
                     padding=_pair(attrs["padding"]))]


def _max_pool2d(attrs, inputs, training):
    # Only the pooled values are public; braid's argmax output is saved state for backward.
    return [F.max_pool2d(inputs[0], _pair(attrs["kernel"]), _pair(attrs["stride"]), _pair(attrs["padding"]))]


def _avg_pool2d(attrs, inputs, training):
    return [F.avg_pool2d(inputs[0], _pair(attrs["kernel"]), _pair(attrs["stride"]), _pair(attrs["padding"]),
                         ceil_mode=False, count_include_pad=True)]


def _global_avg_pool(attrs, inputs, training):
    return [F.adaptive_avg_pool2d(inputs[0], 1).flatten(1)]


def _batch_norm_all(attrs, inputs, training):
    """(y, [running_mean, running_var, num_batches_tracked] after the forward), the buffers updated in place
    as nn.BatchNorm does (momentum given, so num_batches_tracked only counts)."""
    x, weight, bias, running_mean, running_var, num_batches_tracked = inputs
    y = F.batch_norm(x, running_mean, running_var, weight, bias, training=training,
                     momentum=attrs["momentum"], eps=attrs["eps"])
    if training:
        num_batches_tracked.add_(1)
    return y, [running_mean, running_var, num_batches_tracked]


def _batch_norm(attrs, inputs, training):
    return [_batch_norm_all(attrs, inputs, training)[0]]


OPS = {
    "conv2d": _conv2d,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "global_avg_pool": _global_avg_pool,
    "batch_norm": _batch_norm,
}

MUTATED = {
    "batch_norm": lambda attrs, inputs, training: _batch_norm_all(attrs, inputs, training)[1],
}
