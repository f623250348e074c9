"""Parity of normlab's attention gate and attention sink (model.attn_gate, model.attn_sink;
src/ops/attn_gate.h, src/ops/attention.h) with references from PyPI, on the same inputs and
parameters, forward and gradients, through normlab's block 0 (parity_driver in block mode):

1. The gate against x-transformers 2.31.10 (x_transformers.x_transformers.Attention, built into a
   TransformerBlock): `attn_gate_values=True` is `to_v_gate`, a bias-less Linear(dim, heads * dim
   head) of the attention input x (after the pre-norm), sigmoid, multiplying the heads before
   `to_out`: model.attn_gate = elementwise exactly; with `attn_gate_values_headwise=True` the
   Linear has `heads` outputs broadcast over each head: model.attn_gate = head exactly.
   (x-transformers' other option, `gate_value_heads`, is Linear(dim, heads) WITH a bias, "Attend
   to nothing"; it matches `head` only with the bias at 0, so it is not used.) Pre- and post-norm
   blocks; and the PyTorch oracle's block (tests/reference/ref_model.py, written from Qiu et al.'s
   formula) against the same TransformerBlock in float64.
2. The gate against transformers' Qwen3-Next attention (Qwen3NextAttention, transformers 5.25,
   from a config with random weights): its q_proj has 2 * heads * head_dim outputs, per head
   [query | gate], and attn_output * sigmoid(gate) feeds o_proj: model.attn_gate = elementwise
   with the gate rows of q_proj as normlab's wg. Its q_norm/k_norm are zero-centred RMSNorms per
   head (normlab: qk_norm = rmsnorm, scope head, norm_gain_offset = 1), its RoPE rotate-half;
   partial_rotary_factor is set to 1 (normlab rotates whole heads). Run inside a Pre-Norm block
   written here in torch (zero-centred RMSNorms, a GELU MLP).
3. The sink against transformers' gpt-oss attention (GptOssAttention with eager_attention_forward,
   `sinks` one learned logit per head concatenated to the scores, softmax, the sink's column
   dropped: model.attn_sink = learned; with the sinks at 0: model.attn_sink = one), with its
   biases, grouped key/value heads, rotate-half RoPE and, in one case, a sliding window (the
   additive mask is built here: query i sees i - W < j <= i), inside a Pre-Norm block written
   here in torch (RMSNorm, a GELU MLP); the oracle's block against the same block in float64.

Largest errors measured (x86-64, 2 cores, torch 2.13 CPU, transformers 5.25; normlab float32
against the float64 reference; the harness's relative error: max |diff| over the largest entry of
the reference tensor; tolerance 1e-4), 8 cases:
  - gate vs x-transformers (4 cases): y 2.2e-7, dx 2.9e-7, wg's gradient 3.8e-7 (abs 7.2e-7),
    every gradient 5.7e-7;
  - gate vs Qwen3-Next (elementwise): y 1.9e-7, dx 2.3e-7, wg 2.4e-7 (abs 1.9e-6), every gradient
    5.5e-7;
  - sink vs gpt-oss (3 cases): y 1.9e-7, dx 4.0e-7, the sink logits' gradient 9.7e-7 (abs 1.6e-6;
    the window case), every gradient 9.7e-7;
  - the oracle's block against the references in float64: within 1.1e-15 (x-transformers,
    gpt-oss), 2.1e-7 against Qwen3-Next (its QK RMSNorms compute in float32).
The whole file runs in about 20 s (most of it importing transformers).

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_attn_gate_sink_parity.py
"""
from __future__ import annotations

import math
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
from x_transformers.x_transformers import TransformerBlock  # noqa: E402
from transformers import GptOssConfig, Qwen3NextConfig  # noqa: E402
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention  # noqa: E402
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention  # noqa: E402

torch.set_num_threads(1)

B, T, C, H, F_, V = 2, 8, 16, 2, 24, 32


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_attn_gate_sink_parity")
    yield s
    s.emit()


# ----------------------------------------------------------------------------------------------
# 1. The gate against x-transformers

# (id, normlab placement, normlab attn_gate, x-transformers keywords, the norm's index in
# (pre_branch, post_branch, post_main), normlab's norm site)
XT_CASES = [
    ("elementwise-pre", "pre", "elementwise", {"attn_gate_values": True}, 0, "norm_in"),
    ("head-pre", "pre", "head", {"attn_gate_values": True, "attn_gate_values_headwise": True}, 0,
     "norm_in"),
    ("elementwise-post", "post", "elementwise", {"attn_gate_values": True, "pre_norm": False}, 2,
     "norm_post"),
    ("head-post", "post", "head",
     {"attn_gate_values": True, "attn_gate_values_headwise": True, "pre_norm": False}, 2,
     "norm_post"),
]


