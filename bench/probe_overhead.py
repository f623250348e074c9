"""Overhead of normlab.torch.Probe on a PyTorch training step: config a of bench/ (V=256 C=384 L=6
H=6 F=1536 T=256 B=8, Pre-LN LayerNorm, gelu_tanh, learned positions, tied head) written
nanoGPT-style (F.scaled_dot_product_attention, so the probe recomputes the attention scores on
its probed steps), AdamW with clipping, trained with and without the probe at interval 25:
two identical models in one process, stepped alternately on the same batches (ABBA order), so
that both arms see the same load on a shared machine.

    OMP_NUM_THREADS=2 PYTHONPATH=build/python .venv/bin/python bench/probe_overhead.py
    STEPS=50 WARMUP=5 DEVICE=cuda python bench/probe_overhead.py
    MODE=compile ... bench/probe_overhead.py      # both arms torch.compile'd (inductor), the
                                                  # probe attached before compiling
    MODE=ddp OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 bench/probe_overhead.py
                                                  # both arms DDP (gloo on CPU), B rows per process

Timed: steps WARMUP+1 .. WARMUP+STEPS (STEPS/25 of them probed), each synchronised on the device
before its clock reads. Prints one JSON object: seconds per step of both arms, the overhead
(total probe time / total plain time - 1), the median per-step overhead of unprobed steps, the
extra seconds of each probed step over its plain twin, and the amortized overhead (the median
unprobed overhead + the median probed extra / (interval x the median plain step)), which one
slow step of a shared machine does not swing.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

STEPS = int(os.environ.get("STEPS", 50))
WARMUP = int(os.environ.get("WARMUP", 5))
INTERVAL = int(os.environ.get("INTERVAL", 25))
DEVICE = os.environ.get("DEVICE", "cpu")
MODE = os.environ.get("MODE", "eager")  # eager | compile | ddp
V, C, L, H, Fd, T, B = 256, 384, 6, 6, 1536, 256, 8


def build(dev):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(C, 3 * C, bias=False), nn.Linear(C, C, bias=False)

        def forward(self, x):
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in self.c_attn(x).split(C, 2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), Attention(), nn.LayerNorm(C)
            self.mlp = nn.Sequential(nn.Linear(C, Fd, bias=False), nn.GELU(approximate="tanh"),
                                     nn.Linear(Fd, C, bias=False))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = type("GPTConfig", (), dict(n_head=H, n_embd=C, vocab_size=V))
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                h=nn.ModuleList(Block() for _ in range(L)), ln_f=nn.LayerNorm(C)))
            self.lm_head = nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.transformer.wte.weight

        def forward(self, idx, tgt):
            x = self.transformer.wte(idx) + self.transformer.wpe.weight[:T]
            for blk in self.transformer.h:
                x = blk(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            return F.cross_entropy(logits.view(-1, V), tgt.reshape(-1))

    torch.manual_seed(0)
    model = GPT().to(dev)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)


def main() -> None:
    import torch

    import normlab.torch

    dev = torch.device(DEVICE)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rank = 0
    if MODE == "ddp":
        torch.distributed.init_process_group("gloo")
        rank = torch.distributed.get_rank()
    g = torch.Generator().manual_seed(1 + rank)  # each process its own rows
    data = torch.randint(0, V, (WARMUP + STEPS, B, T + 1), generator=g).to(dev)
    arms = {"plain": build(dev), "probe": build(dev)}
    with tempfile.TemporaryDirectory() as tmp:
        calls = {name: torch.nn.parallel.DistributedDataParallel(model) if MODE == "ddp" else
                 model for name, (model, _) in arms.items()}
        # the probe on what the loop calls (DDP: the wrapper), before compiling
        probe = normlab.torch.Probe(calls["probe"], arms["probe"][1], out=f"{tmp}/run",
                                    interval=INTERVAL)
        if MODE == "compile":
            calls = {name: torch.compile(model) for name, model in calls.items()}
        times: dict[str, list[float]] = {"plain": [], "probe": []}

        def step(name: str, s: int) -> None:
            _, opt = arms[name]
            model = calls[name]
            sync()
            t0 = time.perf_counter()
            loss = model(data[s, :, :-1], data[s, :, 1:])
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if name == "probe":
                probe.step(loss, grad_norm=norm)
            sync()
            times[name].append(time.perf_counter() - t0)

        for s in range(WARMUP + STEPS):  # ABBA: each arm first on every other step
            for name in (("plain", "probe") if s % 2 == 0 else ("probe", "plain")):
                step(name, s)
        probe.close()
    if MODE == "ddp":
        torch.distributed.destroy_process_group()
        if rank != 0:
            return
    t = {k: v[WARMUP:] for k, v in times.items()}
    probed = [i for i in range(WARMUP + 1, WARMUP + STEPS + 1) if i == 1 or i % INTERVAL == 0]
    pairs = list(zip(t["plain"], t["probe"], range(WARMUP + 1, WARMUP + STEPS + 1)))
    unprobed = [b / a - 1 for a, b, i in pairs if i not in probed]
    extra = [b - a for a, b, i in pairs if i in probed]
    print(json.dumps({
        "config": "a", "mode": MODE, "device": DEVICE, "torch_threads": torch.get_num_threads(),
        "steps": STEPS, "interval": INTERVAL, "probed_steps": len(probed),
        "plain_s_per_step": statistics.mean(t["plain"]),
        "probe_s_per_step": statistics.mean(t["probe"]),
        "overhead": sum(t["probe"]) / sum(t["plain"]) - 1,
        "unprobed_step_overhead_median": statistics.median(unprobed),
        "probed_step_extra_s": extra,
        # robust to a machine's hiccups: the median unprobed step's overhead plus the median
        # probed step's extra time spread over the interval
        "amortized_overhead": statistics.median(unprobed) + statistics.median(extra)
        / (INTERVAL * statistics.median(t["plain"])),
    }, indent=1))


if __name__ == "__main__":
    main()
