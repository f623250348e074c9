"""Step-for-step parity of normlab's optimizers (normlab.Optimizer, #36) with their references
from PyPI: torch.optim.Muon (both adjust_lr rules, Nesterov on and off, float32 and bf16),
optimi.StableAdamW (torch-optimi), adam_atan2_pytorch.AdamAtan2, torch.optim.AdamW,
torch.optim.Adafactor (its state too, factored rows and columns by name and shape),
pytorch_optimizer.SOAP (its cases here, its parity in test_soap_parity.py), and QK-Clip
against an oracle written here from Kimi K2's formula and the rules stated in
src/train/qk_clip.h. Both sides get the same gradients at every step; the comparison is on the
update (param_after - param_before) of every tensor: its difference beyond one unit in the last
place of the float32 parameter (the rounding of the parameter itself), relative to the largest
entry of the reference's update. Every optim key an optimizer reads is set away from its
default by a case of that optimizer, with an effect beyond the tolerance, and the keys it does not
read leave it alone (the last three tests; #52).

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_optimizer_parity.py
"""
import pathlib
import sys

import numpy as np
import pytest
import torch

from normlab_py import normlab

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
from ref_optim import ns_float32  # noqa: E402  (torch's Newton-Schulz without its bf16 cast)

torch.set_num_threads(1)

# GQA (4 query heads, 2 key/value heads), a gated MLP and q/k/v biases, untied head: every kind of
# tensor and every row-block split Muon makes (q, k, v of wqkv; gate and up of w_in), square, wide
# and tall blocks.
MODEL = {"vocab_size": 40, "n_layer": 2, "d_model": 24, "n_head": 4, "n_kv_head": 2, "d_ff": 40,
         "seq_len": 8, "mlp": "swiglu", "attn_qkv_bias": True, "tie_embeddings": False}
LRS = [1e-2, 2e-2, 1.5e-2, 5e-3, 1e-2, 8e-3, 1.2e-2, 6e-3]   # one learning rate per step
SCALES = [1.0, 1.0, 0.5, 1.0, 1.0, 0.7, 1.0, 1.0]             # grad_scale per step (a clip factor)


def setup(optim, model=MODEL, train=None):
    cfg = normlab.Config({"model": model, "optim": optim, "train": train or {}})
    m = normlab.Model(cfg, seed=3)
    return cfg, m, normlab.Optimizer(cfg, m)


def gradients(m, step):
    """Random gradients of every parameter, with one tensor's jumping tenfold at step 2 (so that
    StableAdamW's update clipping acts)."""
    rng = np.random.default_rng(100 + step)
    out = {}
    for name, p in m.parameters().items():
        g = rng.standard_normal(p.shape).astype(np.float32) * np.float32(0.1)
        if step == 2 and name == "blocks.1.mlp.w_out.weight":
            g *= np.float32(10)
        out[name] = g
    return out


def split_rows(m):
    """{normlab name: [(row0, rows)]}: the row blocks Muon treats as matrices."""
    c = m.config
    D = c["model.d_model"] // c["model.n_head"]
    Cq, Ckv, F = c["model.n_head"] * D, (c["model.n_kv_head"] or c["model.n_head"]) * D, c["model.d_ff"]
    out = {}
    for row in m.param_table():
        n, s = row["name"], row["shape"]
        if len(s) == 2 and row["group"] in ("attention", "mlp"):
            if n.endswith("wqkv.weight"):
                out[n] = [(0, Cq), (Cq, Ckv), (Cq + Ckv, Ckv)]
            elif n.endswith("w_in.weight") and c["model.mlp"] in ("swiglu", "geglu"):
                out[n] = [(0, F), (F, F)]
            else:
                out[n] = [(0, s[0])]
    return out


