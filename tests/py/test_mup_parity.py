"""Parity of normlab's μP (model.parametrization = "mup", src/model/mup.h) with Microsoft's `mup`
package: the same model built with mup's MuReadout / MuSharedReadout, set_base_shapes and MuAdamW
on the same widths has the same width shapes, the same initial variances, the same per-parameter
learning rates and weight decays, the same logits and loss, and the same first updates.

The torch side is written here from mup's own API, independently of normlab's C++: the base model
is derived from the rule of config.h (d_model = mup_base_width, d_ff and the query / key-value
widths scaled alike, the head size kept when head_dim is set) and its shapes come from the oracle
tests/reference/ref_model.py; the forward is that oracle (float64) with the attention scale of
mup's Transformer example (scores * sqrt(attn_mult) / D, attn_mult chosen so that it equals the
standard scale at the base head size) and the logits from the MuReadout / MuSharedReadout module
itself; the optimizer is mup.MuAdamW. Updates are compared as in test_optimizer_parity.py: the
difference beyond one unit in the last place of the float32 parameter, relative to the largest
entry of the reference's update.

Model: vocab 40, 2 layers, T = 8, SwiGLU, GQA, pre-LayerNorm, RoPE; base width 32; widths 32, 64
and 128 with d_ff = 2 d_model; heads either "grow" (4 query / 2 key-value heads, head size
d_model / 4: the 1/d attention scale differs from 1/sqrt(d)) or "fixed" (head size 8, d_model / 8
heads); tied and untied head (the untied models with every linear and LayerNorm bias).

Largest errors measured (x86-64, 2 cores, torch 2.13 CPU; normlab float32, the oracle float64;
printed with -s):
  - width shapes, decay groups: exact; prescribed init std / Xavier bound: rel 2.2e-16; MuAdamW's
    group lr / LR against lr_multipliers(): 0 (and lr * weight_decay = LR * WD, rel 1e-12);
  - drawn weights: the sample std of every tensor of >= 4096 entries against mup.init's draw
    within 0.28 of the tolerance (6 standard errors);
  - logits 9.0e-7, loss 4.4e-8, gradients 1.4e-6 (tests/reference's rule), 3 steps per case;
  - updates end to end (own gradients, eps 1e-4): 4.1e-4 (Adam's eps amplifies the gradients'
    round-off: see test_first_updates_match_muadamw); on normlab's gradients (eps 1e-8): 3.7e-7;
  - negative controls (test_a_dropped_multiplier_fails): plain AdamW lrs 0.5 on the update, a
    readout without 1/width 0.75 on the logits, attention at 1/sqrt(D) or at s0 without D0/D
    7.2e-3-0.66 on the gradients, matrix init x sqrt(2) 0.41 on the std.
The whole file runs in about 13 s on 2 cores:

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_mup_parity.py
"""
import math
import pathlib
import sys

import numpy as np
import pytest
import torch
from torch import nn

from normlab_py import normlab

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
from ref_config import make_config  # noqa: E402
from ref_model import RefModel  # noqa: E402

import mup  # noqa: E402  (mup 1.0.0: scripts/install-deps.sh)
from mup import MuAdamW, MuReadout, MuSharedReadout, set_base_shapes  # noqa: E402

torch.set_num_threads(1)

BASE = 32
V, L, T, B = 40, 2, 8, 2
LR, WD = 1e-2, 0.1
WIDTHS = [32, 64, 128]
RESULTS = {}  # the largest errors, printed at the end (with -s)


def record(key, err):
    for k, v in err.items():
        RESULTS[(key, k)] = max(RESULTS.get((key, k), 0.0), v)


