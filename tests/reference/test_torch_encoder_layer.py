"""normlab's post- and pre-norm block against torch.nn.TransformerEncoderLayer.

A third, independent implementation: PyTorch's own encoder layer (LayerNorm with bias, biased
linears, exact GELU, causal mask) with random weights mapped onto normlab's names. Checked twice:
the oracle's block against it (no driver needed), then normlab's parity_driver in block mode.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import harness
import ref_model
from ref_config import make_config
from ref_model import RefModel

torch.set_num_threads(1)

B, T, C, F_, V = 2, 8, 16, 24, 32
EPS = 1e-5
CASES = [("post", 2), ("post", 4), ("pre", 2), ("pre", 4)]


def block_config(placement, n_head):
    return make_config({
        "vocab_size": V, "n_layer": 1, "d_model": C, "n_head": n_head, "d_ff": F_, "seq_len": T,
        "placement": placement, "norm": "layernorm", "norm_bias": True, "norm_eps": EPS,
        "bias": True, "mlp": "gelu", "pos": "learned", "qk_norm": "none", "attn_softcap": 0.0,
        "final_softcap": 0.0, "tie_embeddings": True,
    }, train={"batch_size": B, "steps": 1})


def torch_layer(placement, n_head, seed):
    """The encoder layer in float64 with random float32-representable weights (norm gains in
    [0.5, 1.5], biases ~ N(0, 0.2^2), matrices ~ N(0, 1/fan_in))."""
    layer = nn.TransformerEncoderLayer(d_model=C, nhead=n_head, dim_feedforward=F_, dropout=0.0,
                                       activation="gelu", batch_first=True,
                                       norm_first=(placement == "pre"), layer_norm_eps=EPS,
                                       dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.startswith("norm") and name.endswith("weight"):
                v = torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5
            elif p.dim() == 1:
                v = 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5
            p.copy_(v.float().double())
    layer.train()  # train mode with dropout 0: the standard math path, not the fused fast path
    return layer


def name_map(placement):
    """normlab name -> TransformerEncoderLayer parameter name."""
    n1, n2 = ("norm_post", "norm_post") if placement == "post" else ("norm_in", "norm_in")
    pairs = {
        "attn.wqkv.weight": "self_attn.in_proj_weight", "attn.wqkv.bias": "self_attn.in_proj_bias",
        "attn.wo.weight": "self_attn.out_proj.weight", "attn.wo.bias": "self_attn.out_proj.bias",
        "mlp.w_in.weight": "linear1.weight", "mlp.w_in.bias": "linear1.bias",
        "mlp.w_out.weight": "linear2.weight", "mlp.w_out.bias": "linear2.bias",
        f"attn.{n1}.weight": "norm1.weight", f"attn.{n1}.bias": "norm1.bias",
        f"mlp.{n2}.weight": "norm2.weight", f"mlp.{n2}.bias": "norm2.bias",
    }
    return {f"blocks.0.{k}": v for k, v in pairs.items()}


def torch_reference(layer, x, dy):
    """y, dx = d sum(y * dy) / dx and the parameter gradients of the torch layer, in float64."""
    x = x.double().clone().requires_grad_(True)
    mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    y = layer(x, src_mask=mask, is_causal=True)
    layer.zero_grad()
    (y * dy.double()).sum().backward()
    return y.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters()}


def setup_case(placement, n_head, seed):
    cfg = block_config(placement, n_head)
    model = RefModel(cfg)
    layer = torch_layer(placement, n_head, seed)
    mapping = name_map(placement)
    assert set(mapping) == set(model.block_param_names()), (
        sorted(set(mapping) ^ set(model.block_param_names())))
    tp = dict(layer.named_parameters())
    params = model.random_params(seed=seed + 1)  # embeddings and final norm: unused in block mode
    for ours, theirs in mapping.items():
        assert params[ours].shape == tp[theirs].shape, (ours, theirs)
        params[ours] = tp[theirs].detach().float()
    gen = torch.Generator().manual_seed(seed + 2)
    x = torch.randn(B, T, C, generator=gen)
    dy = torch.randn(B, T, C, generator=gen)
    y, dx, tgrads = torch_reference(layer, x, dy)
    ref = {"y": y, "dx": dx}
    ref.update({f"grad.{ours}": tgrads[theirs] for ours, theirs in mapping.items()})
    return cfg, model, params, x, dy, ref


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_torch_encoder_layer")
    yield s
    s.emit()


@pytest.mark.parametrize("placement,n_head", CASES, ids=[f"{p}-H{h}" for p, h in CASES])
def test_oracle_block_matches_torch_layer(placement, n_head):
    _, model, params, x, dy, ref = setup_case(placement, n_head, seed=10 * n_head)
    ours = model.block_grads(params, x, dy)
    assert set(ours) == set(ref)
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], rtol=1e-10, atol=1e-10, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize("placement,n_head", CASES, ids=[f"{p}-H{h}" for p, h in CASES])
def test_driver_block_matches_torch_layer(placement, n_head, tmp_path, summary):
    cfg, model, params, x, dy, ref = setup_case(placement, n_head, seed=10 * n_head)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    label = f"encoder-{placement}-H{n_head}"
    got_grads = {k for k in got if k.startswith("grad.")}
    want_grads = {f"grad.{n}" for n in model.block_param_names()}
    assert want_grads <= got_grads, f"[{label}] driver lacks {sorted(want_grads - got_grads)}"
    # The driver may also write the rest of the model's gradients; block mode never touches them.
    others = got_grads - want_grads
    assert others <= {f"grad.{n}" for n in model.param_names()}, (
        f"[{label}] unknown gradients {sorted(others - {f'grad.{n}' for n in model.param_names()})}")
    nonzero = sorted(k for k in others if got[k].abs().max() != 0)
    assert not nonzero, f"[{label}] block mode changed gradients outside block 0: {nonzero}"
    harness.check(label, got, ref, ["y", "dx"] + sorted(want_grads), summary)
