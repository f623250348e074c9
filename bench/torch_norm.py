#!/usr/bin/env python3
"""One norm site per call in PyTorch, the peer of `normlab_bench norm` (bench/bench_norm.cpp):
nn.LayerNorm (no bias), nn.RMSNorm, and DyT / Derf as the papers write them (a learnable scalar
alpha, Derf's shift s, a per-channel gain; no bias), on random float32 inputs of ROWS x COLS.
`warmup` calls, then the median over `steps` calls of the forward, the backward (out.backward with
a fixed upstream gradient, into x.grad and the parameters' .grad) and the two together, eager or
under torch.compile. Prints one JSON object.

    python bench/torch_norm.py dyt --rows 2048 --cols 384 --threads 2 [--compile]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn


class PointwiseNorm(nn.Module):
    """gamma * phi(alpha x + s): DyT (tanh, no shift) or Derf (erf, a learnable shift)."""

    def __init__(self, n, phi, shift):
        super().__init__()
        self.phi = phi
        self.alpha = nn.Parameter(torch.full((1,), 0.5))
        self.shift = nn.Parameter(torch.zeros(1)) if shift else None
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        z = self.alpha * x
        if self.shift is not None:
            z = z + self.shift
        return self.weight * self.phi(z)


def make(kind, n):
    if kind == "layernorm":
        return nn.LayerNorm(n, bias=False)
    if kind == "rmsnorm":
        return nn.RMSNorm(n, eps=1e-5)
    if kind == "dyt":
        return PointwiseNorm(n, torch.tanh, False)
    if kind == "derf":
        return PointwiseNorm(n, torch.erf, True)
    raise SystemExit(f"unknown norm kind {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--cols", type=int, default=384)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(7)
    m = make(a.kind, a.cols)
    f = torch.compile(m) if a.compile else m
    x = torch.randn(a.rows, a.cols, requires_grad=True)
    dout = torch.randn(a.rows, a.cols)
    fwd, bwd = [], []
    for s in range(a.warmup + a.steps):
        x.grad = None
        t0 = time.perf_counter()
        out = f(x)
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        if s >= a.warmup:
            fwd.append((t1 - t0) * 1e6)
            bwd.append((t2 - t1) * 1e6)
    both = [p + q for p, q in zip(fwd, bwd)]
    print(json.dumps({"impl": "compile" if a.compile else "eager", "kind": a.kind,
                      "rows": a.rows, "cols": a.cols, "threads": a.threads, "steps": a.steps,
                      "fwd_us": statistics.median(fwd), "bwd_us": statistics.median(bwd),
                      "total_us": statistics.median(both), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
