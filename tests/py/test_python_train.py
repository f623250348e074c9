"""normlab.train and Run (callback stop, Ctrl-C, resume, metrics, models, eval, generate) and the
lab from Python (gradflow, sweep, report) with the same numbers as the CLI's JSON files.

    cd tests/py && NORMLAB_BUILD_DIR=$PWD/../../build ../../.venv/bin/python -m pytest -q test_python_train.py
"""
import json
import math
import signal
import threading

import numpy as np
import pytest

from normlab_cli import normlab as cli
from normlab_py import TINY_RUN, TINY_RUN_SETS, normlab


def test_callback_stops_then_resume_finishes(tmp_path):
    seen = []

    def stop_at_3(rec):
        seen.append(rec)
        return rec["step"] < 3

    run = normlab.train(TINY_RUN, out=tmp_path / "r", callback=stop_at_3)
    assert [r["step"] for r in seen] == [1, 2, 3]
    assert {"loss", "ce", "lr", "grad_norm", "tokens_per_s"} <= set(seen[0])
    assert run.status == "interrupted" and run.result["steps"] == 3
    assert [int(p.name[5:]) for p in run.checkpoints] == [3]
    assert run.metrics == seen  # the callback's records are the metrics.jsonl records
    run = normlab.train(None, out=tmp_path / "r", resume=True)
    assert run.status == "done" and run.result["steps"] == 6
    assert [r["step"] for r in run.metrics] == [1, 2, 3, 4, 5, 6]
    assert run.metrics[-1].get("val_loss") is not None
    assert run.config == normlab.Config(TINY_RUN)
    assert run.result["already_complete"] is False
    again = normlab.train(None, out=tmp_path / "r", resume=True)
    assert again.result["already_complete"] is True
    # Resuming with a config may change only the resumable keys.
    with pytest.raises(normlab.ConfigError, match="batch_size"):
        normlab.train(run.config.set("train.batch_size", 4), out=tmp_path / "r", resume=True)


def test_run_models_eval_generate(tmp_path):
    run = normlab.train(TINY_RUN, out=tmp_path / "r")
    assert run.status == "done"
    m = run.model()
    assert m.config["model.d_model"] == 16
    ids = np.arange(8)[None]
    assert m.forward(ids).shape == (1, 8, 256)
    ev = run.eval(batches=1)
    assert ev["tokens"] > 0 and math.isclose(ev["perplexity"], math.exp(ev["loss"]))
    p = cli("eval", "--checkpoint", run.path, "--batches", "1", check=0)
    assert f"tokens {ev['tokens']} " in p.stdout and f"loss {ev['loss']:.4f} " in p.stdout
    text = run.generate("the ", max_new_tokens=8, temperature=0)
    assert isinstance(text, str) and len(text.encode()) <= 8 * 4
    with pytest.raises(normlab.FormatError, match="no checkpoint at step 2"):
        run.model(step=2)
    df = pytest.importorskip("pandas")
    assert list(run.metrics.to_pandas()["step"]) == [r["step"] for r in run.metrics]
    del df


def test_errors_from_train(tmp_path):
    with pytest.raises(normlab.ConfigError, match="train.batch_size"):
        normlab.train({**TINY_RUN, "train.batch_size": 0}, out=tmp_path / "bad")
    assert not (tmp_path / "bad" / "checkpoints").exists()
    with pytest.raises(normlab.FormatError):
        normlab.train(None, out=tmp_path / "missing", resume=True)