def model_keys(width, tie, heads, **extra):
    """The standard-parametrization model section (ref_config keys) at this width; the untied
    models also carry every bias (vector-like tensors of another kind)."""
    m = {"vocab_size": V, "n_layer": L, "d_model": width, "d_ff": 2 * width, "seq_len": T,
         "mlp": "swiglu", "tie_embeddings": tie,
         "bias": not tie, "norm_bias": not tie}  # untied: every linear and LayerNorm bias too
    if heads == "grow":
        m.update(n_head=4, n_kv_head=2)
    else:
        m.update(n_head=width // 8, n_kv_head=width // 16, head_dim=8)
    m.update(extra)
    return m


def base_keys(m):
    """mup_base_model's rule, written here from config.h: d_model = BASE; d_ff and the query width
    scaled by BASE / d_model; head size kept when head_dim is set, else the base query width over
    the same number of heads; key/value heads in the same proportion to the query heads."""
    C, C0 = m["d_model"], BASE
    H = m["n_head"]
    D = m.get("head_dim") or C // H
    Hkv = m.get("n_kv_head") or H

    def scaled(n):
        assert n * C0 % C == 0, (n, C0, C)
        return n * C0 // C
    Cq0 = scaled(H * D)
    D0 = m.get("head_dim") or Cq0 // H
    H0 = Cq0 // D0
    return {**m, "d_model": C0, "d_ff": scaled(m["d_ff"]), "n_head": H0,
            "n_kv_head": H0 * Hkv // H, "head_dim": D0}


def normlab_config(m, output_mult=1.0, optim=None):
    return normlab.Config({"model": {**m, "parametrization": "mup", "mup_base_width": BASE,
                                     "mup_output_mult": output_mult},
                           "optim": optim or {}})


# -- the torch model --------------------------------------------------------------------------

class Norm(nn.Module):
    def __init__(self, n, bias, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=dtype))
        if bias:
            self.bias = nn.Parameter(torch.zeros(n, dtype=dtype))


def torch_model(ref, output_mult=1.0, dtype=torch.float64, readouts=()):
    """An nn.Module holding the model's tensors under normlab's names (Linear for the matrices,
    Embedding for tok_emb, the head a MuReadout or, tied, a MuSharedReadout of tok_emb.weight;
    the linear maps named in `readouts` a MuReadout with output_mult 1)."""
    root = nn.Module()
    specs = {s.name: s for s in ref.specs}
    prefixes = []
    for s in ref.specs:
        p = s.name.rsplit(".", 1)[0]
        if p not in prefixes and p != "lm_head":
            prefixes.append(p)
    for p in prefixes:
        w = specs[p + ".weight"]
        has_bias = p + ".bias" in specs
        if w.kind == "linear":
            cls = MuReadout if p in readouts else nn.Linear
            mod = cls(w.shape[1], w.shape[0], bias=has_bias, dtype=dtype)
        elif w.kind == "embedding":
            mod = nn.Embedding(*w.shape, dtype=dtype)
        else:
            mod = Norm(w.shape[0], has_bias, dtype)
        *path, leaf = p.split(".")
        parent = root
        for q in path:
            if q not in parent._modules:
                parent.add_module(q, nn.Module())
            parent = parent._modules[q]
        parent.add_module(leaf, mod)
    C = ref.C
    if ref.m["tie_embeddings"]:
        root.lm_head = MuSharedReadout(root.tok_emb.weight, bias=False, output_mult=output_mult)
    else:
        root.lm_head = MuReadout(C, V, bias=False, output_mult=output_mult, dtype=dtype)
    return root


READOUT_REFUSAL = " has infinite fan-in and finite fan-out dimensions but is not type `MuReadout`"


def mup_pair(m, output_mult=1.0, dtype=torch.float64):
    """(oracle at the width, torch module with mup's base shapes set, its base module).

    Which linear maps are readouts is mup's decision, not ours: every module is first an
    nn.Linear, and each one set_base_shapes refuses as a Linear with infinite fan-in and finite
    fan-out (mup.shape.assert_hidden_size_inf) is rebuilt as a MuReadout (output_mult 1);
    mod.readouts names them."""
    ref = RefModel(make_config(model=m))
    ref0 = RefModel(make_config(model=base_keys(m)))
    readouts = []
    while True:
        mod = torch_model(ref, output_mult, dtype, readouts)
        base = torch_model(ref0, output_mult, dtype, readouts)
        try:
            set_base_shapes(mod, base, rescale_params=False)
            break
        except AssertionError as e:  # mup 1.0.0 refuses with `assert False, message`
            assert READOUT_REFUSAL in str(e), e
            name = str(e).split(READOUT_REFUSAL)[0]
            assert name not in readouts, name
            readouts.append(name)
    mod.readouts = readouts
    return ref, mod, base


def mup_attn_scale(m, attn_scale=0.0):
    """mup's 1/d attention (examples/Transformer/model.py: q scaled by sqrt(attn_mult) / D), with
    attn_mult set so that the base model has the standard scale s0 (attn_scale, or 1/sqrt(D0))."""
    b = base_keys(m)
    D0 = b["head_dim"]
    D = m.get("head_dim") or m["d_model"] // m["n_head"]
    s0 = attn_scale if attn_scale > 0 else 1.0 / math.sqrt(D0)
    attn_mult = (s0 * D0) ** 2
    return math.sqrt(attn_mult) / D


def sp_std(name, init, L_):
    """The standard parametrization's init std of a normal-initialised tensor (gpt2: wo, w_out
    scaled by 1/sqrt(2L); normal: none)."""
    s = 0.02
    if init == "gpt2" and (name.endswith("attn.wo.weight") or name.endswith("mlp.w_out.weight")):
        s /= math.sqrt(2 * L_)
    return s


# -- 1. width shapes, 2. initial variances, 3. learning rates -----------------------------------

TABLE_CASES = [(w, tie, heads) for w in WIDTHS for tie in (True, False)
               for heads in ("grow", "fixed")]


@pytest.mark.parametrize("width,tie,heads", TABLE_CASES)
def test_width_shapes_match_set_base_shapes(width, tie, heads):
    m = model_keys(width, tie, heads)
    ref, mod, _ = mup_pair(m)
    nm = normlab.Model(normlab_config(m), seed=3)
    table = {r["name"]: r for r in nm.param_table()}
    params = dict(mod.named_parameters())
    assert set(params) == set(table), (set(params) ^ set(table))
    for n, p in params.items():
        r = table[n]
        assert tuple(p.shape) == r["shape"], n
        assert p.infshape.ninf() == r["width_dims"], (n, p.infshape, r)
        if p.dim() == 2:
            fi, fo = p.infshape.fanin_fanout()
            assert fi.width_mult() == r["fan_in_mult"], (n, p.infshape, r)
            assert fo.width_mult() == r["fan_out_mult"], (n, p.infshape, r)
        # and the oracle's README decay rule is normlab's decay column
        assert ref.decayed(n) == r["decay"], n
    # the readout's multiplier: 1 / width_mult of the head's weight (d_model / BASE)
    assert mod.lm_head.width_mult() == width / BASE


def empirical_ok(a, b, n):
    """Two sample stds of n >= 4096 draws each agree within 6 standard errors of their ratio
    (sqrt(1/(2n)) each): 6 sqrt(1/n) <= 9.4%, where a dropped factor sqrt(2) is 29%-41% away."""
    return abs(a / b - 1) < 6 / math.sqrt(n)


@pytest.mark.parametrize("init", ["gpt2", "normal", "xavier"])
@pytest.mark.parametrize("width,tie,heads", TABLE_CASES)
def test_initial_variances_match_mup_init(width, tie, heads, init):
    m = model_keys(width, tie, heads, init=init)
    ref, mod, _ = mup_pair(m)
    nm = normlab.Model(normlab_config(m), seed=11)
    table = {r["name"]: r for r in nm.param_table()}
    weights = nm.parameters()
    torch.manual_seed(5)
    checked = 0
    for n, p in mod.named_parameters():
        r, kind = table[n], {s.name: s.kind for s in ref.specs}[n]
        w = weights[n]
        if kind in ("gain", "bias"):  # constants: 1 - g0 and 0 (g0 = 0 here), width-independent
            assert r["init"] == "constant"
            want = 1.0 if kind == "gain" else 0.0
            assert r["init_scale"] == want and np.all(w == want), n
            continue
        if init == "xavier" and kind == "linear":
            # mup.init.xavier_uniform_: bound sqrt(3) std, std from the base shape, / sqrt(fan-in
            # mult) for matrix-like tensors.
            with torch.no_grad():
                mup.init.xavier_uniform_(p)
            fo, fi = p.shape
            fi0 = p.infshape[1].base_dim or fi
            fo0 = p.infshape[0].base_dim or fo
            bound = math.sqrt(6.0 / (fi0 + fo0))
            if p.infshape.ninf() == 2:
                bound /= math.sqrt(p.infshape.width_mult())
            assert r["init"] == "uniform", n
            assert r["init_scale"] == pytest.approx(bound, rel=1e-12), n
            assert float(p.detach().abs().max()) <= bound
            assert float(np.abs(w).max()) <= r["init_scale"] * (1 + 1e-6), n
            std_mup, std_nl = float(p.detach().std()), float(np.std(w.astype(np.float64)))
            want_std = bound / math.sqrt(3)
        else:
            s = 0.02 if kind == "embedding" else sp_std(n, init, L)
            with torch.no_grad():
                mup.init.normal_(p, std=s)
            # mup's prescription (init.constant_std_init_): width_mult^-1/2 for two width dims.
            want_std = s * (p.infshape.width_mult() ** -0.5 if p.infshape.ninf() == 2 else 1.0)
            assert r["init"] == "normal", n
            assert r["init_scale"] == pytest.approx(want_std, rel=1e-12), (n, r["init_scale"],
                                                                         want_std)
            std_mup, std_nl = float(p.detach().std()), float(np.std(w.astype(np.float64)))
        record("init", {"init_scale rel": abs(r["init_scale"] / (bound if init == "xavier"
                                                                   and kind == "linear"
                                                                   else want_std) - 1)})
        if w.size >= 4096:
            checked += 1
            record("init", {"empirical std / mup's, in tolerances": abs(std_nl / std_mup - 1)
                            / (6 / math.sqrt(w.size))})
            assert empirical_ok(std_nl, std_mup, w.size), (n, std_nl, std_mup)
            assert empirical_ok(std_nl, want_std, 2 * w.size), (n, std_nl, want_std)
    assert checked >= (2 if width == 32 else 5)


@pytest.mark.parametrize("width,tie,heads", TABLE_CASES)
def test_learning_rates_match_muadamw(width, tie, heads):
    m = model_keys(width, tie, heads)
    ref, mod, _ = mup_pair(m)
    cfg = normlab_config(m, optim={"name": "adamw", "weight_decay": WD})
    nm = normlab.Model(cfg, seed=3)
    mult = normlab.Optimizer(cfg, nm).lr_multipliers()
    opt = mu_adamw(mod, ref)
    seen = set()
    for g in opt.param_groups:
        for p in g["params"]:
            n = name_of(mod, p)
            seen.add(n)
            assert g["lr"] / LR == pytest.approx(mult[n], rel=1e-12), (n, g["lr"], mult[n])
            record("lr", {"lr rel": abs(g["lr"] / LR / mult[n] - 1)})
            want = LR * WD if ref.decayed(n) else 0.0
            assert g["lr"] * g["weight_decay"] == pytest.approx(want, rel=1e-12, abs=0), n
    assert seen == set(mult)


GATE_CASES = [(w, tie, heads, gate) for w in (64, 128) for tie, heads in
              ((False, "grow"), (True, "fixed")) for gate in ("head", "elementwise")]


@pytest.mark.parametrize("width,tie,heads,gate", GATE_CASES)
def test_attn_gate_shape_class_and_lr_match_mup(width, tie, heads, gate):
    """W_g under μP: per head at a fixed number of heads ("grow": 4 heads), W_g (4, d_model) has
    an infinite fan-in and a finite fan-out, which mup refuses as a Linear and takes as a
    MuReadout; with heads of a fixed size, or per value, it is matrix-like. normlab's mup_class
    of every tensor is mup's (readout-like exactly where mup wants a MuReadout: the untied head
    and such gates), and its learning rates are MuAdamW's for each class."""
    m = model_keys(width, tie, heads, attn_gate=gate)
    ref, mod, _ = mup_pair(m)
    cfg = normlab_config(m, optim={"name": "adamw", "weight_decay": WD})
    nm = normlab.Model(cfg, seed=3)
    table = {r["name"]: r for r in nm.param_table()}
    want_readout = {p + ".weight" for p in mod.readouts}
    if gate == "head" and heads == "grow":
        assert want_readout == {f"blocks.{l}.attn.wg.weight" for l in range(L)}, mod.readouts
    else:
        assert want_readout == set(), mod.readouts
    if not tie:
        want_readout.add("lm_head.weight")  # a MuReadout by construction (torch_model)
    params = dict(mod.named_parameters())
    assert set(params) == set(table)
    for n, p in params.items():
        r = table[n]
        assert p.infshape.ninf() == r["width_dims"], (n, p.infshape, r)
        want = ("readout-like" if n in want_readout else
                {0: "fixed", 1: "vector-like", 2: "matrix-like"}[p.infshape.ninf()])
        assert r["mup_class"] == want, (n, r["mup_class"], want)
    mult = normlab.Optimizer(cfg, nm).lr_multipliers()
    for g in mu_adamw(mod, ref).param_groups:
        for p in g["params"]:
            n = name_of(mod, p)
            assert g["lr"] / LR == pytest.approx(mult[n], rel=1e-12), (n, g["lr"], mult[n])


def name_of(mod, p):
    return next(n for n, q in mod.named_parameters() if q is p)


def mu_adamw(mod, ref, cls=None, betas=(0.9, 0.95), eps=1e-8):
    """mup.MuAdamW over two groups: decayed (ref.decayed: matrices, embeddings, the head) and
    not (norm gains, biases). cls: another optimizer with the same groups (negative control)."""
    named = dict(mod.named_parameters())
    groups = [{"params": [p for n, p in named.items() if ref.decayed(n)], "weight_decay": WD},
              {"params": [p for n, p in named.items() if not ref.decayed(n)],
               "weight_decay": 0.0}]
    make = cls or MuAdamW
    return make(groups, lr=LR, weight_decay=WD, betas=betas, eps=eps)


# -- 4. logits, loss and first updates ----------------------------------------------------------

def batch(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, (B, T)), rng.integers(0, V, (B, T))


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / np.abs(b).max())


