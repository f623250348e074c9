# A nanoGPT-style PyTorch training loop on normlab's corpus, recorded by normlab.torch.Probe.
import math, sys, torch, torch.nn as nn, torch.nn.functional as F, normlab.torch

class Attention(nn.Module):
    def __init__(s, C, H): super().__init__(); s.H, s.c_attn, s.c_proj = H, nn.Linear(C, 3 * C), nn.Linear(C, C)
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, s.H, -1).transpose(1, 2) for t in s.c_attn(x).split(C, 2))
        return s.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))

class Block(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.ln_1, s.attn, s.ln_2 = nn.LayerNorm(C), Attention(C, H), nn.LayerNorm(C)
        s.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"), nn.Linear(4 * C, C))
    def forward(s, x): x = x + s.attn(s.ln_1(x)); return x + s.mlp(s.ln_2(x))

class GPT(nn.Module):
    def __init__(s, V=256, T=64, C=64, H=4, L=2):
        super().__init__()
        s.config = type("GPTConfig", (), dict(n_head=H, n_embd=C, vocab_size=V))
        s.transformer = nn.ModuleDict(dict(wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                                           h=nn.ModuleList(Block(C, H) for _ in range(L)), ln_f=nn.LayerNorm(C)))
        s.lm_head = nn.Linear(C, V, bias=False); s.lm_head.weight = s.transformer.wte.weight
    def forward(s, idx, targets):
        x = s.transformer.wte(idx) + s.transformer.wpe(torch.arange(idx.shape[1]))
        for block in s.transformer.h: x = block(x)
        logits = s.lm_head(s.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

text = "data/wordnet_glosses.txt"  # normlab's embedded corpus, as bytes
data = torch.frombuffer(bytearray(open(text, "rb").read()), dtype=torch.uint8).long()
torch.manual_seed(0)
model, steps, lr = GPT(), 300, 3e-3
for name, p in model.named_parameters():  # nanoGPT's initialization: N(0, 0.02) weights, zero biases
    nn.init.normal_(p, std=0.02) if p.dim() == 2 else nn.init.zeros_(p) if name.endswith("bias") else None
opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
with normlab.torch.Probe(model, opt, out=sys.argv[1] if len(sys.argv) > 1 else "runs/nanogpt", interval=25, per_head=True,
                         config={"data.path": text, "optim.grad_clip": 1.0, "train.steps": steps}) as probe:
    for step in range(steps):
        batch = torch.stack([data[i:i + 65] for i in torch.randint(0, int(0.95 * len(data)) - 65, (8,)).tolist()])
        for g in opt.param_groups: g["lr"] = lr * min(1, (step + 1) / 30) * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        logits, loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
        probe.step(loss, grad_norm=norm)
