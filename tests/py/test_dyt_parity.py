"""Parity of normlab's DyT and Derf (model.norm = dyt | derf, src/ops/dyt.h) with x-transformers'
own modules (PyPI x-transformers 2.31.10: x_transformers.x_transformers.DynamicTanh and Derf, and
its TransformerBlock built with use_dynamic_tanh / use_derf), on the same inputs and parameters,
forward and gradients:

1. One norm site: normlab's parity_driver in norm mode (the model's own table of norm operations,
   src/model/norm_ops.h) against the module: y, dx, and the gradients of gamma, beta, alpha (and
   Derf's shift s). Both parametrizations of x-transformers: plain (unit_offset = False) and with
   unit offsets (AttentionLayers' default norm_add_unit_offset = True: gamma stored as gamma - 1,
   DyT's alpha as alpha - init_alpha, Derf's as alpha - 1), which maps onto normlab's
   model.norm_gain_offset = 1 for gamma, with the alpha offset folded into normlab's value of
   alpha (normlab's gain offset applies to gamma only); the gradients are the same either way.
   Inputs spread so that tanh and erf run from their linear part into saturation.
2. A whole block: x-transformers' TransformerBlock (causal self-attention without biases, exact
   GELU MLP with biases, unit-offset norms; its softmax kept in float64 instead of its default
   float32) against normlab's block 0 (parity_driver in block mode): DyT pre-norm (x-transformers
   asserts pre_norm for DyT) and peri (its sandwich_norm), Derf pre, post and peri.
3. The PyTorch oracle's block (tests/reference/ref_model.py, written from the papers' formulas)
   against the same TransformerBlock in float64.

x-transformers is installed without its unpinned torch (requirements-test.txt), as mup is.
Largest errors measured (x86-64, 2 cores, torch 2.13 CPU; normlab float32 against float64;
printed with -s), relative to the largest entry of the reference tensor:
  - one site (12 cases, tolerance 2e-6): y 1.1e-7, dx 2.1e-7, dgamma 2.9e-7, dbeta 2.5e-7;
    dalpha and dshift, sums of 960 terms of both signs, relative to the sum of |terms| (the
    scale of float32's summation error): 4.6e-8 and 1.1e-8 (relative to the sums themselves up
    to 4.8e-6);
  - a block (5 cases, tolerance 1e-4): y 2.7e-7, dx 3.7e-7, parameter gradients 8.2e-6 (a
    norm's alpha, the same kind of sum);
  - the oracle's block against x-transformers' in float64: within 1e-10.
The whole file runs in about 5 s.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_dyt_parity.py
"""
from __future__ import annotations

import pathlib
import sys
from functools import partial

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import harness  # noqa: E402
from ref_config import make_config  # noqa: E402
from ref_model import RefModel  # noqa: E402

from xt_block import check_oracle_block, f32, link_linears, reference  # noqa: E402
from x_transformers.x_transformers import Derf, DynamicTanh, TransformerBlock  # noqa: E402

torch.set_num_threads(1)

SITE_TOL = 2e-6
B, T, C, H, F_, V = 2, 8, 16, 2, 24, 32


# ----------------------------------------------------------------------------------------------
# 1. One norm site


def site_module(kind, width, alpha, unit_offset, gen):
    """The x-transformers module in float64 with random parameters: gamma in [0.5, 1.5], beta ~
    N(0, 0.2^2), the given alpha, Derf's s ~ N(0, 0.3^2); -> (module, normlab parameters)."""
    if kind == "dyt":
        mod = DynamicTanh(width, init_alpha=alpha, unit_offset=unit_offset).double()
        alpha_param, alpha_offset = mod.pre_tanh_scale, (alpha if unit_offset else 0.0)
    else:
        mod = Derf(width, init_alpha=alpha, unit_offset=unit_offset).double()
        alpha_param, alpha_offset = mod.alpha, (1.0 if unit_offset else 0.0)
    g_offset = 1.0 if unit_offset else 0.0
    gamma = f32(torch.rand(width, generator=gen, dtype=torch.float64) + 0.5)
    beta = f32(0.2 * torch.randn(width, generator=gen, dtype=torch.float64))
    with torch.no_grad():
        mod.gamma.copy_(gamma - g_offset)
        mod.beta.copy_(beta)
        alpha_param.fill_(alpha - alpha_offset)
        if kind == "derf":
            mod.s.fill_(float(f32(0.3 * torch.randn((), generator=gen, dtype=torch.float64))))
    # normlab: w = gamma - norm_gain_offset, the same bias, alpha's value, the same shift.
    params = {"norm.weight": mod.gamma.detach().clone(), "norm.bias": beta,
              "norm.alpha": (alpha_param.detach() + alpha_offset).reshape(1)}
    if kind == "derf":
        params["norm.shift"] = mod.s.detach().reshape(1).clone()
    return mod, params