class Reference:
    """The reference optimizer over torch copies of the model's tensors, split into Muon's
    matrices where it is Muon."""

    def __init__(self, m, make, muon_blocks=None, dtype=torch.float32):
        self.table = m.param_table()
        params = m.parameters()
        self.blocks = muon_blocks or {}
        self.t = {}  # key -> torch tensor; key = name or (name, row0)
        for row in self.table:
            n = row["name"]
            for r0, rows in self.blocks.get(n, [(None, None)]):
                v = params[n] if r0 is None else params[n][r0:r0 + rows]
                self.t[(n, r0)] = torch.nn.Parameter(torch.tensor(np.array(v), dtype=dtype))
        self.opts = make(self)

    def groups(self, keys, wd, decayed):
        """Two parameter groups: the tensors weight decay applies to (names in `decayed`) at
        `wd`, the others at 0."""
        dec = [self.t[k] for k in keys if k[0] in decayed]
        nod = [self.t[k] for k in keys if k[0] not in decayed]
        return [{"params": dec, "weight_decay": wd}, {"params": nod, "weight_decay": 0.0}]

    def step(self, grads, lr, scale, lr_of=lambda opt, lr: lr):
        for (n, r0), p in self.t.items():
            g = grads[n] if r0 is None else grads[n][r0:r0 + p.shape[0]]
            p.grad = (torch.tensor(np.array(g)) * torch.tensor(np.float32(scale))).to(p.dtype)
        for opt in self.opts:
            for grp in opt.param_groups:
                grp["lr"] = lr_of(opt, lr)
            opt.step()

    def value(self, name):
        keys = [k for k in self.t if k[0] == name]
        return np.concatenate([self.t[k].detach().numpy() for k in sorted(keys, key=lambda k: k[1] or 0)])


def compare(cfg, m, opt, ref, steps=4, lr_of=lambda o, lr: lr, before_step=None):
    """Steps both sides; returns the worst relative update error over tensors and steps."""
    worst = 0.0
    for s in range(steps):
        g = gradients(m, s)
        before = {k: v.copy() for k, v in m.parameters().items()}
        ref_before = {n: ref.value(n) for n in before}
        for n in before:
            np.testing.assert_array_equal(before[n], ref_before[n])  # both start each step equal?
        extra = before_step(s) if before_step else {}
        opt.step(g, LRS[s], grad_scale=SCALES[s], **extra)
        ref.step(g, LRS[s], SCALES[s], lr_of)
        if before_step:
            ref.after_step(s)
        for n, p in m.parameters().items():
            after = ref.value(n)
            u, ur = p - before[n], after - ref_before[n]
            scale = float(np.abs(ur).max())
            assert scale > 0, (n, s)
            # The parameters are float32: two results one rounding apart differ by a unit in the
            # last place of the parameter, whatever the update's size. What is beyond that is the
            # error of the update.
            beyond = np.maximum(np.abs(u - ur) - np.spacing(np.abs(after)), 0)
            worst = max(worst, float(beyond.max()) / scale)
        # Continue from the same parameters on both sides: each step is compared on its own
        # update, not on accumulated drift.
        for n, p in m.parameters().items():
            r = ref.value(n)
            p[...] = r
    return worst


def decayed(m, cfg):
    """The tensors weight decay applies to: those the parameter table marks, the embedding only
    with optim.decay_embeddings (the optimizer's rule, written here again for the references)."""
    keep_emb = cfg["optim.decay_embeddings"]
    return {r["name"] for r in m.param_table()
            if r["decay"] and (r["group"] != "embedding" or keep_emb)}


# -- the parity cases, as data -------------------------------------------------------------------
# Every optimizer setting this file holds to a reference. Each optim key an optimizer reads
# (READS) is set away from its default by some case of that optimizer
# (test_every_optimizer_key_is_set_by_a_parity_case), and each key a case sets away from its
# default changes normlab's updates by more than the parity tolerance
# (test_each_key_a_case_sets_changes_the_update): a key at a value where it does nothing would
# pass any parity. The references are built from the resolved config (cfg["optim.beta1"], ...).

