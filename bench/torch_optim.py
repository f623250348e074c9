#!/usr/bin/env python3
"""PyTorch's optimizer step on the parameter shapes of a normlab benchmark model (#36): the peer
of `normlab_bench optim` (bench/bench_optim.cpp), which prints the shapes this script reads.

    normlab_bench optim a --optim muon > a_muon.json
    python bench/torch_optim.py a_muon.json --threads 2 [--steps 10 --warmup 3]

What it times, median over --steps after --warmup, for the optimizer named in the JSON:
  adamw         torch.optim.AdamW(fused=True) over every tensor
  muon          torch.optim.Muon as shipped (Newton-Schulz in bfloat16) on the hidden matrices,
                q, k, v and gate/up apart as normlab splits them, plus fused AdamW on the rest;
                and "muon_float32": the same with the iteration in float32 (the reference's
                function without its bfloat16 cast), the peer of normlab's default
  stable_adamw  optimi.StableAdamW (foreach)
  adam_atan2    adam_atan2_pytorch.AdamAtan2
Prints one JSON object: {"optimizer", "threads", "torch": {variant: step_ms}}.
"""
import argparse
import json
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "reference"))
from ref_optim import ns_float32  # noqa: E402  (torch's Newton-Schulz without its bf16 cast)


def tensors(shapes, split):
    """(matrices, others): torch tensors with random values and gradients, matrices split into
    their row blocks when `split`."""
    g = torch.Generator().manual_seed(11)
    mats, rest = [], []
    for s in shapes:
        blocks = s["row_blocks"] or [s["shape"][0]] if s["matrix"] and split else [None]
        for rows in blocks:
            shape = [rows, s["shape"][1]] if rows is not None else s["shape"]
            p = torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.02)
            p.grad = torch.randn(*shape, generator=g) * 1e-3
            (mats if s["matrix"] and split else rest).append(p)
    return mats, rest


def median_ms(step, steps, warmup):
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        step()
        t = time.perf_counter() - t0
        if i >= warmup:
            times.append(t)
    times.sort()
    n = len(times)
    return 1e3 * (times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shapes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    j = json.load(open(a.shapes))
    name, shapes = j["optimizer"], j["shapes"]
    out = {}
    if name == "adamw":
        _, ps = tensors(shapes, split=False)
        opt = torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        out["adamw_fused"] = median_ms(opt.step, a.steps, a.warmup)
    elif name == "muon":
        import torch.optim._muon as tm
        for variant in ["muon_bf16", "muon_float32"]:
            if variant == "muon_float32":
                tm._zeropower_via_newtonschulz = ns_float32
            mats, rest = tensors(shapes, split=True)
            muon = torch.optim.Muon(mats, lr=1e-3, weight_decay=0.1)
            adam = torch.optim.AdamW(rest, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1,
                                     fused=True)

            def step():
                muon.step()
                adam.step()
            out[variant] = median_ms(step, a.steps, a.warmup)
    elif name == "stable_adamw":
        import optimi
        _, ps = tensors(shapes, split=False)
        opt = optimi.StableAdamW(ps, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True,
                                 triton=False)
        out["stable_adamw_optimi"] = median_ms(opt.step, a.steps, a.warmup)
    elif name == "adam_atan2":
        from adam_atan2_pytorch import AdamAtan2
        _, ps = tensors(shapes, split=False)
        opt = AdamAtan2(ps, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        out["adam_atan2"] = median_ms(opt.step, a.steps, a.warmup)
    print(json.dumps({"optimizer": name, "threads": a.threads, "torch": out}))


if __name__ == "__main__":
    main()