def test_callback_exception_stops_with_checkpoint(tmp_path):
    def boom(rec):
        if rec["step"] == 2:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        normlab.train(TINY_RUN, out=tmp_path / "r", callback=boom)
    run = normlab.Run(tmp_path / "r")
    assert run.status == "interrupted" and [int(p.name[5:]) for p in run.checkpoints] == [2]


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(tmp_path):
    # SIGINT raised inside the callback (the handler runs in Python, the trainer stops).
    def interrupt(rec):
        if rec["step"] == 2:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        normlab.train(TINY_RUN, out=tmp_path / "a", callback=interrupt)
    run = normlab.Run(tmp_path / "a")
    assert run.status == "interrupted" and [int(p.name[5:]) for p in run.checkpoints] == [2]

    # SIGINT from another thread while the trainer computes with the GIL released: noticed
    # between steps (PyErr_CheckSignals), the step finishes, the checkpoint is written.
    started = threading.Event()

    def wait(rec):
        started.set()
        return True

    timer = threading.Thread(target=lambda: started.wait(30) and signal.raise_signal(signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        normlab.train({**TINY_RUN, "train.steps": 100000}, out=tmp_path / "b", callback=wait)
    timer.join()
    run = normlab.Run(tmp_path / "b")
    assert run.status == "interrupted" and len(run.checkpoints) == 1
    assert int(run.checkpoints[0].name[5:]) == run.metrics[-1]["step"] >= 1
    done = normlab.train(run.config.set("train.steps", run.metrics[-1]["step"] + 1),
                         out=tmp_path / "b", resume=True)
    assert done.status == "done"


def test_gradflow_matches_the_cli(tmp_path):
    sets = ["model.d_model=16", "model.n_head=2", "model.d_ff=32", "model.seq_len=16",
            "train.batch_size=2", "train.threads=1"]
    cli("gradflow", "--placements", "post,peri", "--layers", "2,3", "--init", "gpt2",
        "--batches", "1", "--out", tmp_path / "cli", *[f"--set={s}" for s in sets], check=0)
    want = json.loads((tmp_path / "cli" / "gradflow.json").read_text())
    cfg = normlab.Config().update(dict(s.split("=") for s in sets))
    got = normlab.gradflow(cfg, placements=["post", "peri"], layers=[2, 3], inits=["gpt2"],
                           batches=1, out=tmp_path / "py")
    assert got == want
    assert json.loads((tmp_path / "py" / "gradflow.json").read_text()) == want
    assert len(got["results"]) == 4
    with pytest.raises(normlab.ConfigError, match="sideways"):
        normlab.gradflow(cfg, placements=["sideways"], layers=[2])


def test_doctor_matches_the_cli(tmp_path):
    run = normlab.train(TINY_RUN, out=tmp_path / "r")
    want = json.loads(cli("doctor", run.path, "--json", check=0).stdout)
    got = normlab.doctor(run)
    assert got == want and normlab.doctor(str(run.path)) == want
    assert "verdict" in got
    with pytest.raises(normlab.Error, match="metrics.jsonl"):
        normlab.doctor(tmp_path)  # a directory without a run


def test_sweep_and_report_match_the_cli(tmp_path):
    grid = {"optim.lr": [1e-3, 1e-2], "model.placement": ["pre", "post"]}
    spec = ["--grid", "optim.lr=0.001,0.01", "--grid", "model.placement=pre,post"]
    sets = TINY_RUN_SETS + ["--set=train.steps=3", "--set=train.eval_interval=3"]  # later wins
    cli("sweep", *spec, "--out", tmp_path / "cli", *sets, check=0)
    want = json.loads((tmp_path / "cli" / "sweep.json").read_text())
    cfg = normlab.Config(TINY_RUN).update({"train.steps": 3, "train.eval_interval": 3})
    got = normlab.sweep(cfg, grid, out=tmp_path / "py")
    assert dict(got) == want
    assert len(got["sensitivity"]) == 2 and "sensitivity" in got.table
    # Two worker processes give the same numbers (each point is its own deterministic run).
    par = normlab.sweep(cfg, grid, out=tmp_path / "par", jobs=2)
    assert [r["final_loss"] for r in par["runs"]] == [r["final_loss"] for r in want["runs"]]
    # A finished sweep is not redone.
    again = normlab.sweep(cfg, grid, out=tmp_path / "py")
    assert dict(again) == want
    rep = normlab.report([tmp_path / "py"], out=tmp_path / "report.html", title="t")
    assert (tmp_path / "report.html").is_file() and "loss" in rep["figures"]
    with pytest.raises(normlab.ConfigError, match="optim.lrr"):
        normlab.sweep(cfg, {"optim.lrr": [1e-3]}, out=tmp_path / "bad")