def xt_config(placement, gate):
    return make_config({
        "vocab_size": V, "n_layer": 1, "d_model": C, "n_head": H, "d_ff": F_, "seq_len": T,
        "placement": placement, "norm": "layernorm", "norm_bias": False, "norm_gain_offset": 1.0,
        "mlp": "gelu", "mlp_bias": True, "pos": "learned", "qk_norm": "none",
        "attn_gate": gate, "tie_embeddings": True},
        train={"batch_size": B, "steps": 1})


def xt_block(extra, seed):
    """x-transformers' block in float64, random float32-representable parameters: unit-offset
    gains in [0.5, 1.5] (stored minus 1), biases ~ N(0, 0.2^2), matrices ~ N(0, 1/fan_in), the
    gate's scaled up so that the sigmoids spread over (0, 1)."""
    block = TransformerBlock(C, heads=H, causal=True, attn_dim_head=C // H, ff_mult=F_ / C,
                             attn_custom_attn_fn=partial(torch.softmax, dim=-1), **extra).double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.endswith("gamma"):
                v = f32(torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5) - 1.0
            elif p.dim() <= 1:
                v = f32(0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                v = torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5
                v = f32(3.0 * v if "to_v_gate" in name else v)
            p.copy_(v)
    return block


def xt_params(block, norm_index, site, params):
    tp = dict(block.named_parameters())
    grads = {}
    for layer, sub in ((0, "attn"), (1, "mlp")):
        norm, ours = f"layers.{layer}.0.{norm_index}.gamma", f"blocks.0.{sub}.{site}.weight"
        params[ours] = tp[norm].detach().float()  # both store gamma - 1 (unit offset)
        grads[ours] = lambda n=norm: tp[n].grad
    link_linears(tp, params, grads, "layers.0.1.", "layers.1.1.ff.")
    gate = "layers.0.1.to_v_gate.weight"
    params["blocks.0.attn.wg.weight"] = tp[gate].detach().float()
    grads["blocks.0.attn.wg.weight"] = lambda: tp[gate].grad
    return grads


def xt_case(placement, gate, extra, norm_index, site, seed):
    cfg = xt_config(placement, gate)
    model = RefModel(cfg)
    block = xt_block(extra, seed)
    params = model.random_params(seed=seed + 1)
    grads = xt_params(block, norm_index, site, params)
    x, dy, ref = reference(block, model, grads, seed + 2)
    return cfg, model, params, x, dy, ref


@pytest.mark.parametrize("cid,placement,gate,extra,norm_index,site", XT_CASES,
                         ids=[c[0] for c in XT_CASES])
def test_oracle_gate_matches_x_transformers(cid, placement, gate, extra, norm_index, site):
    _, model, params, x, dy, ref = xt_case(placement, gate, extra, norm_index, site, seed=51)
    check_oracle_block(model, params, x, dy, ref)


@pytest.mark.parametrize("cid,placement,gate,extra,norm_index,site", XT_CASES,
                         ids=[c[0] for c in XT_CASES])
def test_driver_gate_matches_x_transformers(cid, placement, gate, extra, norm_index, site,
                                            tmp_path, summary):
    cfg, _, params, x, dy, ref = xt_case(placement, gate, extra, norm_index, site, seed=51)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    harness.check(f"xt-gate-{cid}", got, ref, sorted(ref), summary)


# ----------------------------------------------------------------------------------------------
# A Pre-Norm block around a transformers attention module, written here in torch:
#   x1 = x + attn(N1(x)),  y = x1 + W_out gelu(W_in N2(x1) + b_in) + b_out
# with RMSNorm N(x) = x / sqrt(mean(x^2) + eps) * (g0 + w).

EPS = 1e-5
HA, HKV, D = 4, 2, 4  # the transformers cases: grouped key/value heads, d_model 16


def rope_tables(theta=10000.0):
    """cos, sin (1, T, D/2) of rotate-half RoPE at positions 0..T-1 (normlab's and both models')."""
    freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    return torch.cos(ang)[None], torch.sin(ang)[None]


def additive_mask(window):
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    hidden = (j > i) | ((j <= i - window) if window > 0 else torch.zeros_like(j > i))
    return torch.zeros(T, T, dtype=torch.float64).masked_fill(hidden, float("-inf"))[None, None]


class HfBlock(torch.nn.Module):
    def __init__(self, attn, g0, full_rope):
        super().__init__()
        self.attn, self.g0 = attn, g0
        self.n1 = torch.nn.Parameter(torch.empty(C, dtype=torch.float64))
        self.n2 = torch.nn.Parameter(torch.empty(C, dtype=torch.float64))
        self.w_in = torch.nn.Linear(C, F_).double()
        self.w_out = torch.nn.Linear(F_, C).double()
        self.window = 0
        cos, sin = rope_tables()
        if full_rope:  # Qwen3-Next's cos/sin cover the whole head: [f, f] halves
            cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        self.cos, self.sin = cos, sin

    def norm(self, x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + EPS) * (self.g0 + w)

    def forward(self, x):
        out, _ = self.attn(self.norm(x, self.n1), (self.cos, self.sin), additive_mask(self.window))
        x1 = x + out
        h = self.w_in(self.norm(x1, self.n2))
        return x1 + self.w_out(0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0))))


