"""Parity of normlab's Admin (model.init = admin: the shortcut scale in src/model/sublayer.cpp, the
profiling pass Transformer::admin_profile, the closed form in src/model/plan.cpp) with admin-torch
0.1.0 (PyPI; admin_torch.calculate_init and admin_torch.OmegaResidual) and with the PyTorch oracle's
profiling pass (tests/reference/ref_model.py, RefModel.admin_profile, written from Liu et al. 2020
and their Transformer-Clinic code: omega_1 = 1, omega_{k+1} = sqrt(Var[omega_k x_k] + Var[F_k]),
variances over every element). admin-torch has no profiling pass (its omega is the closed form),
so the profiled omegas are held to the oracle, and admin-torch's residual module computes the sum:

1. admin_omega = logn: every res_omega of a fresh normlab model (parity_driver --mode init) equals
   admin_torch.calculate_init(n) for n the number of post-norm sublayers (post: 2L; mix: its post
   blocks' 2 ceil(mix_ratio L)).
2. admin_omega = profile, post and mix: normlab's profiling pass on a batch (parity_driver
   --admin-profile 1) against the oracle's on the same weights and batch; then the logits, loss
   and every gradient (res_omega included) of normlab's model against the oracle in float64 whose
   Admin sums are admin-torch's OmegaResidual(as_parameter=True) with the profiled omega.
3. The profiling pass at initialisation (init_params): omega_1 = 1, then, under LayerNorm, every
   post-norm sublayer's omega larger than the one before it (omega_{k+1}^2 = omega_k^2 Var[x_k]
   + Var[F_k] with Var[x_k] = 1 after a unit-gain LayerNorm). omega_2 = sqrt(Var[x_0] + Var[F_1])
   is far below 1 here: normlab's embeddings start at std init_std = 0.02 (fairseq's, which the
   paper profiled, at variance 1), so the embedding counts as a branch of variance 4e-4.

Largest errors measured (x86-64, 2 cores, torch CPU; normlab float32 against float64), relative to
the largest entry of the reference tensor (tolerance 1e-4): profiled omegas 8.5e-8; logits 4.4e-7;
gradients (res_omega included) 2.2e-6; the logn omegas equal calculate_init to 1e-6 relative. The
whole file runs in about 9 s.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q -s test_admin_parity.py
"""
from __future__ import annotations

import math
import pathlib
import sys

import pytest
import torch
from torch.func import functional_call

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import harness  # noqa: E402
from ref_config import make_config  # noqa: E402
from ref_model import RefModel, random_batch  # noqa: E402

import admin_torch  # noqa: E402

torch.set_num_threads(1)

B = 2


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_admin_parity")
    yield s
    s.emit()


def admin_config(placement, omega, **extra):
    model = {"vocab_size": 32, "n_layer": 3, "d_model": 16, "n_head": 2, "d_ff": 24,
             "seq_len": 8, "placement": placement, "init": "admin", "admin_omega": omega,
             "mlp": "gelu", "pos": "learned", "tie_embeddings": False}
    if placement == "mix":
        model["mix_ratio"] = 0.5  # ceil(1.5) = 2 post blocks of 3
    model.update(extra)
    return make_config(model, train={"batch_size": B, "steps": 1})


def omega_names(model):
    return [n for n in model.param_names() if n.endswith(".res_omega")]


def dummy():
    return {"unused": torch.zeros(1)}


# ----------------------------------------------------------------------------------------------
# 1. The closed form


@pytest.mark.parametrize("placement,n", [("post", 6), ("mix", 4)])
def test_logn_omega_is_admin_torch_calculate_init(placement, n, tmp_path):
    cfg = admin_config(placement, "logn")
    got = harness.run_driver(tmp_path, cfg, dummy(), dummy(), mode="init", extra=("--seed", 7))
    names = omega_names(RefModel(cfg))
    assert len(names) == n
    want = admin_torch.calculate_init(n)  # its default output_change_scale, "O(logn)"
    for name in names:
        w = got["param." + name]
        assert w.shape == (16,)
        err = float((w.double() - want).abs().max())
        assert err <= 1e-6 * want, (name, err, want)


# ----------------------------------------------------------------------------------------------
# 2. The profiling pass, and the model with admin-torch's residual module


def admin_torch_sum(C):
    """Admin's sum through admin-torch's own module: OmegaResidual with a learnable (C) omega,
    bound to the given tensor by functional_call (so that the gradient reaches it)."""
    mod = admin_torch.as_module(6, as_parameter=True, embed_dim=C).double()
    return lambda x, g, omega: functional_call(mod, {"omega": omega}, (x, g))


@pytest.mark.parametrize("placement", ["post", "mix"])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_profiled_model_matches_oracle_with_admin_torch(placement, norm, tmp_path, summary):
    cfg = admin_config(placement, "profile", norm=norm)
    oracle = RefModel(cfg)
    params = oracle.random_params(seed=11)
    for name in omega_names(oracle):  # what the profiling pass overwrites
        params[name] = torch.full_like(params[name], 3.0)
    idx, targets = random_batch(oracle, B, seed=12)
    got = harness.run_driver(tmp_path, cfg, params, {"idx": idx, "targets": targets},
                             extra=("--admin-profile", 1))

    # The oracle's profiling pass (float64) on the same float32 weights and batch.
    ref_params = {k: v.double().clone() for k, v in params.items()}
    oracle.admin_profile(ref_params, idx)
    names = omega_names(oracle)
    assert len(names) == (6 if placement == "post" else 4)
    omegas = {"profiled." + n: ref_params[n] for n in names}
    errs = harness.check(f"profile-{placement}-{norm}", got, omegas, sorted(omegas), summary)
    print(f"\n[{placement}/{norm}] omega per post-norm sublayer: "
          + ", ".join(f"{float(ref_params[n][0]):.4f}" for n in names)
          + f"; max rel err {max(e[0] for e in errs.values()):.2e}")

    # The whole model with the profiled omegas, Admin's sums by admin-torch.
    with_admin_torch = RefModel(cfg, shortcut=admin_torch_sum(16))
    ref = with_admin_torch.loss_and_grads(ref_params, idx, targets)
    compared = ["logits", "loss", "ce"] + [f"grad.{n}" for n in with_admin_torch.param_names()]
    harness.check(f"admin-{placement}-{norm}", got, ref, compared, summary)


def test_oracle_admin_sum_is_admin_torch():
    """The oracle's own s = omega * x + g against admin-torch's module, in float64."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    g = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    omega = torch.rand(16, generator=gen, dtype=torch.float64) + 1.0
    torch.testing.assert_close(admin_torch_sum(16)(x, g, omega), omega * x + g, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# 3. The profiling pass at initialisation


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_init_profiles_omegas(norm, tmp_path):
    cfg = admin_config("post", "profile", norm=norm, n_layer=4)
    got = harness.run_driver(tmp_path, cfg, dummy(), dummy(), mode="init", extra=("--seed", 5))
    values = []
    for name in omega_names(RefModel(cfg)):
        w = got["param." + name]
        assert torch.all(w == w[0]), name  # one value per sublayer, in every channel
        values.append(float(w[0]))
    assert values[0] == 1.0
    assert all(0 < v < 1 and math.isfinite(v) for v in values[1:]), values
    if norm == "layernorm":  # Var[x_k] = 1 after LayerNorm (RMSNorm keeps the mean: below 1)
        assert all(b > a for a, b in zip(values[1:], values[2:])), values
    print(f"\n[init, {norm}] omegas: " + ", ".join(f"{v:.4f}" for v in values))