def site_config(kind, unit_offset, width):
    return make_config({"vocab_size": V, "n_layer": 1, "d_model": width, "n_head": 1,
                        "d_ff": 8, "seq_len": 8, "norm": kind, "norm_bias": True,
                        "norm_gain_offset": 1.0 if unit_offset else 0.0, "pos": "learned"})


SITE_CASES = [(kind, unit_offset, alpha) for kind in ("dyt", "derf")
              for unit_offset in (False, True) for alpha in (0.5, 0.8, 1.7)]


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_dyt_parity")
    yield s
    s.emit()


@pytest.mark.parametrize("kind,unit_offset,alpha", SITE_CASES,
                         ids=[f"{k}-{'offset' if u else 'plain'}-a{a}" for k, u, a in SITE_CASES])
def test_norm_site_matches_x_transformers(kind, unit_offset, alpha, tmp_path, summary):
    N, W = 40, 24
    gen = torch.Generator().manual_seed(int(alpha * 10) + 7 * unit_offset + 100 * (kind == "derf"))
    mod, params = site_module(kind, W, alpha, unit_offset, gen)
    x = f32(2.0 * torch.randn(N, W, generator=gen, dtype=torch.float64) + 0.3)
    dy = f32(torch.randn(N, W, generator=gen, dtype=torch.float64))
    # Some inputs far into saturation, some in the linear part.
    assert (alpha * x.abs() > 3).any() and (alpha * x.abs() < 0.1).any()

    xr = x.clone().requires_grad_(True)
    y = mod(xr)
    mod.zero_grad()
    (y * dy).sum().backward()
    ref = {"y": y.detach(), "dx": xr.grad, "grad.norm.weight": mod.gamma.grad,
           "grad.norm.bias": mod.beta.grad}
    if kind == "dyt":
        ref["grad.norm.alpha"] = mod.pre_tanh_scale.grad.reshape(1)
    else:
        ref["grad.norm.alpha"] = mod.alpha.grad.reshape(1)
        ref["grad.norm.shift"] = mod.s.grad.reshape(1)

    cfg = site_config(kind, unit_offset, W)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="norm")
    assert {k for k in got if k.startswith("grad.")} == {k for k in ref if k.startswith("grad.")}
    label = f"site-{kind}-{'offset' if unit_offset else 'plain'}-a{alpha}"
    errs = harness.compare(got, ref, sorted(ref))
    # dalpha = sum dz x and dshift = sum dz are sums of N W = 960 terms of both signs: normlab's
    # float32 sum errs by a fraction of sum |term|, not of the (smaller) sum itself.
    terms = reduction_terms(mod, kind, x, dy)
    for n, t in terms.items():
        errs[n] = (errs[n][1] / float(t.abs().sum()), errs[n][1])
    for n, (rel, _) in errs.items():
        summary.record("site." + n.split(".")[-1], rel, label, n)
    bad = {n: rel for n, (rel, _) in errs.items() if not rel <= SITE_TOL}
    assert not bad, f"[{label}] over {SITE_TOL:g}: {bad}"


def reduction_terms(mod, kind, x, dy):
    """The terms dz x of dalpha and dz of dshift (dz = d sum(y dy) / dz at z = alpha x + s), in
    float64, from the module's own forward on z."""
    if kind == "dyt":
        a, s = mod.pre_tanh_scale + mod.pre_tanh_scale_offset, 0.0
        gamma = mod.gamma + mod.gamma_offset
        phi = torch.tanh
    else:
        a, s = mod.alpha + mod.scale_offset, mod.s
        gamma = mod.gamma + mod.scale_offset
        phi = torch.erf
    z = (x * a.detach() + (s.detach() if torch.is_tensor(s) else s)).requires_grad_(True)
    ((phi(z) * gamma.detach() + mod.beta.detach()) * dy).sum().backward()
    out = {"grad.norm.alpha": z.grad * x}
    if kind == "derf":
        out["grad.norm.shift"] = z.grad
    return out


# ----------------------------------------------------------------------------------------------
# 2, 3. A whole block

# (kind, normlab placement, x-transformers keywords)
BLOCK_CASES = [("dyt", "pre", {}), ("dyt", "peri", {"sandwich_norm": True}),
               ("derf", "pre", {}), ("derf", "post", {"pre_norm": False}),
               ("derf", "peri", {"sandwich_norm": True})]
DYT_INIT_ALPHA = 0.8