ELEMENTWISE_CASES = [
    {"name": "adamw", "beta2": 0.99, "weight_decay": 0.1},
    {"name": "adamw", "beta1": 0.8, "beta2": 0.98, "eps": 1e-3, "weight_decay": 0.3,
     "decay_embeddings": False},
    {"name": "stable_adamw", "beta2": 0.99, "eps": 1e-6, "weight_decay": 0.1},
    {"name": "stable_adamw", "beta1": 0.8, "beta2": 0.98, "eps": 1e-3, "weight_decay": 0.3,
     "decay_embeddings": False},
    # b = 1 leaves b and b^2 alike; b = 2.5 and a = 0.9 do not (#52)
    {"name": "adam_atan2", "beta2": 0.99, "weight_decay": 0.1, "adam_atan2.a": 1.27, "adam_atan2.b": 1.0},
    {"name": "adam_atan2", "beta1": 0.8, "beta2": 0.98, "weight_decay": 0.3,
     "decay_embeddings": False, "adam_atan2.a": 0.9, "adam_atan2.b": 2.5},
]

MUON_CASES = [
    {"name": "muon", "muon.adjust_lr": "original", "muon.nesterov": True, "muon.adamw_lr": 5e-3, "lr": 1e-2},
    {"name": "muon", "muon.adjust_lr": "original", "muon.nesterov": False, "muon.adamw_lr": 5e-3, "lr": 1e-2},
    {"name": "muon", "muon.adjust_lr": "match_rms_adamw", "muon.nesterov": True, "muon.adamw_lr": 5e-3,
     "lr": 1e-2},
    # Every other key of Muon and of its AdamW away from its default (lr: the step's learning rate
    # comes from LRS, optim.lr only sets AdamW's fraction adamw_lr / lr). ns_eps = 0.5 is above the
    # Frobenius norm of some momentum blocks (about 0.1 to 0.5 here), so it bounds the division;
    # (2, -1.5, 0.5) is a quintic with p(1) = 1 that 3 steps of converge less far than the default.
    {"name": "muon", "lr": 4e-2, "muon.adamw_lr": 1e-2, "muon.momentum": 0.9, "muon.nesterov": False,
     "muon.ns_steps": 3, "muon.ns_a": 2.0, "muon.ns_b": -1.5, "muon.ns_c": 0.5, "muon.ns_eps": 0.5,
     "muon.adjust_lr": "match_rms_adamw", "beta1": 0.8, "beta2": 0.98, "eps": 1e-3,
     "weight_decay": 0.3, "decay_embeddings": False},
]

# Adafactor: its own keys at their defaults, then every one away from it. eps1 = 0.05 is above the
# mean of the row averages of g^2 (about 0.01 here), so it bounds the factored estimate; d = 1.5
# lets through updates that d = 1 clips (the tenfold jump of step 2, and factored estimates).
ADAFACTOR_CASES = [
    {"name": "adafactor", "weight_decay": 0.1},
    {"name": "adafactor", "adafactor.beta2_decay": -0.5, "adafactor.eps1": 0.05,
     "adafactor.eps2": 1e-2, "adafactor.d": 1.5, "weight_decay": 0.3, "decay_embeddings": False},
]

# SOAP: max_precond_dim = 24 = d_model preconditions the d_model side of every matrix (both sides
# of the (24, 24) attention output), whose statistics are of full rank from the first gradient on
# (the other side is 40 to 80 long): their eigenvectors are then unique up to sign. Along a longer
# side, the first statistic G G^T has rank 24, and the eigenvectors of its zero eigenvalue are any
# basis of its null space, which LAPACK's and torch's eigh choose apart (test_soap_parity.py). The
# second case sets every SOAP key away from its default, with the eigenbasis refreshed at every
# update; the first every 3 updates (the power iterations after steps 4 and 7 of 8).
SOAP_CASES = [
    {"name": "soap", "soap.max_precond_dim": 24, "soap.precondition_frequency": 3,
     "weight_decay": 0.1},
    {"name": "soap", "soap.max_precond_dim": 24, "soap.precondition_frequency": 1,
     "soap.shampoo_beta": 0.9, "soap.normalize_grads": True, "soap.correct_bias": False,
     "beta1": 0.8, "beta2": 0.98, "eps": 1e-3, "weight_decay": 0.3, "decay_embeddings": False},
]

QK_CLIP_TAU, QK_CLIP_ALPHA = 5.0, 0.3
QK_CLIP_MODELS = [{}, {"qk_norm": "rmsnorm", "qk_norm_scope": "full"},
                  {"qk_norm": "rmsnorm", "qk_norm_scope": "head", "norm_gain_offset": 1.0}]
