# PyTorch references of the norm (layer_norm, rms_norm, softmax), dropout, loss and shape families
# (src/ops/defs/{norm,dropout,loss,shape}.cpp), run by ../op_ref.py. Axes in attrs are per-sample: a
# non-negative axis a is tensor axis a + 1, a negative one counts from the end as in torch. Losses return a 0-d
# tensor (braid's shape []). dropout's training mode draws braid's own counter-based mask, which torch cannot
# reproduce: skipped; eval mode (identity) is compared.
import torch
import torch.nn.functional as F


def _axis(a):
    return a + 1 if a >= 0 else a


def _layer_norm(attrs, inputs, training):
    x, weight, bias = inputs
    return [F.layer_norm(x, (x.shape[-1],), weight, bias, attrs["eps"])]


def _rms_norm(attrs, inputs, training):
    # torch 1.13 has no nn.RMSNorm (PyTorch 2.4+): Llama's formula written out.
    x, weight = inputs
    return [x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + attrs["eps"]) * weight]


def _softmax(attrs, inputs, training):
    return [torch.softmax(inputs[0], dim=_axis(attrs["axis"]))]


def _dropout(attrs, inputs, training):
    return [F.dropout(inputs[0], p=attrs["p"], training=training)]


def _cross_entropy(attrs, inputs, training):
    logits, targets = inputs
    c = logits.shape[-1]
    return [F.cross_entropy(logits.reshape(-1, c), targets.reshape(-1))]


def _mse_loss(attrs, inputs, training):
    return [F.mse_loss(inputs[0], inputs[1])]


def _accuracy(attrs, inputs, training):
    logits, targets = inputs
    hits = logits.detach().argmax(dim=-1) == targets  # torch.argmax: first maximum on ties
    return [hits.to(torch.float32).mean()]


def _concat(attrs, inputs, training):
    return [torch.cat(inputs, dim=_axis(attrs["axis"]))]


def _flatten(attrs, inputs, training):
    return [torch.flatten(inputs[0], start_dim=1)]


def _reshape(attrs, inputs, training):
    x = inputs[0]
    return [x.reshape(x.shape[0], *attrs["shape"])]


def _transpose(attrs, inputs, training):
    r = inputs[0].dim() - 1
    return [inputs[0].permute(0, *[(p % r) + 1 for p in attrs["perm"]])]


OPS = {
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "softmax": _softmax,
    "dropout": _dropout,
    "cross_entropy": _cross_entropy,
    "mse_loss": _mse_loss,
    "accuracy": _accuracy,
    "concat": _concat,
    "flatten": _flatten,
    "reshape": _reshape,
    "transpose": _transpose,
}
SKIP = {"dropout": "training-mode mask comes from braid's counter-based RNG (uniform_at of the global element "
                   "index), which torch's generator cannot reproduce; eval mode (identity) is compared"}
