#!/usr/bin/python3
"""The PyTorch side of scripts/bench/vs_pytorch.sh: trains one benchmark model for warmup + timed steps and
writes its throughput as JSON, windowed as `braid bench` does (median and spread over windows of K steps).

The models, data sizes and optimizer steps equal configs/bench/{mlp,lenet,gpt}.yaml: synthetic data held
in memory (a fresh permutation per epoch, a batch gathered by indexing, like braid's dataset read), then
forward, cross-entropy, backward, optional clipping, optimizer step. Thread settings are applied before the
first op; OMP_WAIT_POLICY must be set by the caller (it is read when OpenMP starts).
Peak RSS is measured outside, by /usr/bin/time around this process; ru_maxrss is reported too.
"""
import argparse
import json
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm decoder block as models/tiny_gpt.yaml: ln1, causal attention, residual, ln2, fc, gelu(tanh),
    proj, residual (dropout 0)."""

    def __init__(self, d, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=256, seq=128, d=256, heads=4, n_layer=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.h = nn.ModuleList([Block(d, heads, 4 * d) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.logits = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1))

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[: tokens.shape[1]]
        for b in self.h:
            x = b(x, self.mask)
        return self.logits(self.ln_f(x))


def make(name, gen):
    """(model, optimizer, inputs, targets, batch, tokens per sample, clip norm) as configs/bench/NAME.yaml."""
    if name == "mlp":
        m = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        x = torch.rand(2048, 784, generator=gen) * 2 - 1
        y = torch.randint(0, 10, (2048,), generator=gen)
        return m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), x, y, 256, 0, None
    if name == "lenet":
        m = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
        x = torch.rand(1024, 1, 28, 28, generator=gen) * 2 - 1
        y = torch.randint(0, 10, (1024,), generator=gen)
        return m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), x, y, 128, 0, None
    if name == "gpt":
        seq = 128
        text = torch.frombuffer(bytearray(open("/usr/share/common-licenses/GPL-3", "rb").read()), dtype=torch.uint8)
        n = text.numel() - seq  # every window start, as braid's bytes dataset
        starts = torch.arange(n).unsqueeze(1) + torch.arange(seq + 1).unsqueeze(0)
        windows = text[starts].long()
        m = Gpt(seq=seq)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        return m, opt, windows[:, :-1].contiguous(), windows[:, 1:].contiguous(), 16, seq, 1.0
    raise SystemExit(f"torch_bench.py: unknown model {name!r} (mlp, lenet, gpt)")


def quantile(xs, q):
    xs = sorted(xs)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=["mlp", "lenet", "gpt"])
    ap.add_argument("--threads", default="default", help="'default' or an intra-op thread count")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--json", help="write the result here (default: stdout)")
    a = ap.parse_args()
    if a.threads != "default":
        torch.set_num_threads(int(a.threads))
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model, opt, x, y, batch, tokens, clip = make(a.model, gen)
    model.train()
    n = x.shape[0]
    order, pos = torch.randperm(n, generator=gen), 0
    step_s = []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        if pos + batch > n:
            order, pos = torch.randperm(n, generator=gen), 0
        idx = order[pos:pos + batch]
        pos += batch
        xb, yb = x[idx], y[idx]
        out = model(xb)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if not torch.isfinite(loss):
            raise SystemExit(f"torch_bench.py: the loss became {loss.item()} at step {i + 1}")
        if i >= a.warmup:
            step_s.append(time.perf_counter() - t0)
    k = max(1, a.window)
    per = k if len(step_s) >= k else len(step_s)
    wins = [per * batch / sum(step_s[i * per:(i + 1) * per]) for i in range(max(1, len(step_s) // k))]
    res = {
        "model": a.model, "threads_setting": a.threads, "threads": torch.get_num_threads(), "batch": batch,
        "steps": a.steps, "warmup": a.warmup, "window": k, "torch": torch.__version__,
        "samples_per_s_median": quantile(wins, 0.5), "samples_per_s_min": min(wins), "samples_per_s_max": max(wins),
        "samples_per_s_p25": quantile(wins, 0.25), "samples_per_s_p75": quantile(wins, 0.75),
        "tokens_per_sample": tokens, "step_ms_median": 1e3 * quantile(step_s, 0.5),
        "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "window_samples_per_s": wins,
    }
    text = json.dumps(res) + "\n"
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