QK_CLIP_CASE = {"name": "muon", "qk_clip": QK_CLIP_TAU, "qk_clip_alpha": QK_CLIP_ALPHA}

BF16_CASE = {"name": "muon"}


def case_id(optim):
    return "-".join(f"{k}={v}" for k, v in optim.items())


# -- the element-wise Adam family ----------------------------------------------------------------

def elementwise_reference(cfg, m):
    o = lambda k: cfg["optim." + k]  # noqa: E731
    betas = (o("beta1"), o("beta2"))
    if o("name") == "adamw":
        cls, kw = torch.optim.AdamW, dict(betas=betas, eps=o("eps"))
    elif o("name") == "stable_adamw":
        import optimi
        cls, kw = optimi.StableAdamW, dict(betas=betas, eps=o("eps"), foreach=False, triton=False)
    else:
        from adam_atan2_pytorch import AdamAtan2
        cls, kw = AdamAtan2, dict(betas=betas, a=o("adam_atan2.a"), b=o("adam_atan2.b"))
    dec = decayed(m, cfg)
    return Reference(m, lambda r: [cls(r.groups(list(r.t), o("weight_decay"), dec), lr=1e-2,
                                       **kw)])


@pytest.mark.parametrize("optim", ELEMENTWISE_CASES, ids=case_id)
def test_elementwise_optimizer_matches_its_reference(optim):
    # torch.optim.AdamW, optimi.StableAdamW (torch-optimi), adam_atan2_pytorch.AdamAtan2
    cfg, m, opt = setup(optim)
    err = compare(cfg, m, opt, elementwise_reference(cfg, m))
    print(f"{case_id(optim)}: max relative update error {err:.2e}")
    assert err < 1e-5


def test_stable_adamw_clips_the_tensor_whose_gradient_jumps():
    # StableAdamW's update is AdamW's divided by max(1, r), r = RMS(g^2 / v) of the tensor. The
    # tenfold jump of step 2 makes r > 1 for that tensor only: its update shrinks by 1/r, computed
    # here from the optimizer's own state; every other tensor's equals AdamW's.
    cfg_s, m_s, o_s = setup({"name": "stable_adamw", "eps": 1e-6, "weight_decay": 0.0})
    cfg_a, m_a, o_a = setup({"name": "adamw", "eps": 1e-6, "weight_decay": 0.0})
    for s in range(3):
        g = gradients(m_s, s)
        bs = {k: v.copy() for k, v in m_s.parameters().items()}
        ba = {k: v.copy() for k, v in m_a.parameters().items()}
        o_s.step(g, 1e-2)
        o_a.step(g, 1e-2)
    jump = "blocks.1.mlp.w_out.weight"
    for n in bs:
        v = o_s.state["stable_adamw.v." + n].astype(np.float64)
        r = np.sqrt(np.mean(g[n].astype(np.float64) ** 2 / np.maximum(v, 1e-12)))
        us, ua = m_s.parameters()[n] - bs[n], m_a.parameters()[n] - ba[n]
        assert (r > 1.5) == (n == jump), (n, r)
        np.testing.assert_allclose(us, ua / max(1.0, r), rtol=1e-4,
                                   atol=2 * float(np.spacing(np.abs(bs[n]).max())), err_msg=n)


# -- Adafactor ------------------------------------------------------------------------------------

def adafactor_reference(cfg, m):
    """torch.optim.Adafactor on every tensor as it is (a fused wqkv is one matrix), in the two
    weight-decay groups; optim.adafactor.eps1 = 0 is torch's None (the dtype's machine epsilon)."""
    o = lambda k: cfg["optim." + k]  # noqa: E731
    eps1 = o("adafactor.eps1") or None
    dec = decayed(m, cfg)
    return Reference(m, lambda r: [torch.optim.Adafactor(
        r.groups(list(r.t), o("weight_decay"), dec), lr=1e-2,
        beta2_decay=o("adafactor.beta2_decay"), eps=(eps1, o("adafactor.eps2")),
        d=o("adafactor.d"), foreach=False)])


