"""PyTorch eager reference for scripts/gpu_check.sh: the model of models/bench/gpt2_124m.yaml (pre-norm GPT-2
small shapes, untied output layer, dropout 0), forward+backward timed on the GPU in fp32 (TF32 off, as braid's
f32 GEMMs) or bf16 autocast (--bf16). Prints "TORCH tokens_per_s=<x>"."""
import argparse, time
import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=4)
p.add_argument("--bf16", action="store_true")
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

m = GPT().cuda()
t = torch.randint(0, V, (a.batch, T), device="cuda")
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.bf16):
        loss = m(t, t)
    loss.backward()
for _ in range(2): step()
torch.cuda.synchronize()
t0 = time.time()
for _ in range(5): step()
torch.cuda.synchronize()
print(f"TORCH tokens_per_s={5 * a.batch * T / (time.time() - t0):.1f}")
