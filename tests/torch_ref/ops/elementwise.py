# PyTorch references of the elementwise family (src/ops/defs/elementwise.cpp), run by ../op_ref.py.
# add/mul: n-ary with NumPy broadcasting (torch's + and *); relu, gelu (approximate "none" = erf form,
# "tanh" = tanh approximation, as torch.nn.functional.gelu), tanh, sigmoid, silu. No op is random, so all modes
# are compared. Each fn(attrs, inputs, training) returns the list of public outputs.
import functools

import torch
import torch.nn.functional as F


def _add(attrs, inputs, training):
    return [functools.reduce(lambda a, b: a + b, inputs)]


def _mul(attrs, inputs, training):
    return [functools.reduce(lambda a, b: a * b, inputs)]


def _gelu(attrs, inputs, training):
    return [F.gelu(inputs[0], approximate=attrs["approximate"])]


OPS = {
    "add": _add,
    "mul": _mul,
    "relu": lambda attrs, inputs, training: [F.relu(inputs[0])],
    "gelu": _gelu,
    "tanh": lambda attrs, inputs, training: [torch.tanh(inputs[0])],
    "sigmoid": lambda attrs, inputs, training: [torch.sigmoid(inputs[0])],
    "silu": lambda attrs, inputs, training: [F.silu(inputs[0])],
}
