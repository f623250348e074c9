"""The Python package's binding surface (python/normlab): Config, Model (zero-copy parameter views,
tokens of every integer dtype, errors with the library's messages), save/load, threads.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_python_api.py
"""
import gc

import numpy as np
import pytest

from normlab_cli import normlab as cli
from normlab_py import TINY_MODEL, normlab


def tiny(**model):
    return normlab.Config({"model": {**TINY_MODEL, **model}, "train": {"batch_size": 2}})


# -- Config -----------------------------------------------------------------------------------

def test_config_sources_and_access(tmp_path):
    d = normlab.Config()
    assert d["model.placement"] == "pre" and d["optim.lr"] == 1e-3
    c = normlab.Config({"model": {"placement": "peri", "n_layer": 3}, "optim.lr": 0.01})
    assert (c["model.placement"], c["model.n_layer"], c["optim.lr"]) == ("peri", 3, 0.01)
    assert c.set("model.placement", "post") is c and c["model.placement"] == "post"
    c["model.qk_norm"] = "rmsnorm"
    c["model.bias"] = True
    assert c.to_dict()["model"]["qk_norm"] == "rmsnorm" and c["model.bias"] is True
    assert normlab.Config.from_toml(c.to_toml()) == c
    c.save(tmp_path / "c.toml")
    assert normlab.Config(tmp_path / "c.toml") == c and normlab.Config(c) == c
    assert "model.placement" in normlab.Config.keys()
    with pytest.raises(KeyError):
        c["model.nope"]


def test_config_errors_are_the_cli_messages():
    sets = {"model.placment": "peri", "optim.lr": -1, "model.n_head": 3}
    with pytest.raises(normlab.ConfigError) as e:
        normlab.Config().update(sets)
    assert isinstance(e.value, ValueError)
    p = cli("train", "--dump-config", *[f"--set={k}={v}" for k, v in sets.items()], check=2)
    # The CLI reads the same overrides: the same text, every problem at once, but each problem is
    # named by its key, not by the command-line option it would be there.
    cli_text = p.stderr
    for k, v in sets.items():
        for option in (f"--set '{k}={v}': ", f"override '{k}={v}': "):
            cli_text = cli_text.replace(option, "")
    assert cli_text == f"normlab: {e.value}\n"
    assert str(e.value) == "invalid configuration:" + "".join("\n  " + x for x in e.value.problems)
    assert len(e.value.problems) == 3
    assert any("did you mean" in x and "model.placement" in x for x in e.value.problems)
    with pytest.raises(normlab.ConfigError) as e:
        normlab.Config({"model": {"placement": "sideways"}})
    assert "sideways" in str(e.value)
    with pytest.raises(normlab.ConfigError):
        normlab.Config("/nonexistent/config.toml")


# -- Model ------------------------------------------------------------------------------------

def test_forward_takes_every_integer_dtype_and_both_shapes():
    m = normlab.Model(tiny(), seed=1)
    ids = np.array([[1, 5, 7, 31], [0, 2, 3, 4]])
    ref = m.forward(ids)
    assert ref.shape == (2, 4, 32) and ref.dtype == np.float32
    for dt in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64):
        np.testing.assert_array_equal(m.forward(ids.astype(dt)), ref)
    np.testing.assert_array_equal(m.forward(ids[1]), ref[1])  # (T,) -> (T, V)
    np.testing.assert_array_equal(m.forward(np.asfortranarray(ids)), ref)  # any layout
    assert np.isfinite(ref).all()


