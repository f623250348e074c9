"""Parity of normlab's nGPT (model.placement = ngpt; src/model/plan.cpp, src/ops/ngpt.h) with the
PyPI reference ngpt-pytorch 0.2.16 (nGPT_pytorch.nGPT.nGPT, built with manual_norm_weights = True:
raw weights normalised after each step by norm_weights_(), as the paper and normlab do;
add_value_residual = False: a ResFormer addition the paper does not have; alpha_init 0.05, the
paper's; ff_expand_factor chosen so that its SwiGLU width is normlab's d_ff), on the same weights and
tokens: logits, loss, every gradient, and one AdamW step followed by the re-normalisation.

normlab implements the paper (Loshchilov et al. 2024, eqs. 10-20), where ngpt-pytorch differs in
two details; the test maps them without a switch in normlab:
  1. s_qk: the paper (and NVIDIA's code) scales queries and keys by s_qk; ngpt-pytorch only the
     queries, with a parameter stored at scale 1 / d_model instead of 1 / sqrt(d_model). The test
     replaces ngpt-pytorch's query scale by a module computing (s_qk_eff)^2 from normlab's stored
     s_qk (s_qk_eff = sqrt(d_model) * stored), which gives the same logits q.k s_qk^2 and lets
     autograd and AdamW act on normlab's parameter.
  2. RoPE: rotary-embedding-torch rotates interleaved pairs (2i, 2i + 1), normlab the halves
     (i, i + D/2), at the same frequencies; the query and key rows of each head (and s_qk) are
     permuted between the two layouts (q.k is invariant under a permutation applied to both).
The reference runs in float64, normlab in float32 (parity_driver). Largest errors measured
(x86-64, 2 cores, torch CPU; relative to the largest entry of the tensor's group, harness.compare;
printed with -s), over both cases: logits 1.4e-7, loss below float32's resolution (0 after
rounding both to float32), gradients 7.0e-7 (41 tensors), parameters after the AdamW step and the
re-normalisation 2.7e-6 (41 tensors). The whole file runs in about 15 s.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_ngpt_parity.py
"""
from __future__ import annotations

import importlib
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import harness  # noqa: E402
from ref_config import make_config  # noqa: E402

ng = importlib.import_module("nGPT_pytorch.nGPT")
# ngpt-pytorch defines __eq__ without __hash__ on its modules, which named_modules() needs.
for _cls in (ng.nGPT, ng.Attention, ng.FeedForward, ng.NormLinear, ng.Scale):
    _cls.__hash__ = object.__hash__

torch.set_num_threads(1)

B, T, V, L, C, H, F_ = 2, 8, 32, 2, 16, 2, 24
D = C // H
LR = 1e-2