def update_error(u, ur, after):
    """As test_optimizer_parity.compare: the difference of the updates beyond one unit in the last
    place of the float32 parameter, relative to the largest entry of the reference's update."""
    scale = float(np.abs(ur).max())
    assert scale > 0
    beyond = np.maximum(np.abs(u - ur) - np.spacing(np.abs(after)), 0)
    return float(beyond.max()) / scale


class Pair:
    """normlab's model and optimizer beside the mup model (float64, oracle forward) and MuAdamW."""

    def __init__(self, m, output_mult=1.0, attn_scale=0.0, eps=1e-8, seed=3, opt_cls=None):
        nm_keys = {**m, "attn_scale": attn_scale}
        self.cfg = normlab_config(nm_keys, output_mult,
                                  optim={"name": "adamw", "weight_decay": WD, "eps": eps})
        self.nm = normlab.Model(self.cfg, seed=seed)
        self.opt = normlab.Optimizer(self.cfg, self.nm)
        ref_m = {**m}  # the oracle's attention scale is given explicitly, its head is MuReadout
        _, self.mod, _ = mup_pair(ref_m, output_mult)
        self.ref = RefModel(make_config(model=ref_m), attn_scale=mup_attn_scale(m, attn_scale),
                            head=self.mod.lm_head, gate=self.gate_logits)
        with torch.no_grad():
            for n, p in self.mod.named_parameters():
                p.copy_(torch.from_numpy(np.array(self.nm.parameters()[n])))
        c = self.cfg  # beta1, beta2: normlab's defaults (0.9, 0.95)
        self.topt = mu_adamw(self.mod, self.ref, cls=opt_cls,
                             betas=(c["optim.beta1"], c["optim.beta2"]), eps=c["optim.eps"])

    def gate_logits(self, prefix, u):
        """The attention gate's logits through the torch module (a MuReadout where mup asks)."""
        return self.mod.get_submodule(prefix + ".wg")(u)

    def torch_forward(self, idx, tgt):
        params = dict(self.mod.named_parameters())
        return self.ref.forward(params, torch.as_tensor(idx), torch.as_tensor(tgt))

    def step(self, idx, tgt, shared_grads=False):
        """One step on both sides from equal parameters: returns {"logits", "loss", "grad",
        "update"} (the largest error of each; "grad" by tests/reference's rule) and the name of
        the tensor with the largest update error."""
        before = {k: v.copy() for k, v in self.nm.parameters().items()}
        for n, p in self.mod.named_parameters():  # both sides start the step equal
            np.testing.assert_array_equal(p.detach().numpy().astype(np.float32), before[n])
        logits = self.nm.forward(idx)
        losses, grads = self.nm.loss_and_grads(idx, tgt)
        self.topt.zero_grad()
        tl, tloss, _, _ = self.torch_forward(idx, tgt)
        tloss.backward()
        named = dict(self.mod.named_parameters())
        err = {"logits": rel(logits, tl.detach().numpy()),
               "loss": abs(losses["loss"] - tloss.item()) / tloss.item(),
               "grad": grad_error(grads, {n: p.grad.numpy() for n, p in named.items()})}
        if shared_grads:  # torch steps on normlab's gradients instead of its own
            for n, p in named.items():
                p.grad = torch.from_numpy(np.array(grads[n])).to(p.dtype)
        self.opt.step(None, LR)
        self.topt.step()
        errs = {}
        for n, p in named.items():
            after = p.detach().numpy().astype(np.float32)  # normlab keeps float32 parameters
            u = self.nm.parameters()[n] - before[n]
            errs[n] = update_error(u, after - before[n], after)
        worst = max(errs, key=errs.get)
        err["update"] = errs[worst]
        # continue from the same parameters on both sides (each step compared on its own update)
        with torch.no_grad():
            for n, p in named.items():
                a = p.detach().numpy().astype(np.float32)
                p.copy_(torch.from_numpy(a))
                self.nm.parameters()[n][...] = a
        return err, worst


