"""The PyTorch oracle's optimiser, written from tests/reference/README.md: global-norm clipping,
AdamW with PyTorch semantics (torch.optim.AdamW's update) and the learning-rate schedule, and the
runs of a few steps on a RefModel (ref_model.py) that the parity tests compare with normlab's.

    run = adamw_run(model, params, idx, targets, n_steps=3)
    replay = adamw_replay(model, params, step_grads)      # the optimizer alone, on given gradients
"""
from __future__ import annotations

import math

import torch


def learning_rate(optim_cfg, total_steps, s):
    """LR at 0-based step s: linear warmup, then cosine / linear decay to lr * min_lr_ratio."""
    lr = optim_cfg["lr"]
    lr_min = lr * optim_cfg["min_lr_ratio"]
    warmup = optim_cfg["warmup_steps"]
    if s < warmup:
        return lr * (s + 1) / warmup
    p = min(1.0, max(0.0, (s - warmup) / max(1, total_steps - warmup)))
    schedule = optim_cfg["schedule"]
    if schedule == "cosine":
        return lr_min + (lr - lr_min) * 0.5 * (1.0 + math.cos(math.pi * p))
    if schedule == "linear":
        return lr - (lr - lr_min) * p
    return lr


def clip_grads(grads, grad_clip):
    """g *= min(1, grad_clip / (||g||_2 + 1e-6)) over all parameters; returns the norm before."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    if grad_clip > 0:
        coef = min(1.0, grad_clip / (norm + 1e-6))
        for g in grads.values():
            g.mul_(coef)
    return norm


class AdamW:
    """Decoupled weight decay, then Adam with bias correction (torch.optim.AdamW's update)."""

    def __init__(self, params, decayed, beta1, beta2, eps, weight_decay):
        self.decayed = decayed  # {name: bool}
        self.b1, self.b2, self.eps, self.wd = beta1, beta2, eps, weight_decay
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads, lr):
        self.t += 1
        bc1, bc2 = 1.0 - self.b1 ** self.t, 1.0 - self.b2 ** self.t
        for name, p in params.items():
            g = grads[name]
            if self.decayed[name]:
                p.mul_(1.0 - lr * self.wd)  # p -= lr * wd * p
            self.m[name].mul_(self.b1).add_((1.0 - self.b1) * g)
            self.v[name].mul_(self.b2).add_((1.0 - self.b2) * g * g)
            m_hat = self.m[name] / bc1
            v_hat = self.v[name] / bc2
            p.sub_(lr * m_hat / (torch.sqrt(v_hat) + self.eps))


def make_adamw(model, params):
    o = model.cfg["optim"]
    return AdamW(params, {n: model.decayed(n) for n in params}, o["beta1"], o["beta2"], o["eps"],
                 o["weight_decay"])


def adamw_run(model, params, idx, targets, n_steps):
    """n_steps of (forward + backward on the same batch, clip, AdamW at the scheduled LR).
    Returns {"param_after.<name>", "loss_step.<k>"}; loss_step.k is step k's forward loss
    (before its update), so loss_step.0 equals the plain forward's loss."""
    o = model.cfg["optim"]
    total = model.cfg["train"]["steps"]
    p = {k: v.detach().to(model.dtype).clone() for k, v in params.items()}
    opt = make_adamw(model, p)
    out = {}
    for k in range(n_steps):
        res = model.loss_and_grads(p, idx, targets)
        out[f"loss_step.{k}"] = res["loss"]
        grads = {n: res[f"grad.{n}"].clone() for n in p}
        clip_grads(grads, o["grad_clip"])
        opt.step(p, grads, learning_rate(o, total, k))
    for n, v in p.items():
        out[f"param_after.{n}"] = v
    return out


def adamw_replay(model, params, step_grads, storage=torch.float32):
    """The optimizer alone: clip, schedule and AdamW (as adamw_run) applied to given gradients,
    step_grads[k] = {name: gradient of step k before clipping}, in float64, with the parameters
    rounded to `storage` after every step (as a float32 model keeps them). Returns
    {"param_after.<name>"}."""
    o = model.cfg["optim"]
    total = model.cfg["train"]["steps"]
    p = {k: v.detach().to(torch.float64).clone() for k, v in params.items()}
    opt = make_adamw(model, p)
    for k, grads in enumerate(step_grads):
        g = {n: grads[n].detach().to(torch.float64).clone() for n in p}
        clip_grads(g, o["grad_clip"])
        opt.step(p, g, learning_rate(o, total, k))
        for v in p.values():
            v.copy_(v.to(storage))
    return {f"param_after.{n}": v for n, v in p.items()}


def ns_float32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's Newton-Schulz iteration (torch/optim/_muon.py, _zeropower_via_newtonschulz,
    written here from its formula) without the cast to bfloat16: X / max(||X||_F, eps), then
    `ns_steps` times A = X X^T, B = b A + c A A, X = a X + B X, on the wide orientation. The
    float32 peer of normlab's Muon; swapped into torch's Muon by the parity test and the benchmark,
    so that everything else is torch's own."""
    a, b, c = ns_coefficients
    x = grad.float()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        upd = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, upd, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x