def half_of_interleaved():
    """perm[i] = the interleaved index of normlab's (half-split) index i within one head."""
    return [2 * i for i in range(D // 2)] + [2 * i + 1 for i in range(D // 2)]


PERM = torch.tensor([h * D + j for h in range(H) for j in half_of_interleaved()])


class SqkSquared(torch.nn.Module):
    """Stands in for ngpt-pytorch's query scale: normlab's stored s_qk (normlab's channel order),
    returning (sqrt(C) * s_qk)^2 in ngpt-pytorch's interleaved order."""

    def __init__(self, stored):
        super().__init__()
        self.scale = torch.nn.Parameter(stored.clone())
        self.inv = torch.argsort(PERM)

    def forward(self):
        return ((C ** 0.5) * self.scale)[self.inv] ** 2


def build(tied, seed):
    torch.manual_seed(seed)
    model = ng.nGPT(num_tokens=V, dim=C, depth=L, dim_head=D, heads=H, ff_expand_factor=F_ * 3 / (2 * C),
                    manual_norm_weights=True, tied_embedding=tied, add_value_residual=False,
                    alpha_init=0.05).double()
    assert model.layers[0][1].fn.dim_inner == F_
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # the learned scales away from their starting values
        for name, p in model.named_parameters():
            if name.endswith(".scale"):
                p.mul_(0.7 + 0.6 * torch.rand(p.shape, generator=gen, dtype=torch.float64))
    for l in range(L):
        attn = model.layers[l][0].fn
        stored = torch.rand(C, generator=gen, dtype=torch.float64) * 0.3 + 0.15  # ~ 1/sqrt(C)
        attn.qk_scale = SqkSquared(stored)
    return model


def links(model, tied):
    """{normlab name: (getter of ngpt-pytorch's tensor in normlab's layout)} for a tensor t (the
    weight, its gradient or its value after the step)."""
    out = {"tok_emb.weight": lambda t: t("token_embed.linear.weight")}
    for l in range(L):
        a, m = f"layers.{l}.0.", f"layers.{l}.1."
        out[f"blocks.{l}.attn.wqkv.weight"] = lambda t, a=a: torch.cat(
            [t(a + "fn.to_q.linear.weight")[PERM], t(a + "fn.to_k.linear.weight")[PERM],
             t(a + "fn.to_v.linear.weight")])
        out[f"blocks.{l}.attn.s_qk"] = lambda t, a=a: t(a + "fn.qk_scale.scale")
        out[f"blocks.{l}.attn.wo.weight"] = lambda t, a=a: t(a + "fn.to_out.linear.weight")
        out[f"blocks.{l}.attn.alpha"] = lambda t, a=a: t(a + "branch_scale.scale")
        out[f"blocks.{l}.mlp.w_in.weight"] = lambda t, m=m: torch.cat(
            [t(m + "fn.to_gate.linear.weight"), t(m + "fn.to_hidden.linear.weight")])
        out[f"blocks.{l}.mlp.s_u"] = lambda t, m=m: t(m + "fn.hidden_scale.scale")
        out[f"blocks.{l}.mlp.s_v"] = lambda t, m=m: t(m + "fn.gate_scale.scale")
        out[f"blocks.{l}.mlp.w_out.weight"] = lambda t, m=m: t(m + "fn.to_out.linear.weight")
        out[f"blocks.{l}.mlp.alpha"] = lambda t, m=m: t(m + "branch_scale.scale")
    if not tied:
        out["lm_head.weight"] = lambda t: t("to_logits.linear.weight")
    out["s_z"] = lambda t: t("logit_scale.scale")
    return out


def config(tied):
    return make_config(
        model={"vocab_size": V, "n_layer": L, "d_model": C, "n_head": H, "d_ff": F_, "seq_len": T,
               "placement": "ngpt", "mlp": "swiglu", "tie_embeddings": tied,
               "ngpt_alpha_init": 0.05},
        optim={"lr": LR, "weight_decay": 0.0, "warmup_steps": 0, "grad_clip": 0.0,
               "schedule": "constant"},
        train={"steps": 1})


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_ngpt_parity")
    yield s
    s.emit()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_model_matches_ngpt_pytorch(tied, tmp_path, summary):
    model = build(tied, seed=3 + tied)
    link = links(model, tied)
    tp = dict(model.named_parameters())
    weights = {n: f(lambda k: tp[k].detach().clone()) for n, f in link.items()}
    gen = torch.Generator().manual_seed(11)
    idx = torch.randint(0, V, (B, T), generator=gen)
    tgt = torch.randint(0, V, (B, T), generator=gen)

    # The reference: logits, loss, gradients; then one AdamW step and the re-normalisation.
    logits = model(idx)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))
    model.zero_grad()
    loss.backward()
    ref = {"logits": logits.detach(), "loss": loss.detach().reshape(1), "ce": loss.detach().reshape(1)}
    for n, f in link.items():
        ref["grad." + n] = f(lambda k: tp[k].grad)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR,
                            betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    opt.step()
    model.norm_weights_()
    for n, f in link.items():
        ref["param_after." + n] = f(lambda k: tp[k].detach())

    got = harness.run_driver(tmp_path, config(tied), weights, {"idx": idx, "targets": tgt},
                             adam_steps=1)
    names = list(ref)
    harness.check(f"ngpt_{'tied' if tied else 'untied'}", got, ref, names, summary)
    # The re-normalisation held in normlab: unit rows / columns after the step.
    for n in link:
        w = got["param_after." + n].double()
        if w.dim() == 2:
            dim = 0 if n.endswith(("wo.weight", "w_out.weight")) else 1
            assert torch.allclose(w.norm(dim=dim), torch.ones(w.shape[1 - dim], dtype=torch.float64),
                                  atol=1e-5), n