def grad_error(grads, ref):
    """tests/reference/harness.py's rule: max|a - b| / max(max|b|, 0.01 S), S the largest |b| of
    all gradients (the floor only matters for gradients that vanish in exact arithmetic)."""
    S = max(float(np.abs(g).max()) for g in ref.values())
    return max(float(np.abs(np.asarray(grads[n], np.float64) - g).max())
               / max(float(np.abs(g).max()), 0.01 * S) for n, g in ref.items())


UPDATE_CASES = [
    # (width, tie, heads, extra): output_mult, attn_scale, init_std
    (64, True, "grow", {}),
    (64, False, "fixed", {}),
    (128, False, "grow", {}),
    (128, True, "fixed", {}),
    (128, True, "grow", {"output_mult": 2.0, "attn_scale": 0.3}),
    (128, False, "grow", {"init_std": 0.2}),   # scores O(1): the attention scale shows in logits
    (32, False, "grow", {}),                    # the base width: every multiplier is 1
    # the attention gate: per head at 4 heads, W_g (4, d_model) readout-like (MuReadout's 1/m on
    # its logits); per head with heads of 8, and per value: matrix-like
    (128, False, "grow", {"attn_gate": "head", "init_std": 0.2}),
    (64, True, "grow", {"attn_gate": "head"}),
    (128, True, "fixed", {"attn_gate": "head"}),
    (64, False, "grow", {"attn_gate": "elementwise"}),
]