@pytest.mark.parametrize("optim", ADAFACTOR_CASES, ids=case_id)
def test_adafactor_matches_torch(optim):
    cfg, m, opt = setup(optim)
    ref = adafactor_reference(cfg, m)
    err = compare(cfg, m, opt, ref)
    print(f"{case_id(optim)}: max relative update error {err:.2e}")
    assert err < 1e-5
    # The state, by name and shape: (A) row and (B) column averages of a matrix, a vector's own
    # shape, each equal to torch's (which keeps them as (A, 1) and (1, B)).
    st = opt.state
    torch_state = ref.opts[0].state
    names = set()
    for row in m.param_table():
        n, shape = row["name"], tuple(row["shape"])
        ts = torch_state[ref.t[(n, None)]]
        if len(shape) >= 2:
            want = {"adafactor.row_var." + n: ("row_var", shape[:-1]),
                    "adafactor.col_var." + n: ("col_var", shape[:-2] + shape[-1:])}
        else:
            want = {"adafactor.variance." + n: ("variance", shape)}
        for key, (tname, tshape) in want.items():
            assert st[key].shape == tshape, (key, st[key].shape)
            np.testing.assert_allclose(st[key], ts[tname].numpy().reshape(tshape), rtol=2e-5,
                                       atol=1e-12, err_msg=key)
        names |= set(want)
    assert set(st) == names


# -- Muon --------------------------------------------------------------------------------------

def muon_reference(m, cfg):
    """torch.optim.Muon on the row blocks, torch.optim.AdamW on the rest at adamw_lr / lr of the
    step's learning rate."""
    o = lambda k: cfg["optim." + k]  # noqa: E731
    blocks = split_rows(m)
    dec = decayed(m, cfg)
    adjust = o("muon.adjust_lr")

    def make(r):
        mats = [k for k in r.t if k[0] in blocks]
        rest = [k for k in r.t if k[0] not in blocks]
        assert all(k[0] in dec for k in mats)  # every hidden matrix decays
        muon = torch.optim.Muon([r.t[k] for k in mats], lr=1e-2, weight_decay=o("weight_decay"),
                                momentum=o("muon.momentum"), nesterov=o("muon.nesterov"),
                                ns_coefficients=(o("muon.ns_a"), o("muon.ns_b"), o("muon.ns_c")),
                                eps=o("muon.ns_eps"), ns_steps=o("muon.ns_steps"), adjust_lr_fn=adjust)
        adam = torch.optim.AdamW(r.groups(rest, o("weight_decay"), dec), lr=1e-2,
                                 betas=(o("beta1"), o("beta2")), eps=o("eps"))
        adam.is_adam = True
        return [muon, adam]
    ref = Reference(m, make, blocks)
    ratio = o("muon.adamw_lr") / o("lr") if o("muon.adamw_lr") > 0 else 1.0
    lr_of = lambda opt, lr: lr * ratio if getattr(opt, "is_adam", False) else lr  # noqa: E731
    return ref, lr_of


@pytest.mark.parametrize("optim", MUON_CASES, ids=case_id)
def test_muon_matches_torch_in_float32(monkeypatch, optim):
    import torch.optim._muon as tm
    monkeypatch.setattr(tm, "_zeropower_via_newtonschulz", ns_float32)
    cfg, m, opt = setup(optim)
    ref, lr_of = muon_reference(m, cfg)
    err = compare(cfg, m, opt, ref, lr_of=lr_of)
    print(f"{case_id(optim)} float32: max relative update error {err:.2e}")
    assert err < 2e-5


def test_muon_matches_torch_in_bf16():
    # torch.optim.Muon as shipped: its Newton-Schulz runs in bfloat16. normlab's with
    # train.matmul_precision = bf16 rounds its iterate to bf16 after every operation as the
    # reference does; the products' float32 sums may go in another order, so an entry may differ
    # by a bf16 rounding step (none did on the machine this test was written on).
    cfg, m, opt = setup(BF16_CASE, train={"matmul_precision": "bf16"})
    ref, lr_of = muon_reference(m, cfg)
    err = compare(cfg, m, opt, ref, lr_of=lr_of)
    print(f"muon bf16: max relative update error {err:.2e}")
    assert err < 2.0 ** -8  # one bf16 rounding step of the largest entry
    # and the float32 path is not what the bf16 reference computes (the bf16 rounding is real)
    cfg32, m32, opt32 = setup(BF16_CASE)
    ref32, lr_of32 = muon_reference(m32, cfg32)
    assert compare(cfg32, m32, opt32, ref32, steps=1, lr_of=lr_of32) > 10 * 1e-5