def hf_randomize(block, seed, sinks=None):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name in ("n1", "n2") or name.endswith("norm.weight"):
                v = torch.rand(p.shape, generator=gen, dtype=torch.float64) + 0.5 - block.g0
            elif name.endswith("sinks"):
                v = torch.randn(p.shape, generator=gen, dtype=torch.float64) if sinks is None \
                    else torch.full(p.shape, float(sinks), dtype=torch.float64)
            elif p.dim() <= 1:
                v = 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                v = 1.5 * torch.randn(p.shape, generator=gen, dtype=torch.float64) / p.shape[1] ** 0.5
            p.copy_(f32(v))


def hf_common_params(block, tp, params, grads):
    for ours, theirs in (("attn.norm_in.weight", "n1"), ("mlp.norm_in.weight", "n2"),
                         ("mlp.w_in.weight", "w_in.weight"), ("mlp.w_in.bias", "w_in.bias"),
                         ("mlp.w_out.weight", "w_out.weight"), ("mlp.w_out.bias", "w_out.bias"),
                         ("attn.wo.weight", "attn.o_proj.weight")):
        params["blocks.0." + ours] = tp[theirs].detach().float()
        grads["blocks.0." + ours] = lambda n=theirs: tp[n].grad


def hf_config(extra):
    model = {"vocab_size": V, "n_layer": 1, "d_model": C, "n_head": HA, "n_kv_head": HKV,
             "d_ff": F_, "seq_len": T, "placement": "pre", "norm": "rmsnorm", "norm_eps": EPS,
             "mlp": "gelu", "mlp_bias": True, "pos": "rope", "rope_theta": 10000.0,
             "tie_embeddings": True}
    model.update(extra)
    return make_config(model, train={"batch_size": B, "steps": 1})


# ----------------------------------------------------------------------------------------------
# 2. The gate against Qwen3-Next


def qwen_case(seed):
    hc = Qwen3NextConfig(hidden_size=C, num_attention_heads=HA, num_key_value_heads=HKV,
                         head_dim=D, partial_rotary_factor=1.0, rms_norm_eps=EPS,
                         attention_bias=False, layer_types=["full_attention"],
                         num_hidden_layers=1, vocab_size=V)
    hc._attn_implementation = "eager"
    attn = Qwen3NextAttention(hc, layer_idx=0).double()
    block = HfBlock(attn, g0=1.0, full_rope=True).double()
    hf_randomize(block, seed)
    cfg = hf_config({"norm_gain_offset": 1.0, "qk_norm": "rmsnorm", "qk_norm_scope": "head",
                     "qk_norm_position": "pre_rope", "attn_gate": "elementwise"})
    model = RefModel(cfg)
    params = model.random_params(seed=seed + 1)
    tp = dict(block.named_parameters())
    grads = {}
    hf_common_params(block, tp, params, grads)
    # q_proj rows per head: [query (D) | gate (D)].
    qrows = torch.cat([torch.arange(h * 2 * D, h * 2 * D + D) for h in range(HA)])
    grows = qrows + D
    names = ["attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight"]
    wq = tp[names[0]].detach()
    params["blocks.0.attn.wqkv.weight"] = torch.cat(
        [wq[qrows], tp[names[1]].detach(), tp[names[2]].detach()]).float()
    grads["blocks.0.attn.wqkv.weight"] = lambda: torch.cat(
        [tp[names[0]].grad[qrows], tp[names[1]].grad, tp[names[2]].grad])
    params["blocks.0.attn.wg.weight"] = wq[grows].float()
    grads["blocks.0.attn.wg.weight"] = lambda: tp[names[0]].grad[grows]
    for which in ("q", "k"):
        n = f"attn.{which}_norm.weight"
        params[f"blocks.0.attn.{which}_norm.weight"] = tp[n].detach().float()
        grads[f"blocks.0.attn.{which}_norm.weight"] = lambda n=n: tp[n].grad
    x, dy, ref = reference(block, model, grads, seed + 2)
    return cfg, model, params, x, dy, ref