def case_pair(width, tie, heads, extra, **kw):
    """A Pair for one of UPDATE_CASES (kw: Pair's eps, opt_cls)."""
    m = model_keys(width, tie, heads, **{k: v for k, v in extra.items()
                                         if k not in ("output_mult", "attn_scale")})
    return Pair(m, output_mult=extra.get("output_mult", 1.0),
                attn_scale=extra.get("attn_scale", 0.0), **kw)


@pytest.mark.parametrize("width,tie,heads,extra", UPDATE_CASES)
def test_first_updates_match_muadamw(width, tie, heads, extra):
    """End to end: each side computes its own logits, loss and gradients (normlab in float32, the
    oracle in float64 with mup's readout module) and steps them with its own optimizer.

    Adam's eps here is 1e-4 (tests/reference's parity configs), not normlab's default 1e-8: the
    first step is lr g / (|g| + eps), whose slope at |g| ~ eps is lr / (4 eps), so float32 round-off
    in the gradients (~1e-9 here, ~6e-7 of the largest) moves the update of an entry with |g| ~ 1e-8
    by 1e-2 of lr (measured: 1.2e-2, also at the base width where every μP multiplier is 1). With
    eps = 1e-4 what is left of that amplification is measured at <= 4.1e-4 (init_std 0.2, whose
    O(1) attention scores make the gradients' round-off larger), so updates are held to 2e-3 here;
    test_first_updates_on_shared_gradients holds them to 1e-5 at the default eps on equal
    gradients. A dropped μP factor moves an update by >= 50% (test_a_dropped_multiplier_fails)."""
    pair = case_pair(width, tie, heads, extra, eps=1e-4)
    for s in range(3):
        err, worst = pair.step(*batch(s))
        record("own gradients, eps 1e-4", err)
        print(f"\nmup {width} tie={tie} {heads} {extra} step {s}: "
              + " ".join(f"{k} {v:.1e}" for k, v in err.items()) + f" ({worst})", end="")
        assert err["logits"] < 1e-4 and err["loss"] < 1e-4 and err["grad"] < 1e-4, err
        assert err["update"] < 2e-3, (err, worst)


