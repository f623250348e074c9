"""Parity of normlab's LayerScale (model.residual_scale = layerscale, src/ops/residual_scale.h)
with x-transformers' own module (PyPI x-transformers 2.31.10: x_transformers.x_transformers.
LayerScale, out = fn(x) * (gamma + unit_offset), and its TransformerBlock built with
use_layerscale), on the same inputs and parameters, forward and gradients:

1. One wrapped branch: LayerScale around a linear map, x + LayerScale(fn)(x), against the PyTorch
   oracle's sublayer formula (tests/reference/ref_model.py: s = x + a * g), plain and with
   x-transformers' unit offset (gamma stored as lambda - 1: normlab's res_scale is gamma + 1),
   in float64.
2. A whole block: x-transformers' TransformerBlock (causal self-attention without biases, exact
   GELU MLP with biases, unit-offset bias-free LayerNorms, LayerScale with unit offset; softmax in
   float64) against normlab's block 0 (parity_driver in block mode) and against the oracle's block
   in float64, for pre-norm (x + l * F(N(x))) and post-norm (N(x + l * F(x))).
   Not peri: x-transformers scales the branch before its sandwich norm, x + N_out(l * F(N_in x)),
   normlab after it, x + l * N_out(F(N_in x)) (docs/cli.md, "Residual branch scale": a scale in
   front of a norm would be normalised away).

x-transformers has no ReZero or SkipInit module (a scalar gate); those are held to the oracle by
tests/reference/test_parity.py. Largest errors measured (x86-64, 2 cores, torch CPU; normlab float32
against float64; printed with -s), relative to the largest entry of the reference tensor:
  - a block (2 cases, tolerance 1e-4): y 2.4e-7, dx 2.6e-7, parameter gradients (res_scale
    included) 2.8e-7;
  - the wrapped branch and the oracle's block against x-transformers' in float64: within 1e-12
    and 1e-10.
The whole file runs in about 3 s.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_residual_scale_parity.py
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
from ref_model import RefModel, block_plans  # noqa: E402

from xt_block import check_oracle_block, f32, link_linears, reference  # noqa: E402
from x_transformers.x_transformers import LayerScale, TransformerBlock  # noqa: E402

torch.set_num_threads(1)

B, T, C, H, F_, V = 2, 8, 16, 2, 24, 32


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_residual_scale_parity")
    yield s
    s.emit()


# ----------------------------------------------------------------------------------------------
# 1. One wrapped branch


@pytest.mark.parametrize("unit_offset", [False, True], ids=["plain", "offset"])
def test_wrapped_branch_matches_x_transformers(unit_offset):
    gen = torch.Generator().manual_seed(5 + unit_offset)
    fn = torch.nn.Linear(C, C, bias=False).double()
    mod = LayerScale(fn, C, init_value=0.1, unit_offset=unit_offset).double()
    lam = torch.rand(C, generator=gen, dtype=torch.float64) + 0.5
    with torch.no_grad():
        mod.gamma.copy_(lam - float(unit_offset))
    x = torch.randn(B, T, C, generator=gen, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(B, T, C, generator=gen, dtype=torch.float64)
    y = x + mod(x)
    (y * dy).sum().backward()

    # The oracle's sublayer with norms off: s = x + a * F(x), a = gamma + offset.
    cfg = make_config({"vocab_size": V, "n_layer": 1, "d_model": C, "n_head": H, "d_ff": F_,
                       "seq_len": T, "placement": "reordered", "residual_scale": "layerscale"})
    model = RefModel(cfg)
    plan = block_plans(cfg["model"])[0]
    plan = type(plan)(False, False, plan.alpha, False)  # no norm anywhere: the bare wrapped branch
    a = (mod.gamma.detach() + float(unit_offset)).clone().requires_grad_(True)
    w = fn.weight.detach().clone().requires_grad_(True)
    x2 = x.detach().clone().requires_grad_(True)
    params = {"blk.res_scale": a}
    y2 = model.sublayer(x2, params, "blk", plan, lambda u, p, prefix: u @ w.T)
    (y2 * dy).sum().backward()
    for name, ours, theirs in (("y", y2, y), ("dx", x2.grad, x.grad),
                               ("dgamma", a.grad, mod.gamma.grad), ("dW", w.grad, fn.weight.grad)):
        torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-12, atol=1e-12,
                                   msg=lambda m, n=name: f"{n}: {m}")


# ----------------------------------------------------------------------------------------------
# 2. A whole block

# (normlab placement, x-transformers keywords, the norm's index in (pre_branch, post_branch,
# post_main), normlab's norm site)
BLOCK_CASES = [("pre", {}, 0, "norm_in"), ("post", {"pre_norm": False}, 2, "norm_post")]
BLOCK_IDS = [c[0] for c in BLOCK_CASES]


def block_config(placement):
    return make_config({
        "vocab_size": V, "n_layer": 1, "d_model": C, "n_head": H, "d_ff": F_, "seq_len": T,
        "placement": placement, "norm": "layernorm", "norm_bias": False, "norm_gain_offset": 1.0,
        "mlp": "gelu", "mlp_bias": True, "pos": "learned", "qk_norm": "none",
        "residual_scale": "layerscale", "tie_embeddings": True},
        train={"batch_size": B, "steps": 1})


def x_block(extra, seed):
    """x-transformers' block in float64 with random float32-representable parameters: unit-offset
    gains and layer scales in [0.5, 1.5], biases ~ N(0, 0.2^2), matrices ~ N(0, 1/fan_in)."""
    block = TransformerBlock(C, heads=H, causal=True, attn_dim_head=C // H, ff_mult=F_ / C,
                             attn_custom_attn_fn=partial(torch.softmax, dim=-1),
                             use_layerscale=True, layerscale_init_value=0.1, **extra).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.endswith("gamma"):  # stored minus its unit offset (exactly: Sterbenz)
                v = f32(torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5) - 1.0
            elif p.dim() <= 1:
                v = 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5
            p.copy_(v if name.endswith("gamma") else f32(v))
    return block


def block_params(block, norm_index, site, params):
    """Writes the block's parameters into normlab's names; -> {normlab name: getter of the
    x-transformers gradient} for every block-0 parameter."""
    tp = dict(block.named_parameters())
    grads = {}
    for layer, sub in ((0, "attn"), (1, "mlp")):
        norm, ours = f"layers.{layer}.0.{norm_index}.gamma", f"blocks.0.{sub}."
        params[ours + site + ".weight"] = tp[norm].detach().float()
        grads[ours + site + ".weight"] = lambda n=norm: tp[n].grad
        scale = f"layers.{layer}.1.gamma"
        params[ours + "res_scale"] = (tp[scale].detach() + 1.0).float()
        grads[ours + "res_scale"] = lambda n=scale: tp[n].grad
    link_linears(tp, params, grads, "layers.0.1.fn.", "layers.1.1.fn.ff.")
    return grads


def block_case(placement, extra, norm_index, site, seed):
    cfg = block_config(placement)
    model = RefModel(cfg)
    block = x_block(extra, seed)
    params = model.random_params(seed=seed + 1)
    grads = block_params(block, norm_index, site, params)
    x, dy, ref = reference(block, model, grads, seed + 2)
    return cfg, model, params, x, dy, ref


@pytest.mark.parametrize("placement,extra,norm_index,site", BLOCK_CASES, ids=BLOCK_IDS)
def test_oracle_block_matches_x_transformers(placement, extra, norm_index, site):
    _, model, params, x, dy, ref = block_case(placement, extra, norm_index, site, seed=41)
    check_oracle_block(model, params, x, dy, ref)


@pytest.mark.parametrize("placement,extra,norm_index,site", BLOCK_CASES, ids=BLOCK_IDS)
def test_driver_block_matches_x_transformers(placement, extra, norm_index, site, tmp_path,
                                             summary):
    cfg, model, params, x, dy, ref = block_case(placement, extra, norm_index, site, seed=41)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    harness.check(f"block-layerscale-{placement}", got, ref, sorted(ref), summary)