def test_oracle_gate_matches_qwen3_next():
    # Qwen3NextRMSNorm (the QK-norms) computes in float32 whatever its input: 1e-5, not 1e-10.
    _, model, params, x, dy, ref = qwen_case(seed=71)
    ours = model.block_grads(params, x, dy)
    assert set(ours) == set(ref)
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], rtol=1e-5, atol=1e-5,
                                   msg=lambda m, k=k: f"{k}: {m}")


def test_driver_gate_matches_qwen3_next(tmp_path, summary):
    cfg, _, params, x, dy, ref = qwen_case(seed=71)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    harness.check("qwen3-next-gate", got, ref, sorted(ref), summary)


# ----------------------------------------------------------------------------------------------
# 3. The sink against gpt-oss

# (id, normlab attn_sink, gpt-oss sinks (None: random), sliding window, soft-cap)
SINK_CASES = [("learned", "learned", None, 0), ("one", "one", 0.0, 0),
              ("learned-window", "learned", None, 3)]


def gptoss_case(sink, sinks, window, seed):
    hc = GptOssConfig(hidden_size=C, num_attention_heads=HA, num_key_value_heads=HKV, head_dim=D,
                      attention_bias=True, num_hidden_layers=1, vocab_size=V,
                      layer_types=["sliding_attention" if window else "full_attention"],
                      sliding_window=max(window, 1))
    hc._attn_implementation = "eager"
    attn = GptOssAttention(hc, layer_idx=0).double()
    block = HfBlock(attn, g0=0.0, full_rope=False).double()
    block.window = window
    hf_randomize(block, seed, sinks)
    extra = {"attn_qkv_bias": True, "attn_out_bias": True, "attn_sink": sink}
    if window:
        extra.update(sliding_window=window, layer_pattern="sliding")
    cfg = hf_config(extra)
    model = RefModel(cfg)
    params = model.random_params(seed=seed + 1)
    tp = dict(block.named_parameters())
    grads = {}
    hf_common_params(block, tp, params, grads)
    for suffix in ("weight", "bias"):
        names = [f"attn.{p}_proj.{suffix}" for p in ("q", "k", "v")]
        params[f"blocks.0.attn.wqkv.{suffix}"] = torch.cat([tp[n].detach() for n in names]).float()
        grads[f"blocks.0.attn.wqkv.{suffix}"] = lambda names=names: torch.cat(
            [tp[n].grad for n in names])
    params["blocks.0.attn.wo.bias"] = tp["attn.o_proj.bias"].detach().float()
    grads["blocks.0.attn.wo.bias"] = lambda: tp["attn.o_proj.bias"].grad
    if sink == "learned":
        params["blocks.0.attn.sink"] = tp["attn.sinks"].detach().float()
        grads["blocks.0.attn.sink"] = lambda: tp["attn.sinks"].grad
    x, dy, ref = reference(block, model, grads, seed + 2)
    return cfg, model, params, x, dy, ref


@pytest.mark.parametrize("cid,sink,sinks,window", SINK_CASES, ids=[c[0] for c in SINK_CASES])
def test_oracle_sink_matches_gpt_oss(cid, sink, sinks, window):
    _, model, params, x, dy, ref = gptoss_case(sink, sinks, window, seed=81)
    check_oracle_block(model, params, x, dy, ref)


@pytest.mark.parametrize("cid,sink,sinks,window", SINK_CASES, ids=[c[0] for c in SINK_CASES])
def test_driver_sink_matches_gpt_oss(cid, sink, sinks, window, tmp_path, summary):
    cfg, _, params, x, dy, ref = gptoss_case(sink, sinks, window, seed=81)
    got = harness.run_driver(tmp_path, cfg, params, {"x": x, "dy": dy}, mode="block")
    harness.check(f"gpt-oss-sink-{cid}", got, ref, sorted(ref), summary)
