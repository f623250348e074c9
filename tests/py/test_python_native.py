"""The Python side feels native (issue #42): the CLI's warnings as NormlabWarning, progress bars
(tqdm), missing paths as FileNotFoundError, config problems named by key, a namespace that holds
the API only, and run.metrics as numpy columns.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_python_native.py
"""
import os
import sys
import warnings

import numpy as np
import pytest

from normlab_cli import normlab as cli
from normlab_py import TINY_RUN, TINY_RUN_SETS, normlab


# -- warnings ---------------------------------------------------------------------------------

def test_the_cli_warnings_are_normlab_warnings(tmp_path):
    assert issubclass(normlab.NormlabWarning, UserWarning)
    long_warmup = {**TINY_RUN, "train.steps": 2, "optim.warmup_steps": 50}
    with pytest.warns(normlab.NormlabWarning, match="the warmup never ends") as got:
        run = normlab.train(long_warmup, out=tmp_path / "w")
    assert run.status == "done"
    assert [w.filename for w in got] == [__file__]  # raised at the caller's line
    # The text is the CLI's (one library function gives both).
    p = cli("train", "--out", tmp_path / "w_cli", *TINY_RUN_SETS, "--set=train.steps=2",
            "--set=optim.warmup_steps=50", check=0)
    assert f"normlab: warning: {got[0].message}\n" in p.stderr, p.stderr
    # A resumed run warns about the config it continues with, as `train --resume` does.
    with pytest.warns(normlab.NormlabWarning, match="the warmup never ends"):
        normlab.train(None, out=tmp_path / "w", resume=True)

    cores = len(os.sched_getaffinity(0))
    with pytest.warns(normlab.NormlabWarning,
                      match=f"train.threads = {cores + 1} is more than the {cores} cores"):
        normlab.train({**TINY_RUN, "train.steps": 2, "train.threads": cores + 1},
                      out=tmp_path / "t")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a sensible config
        normlab.train(TINY_RUN, out=tmp_path / "quiet")
        # As an error, the warning stops the run before it starts.
        with pytest.raises(normlab.NormlabWarning):
            normlab.train(long_warmup, out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


# -- progress bars ----------------------------------------------------------------------------

def test_train_progress_bar_advances_to_the_steps(tmp_path, capsys, monkeypatch):
    import tqdm  # noqa: F401  (requirements-test.txt)

    from normlab import _progress
    bars = []
    make = _progress.bar

    def keep(*args, **kwargs):
        b = make(*args, **kwargs)
        bars.append(b)
        return b

    monkeypatch.setattr(_progress, "bar", keep)
    positions = []
    run = normlab.train(TINY_RUN, out=tmp_path / "r", progress=True,
                        callback=lambda rec: positions.append((rec["step"], bars[0].n)))
    assert run.status == "done"
    assert positions == [(s, s) for s in range(1, 7)]  # the bar is at each logged step
    assert bars[0].total == 6 and bars[0].n == 6
    err = capsys.readouterr().err
    assert "6/6" in err and "100%" in err, err
    # Resumed and extended: the bar starts at the checkpoint's step.
    normlab.train(run.config.set("train.steps", 8), out=tmp_path / "r", resume=True,
                  progress=True)
    assert bars[1].total == 8 and bars[1].n == 8
    assert "8/8" in capsys.readouterr().err

    # By default: a bar in a terminal or notebook, none otherwise; never with progress=False.
    monkeypatch.setattr(_progress, "_interactive", lambda: True)
    normlab.train(TINY_RUN, out=tmp_path / "tty")
    assert bars[2] is not None and bars[2].n == 6 and "6/6" in capsys.readouterr().err
    normlab.train(TINY_RUN, out=tmp_path / "off", progress=False)
    monkeypatch.setattr(_progress, "_interactive", lambda: False)
    normlab.train(TINY_RUN, out=tmp_path / "file")
    assert bars[3:] == [None, None]
    assert "6/6" not in capsys.readouterr().err


def test_sweep_progress_bar_counts_the_runs(tmp_path, capsys):
    cfg = normlab.Config(TINY_RUN).update({"train.steps": 2, "train.eval_interval": 2})
    normlab.sweep(cfg, {"optim.lr": [1e-3, 1e-2]}, out=tmp_path / "s", progress=True)
    assert "2/2" in capsys.readouterr().err


def test_eval_progress_bar_counts_the_scored_targets(tmp_path, capsys, monkeypatch):
    from normlab import _progress
    bars = []
    make = _progress.bar

    def keep(*args, **kwargs):
        b = make(*args, **kwargs)
        bars.append(b)
        return b

    monkeypatch.setattr(_progress, "bar", keep)
    run = normlab.train(TINY_RUN, out=tmp_path / "r", progress=False)
    exact = run.eval(progress=True)
    assert exact["exact"]
    assert bars[-1].total == exact["tokens"] and bars[-1].n == exact["tokens"]
    sampled = run.eval(batches=3, progress=True)
    assert not sampled["exact"]
    assert bars[-1].total == sampled["tokens"] and bars[-1].n == sampled["tokens"]
    assert "eval" in capsys.readouterr().err
    # The same numbers with and without the bar; none with progress=False.
    assert run.eval(progress=False) == exact and bars[-1] is None


def test_progress_without_tqdm(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # `from tqdm.auto import` fails
    with pytest.raises(ImportError, match="tqdm"):
        normlab.train(TINY_RUN, out=tmp_path / "forced", progress=True)
    from normlab import _progress
    monkeypatch.setattr(_progress, "_interactive", lambda: True)  # even in a terminal
    assert normlab.train(TINY_RUN, out=tmp_path / "auto").status == "done"  # no bar, no error


# -- errors -----------------------------------------------------------------------------------

def test_missing_paths_raise_file_not_found(tmp_path):
    run = normlab.train({**TINY_RUN, "train.steps": 2}, out=tmp_path / "r")
    missing = tmp_path / "missing"
    m = normlab.Model({"model": {"vocab_size": 32, "n_layer": 1, "d_model": 16, "n_head": 2,
                                 "d_ff": 32, "seq_len": 8}})
    calls = {
        "config file": lambda: normlab.Config(missing / "c.toml"),
        "run directory": lambda: normlab.Run(missing),
        "checkpoint": lambda: normlab.Model.load(missing),
        "weights": lambda: m.load_weights(missing / "w.safetensors"),
        "resume": lambda: normlab.train(None, out=missing, resume=True),
        "data path": lambda: normlab.train({**TINY_RUN, "data.path": str(missing / "c.txt")},
                                           out=tmp_path / "d"),
        "tokenizer": lambda: normlab.train({**TINY_RUN, "data.tokenizer": str(missing / "t.json")},
                                           out=tmp_path / "t"),
        "init_from": lambda: normlab.train({**TINY_RUN, "train.init_from": str(missing)},
                                           out=tmp_path / "i"),
        "eval data": lambda: run.eval(data=missing / "v.txt", batches=1),
        "doctor": lambda: normlab.doctor(missing),
        "report": lambda: normlab.report([missing], out=tmp_path / "r.html"),
    }
    for what, call in calls.items():
        with pytest.raises(FileNotFoundError) as e:
            call()
        assert isinstance(e.value, normlab.NotFoundError), what
        assert isinstance(e.value, normlab.FormatError), what  # what it was before
        assert e.value.errno == 2 and str(missing) in e.value.filename, what
        assert str(missing) in str(e.value) and "Errno" not in str(e.value), what
    with pytest.raises(FileNotFoundError, match="no checkpoint at step 99") as e:
        run.model(step=99)
    assert e.value.filename == str(run.path / "checkpoints" / "step_00000099")
    # A missing config file stays a ConfigError too, as before.
    with pytest.raises(normlab.ConfigError, match="cannot read config file"):
        normlab.Config(missing / "c.toml")
    assert not (tmp_path / "d").exists() and not (tmp_path / "i").exists()


def test_config_problems_name_the_key_not_an_override():
    unknown_n_layr = ("unknown key 'model.n_layr'", "model.n_layer")  # (start, suggestion)
    cases = [
        (lambda: normlab.Config({"model.n_layr": 3}), [unknown_n_layr]),
        (lambda: normlab.Config({"model": {"n_layr": 3}}), [unknown_n_layr]),
        (lambda: normlab.Config().set("model.n_layr", 3), [unknown_n_layr]),
        (lambda: normlab.Config().set("model.n_layer", "two"),
         [('model.n_layer: expected an integer, got "two"', "")]),
        (lambda: normlab.Config({"modl": {"n_layer": 2}}), [("unknown section 'modl'", "model")]),
        # A validation problem of a value set from Python.
        (lambda: normlab.Config().update({"model.d_model": 130, "model.n_head": 4}),
         [("model.d_model = 130 is not divisible by model.n_head = 4", "")]),
        # Nested and flat keys: every problem at once.
        (lambda: normlab.Config({"model": {"n_layr": 3}, "optim.lrr": 1e-3}),
         [unknown_n_layr, ("unknown key 'optim.lrr'", "optim.lr")]),
    ]
    for call, want in cases:
        with pytest.raises(normlab.ConfigError) as e:
            call()
        got = e.value.problems
        assert len(got) == len(want), got
        for problem, (start, suggestion) in zip(got, want):
            assert problem.startswith(start) and suggestion in problem, got
        assert str(e.value) == "invalid configuration:" + "".join("\n  " + p for p in got)
        for cli_word in ["override", "--set", "json:", "config:"]:
            assert cli_word not in str(e.value), got
    # numpy scalars are values like Python's.
    c = normlab.Config({"model": {"n_layer": np.int64(3)}, "optim.lr": np.float32(0.5)})
    assert c["model.n_layer"] == 3 and c["optim.lr"] == 0.5


# -- the namespace ----------------------------------------------------------------------------

def test_dir_shows_the_api_only():
    extra = {n for n in set(dir(normlab)) - set(normlab.__all__) if not n.startswith("_")}
    assert extra == set()
    for name in ["np", "os", "json", "sys", "subprocess", "struct", "time", "warnings", "Path",
                 "Any", "Union", "Mapping", "annotations"]:
        assert not hasattr(normlab, name), name
    assert all(hasattr(normlab, n) for n in normlab.__all__)
    for name in ["NotFoundError", "NormlabWarning", "Metrics", "Config", "train"]:
        assert name in normlab.__all__


# -- metrics ----------------------------------------------------------------------------------

def test_metrics_columns_are_numpy_arrays(tmp_path, monkeypatch):
    run = normlab.train({**TINY_RUN, "diag.interval": 2}, out=tmp_path / "r")
    m = run.metrics
    recs = run.records
    assert isinstance(recs, list) and recs == list(m) and m[-1] == recs[-1]  # still the records
    assert isinstance(m[1:3], normlab.Metrics) and len(m[1:3]) == 2
    step = m["step"]
    assert step.dtype == np.int64 and step.tolist() == [1, 2, 3, 4, 5, 6]
    loss = m["loss"]
    assert loss.dtype == np.float64 and loss.shape == (6,)
    np.testing.assert_array_equal(loss, [r["loss"] for r in recs])
    assert m["skipped"].dtype == bool and m["tokens"].dtype == np.int64
    # A field on some steps only: NaN on the others, aligned with step; series() drops them.
    val = m["val_loss"]
    assert np.isnan(val[[0, 1, 3, 4]]).all() and np.isfinite(val[[2, 5]]).all()
    steps, values = m.series("val_loss")
    assert steps.tolist() == [3, 6] and values.tolist() == [recs[2]["val_loss"],
                                                            recs[5]["val_loss"]]
    # Per-layer fields: (records, L) arrays with NaN rows where diagnostics did not run.
    have = [("resid_rms" in r) for r in recs]
    rms = m["resid_rms"]
    assert rms.shape == (6, 3) and np.isnan(rms[~np.array(have)]).all()
    np.testing.assert_array_equal(rms[have.index(True)], recs[have.index(True)]["resid_rms"])
    # Per-group fields: a dict of columns.
    groups = m["grad_norm_group"]
    assert set(groups) >= {"attention", "mlp"} and groups["mlp"].shape == (6,)
    assert "loss" in m and "nope" not in m and "step" in m.keys()
    assert set(dict(m)) == set(m.keys())
    with pytest.raises(KeyError, match="nope"):
        m["nope"]
    # Without pandas, to_pandas names it.
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pandas"):
        m.to_pandas()


def test_metrics_nulls_and_gaps_are_nan():
    m = normlab.Metrics([{"step": 1, "loss": None, "tokens": 10},
                         {"step": 2, "loss": 2.0},
                         {"step": 3, "loss": 1.5, "tokens": 30, "flag": True}])
    np.testing.assert_array_equal(m["loss"], [np.nan, 2.0, 1.5])  # null (non-finite): NaN
    tokens = m["tokens"]  # an integer field with a gap: float64, NaN in the gap
    assert tokens.dtype == np.float64
    np.testing.assert_array_equal(tokens, [10, np.nan, 30])
    np.testing.assert_array_equal(m["flag"], [np.nan, np.nan, 1.0])
    assert m.series("loss")[0].tolist() == [2, 3]
    with pytest.raises(KeyError, match="no steps logged"):
        normlab.Metrics([])["loss"]