def block_config(kind, placement):
    return make_config({
        "vocab_size": V, "n_layer": 1, "d_model": C, "n_head": H, "d_ff": F_, "seq_len": T,
        "placement": placement, "norm": kind, "norm_bias": True, "norm_gain_offset": 1.0,
        "mlp": "gelu", "mlp_bias": True, "pos": "learned", "qk_norm": "none",
        "tie_embeddings": True}, train={"batch_size": B, "steps": 1})


def x_block(kind, extra, seed):
    """x-transformers' block in float64 with random float32-representable parameters: unit-offset
    gains in [0.5, 1.5], alphas in [0.5, 1.5], biases and shifts ~ N(0, 0.2^2), matrices ~
    N(0, 1/fan_in)."""
    norm = ({"use_dynamic_tanh": True, "dynamic_tanh_init_alpha": DYT_INIT_ALPHA}
            if kind == "dyt" else {"use_derf": True})
    # attn_custom_attn_fn: the softmax in the scores' own precision. x-transformers' default
    # computes it in float32 (Attend: softmax(..., dtype=torch.float32)), which would limit a
    # float64 reference to float32's round-off.
    block = TransformerBlock(C, heads=H, causal=True, attn_dim_head=C // H, ff_mult=F_ / C,
                             attn_custom_attn_fn=partial(torch.softmax, dim=-1),
                             **norm, **extra).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            leaf = name.rsplit(".", 1)[1]
            if leaf == "gamma":
                v = torch.rand(p.shape, generator=gen, dtype=torch.float64) - 0.5
            elif leaf in ("pre_tanh_scale", "alpha"):  # stored minus its unit offset
                offset = DYT_INIT_ALPHA if leaf == "pre_tanh_scale" else 1.0
                v = f32(torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5) - offset
            elif p.dim() <= 1:
                v = 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5
            p.copy_(v if leaf in ("pre_tanh_scale", "alpha") else f32(v))
    return block


def norm_sites(placement):
    """x-transformers' norm index in a layer's (pre_branch, post_branch, post_main) -> normlab's."""
    return {"pre": {0: "norm_in"}, "peri": {0: "norm_in", 1: "norm_out"},
            "post": {2: "norm_post"}}[placement]


def block_params(block, kind, placement, params):
    """Writes the block's parameters into normlab's names (params: a full model's, from the
    oracle, whose embeddings and final norm block mode never reads); -> {normlab name: getter of
    the x-transformers gradient} for every block-0 parameter."""
    tp = dict(block.named_parameters())
    grads = {}
    for layer, sub in ((0, "attn"), (1, "mlp")):
        for i, site in norm_sites(placement).items():
            pre, ours = f"layers.{layer}.0.{i}.", f"blocks.0.{sub}.{site}."
            alpha = "pre_tanh_scale" if kind == "dyt" else "alpha"
            offset = DYT_INIT_ALPHA if kind == "dyt" else 1.0
            params[ours + "weight"] = tp[pre + "gamma"].detach().float()
            params[ours + "bias"] = tp[pre + "beta"].detach().float()
            params[ours + "alpha"] = (tp[pre + alpha].detach() + offset).reshape(1).float()
            grads[ours + "weight"] = lambda n=pre + "gamma": tp[n].grad
            grads[ours + "bias"] = lambda n=pre + "beta": tp[n].grad
            grads[ours + "alpha"] = lambda n=pre + alpha: tp[n].grad.reshape(1)
            if kind == "derf":
                params[ours + "shift"] = tp[pre + "s"].detach().reshape(1).float()
                grads[ours + "shift"] = lambda n=pre + "s": tp[n].grad.reshape(1)
    link_linears(tp, params, grads, "layers.0.1.", "layers.1.1.ff.")
    return grads


def block_case(kind, placement, extra, seed):
    cfg = block_config(kind, placement)
    model = RefModel(cfg)
    block = x_block(kind, extra, seed)
    params = model.random_params(seed=seed + 1)
    grads = block_params(block, kind, placement, params)
    x, dy, ref = reference(block, model, grads, seed + 2)
    return cfg, model, params, x, dy, ref


BLOCK_IDS = [f"{k}-{p}" for k, p, _ in BLOCK_CASES]


@pytest.mark.parametrize("kind,placement,extra", BLOCK_CASES, ids=BLOCK_IDS)
def test_oracle_block_matches_x_transformers(kind, placement, extra):
    _, model, params, x, dy, ref = block_case(kind, placement, extra, seed=31)
    check_oracle_block(model, params, x, dy, ref)


@pytest.mark.parametrize("kind,placement,extra", BLOCK_CASES, ids=BLOCK_IDS)
def test_driver_block_matches_x_transformers(kind, placement, extra, tmp_path, summary):
    cfg, model, params, x, dy, ref = block_case(kind, placement, extra, seed=31)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    harness.check(f"block-{kind}-{placement}", got, ref, sorted(ref), summary)