def test_muon_matrices_and_state_names():
    cfg, m, opt = setup({"name": "muon"})
    st = opt.state
    mats = split_rows(m)
    assert {k[len("muon.momentum."):] for k in st if k.startswith("muon.momentum.")} == set(mats)
    others = {r["name"] for r in m.param_table()} - set(mats)
    assert {k[len("adam.m."):] for k in st if k.startswith("adam.m.")} == others
    assert {k[len("adam.v."):] for k in st if k.startswith("adam.v.")} == others
    for k, v in st.items():
        assert v.shape == m.parameters()[k.split(".", 2)[2]].shape


# -- QK-Clip -------------------------------------------------------------------------------------

def qk_oracle(ref, cfg, S, tau, alpha):
    """Kimi K2's QK-Clip on the reference's tensors, with normlab's stated rules: a key head takes
    the largest S of its query heads; biases scale with their rows; with QK-Norm the gains (as
    offset + w) scale instead, per head for scope full, by the layer's smallest factor for scope
    head."""
    c = cfg
    H, Hkv = c["model.n_head"], c["model.n_kv_head"] or c["model.n_head"]
    D = c["model.d_model"] // H
    G = H // Hkv
    off = c["model.norm_gain_offset"]
    qk_norm = c["model.qk_norm"] != "none"
    with torch.no_grad():
        for l in range(c["model.n_layer"]):
            s = S[l]
            gq = np.where(s > tau, tau / s, 1.0)
            gk = np.array([min(1.0, tau / s[k * G:(k + 1) * G].max()) for k in range(Hkv)])
            fq, fk = gq ** alpha, gk ** (1 - alpha)
            a = f"blocks.{l}.attn."

            def scale_rows(t, r0, n, f):
                t[r0:r0 + n] *= torch.tensor(np.float32(f))

            def scale_gain(t, r0, n, f):
                t[r0:r0 + n] = ((off + t[r0:r0 + n].double()) * f - off).float()
            if not qk_norm:
                q, k = ref.t[(a + "wqkv.weight", 0)], ref.t[(a + "wqkv.weight", H * D)]
                bias = ref.t.get((a + "wqkv.bias", None))
                for h in range(H):
                    if gq[h] < 1:
                        scale_rows(q, h * D, D, fq[h])
                        if bias is not None:
                            scale_rows(bias, h * D, D, fq[h])
                for g in range(Hkv):
                    if gk[g] < 1:
                        scale_rows(k, g * D, D, fk[g])
                        if bias is not None:
                            scale_rows(bias, H * D + g * D, D, fk[g])
            elif (s > tau).any():
                qg, kg = ref.t[(a + "q_norm.weight", None)], ref.t[(a + "k_norm.weight", None)]
                if c["model.qk_norm_scope"] == "full":
                    for h in range(H):
                        if gq[h] < 1:
                            scale_gain(qg, h * D, D, fq[h])
                    for g in range(Hkv):
                        if gk[g] < 1:
                            scale_gain(kg, g * D, D, fk[g])
                else:
                    scale_gain(qg, 0, D, gq.min() ** alpha)
                    scale_gain(kg, 0, D, gk.min() ** (1 - alpha))


def attn_maxima(rng, cfg):
    """One step's largest attention logit per layer and query head: some heads above tau and
    some below, head 1 of each layer always above."""
    tau = cfg["optim.qk_clip"]
    S = rng.uniform(1.0, 2.0 * tau, size=(cfg["model.n_layer"], cfg["model.n_head"]))
    S[:, 1] = 3 * tau
    return S


