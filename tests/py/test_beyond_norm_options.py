"""Every option of #37 (norm-free and normalized Transformers, residual scaling, gates and sinks)
trains from Python and from the CLI: a few steps of a tiny model with diagnostics on every step,
the same losses from `normlab.train` and `normlab train -c` on the same config (one engine
behind both), and
the option's own diagnostics in the records where it has any.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_beyond_norm_options.py
"""
import json
import math

import pytest

from normlab_cli import normlab as cli
from normlab_py import TINY_RUN, normlab

# (overrides, metrics fields the option adds to a diagnostics record)
OPTIONS = [
    ({"model.norm": "dyt"}, ["dyt_alpha", "dyt_saturated"]),
    ({"model.norm": "derf", "model.placement": "peri"}, ["dyt_alpha", "dyt_saturated"]),
    ({"model.qk_norm": "dyt"}, ["dyt_alpha"]),
    ({"model.residual_scale": "rezero"}, []),
    ({"model.residual_scale": "skipinit", "model.skipinit_init": 0.5,
      "model.placement": "post"}, []),
    ({"model.sigma_reparam": True}, ["sigma_w", "sigma_gamma"]),
    ({"model.placement": "ngpt", "model.mlp": "swiglu"}, []),
    ({"model.placement": "hybrid", "model.hybrid_first_pre": True}, []),
    ({"model.placement": "post", "model.init": "admin"}, []),
    ({"model.placement": "mix", "model.mix_ratio": 0.5, "model.init": "admin",
      "model.admin_omega": "logn"}, []),
    ({"model.residual_scale": "layerscale", "model.placement": "peri"}, []),
    ({"model.attn_gate": "head", "model.attn_sink": "learned"},
     ["attn_first_mass", "attn_sink_mass"]),
    ({"model.attn_gate": "elementwise", "model.attn_sink": "one", "model.placement": "post"},
     ["attn_first_mass", "attn_sink_mass"]),
]


def overrides_of(extra):
    return normlab.Config(TINY_RUN).update(
        {**extra, "diag.interval": 1, "train.steps": 4, "train.eval_interval": 4})


@pytest.mark.parametrize("extra,fields", OPTIONS, ids=[
    ",".join(f"{k.split('.')[-1]}={v}" for k, v in o.items()) for o, _ in OPTIONS])
def test_option_trains_from_python_and_the_cli_alike(tmp_path, extra, fields):
    cfg = overrides_of(extra)
    run = normlab.train(cfg, out=tmp_path / "py")
    assert run.status == "done", run.result
    steps = [r for r in run.metrics if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in steps)
    for f in fields:
        assert all(f in r for r in steps), f
    cfg.save(tmp_path / "config.toml")
    cli("train", "-c", tmp_path / "config.toml", "--out", tmp_path / "cli", check=0)
    lines = [json.loads(x) for x in (tmp_path / "cli" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in lines if "loss" in r] == [r["loss"] for r in steps]