@pytest.mark.parametrize("width,tie,heads,extra", UPDATE_CASES)
def test_first_updates_on_shared_gradients(width, tie, heads, extra):
    """normlab's default optimizer settings (eps 1e-8), MuAdamW stepping on normlab's gradients:
    the updates of MuAdamW's per-group lr and weight decay against normlab's lr multipliers."""
    pair = case_pair(width, tie, heads, extra)
    for s in range(3):
        err, worst = pair.step(*batch(s), shared_grads=True)
        record("shared gradients, eps 1e-8", err)
        print(f"\nmup {width} tie={tie} {heads} {extra} step {s}: shared-gradient update "
              f"{err['update']:.1e} ({worst})", end="")
        assert err["logits"] < 1e-4 and err["loss"] < 1e-4 and err["grad"] < 1e-4, err
        assert err["update"] < 1e-5, (err, worst)


# -- 5. the comparison can fail ------------------------------------------------------------------

def test_a_dropped_multiplier_fails():
    """Each μP factor, left out of the mup side, makes the comparison fail by far."""
    out = {}
    # the learning rates: torch.optim.AdamW on the same groups (no 1/fan-in mult): matrices' first
    # steps twice normlab's at width 64
    pair = case_pair(64, False, "grow", {}, opt_cls=torch.optim.AdamW)
    err, worst = pair.step(*batch(0), shared_grads=True)
    out["lr (plain AdamW)"] = err["update"]
    assert err["update"] > 0.4, (err, worst)
    # the readout: a plain Linear head (no output_mult / width_mult) at width 128: the reference's
    # logits x4, normlab's 1/4 of them
    pair = case_pair(128, False, "grow", {})
    w = pair.mod.lm_head.weight
    pair.ref.head = lambda x: x @ w.T
    err, _ = pair.step(*batch(0))
    out["readout (no 1/width)"] = err["logits"]
    assert err["logits"] > 0.7, err
    # the attention: the scale without μP's D0 / D at width 128, head size 32 (base 8): 1/sqrt(D)
    # (init_std 0.02 and 0.2: O(1) scores), and attn_scale = 0.3 as given
    for extra, wrong in (({}, 1 / math.sqrt(32)), ({"init_std": 0.2}, 1 / math.sqrt(32)),
                         ({"attn_scale": 0.3, "output_mult": 2.0}, 0.3)):
        pair = case_pair(128, True, "grow", extra)
        pair.ref.attn_scale = wrong
        err, _ = pair.step(*batch(0))
        out[f"attention {wrong:.3g} {extra}"] = err["grad"]
        assert err["logits"] > 1e-4 and err["grad"] > 10 * 1e-4, err
    # the init: normlab's draws of a matrix-like tensor times sqrt(2) (as if the 1/sqrt(fan-in
    # mult) were dropped at width 64) are far outside the empirical tolerance
    m = model_keys(64, False, "grow")
    _, mod, _ = mup_pair(m)
    nm = normlab.Model(normlab_config(m), seed=11)
    p = dict(mod.named_parameters())["blocks.0.mlp.w_in.weight"]
    torch.manual_seed(5)
    with torch.no_grad():
        mup.init.normal_(p, std=0.02)
    w = nm.parameters()["blocks.0.mlp.w_in.weight"].astype(np.float64)
    assert empirical_ok(float(np.std(w)), float(p.detach().std()), w.size)
    assert not empirical_ok(float(np.std(w)) * math.sqrt(2), float(p.detach().std()), w.size)
    out["init (x sqrt 2)"] = float(np.std(w)) * math.sqrt(2) / float(p.detach().std()) - 1
    print("\nnegative controls: " + ", ".join(f"{k} error {v:.2g}" for k, v in out.items()))


def teardown_module():
    if RESULTS:
        print("\nlargest errors: " + "; ".join(f"{a}: {b} {v:.2e}"
                                              for (a, b), v in sorted(RESULTS.items())))
