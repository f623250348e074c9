"""The benchmark models of bench/bench_config.cpp in PyTorch, written as a PyTorch user would:
nn.Module blocks, F.scaled_dot_product_attention(is_causal=True) where it applies (config c's
attention soft-cap is not expressible in SDPA, so c uses the usual eager softcapped attention, as
Gemma 2 implementations do), fused AdamW with grad clipping, eager or torch.compile.

    OMP_WAIT_POLICY=PASSIVE python bench/torch_bench.py a [--compile] [--autocast] [--steps 10] [--warmup 3]

--autocast is PyTorch's own mixed precision, the peer of normlab's --precision bf16: the forward
and the loss run under torch.autocast("cpu", dtype=torch.bfloat16) (matrix products in bf16,
the ops autocast keeps in float32 in float32), the backward outside the autocast context as
PyTorch recommends; master weights, gradients and the fused AdamW stay float32, with the same
clipping and batches as the float32 run. It combines with --compile.

Prints one JSON object (the same fields as normlab_bench train, "losses" holding every step's
loss, warm-up included). A torch.compile failure is reported as {"error": ...} rather than hidden.
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import sys
import time
import traceback


def rss_mb(key="VmRSS:"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return float(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


BASELINE_RSS = rss_mb()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMPORTED_RSS = rss_mb()  # the interpreter and the torch libraries, before any model exists

CONFIGS = {
    "a": dict(V=256, C=384, L=6, H=6, Fd=1536, T=256, B=8, placement="pre", norm="layernorm",
              qk_norm=False, pos="learned", mlp="gelu_tanh", attn_cap=0.0, final_cap=0.0,
              z_loss=0.0),
    "a_dyt": dict(V=256, C=384, L=6, H=6, Fd=1536, T=256, B=8, placement="pre", norm="dyt",
                  qk_norm=False, pos="learned", mlp="gelu_tanh", attn_cap=0.0, final_cap=0.0,
                  z_loss=0.0),
    "b": dict(V=50257, C=768, L=12, H=12, Fd=3072, T=64, B=4, placement="pre", norm="layernorm",
              qk_norm=False, pos="learned", mlp="gelu_tanh", attn_cap=0.0, final_cap=0.0,
              z_loss=0.0),
    "c": dict(V=256, C=384, L=6, H=6, Fd=1536, T=256, B=8, placement="peri", norm="rmsnorm",
              qk_norm=True, pos="rope", mlp="swiglu", attn_cap=50.0, final_cap=30.0, z_loss=1e-4),
    "c_matched": dict(V=256, C=384, L=6, H=6, Fd=1024, T=256, B=8, placement="peri",
                      norm="rmsnorm", qk_norm=True, pos="rope", mlp="swiglu", attn_cap=50.0,
                      final_cap=30.0, z_loss=1e-4),
    "smoke": dict(V=64, C=32, L=2, H=2, Fd=64, T=16, B=2, placement="peri", norm="rmsnorm",
                  qk_norm=True, pos="rope", mlp="swiglu", attn_cap=50.0, final_cap=30.0,
                  z_loss=1e-4),
}


class DyT(nn.Module):
    """gamma * tanh(alpha x), alpha one learnable scalar (Zhu et al. 2025), no bias."""

    def __init__(self, n, alpha):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha))
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.weight * torch.tanh(self.alpha * x)


def make_norm(kind, n, alpha=0.5):
    if kind == "dyt":
        return DyT(n, alpha)
    return nn.LayerNorm(n, bias=False) if kind == "layernorm" else nn.RMSNorm(n, eps=1e-5)


def rope_tables(T, D, theta=10000.0):
    inv = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    a = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(a).float(), torch.sin(a).float()


def apply_rope(x, cos, sin):  # x (B, H, T, D), rotate-half
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.H, self.C, self.cap = c["H"], c["C"], c["attn_cap"]
        D = c["C"] // c["H"]
        self.wqkv = nn.Linear(c["C"], 3 * c["C"], bias=False)
        self.wo = nn.Linear(c["C"], c["C"], bias=False)
        self.q_norm = nn.RMSNorm(D, eps=1e-5) if c["qk_norm"] else None
        self.k_norm = nn.RMSNorm(D, eps=1e-5) if c["qk_norm"] else None
        self.rope = c["pos"] == "rope"

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.wqkv(x).view(B, T, 3, self.H, C // self.H).permute(2, 0, 3, 1, 4)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rope:
            q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
        if self.cap > 0:  # softcapped attention (not expressible in SDPA)
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            s = self.cap * torch.tanh(s / self.cap)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
            o = torch.softmax(s, dim=-1) @ v
        else:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(B, T, C))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.kind = c["mlp"]
        Fi = 2 * c["Fd"] if self.kind == "swiglu" else c["Fd"]
        self.w_in = nn.Linear(c["C"], Fi, bias=False)
        self.w_out = nn.Linear(c["Fd"], c["C"], bias=False)

    def forward(self, x):
        h = self.w_in(x)
        if self.kind == "swiglu":
            g, u = h.chunk(2, dim=-1)
            a = F.silu(g) * u
        else:
            a = F.gelu(h, approximate="tanh")
        return self.w_out(a)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.peri = c["placement"] == "peri"
        self.n1, self.n2 = make_norm(c["norm"], c["C"], 0.8), make_norm(c["norm"], c["C"], 0.2)
        if self.peri:
            self.n1o, self.n2o = make_norm(c["norm"], c["C"]), make_norm(c["norm"], c["C"])
        self.attn, self.mlp = Attention(c), Mlp(c)

    def forward(self, x, cos, sin):
        a = self.attn(self.n1(x), cos, sin)
        x = x + (self.n1o(a) if self.peri else a)
        m = self.mlp(self.n2(x))
        return x + (self.n2o(m) if self.peri else m)


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok = nn.Embedding(c["V"], c["C"])
        self.pos = nn.Embedding(c["T"], c["C"]) if c["pos"] == "learned" else None
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["L"]))
        self.norm = make_norm(c["norm"], c["C"], 0.2)
        cos, sin = rope_tables(c["T"], c["C"] // c["H"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for n, p in self.named_parameters():  # GPT-2 init
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["L"]) if n.endswith(("wo.weight", "w_out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.tok(idx)
        if self.pos is not None:
            x = x + self.pos.weight[:T]
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        logits = self.norm(x) @ self.tok.weight.t()  # tied head
        cap = self.c["final_cap"]
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        logits = logits.view(-1, logits.shape[-1])
        loss = F.cross_entropy(logits, targets.view(-1))
        if self.c["z_loss"] > 0:
            loss = loss + self.c["z_loss"] * torch.logsumexp(logits, dim=-1).square().mean()
        return loss


def matmul_params(c):
    Fi = 2 * c["Fd"] if c["mlp"] == "swiglu" else c["Fd"]
    return c["L"] * (4 * c["C"] ** 2 + Fi * c["C"] + c["C"] * c["Fd"]) + c["V"] * c["C"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config", choices=sorted(CONFIGS))
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--autocast", action="store_true",
                    help="bf16 autocast around the forward and the loss (fp32 master weights)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = CONFIGS[a.config]
    if a.autocast:
        impl = "torch autocast bf16 " + ("compile" if a.compile else "eager")
    else:
        impl = "torch.compile" if a.compile else "torch eager"
    out = {"impl": impl, "config": a.config,
           "precision": "bf16-autocast" if a.autocast else "float32",
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "tokens_per_step": c["B"] * c["T"],
           "flops_per_token": 6.0 * matmul_params(c) + 12.0 * c["L"] * c["T"] * c["C"],
           "steps": a.steps, "warmup": a.warmup, "baseline_rss_mb": BASELINE_RSS,
           "imported_rss_mb": IMPORTED_RSS}
    try:
        model = GPT(c)
        out["params"] = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() == 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
        try:
            opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
            out["adamw"] = "fused"
        except Exception:  # noqa: BLE001
            opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=True)
            out["adamw"] = "foreach"
        fwd = torch.compile(model) if a.compile else model
        g = torch.Generator().manual_seed(42)
        ms, losses = [], []
        t_first = None
        for s in range(a.warmup + a.steps):
            idx = torch.randint(0, c["V"], (c["B"], c["T"]), generator=g)
            tgt = torch.randint(0, c["V"], (c["B"], c["T"]), generator=g)
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            # autocast covers the forward and the loss only; backward runs outside it (its ops
            # take the dtypes the forward recorded).
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
                loss = fwd(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            dt = (time.perf_counter() - t0) * 1e3
            if s == 0:
                t_first = dt
            losses.append(loss.item())
            if s == 0:
                out["loss_dtype"] = str(loss.dtype).replace("torch.", "")
            if s >= a.warmup:
                ms.append(dt)
        step = statistics.median(ms)
        out.update(step_ms=ms, step_ms_median=step, first_step_ms=t_first,
                   tokens_per_s=out["tokens_per_step"] / (step / 1e3),
                   loss_first=losses[0], loss_last=losses[-1], losses=losses)
        out["gflops"] = out["flops_per_token"] * out["tokens_per_s"] / 1e9
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        out["traceback"] = traceback.format_exc()[-2000:]
    out["peak_rss_mb"] = rss_mb("VmHWM:")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