@pytest.mark.parametrize("extra", QK_CLIP_MODELS, ids=case_id)
def test_qk_clip_matches_kimi_k2s_formula(monkeypatch, extra):
    import torch.optim._muon as tm
    monkeypatch.setattr(tm, "_zeropower_via_newtonschulz", ns_float32)
    cfg, m, opt = setup(QK_CLIP_CASE, model={**MODEL, **extra})
    ref, lr_of = muon_reference(m, cfg)
    # The wqkv splits of the reference follow the q, k, v blocks; the q bias is one tensor.
    tau, alpha = cfg["optim.qk_clip"], cfg["optim.qk_clip_alpha"]
    rng = np.random.default_rng(7)
    maxima = {}

    def before_step(s):
        maxima[s] = attn_maxima(rng, cfg)
        return {"attn_max_logit": maxima[s]}

    ref.after_step = lambda s: qk_oracle(ref, cfg, maxima[s], tau, alpha)
    err = compare(cfg, m, opt, ref, lr_of=lr_of, before_step=before_step)
    print(f"qk_clip {extra}: max relative update error {err:.2e}")
    assert err < 2e-5
    assert opt.qk_clip["heads"] == int((maxima[3] > tau).sum())
    assert opt.qk_clip["max_logit"] == pytest.approx(maxima[3].max())


def test_qk_clip_needs_the_maxima():
    cfg, m, opt = setup({"name": "adamw", "qk_clip": 5.0})
    with pytest.raises(normlab.InputError, match="attention maxima"):
        opt.step(gradients(m, 0), 1e-2)
    with pytest.raises(normlab.InputError, match="attention maxima"):
        opt.step(gradients(m, 0), 1e-2, attn_max_logit=np.ones(3))


def test_optimizer_refuses_a_config_of_another_model():
    cfg, m, _ = setup({"name": "muon"})
    other = normlab.Config({"model": {**MODEL, "d_ff": 48}, "optim": {"name": "muon"}})
    with pytest.raises(normlab.ConfigError, match="not the model's config"):
        normlab.Optimizer(other, m)


# -- every key of every optimizer ------------------------------------------------------------------

ADAM_KEYS = {"beta1", "beta2", "eps", "weight_decay", "decay_embeddings"}
# The optim keys each optimizer reads (src/train/optimizers/), optim.name aside. Muon reads lr
# (adamw_lr is a learning rate, taken as a fraction of lr) and its AdamW's keys.
READS = {
    "adamw": ADAM_KEYS,
    "stable_adamw": ADAM_KEYS,
    "adam_atan2": (ADAM_KEYS - {"eps"}) | {"adam_atan2.a", "adam_atan2.b"},  # no epsilon
    "muon": ADAM_KEYS | {"lr", "muon.adamw_lr", "muon.momentum", "muon.nesterov", "muon.ns_steps", "muon.ns_a", "muon.ns_b",
                         "muon.ns_c", "muon.ns_eps", "muon.adjust_lr"},
    # no first moment, no Adam betas or eps: its own
    "adafactor": {"weight_decay", "decay_embeddings", "adafactor.beta2_decay", "adafactor.eps1",
                  "adafactor.eps2", "adafactor.d"},
    "soap": ADAM_KEYS | {"soap.shampoo_beta", "soap.precondition_frequency",
                         "soap.max_precond_dim", "soap.normalize_grads", "soap.correct_bias"},
}
# Steps the key-effect test takes: SOAP's first step updates nothing, and a key of its eigenbasis
# refresh acts from the update after the first refresh (after step 4 at frequency 3).
KEY_STEPS = {"soap": 5}
QK_CLIP_KEYS = {"qk_clip", "qk_clip_alpha"}  # with any optimizer
# The optim keys no optimizer reads: the trainer turns them into the arguments of a step (its
# learning rate and clip factor: Optimizer.step(grads, lr, grad_scale)), held to
# tests/reference/ref_optim.py (learning_rate, clip_grads) by the whole-model parity; name
# picks the optimizer.
TRAINER_KEYS = {"name", "lr", "min_lr_ratio", "warmup_steps", "schedule", "grad_clip"}
DEFAULTS = normlab.Config({})


