"""PyTorch eager reference for scripts/gpu_check.sh: the model of models/bench/gpt2_124m.yaml (pre-norm GPT-2
small shapes, untied output layer, dropout 0), full training steps timed on the GPU: forward + backward +
torch.optim.AdamW(fused=True) (lr 6e-4, betas 0.9/0.95, weight decay 0.1, as tests/gpu/bench_gpu_test.cpp),
in fp32 (TF32 off, as braid's f32 GEMMs) or torch.autocast bf16 (--bf16) over fp32 master weights.
--no-optim times forward+backward only. --init gpt2 (default) initialises as braid's yaml, so that the losses
compare; --init torch keeps PyTorch's module defaults (embeddings normal(0, 1): a much easier start). Prints "TORCH tokens_per_s=<x> precision=<p> loss_first=.. loss_last=..".
"""
import argparse, time
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=4)
p.add_argument("--bf16", action="store_true")
p.add_argument("--no-optim", action="store_true")
p.add_argument("--steps", type=int, default=5)
p.add_argument("--init", choices=["gpt2", "torch"], default="gpt2",
               help="gpt2: braid's yaml (normal(0, 0.02) embeddings and weights, zero biases); torch: module defaults")
a = p.parse_args()
torch.backends.cuda.matmul.allow_tf32 = False
V, T, D, H, L = 50257, 1024, 768, 12, 12

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        s.attn = nn.MultiheadAttention(D, H, batch_first=True)
        s.fc, s.proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        s.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
    def forward(s, x):
        h = s.ln1(x)
        x = x + s.attn(h, h, h, attn_mask=s.mask, need_weights=False)[0]
        return x + s.proj(nn.functional.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.tok, s.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        s.h = nn.Sequential(*[Block() for _ in range(L)])
        s.ln_f, s.out = nn.LayerNorm(D), nn.Linear(D, V, bias=False)
    def forward(s, t, y):
        x = s.h(s.tok(t) + s.pos.weight[: t.shape[1]])
        return nn.functional.cross_entropy(s.out(s.ln_f(x)).view(-1, V), y.view(-1))

m = GPT()
if a.init == "gpt2":  # as models/bench/gpt2_124m.yaml (torch's default embeddings are normal(0, 1))
    for mod in m.modules():
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            nn.init.normal_(mod.weight, 0.0, 0.02)
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            nn.init.zeros_(mod.bias)
        if isinstance(mod, nn.MultiheadAttention):
            nn.init.normal_(mod.in_proj_weight, 0.0, 0.02)
            nn.init.zeros_(mod.in_proj_bias)
m = m.cuda()
opt = None
if not a.no_optim:
    opt = torch.optim.AdamW(m.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
t = torch.randint(0, V, (a.batch, T), device="cuda")

def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.bf16):
        loss = m(t, t)
    loss.backward()
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
    return loss

first = step().item()
second = step().item()
torch.cuda.synchronize()
t0 = time.time()
for _ in range(a.steps):
    loss = step()
torch.cuda.synchronize()
dt = time.time() - t0
print(f"TORCH tokens_per_s={a.steps * a.batch * T / dt:.1f} precision={'bf16' if a.bf16 else 'fp32'} "
      f"optim={'none' if opt is None else 'adamw_fused'} init={a.init} loss_first={first:.4f} loss_second={second:.4f} "
      f"loss_last={loss.item():.4f}")