def test_bad_tokens_raise_the_library_messages():
    m = normlab.Model(tiny(), seed=1)
    with pytest.raises(normlab.InputError, match=r"^token id 32 at position 2 is outside the "
                       r"vocabulary \[0, 32\)$") as e:
        m.forward(np.array([1, 2, 32]))
    assert isinstance(e.value, ValueError)
    with pytest.raises(normlab.InputError, match=r"^target id -1 at position 1 is outside"):
        m.loss(np.array([1, 2]), np.array([3, -1]))
    with pytest.raises(normlab.InputError, match=r"^token id 4294967296 at position 0 is outside"):
        m.forward(np.array([2 ** 32], dtype=np.int64))
    with pytest.raises(normlab.InputError, match=r"^\[model.logits\] batch 3 outside 1..2 "
                       r"\(max_batch\)$"):
        m.forward(np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(normlab.InputError, match=r"^\[model.loss\] sequence length 9 outside "
                       r"1..8 \(seq_len\)$"):
        m.loss(np.zeros(9, dtype=int), np.zeros(9, dtype=int))
    with pytest.raises(normlab.InputError, match=r"shape \(T,\) or \(B, T\), got shape "
                       r"\(1, 2, 3\)"):
        m.forward(np.zeros((1, 2, 3), dtype=int))
    with pytest.raises(normlab.InputError, match="integer array, got dtype float64"):
        m.forward(np.zeros(3))
    with pytest.raises(normlab.InputError, match=r"differ in shape"):
        m.loss(np.zeros((1, 4), dtype=int), np.zeros((1, 3), dtype=int))


def test_parameters_are_views_on_the_model():
    m = normlab.Model(tiny(), seed=3)
    p = m.parameters()
    table = m.param_table()
    assert [r["name"] for r in table] == list(p)
    assert sum(v.size for v in p.values()) == m.num_params
    for r in table:
        assert p[r["name"]].shape == r["shape"] and p[r["name"]].dtype == np.float32
        assert r["group"] in {"embedding", "attention", "mlp", "norm", "head"}
    assert {r["name"]: r["decay"] for r in table}["tok_emb.weight"] is True
    assert all(not r["decay"] for r in table if r["group"] == "norm")
    ids = np.array([[1, 2, 3, 4]])
    before = m.forward(ids)
    emb = p["tok_emb.weight"]
    assert np.shares_memory(emb, m.parameters()["tok_emb.weight"])
    emb[2] += 1.0  # writing into the view changes the model
    after = m.forward(ids)
    assert not np.array_equal(before, after)
    emb[2] -= 1.0
    np.testing.assert_allclose(m.forward(ids), before, rtol=1e-6, atol=1e-6)
    # A view keeps the model alive.
    w = m.parameters()["blocks.0.attn.wqkv.weight"]
    copy = w.copy()
    del m, p, emb
    gc.collect()
    np.testing.assert_array_equal(w, copy)


def test_loss_and_grads():
    m = normlab.Model(tiny(), seed=4)
    rng = np.random.default_rng(0)
    ids, tgt = rng.integers(0, 32, (2, 8)), rng.integers(0, 32, (2, 8))
    losses = m.loss(ids, tgt)
    assert set(losses) == {"loss", "ce", "z_loss", "log_z"} and losses["z_loss"] == 0
    l2, grads = m.loss_and_grads(ids, tgt, z_loss=1e-2)
    assert l2["z_loss"] > 0 and l2["loss"] == pytest.approx(l2["ce"] + l2["z_loss"])
    assert l2["ce"] == pytest.approx(losses["ce"], rel=1e-6)
    assert list(grads) == list(m.parameters())
    assert all(g.shape == p.shape for g, p in zip(grads.values(), m.parameters().values()))
    assert any(np.abs(g).max() > 0 for g in grads.values())
    assert np.shares_memory(grads["tok_emb.weight"], m.gradients()["tok_emb.weight"])
    # A step against the gradient lowers the loss (float64 finite-difference parity is the job of
    # test_python_parity.py).
    params = m.parameters()
    for n, g in grads.items():
        params[n] -= 1e-2 * g
    assert m.loss(ids, tgt, z_loss=1e-2)["loss"] < l2["loss"]


def test_save_load_and_generate(tmp_path):
    m = normlab.Model(tiny(placement="peri"), seed=5)
    m.save(tmp_path / "w.safetensors")
    back = normlab.Model.load(tmp_path / "w.safetensors")
    assert back.config["model.placement"] == "peri"
    for (n, a), (n2, b) in zip(m.parameters().items(), back.parameters().items()):
        assert n == n2 and np.array_equal(a, b)
    other = normlab.Model(tiny(placement="peri"), seed=6)
    other.load_weights(tmp_path / "w.safetensors")
    np.testing.assert_array_equal(other.parameters()["tok_emb.weight"],
                                  m.parameters()["tok_emb.weight"])
    wrong = normlab.Model(tiny(placement="pre"), seed=6)
    with pytest.raises(normlab.FormatError):
        wrong.load_weights(tmp_path / "w.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x01")
    with pytest.raises(normlab.FormatError):
        normlab.Model.load(tmp_path / "junk.safetensors")
    new = m.generate(np.array([1, 2, 3]), max_new_tokens=5, temperature=0)
    assert new.shape == (5,) and ((0 <= new) & (new < 32)).all()
    np.testing.assert_array_equal(new, m.generate([1, 2, 3], max_new_tokens=5, temperature=0))


def test_threads_and_version():
    n = normlab.get_num_threads()
    assert normlab.set_num_threads(1) == 1 and normlab.get_num_threads() == 1
    normlab.set_num_threads(n)
    assert normlab.__version__.count(".") == 2
    p = cli("--version", check=0)
    assert normlab.__version__ in p.stdout
