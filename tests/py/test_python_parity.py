"""Parity of normlab.Model.loss_and_grads (and forward) against the PyTorch oracle through numpy:
the oracle's random float32 weights are written into the model's parameter views, and logits,
losses and every gradient are compared at the C++ parity tests' tolerance (harness.REL_TOL,
relative to the tensor's group). One case per placement from tests/reference/test_parity.py's
design, plus two of its attention-layout cases (GQA, sliding windows, scaled RoPE).

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_python_parity.py
"""
import pathlib
import sys

import pytest
import torch

from normlab_py import normlab

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "reference"))
import harness  # noqa: E402
import ref_model  # noqa: E402
from test_parity import ATTN_CASES, CASES  # noqa: E402

torch.set_num_threads(1)

PY_CASES = [CASES[i] for i in range(0, len(CASES), 10)] + [ATTN_CASES[0], ATTN_CASES[-1]]


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_python_parity")
    yield s
    s.emit()


@pytest.mark.parametrize("case_id,cfg", PY_CASES, ids=[c[0] for c in PY_CASES])
def test_loss_and_grads_match_the_oracle(case_id, cfg, summary):
    model = ref_model.RefModel(cfg)
    params = model.random_params(seed=cfg["train"]["seed"])
    B = cfg["train"]["batch_size"]
    idx, targets = ref_model.random_batch(model, B, seed=cfg["train"]["seed"] + 1)

    nm = normlab.Model(normlab.Config(cfg), max_batch=B)
    views = nm.parameters()
    assert set(views) == set(model.param_names())
    for name, view in views.items():  # zero-copy: the oracle's weights go straight in
        view[...] = params[name].numpy()
    logits = nm.forward(idx.numpy())
    losses, grads = nm.loss_and_grads(idx.numpy(), targets.numpy())

    got = {"logits": torch.from_numpy(logits),
           **{k: torch.tensor([losses[k]], dtype=torch.float64) for k in ("loss", "ce", "z_loss")},
           **{f"grad.{n}": torch.from_numpy(g.copy()) for n, g in grads.items()}}
    ref = model.loss_and_grads(params, idx, targets)
    names = ["logits", "loss", "ce", "z_loss"] + [f"grad.{n}" for n in model.param_names()]
    harness.check(case_id, got, ref, names, summary)
