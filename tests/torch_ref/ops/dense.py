# PyTorch references of the dense families (src/ops/defs/linear.cpp, embedding.cpp, attention.cpp).
# linear: F.linear; embedding: F.embedding; position_embedding: x + weight[:T]; attention:
# F.multi_head_attention_forward (nn.MultiheadAttention's math, self-attention, batch_first, causal = bool
# upper-triangular mask). Attention dropout in training cannot use torch's random mask: that mode recomputes
# the same math by hand with braid's mask (keep (b, head, i, j) when uniform_at(key, flat index) >= p, see
# src/core/rng.h), key = RNG_KEY, the rng_key the op harness gives kernels (tests/ops/op_harness.h). Grouped-query
# attention (kv_heads < heads) and rotary embeddings (rope_theta > 0), which torch 1.13's functional attention
# lacks, take the same hand-written path: k and v heads repeated with repeat_interleave (Hugging Face's repeat_kv),
# HF Llama's rotate_half / apply_rotary_pos_emb on q and k, cos/sin computed in float64 and rounded.
import numpy as np
import torch
import torch.nn.functional as F

RNG_KEY = 7
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(z):
    # splitmix64 finaliser on uint64 arrays (wrapping arithmetic), as braid::mix64.
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform_at(key, index):
    """braid::uniform_at(key, index) for an array of indices: uniform [0, 1) with 53 bits."""
    idx = np.asarray(index, dtype=np.uint64)
    bits = _mix64(np.uint64(key) ^ _mix64(idx)) >> np.uint64(11)
    return bits.astype(np.float64) * (1.0 / 9007199254740992.0)


def _linear(attrs, inputs, training):
    bias = inputs[2] if attrs["bias"] else None
    return [F.linear(inputs[0], inputs[1], bias)]


def _embedding(attrs, inputs, training):
    return [F.embedding(inputs[0].long(), inputs[1])]


def _position_embedding(attrs, inputs, training):
    x, weight = inputs
    return [x + weight[: x.shape[1]].unsqueeze(0)]


def _attention_params(attrs, inputs):
    if attrs["bias"]:
        return inputs[1], inputs[2], inputs[3], inputs[4]
    return inputs[1], None, inputs[2], None


def _causal_mask(t):
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)  # True = may not attend


def _rotate_half(z):
    half = z.shape[-1] // 2
    return torch.cat((-z[..., half:], z[..., :half]), dim=-1)


def _rope(z, theta):
    # z (b, heads, t, dh): HF Llama's apply_rotary_pos_emb with cos/sin of p * theta^(-2i/dh) in float64.
    t, dh = z.shape[2], z.shape[3]
    inv_freq = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)
    angles = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos().to(z.dtype), emb.sin().to(z.dtype)
    return z * cos + _rotate_half(z) * sin


def _attention_by_hand(attrs, inputs, training):
    # multi_head_attention_forward's math step by step, with grouped key/value heads, rotary embeddings and, in
    # training with dropout, braid's dropout mask.
    x = inputs[0]
    w_in, b_in, w_out, b_out = _attention_params(attrs, inputs)
    b, t, d = x.shape
    h, p = attrs["heads"], attrs["dropout"]
    kv = attrs.get("kv_heads", h)
    theta = attrs.get("rope_theta", 0.0)
    dh = d // h
    q, k, v = F.linear(x, w_in, b_in).split([h * dh, kv * dh, kv * dh], dim=-1)
    split = lambda z, n: z.reshape(b, t, n, dh).transpose(1, 2)  # (b, n, t, dh)
    q, k, v = split(q, h), split(k, kv), split(v, kv)
    if theta > 0:
        q, k = _rope(q, theta), _rope(k, theta)
    k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)
    scores = torch.matmul(q / dh ** 0.5, k.transpose(-2, -1))
    if attrs["causal"]:
        scores = scores.masked_fill(_causal_mask(t), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if training and p > 0:
        keep = uniform_at(RNG_KEY, np.arange(b * h * t * t)).reshape(b, h, t, t) >= p
        probs = probs * torch.from_numpy(keep).to(probs.dtype) / (1 - p)
    context = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, d)
    return F.linear(context, w_out, b_out)


def _attention(attrs, inputs, training):
    h = attrs["heads"]
    if (training and attrs["dropout"] > 0) or attrs.get("kv_heads", h) != h or attrs.get("rope_theta", 0.0) > 0:
        return [_attention_by_hand(attrs, inputs, training)]
    x = inputs[0]
    w_in, b_in, w_out, b_out = _attention_params(attrs, inputs)
    xt = x.transpose(0, 1)  # (T, B, d): the functional form is sequence-first
    mask = _causal_mask(x.shape[1]) if attrs["causal"] else None
    y, _ = F.multi_head_attention_forward(
        xt, xt, xt, x.shape[2], attrs["heads"], w_in, b_in, None, None, False, 0.0, w_out, b_out,
        training=training, need_weights=False, attn_mask=mask)
    return [y.transpose(0, 1)]


OPS = {
    "linear": _linear,
    "embedding": _embedding,
    "position_embedding": _position_embedding,
    "attention": _attention,
}