def all_cases():
    """(optim, model, train) of every parity case above."""
    return ([(o, MODEL, {}) for o in ELEMENTWISE_CASES + MUON_CASES + ADAFACTOR_CASES + SOAP_CASES]
            + [(QK_CLIP_CASE, {**MODEL, **x}, {}) for x in QK_CLIP_MODELS]
            + [(BF16_CASE, MODEL, {"matmul_precision": "bf16"})])


def non_default(optim):
    return {k for k, v in optim.items() if k != "name" and v != DEFAULTS["optim." + k]}


def test_every_optimizer_key_is_set_by_a_parity_case():
    keys = {k[len("optim."):] for k in normlab.Config.keys() if k.startswith("optim.")}
    classified = set().union(*READS.values()) | QK_CLIP_KEYS | TRAINER_KEYS
    assert keys - classified == set(), \
        "optim keys of the key table that no optimizer row here claims: add them to READS " \
        "(with a parity case that sets them) or to TRAINER_KEYS"
    assert classified - keys == set(), "keys named here that the key table does not have"
    with pytest.raises(normlab.ConfigError) as e:
        normlab.Config({"optim": {"name": "?"}})
    names = e.value.args[0].split("allowed: ")[1].split(")")[0].split(", ")
    assert sorted(READS) == sorted(names), "an optimizer without its row in READS"
    missing = []
    for name, reads in READS.items():
        set_by = set().union(*(non_default(o) for o, _, _ in all_cases() if o["name"] == name))
        missing += [f"{name}: optim.{k}" for k in sorted(reads - set_by)]
    set_by = set().union(*(non_default(o) for o, _, _ in all_cases() if o.get("qk_clip", 0) > 0))
    missing += [f"QK-Clip: optim.{k}" for k in sorted(QK_CLIP_KEYS - set_by)]
    assert not missing, "keys no parity case sets away from their default: " + ", ".join(missing)


def trained(optim, model=MODEL, train=None, steps=3):
    """normlab's parameters before and after `steps` steps of the parity gradients (with
    attention maxima when QK-Clip is on)."""
    cfg, m, opt = setup(optim, model, train)
    before = {k: v.copy() for k, v in m.parameters().items()}
    rng = np.random.default_rng(7)
    for s in range(steps):
        extra = {"attn_max_logit": attn_maxima(rng, cfg)} if cfg["optim.qk_clip"] > 0 else {}
        opt.step(gradients(m, s), LRS[s], grad_scale=SCALES[s], **extra)
    return before, {k: v.copy() for k, v in m.parameters().items()}


def change(a, b, before):
    """The largest difference of two results, relative to the largest update of its tensor."""
    return max(float(np.abs(a[n] - b[n]).max()) / float(np.abs(a[n] - before[n]).max())
               for n in a)


@pytest.mark.parametrize("case", all_cases(),
                         ids=[f"{i}-{c[0]['name']}" for i, c in enumerate(all_cases())])
def test_each_key_a_case_sets_changes_the_update(case):
    # Set back to its default, each key a case sets changes the update by more than ten times the
    # parity tolerance: the parity of the case holds that key's effect to the reference.
    optim, model, train = case
    steps = KEY_STEPS.get(optim["name"], 3)
    before, ours = trained(optim, model, train, steps)
    weak = {}
    for k in sorted(non_default(optim)):
        _, other = trained({**optim, k: DEFAULTS["optim." + k]}, model, train, steps)
        if change(ours, other, before) < 1e-4:
            weak[k] = change(ours, other, before)
    assert not weak, f"keys that barely change the update at the case's value: {weak}"


@pytest.mark.parametrize("name", sorted(READS))
def test_a_key_an_optimizer_does_not_read_leaves_it_alone(name):
    # What READS says an optimizer does not read, set away from its default (to a value a case
    # gives it), leaves its updates bitwise as they were: READS is the optimizer's true list.
    values = {k: v for o, _, _ in all_cases() for k, v in o.items() if k in non_default(o)}
    base = {"name": name}
    before, ours = trained(base)
    others = set().union(*READS.values()) - READS[name] - TRAINER_KEYS
    assert others
    for k in sorted(others):
        _, other = trained({**base, k: values[k]})
        for n in ours:
            np.testing.assert_array_equal(ours[n], other[n], err_msg=f"{name}: optim.{k}")
